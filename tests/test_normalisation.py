"""Stored values ↔ [0, 1] and back: exact for every integer type, data that do not fill their type included."""

from __future__ import annotations

import numpy as np
import pytest

from dgno.inference.normalisation import CHECKPOINT_KEY, from_unit, full_scale, normalise, recorded, scaling_for, to_unit

RNG = np.random.default_rng(0)
# (name, plane): each fills only part of its type
PLANES = {
    "uint8": RNG.integers(3, 200, (20, 30)).astype(np.uint8),
    "12-bit in uint16": RNG.integers(100, 4096, (20, 30)).astype(np.uint16),
    "uint16 full": RNG.integers(0, 65536, (20, 30)).astype(np.uint16),
    "uint32 counts": RNG.integers(0, 4000, (20, 30)).astype(np.uint32),
    "int16 with negatives": RNG.integers(-700, 3000, (20, 30)).astype(np.int16),
    "int32 with negatives": RNG.integers(-100_000, 5_000_000, (20, 30)).astype(np.int32),
    "int8": RNG.integers(-100, 100, (20, 30)).astype(np.int8),
    "float32 in [0, 1]": RNG.random((20, 30)).astype(np.float32),
    "float64 counts": RNG.random((20, 30)) * 900 - 100,
    "rgb uint8": RNG.integers(0, 256, (20, 30, 3)).astype(np.uint8),
}


@pytest.mark.parametrize("kind", ["minmax", "dtype"])
@pytest.mark.parametrize("name", sorted(PLANES))
def test_round_trip_is_exact_in_the_inputs_dtype(name, kind):
    plane = PLANES[name]
    unit, scaling = normalise(plane, kind)
    assert unit.dtype == np.float32 and unit.min() >= 0 and unit.max() <= 1
    back = from_unit(unit, scaling)
    assert back.dtype == plane.dtype and back.shape == plane.shape
    if plane.dtype.kind in "ui":
        np.testing.assert_array_equal(back, plane)
    else:
        np.testing.assert_allclose(back, plane, rtol=1e-6, atol=1e-6 * float(np.abs(plane).max()))


def test_minmax_fills_zero_to_one_and_ignores_scale_and_offset():
    plane = PLANES["12-bit in uint16"]
    unit, scaling = normalise(plane, "minmax")
    assert unit.min() == 0 and unit.max() == 1 and (scaling.lo, scaling.hi) == (plane.min(), plane.max())
    np.testing.assert_allclose(normalise(plane * np.uint16(16), "minmax")[0], unit, atol=1e-6)  # 12-bit and the same ×16 alike


def test_dtype_scaling_uses_the_datas_bit_depth_not_the_container():
    assert full_scale(np.uint8, 17) == 255
    assert full_scale(np.uint16, 4000) == 4095  # a 12-bit camera in a 16-bit file
    assert full_scale(np.uint16, 4096) == 16383 and full_scale(np.uint16, 60000) == 65535
    assert full_scale(np.uint32, 3999) == 4095  # counts 0..3999, not 0..1.3e8
    assert full_scale(np.int16, 30000) == 32767
    assert full_scale(np.uint16, 300, significant_bits=12) == 4095  # OME SignificantBits wins
    assert full_scale(np.uint16, 5000, significant_bits=12) == 16383  # … unless the data exceed it: 14-bit
    twelve = PLANES["12-bit in uint16"]
    np.testing.assert_allclose(normalise(twelve, "dtype")[0], twelve / 4095, rtol=1e-6)
    np.testing.assert_allclose(normalise(twelve * np.uint16(16), "dtype")[0], twelve / 4095, atol=3e-4)  # the same scene, full range


def test_dtype_scaling_falls_back_to_minmax_where_it_cannot_hold_the_data():
    signed = scaling_for(PLANES["int16 with negatives"], "dtype")
    assert signed.kind == "minmax" and "negative values" in signed.fallback and signed.lo < 0
    floats = scaling_for(PLANES["float64 counts"], "dtype")
    assert floats.kind == "minmax" and "not [0, 1]" in floats.fallback
    assert scaling_for(PLANES["float32 in [0, 1]"], "dtype") == scaling_for(PLANES["float32 in [0, 1]"], "dtype")
    assert (scaling_for(PLANES["float32 in [0, 1]"], "dtype").lo, scaling_for(PLANES["float32 in [0, 1]"], "dtype").hi) == (0.0, 1.0)
    assert scaling_for(PLANES["uint16 full"], "dtype").fallback == ""


def test_constant_planes_nan_and_unknown_kinds():
    flat = np.full((5, 6), 1234, np.uint16)
    unit, scaling = normalise(flat, "minmax")
    assert not unit.any() and np.array_equal(from_unit(unit + 0.3, scaling), flat)
    with pytest.raises(ValueError, match="NaN/Inf"):
        normalise(np.array([[0.5, np.nan]]), "minmax")
    with pytest.raises(ValueError, match="'percentile'"):
        normalise(flat, "percentile")


def test_the_output_stays_in_the_inputs_range_and_type():
    scaling = scaling_for(PLANES["int16 with negatives"], "minmax")
    out = from_unit(np.array([[-0.5, 0.0, 0.5, 1.0, 7.0]]), scaling)
    assert out.dtype == np.int16 and out.min() == scaling.lo and out.max() == scaling.hi
    np.testing.assert_array_equal(to_unit(np.array([scaling.lo, scaling.hi]), scaling), [0, 1])


def test_uint32_full_range_to_float32_precision():
    plane = np.array([[0, 1 << 20, 4_000_000_000, 4_294_967_295]], np.uint32)
    back = from_unit(*normalise(plane, "minmax"))
    assert np.abs(back.astype(np.float64) - plane).max() <= 4_294_967_295 * 1.2e-7


def test_a_model_files_recorded_normalisation():
    assert recorded({}) is None and recorded({CHECKPOINT_KEY: "minmax"}) == "minmax"
    with pytest.raises(ValueError, match="'zscore'"):
        recorded({CHECKPOINT_KEY: "zscore"})
