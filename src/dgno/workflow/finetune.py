"""The ``finetune`` target: what the fine-tuning job reads and the settings it gets, from the config's ``finetune`` block.

Plain functions of the validated config (tested without Snakemake, ``tests/test_finetune_workflow.py``);
``workflow/rules/finetune.smk`` binds them. One job fine-tunes one network on the block's inputs, as
``dgno finetune`` does, into :data:`OUT`. The inputs are one of ``stacks`` (files, folders or glob
patterns), ``pairs`` (two folders) or ``slides``; or ``synthetic``: stacks the workflow generates
(``dgno.data.synthetic_stacks``) into :data:`GENERATED`'s folder, for the demo and the tests. The start
is one of ``{authors: NAME}`` (downloaded by rule ``authors_checkpoint``, as for slides),
``{checkpoint: PATH}``, ``{method: M, dataset: D}`` (the model this workflow trains for M on D) or
``{scratch: MODEL}``.

Only the standard library and the config here: config validation calls :func:`check`, and the DAG must
not load torch.
"""

from __future__ import annotations

import glob
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from dgno.io import InputError

OUT = "results/finetune"
FILES = {"model": f"{OUT}/model.pt", "report": f"{OUT}/report.html", "markdown": f"{OUT}/report.md", "summary": f"{OUT}/finetune.json"}
GENERATED = f"{OUT}/stacks/stacks.json"  # written with the generated stacks beside it
INPUT_KEYS = ("stacks", "pairs", "slides", "synthetic")
PREPARATION_KEYS = ("distances", "focus_plane", "channel", "axes", "max_shift", "val_fraction", "test_fraction", "field_size", "max_fields")
RECIPE_KEYS = ("iterations", "patch_size", "batch_size", "lr")

Config = Mapping[str, Any]


def block(config: Config) -> dict[str, Any] | None:
    return config.get("finetune") or None


def check(config: Config) -> None:
    """The block names exactly one kind of input and, when it names one, a method and dataset of this config."""
    fb = block(config)
    if fb is None:
        return
    given = [k for k in INPUT_KEYS if fb.get(k)]
    if len(given) != 1:
        raise InputError(f"config key finetune: {' and '.join(given) or 'no input'} given. Fix: give exactly one of finetune.stacks, finetune.pairs, finetune.slides or finetune.synthetic")
    start = fb["start"]
    for key, defined in (("method", config.get("methods", {})), ("dataset", config.get("datasets", {}))):
        if key in start and start[key] not in defined:
            raise InputError(f"config key finetune.start.{key}: {start[key]!r} is not defined; defined: {', '.join(defined)}. Fix: name one of them")


def _expand(patterns: list[str], key: str) -> list[str]:
    """Each path as given and each glob pattern's matches (files or folders), sorted; one that names nothing is refused."""
    out: list[str] = []
    for pattern in patterns:
        matches = sorted(glob.glob(pattern, recursive=True)) if glob.has_magic(pattern) else ([pattern] if Path(pattern).exists() else [])
        if not matches:
            raise InputError(f"config key finetune.{key}: {pattern!r} names no file or folder (relative paths start in the working directory). Fix: correct the path or pattern")
        out += [m for m in matches if m not in out]
    return out


def data_inputs(config: Config) -> dict[str, list[str] | tuple[str, str]]:
    """{kind: paths} of the job's data: ``stacks`` (the generated folder for ``synthetic``), ``pairs`` or ``slides``."""
    fb = block(config)
    if fb.get("synthetic"):
        return {"stacks": [str(Path(GENERATED).parent)]}
    if fb.get("pairs"):
        return {"pairs": (fb["pairs"]["blurred"], fb["pairs"]["sharp"])}
    key = "stacks" if fb.get("stacks") else "slides"
    return {key: _expand(fb[key], key)}


def input_files(config: Config, trained_model: Callable[[Config, str, str], str]) -> dict[str, Any]:
    """The job's inputs: the data files and folders (the generated stacks' record) and the start's file, if any.

    ``trained_model``: :func:`dgno.workflow.plan.trained_model` (passed in: the plan imports the config module).
    """
    fb = block(config)
    data = data_inputs(config)
    files: dict[str, Any] = {"data": [GENERATED] if fb.get("synthetic") else [p for paths in data.values() for p in paths]}
    start = fb["start"]
    if "authors" in start:
        files["start"] = f"{config['downloads']['raw_dir']}/authors/{start['authors']}.pth"
    elif "checkpoint" in start:
        files["start"] = start["checkpoint"]
    elif "method" in start:
        files["start"] = trained_model(config, start["dataset"], start["method"])
    return files


def start_settings(config: Config, start_file: str | None) -> dict[str, Any]:
    """Keyword arguments of ``dgno.train.finetune.start_from`` for the block's start (its file as the job got it)."""
    start = block(config)["start"]
    if "scratch" in start:
        return {"scratch": start["scratch"], "scale": start.get("scale", config.get("scale", "demo")), "channels": start.get("channels", 1)}
    options = start.get("options")
    if "authors" in start and config["downloads"].get("authors_options"):
        options = str(Path(config["downloads"]["authors_options"]) / f"{start['authors']}.yml")
    return {"checkpoint": start_file, "options": options}


def job_settings(config: Config) -> dict[str, Any]:
    """What the job passes on: its data, the preparation and recipe settings, patience, normalisation, LPIPS."""
    fb = block(config)
    preparation = {k: fb[k] for k in PREPARATION_KEYS if k in fb}
    if preparation.get("distances") is not None:
        preparation["distances"] = list(preparation["distances"])
    return {
        "data": {k: list(v) for k, v in data_inputs(config).items()},
        "preparation": preparation,
        "overrides": {k: fb.get(k) for k in RECIPE_KEYS},
        "patience": fb["patience"],
        "normalise": fb.get("normalise"),
        "lpips": fb["lpips"],
    }


def synthetic_settings(config: Config) -> dict[str, Any]:
    """``{"fields": n, "spec": StackSpec keyword arguments}`` of the generated stacks (seeded from the config's seed)."""
    spec = dict(block(config)["synthetic"])
    fields = spec.pop("fields")
    return {"fields": fields, "spec": {**spec, "size": list(spec["size"]), "seed": int(config["seed"])}}


def targets(config: Config) -> list[str]:
    """The target's files (none without a ``finetune`` block)."""
    return list(FILES.values()) if block(config) else []
