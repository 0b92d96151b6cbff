"""The workflow's `slides` target: the config's slides block (schema and checks), which slides and files each job
reads (dgno.workflow.slides, dgno.slides.inputs), the rule's plan in a dry run, and the report's section rendered
from a recorded summary. A config without the block plans exactly what it planned before."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tifffile
import yaml
from conftest import ROOT, patient

from dgno.data.slides import synthetic_slide
from dgno.experiments import catalogue
from dgno.io import InputError
from dgno.report.build import build_report
from dgno.slides.inputs import expand_inputs, slide_name, slide_names, unique_names
from dgno.workflow import slides, targets
from dgno.workflow.config import ConfigError, load_config, validate_config
from dgno.workflow.estimate import parse_dry_run

FIXTURES = ROOT / "tests" / "fixtures" / "slides"


@pytest.fixture(scope="module")
def demo():
    return load_config(ROOT / "config.yaml")


def _smoke_with(block: dict) -> dict:
    raw = yaml.safe_load((ROOT / "tests" / "smoke.yaml").read_text())
    raw["slides"] = block
    return validate_config(raw)


# --- the config ----------------------------------------------------------------------------------


def test_the_demo_restores_one_generated_fluorescence_slide_with_its_trained_network(demo):
    block = demo["slides"]
    assert block["network"] == {"method": "dgno-cell", "dataset": "nuclei"} and block["channel"] == "DAPI"
    assert block["synthetic"]["demo_slide"]["kind"] == "fluorescence" and block["restore"] == "blurry" and block["focus_margin"] == 0.3  # defaults filled
    assert slides.slide_inputs(demo) == {"demo_slide": "results/slides/synthetic/demo_slide.ome.tif"}
    assert slides.network_file(demo) == "results/train/nuclei/dgno-cell/model.pt" and slides.network_options(demo) is None
    settings = slides.restore_settings(demo)
    assert settings["network"] == {"normalise": None, "tile": 256, "overlap": 32, "tile_batch": None, "engine": "auto"}
    assert settings["restore"]["channel"] == "DAPI" and settings["restore"]["margin"] == 0.3 and "focus_margin" not in settings["restore"]


def test_bad_slides_blocks_name_the_key_and_the_fix():
    with pytest.raises(ConfigError, match=r"config key slides: lists no slide. Fix: add slide files"):
        _smoke_with({"network": {"authors": "DGNO_3DHistech_Cell"}})
    with pytest.raises(ConfigError, match=r"config key slides.mpp: given together with slides.level"):
        _smoke_with({"inputs": ["a.svs"], "network": {"authors": "X"}, "level": 1, "mpp": 0.5})
    with pytest.raises(ConfigError, match=r"config key slides.network.method: 'nope' is not defined; defined methods: gg, lg"):
        _smoke_with({"inputs": ["a.svs"], "network": {"method": "nope", "dataset": "nuclei"}})
    with pytest.raises(ConfigError, match=r"config key slides.network.dataset: 'nope' is not defined"):
        _smoke_with({"inputs": ["a.svs"], "network": {"method": "gg", "dataset": "nope"}})
    with pytest.raises(ConfigError, match=r"slides.network: .*expected one of: \{authors: NAME\}, \{checkpoint: PATH, options: FILE\}, \{method: NAME, dataset: NAME\}"):
        _smoke_with({"inputs": ["a.svs"], "network": {"released": "DGNO_3DHistech_Cell"}})
    with pytest.raises(ConfigError, match=r"slides.synthetic.s.kind: 'phase' is not allowed; allowed values: fluorescence, brightfield"):
        _smoke_with({"synthetic": {"s": {"kind": "phase"}}, "network": {"authors": "X"}})
    with pytest.raises(ConfigError, match=r"slides.focus_margins: unknown key"):
        _smoke_with({"inputs": ["a.svs"], "network": {"authors": "X"}, "focus_margins": 0.2})


def test_a_config_without_slides_plans_no_slide_and_the_same_targets(demo):
    paper = load_config(ROOT / "config" / "paper.yaml")
    assert "slides" not in paper and "slides" not in [e.name for e in catalogue.configured(paper)]
    assert not [f for f in targets.report_inputs(paper) if "slides/" in f]
    without = copy.deepcopy(demo)
    del without["slides"]
    with_slides = targets.report_inputs(demo)
    assert [f for f in with_slides if "results/slides/" not in f] == targets.report_inputs(without)
    assert set(catalogue.slide_files("demo_slide")) <= set(with_slides)
    manifest = catalogue.SYNTHETIC_SLIDE["manifest"].format(slide="demo_slide")  # the report checks the focus map against it
    assert set(targets.experiment_targets(demo, "slides")) == set(catalogue.slide_files("demo_slide")) | {manifest}


# --- which slides ------------------------------------------------------------------------------


def test_inputs_are_paths_or_patterns_named_after_the_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name in ("scans/b.svs", "scans/a.svs", "scans/c.ome.tif", "other/b.svs"):
        Path(name).parent.mkdir(exist_ok=True)
        Path(name).write_bytes(b"x")
    Path("scans/folder.svs").mkdir()  # a pattern may match a folder: not a slide
    assert [slide_name(p) for p in ("x/a.ome.tif", "b.svs", "c.OME.TIFF", "d.tiff")] == ["a", "b", "c", "d"]
    assert expand_inputs(["scans/*.svs", "scans/c.ome.tif", "scans/a.svs"]) == ["scans/a.svs", "scans/b.svs", "scans/c.ome.tif"]
    with pytest.raises(InputError, match=r"config key slides.inputs: 'scan/\*.svs' names no file.*Fix: correct the path"):
        expand_inputs(["scan/*.svs"])
    with pytest.raises(InputError, match=r"other/b.svs: its results would have the same name \(b\) as those of scans/b.svs. Fix: rename one of them"):
        unique_names(expand_inputs(["scans/*.svs", "other/*.svs"]), fix="x")
    cfg = _smoke_with({"inputs": ["scans/*.svs"], "synthetic": {"demo": {}}, "network": {"authors": "DGNO_3DHistech_Cell"}})
    assert slide_names(cfg) == ["a", "b", "demo"]
    assert slides.slide_inputs(cfg) == {"a": "scans/a.svs", "b": "scans/b.svs", "demo": "results/slides/synthetic/demo.ome.tif"}
    clash = _smoke_with({"inputs": ["scans/a.svs"], "synthetic": {"a": {}}, "network": {"authors": "X"}})
    with pytest.raises(InputError, match=r"slides.synthetic.a: a generated slide of the same name as scans/a.svs"):
        slides.slide_inputs(clash)


def test_each_kind_of_network_is_read_from_its_files():
    authors = _smoke_with({"inputs": ["a.svs"], "network": {"authors": "DGNO_3DHistech_Cell"}})
    assert slides.network_file(authors) == "resources/authors/DGNO_3DHistech_Cell.pth" and slides.network_options(authors) is None
    authors["downloads"]["authors_options"] = "opts"
    assert slides.network_options(authors) == "opts/DGNO_3DHistech_Cell.yml"
    own = _smoke_with({"inputs": ["a.svs"], "network": {"checkpoint": "nets/mine.pth", "options": "nets/mine.yml"}})
    assert (slides.network_file(own), slides.network_options(own)) == ("nets/mine.pth", "nets/mine.yml")
    robust = _smoke_with({"inputs": ["a.svs"], "network": {"method": "dgno-cell", "dataset": "nuclei_ood"}})
    assert slides.network_file(robust) == "results/train/nuclei/dgno-cell/model.pt"  # the model of its trained_on dataset


def test_generated_slides_are_deterministic_per_name_and_blurred_on_tissue(tmp_path):
    cfg = _smoke_with({"synthetic": {"a": {"size": [512, 640], "regions": 2}, "b": {"kind": "brightfield", "size": [512, 512]}}, "network": {"authors": "X"}})
    a, b = slides.synthetic_settings(cfg, "a"), slides.synthetic_settings(cfg, "b")
    assert a["seed"] != b["seed"] and a == slides.synthetic_settings(copy.deepcopy(cfg), "a")
    assert (a["kind"], a["shape"], a["regions"], a["sigma"]) == ("fluorescence", [512, 640], 2, 3.0)
    one = synthetic_slide(tmp_path / "a.ome.tif", **a)
    assert synthetic_slide(tmp_path / "again.ome.tif", **a) == one
    assert np.array_equal(tifffile.imread(tmp_path / "a.ome.tif"), tifffile.imread(tmp_path / "again.ome.tif"))
    assert one["channels"] == ["DAPI", "Actin"] and one["dtype"] == "uint16" and len(one["regions"]) == 2
    assert all(r["y1"] - r["y0"] == 128 and r["y0"] >= 0 and r["y1"] <= 512 and r["x1"] <= 640 for r in one["regions"])
    rgb = synthetic_slide(tmp_path / "b.tif", **b)
    assert rgb["layout"] == "generic-tiff" and rgb["dtype"] == "uint8" and rgb["mpp"] == 0.25


# --- the plan ----------------------------------------------------------------------------------


def _dry_run(workdir: Path, configfile: Path, target: str) -> tuple[list, str]:
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", target, "-n", "--snakefile", str(ROOT / "Snakefile"), "--directory", str(workdir), "--configfile", str(configfile)],
        capture_output=True, text=True, timeout=patient(300),
    )  # fmt: skip
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    return parse_dry_run(proc.stdout + proc.stderr), proc.stdout


def test_the_slides_target_plans_one_job_per_slide_after_its_network(tmp_path):
    """A user's slide (pattern) restored by a released network, beside a generated one: one restore_slide job each,
    the released checkpoint downloaded once, the generated slide written first; the GPU asked for at paper scale."""
    (tmp_path / "scans").mkdir()
    (tmp_path / "scans" / "case1.svs").write_bytes(b"x")
    raw = yaml.safe_load((ROOT / "tests" / "smoke.yaml").read_text())
    raw["slides"] = {"inputs": ["scans/*.svs"], "synthetic": {"demo": {"size": [512, 512]}}, "network": {"authors": "DGNO_3DHistech_Cell"}}
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(raw))
    jobs, out = _dry_run(tmp_path, config, "slides")
    restore = sorted(j.wildcards["slide"] for j in jobs if j.rule == "restore_slide")
    assert restore == ["case1", "demo"] and [j.rule for j in jobs].count("authors_checkpoint") == 1
    assert [j.wildcards for j in jobs if j.rule == "slide_synthetic"] == [{"slide": "demo"}]
    assert "resources/authors/DGNO_3DHistech_Cell.pth" in out and "scans/case1.svs" in out
    assert not [j for j in jobs if j.rule.startswith("train")]


# --- the report ----------------------------------------------------------------------------------


def test_the_slides_section_is_built_from_the_recorded_summary_and_pictures(tmp_path, demo):
    """The section of the demo's slide from the summary its job wrote (tests/fixtures/slides), with the focus map
    embedded and the missing before/after picture replaced by the command that makes it."""
    results = tmp_path / "results"
    summary = results / catalogue.SLIDE_FILES["summary"].format(slide="demo_slide").removeprefix("results/")
    summary.parent.mkdir(parents=True)
    recorded = json.loads((FIXTURES / "demo_slide.summary.json").read_text())
    summary.write_text(json.dumps(recorded))
    focus = results / catalogue.FIGURES["slide_focus"].path.format(slide="demo_slide").removeprefix("results/")
    focus.write_bytes((FIXTURES / "pixel.png").read_bytes())
    build_report(demo, results, tmp_path / "index.html")
    section = (tmp_path / "index.html").read_text().split('id="slides"')[1].split("</section>")[0]
    t = recorded["tiles"]
    assert "Whole slides restored where they are out of focus" in section and "DGNO-Cell as trained on nuclei" in section
    assert f"<td>{t['total']} / {t['tissue']} / {t['blurry']} / {t['restored']}</td>" in section
    assert f"{100 * recorded['tissue_restored_fraction']:.1f} %" in section and f"{recorded['tiles_per_second']:.3f}" in section
    assert "data:image/png;base64," in section and "Focus map of demo_slide" in section
    assert "snakemake --cores all results/slides/restored/demo_slide.before_after.png" in section
    assert "demo_slide is generated (fluorescence, 1536 × 2048 px, 3 region(s) defocused on purpose" in section


def test_a_slide_not_restored_yet_is_a_row_with_its_command(tmp_path, demo):
    build_report(demo, tmp_path / "results", tmp_path / "index.html")
    section = (tmp_path / "index.html").read_text().split('id="slides"')[1].split("</section>")[0]
    assert "not run: snakemake --cores all results/slides/restored/demo_slide.summary.json" in section
    assert section.count("<tr>") >= 2  # the header and the slide's row


def test_the_focus_check_of_a_generated_slide_counts_tiles_against_its_defocused_regions():
    """Tiles at least half inside a defocused region are the truth; precision and recall of the 'blurry' labels."""
    import pandas as pd

    from dgno.report.slides_section import focus_check

    tiles = pd.DataFrame(
        [(0, 0, 100, 100, "blurry"), (0, 100, 100, 100, "blurry"), (0, 200, 100, 100, "in focus"), (100, 0, 100, 100, "blurry"), (100, 100, 100, 100, "background")],
        columns=["y", "x", "height", "width", "label"],
    )
    # region: the whole first tile and 60 % of the second; the third tile 40 %; the fourth not at all
    manifest = {"regions": [{"y0": 0, "x0": 0, "y1": 100, "x1": 160, "sigma": 3.0}, {"y0": 0, "x0": 200, "y1": 100, "x1": 240, "sigma": 3.0}]}
    assert focus_check(tiles, manifest) == ["4", "2", "3", "0.67", "1.00"]
    assert focus_check(tiles.assign(label="in focus"), manifest)[3:] == ["— (none found)", "0.00"]
