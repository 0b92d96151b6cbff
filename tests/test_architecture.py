"""The package's shape: imports run one way, no module imports itself back, modules and functions stay small.

Read from the source (``ast``), nothing is imported. The layers, lowest first; a module may import its
own layer and the layers below it:

    foundation (io, choices, provenance, metric_spec, metrics, lpips_offline, stats, interrupts) → optics → data → layers → models
    → checkpoint → train, inference, slides → experiments, analysis → report → workflow (config, resources, jobenv, plan)
    → cli (cli, commands, console)

``data`` sits above ``optics`` because the synthetic datasets are made with it (``data.demo`` blurs
with ``optics.sigma_blur``, ``data.synth`` adds ``optics.noise``'s camera noise); the physics imports no
dataset code. A new top-level module or package must be given a layer here.

``benchmarks/`` is a package too (run as ``python -m benchmarks.<folder>.<script>``): it follows the same
size rules, and no file of it edits ``sys.path`` to find another.

"Module level" means executed on import (everything outside function bodies; ``if TYPE_CHECKING``
blocks only count for the layer order). Function-local imports of the package are allowed only to keep
a heavy import (torch, TensorFlow, matplotlib) out of a light path, with the reason on the line.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

from conftest import ROOT

SRC = ROOT / "src"
PACKAGE = SRC / "dgno"
BENCHMARKS = ROOT / "benchmarks"

LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("foundation", ("dgno", "dgno.io", "dgno.choices", "dgno.provenance", "dgno.metric_spec", "dgno.metrics", "dgno.lpips_offline", "dgno.stats", "dgno.interrupts", "dgno.deprecation")),
    ("optics", ("dgno.optics",)),
    ("data", ("dgno.data",)),
    ("layers", ("dgno.layers",)),
    ("models", ("dgno.models",)),
    ("checkpoint", ("dgno.checkpoint",)),
    ("train / inference", ("dgno.train", "dgno.inference", "dgno.slides")),
    ("experiments / analysis", ("dgno.experiments", "dgno.analysis")),
    ("report", ("dgno.report",)),
    ("workflow", ("dgno.workflow",)),
    ("cli", ("dgno.cli", "dgno.commands", "dgno.console")),
]
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 60
MAX_LOCAL_IMPORTS = 10
# Network definitions are exempt from the size limits (a model is read as one file, block by block): the
# layers and every module the model registry names a network in; the logic beside them in models/
# (authors.py, registry.py, ...) is not.
REGISTRY = ROOT / "src" / "dgno" / "models" / "registry.py"
NETWORK = re.compile(r"(dgno(?:\.\w+)+):\w+")  # a registry entry's "module:Class"
MODEL_CODE = ("dgno/layers/",) + tuple(
    sorted(
        {
            NETWORK.fullmatch(node.value).group(1).replace(".", "/") + ".py"
            for node in ast.walk(ast.parse(REGISTRY.read_text()))
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and NETWORK.fullmatch(node.value)
        }
    )
)
# Known exceptions, each waiting for a change to its file; an entry must still be needed (a stale entry
# fails), so the lists empty as the changes land.
PENDING_CYCLES: set[frozenset[str]] = set()
PENDING_FUNCTIONS: set[str] = set()
PENDING_REASONS: set[str] = set()


@dataclass
class Module:
    name: str
    path: Path
    tree: ast.Module
    lines: int
    imports: set[str] = field(default_factory=set)  # executed on import
    typing_imports: set[str] = field(default_factory=set)  # under `if TYPE_CHECKING:`
    local_imports: list[tuple[int, str, str]] = field(default_factory=list)  # (line, target, source line)


def _module_name(path: Path) -> str:
    return ".".join(path.relative_to(SRC).with_suffix("").parts).removesuffix(".__init__")


def _targets(node: ast.Import | ast.ImportFrom, module: str, is_package: bool, names: set[str]) -> set[str]:
    """The dgno modules an import statement names: the module, or for ``from pkg import x`` the
    submodule x when it is one (else pkg)."""
    if isinstance(node, ast.Import):
        bases = [a.name for a in node.names]
    else:
        base = node.module or ""
        if node.level:
            parts = module.split(".") if is_package else module.split(".")[:-1]
            base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
        bases = [f"{base}.{a.name}" if f"{base}.{a.name}" in names else base for a in node.names]
    out = set()
    for target in bases:
        while target and target not in names:
            target = target.rpartition(".")[0]
        if target.startswith("dgno"):
            out.add(target)
    return out


def _loaded(importer: str, target: str) -> set[str]:
    """What importing `target` from `importer` runs: the target and the __init__ of every package above
    it, except the packages `importer` is itself inside (they are already being initialised)."""
    out, name = set(), target
    while name:
        if not importer.startswith(name + ".") and name != importer:
            out.add(name)
        name = name.rpartition(".")[0]
    return out


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _collect(mod: Module, names: set[str]) -> None:
    is_package = mod.path.name == "__init__.py"
    lines = mod.path.read_text().splitlines()

    def visit(node: ast.AST, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                visit(child, "function")
            elif isinstance(child, ast.If) and where == "module" and _is_type_checking(child):
                visit(child, "typing")
            elif isinstance(child, (ast.Import, ast.ImportFrom)):
                targets = _targets(child, mod.name, is_package, names) - {mod.name}
                if where == "module":
                    mod.imports |= {m for t in targets for m in _loaded(mod.name, t)}
                elif where == "typing":
                    mod.typing_imports |= targets
                else:
                    mod.local_imports += [(child.lineno, t, lines[child.lineno - 1].strip()) for t in sorted(targets)[:1]]
            else:
                visit(child, where)

    visit(mod.tree, "module")


def _modules() -> dict[str, Module]:
    paths = sorted(PACKAGE.rglob("*.py"))
    names = {_module_name(p) for p in paths}
    mods = {}
    for p in paths:
        text = p.read_text()
        mod = Module(_module_name(p), p, ast.parse(text), len(text.splitlines()))
        _collect(mod, names)
        mods[mod.name] = mod
    return mods


MODULES = _modules()


def _layer(name: str) -> int:
    best, rank = "", None
    for i, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            inside = name.startswith(prefix + ".") and prefix != "dgno"  # the root package is its __init__ alone
            if (name == prefix or inside) and len(prefix) > len(best):
                best, rank = prefix, i
    assert rank is not None, f"{name} has no layer: add it (or its package) to LAYERS in {Path(__file__).name}"
    return rank


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return out


def test_no_import_cycles_at_module_level():
    cycles = _cycles({name: set(m.imports) for name, m in MODULES.items()})
    unexpected = [c for c in cycles if frozenset(c) not in PENDING_CYCLES]
    assert not unexpected, "modules that import each other (directly or through others), at module level: " + "; ".join(" ↔ ".join(c) for c in unexpected)
    stale = [sorted(p) for p in PENDING_CYCLES if not any(frozenset(c) == p for c in cycles)]
    assert not stale, f"PENDING_CYCLES lists cycles that are gone: {stale}; remove them"


def test_the_cycle_finder_sees_rings_not_only_pairs():
    ring = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(ring) == [["a", "b", "c"]]


def test_imports_run_one_way():
    against = []
    for name, mod in MODULES.items():
        for target in sorted(mod.imports | mod.typing_imports | {t for _, t, _ in mod.local_imports}):
            if _layer(target) > _layer(name):
                against.append(f"{name} ({LAYERS[_layer(name)][0]}) imports {target} ({LAYERS[_layer(target)][0]})")
    assert not against, "imports against the layer order:\n" + "\n".join(against)


def test_few_function_local_imports_each_with_its_reason():
    local = [(m.path.relative_to(SRC), line, text) for m in MODULES.values() for line, _, text in m.local_imports]
    listing = "\n".join(f"{path}:{line}: {text}" for path, line, text in local)
    assert len(local) <= MAX_LOCAL_IMPORTS, f"{len(local)} function-local dgno imports (at most {MAX_LOCAL_IMPORTS}):\n{listing}"
    unexplained = set()
    for mod in MODULES.values():
        lines = mod.path.read_text().splitlines()
        for line, _, text in mod.local_imports:
            if not ("#" in text or lines[line - 2].strip().startswith("#")):
                unexplained.add((mod.path.relative_to(SRC).as_posix(), line, text))
    missing = sorted(u for u in unexplained if u[0] not in PENDING_REASONS)
    assert not missing, "say on the line (or the line above) why these imports are local: " + "; ".join(f"{p}:{n}: {t}" for p, n, t in missing)
    stale = sorted(PENDING_REASONS - {u[0] for u in unexplained})
    assert not stale, f"PENDING_REASONS lists files whose local imports all give a reason now: {stale}; remove them"


def _size_problems(path: Path, tree: ast.Module, lines: int, rel: str) -> tuple[list[str], list[str]]:
    """(the module if it is over the line limit, its functions over theirs), named by ``rel``."""
    modules = [f"{rel}: {lines} lines"] if lines > MAX_MODULE_LINES else []
    functions = [
        f"{rel}::{node.name}"
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]
    return modules, functions


def _sizes() -> tuple[list[str], list[str]]:
    modules, functions = [], []
    for mod in MODULES.values():
        rel = mod.path.relative_to(SRC).as_posix()
        if rel.startswith(MODEL_CODE):
            continue
        m, f = _size_problems(mod.path, mod.tree, mod.lines, rel)
        modules += m
        functions += f
    return modules, functions


def test_modules_and_functions_are_small_outside_model_code():
    modules, functions = _sizes()
    assert not modules, f"modules over {MAX_MODULE_LINES} lines: {modules}"
    long = [f for f in functions if f not in PENDING_FUNCTIONS]
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines: {long}"
    stale = sorted(PENDING_FUNCTIONS - set(functions))
    assert not stale, f"PENDING_FUNCTIONS lists functions that are now short enough (or gone): {stale}; remove them"


def _benchmark_files() -> list[Path]:
    return sorted(p for p in BENCHMARKS.rglob("*.py") if "results" not in p.relative_to(BENCHMARKS).parts)


def test_benchmarks_follow_the_size_rules_of_the_package():
    modules, functions = [], []
    for path in _benchmark_files():
        text = path.read_text()
        m, f = _size_problems(path, ast.parse(text), len(text.splitlines()), path.relative_to(ROOT).as_posix())
        modules += m
        functions += f
    assert not modules, f"benchmark modules over {MAX_MODULE_LINES} lines (split them by phase or topic): {modules}"
    assert not functions, f"benchmark functions over {MAX_FUNCTION_LINES} lines: {functions}"


def _edits_sys_path(tree: ast.Module) -> list[int]:
    """Lines that change ``sys.path`` (a call on it, or an assignment to it)."""
    def is_sys_path(node: ast.AST) -> bool:
        return isinstance(node, ast.Attribute) and node.attr == "path" and isinstance(node.value, ast.Name) and node.value.id == "sys"

    def edits(node: ast.AST) -> bool:
        if isinstance(node, ast.Call):
            return isinstance(node.func, ast.Attribute) and is_sys_path(node.func.value)
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AugAssign) else []
        return any(is_sys_path(t) for t in targets)

    lines = [node.lineno for node in ast.walk(tree) if edits(node)]
    return sorted(lines)


def test_benchmarks_are_a_package_that_imports_without_sys_path_edits():
    """Every folder of benchmarks/ is a package, an import of ``benchmarks.x`` names a file that exists, and no
    benchmark reaches another file (or the tests) through ``sys.path``."""
    folders = {p.parent for p in _benchmark_files()}
    assert not [f for f in folders if not (f / "__init__.py").exists()], "benchmark folders without __init__.py"
    edits, missing = [], []
    for path in _benchmark_files():
        tree = ast.parse(path.read_text())
        edits += [f"{path.relative_to(ROOT)}:{line}" for line in _edits_sys_path(tree)]
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("benchmarks"):
                target = ROOT.joinpath(*node.module.split("."))
                if not (target.with_suffix(".py").exists() or (target / "__init__.py").exists()):
                    missing.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.module}")
    assert not edits, f"sys.path edits in benchmarks (import through the benchmarks package instead): {edits}"
    assert not missing, f"imports of benchmark modules that do not exist: {missing}"


def test_the_sys_path_finder_sees_inserts_appends_and_assignments():
    tree = ast.parse("import sys\nsys.path.insert(0, 'x')\nsys.path.append('y')\nsys.path = []\nsys.path += ['z']\nprint(sys.path)\n")
    assert _edits_sys_path(tree) == [2, 3, 4, 5]
