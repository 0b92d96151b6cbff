"""Learned-operator maps (paper figure "fig:qualitative"): term split of the layers, hooks, statistic, figure, rule."""

from __future__ import annotations

import subprocess

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import ROOT, SNAKEMAKE, patient, write_tiny_dataset
from torch.testing import assert_close

from dgno.analysis.operators import (
    OperatorView,
    boundary_element_mask,
    capture_operator_terms,
    channel_norm,
    dataset_operator_views,
    image_operator_views,
    interface_energy_ratio,
    interface_mask,
    top_varying_channels,
    view_stats,
)
from dgno.analysis.rank import capture_latents, operator_layers
from dgno.layers.operator import DGOperatorLayer, GlobalGalerkinLayer, LocalGalerkinLayer
from dgno.models.registry import build_model
from dgno.report.figures import operator_maps

C, HEADS = 8, 2


def _randomise(layer: torch.nn.Module) -> torch.nn.Module:
    torch.manual_seed(0)
    for p in layer.parameters():
        torch.nn.init.normal_(p, std=0.5)
    return layer


LAYERS = [
    (GlobalGalerkinLayer, {}),
    (LocalGalerkinLayer, {"element_size": 4}),
    (DGOperatorLayer, {"element_size": 4, "variant": "face", "flux": "avg_jump", "boundary": "dirichlet"}),
    (DGOperatorLayer, {"element_size": 4, "variant": "cell", "flux": "upwind", "boundary": "periodic"}),
]


@pytest.mark.parametrize(("cls", "kwargs"), LAYERS, ids=["gg", "lg", "dg-face", "dg-cell"])
def test_terms_are_the_layer_update(cls, kwargs):
    layer = _randomise(cls(dim=C, heads=HEADS, **kwargs))
    x = torch.randn(2, C, 9, 14, generator=torch.Generator().manual_seed(1))  # odd: padded and cropped back
    terms = layer.operator_terms(x)
    expected = {"q", "volume", "output"} | ({"flux"} if cls is DGOperatorLayer else set())
    assert set(terms) == expected
    assert all(t.shape == x.shape for t in terms.values())
    assert torch.equal(terms["output"], layer(x))  # same code path as forward, bit for bit
    qk = terms["volume"] + terms.get("flux", 0.0)
    assert_close(x + layer.mlp(x + qk), terms["output"], atol=1e-5, rtol=1e-5)


def test_flux_term_is_zero_without_interior_interfaces_or_penalty():
    x = torch.randn(1, C, 4, 4, generator=torch.Generator().manual_seed(2))
    # one element, zero-flux (Neumann) boundary: no face carries a flux
    single = _randomise(DGOperatorLayer(dim=C, heads=HEADS, element_size=4, variant="face", flux="avg_jump", boundary="neumann"))
    assert torch.count_nonzero(single.operator_terms(x)["flux"]) == 0
    # jump flux with a fixed τ = 0 on a 2×2 grid of elements: F = −τ[K] = 0 everywhere
    no_penalty = _randomise(DGOperatorLayer(dim=C, heads=HEADS, element_size=2, flux="jump", tau=0.0, learn_tau=False))
    flux = no_penalty.operator_terms(x)["flux"]
    assert torch.count_nonzero(flux) == 0
    assert np.isnan(interface_energy_ratio(channel_norm(flux), 2))  # nothing to compare, not "1"


@pytest.mark.parametrize("name", ["gg", "dgno-face"])
def test_capture_shapes_and_no_side_effects(name):
    torch.manual_seed(0)
    model = build_model(name, scale="demo").eval()
    h, w = 37, 50
    x = torch.rand(1, 1, h, w)
    with torch.no_grad():
        plain = model(x)
        with capture_operator_terms(model, (h, w)) as terms, capture_latents(model, (h, w)) as latents:
            hooked = model(x)
    assert all(torch.equal(a, b) for a, b in zip(plain, hooked))  # the network's outputs are untouched
    d = dict(zip(("s1", "s2", "s3"), model.hparams["decoder_channels"]))
    assert set(terms) == set(latents)
    for (scale, t), maps in terms.items():
        stride = {"s1": 4, "s2": 2, "s3": 1}[scale]
        shape = (1, d[scale], -(-h // stride), -(-w // stride))
        assert ("flux" in maps) == (name != "gg")
        assert all(tuple(m.shape) == shape for m in maps.values()), (scale, t)
        assert torch.equal(maps["output"], latents[(scale, t)])  # the recomputed layer output is the real one
    assert all(not layer._forward_hooks for layer, _ in operator_layers(model).values())


def test_image_views_of_the_finest_scale():
    torch.manual_seed(0)
    model = build_model("dgno-cell", scale="demo")
    x = torch.rand(1, 1, 40, 44)
    views = image_operator_views(model, x, label="DGNO-Cell", n_basis=3)
    assert [v.t for v in views] == list(range(model.hparams["num_layers"]))
    c3 = model.hparams["decoder_channels"][2]
    for v in views:
        assert (v.scale, v.stride, v.element_size) == ("s3", 1, 8)
        assert v.basis.shape == (3, 40, 44) and len(v.basis_channels) == 3 and max(v.basis_channels) < c3
        assert v.latent.shape == v.flux.shape == v.blurred.shape == v.restored.shape == (40, 44)
        assert np.isfinite(v.stats["flux_interface_ratio"]) and v.stats["flux_interface_ratio"] > 0
    assert views[0].basis_channels == views[-1].basis_channels  # same channels followed across t
    first_last = image_operator_views(model, x, steps=[0, -1])
    assert [v.t for v in first_last] == [0, model.hparams["num_layers"] - 1]


def test_interface_mask_by_hand():
    mask = interface_mask((10, 10), 4)
    band = np.array([3, 4, 7, 8])  # the pixels on both sides of the interfaces at 4 and 8
    expected = np.zeros((10, 10), bool)
    expected[band, :] = True
    expected[:, band] = True
    assert np.array_equal(mask, expected)  # rows/cols 0 and 9 (image border) are not interfaces
    assert not interface_mask((4, 4), 4).any()  # one element: no interior interface
    wide = interface_mask((12, 1), 6, width=2)[:, 0]
    assert np.flatnonzero(wide).tolist() == [4, 5, 6, 7]


def test_interface_energy_ratio():
    band = interface_mask((16, 16), 4)
    assert interface_energy_ratio(np.ones((16, 16)), 4) == pytest.approx(1.0)
    assert interface_energy_ratio(np.where(band, 2.0, 1.0), 4) == pytest.approx(4.0)  # energy = norm²
    assert interface_energy_ratio(np.where(band, 0.0, 1.0), 4) == 0.0
    assert np.isnan(interface_energy_ratio(np.zeros((16, 16)), 4))
    assert np.isnan(interface_energy_ratio(np.ones((4, 4)), 4))  # no interface pixel at all
    ring = boundary_element_mask((18, 16), 4)  # 5×4 elements, the last row partial
    assert ring[:4].all() and ring[16:].all() and ring[:, :4].all() and ring[:, 12:].all()
    assert not ring[4:16, 4:12].any()
    flux = np.where(ring, 3.0, 1.0)
    assert view_stats(np.ones((18, 16)), flux, 4)["flux_boundary_ratio"] == pytest.approx(9.0)
    stats = view_stats(np.ones((16, 16)), None, None)  # GG: no grid, no flux
    assert all(np.isnan(v) for v in stats.values())


def test_top_varying_channels():
    q = torch.zeros(1, 4, 5, 5)
    q[0, 2] = torch.arange(25.0).reshape(5, 5)
    q[0, 0, 0, 0] = 1.0
    assert top_varying_channels(q, 2) == [2, 0]
    assert top_varying_channels(q, 9) == [2, 0, 1, 3]  # capped at C, ties in channel order


def _view(label: str, t: int, element_size: int | None, flux: bool, hw=(150, 170)) -> OperatorView:
    rng = np.random.default_rng(t)
    img = rng.random(hw)
    return OperatorView(
        label=label, scale="s3", t=t, stride=1, element_size=element_size, blurred=img, restored=img,
        basis=rng.standard_normal((3, *hw)), basis_channels=[0, 4, 2], latent=img,
        flux=img if flux else None, stats={"flux_interface_ratio": 1.25 if flux else float("nan")},
    )  # fmt: skip


@pytest.mark.slow
def test_figure_writes_png_and_svg(tmp_path):
    views = [_view("DGNO-Cell", 0, 8, True), _view("DGNO-Cell", 1, 8, True), _view("SRNO (GG)", 1, None, False), _view("LG", 1, 8, False)]
    out = tmp_path / "operators_x.png"
    operator_maps(views, out, title="synthetic")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert out.with_suffix(".svg").exists()
    with pytest.raises(ValueError, match="at least one"):
        operator_maps([], tmp_path / "none.png", title="none")


def test_dataset_views_from_checkpoints(tmp_path):
    data = write_tiny_dataset(tmp_path / "data", n_test=2, levels=("a",))
    ckpts = {}
    for name in ("gg", "dgno-cell"):
        torch.manual_seed(0)
        model = build_model(name, scale="smoke")
        spec = {"name": name, "scale": "smoke", "hparams": model.hparams, "overrides": {}}
        ckpts[name] = str(tmp_path / f"{name}.pt")
        torch.save({"spec": spec, "state_dict": model.state_dict()}, ckpts[name])
    views, frame = dataset_operator_views(ckpts, {"gg": "GG", "dgno-cell": "Cell"}, data_dir=str(data), level="a", stat_images=2)
    t_last = build_model("gg", scale="smoke").hparams["num_layers"] - 1
    assert [(v.label, v.t) for v in views] == [("GG", 0), ("GG", t_last), ("Cell", 0), ("Cell", t_last)]
    assert (frame["n_images"] == 2).all() and (frame["figure_image"] == "img04").all()
    cell = frame[frame["method"] == "dgno-cell"]
    assert cell["flux_interface_ratio"].notna().all() and frame[frame["method"] == "gg"]["flux_interface_ratio"].isna().all()
    assert set(frame.columns) >= {"latent_interface_ratio", "flux_interface_ratio", "flux_interface_ratio_std", "flux_boundary_ratio", "flux_to_latent_energy"}


@pytest.mark.slow
def test_report_shows_the_figure_with_its_ratio(tmp_path):
    from dgno.report.build import build_report
    from dgno.workflow.config import load_config

    cfg = load_config(ROOT / "config.yaml")
    ds = cfg["experiments"]["operators"]["dataset"]
    results = tmp_path / "results"
    (results / "tables").mkdir(parents=True)
    (results / "figures").mkdir()
    pd.DataFrame(
        [
            {"method": "dgno-face", "label": "DGNO-Face", "scale": "s3", "t": t, "element_size": 8, "latent_interface_ratio": 1.0,
             "flux_interface_ratio": r, "flux_interface_ratio_std": 0.1, "flux_to_latent_energy": 0.2, "n_images": 8}
            for t, r in ((0, 1.1), (1, 1.3))
        ]
    ).to_csv(results / "tables" / f"operator_maps_{ds}.csv", index=False)  # fmt: skip
    operator_maps([_view("DGNO-Face", 0, 8, True, hw=(32, 32))], results / "figures" / f"operators_{ds}.png", title="t")
    build_report(cfg, results, tmp_path / "index.html")
    ops = tmp_path.joinpath("index.html").read_text().split('id="operators"')[1].split("</section>")[0]
    assert "DGNO-Face ×1.10 (t=0) → ×1.30 (t=1)" in ops and "mean over 8 test images" in ops
    assert 'alt="Learned operators on one blurred test image' in ops


@pytest.mark.slow
def test_rule_is_in_the_smoke_dag(tmp_path):
    proc = subprocess.run(
        [SNAKEMAKE, "-n", "--snakefile", str(ROOT / "Snakefile"), "--directory", str(tmp_path), "--configfile", str(ROOT / "tests" / "smoke.yaml")],
        capture_output=True,
        text=True,
        timeout=patient(300),
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "rule figure_operators:" in out
    assert "results/figures/operators_nuclei.png" in out and "results/tables/operator_maps_nuclei.csv" in out
