"""The ``slides`` target: which slides a configuration restores, what each job reads, and its settings.

Like :mod:`dgno.workflow.plan`, plain functions of the validated config returning names, paths and
settings, tested without Snakemake (``tests/test_workflow_slides.py``); ``workflow/rules/slides.smk``
binds them. A slide is filed under its name (:func:`dgno.slides.inputs.slide_name`); its results are
:func:`dgno.experiments.catalogue.slide_files`. The network is the config's ``slides.network``:

* ``{authors: NAME}``: the released checkpoint as the workflow downloads it (rule ``authors_checkpoint``,
  ``<raw_dir>/authors/NAME.pth``, with ``downloads.authors_options`` when set), imported by the job;
* ``{checkpoint: PATH}``: that file (and ``options``);
* ``{method: M, dataset: D}``: the model this workflow trains or imports for M on D (:func:`dgno.workflow.plan.trained_model`).
"""

from __future__ import annotations

import zlib
from pathlib import Path
from typing import Any

from dgno.experiments import catalogue
from dgno.slides.inputs import listed_slides, slide_names
from dgno.workflow.plan import Config, trained_model

# restore_slide's keyword arguments, by config key of the slides block
RESTORE_KEYS = {"channel": "channel", "level": "level", "mpp": "mpp", "restore": "restore", "threshold": "threshold",
                "focus_margin": "margin", "min_tissue": "min_tissue", "focus_downsample": "focus_downsample", "compression": "compression"}  # fmt: skip
NETWORK_KEYS = ("normalise", "tile", "overlap", "tile_batch", "engine")  # load_network's keyword arguments of the same names


def slide_inputs(config: Config) -> dict[str, str]:
    """{name: slide file} of every slide the config restores: the listed files, then the generated ones."""
    if not config.get("slides"):
        return {}
    listed = listed_slides(config)
    return {name: listed.get(name, catalogue.SYNTHETIC_SLIDE["slide"].format(slide=name)) for name in slide_names(config)}


def synthetic_names(config: Config) -> list[str]:
    return list((config.get("slides") or {}).get("synthetic", {}))


def synthetic_settings(config: Config, name: str) -> dict[str, Any]:
    """Keyword arguments of ``dgno.data.slides.synthetic_slide`` for generated slide ``name``: its spec, and a
    seed from the config's and the name's (two generated slides of one config differ; a rerun is the same)."""
    spec = config["slides"]["synthetic"][name]
    seed = (int(config["seed"]) << 32) | zlib.crc32(name.encode())
    return {"kind": spec["kind"], "shape": list(spec["size"]), "seed": seed, "regions": spec["regions"], "sigma": spec["sigma"]}


def network_file(config: Config) -> str:
    """The file the network is read from (the restoring job's input ``model``)."""
    net = config["slides"]["network"]
    if "authors" in net:
        return f"{config['downloads']['raw_dir']}/authors/{net['authors']}.pth"
    if "checkpoint" in net:
        return net["checkpoint"]
    return trained_model(config, net["dataset"], net["method"])


def network_options(config: Config) -> str | None:
    """The authors' option file of the network, when the config names one (a param, as for rule import_authors:
    the released names need none, ``downloads.authors_options`` points at a folder of them)."""
    net = config["slides"]["network"]
    if "authors" in net:
        folder = config["downloads"].get("authors_options")
        return str(Path(folder) / f"{net['authors']}.yml") if folder else None
    return net.get("options")


def restore_settings(config: Config) -> dict[str, Any]:
    """What every slide's job passes on: ``restore`` (restore_slide's options) and ``network`` (load_network's)."""
    block = config["slides"]
    return {"restore": {arg: block[key] for key, arg in RESTORE_KEYS.items()}, "network": {key: block[key] for key in NETWORK_KEYS}}


def targets(config: Config) -> list[str]:
    """Every file of every slide's restoration, and the manifest of each generated slide (the ``slides`` target
    and the report's inputs: the report checks a generated slide's focus map against its manifest)."""
    manifests = [catalogue.SYNTHETIC_SLIDE["manifest"].format(slide=name) for name in synthetic_names(config)]
    return [f for name in slide_inputs(config) for f in catalogue.slide_files(name)] + manifests
