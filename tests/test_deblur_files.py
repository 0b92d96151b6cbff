"""`dgno deblur` on microscope files written here: dtype and range, ImageJ/OME metadata, stacks, channels.

The identity model (all weights zero) returns its input, so an output equal to the input proves that
normalisation, axes, metadata and the file round trip lose nothing; the random model proves planes are
restored each on their own.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

import imagecodecs
import numpy as np
import pytest
import tifffile
from fixtures_deblur import model_file

from dgno.cli import main
from dgno.inference import deblur
from dgno.inference.deblur import deblur_files

RNG = np.random.default_rng(0)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    return {
        "identity": model_file(root / "identity.pt", identity=True),
        "identity-minmax": model_file(root / "identity_minmax.pt", identity=True, normalise="minmax"),
        "random": model_file(root / "random.pt"),
        "random-minmax": model_file(root / "random_minmax.pt", normalise="minmax"),
        "rgb": model_file(root / "rgb.pt", in_channels=3),
    }


def _deblur(src, out, checkpoint, *extra):
    return main(["deblur", *map(str, src if isinstance(src, list) else [src]), "--checkpoint", str(checkpoint), "--output", str(out), "--device", "cpu", *extra])


@pytest.mark.parametrize(
    "name, image",
    [
        ("uint32_counts", RNG.integers(0, 4000, (40, 50)).astype(np.uint32)),
        ("int16_negatives", RNG.integers(-500, 3000, (40, 50)).astype(np.int16)),
        ("twelve_bit", RNG.integers(80, 4096, (40, 50)).astype(np.uint16)),
        ("float32_counts", (RNG.random((40, 50)) * 700 - 20).astype(np.float32)),
    ],
)
@pytest.mark.parametrize("model", ["identity", "identity-minmax"])
def test_data_that_do_not_fill_their_dtype_come_back_unchanged(models, tmp_path, name, image, model):
    src = tmp_path / f"{name}.tif"
    tifffile.imwrite(src, image)
    assert _deblur(src, tmp_path / "out", models[model]) == 0
    out = tifffile.imread(tmp_path / "out" / src.name)
    assert out.dtype == image.dtype and out.shape == image.shape
    if image.dtype.kind == "f":
        np.testing.assert_allclose(out, image, rtol=1e-5, atol=1e-4)
    else:
        np.testing.assert_array_equal(out, image)


def test_twelve_bit_data_restore_as_the_same_image_at_full_range(models, tmp_path):
    scene = RNG.integers(100, 4096, (48, 56)).astype(np.uint16)
    tifffile.imwrite(tmp_path / "twelve.tif", scene)
    tifffile.imwrite(tmp_path / "full.tif", scene * np.uint16(16))
    for model in ("random", "random-minmax"):
        assert _deblur([tmp_path / "twelve.tif", tmp_path / "full.tif"], tmp_path / model, models[model]) == 0
        twelve, full = (tifffile.imread(tmp_path / model / n).astype(float) for n in ("twelve.tif", "full.tif"))
        assert np.abs(twelve * 16 - full).max() <= 16 * 2, model  # alike up to rounding (and 65535 vs 16·4095)
        assert not np.array_equal(twelve, scene), model  # and restored, not copied


def test_imagej_hyperstack_keeps_pixel_size_unit_spacing_and_metadata(models, tmp_path):
    stack = RNG.integers(0, 4096, (4, 2, 40, 50)).astype(np.uint16)
    src = tmp_path / "hyper.tif"
    labels = [f"z{z}c{c}" for z in range(4) for c in range(2)]
    tifffile.imwrite(src, stack, imagej=True, resolution=(1 / 0.325, 1 / 0.325), metadata={"axes": "ZCYX", "unit": "um", "spacing": 0.5, "Info": "objective 40x", "Labels": labels})
    assert _deblur(src, tmp_path / "out", models["identity"]) == 0
    with tifffile.TiffFile(tmp_path / "out" / "hyper.tif") as tif:
        assert tif.is_imagej and tif.series[0].axes == "ZCYX" and tif.series[0].shape == stack.shape
        meta = tif.imagej_metadata
        assert meta["unit"] == "um" and meta["spacing"] == 0.5 and meta["Info"] == "objective 40x" and meta["Labels"] == labels
        np.testing.assert_allclose(tif.pages[0].resolution, (1 / 0.325, 1 / 0.325), rtol=1e-6)
        np.testing.assert_array_equal(tif.asarray(), stack)


def _ome_pixels(xml: str):
    root = ET.fromstring(xml)
    ns = root.tag[: root.tag.index("}") + 1]
    return root.find(f"{ns}Image/{ns}Pixels"), ns, root


def test_ome_tiff_keeps_physical_sizes_channel_names_and_description(models, tmp_path):
    stack = RNG.integers(0, 60000, (3, 2, 40, 50)).astype(np.uint16)
    src = tmp_path / "cells.ome.tif"
    meta = {"axes": "ZCYX", "PhysicalSizeX": 0.1625, "PhysicalSizeXUnit": "µm", "PhysicalSizeY": 0.1625, "PhysicalSizeYUnit": "µm", "PhysicalSizeZ": 0.3,
            "Channel": {"Name": ["DAPI", "Phalloidin"]}, "Name": "well B02", "Description": "widefield, 40x/0.95"}  # fmt: skip
    tifffile.imwrite(src, stack, ome=True, metadata=meta)
    assert _deblur(src, tmp_path / "out", models["identity"]) == 0
    with tifffile.TiffFile(tmp_path / "out" / src.name) as tif:
        assert tif.is_ome and tif.series[0].axes == "ZCYX" and tif.series[0].shape == stack.shape
        np.testing.assert_array_equal(tif.asarray(), stack)
        pixels, ns, root = _ome_pixels(tif.ome_metadata)
    assert pixels.get("PhysicalSizeX") == "0.1625" and pixels.get("PhysicalSizeXUnit") == "µm" and pixels.get("PhysicalSizeZ") == "0.3"
    assert [c.get("Name") for c in pixels.findall(f"{ns}Channel")] == ["DAPI", "Phalloidin"]
    assert root.find(f"{ns}Image").get("Name") == "well B02" and root.find(f"{ns}Image/{ns}Description").text == "widefield, 40x/0.95"
    # one channel chosen: the output is a ZYX stack of that channel, named as it
    assert _deblur(src, tmp_path / "one", models["identity"], "--channel", "1") == 0
    with tifffile.TiffFile(tmp_path / "one" / src.name) as tif:
        assert tif.series[0].axes == "ZYX" and np.array_equal(tif.asarray(), stack[:, 1])
        pixels, ns, _ = _ome_pixels(tif.ome_metadata)
    assert [c.get("Name") for c in pixels.findall(f"{ns}Channel")] == ["Phalloidin"] and pixels.get("SizeC") == "1"


def test_plain_tiff_keeps_resolution_and_description(models, tmp_path):
    src = tmp_path / "plain.tif"
    image = RNG.integers(0, 256, (40, 50)).astype(np.uint8)
    tifffile.imwrite(src, image, resolution=(30769.0, 30769.0), resolutionunit="CENTIMETER", description="Camera: sCMOS", metadata=None)
    assert _deblur(src, tmp_path / "out", models["identity"]) == 0
    with tifffile.TiffFile(tmp_path / "out" / src.name) as tif:
        page = tif.pages[0]
        assert page.resolution == (30769.0, 30769.0) and int(page.resolutionunit) == 3 and page.description == "Camera: sCMOS"
        np.testing.assert_array_equal(tif.asarray(), image)


def test_z_stack_is_restored_plane_by_plane_into_the_same_shape(models, tmp_path):
    stack = RNG.integers(0, 4096, (5, 40, 48)).astype(np.uint16)
    tifffile.imwrite(tmp_path / "stack.tif", stack)  # tifffile's shape record: axes QYX, 5 is no colour
    for z in (0, 3):
        tifffile.imwrite(tmp_path / f"plane{z}.tif", stack[z])
    files = [tmp_path / n for n in ("stack.tif", "plane0.tif", "plane3.tif")]
    assert _deblur(files, tmp_path / "out", models["random-minmax"]) == 0
    out = tifffile.imread(tmp_path / "out" / "stack.tif")
    assert out.shape == stack.shape and out.dtype == np.uint16 and not np.array_equal(out, stack)
    for z in (0, 3):  # each plane as if restored alone (its own min-max)
        np.testing.assert_array_equal(out[z], tifffile.imread(tmp_path / "out" / f"plane{z}.tif"))


def test_channel_first_rgb_is_detected_and_written_back_channel_first(models, tmp_path):
    rgb = RNG.integers(0, 256, (40, 50, 3)).astype(np.uint8)
    tifffile.imwrite(tmp_path / "first.tif", np.moveaxis(rgb, -1, 0), photometric="rgb", planarconfig="separate")
    tifffile.imwrite(tmp_path / "last.tif", rgb, photometric="rgb")
    for model in ("random", "rgb"):
        assert _deblur([tmp_path / "first.tif", tmp_path / "last.tif"], tmp_path / model, models[model]) == 0
        with tifffile.TiffFile(tmp_path / model / "first.tif") as tif:
            assert tif.series[0].axes == "SYX" and int(tif.pages[0].photometric) == 2
            first = tif.asarray()
        np.testing.assert_array_equal(np.moveaxis(first, 0, -1), tifffile.imread(tmp_path / model / "last.tif"))


def test_unclear_axes_are_refused_with_the_axes_read_and_settled_by_axes(models, tmp_path, capsys):
    three = RNG.integers(0, 4096, (3, 40, 50)).astype(np.uint16)
    src = tmp_path / "three.tif"
    tifffile.imwrite(src, three, photometric="minisblack")  # 3 grey pages: a stack, or colour stored as pages?
    assert _deblur(src, tmp_path / "out", models["identity"]) == 1
    err = capsys.readouterr().err
    assert f"{src}: axes read QYX, shape (3, 40, 50)" in err and "--axes ZYX" in err and "--axes SYX" in err
    assert _deblur(src, tmp_path / "out", models["identity"], "--axes", "ZYX") == 0
    with tifffile.TiffFile(tmp_path / "out" / "three.tif") as tif:
        assert tif.series[0].axes == "ZYX" and np.array_equal(tif.asarray(), three)
    assert _deblur(src, tmp_path / "out", models["identity"], "--axes", "ZXY") == 0  # any order of the letters
    assert _deblur(src, tmp_path / "bad", models["identity"], "--axes", "ZYXW") == 2
    assert "--axes ZYXW" in capsys.readouterr().err


def test_a_one_stain_network_asks_for_a_channel_and_a_wrong_channel_is_named(models, tmp_path, capsys):
    src = tmp_path / "two.tif"
    tifffile.imwrite(src, RNG.integers(0, 4096, (2, 40, 50)).astype(np.uint16), imagej=True, metadata={"axes": "CYX"})
    assert _deblur(src, tmp_path / "all", models["identity"]) == 0  # a project network: each channel restored apart
    assert tifffile.imread(tmp_path / "all" / "two.tif").shape == (2, 40, 50)
    failures = deblur_files([src], tmp_path / "strict", checkpoint=models["identity"], device="cpu", strict_channels=True, model_name="DGNO_BBBC006_w1_Cell")
    assert len(failures) == 1 and "2 channels" in failures[0][1] and "--channel" in failures[0][1]
    assert _deblur(src, tmp_path / "c5", models["identity"], "--channel", "5") == 1
    assert "--channel 5, but the image has 2 channels" in capsys.readouterr().err


def test_png_stays_png_and_jpeg_stays_jpeg(models, tmp_path):
    gray16 = RNG.integers(0, 65536, (40, 50)).astype(np.uint16)
    rgba = RNG.integers(0, 256, (40, 50, 4)).astype(np.uint8)
    (tmp_path / "g.png").write_bytes(imagecodecs.png_encode(gray16))
    (tmp_path / "a.png").write_bytes(imagecodecs.png_encode(rgba))
    (tmp_path / "la.png").write_bytes(imagecodecs.png_encode(np.ascontiguousarray(rgba[..., 2:])))  # grey + alpha
    (tmp_path / "p.jpg").write_bytes(imagecodecs.jpeg8_encode(np.ascontiguousarray(rgba[..., :3])))
    assert _deblur(tmp_path, tmp_path / "out", models["identity"]) == 0  # a folder: its images
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["a.png", "g.png", "la.png", "p.jpg"]
    np.testing.assert_array_equal(imagecodecs.png_decode((tmp_path / "out" / "g.png").read_bytes()), gray16)
    np.testing.assert_array_equal(imagecodecs.png_decode((tmp_path / "out" / "a.png").read_bytes()), rgba)  # alpha untouched
    np.testing.assert_array_equal(imagecodecs.png_decode((tmp_path / "out" / "la.png").read_bytes()), rgba[..., 2:])
    jpeg = imagecodecs.jpeg8_decode((tmp_path / "out" / "p.jpg").read_bytes())
    assert jpeg.shape == (40, 50, 3) and jpeg.dtype == np.uint8


def test_imagej_rgb_stack_and_compressed_tiffs_keep_their_layout(models, tmp_path):
    rgb_stack = RNG.integers(0, 256, (3, 40, 50, 3)).astype(np.uint8)
    tifffile.imwrite(tmp_path / "rgb_stack.tif", rgb_stack, imagej=True, metadata={"axes": "ZYXS", "unit": "um"}, resolution=(2.0, 2.0))
    gray = RNG.integers(0, 4096, (40, 50)).astype(np.uint16)
    tifffile.imwrite(tmp_path / "lzw.tif", gray, compression="lzw")
    assert _deblur([tmp_path / "rgb_stack.tif", tmp_path / "lzw.tif"], tmp_path / "out", models["identity"]) == 0
    with tifffile.TiffFile(tmp_path / "out" / "rgb_stack.tif") as tif:
        assert tif.is_imagej and tif.series[0].axes == "ZYXS" and int(tif.pages[0].photometric) == 2
        assert tif.imagej_metadata["unit"] == "um" and tif.pages[0].resolution == (2.0, 2.0)
        np.testing.assert_array_equal(tif.asarray(), rgb_stack)
    with tifffile.TiffFile(tmp_path / "out" / "lzw.tif") as tif:
        assert int(tif.pages[0].compression) != 1 and np.array_equal(tif.asarray(), gray)  # compressed again, losslessly


def test_a_grey_image_into_an_rgb_network_is_refused_by_name(models, tmp_path, capsys):
    tifffile.imwrite(tmp_path / "grey.tif", RNG.integers(0, 4096, (40, 50)).astype(np.uint16))
    assert _deblur(tmp_path / "grey.tif", tmp_path / "out", models["rgb"]) == 1
    assert "grey.tif: a grayscale image (1 channel(s)), but model rgb.pt restores 3-channel images" in capsys.readouterr().err


# ------------------------------------------------------------------------------- unusual inputs


def test_64_bit_integers_are_refused_by_name_and_the_batch_goes_on(models, tmp_path, capsys):
    tifffile.imwrite(tmp_path / "u64.tif", np.array([[0, 2**64 - 1] * 8] * 16, np.uint64))
    tifffile.imwrite(tmp_path / "fine.tif", RNG.integers(0, 4096, (16, 16)).astype(np.uint16))
    assert _deblur([tmp_path / "u64.tif", tmp_path / "fine.tif"], tmp_path / "out", models["identity"]) == 1
    err = capsys.readouterr().err
    assert "u64.tif: plane 0: pixel type uint64: 64-bit integers cannot pass" in err and "Fix: save it as integers of up to 32 bits" in err
    assert "RuntimeWarning" not in err and sorted(p.name for p in (tmp_path / "out").iterdir()) == ["fine.tif"]


def test_a_twelve_bit_jpeg_beside_a_tiff_of_its_name_gets_its_own_output_and_is_skipped_when_done(models, tmp_path, capsys):
    folder = tmp_path / "in"
    folder.mkdir()
    twelve = RNG.integers(0, 4096, (32, 32)).astype(np.uint16)
    (folder / "x.jpg").write_bytes(imagecodecs.jpeg8_encode(twelve, bitspersample=12, level=100))
    tifffile.imwrite(folder / "x.tif", RNG.integers(0, 255, (32, 32)).astype(np.uint8))
    assert _deblur(folder, tmp_path / "out", models["identity"]) == 0
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["x.jpg.tif", "x.tif"]
    assert tifffile.imread(tmp_path / "out" / "x.jpg.tif").dtype == np.uint16 and tifffile.imread(tmp_path / "out" / "x.tif").dtype == np.uint8
    capsys.readouterr()
    assert _deblur(folder, tmp_path / "out", models["identity"], "--skip-existing") == 0
    assert "0 restored, 2 skipped" in capsys.readouterr().out


@pytest.mark.parametrize("value", ["nan", "inf", "-1"])
def test_a_max_memory_that_is_no_positive_number_is_refused_before_any_work(models, tmp_path, capsys, value):
    tifffile.imwrite(tmp_path / "a.tif", np.zeros((16, 16), np.uint16))
    assert _deblur(tmp_path / "a.tif", tmp_path / "out", models["identity"], "--max-memory", value) == 2
    assert f"--max-memory {float(value)}: must be a positive number" in capsys.readouterr().err


def test_imagej_images_without_slices_keep_their_calibration(models, tmp_path):
    stack = RNG.integers(0, 4096, (5, 24, 32)).astype(np.uint16)
    description = "ImageJ=1.54f\nimages=5\nunit=micron\nspacing=0.7\nmin=0.0\nmax=4095.0\n"  # as older writers leave it: no slices=
    tifffile.imwrite(tmp_path / "images.tif", stack, description=description, metadata=None, resolution=(1 / 0.325, 1 / 0.325))
    with tifffile.TiffFile(tmp_path / "images.tif") as tif:
        assert tif.series[0].axes == "IYX" and tif.imagej_metadata["unit"] == "micron"
    assert _deblur(tmp_path / "images.tif", tmp_path / "out", models["identity"]) == 0
    with tifffile.TiffFile(tmp_path / "out" / "images.tif") as tif:
        meta = tif.imagej_metadata
        assert meta["unit"] == "micron" and meta["spacing"] == pytest.approx(0.7) and meta["slices"] == 5
        np.testing.assert_array_equal(tif.asarray(), stack)


def test_axes_imagej_cannot_store_are_said_and_the_resolution_kept(models, tmp_path, capsys):
    hyper = RNG.integers(0, 4096, (2, 3, 24, 32)).astype(np.uint16)
    tifffile.imwrite(tmp_path / "tz.tif", hyper, imagej=True, metadata={"axes": "TZYX", "unit": "um", "spacing": 0.5}, resolution=(2.0, 2.0))
    assert _deblur(tmp_path / "tz.tif", tmp_path / "out", models["identity"], "--axes", "ZTYX") == 0
    assert "ImageJ cannot store the axes ZTYX" in capsys.readouterr().err
    with tifffile.TiffFile(tmp_path / "out" / "tz.tif") as tif:
        assert tif.pages[0].resolution == pytest.approx((2.0, 2.0)) and tif.series[0].axes == "ZTYX"


def test_normalise_overrides_a_recorded_normalisation_this_version_does_not_know(tmp_path, capsys):
    checkpoint = model_file(tmp_path / "m.pt", identity=True, normalise="zscore")
    tifffile.imwrite(tmp_path / "a.tif", np.arange(256, dtype=np.uint16).reshape(16, 16))
    assert _deblur(tmp_path / "a.tif", tmp_path / "bad", checkpoint) == 2
    assert "Fix: pass --normalise minmax or dtype" in capsys.readouterr().err
    assert _deblur(tmp_path / "a.tif", tmp_path / "out", checkpoint, "--normalise", "minmax") == 0


def test_the_planes_of_a_stack_share_one_bit_depth(models, tmp_path, monkeypatch):
    stack = np.stack([RNG.integers(0, 100, (24, 32)), RNG.integers(0, 4000, (24, 32))]).astype(np.uint16)  # a dim plane of 12-bit data
    tifffile.imwrite(tmp_path / "stack.tif", stack)
    seen = []
    original = deblur.normalisation.normalise

    def spy(values, kind, **kw):
        unit, scaling = original(values, kind, **kw)
        seen.append(scaling.hi)
        return unit, scaling

    monkeypatch.setattr(deblur.normalisation, "normalise", spy)
    assert _deblur(tmp_path / "stack.tif", tmp_path / "out", models["identity"]) == 0
    assert seen == [4095.0, 4095.0]


def test_a_file_reached_twice_is_restored_once_with_a_note_and_a_broken_link_is_named(models, tmp_path, capsys):
    folder = tmp_path / "in"
    folder.mkdir()
    tifffile.imwrite(folder / "a.tif", np.zeros((16, 16), np.uint16))
    (folder / "link_to_a.tif").symlink_to(folder / "a.tif")
    (folder / "gone.tif").symlink_to(folder / "missing.tif")
    assert _deblur(folder, tmp_path / "out", models["identity"]) == 1
    err = capsys.readouterr().err
    assert "link_to_a.tif: the same file as" in err and "restored once" in err and "gone.tif: a link to" in err
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["a.tif"]


def test_grey_pages_declared_colour_by_axes_are_written_as_rgb(models, tmp_path):
    tifffile.imwrite(tmp_path / "pages.tif", RNG.integers(0, 255, (3, 24, 32)).astype(np.uint8), photometric="minisblack", metadata=None)
    assert _deblur(tmp_path / "pages.tif", tmp_path / "out", models["identity"], "--axes", "SYX") == 0
    with tifffile.TiffFile(tmp_path / "out" / "pages.tif") as tif:
        assert tif.pages[0].photometric == tifffile.PHOTOMETRIC.RGB and tif.pages[0].extrasamples == ()


def test_palette_pngs_and_cmyk_jpegs_are_refused_by_name(models, tmp_path, capsys):
    import io

    from PIL import Image

    Image.fromarray(RNG.integers(0, 255, (16, 16)).astype(np.uint8)).convert("P").save(tmp_path / "palette.png")
    buf = io.BytesIO()
    Image.fromarray(RNG.integers(0, 255, (16, 16, 4)).astype(np.uint8), mode="CMYK").save(buf, "JPEG")
    (tmp_path / "ink.jpg").write_bytes(buf.getvalue())
    assert _deblur([tmp_path / "palette.png", tmp_path / "ink.jpg"], tmp_path / "out", models["rgb"]) == 1
    err = capsys.readouterr().err
    assert "palette.png: an indexed-colour (palette) image" in err and "ink.jpg: a CMYK JPEG" in err


def test_a_folder_as_checkpoint_and_options_beside_a_model_file_are_refused(models, tmp_path, capsys):
    tifffile.imwrite(tmp_path / "a.tif", np.zeros((16, 16), np.uint16))
    folder = models["identity"].parent
    assert _deblur(tmp_path / "a.tif", tmp_path / "out", folder) == 2
    assert "is a folder, not a model file" in capsys.readouterr().err
    assert _deblur(tmp_path / "a.tif", tmp_path / "out", models["identity"], "--options", "x.yml") == 2
    assert "--options x.yml is for an authors' .pth checkpoint" in capsys.readouterr().err


def test_a_multi_file_ome_set_is_read_whole_and_a_missing_companion_is_named(models, tmp_path, capsys):
    folder = tmp_path / "set"
    folder.mkdir()
    planes = RNG.integers(0, 4096, (2, 24, 32)).astype(np.uint16)
    u1, u2 = "urn:uuid:11111111-1111-1111-1111-111111111111", "urn:uuid:22222222-2222-2222-2222-222222222222"
    xml = (f'<?xml version="1.0" encoding="UTF-8"?><OME xmlns="http://www.openmicroscopy.org/Schemas/OME/2016-06" UUID="{u1}"><Image ID="Image:0">'
           '<Pixels ID="Pixels:0" DimensionOrder="XYZCT" Type="uint16" SizeX="32" SizeY="24" SizeZ="2" SizeC="1" SizeT="1"><Channel ID="Channel:0:0" SamplesPerPixel="1"/>'
           f'<TiffData FirstZ="0" IFD="0" PlaneCount="1"><UUID FileName="a.ome.tif">{u1}</UUID></TiffData>'
           f'<TiffData FirstZ="1" IFD="0" PlaneCount="1"><UUID FileName="b.ome.tif">{u2}</UUID></TiffData></Pixels></Image></OME>')  # fmt: skip
    binary = f'<?xml version="1.0" encoding="UTF-8"?><OME xmlns="http://www.openmicroscopy.org/Schemas/OME/2016-06" UUID="{u2}"><BinaryOnly MetadataFile="a.ome.tif" UUID="{u1}"/></OME>'
    tifffile.imwrite(folder / "a.ome.tif", planes[0], description=xml, metadata=None)
    tifffile.imwrite(folder / "b.ome.tif", planes[1], description=binary, metadata=None)
    assert _deblur(folder, tmp_path / "out", models["identity"]) == 0
    assert "b.ome.tif: holds only pixels of the multi-file OME-TIFF a.ome.tif" in capsys.readouterr().err
    np.testing.assert_array_equal(tifffile.imread(tmp_path / "out" / "a.ome.tif"), planes)
    (folder / "b.ome.tif").unlink()
    assert _deblur(folder / "a.ome.tif", tmp_path / "alone", models["identity"]) == 1
    assert "companion file(s) b.ome.tif are not in" in capsys.readouterr().err and not (tmp_path / "alone" / "a.ome.tif").exists()
