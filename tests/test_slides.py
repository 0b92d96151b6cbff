"""Whole slides in, restored pyramidal OME-TIFFs out (dgno.slides): layouts, focus decisions, blending, levels.

Every slide is written here (fixtures_slides): an SVS-like tiled pyramidal RGB TIFF with JPEG tiles
(read through OpenSlide as ``generic-tiff``), a 16-bit two-channel OME-TIFF with SubIFD levels, a
single-level TIFF in strips and an RGBA TIFF; networks are tiny callables, so nothing is trained.
"""

from __future__ import annotations

import json

import numpy as np
import openslide
import pandas as pd
import pytest
import tifffile
import torch
from fixtures_slides import (
    BLURRED,
    OVERLAP,
    STEP,
    affine,
    blurred_share,
    brightfield_slide,
    conv_network,
    fluorescence_slide,
    network,
)

from dgno.data.slides import brightfield_tissue, write_slide
from dgno.io import InputError
from dgno.slides.reader import open_slide
from dgno.slides.restore import restore_slide


def _level0(path):
    with open_slide(path) as s:
        h, w = s.info.levels[0]
        return s.read(0, 0, 0, h, w)


@pytest.fixture(scope="module")
def bf_slide(tmp_path_factory):
    path = tmp_path_factory.mktemp("bf") / "section.tif"
    brightfield_slide(path)
    return path


def _rgba(path):
    img = brightfield_tissue((700, 900), seed=5)
    alpha = np.full((*img.shape[:2], 1), 255, np.uint8)
    alpha[:, :60] = 0  # a strip the scanner did not image
    write_slide(path, np.concatenate([img, alpha], -1), layout="generic-tiff", mpp=0.5)


LAYOUTS = {
    "svs-like": lambda p: brightfield_slide(p, shape=(700, 900), regions=[]),
    "ome-16bit": lambda p: fluorescence_slide(p, shape=(650, 777), regions=[]),
    "single-level": lambda p: brightfield_slide(p, shape=(611, 837), layout="single-level", regions=[], mpp=None),
    "rgba": _rgba,
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_identity_network_gives_back_every_pixel_in_a_readable_pyramid(layout, tmp_path):
    src = tmp_path / f"{layout}.tif"
    LAYOUTS[layout](src)
    with open_slide(src) as s:
        info = s.info
    channels = 3 if info.photometric in ("rgb", "rgba") else 1
    summary = restore_slide(src, tmp_path / "out", network=network(channels), channel="DAPI" if channels == 1 else None,
                            restore="all", min_tissue=0.0, progress=False)  # fmt: skip
    out = tmp_path / "out" / f"{layout}.ome.tif"
    assert summary["tiles"]["restored"] == summary["tiles"]["total"] > 4  # every tile went through the network and the blend
    before = _level0(src)
    with tifffile.TiffFile(out) as tf:
        series = tf.series[0]
        after = series.levels[0].asarray()
        after = np.moveaxis(after, 0, -1) if series.axes == "CYX" else after.reshape(before.shape)
        levels = len(series.levels)
        assert tf.is_ome and levels == 2 and series.levels[1].shape[-2 if series.axes == "CYX" else 0] == -(-info.levels[0][0] // 2)
        assert after.dtype == info.dtype and np.array_equal(after, before)  # lossless, same dtype and channel order
        assert all(page.keyframe.is_tiled and page.keyframe.tilewidth == 512 for level in series.levels for page in level.pages)
    with open_slide(out) as back:
        assert back.info.levels[0] == info.levels[0] and back.info.mpp == info.mpp and back.info.channel_names == info.channel_names
    reopened = openslide.OpenSlide(str(out))  # as generic-tiff: the pyramid from the top-level page chain
    assert reopened.level_dimensions[0] == info.levels[0][::-1]
    if series.axes != "CYX":  # one page per level: OpenSlide sees every level, at the same data as tifffile
        assert reopened.level_count == levels
        level1 = np.asarray(reopened.read_region((0, 0), 1, reopened.level_dimensions[1]))
        with tifffile.TiffFile(out) as tf:
            expected = tf.series[0].levels[1].asarray()
        if info.photometric == "rgb":
            assert np.array_equal(level1[..., :3], expected)
    if info.photometric == "rgb":
        assert np.array_equal(np.asarray(reopened.read_region((0, 0), 0, reopened.level_dimensions[0]))[..., :3], before)
    if info.mpp is not None:
        assert float(reopened.properties[openslide.PROPERTY_NAME_MPP_X]) == pytest.approx(info.mpp[0], rel=1e-6)
    else:
        assert openslide.PROPERTY_NAME_MPP_X not in reopened.properties


def test_focus_finds_the_blurred_tiles_and_leaves_the_rest_byte_identical(bf_slide, tmp_path):
    summary = restore_slide(bf_slide, tmp_path, network=network(fn=affine, name="affine"), progress=False)
    tiles = pd.read_csv(tmp_path / "section.tiles.csv")
    tissue = tiles[tiles.label != "background"]
    truth = np.array([blurred_share(BLURRED, (y, x, h, w)) >= 0.5 for y, x, h, w in zip(tissue.y, tissue.x, tissue.height, tissue.width)])
    found = tissue.restored.to_numpy()
    tp = int((truth & found).sum())
    assert truth.sum() >= 10 and tp / found.sum() >= 0.9 and tp / truth.sum() >= 0.9, (tp, found.sum(), truth.sum())
    assert summary["tiles"]["restored"] == found.sum() and summary["focus"]["threshold"] > summary["focus"]["reference"]
    before, after = _level0(bf_slide), tifffile.imread(tmp_path / "section.ome.tif")
    covered = np.zeros(before.shape[:2], bool)
    for y, x, h, w in tiles[tiles.restored][["y", "x", "height", "width"]].itertuples(index=False):
        covered[y : y + h, x : x + w] = True
    assert np.array_equal(after[~covered], before[~covered])  # in-focus tissue and glass: the input's bytes
    assert (after[covered] != before[covered]).mean() > 0.9
    # no seam where a restored tile meets a copied one: the change fades in across the 32-px overlap
    r = tiles[tiles.restored & (tiles.col > 0)].iloc[0]
    left_copied = not tiles[(tiles.row == r.row) & (tiles.col == r.col - 1)].restored.iloc[0]
    if left_copied:
        y = int(r.y + r.height // 2)
        change = np.abs(after[y, r.x - 4 : r.x + OVERLAP + 4].astype(float) - before[y, r.x - 4 : r.x + OVERLAP + 4]).mean(-1)
        assert change[:4].max() == 0 and change[-4:].min() > 10 and np.abs(np.diff(change)).max() <= 3.0


def test_fluorescence_channel_by_name_others_copied_16_bits_kept(tmp_path):
    src = tmp_path / "cells.ome.tif"
    img = fluorescence_slide(src)
    with pytest.raises(InputError, match=r"cells\.ome\.tif.*--channel.*0 DAPI, 1 Actin"):
        restore_slide(src, tmp_path / "out", network=network(1), progress=False)
    summary = restore_slide(src, tmp_path / "out", network=network(1, fn=affine, normalise="minmax", name="affine"), channel="dapi", restore="all", progress=False)
    with tifffile.TiffFile(tmp_path / "out" / "cells.ome.tif") as tf:
        out = tf.series[0].levels[0].asarray()
        names = [c["Name"] for c in tifffile.xml2dict(tf.ome_metadata)["OME"]["Image"]["Pixels"]["Channel"]]
    assert out.dtype == np.uint16 and out.shape == img.shape and names == ["DAPI", "Actin"]
    assert np.array_equal(out[1], img[1]) and not np.array_equal(out[0], img[0])
    assert summary["restored_channels"] == ["DAPI"] and summary["normalisation"]["kind"] == "minmax"
    lo, scale = summary["normalisation"]["lo"], summary["normalisation"]["hi"] - summary["normalisation"]["lo"]
    tiles = pd.read_csv(tmp_path / "out" / "cells.tiles.csv")
    r = tiles[tiles.restored].iloc[len(tiles[tiles.restored]) // 2]
    cy, cx = int(r.y + r.height // 2), int(r.x + r.width // 2)  # a tile's centre: its own restoration only
    expected = np.clip(np.rint(((img[0, cy, cx] - lo) / scale * 0.8 + 0.1) * scale + lo), 0, 65535)
    assert abs(int(out[0, cy, cx]) - expected) <= 1  # per-slide min-max in, mapped back to 16 bits out


def test_brightfield_networks_refuse_fluorescence_and_back(tmp_path, bf_slide):
    src = tmp_path / "cells.ome.tif"
    fluorescence_slide(src, shape=(300, 300), regions=[])
    with pytest.raises(InputError, match=r"cells\.ome\.tif: a 2-channel uint16 slide, but rgbnet restores 3-channel.*Fix: use a one-channel network"):
        restore_slide(src, tmp_path / "o", network=network(3, name="rgbnet"), progress=False)
    with pytest.raises(InputError, match=r"section\.tif: a 8-bit RGB brightfield slide, but w1net restores 1-channel.*DGNO_3DHistech"):
        restore_slide(bf_slide, tmp_path / "o", network=network(1, name="w1net", strict=True), progress=False)


def test_tiles_agree_with_a_whole_image_run_along_the_tile_borders(tmp_path):
    """The same CNN (receptive radius 9 px, zero padding) tile by tile and on the whole slide at once."""
    src = tmp_path / "s.tif"
    img = brightfield_slide(src, shape=(900, 1100), layout="ome-tiff", regions=[])
    net = conv_network()

    def fn(x):
        return x + 0.5 * net(x)

    restore_slide(src, tmp_path / "o", network=network(fn=fn, name="cnn"), restore="all", min_tissue=0.0, progress=False)
    tiled = tifffile.imread(tmp_path / "o" / "s.ome.tif").astype(float)
    with torch.no_grad():
        whole = fn(torch.from_numpy(img.transpose(2, 0, 1)[None] / 255.0).float())[0].numpy().transpose(1, 2, 0)
    whole = np.clip(np.rint(whole * 255), 0, 255)
    border = np.zeros(img.shape[:2], bool)
    for k in range(1, 5):  # every overlap band between neighbouring tiles, where tiles are blended
        border[k * STEP : k * STEP + OVERLAP] = True
        border[:, k * STEP : k * STEP + OVERLAP] = True
    diff = np.abs(tiled - whole)
    assert np.abs(whole - img).mean() > 1.0  # the network changes the image
    assert diff[border].mean() <= 0.01 and diff[border].max() <= 1.0  # stated tolerance: ≤ 1 grey level, mean ≤ 0.01
    assert diff[~border].max() <= 1.0


def test_dry_run_counts_and_estimates_without_writing_a_slide(bf_slide, tmp_path):
    summary = restore_slide(bf_slide, tmp_path, network=network(fn=affine, name="affine"), dry_run=True, progress=False)
    assert not (tmp_path / "section.ome.tif").exists()
    assert (tmp_path / "section.focus.png").stat().st_size > 1000 and (tmp_path / "section.tiles.csv").exists()
    saved = json.loads((tmp_path / "section.summary.json").read_text())
    assert saved["dry_run"] and saved["tiles"] == summary["tiles"] and summary["tiles"]["restored"] > 0
    assert summary["seconds_per_tile"] > 0 and summary["estimated_seconds"] == pytest.approx(summary["seconds_per_tile"] * summary["tiles"]["restored"])


def test_level_and_resolution_choice(tmp_path):
    src = tmp_path / "s.tif"
    brightfield_slide(src, shape=(1200, 1500), layout="ome-tiff", regions=[], mpp=0.25)
    summary = restore_slide(src, tmp_path / "a", network=network(), mpp=0.5, restore="all", progress=False)
    assert summary["level"] == 1 and summary["level_size"] == [600, 750] and summary["mpp"] == [0.5, 0.5]
    with tifffile.TiffFile(tmp_path / "a" / "s.ome.tif") as tf:
        assert tf.series[0].levels[0].shape == (600, 750, 3)
        assert float(tifffile.xml2dict(tf.ome_metadata)["OME"]["Image"]["Pixels"]["PhysicalSizeX"]) == 0.5
    with pytest.raises(InputError, match=r"s\.tif: no level 7.*Fix: pass --level 0 to 3"):
        restore_slide(src, tmp_path / "b", network=network(), level=7, progress=False)
    bare = tmp_path / "bare.tif"
    brightfield_slide(bare, shape=(300, 300), layout="single-level", regions=[], mpp=None)
    with pytest.raises(InputError, match=r"bare\.tif: the slide does not record its pixel size.*--level"):
        restore_slide(bare, tmp_path / "c", network=network(), mpp=0.5, progress=False)


def test_jpeg_output_for_8_bit_rgb_only(tmp_path):
    src = tmp_path / "he.tif"
    img = brightfield_slide(src, shape=(600, 700), layout="single-level", regions=[])
    restore_slide(src, tmp_path / "o", network=network(fn=affine), restore="all", compression="jpeg", progress=False)
    with tifffile.TiffFile(tmp_path / "o" / "he.ome.tif") as tf:
        assert tf.pages[0].compression == tifffile.COMPRESSION.JPEG
        out = tf.series[0].levels[0].asarray().astype(float)
    expected = np.clip(np.rint((img / 255.0 * 0.8 + 0.1) * 255), 0, 255)
    assert np.abs(out - expected).mean() < 3.0  # lossy, but the restoration
    fl = tmp_path / "fl.ome.tif"
    fluorescence_slide(fl, shape=(300, 300), regions=[])
    with pytest.raises(InputError, match=r"fl\.ome\.tif: --compression jpeg needs an 8-bit RGB slide.*Fix: use the default lossless"):
        restore_slide(fl, tmp_path / "o", network=network(1), channel="0", compression="jpeg", progress=False)
