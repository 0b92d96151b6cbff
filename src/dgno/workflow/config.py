"""Configuration validation: JSON schema + cross-references, with messages that name the key.

Snakemake's own ``validate`` prints a jsonschema traceback; a user who typed ``flux: jmp``
deserves one line: which key, what was given, what is allowed. Defaults from the schema are
filled in so the rules never guess.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from dgno import deprecation
from dgno.data import RENAMED_SOURCES, paired_sets
from dgno.models.registry import list_models
from dgno.workflow.settings import SPEED_ONLY_TRAIN

SCHEMA_PATH = Path(__file__).resolve().parents[3] / "workflow" / "schemas" / "config.schema.yaml"


class ConfigError(ValueError):
    """The workflow configuration is invalid; the message names the key and the allowed values."""


def load_schema(path: str | Path = SCHEMA_PATH) -> dict:
    return yaml.safe_load(Path(path).read_text())


def _key(path) -> str:
    return ".".join(str(p) for p in path) or "<top level>"


def _resolve(schema: dict, sub: dict) -> dict:
    """A property with its $ref definition filled in; keys beside the $ref (default, description) win."""
    ref = sub.get("$ref")
    if ref and ref.startswith("#/$defs/"):
        return {**schema["$defs"][ref.split("/")[-1]], **{k: v for k, v in sub.items() if k != "$ref"}}
    return sub


def _message(err: jsonschema.ValidationError, schema: dict) -> str:
    key = _key(err.absolute_path)
    if err.validator == "additionalProperties":
        allowed = sorted(err.schema.get("properties", {}))
        extra = sorted(set(err.instance) - set(allowed))
        return f"config key {key + '.' if err.absolute_path else ''}{extra[0]!s}: unknown key; allowed keys here: {', '.join(allowed)}"
    if err.validator == "enum":
        return f"config key {key}: {err.instance!r} is not allowed; allowed values: {', '.join(map(str, err.validator_value))}"
    if err.validator == "required":
        return f"config key {key}: {err.message}"
    if err.validator in ("oneOf", "anyOf"):
        options = []
        for s in err.validator_value:
            s = _resolve(schema, s)
            if "enum" in s:
                options += map(repr, s["enum"])
            else:
                options.append(repr(s["const"]) if "const" in s else s.get("title") or s.get("type", "?"))
        return f"config key {key}: {err.instance!r} is not allowed; expected one of: {', '.join(map(str, options))}"
    if err.validator == "pattern":
        return f"config key {key}: {err.instance!r} must match {err.validator_value} (lower-case letters, digits, _ . -)"
    return f"config key {key}: {err.message}"


def _fill_defaults(instance: Any, sub: dict, schema: dict) -> None:
    """Insert schema defaults into `instance` in place (objects only, recursively)."""
    sub = _resolve(schema, sub)
    if not isinstance(instance, dict):
        return
    for name, prop in sub.get("properties", {}).items():
        prop = _resolve(schema, prop)
        if name not in instance and "default" in prop:
            instance[name] = copy.deepcopy(prop["default"])
        if name in instance:
            _fill_defaults(instance[name], prop, schema)
    extra = sub.get("additionalProperties")
    if isinstance(extra, dict):
        for name, value in instance.items():
            if name not in sub.get("properties", {}):
                _fill_defaults(value, extra, schema)


def validate_config(config: dict, schema: dict | None = None) -> dict:
    """Return a validated copy of `config` with defaults filled and ablation grids expanded; raise ConfigError otherwise.

    Idempotent: an already validated config (marked ``_validated``) is returned unchanged.
    """
    if config.get("_validated"):
        return copy.deepcopy(dict(config))
    schema = schema or load_schema()
    cfg = copy.deepcopy(dict(config))
    _rename_sources(cfg)
    _rename_keys(cfg)
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(cfg), key=lambda e: (len(e.absolute_path), _key(e.absolute_path)))
    if errors:
        raise ConfigError("; ".join(_message(e, schema) for e in errors[:5]))
    cfg.setdefault("downloads", {})
    _check_bbbc006_keys(cfg["datasets"])
    _fill_defaults(cfg, schema, schema)
    for ds in cfg["datasets"].values():  # filled into every dataset; only BBBC006 channels read them
        if ds["source"] != "bbbc006":
            for key in BBBC006_SPLIT_KEYS:
                ds.pop(key, None)
    _check_references(cfg)
    expand_ablations(cfg)
    cfg["_validated"] = True
    return cfg


def _rename_sources(cfg: dict) -> None:
    """Read a dataset source by a deprecated name (dgno.data.RENAMED_SOURCES) as its replacement, saying so once per dataset (dgno.deprecation)."""
    for name, ds in (cfg.get("datasets") or {}).items():
        if isinstance(ds, dict) and ds.get("source") in RENAMED_SOURCES:
            replacement = RENAMED_SOURCES[ds["source"]]
            deprecation.renamed("config", f"datasets.{name}.source: {ds['source']}", replacement)
            ds["source"] = replacement


# Config keys under a deprecated name, read as their replacement (dotted paths; "*" stands for any name).
RENAMED_KEYS = {
    "reproduction": "authors",
    "downloads.official_url": "downloads.authors_checkpoints_url",
    "downloads.official_options": "downloads.authors_options",
    "downloads.official_sha256": "downloads.authors_checkpoints_sha256",
    "methods.*.official": "methods.*.authors_checkpoints",
    # ring deconvolution's TV weight: `lam` is the LAM figure's experiment (experiments.lam)
    "experiments.nonblind.ring.lam": "experiments.nonblind.ring.tv_weight",
    "experiments.nonblind.ring.lam_per_sigma": "experiments.nonblind.ring.tv_weight_per_sigma",
    "experiments.nonblind.ring.lam_min": "experiments.nonblind.ring.tv_weight_min",
}


def _renamed_path(path: str) -> str | None:
    """A dotted path with a deprecated key in it (e.g. a ``protocol`` entry), spelled with the replacement; None if none."""
    parts = path.split(".")
    for old, new in RENAMED_KEYS.items():
        pattern = old.split(".")
        if len(parts) >= len(pattern) and all(p in ("*", q) for p, q in zip(pattern, parts)):
            return ".".join([q if p == "*" else r for p, q, r in zip(pattern, parts, new.split("."))] + parts[len(pattern) :])
    return None


def _rename(parent: dict, path: list[str], old: str, new: str) -> None:
    """Read ``parent[old]`` as ``parent[new]`` in place (same position), saying so once."""
    where, instead = ".".join(path + [old]), ".".join(path + [new])
    if new in parent:
        raise ConfigError(f"config key {where}: deprecated name of {instead}, and both are given. Fix: keep only {instead}")
    deprecation.renamed("config", where, instead)
    items = [(new if k == old else k, v) for k, v in parent.items()]
    parent.clear()
    parent.update(items)


def _rename_keys(cfg: dict) -> None:
    """Config keys under their deprecated names (:data:`RENAMED_KEYS`), and ``protocol`` paths naming them, renamed in place."""
    for old in RENAMED_KEYS:
        *above, key = old.split(".")
        new = RENAMED_KEYS[old].rsplit(".", 1)[-1]
        parents = [([], cfg)]
        for part in above:
            parents = [(path + [k], v) for path, node in parents for k, v in node.items() if part in ("*", k) and isinstance(v, dict)]
        for path, parent in parents:
            if key in parent:
                _rename(parent, path, key, new)
    protocol = cfg.get("protocol")
    for path in list(protocol) if isinstance(protocol, dict) else []:
        if _renamed_path(path):
            _rename(protocol, ["protocol"], path, _renamed_path(path))


def ablation_method(variant: str, params: dict[str, Any]) -> str:
    """Readable, path-safe method name of one grid point: 'dgno-cell/flux=jump/boundary=neumann'."""
    return "/".join([variant] + [f"{k}={v}" for k, v in params.items()])


def expand_ablations(cfg: dict) -> None:
    """Add one method per grid point of every ablation, and cfg['ablation_runs'][name] = rows.

    Each row: {'method', 'dataset', 'variant', **grid values}. The grid is the Cartesian product
    in config order (the Paramspace of the paper's tables), so paths never depend on dict order.
    """
    import itertools

    runs: dict[str, list[dict]] = {}
    for name, spec in cfg.get("ablations", {}).items():
        if spec["dataset"] not in cfg["datasets"]:
            raise ConfigError(f"config key ablations.{name}.dataset: {spec['dataset']!r} is not defined; defined datasets: {', '.join(cfg['datasets'])}")
        variants = spec.get("variants", [spec.get("variant")])
        keys = [k for k in spec if k not in ("dataset", "variants", "variant")]
        rows = []
        for variant in variants:
            for values in itertools.product(*(spec[k] for k in keys)):
                params = dict(zip(keys, values))
                method = ablation_method(variant, params)
                cfg["methods"].setdefault(method, {"model": variant, "label": method, "overrides": params})
                rows.append({"method": method, "dataset": spec["dataset"], "variant": variant, **params})
        runs[name] = rows
    cfg["ablation_runs"] = runs


_MISSING = object()


def config_value(cfg: dict, path: str) -> Any:
    """The value at a dotted path (``train.grad_clip``, ``datasets.3dhistech.train``), or ``_MISSING``.

    Keys may themselves hold dots only at the last step; dataset and method names never do.
    """
    node: Any = cfg
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return _MISSING
        node = node[part]
    return node


def _check_references(cfg: dict) -> None:
    """Names used by experiments must exist; levels used for training/testing must be defined."""
    _check_methods(cfg)
    for name, ds in cfg["datasets"].items():
        _check_dataset(cfg, name, ds)
    _check_trained_on(cfg["datasets"])
    for path in cfg.get("protocol", {}):
        if config_value(cfg, path) is _MISSING:
            raise ConfigError(f"config key protocol.{path}: names no setting of this config. Fix: use the dotted path of a key, e.g. train.grad_clip")
    _check_experiment_settings(cfg)
    _check_authors(cfg)
    _check_slides(cfg)
    for exp, spec in cfg["experiments"].items():
        _check_experiment_names(cfg, exp, spec)
    if "robustness" in cfg["experiments"]:
        _check_robustness(cfg["datasets"], cfg["experiments"]["robustness"]["dataset"])
    sb = cfg["experiments"].get("synthetic_bbbc006")
    if sb and cfg["datasets"].get(sb["dataset"], {}).get("source") != "sigma_map":
        raise ConfigError(f"config key experiments.synthetic_bbbc006.dataset: {sb['dataset']!r} must be a dataset with source: sigma_map")
    cost = cfg.get("evaluate", {}).get("paper_scale_cost")
    for m in cost if isinstance(cost, list) else []:
        if m not in cfg["methods"]:
            raise ConfigError(f"config key evaluate.paper_scale_cost: method {m!r} is not defined; defined methods: {', '.join(cfg['methods'])}")


def _check_methods(cfg: dict) -> None:
    """Each method names a registered model, and its authors' checkpoints datasets of this config."""
    datasets, methods = cfg["datasets"], cfg["methods"]
    for name, spec in methods.items():
        if spec["model"] not in list_models():
            raise ConfigError(f"config key methods.{name}.model: {spec['model']!r} is not a registered model; allowed values: {', '.join(list_models())}")
        for ds in spec.get("authors_checkpoints", {}):
            if ds not in datasets:
                raise ConfigError(f"config key methods.{name}.authors_checkpoints.{ds}: not a dataset of this config; defined datasets: {', '.join(datasets)}")


def _check_dataset(cfg: dict, name: str, ds: dict) -> None:
    """One dataset's own settings, per source; fills in the levels of sources whose levels are fixed."""
    datasets, methods = cfg["datasets"], cfg["methods"]
    train_keys = sorted(cfg["train"])
    for key in ds.get("train", {}):
        if key not in train_keys or key in SPEED_ONLY_TRAIN:  # speed-only settings are global
            raise ConfigError(f"config key datasets.{name}.train.{key}: not a training setting; allowed values: {', '.join(k for k in train_keys if k not in SPEED_ONLY_TRAIN)}")
    for method in ds.get("method_overrides", {}):
        if method not in methods:
            raise ConfigError(f"config key datasets.{name}.method_overrides.{method}: not a method of this config; allowed values: {', '.join(methods)}")
    if ds["source"] == "seidel":
        if ds.get("base") not in datasets or datasets[ds["base"]]["source"] == "seidel":
            raise ConfigError(f"config key datasets.{name}.base: {ds.get('base')!r} must name a generated or downloaded dataset; defined: {', '.join(datasets)}")
        ds["levels"] = {"seidel": None}
    elif ds["source"] == "sigma_map" and (ds.get("base") not in datasets or datasets[ds["base"]]["source"] in ("seidel", "sigma_map")):
        raise ConfigError(f"config key datasets.{name}.base: {ds.get('base')!r} must name a dataset with sharp images of its own; defined: {', '.join(datasets)}")
    elif ds["source"] == "bbbc006":
        _check_bbbc006_dataset(name, ds)
    elif ds["source"] in PAIRED_SOURCES:
        _check_paired_dataset(cfg, name, ds)
    elif "levels" not in ds:
        raise ConfigError(f"config key datasets.{name}.levels: required for source {ds['source']!r}")
    if ds["source"] == "demo_nuclei":
        # here, not at the top: the generator's module imports scipy and scikit-image, which a config
        # without generated nuclei (the paper's) need not load to build its DAG
        from dgno.data.synth import photometry_ranges

        try:
            photometry_ranges(ds["photometry"])
        except ValueError as err:
            raise ConfigError(f"config key datasets.{name}.photometry: {err}") from None
    if ds.get("n_train") == 0 and "trained_on" not in ds:
        raise ConfigError(f"config key datasets.{name}.n_train: 0 needs trained_on (a test-only set evaluated with another dataset's models)")
    for which in ("train_levels", "test_levels"):
        for lvl in ds[which]:
            if lvl not in ds["levels"]:
                raise ConfigError(f"config key datasets.{name}.{which}: level {lvl!r} is not defined; defined levels: {', '.join(ds['levels'])}")


BBBC006_SPLIT_KEYS = ("split", "plane_rule", "plane_check", "max_out_of_order")


def _check_bbbc006_keys(datasets: dict) -> None:
    """The split settings belong to BBBC006 channels (checked before the schema's defaults fill them in everywhere)."""
    for name, ds in datasets.items():
        for key in BBBC006_SPLIT_KEYS:
            if key in ds and ds["source"] != "bbbc006":
                raise ConfigError(f"config key datasets.{name}.{key}: only for source 'bbbc006' (this dataset's source is {ds['source']!r}). Fix: remove it")


def _check_authors(cfg: dict) -> None:
    """The methods of ``authors.methods`` exist and carry the authors' checkpoints (methods.<name>.authors_checkpoints)."""
    for m in cfg.get("authors", {}).get("methods", []):
        if m not in cfg["methods"]:
            raise ConfigError(f"config key authors.methods: method {m!r} is not defined; defined methods: {', '.join(cfg['methods'])}")
        if "authors_checkpoints" not in cfg["methods"][m]:
            with_weights = [k for k, v in cfg["methods"].items() if "authors_checkpoints" in v]
            raise ConfigError(
                f"config key authors.methods: {m!r} has no authors' weights (methods.{m}.authors_checkpoints); "
                f"allowed values: {', '.join(with_weights) or 'none defined'}"
            )


def _check_slides(cfg: dict) -> None:
    """The slides block lists at least one slide, one level choice, and a network of this config when it names one."""
    block = cfg.get("slides")
    if block is None:
        return
    if not block["inputs"] and not block["synthetic"]:
        raise ConfigError("config key slides: lists no slide. Fix: add slide files or patterns to slides.inputs (or a generated slide under slides.synthetic), or remove the block")
    if block["level"] is not None and block["mpp"] is not None:
        raise ConfigError("config key slides.mpp: given together with slides.level. Fix: keep only one of them")
    net = block["network"]
    if "method" not in net:
        return
    method, dataset = net["method"], net["dataset"]
    if method not in cfg["methods"]:
        raise ConfigError(f"config key slides.network.method: {method!r} is not defined; defined methods: {', '.join(cfg['methods'])}")
    if dataset not in cfg["datasets"]:
        raise ConfigError(f"config key slides.network.dataset: {dataset!r} is not defined; defined datasets: {', '.join(cfg['datasets'])}")
    released = cfg["methods"][method].get("authors_checkpoints")
    source = cfg["datasets"][dataset].get("trained_on", dataset)
    if released is not None and source not in released:
        raise ConfigError(
            f"config key slides.network: {method!r} has no authors' checkpoint for dataset {source!r} "
            f"(methods.{method}.authors_checkpoints names {', '.join(released)}). Fix: choose one of those datasets"
        )


def _check_bbbc006_dataset(name: str, ds: dict) -> None:
    """A BBBC006 channel dataset: its channel, and levels that are out-of-focus planes (its levels)."""
    if "channel" not in ds:
        raise ConfigError(f"config key datasets.{name}.channel: required for source 'bbbc006'; allowed values: w1, w2")
    for lvl in ds["train_levels"] + ds["test_levels"]:
        if not (len(lvl) == 3 and lvl[0] == "z" and lvl[1:].isdigit() and 0 <= int(lvl[1:]) <= 33 and lvl != "z16"):
            raise ConfigError(f"config key datasets.{name}: level {lvl!r} must be a BBBC006 plane z00..z33 other than the in-focus z16")
    ds["levels"] = dict.fromkeys(dict.fromkeys(ds["train_levels"] + ds["test_levels"]))


def _check_experiment_settings(cfg: dict) -> None:
    """Experiment settings that must fit their dataset: its source, its test levels, the methods' names."""
    datasets, experiments = cfg["datasets"], cfg["experiments"]
    nb = experiments.get("nonblind")
    if nb and datasets.get(nb["dataset"], {}).get("source") != "seidel":
        raise ConfigError(f"config key experiments.nonblind.dataset: {nb['dataset']!r} must be a dataset with source: seidel")
    df = experiments.get("defocus")
    for ds in df["datasets"] if df else []:
        missing = [lvl for lvl in df["levels"] if lvl not in datasets.get(ds, {}).get("test_levels", [])]
        if ds in datasets and missing:
            raise ConfigError(f"config key experiments.defocus.levels: {missing} are not test_levels of dataset {ds!r}; add them to datasets.{ds}.test_levels")
    lam = experiments.get("lam")
    if lam and lam.get("level") and lam["dataset"] in datasets and lam["level"] not in datasets[lam["dataset"]]["test_levels"]:
        tests = ", ".join(datasets[lam["dataset"]]["test_levels"])
        raise ConfigError(f"config key experiments.lam.level: {lam['level']!r} is not a test level of dataset {lam['dataset']!r}; test levels: {tests}")


def _check_experiment_names(cfg: dict, exp: str, spec: dict) -> None:
    """An experiment's datasets and methods are defined, and its authors' checkpoints exist for them."""
    datasets, methods = cfg["datasets"], cfg["methods"]
    for ds in spec.get("datasets", [spec.get("dataset")]):
        if ds not in datasets:
            raise ConfigError(f"config key experiments.{exp}: dataset {ds!r} is not defined; defined datasets: {', '.join(datasets)}")
    for m in spec["methods"]:
        if m not in methods:
            raise ConfigError(f"config key experiments.{exp}.methods: method {m!r} is not defined; defined methods: {', '.join(methods)}")
        released = methods[m].get("authors_checkpoints")
        for ds in spec.get("datasets", [spec.get("dataset")]) if released else []:
            source = datasets[ds].get("trained_on", ds)
            if source not in released:
                raise ConfigError(
                    f"config key experiments.{exp}.methods: {m!r} has no authors' checkpoint for dataset {source!r} "
                    f"(methods.{m}.authors_checkpoints names {', '.join(released)}). Fix: add one or drop the method from this experiment"
                )


PAIRED_SOURCES = paired_sets.SOURCES  # real (blurred, sharp) pairs: one layout each in dgno.data.paired_sets


def _check_paired_dataset(cfg: dict, name: str, ds: dict) -> None:
    """A real paired dataset has exactly one level, "real"; its raw folder defaults to <raw_dir>/<source>.

    RealDOF has only test pairs, so it must say which dataset's models evaluate it.
    """
    for lvl in ds["train_levels"] + ds["test_levels"]:
        if lvl != "real":
            raise ConfigError(f"config key datasets.{name}: level {lvl!r} is not allowed for source {ds['source']!r}; allowed values: real")
    ds["levels"] = {"real": None}
    ds.setdefault("path", f"{cfg['downloads']['raw_dir']}/{ds['source']}")
    if ds["source"] == "realdof" and "trained_on" not in ds:
        raise ConfigError(f"config key datasets.{name}.trained_on: required for source 'realdof' (it has test pairs only), e.g. trained_on: dpdd")


def _check_robustness(datasets: dict, name: str) -> None:
    """The robustness set: demo nuclei scored with another demo nuclei set's models, same blur levels, and a
    photometry that leaves the training range in at least one key (else it would test nothing new)."""
    ds = datasets[name]
    train = datasets.get(ds.get("trained_on"), {})
    if ds["source"] != "demo_nuclei" or train.get("source") != "demo_nuclei":
        raise ConfigError(
            f"config key experiments.robustness.dataset: {name!r} must be a demo_nuclei dataset with trained_on naming "
            "the demo_nuclei dataset whose models it tests"
        )
    for lvl in ds["test_levels"]:
        if train["levels"].get(lvl) != ds["levels"][lvl]:
            raise ConfigError(
                f"config key datasets.{name}.levels.{lvl}: must equal datasets.{ds['trained_on']}.levels.{lvl} "
                f"({train['levels'].get(lvl)}), so the in-range and out-of-range scores see the same blur"
            )
    mine, theirs = ds["photometry"], train["photometry"]
    if not any(mine[k][0] > theirs[k][1] or mine[k][1] < theirs[k][0] for k in mine):
        raise ConfigError(
            f"config key datasets.{name}.photometry: no range lies outside the training range of {ds['trained_on']!r} "
            f"({theirs}); set e.g. background above {theirs['background'][1]} or photons below {theirs['photons'][0]}"
        )


def _check_trained_on(datasets: dict) -> None:
    """trained_on must name a dataset that trains its own models (no chains, no self-reference)."""
    for name, ds in datasets.items():
        other = ds.get("trained_on")
        if other is None:
            continue
        if other == name or other not in datasets or "trained_on" in datasets[other]:
            allowed = [d for d in datasets if d != name and "trained_on" not in datasets[d]]
            raise ConfigError(f"config key datasets.{name}.trained_on: {other!r} must name another dataset that trains its own models; allowed values: {', '.join(allowed)}")


def load_config(path: str | Path) -> dict:
    """Read a YAML config and validate it."""
    return validate_config(yaml.safe_load(Path(path).read_text()))
