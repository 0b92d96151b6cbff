"""What the repository's own files say: names and text without development history, nothing read from outside
the checkout, a README short enough to read in five minutes, and documentation links that resolve.

Scanned: every file git tracks or would track (``git ls-files --cached --others --exclude-standard``), except
``tests/fixtures/``, whose files were made by the authors' code and are described by their own README.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import ROOT

TEXT_SUFFIXES = {".py", ".md", ".yaml", ".yml", ".smk", ".toml", ".txt", ".rst", ".html", ".sh", ".json", ".cfg", ".slurm"}
TEXT_NAMES = {"Makefile", "Snakefile", "run", ".gitignore"}
# Words that tell when or why something was written instead of what it is; git keeps the history.
HISTORY = {
    "an issue number": r"(?<![A-Za-z])issue[\s_#-]*\d+",
    "'today' (say what the thing is: the default, the reference)": r"(?<![a-z])today",
    "a change narrated ('before this change', 'before that test moved', ...)": r"\bbefore (?:this|that|these) (?:change|cuts?|move|fix|test moved)",
    "a column or state named 'before'": r"paper text / before|before-state|state before",
    "'the previous recording/run/version'": r"\bprevious (?:recording|run|version)",
}
README_MAX_LINES = 200
# One name per concept: the authors' released weights are `authors` in file names, code, rules, config and docs.
# Their deprecated name is left only where it is still read, at most this many lines per file, and nowhere else.
DEPRECATED_NAME = re.compile(r"(?<![a-z])official(?![a-z])", re.IGNORECASE)
DEPRECATION_HANDLING = {
    "src/dgno/cli.py": 2,  # RENAMED_COMMANDS, RENAMED_OPTIONS: dgno import-official, --official
    "src/dgno/inference/authors.py": 1,  # DEPRECATED_URL_ENV
    "src/dgno/models/authors.py": 2,  # DEPRECATED_FOLDER: $DGNO_CACHE/official, <raw_dir>/official
    "src/dgno/workflow/config.py": 4,  # RENAMED_KEYS
    "docs/authors_weights.md": 6,  # the table of deprecated names
    "tests/test_deprecated_names.py": None,  # the tests that each deprecated name still works
}
NAMED_AREAS = ("src/", "workflow/", "config/", "tests/", "docs/", "benchmarks/", "profiles/", "README.md", "Snakefile")
OTHER_NAMES = re.compile(r"official|reproduction", re.IGNORECASE)  # the concept's other names, as names of things
# The repository's copy of the authors' fixtures replaced a folder beside the checkout; nothing may read that one.
OUTSIDE = ("../" + "shared", "/work/" + "shared")
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def _files(*, fixtures: bool = False) -> list[Path]:
    """The checkout's own files (git's view), without this file and (unless ``fixtures``) the third-party fixtures."""
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT, capture_output=True, check=True)
    names = [n for n in out.stdout.decode().split("\0") if n and (fixtures or not n.startswith("tests/fixtures/"))]
    return [ROOT / n for n in names if (ROOT / n).is_file() and ROOT / n != Path(__file__).resolve()]


def _text_files() -> list[Path]:
    return [p for p in _files() if p.suffix in TEXT_SUFFIXES or p.name in TEXT_NAMES]


def history_words(text: str) -> list[str]:
    """The kinds of history wording found in ``text``."""
    return [kind for kind, pattern in HISTORY.items() if re.search(pattern, text, flags=re.IGNORECASE)]


def test_the_history_finder_sees_what_it_should_and_not_more():
    assert history_words("see iss" + "ue 27 and Iss" + "ue #21") == ["an issue number"]
    assert history_words("bench_iss" + "ue27.py") == ["an issue number"]
    assert history_words("fastest_vs_to" + "day") and history_words("To" + "day's step")
    assert history_words("18 min be" + "fore that test moved here")
    assert not history_words("the default step; before any job runs; issues a warning; the paper text says batch 8; --min-tissue 0")


def test_no_file_name_or_text_carries_development_history():
    found = []
    for path in _files():
        rel = path.relative_to(ROOT).as_posix()
        found += [f"{rel} (file name): {kind}" for kind in history_words(rel)]
        if path.suffix in TEXT_SUFFIXES or path.name in TEXT_NAMES:
            for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                found += [f"{rel}:{n}: {kind}: {line.strip()[:120]}" for kind in history_words(line)]
    assert not found, "say what things are, not when or why they were added:\n" + "\n".join(found)


def test_nothing_reads_the_folder_beside_the_checkout():
    """Every test runs from a clone: the authors' fixtures are tests/fixtures/authors, not a folder outside."""
    found = []
    for path in _text_files():
        rel = path.relative_to(ROOT).as_posix()
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if any(o in line for o in OUTSIDE):
                found.append(f"{rel}:{n}: {line.strip()[:120]}")
    assert not found, "files outside the repository are referred to (use tests/fixtures/ instead):\n" + "\n".join(found)


def test_the_released_weights_have_one_name():
    """"official" only in deprecation handling (:data:`DEPRECATION_HANDLING`); no file, rule or config key named after
    the concept's other names ("official", "reproduction": prose may still say the paper is reproduced)."""
    found, seen = [], set()
    for path in _files(fixtures=True):
        rel = path.relative_to(ROOT).as_posix()
        if not rel.startswith(NAMED_AREAS):
            continue
        if OTHER_NAMES.search(rel):
            found.append(f"{rel} (file name)")
        if path.suffix not in TEXT_SUFFIXES and path.name not in TEXT_NAMES:
            continue
        hits = [f"{rel}:{n}: {line.strip()[:120]}" for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1) if DEPRECATED_NAME.search(line)]
        if hits:
            seen.add(rel)
        limit = DEPRECATION_HANDLING.get(rel, 0)
        found += hits if limit is not None and len(hits) > limit else []
    rules = re.findall(r"^(?:local)?rule (\w+):", "".join(p.read_text() for p in (ROOT / "workflow" / "rules").glob("*.smk")), re.MULTILINE)
    keys = _schema_keys(yaml.safe_load((ROOT / "workflow" / "schemas" / "config.schema.yaml").read_text()))
    assert {"authors_checkpoint", "import_authors", "authors_table"} <= set(rules) and {"authors.tolerances", "methods.*.authors_checkpoints"} <= set(keys)
    found += [f"rule {r}" for r in rules if OTHER_NAMES.search(r)] + [f"config key {k}" for k in keys if OTHER_NAMES.search(k)]
    assert not found, "the released weights are called `authors` (deprecated names only where they are still read):\n" + "\n".join(found)
    stale = sorted(set(DEPRECATION_HANDLING) - seen)
    assert not stale, f"DEPRECATION_HANDLING lists files that no longer hold the deprecated name: {stale}"


def _schema_keys(node, prefix: str = "") -> list[str]:
    """Every property name of a JSON schema, as a dotted path."""
    keys = []
    if isinstance(node, dict):
        for name, sub in node.get("properties", {}).items():
            keys += [prefix + name] + _schema_keys(sub, f"{prefix}{name}.")
        for key in ("additionalProperties", "items"):
            keys += _schema_keys(node.get(key), f"{prefix}*.")
        for name, sub in node.get("$defs", {}).items():
            keys += _schema_keys(sub, f"$defs.{name}.")
    return keys


def test_the_readme_reads_in_five_minutes():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines (at most {README_MAX_LINES}): move details to docs/"


def _anchors(markdown: str) -> set[str]:
    """GitHub's anchors of a Markdown file's headings: lower case, punctuation dropped, spaces to hyphens."""
    heads = re.findall(r"^#+\s+(.*?)\s*$", markdown, flags=re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in heads}


def _markdown_files() -> list[Path]:
    return sorted(p for p in _files() if p.suffix == ".md") + sorted((ROOT / "tests" / "fixtures").rglob("*.md"))


def _broken_links(path: Path) -> list[str]:
    text = path.read_text()
    broken = []
    for target in LINK.findall(text):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest.read_text()):
            broken.append(f"{target} (no heading with that anchor)")
    return broken


@pytest.mark.parametrize("doc", _markdown_files(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_of_the_documentation_resolves(doc):
    broken = _broken_links(doc)
    assert not broken, f"{doc.relative_to(ROOT)}: links that do not resolve: {broken}"


def test_the_link_checker_finds_a_missing_file_and_a_missing_heading(tmp_path):
    (tmp_path / "a.md").write_text("# Quick start\n[ok](b.md) [gone](c.md) [here](#quick-start) [not here](#nowhere) [web](https://x.org)\n")
    (tmp_path / "b.md").write_text("# B\n")
    assert _broken_links(tmp_path / "a.md") == ["c.md (no such file)", "#nowhere (no heading with that anchor)"]
