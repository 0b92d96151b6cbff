"""A lab's focal planes → fine-tuning pairs: in-focus plane, input planes, alignment, split, the readers, and bad input."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import tifffile

from dgno.data import zstacks
from dgno.data.synthetic_stacks import StackSpec, render_stack, write_focal_slide, write_stacks
from dgno.io import InputError, read_image
from dgno.train.finetune_data import Inputs, Preparation, prepare, read_focus_planes

SMALL = StackSpec(size=(64, 64), planes=5, blur="gaussian", seed=4)


@pytest.fixture(scope="module")
def stacks(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("stacks")
    write_stacks(folder, SMALL, fields=6)
    return folder


def _prep(**kw) -> Preparation:
    return Preparation(**{"normalise": "minmax", "distances": (1,), **kw})


# --- decisions on arrays --------------------------------------------------------------------------


@pytest.mark.parametrize("blur", ["gaussian", "seidel"])
def test_the_sharpest_plane_is_the_in_focus_one_despite_camera_noise(blur):
    spec = StackSpec(size=(64, 64), planes=7, blur=blur, seed=9)
    for i in range(4):
        stack, focus = render_stack(spec, i)
        assert zstacks.focus_plane(list(stack))[0] == focus


def test_input_planes_at_distances_on_both_sides_where_the_stack_reaches():
    assert zstacks.input_planes(5, 1, (1, 2)) == {"z-1": 0, "z+1": 2, "z+2": 3}
    assert zstacks.input_planes(3, 1, None) == {"z-1": 0, "z+1": 2}
    assert zstacks.level_distance("z-2") == zstacks.level_distance("z+2") == 2


def test_a_drift_between_planes_is_found_and_corrected_and_a_large_one_refused():
    stack, focus = render_stack(StackSpec(size=(96, 96), planes=5, blur="gaussian", seed=1, drift=1.5, focus_jitter=0), 0)
    inputs = {f"z{d:+d}": (d, stack[focus + d]) for d in (-2, -1, 1, 2)}
    aligned, record = zstacks.align("f.tif", stack[focus], inputs, max_shift=5)
    dy, dx = record.drift
    assert -1.5 < dy < -0.7 and 0.35 < dx < 0.75  # each plane moved (+1.5, −0.75) px further; the correction is the opposite
    assert record.corrected["z+2"] and record.crop >= 2
    assert np.abs(zstacks.plane_shift(stack[focus], aligned["z+2"])).max() < np.abs(record.measured["z+2"]).max()
    with pytest.raises(InputError, match=r"^f.tif: plane z-2 is shifted by .* px against the in-focus plane, more than the 2 px .*Fix: register the stack first"):
        zstacks.align("f.tif", stack[focus], inputs, max_shift=2)


def test_small_shifts_are_left_alone():
    stack, focus = render_stack(StackSpec(size=(96, 96), planes=5, seed=2, focus_jitter=0), 0)
    aligned, record = zstacks.align("f", stack[focus], {"z+1": (1, stack[focus + 1])}, max_shift=5)
    assert not record.corrected["z+1"] and record.crop == 0 and np.array_equal(aligned["z+1"], stack[focus + 1])


def test_split_by_unit_is_seeded_and_has_every_part():
    units = [f"f{i}" for i in range(10)]
    split = zstacks.split_units(units, val_fraction=0.2, test_fraction=0.2, seed=3, what="fields", where="x")
    assert split == zstacks.split_units(list(reversed(units)), val_fraction=0.2, test_fraction=0.2, seed=3, what="fields", where="x")
    assert sorted(split.values()).count("test") == 2 and sorted(split.values()).count("val") == 2
    three = zstacks.split_units(["a", "b", "c"], val_fraction=0.5, test_fraction=0.5, seed=0, what="fields", where="x")
    assert sorted(three.values()) == ["test", "train", "val"]
    with pytest.raises(InputError, match=r"^stacks/: 2 fields \(a, b\); fine-tuning needs at least 3: .* Fix: add more fields"):
        zstacks.split_units(["a", "b"], val_fraction=0.2, test_fraction=0.2, seed=0, what="fields", where="stacks/")


def test_tissue_blocks_keep_squares_mostly_on_tissue():
    mask = np.zeros((8, 8), bool)
    mask[:4, :4] = True
    blocks = zstacks.tissue_blocks(mask, block=64, scale=(16.0, 16.0), min_tissue=0.5)
    assert [(y, x) for y, x, _ in blocks] == [(0, 0)]


# --- stacks on disk ---------------------------------------------------------------------------------


def test_stacks_become_pairs_split_by_field_scaled_as_deblur_scales_them(stacks, tmp_path):
    out = prepare(Inputs(stacks=(str(stacks),)), _prep(distances=(1, 2)), tmp_path / "data", progress=False)
    fields, pairs, split = pd.read_csv(out / "fields.csv"), pd.read_csv(out / "pairs.csv"), pd.read_csv(out / "split.csv")
    truth = json.loads((stacks / "stacks.json").read_text())["focus"]
    assert {r.field: r.focus_plane for r in fields.itertuples()} == {Path(k).stem: v for k, v in truth.items()}
    assert set(fields["focus"]) == {"measured"}
    assert set(pairs["level"]) <= {"z-1", "z+1", "z-2", "z+2"} and set(pairs["distance"]) == {1, 2}
    by_field = split.assign(field=split["id"].str.split("__").str[0]).groupby("field")["split"].nunique()
    assert (by_field == 1).all()  # never split within a field
    assert set(split["split"]) == {"train", "val", "test"}
    gt = read_image(out / "gt" / f"{pairs['id'][0]}.tif", normalise="minmax")
    assert gt.min() == 0.0 and gt.max() == 1.0  # each plane by its own range, as dgno deblur (minmax) scales it
    assert np.array_equal(gt, read_image(out / "gt" / f"{pairs['id'][0]}.tif"))  # re-reading changes nothing
    assert os.path.samefile(out / "gt" / f"{pairs['id'][0]}.tif", out / "gt" / f"{pairs['id'][1]}.tif")  # one field's sharp plane, linked


def test_an_unchanged_input_keeps_the_prepared_folder_and_a_change_rewrites_it(stacks, tmp_path):
    out = prepare(Inputs(stacks=(str(stacks),)), _prep(), tmp_path / "data", progress=False)
    stamp = (out / "manifest.json").stat().st_mtime_ns
    prepare(Inputs(stacks=(str(stacks),)), _prep(), tmp_path / "data", progress=False)
    assert (out / "manifest.json").stat().st_mtime_ns == stamp
    prepare(Inputs(stacks=(str(stacks),)), _prep(distances=(2,)), tmp_path / "data", progress=False)
    assert set(pd.read_csv(out / "pairs.csv")["distance"]) == {2}


def test_the_in_focus_plane_can_be_given_and_is_reported_as_given(stacks, tmp_path):
    csv_file = tmp_path / "focus.csv"
    csv_file.write_text("field,plane\nfield_000.tif,0\n")
    out = prepare(Inputs(stacks=(str(stacks),)), _prep(focus_planes=read_focus_planes(csv_file)), tmp_path / "data", progress=False)
    row = pd.read_csv(out / "fields.csv").set_index("field").loc["field_000"]
    assert row["focus_plane"] == 0 and row["focus"] == "given" and row["levels"] == "z+1"
    with pytest.raises(InputError, match=r"field_000.tif: in-focus plane 9 given, but the stack has planes 0 … 4. Fix"):
        prepare(Inputs(stacks=(str(stacks),)), _prep(focus_plane=9), tmp_path / "data2", progress=False)
    csv_file.write_text("field,plane\nfield_000.tif,top\n")
    with pytest.raises(InputError, match=r"focus.csv: line 2: plane 'top' is not a whole number. Fix"):
        read_focus_planes(csv_file)


def test_a_folder_of_planes_is_one_stack_and_a_multi_image_ome_tiff_several(tmp_path):
    stack, _ = render_stack(SMALL, 0)
    planes = tmp_path / "fields" / "well_a"
    planes.mkdir(parents=True)
    for k, plane in enumerate(stack):
        tifffile.imwrite(planes / f"z{k:02d}.tif", (plane * 4095).astype(np.uint16))
    with tifffile.TiffWriter(tmp_path / "wells.ome.tif", ome=True) as tw:
        for i in range(1, 3):
            tw.write((render_stack(SMALL, i)[0] * 4095).astype(np.uint16), metadata={"axes": "ZYX"})
    out = prepare(Inputs(stacks=(str(planes), str(tmp_path / "wells.ome.tif"))), _prep(val_fraction=0.3, test_fraction=0.3), tmp_path / "data", progress=False)
    assert sorted(pd.read_csv(out / "fields.csv")["field"]) == ["well_a", "wells.ome_s0", "wells.ome_s1"]


def test_pairs_are_matched_by_name(tmp_path):
    for side in ("blurred", "sharp"):
        (tmp_path / side).mkdir()
    for i in range(3):
        stack, focus = render_stack(SMALL, i)
        tifffile.imwrite(tmp_path / "blurred" / f"f{i}.tif", (stack[focus + 1] * 4095).astype(np.uint16))
        tifffile.imwrite(tmp_path / "sharp" / f"f{i}.tif", (stack[focus] * 4095).astype(np.uint16))
    out = prepare(Inputs(pairs=(str(tmp_path / "blurred"), str(tmp_path / "sharp"))), _prep(), tmp_path / "data", progress=False)
    pairs = pd.read_csv(out / "pairs.csv")
    assert sorted(pairs["id"]) == ["f0__pair", "f1__pair", "f2__pair"] and pairs["distance"].isna().all()


@pytest.mark.slow
def test_a_multi_plane_slide_is_cut_into_tissue_fields_each_with_its_own_focus(tmp_path):
    truth = write_focal_slide(tmp_path / "scan.ome.tif", shape=(512, 768), planes=5, tilt=2.0, seed=1)
    out = prepare(Inputs(slides=(str(tmp_path / "scan.ome.tif"),)), _prep(field_size=128, min_tissue=0.3, channel=0), tmp_path / "data", progress=False)
    fields = pd.read_csv(out / "fields.csv")
    assert len(fields) >= 3 and set(fields["unit"]) == set(fields["field"])  # one slide: split by field
    x = fields["field"].str.extract(r"_x(\d+)")[0].astype(int) + 64
    expected = truth["focus_left"] + (truth["focus_right"] - truth["focus_left"]) * x / 767
    assert (np.abs(fields["focus_plane"] - expected) <= 1).all()  # a tilted section: the in-focus plane follows it
    assert json.loads((out / "manifest.json").read_text())["split_by"] == "field"


# --- bad input: one line each, naming the file and the fix -------------------------------------------


def test_a_stack_of_one_plane_is_refused(tmp_path):
    tifffile.imwrite(tmp_path / "flat.tif", np.zeros((1, 64, 64), np.uint16), imagej=True, metadata={"axes": "ZYX"})
    with pytest.raises(InputError, match=r"flat.tif: one plane, not a z-stack .*Fix: give stacks of two or more focal planes"):
        prepare(Inputs(stacks=(str(tmp_path / "flat.tif"),)), _prep(), tmp_path / "data", progress=False)


def test_planes_of_different_sizes_are_refused(tmp_path):
    folder = tmp_path / "field"
    folder.mkdir()
    tifffile.imwrite(folder / "z0.tif", np.ones((64, 64), np.uint16))
    tifffile.imwrite(folder / "z1.tif", np.ones((64, 60), np.uint16))
    with pytest.raises(InputError, match=r"z1.tif: planes of different sizes, 64×60 px here, 64×64 px in .*z0.tif. Fix: export every plane"):
        prepare(Inputs(stacks=(str(folder),)), _prep(), tmp_path / "data", progress=False)
    with tifffile.TiffWriter(tmp_path / "pages.tif") as tw:
        tw.write(np.ones((64, 64), np.uint16))
        tw.write(np.ones((60, 64), np.uint16))
    with pytest.raises(InputError, match=r"pages.tif: planes of different sizes .*Fix"):
        prepare(Inputs(stacks=(str(tmp_path / "pages.tif"),)), _prep(), tmp_path / "data", progress=False)


def test_unequal_pair_folders_name_the_unmatched_file(tmp_path):
    for side, names in (("blurred", ["a", "b", "c"]), ("sharp", ["a", "b"])):
        (tmp_path / side).mkdir()
        for n in names:
            tifffile.imwrite(tmp_path / side / f"{n}.tif", np.ones((64, 64), np.uint16))
    with pytest.raises(InputError, match=r"blurred/c.tif: no image of that name in .*sharp \(3 blurred, 2 sharp images; 1 unmatched\). Fix: give both folders the same file names"):
        prepare(Inputs(pairs=(str(tmp_path / "blurred"), str(tmp_path / "sharp"))), _prep(), tmp_path / "data", progress=False)


def test_unaligned_planes_name_the_stack(tmp_path):
    write_stacks(tmp_path / "drift", StackSpec(size=(64, 64), planes=5, seed=1, drift=6.0), fields=3)
    with pytest.raises(InputError, match=r"drift/field_00\d.tif: plane z.1 is shifted by .* Fix: register the stack first"):
        prepare(Inputs(stacks=(str(tmp_path / "drift"),)), _prep(), tmp_path / "data", progress=False)


def test_too_few_fields_for_a_split(tmp_path):
    write_stacks(tmp_path / "two", SMALL, fields=2)
    with pytest.raises(InputError, match=r"two: 2 fields \(field_000, field_001\); fine-tuning needs at least 3"):
        prepare(Inputs(stacks=(str(tmp_path / "two"),)), _prep(), tmp_path / "data", progress=False)
    assert not (tmp_path / "data").exists()  # nothing half written


def test_channels_that_do_not_match_the_starting_network(tmp_path):
    rgb = np.zeros((3, 64, 64, 3), np.uint8)
    tifffile.imwrite(tmp_path / "rgb.tif", rgb, imagej=True, metadata={"axes": "ZYXS"})
    with pytest.raises(InputError, match=r"rgb.tif: a RGB image \(3 channel\(s\)\), but model the starting network restores 1-channel images. Fix"):
        prepare(Inputs(stacks=(str(tmp_path / "rgb.tif"),)), _prep(), tmp_path / "data", progress=False)
    grey = np.zeros((3, 64, 64), np.uint16)
    tifffile.imwrite(tmp_path / "grey.tif", grey, imagej=True, metadata={"axes": "ZYX"})
    with pytest.raises(InputError, match=r"grey.tif: a grayscale image \(1 channel\(s\)\), but model the starting network restores 3-channel images. Fix"):
        prepare(Inputs(stacks=(str(tmp_path / "grey.tif"),)), _prep(in_channels=3, normalise="dtype"), tmp_path / "data", progress=False)


def test_inputs_name_exactly_one_kind():
    with pytest.raises(InputError, match=r"stacks and slides given. Fix: give exactly one of"):
        Inputs(stacks=("a",), slides=("b",))
    with pytest.raises(InputError, match=r"distances \[0\]: give whole numbers of planes >= 1"):
        Preparation(normalise="minmax", distances=(0,))


def test_slides_whose_channels_do_not_fit_the_network_are_named():
    from dgno.train.finetune_data import _check_slide_channels

    one, three = _prep(network="DGNO_BBBC006_w1_Cell"), _prep(in_channels=3, normalise="dtype", network="DGNO_3DHistech_Cell")
    with pytest.raises(InputError, match=r"^he.svs: an RGB slide, but DGNO_BBBC006_w1_Cell restores one channel. Fix: start from a 3-channel network"):
        _check_slide_channels(Path("he.svs"), 3, "rgb", one)
    with pytest.raises(InputError, match=r"^f.ome.tif: 2 channel\(s\), but DGNO_3DHistech_Cell restores 3-channel images. Fix"):
        _check_slide_channels(Path("f.ome.tif"), 2, "channels", three)
    with pytest.raises(InputError, match=r"--channel 5, but the slide has 2 channel\(s\). Fix: --channel 0 … 1"):
        _check_slide_channels(Path("f.ome.tif"), 2, "channels", _prep(channel=5))
    _check_slide_channels(Path("he.svs"), 4, "rgba", three)  # alpha aside, RGB
