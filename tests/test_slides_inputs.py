"""Slides as scanners and other tools write them, built here with tifffile alone: what is read and how.

An Aperio-like SVS whose reduced levels are not exact halves, planar RGB, an ImageJ file, a macro
image stored before the slide, unusual OME units; glass that is not white and fluorescence with no
tissue; options that are no numbers; a slide named twice; a dry run over a finished run.
"""

from __future__ import annotations

import numpy as np
import pytest
import tifffile
from fixtures_slides import brightfield_slide, identity_model_file, network

from dgno.cli import main
from dgno.data.slides import brightfield_tissue
from dgno.io import InputError
from dgno.slides import focus as fm
from dgno.slides.reader import OpenSlideSlide, open_slide
from dgno.slides.restore import restore_slide

RNG = np.random.default_rng(7)


def _svs(path, image, *, tile=240):
    """An Aperio-like SVS: level 0, then levels of floor-halved sizes as top-level tiled JPEG pages."""
    levels = [image]
    while min(levels[-1].shape[:2]) > 400:
        h, w = levels[-1].shape[0] // 2, levels[-1].shape[1] // 2
        levels.append(levels[-1][: 2 * h, : 2 * w].reshape(h, 2, w, 2, 3).mean(axis=(1, 3)).round().astype(np.uint8))
    with tifffile.TiffWriter(path) as tw:
        for k, level in enumerate(levels):
            description = f"Aperio Image Library v12.0.5\r\n{image.shape[1]}x{image.shape[0]} [0,0 {image.shape[1]}x{image.shape[0]}] ({tile}x{tile}) JPEG/RGB Q=90|AppMag = 40|MPP = 0.2520" if k == 0 else ""
            tw.write(level, tile=(tile, tile), photometric="rgb", compression="jpeg", description=description, metadata=None, subfiletype=0)
    return levels


def test_an_svs_level_whose_downsample_is_no_whole_number_is_read_pixel_for_pixel(tmp_path):
    src = tmp_path / "scan.svs"
    levels = _svs(src, brightfield_tissue((1531, 2077), seed=3))
    with open_slide(src) as slide:
        assert isinstance(slide, OpenSlideSlide) and slide.info.vendor == "aperio" and slide.info.mpp == pytest.approx((0.252, 0.252))
        h, w = slide.info.levels[1]
        assert slide.info.downsample(1) != 2.0  # 2077 / 1038
        got = slide.read(1, 0, 0, h, w)
    with tifffile.TiffFile(src) as tf:
        assert np.array_equal(got, tf.pages[1].asarray())  # the level's own pixels, not OpenSlide's interpolation
    assert levels[1].shape == got.shape


def test_planar_rgb_is_brightfield_like_interleaved_rgb(tmp_path):
    img = brightfield_tissue((600, 700), seed=2)
    tifffile.imwrite(tmp_path / "planar.ome.tif", np.moveaxis(img, -1, 0), photometric="rgb", planarconfig="separate", tile=(256, 256), metadata={"axes": "SYX"})
    tifffile.imwrite(tmp_path / "contig.ome.tif", img, photometric="rgb", tile=(256, 256))
    with open_slide(tmp_path / "planar.ome.tif") as planar, open_slide(tmp_path / "contig.ome.tif") as contig:
        assert planar.info.photometric == "rgb" and planar.info.channel_names == ("R", "G", "B")
        assert np.array_equal(planar.read(0, 10, 20, 300, 400), contig.read(0, 10, 20, 300, 400))


def test_imagej_pixel_size_and_labels_and_ome_units_are_read(tmp_path):
    img = RNG.integers(0, 4000, (2, 500, 600)).astype(np.uint16)
    tifffile.imwrite(tmp_path / "fiji.tif", img, imagej=True, resolution=(1 / 0.4, 1 / 0.4), metadata={"axes": "CYX", "unit": "um", "Labels": ["DNA", "Actin"]})
    tifffile.imwrite(tmp_path / "angstrom.ome.tif", img[0], metadata={"axes": "YX", "PhysicalSizeX": 5000.0, "PhysicalSizeXUnit": "Å", "PhysicalSizeY": 5000.0, "PhysicalSizeYUnit": "Å"})
    with open_slide(tmp_path / "fiji.tif") as fiji, open_slide(tmp_path / "angstrom.ome.tif") as ang:
        assert fiji.info.mpp == pytest.approx((0.4, 0.4)) and fiji.info.channel_names == ("DNA", "Actin")
        assert ang.info.mpp == pytest.approx((0.5, 0.5))


def test_the_largest_image_of_a_file_is_the_slide_not_a_macro_before_it(tmp_path):
    macro = RNG.integers(0, 255, (100, 200, 3)).astype(np.uint8)
    cells = RNG.integers(0, 4000, (2, 700, 900)).astype(np.uint16)
    with tifffile.TiffWriter(tmp_path / "two.ome.tif", ome=True) as tw:
        tw.write(macro, photometric="rgb", metadata={"axes": "YXS", "Name": "macro"})
        tw.write(cells, photometric="minisblack", tile=(256, 256), metadata={"axes": "CYX", "Name": "cells", "Channel": {"Name": ["DAPI", "GFP"]}, "PhysicalSizeX": 0.65, "PhysicalSizeY": 0.65})
    with open_slide(tmp_path / "two.ome.tif") as slide:
        assert slide.info.levels[0] == (700, 900) and slide.info.channel_names == ("DAPI", "GFP") and slide.info.mpp == pytest.approx((0.65, 0.65))
        assert np.array_equal(slide.read(0, 0, 0, 700, 900, (1,))[..., 0], cells[1])


@pytest.mark.parametrize("glass", [235, 240, 244])
def test_glass_that_is_not_white_is_not_tissue(tmp_path, glass):
    img = np.clip(glass + RNG.normal(0, 2, (700, 900, 3)), 0, 255).astype(np.uint8)
    tifffile.imwrite(tmp_path / "glass.tif", img, photometric="rgb", tile=(256, 256))
    summary = restore_slide(tmp_path / "glass.tif", tmp_path / "out", network=network(3), dry_run=True, progress=False)
    assert summary["tiles"]["tissue"] == 0


def test_camera_noise_alone_is_no_fluorescence_tissue_and_real_tissue_still_is(tmp_path):
    noise = np.clip(100 + RNG.normal(0, 5, (2, 700, 900)), 0, None).astype(np.uint16)
    tifffile.imwrite(tmp_path / "dark.ome.tif", noise, tile=(256, 256), metadata={"axes": "CYX"})
    summary = restore_slide(tmp_path / "dark.ome.tif", tmp_path / "out", network=network(1), channel="0", dry_run=True, progress=False)
    assert summary["tiles"]["tissue"] == 0
    thumb = fm.Thumbnail(np.stack([noise[0]] * 1, axis=-1).astype(np.float32)[::8, ::8], (8.0, 8.0))
    assert fm.tissue_rule(thumb, photometric="grey", channel=0, dtype=np.uint16).threshold == np.inf


def test_options_that_are_no_numbers_and_a_brightfield_network_on_fluorescence_are_refused(tmp_path):
    src = tmp_path / "s.tif"
    brightfield_slide(src, shape=(300, 300), regions=[])
    for kw, message in [(dict(mpp=0.0), "--mpp 0.0: must be a pixel size"), (dict(mpp=-2.0), "--mpp -2.0"), (dict(margin=float("nan")), "--focus-margin nan")]:
        with pytest.raises(InputError, match=message):
            restore_slide(src, tmp_path / "o", network=network(3), progress=False, **kw)
    three = RNG.integers(0, 4000, (3, 300, 300)).astype(np.uint16)
    tifffile.imwrite(tmp_path / "f3.ome.tif", three, tile=(256, 256), metadata={"axes": "CYX"})
    with pytest.raises(InputError, match=r"a 3-channel uint16 slide, but authorsnet restores 3-channel"):
        restore_slide(tmp_path / "f3.ome.tif", tmp_path / "o", network=network(3, name="authorsnet", strict=True), progress=False)


def test_a_slide_named_twice_is_restored_once_and_a_dry_run_never_replaces_a_finished_run(tmp_path, capsys):
    src = tmp_path / "s.tif"
    brightfield_slide(src, shape=(300, 300), regions=[])
    model = identity_model_file(tmp_path / "id.pt", 3)
    base = ["deblur-slide", str(src), "--checkpoint", str(model), "--device", "cpu", "--threads", "1", "--output", str(tmp_path / "out")]
    assert main([*base[:2], str(src), *base[2:]]) == 0
    assert capsys.readouterr().out.count("s.tif") == 1
    assert main([*base, "--dry-run"]) == 1
    assert "s.ome.tif exists already. Fix: pass --overwrite" in capsys.readouterr().err


def test_a_folder_as_slide_and_a_refused_compression_leave_nothing_behind(tmp_path):
    (tmp_path / "data").mkdir()
    with pytest.raises(InputError, match="is a folder, not a slide file"):
        restore_slide(tmp_path / "data", tmp_path / "out", network=network(3), progress=False)
    grey = RNG.integers(0, 4000, (300, 300)).astype(np.uint16)
    tifffile.imwrite(tmp_path / "g.ome.tif", grey, tile=(256, 256), metadata={"axes": "YX"})
    with pytest.raises(InputError, match="--compression jpeg needs an 8-bit RGB slide"):
        restore_slide(tmp_path / "g.ome.tif", tmp_path / "out", network=network(1), compression="jpeg", progress=False)
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").iterdir()) == []
