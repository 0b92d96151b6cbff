"""Local attribution maps: blur path, path-integrated gradients, locality, and the summary numbers."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from dgno.analysis.lam import (
    attribution_radius,
    blur_path,
    crop_box,
    dataset_lam,
    diffusion_index,
    edge_window,
    gaussian_blur,
    gini,
    local_attribution_map,
    local_feature,
    path_integrated_gradients,
)


def image(seed: int = 0, shape: tuple[int, int] = (40, 48)) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.rand(1, 1, *shape, generator=g, dtype=torch.float64)


def local_net(x: torch.Tensor) -> torch.Tensor:
    """A fixed 3×3 filter: each output pixel sees only its 8 neighbours."""
    k = torch.tensor([[0.0, -1.0, 0.0], [-1.0, 5.0, -1.0], [0.0, -1.0, 0.0]], dtype=x.dtype).view(1, 1, 3, 3)
    return F.conv2d(F.pad(x, (1, 1, 1, 1), mode="replicate"), k)


def global_net(x: torch.Tensor) -> torch.Tensor:
    """Output = local filter + a ramp scaled by the squared image mean: every input pixel changes the
    output's gradients (a constant would not), so the attribution spreads over the image."""
    ramp = torch.linspace(0.0, 4.0, x.shape[-1], dtype=x.dtype)
    return local_net(x) + ramp * x.mean(dim=(-2, -1), keepdim=True) ** 2


def test_blur_path_runs_from_blurred_to_the_input_and_keeps_the_mean():
    x = image()
    path = blur_path(x, sigma_max=4.0, steps=8)
    assert path.shape == (9, 1, 40, 48)
    assert torch.equal(path[-1], x[0])
    assert torch.allclose(path.mean(dim=(-2, -1)), x.mean().expand(9, 1), atol=5e-3)  # reflected borders: ≈ mean-preserving
    assert path[0].std() < 0.3 * x.std()  # the structure is blurred away at α = 0
    assert torch.equal(gaussian_blur(x, 0.0), x)
    with pytest.raises(ValueError, match="steps"):
        blur_path(x, sigma_max=4.0, steps=0)


def test_path_integrated_gradients_add_up_to_the_change_of_the_local_feature():
    """Σ_p PIG(p) → D(F(x)) − D(F(γ(0))) with fine steps (completeness of the path integral)."""
    x, window = image(1), (12, 14, 8)
    pig = path_integrated_gradients(global_net, x, window, sigma_max=3.0, steps=256, batch=64)
    with torch.no_grad():
        start = blur_path(x, sigma_max=3.0, steps=1)[:1]
        change = float(local_feature(global_net(x), window) - local_feature(global_net(start), window))
    assert float(pig.sum()) == pytest.approx(change, rel=0.02)


def test_a_local_network_is_attributed_only_inside_its_receptive_field():
    """3×3 filter, forward differences one pixel wide: nothing outside the window grown by two pixels."""
    x, (y0, x0, size) = image(2), (15, 20, 6)
    lam = local_attribution_map(local_net, x, (y0, x0, size), sigma_max=3.0, steps=16)
    inside = np.zeros_like(lam, dtype=bool)
    inside[y0 - 1 : y0 + size + 2, x0 - 1 : x0 + size + 2] = True
    assert not lam[~inside].any()
    assert lam[inside].sum() > 0
    glob = local_attribution_map(global_net, x, (y0, x0, size), sigma_max=3.0, steps=16)
    assert diffusion_index(glob) > diffusion_index(lam)
    assert attribution_radius(glob, (y0, x0, size)) >= attribution_radius(lam, (y0, x0, size))


def test_window_must_fit():
    with pytest.raises(ValueError, match="does not fit"):
        local_attribution_map(local_net, image(), (35, 0, 5))


def test_gini_and_diffusion_index_limits():
    assert gini(np.ones(10)) == pytest.approx(0.0)
    one_hot = np.zeros(10)
    one_hot[3] = 2.0
    assert gini(one_hot) == pytest.approx(0.9)
    assert diffusion_index(np.ones((4, 4))) == pytest.approx(100.0)
    assert diffusion_index(-one_hot) == pytest.approx(10.0)  # |LAM|: the sign does not matter
    with pytest.raises(ValueError):
        gini(np.zeros(3))


def test_attribution_radius_is_the_distance_holding_half_the_mass():
    a = np.zeros((21, 21))
    a[10, 10] = 1.0  # the centre of the 1-px window at (10, 10)
    a[10, 16] = 1.0  # 6 px away
    a[3, 10] = 2.0  # 7 px away
    assert attribution_radius(a, (10, 10, 1)) == pytest.approx(6.0)  # 1 + 1 of 4 within 6 px
    assert attribution_radius(a, (10, 10, 1), fraction=0.25) == pytest.approx(0.0)


def test_edge_window_finds_the_structured_region():
    gt = np.zeros((50, 60))
    gt[30:40, 40:52] = 1.0  # one bright block; its edges are the only structure
    y0, x0, size = edge_window(gt, 12)
    assert size == 12
    assert 28 <= y0 + size <= 40 + size and 38 <= x0 + size <= 52 + size  # the window overlaps the block's edges
    assert 1 <= y0 <= 49 - size and 1 <= x0 <= 59 - size
    with pytest.raises(ValueError, match="does not fit"):
        edge_window(gt, 49)


def test_crop_box_centres_on_the_window_and_stays_inside():
    assert crop_box((100, 80), (10, 60, 8), None) == (0, 0, 100, 80)
    assert crop_box((100, 80), (10, 60, 8), 200) == (0, 0, 100, 80)
    y0, x0, h, w = crop_box((100, 80), (10, 60, 8), 32)
    assert (h, w) == (32, 32) and y0 == 0 and x0 == 48  # clamped to the top and right borders
    assert crop_box((100, 80), (50, 30, 8), 32)[:2] == (38, 18)  # centred: window centre 54, 34


def _checkpoints(tmp_path, names):
    from dgno.models.registry import build_model

    out = {}
    for name in names:
        torch.manual_seed(0)
        model = build_model(name, scale="smoke")
        spec = {"name": name, "scale": "smoke", "hparams": model.hparams, "overrides": {}}
        out[name] = str(tmp_path / f"{name}.pt")
        torch.save({"spec": spec, "state_dict": model.state_dict()}, out[name])
    return out


def test_dataset_lam_from_checkpoints_and_figure(tmp_path):
    from conftest import write_tiny_dataset

    from dgno.report.figures import lam_maps

    data = write_tiny_dataset(tmp_path / "data", n_test=2, levels=("a",), size=(40, 44))
    ckpts = _checkpoints(tmp_path, ["gg", "dgno-cell"])
    views, frame = dataset_lam(ckpts, {"gg": "GG"}, data_dir=str(data), level="a", image=1, window_size=8, crop=32, steps=3)
    assert [v.label for v in views] == ["GG", "dgno-cell"]
    assert list(frame["image"]) == ["img05", "img05"] and (frame["crop"] == "32x32").all()
    for v in views:
        assert v.attribution.shape == v.blurred.shape == (32, 32) and v.attribution.sum() > 0
        y0, x0, size = v.window
        assert y0 >= 0 and y0 + size < 32 and x0 >= 0 and x0 + size < 32
        assert 0 <= v.di <= 100 and np.isfinite(v.psnr)
    out = tmp_path / "lam.png"
    lam_maps(views, out, title="tiny")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.with_suffix(".svg").exists()
    with pytest.raises(ValueError, match="test image index"):
        dataset_lam(ckpts, {}, data_dir=str(data), level="a", image=2)
    with pytest.raises(ValueError, match="at least one"):
        lam_maps([], tmp_path / "none.png", title="none")


def test_config_rejects_a_lam_level_that_is_not_tested():
    import yaml
    from conftest import ROOT

    from dgno.workflow.config import ConfigError, load_schema, validate_config

    cfg = yaml.safe_load((ROOT / "config.yaml").read_text())
    cfg["experiments"]["lam"]["level"] = "z99"
    with pytest.raises(ConfigError, match="experiments.lam.level"):
        validate_config(cfg, load_schema(ROOT / "workflow/schemas/config.schema.yaml"))
    cfg["experiments"]["lam"].pop("level")
    cfg["experiments"]["lam"]["windows"] = 8
    with pytest.raises(ConfigError, match="windows"):
        validate_config(cfg, load_schema(ROOT / "workflow/schemas/config.schema.yaml"))


def test_report_section_compares_the_methods(tmp_path):
    import pandas as pd
    from conftest import ROOT

    from dgno.report.build import build_report
    from dgno.workflow.config import load_config

    cfg = load_config(ROOT / "config.yaml")
    ds = cfg["experiments"]["lam"]["dataset"]
    (tmp_path / "results" / "tables").mkdir(parents=True)
    rows = [("nafnet", "NAFNet", 9.0, 6.0), ("mpt", "MPT", 8.0, 2.0), ("gg", "SRNO (GG)", 12.0, 7.5), ("dgno-cell", "DGNO-Cell", 4.0, 3.0)]
    pd.DataFrame(
        [
            {"method": m, "label": lab, "image": "t0", "level": "z02", "window_y0": 5, "window_x0": 6, "window_size": 16, "crop": "96x96",
             "sigma_max": 8.0, "steps": 24, "di": di, "r50_px": r, "psnr": 30.0}
            for m, lab, di, r in rows
        ]
    ).to_csv(tmp_path / "results" / "tables" / f"lam_{ds}.csv", index=False)  # fmt: skip
    build_report(cfg, tmp_path / "results", tmp_path / "index.html")
    section = (tmp_path / "index.html").read_text().split('id="lam"')[1].split("</section>")[0]
    assert "DGNO-Cell has r₅₀ = 3.0 px, smaller than 2 of 3 other methods (NAFNet, SRNO (GG))" in section
    assert "snakemake --cores all results/figures/lam_" in section  # no figure yet: the command that makes it


def test_cli_lam_on_a_users_image(tmp_path, capsys):
    """`dgno lam` on an image file without ground truth: figure, SVG and CSV written, DI printed; a window
    outside the image is a one-line error naming the file (exit 2)."""
    import pandas as pd
    import tifffile

    from dgno.cli import main

    ckpts = _checkpoints(tmp_path, ["dgno-cell", "gg"])
    img = tmp_path / "mine.tif"
    rng = np.random.default_rng(0)
    tifffile.imwrite(img, (rng.random((36, 40)) * 65535).astype(np.uint16))
    out = tmp_path / "figs" / "lam.png"
    args = ["lam", str(img), "--checkpoint", ckpts["dgno-cell"], "--checkpoint", ckpts["gg"], "--label", "DG", "--label", "GG"]
    assert main([*args, "--out", str(out), "--window-size", "8", "--steps", "2", "--device", "cpu"]) == 0
    frame = pd.read_csv(out.with_suffix(".csv"))
    assert list(frame["label"]) == ["DG", "GG"] and frame["psnr"].isna().all() and frame["di"].between(0, 100).all()
    assert out.exists() and out.with_suffix(".svg").exists()
    assert "DG" in capsys.readouterr().out
    assert main([*args, "--out", str(out), "--window", "30", "30", "8", "--steps", "1", "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert str(img) in err and "Fix:" in err
    assert main(["lam", str(img), "--checkpoint", ckpts["gg"], "--label", "a", "--label", "b", "--out", str(out)]) == 2
