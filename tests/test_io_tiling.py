"""Bad-input errors name the file and the fix; tiled inference equals one pass where it should."""

from __future__ import annotations

import imagecodecs
import numpy as np
import pytest
import tifffile
import torch

from dgno.inference.tiling import edge_weight, tile_starts, tiled_apply
from dgno.io import InputError, atomic_path, read_image, read_raw_image, write_json


def test_missing_empty_truncated_and_non_image_files(tmp_path):
    with pytest.raises(InputError, match=r"nope\.tif: file does not exist"):
        read_image(tmp_path / "nope.tif")
    (tmp_path / "empty.tif").write_bytes(b"")
    with pytest.raises(InputError, match=r"empty\.tif: file is empty"):
        read_image(tmp_path / "empty.tif")
    good = tmp_path / "good.tif"
    tifffile.imwrite(good, np.zeros((64, 64), np.uint16))
    (tmp_path / "trunc.tif").write_bytes(good.read_bytes()[:100])
    with pytest.raises(InputError, match=r"trunc\.tif: cannot be decoded.*Fix:"):
        read_image(tmp_path / "trunc.tif")
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(InputError, match=r"notes\.txt: unsupported image type"):
        read_image(tmp_path / "notes.txt")


def test_small_image_and_nan(tmp_path):
    tifffile.imwrite(tmp_path / "small.tif", np.zeros((6, 40), np.uint16))
    with pytest.raises(InputError, match=r"small\.tif: image is 6×40, smaller than the minimum 8×8"):
        read_image(tmp_path / "small.tif", min_size=8)
    arr = np.zeros((10, 10), np.float32)
    arr[0, 0] = np.inf
    tifffile.imwrite(tmp_path / "inf.tif", arr)
    with pytest.raises(InputError, match="NaN/inf"):
        read_image(tmp_path / "inf.tif")


def test_uint16_scaling_and_minmax(tmp_path):
    arr = np.array([[1000, 3000], [2000, 5000]], np.uint16)
    tifffile.imwrite(tmp_path / "a.tif", arr)
    np.testing.assert_allclose(read_image(tmp_path / "a.tif"), arr / 65535, rtol=1e-6)
    mm = read_image(tmp_path / "a.tif", normalise="minmax")
    assert mm.min() == 0 and mm.max() == 1


def test_png_keeps_its_stored_bit_depth(tmp_path):
    """16-bit colour PNGs (DPDD) keep all 16 bits: Pillow would return them as 8-bit RGB."""
    rng = np.random.default_rng(0)
    rgb16 = rng.integers(0, 65536, (5, 7, 3), dtype=np.uint16)
    gray16 = rng.integers(0, 65536, (5, 7), dtype=np.uint16)
    rgba8 = rng.integers(0, 256, (5, 7, 4), dtype=np.uint8)
    for name, arr in (("rgb16", rgb16), ("gray16", gray16), ("rgba8", rgba8)):
        (tmp_path / f"{name}.png").write_bytes(imagecodecs.png_encode(arr))
        back = read_raw_image(tmp_path / f"{name}.png")
        assert back.dtype == arr.dtype and np.array_equal(back, arr), name
    np.testing.assert_allclose(read_image(tmp_path / "rgb16.png"), rgb16 / 65535, rtol=1e-6)
    assert read_image(tmp_path / "rgba8.png").shape == (5, 7, 3)  # alpha dropped
    (tmp_path / "trunc.png").write_bytes((tmp_path / "rgb16.png").read_bytes()[:40])
    with pytest.raises(InputError, match=r"trunc\.png: cannot be decoded.*Fix:"):
        read_raw_image(tmp_path / "trunc.png")


def test_atomic_write_leaves_nothing_on_failure(tmp_path):
    target = tmp_path / "out.json"
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        tmp.write_text("{half")
        raise RuntimeError("crash")
    assert list(tmp_path.iterdir()) == []
    write_json(target, {"a": np.float32(1.5)})
    assert target.read_text().strip().startswith("{")


def test_tile_starts_cover_and_overlap():
    for length, tile, overlap in [(100, 32, 8), (696, 256, 32), (520, 256, 32), (33, 32, 4)]:
        starts = tile_starts(length, tile, overlap)
        covered = np.zeros(length, bool)
        for s in starts:
            covered[s : s + tile] = True
        assert covered.all() and starts[-1] + tile == length
        assert all(b - a <= tile - overlap for a, b in zip(starts, starts[1:]))
    assert edge_weight(10, 8, ramp_start=False, ramp_end=False).eq(1).all()
    w = edge_weight(32, 16, ramp_start=True, ramp_end=False)
    assert w[:4].eq(0).all() and w[12:].eq(1).all()
    # complementary ramps of two tiles sharing exactly `overlap` pixels sum to 1
    a = edge_weight(32, 16, ramp_start=False, ramp_end=True)[-16:]
    b = edge_weight(32, 16, ramp_start=True, ramp_end=False)[:16]
    torch.testing.assert_close(a + b, torch.ones(16))


def test_tiled_equals_untiled_for_local_operator():
    """A 5×5 box filter (receptive radius 2) tiled with overlap 16 (m = 4 ≥ radius) equals one pass."""
    conv = torch.nn.Conv2d(1, 1, 5, padding=2, padding_mode="replicate", bias=False)
    torch.nn.init.constant_(conv.weight, 1 / 25)
    x = torch.rand(1, 1, 70, 90)
    with torch.no_grad():
        whole = conv(x)
        tiled = tiled_apply(conv, x, tile=32, overlap=16)
    torch.testing.assert_close(tiled, whole, atol=1e-5, rtol=0)


def test_single_tile_is_identity_path():
    x = torch.rand(1, 1, 20, 20)
    assert torch.equal(tiled_apply(lambda t: t * 2, x, tile=64), x * 2)


def test_crossfade_is_the_authors_tiling():
    from dgno.inference.tiling import crossfade_weights

    # a 520 x 696 BBBC006 frame in 512-px tiles, 32-px overlap: starts {0, 8} x {0, 184}
    assert tile_starts(520, 512, 32) == [0, 8] and tile_starts(696, 512, 32) == [0, 184]
    first, second = crossfade_weights([0, 8], 512)
    assert torch.equal(first[:8], torch.ones(8)) and torch.equal(second[504:], torch.ones(8))
    torch.testing.assert_close(first[8:], torch.linspace(1.0, 0.0, 504))  # fades over the whole 504-px overlap
    torch.testing.assert_close(first[8:] + second[:504], torch.ones(504))
    # three tiles: each pair fades over its own overlap
    w = crossfade_weights([0, 480, 600], 512)
    assert torch.equal(w[1][:32], torch.linspace(0.0, 1.0, 32)) and torch.equal(w[1][512 - 392 :], torch.linspace(1.0, 0.0, 392))
    x = torch.rand(1, 2, 520, 696)
    torch.testing.assert_close(tiled_apply(lambda t: 2 * t, x, tile=512, overlap=32, blend="crossfade"), 2 * x)
    with pytest.raises(ValueError, match=r"unknown blend 'fade'"):
        tiled_apply(lambda t: t, x, tile=512, blend="fade")


def test_atomic_dir_replaces_only_on_success(tmp_path):
    from dgno.io import atomic_dir

    target = tmp_path / "data"
    target.mkdir()
    (target / "old.txt").write_text("old")
    with pytest.raises(RuntimeError), atomic_dir(target) as tmp:
        (tmp / "half.txt").write_text("half")
        raise RuntimeError("interrupted")
    assert sorted(p.name for p in target.iterdir()) == ["old.txt"]  # untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"]  # no temporary folder left
    with atomic_dir(target) as tmp:
        (tmp / "new.txt").write_text("new")
        assert sorted(p.name for p in target.iterdir()) == ["old.txt"]  # readers see the old folder until the end
    assert sorted(p.name for p in target.iterdir()) == ["new.txt"] and sorted(p.name for p in tmp_path.iterdir()) == ["data"]
    with atomic_dir(tmp_path / "a" / "b") as tmp:  # parents are created
        (tmp / "x").write_text("x")
    assert (tmp_path / "a" / "b" / "x").exists()


@pytest.mark.parametrize("blend", ["ramp", "crossfade"])
def test_batched_tiles_equal_one_at_a_time_and_keep_one_shape(blend):
    """Tiles grouped into batches (last batch filled with copies) give the one-at-a-time result,
    and the function only ever sees one input shape (what lets a CUDA graph serve every call)."""
    g = torch.Generator().manual_seed(0)
    image = torch.rand(1, 1, 70, 90, generator=g)
    shapes = set()

    def fn(x):
        shapes.add(tuple(x.shape))
        return torch.nn.functional.avg_pool2d(x, 5, stride=1, padding=2) * 2 + x.mean(dim=(1, 2, 3), keepdim=True)

    one = tiled_apply(fn, image, tile=32, overlap=12, blend=blend)
    shapes.clear()
    batched = tiled_apply(fn, image, tile=32, overlap=12, blend=blend, batch=4)  # 12 tiles: 3 calls of 4
    assert shapes == {(4, 1, 32, 32)}
    torch.testing.assert_close(batched, one, atol=1e-6, rtol=0)
    odd = tiled_apply(fn, image, tile=32, overlap=12, blend=blend, batch=5)  # 12 = 5 + 5 + 2 (+3 copies)
    torch.testing.assert_close(odd, one, atol=1e-6, rtol=0)
    with pytest.raises(ValueError, match="batch must be >= 1"):
        tiled_apply(fn, image, tile=32, batch=0)


def test_compressed_tiff_is_lossless_and_smaller(tmp_path):
    """Restored images are written compressed: the float32 values come back bit for bit."""
    from dgno.io import read_image, write_tiff

    rng = np.random.default_rng(0)
    img = np.clip(0.5 + np.cumsum(rng.normal(0, 0.01, (64, 80)), axis=1), 0, 1).astype(np.float32)  # smooth, like a restored image
    write_tiff(tmp_path / "raw.tif", img)
    write_tiff(tmp_path / "packed.tif", img, compress=True)
    assert np.array_equal(read_image(tmp_path / "packed.tif"), read_image(tmp_path / "raw.tif"))
    assert (tmp_path / "packed.tif").stat().st_size < (tmp_path / "raw.tif").stat().st_size
