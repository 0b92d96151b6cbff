"""The inference engines compute what the eager network computes: the compiled kernels, the rewired
network, the engine choice and its fallbacks."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from fixtures_authors import toy_release

from dgno.inference import engines
from dgno.inference.evaluate import model_restorer
from dgno.io import InputError
from dgno.layers import native_kernels, native_modules
from dgno.models.registry import build_model

CPU = torch.device("cpu")
needs_kernels = pytest.mark.skipif(not native_kernels.available(), reason=f"no native kernels here: {native_kernels.unavailable_reason()}")


@needs_kernels
@pytest.mark.parametrize("channels,k,bias,channels_last", [(254, 3, False, True), (16, 3, True, False), (5, 5, True, False), (3, 1, False, True)])
def test_depthwise_kernel_matches_conv2d(channels, k, bias, channels_last):
    g = torch.Generator().manual_seed(channels)
    x = torch.randn(2, channels, 9, 13, generator=g)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    w = torch.randn(channels, 1, k, k, generator=g)
    b = torch.randn(channels, generator=g) if bias else None
    out = native_kernels.depthwise_conv_native(x, w, b)
    torch.testing.assert_close(out, F.conv2d(x, w, b, padding=k // 2, groups=channels), atol=1e-5, rtol=1e-5)
    assert out.is_contiguous(memory_format=torch.channels_last)


@needs_kernels
def test_gated_depthwise_kernel_matches_its_torch_form():
    """The convolution and the ASSM's gate after it, x ⊙ σ(conv), in one pass (GDFN's GELU(a) ⊙ b, fused
    into its one-pass kernel, is checked with the block below)."""
    g = torch.Generator().manual_seed(3)
    c = 4 * native_kernels.lanes()
    x = 3 * torch.randn(2, c, 7, 11, generator=g)
    w, b = torch.randn(c, 1, 3, 3, generator=g), torch.randn(c, generator=g)
    expected = x * torch.sigmoid(F.conv2d(x, w, b, padding=1, groups=c))
    out = native_kernels.depthwise_conv_native(x, w, b, sigmoid_gate=True)
    torch.testing.assert_close(out, expected, atol=1e-5 * float(expected.abs().max()), rtol=1e-5)
    with pytest.raises(ValueError, match="multiples"):
        native_kernels.depthwise_conv_native(x[:, :-1], w[:-1], b[:-1], sigmoid_gate=True)


@needs_kernels
def test_native_assm_block_keeps_the_function():
    """A paper-shaped ASSM block (hidden widths that are and are not whole vector blocks): the fused
    positional gate and the GDFN with zero-padded hidden channels compute the eager block."""
    from dgno.layers.mambair import ASSMBlock

    torch.manual_seed(0)
    for dim in (2 * native_kernels.lanes(), 9):
        block = torch.nn.Sequential(ASSMBlock(dim=dim)).eval()
        native = copy.deepcopy(block)
        counts = native_modules.to_native(native)
        assert counts["gdfn"] == 1 and counts["gate"] == (dim == 2 * native_kernels.lanes())
        x = torch.randn(1, dim, 12, 20)
        with torch.no_grad():
            torch.testing.assert_close(native(x), block(x), atol=1e-4, rtol=0)


@needs_kernels
@pytest.mark.parametrize("m,k,n,bias", [(1000, 48, 254, False), (37, 96, 22, True), (5, 7, 3, True), (64, 200, 64, False)])
def test_packed_linear_matches_torch(m, k, n, bias):
    """The compiled matrix product: any row count (not whole 6-row blocks), output width (not whole panels)
    and depth, with and without bias, on token rows and on a channels-last map's pixels."""
    g = torch.Generator().manual_seed(m + k + n)
    w = torch.randn(n, k, generator=g)
    b = torch.randn(n, generator=g) if bias else None
    layer = native_modules.PackedLinear(w, b)
    x = torch.randn(2, m, k, generator=g)
    with torch.no_grad():
        torch.testing.assert_close(layer(x), F.linear(x, w, b), atol=1e-5, rtol=1e-5)
        conv = torch.nn.Conv2d(k, n, 1, bias=bias)
        image = torch.randn(1, k, 3, m, generator=g).contiguous(memory_format=torch.channels_last)
        torch.testing.assert_close(native_modules.PointwiseLinear(conv)(image), conv(image), atol=1e-5, rtol=1e-5)
        strided = x.transpose(1, 2).contiguous().transpose(1, 2)  # rows not contiguous: copied first
        torch.testing.assert_close(layer(strided), F.linear(strided, w, b), atol=1e-5, rtol=1e-5)


def test_kernels_without_a_compiler_say_why(monkeypatch, tmp_path):
    """No compiler: the kernels are unavailable with the reason, and nothing half-built stays in the cache."""
    monkeypatch.setenv("CC", str(tmp_path / "no-such-compiler"))
    monkeypatch.setenv("DGNO_CACHE", str(tmp_path / "cache"))
    native_kernels._build.cache_clear()
    try:
        assert not native_kernels.available()
        assert "no-such-compiler" in native_kernels.unavailable_reason()
        with pytest.raises(RuntimeError, match="unavailable"):
            native_modules.to_native(build_model("dgno-cell", scale="smoke"))
    finally:
        native_kernels._build.cache_clear()
    assert not list((tmp_path / "cache").rglob("*.so"))


def _toy_authors(tmp_path, name="DGNO_BBBC006_w1_Cell"):
    """A toy-size authors' network with the ASSM encoder (the selective scan, the routing), imported."""
    from dgno.checkpoint import import_authors, load_trained

    files, options = toy_release(tmp_path, names=(name,))
    model_pt = import_authors(tmp_path / f"{name}.pth", options / f"{name}.yml", tmp_path / "model.pt")
    return load_trained(model_pt)[0].eval()


@needs_kernels
def test_native_network_matches_eager(tmp_path):
    """Every module the rewiring touches (1×1 convolutions, depth-wise convolutions, the scan, channel
    norms) keeps the function: the toy authors' network (ASSM encoder) and the smoke DGNO (conv encoder)."""
    torch.manual_seed(0)
    for model in (_toy_authors(tmp_path), build_model("dgno-face", scale="smoke").eval()):
        native = copy.deepcopy(model)
        counts = native_modules.to_native(native)
        assert counts["pointwise"] > 0 and counts["depthwise"] > 0
        x = torch.rand(2, model.hparams["in_channels"], 40, 56)
        with torch.no_grad():
            for a, b in zip(model(x), native(x)):
                torch.testing.assert_close(b, a, atol=1e-4, rtol=0)


def test_auto_engine_falls_back_with_a_note(monkeypatch):
    """auto takes the next engine of its order when one cannot run, and says why; a named engine that
    cannot run is an error naming the fix."""
    monkeypatch.setattr(native_kernels, "available", lambda: False)
    monkeypatch.setattr(native_kernels, "unavailable_reason", lambda: "no C compiler found")
    monkeypatch.setattr(engines, "AUTO_ORDER", {"cpu": ("native", "eager")})
    chosen = engines.build_engine(build_model("dgno-cell", scale="smoke"), CPU, engine="auto")
    assert chosen.name == "eager" and "engine native unavailable (no C compiler found)" in chosen.note
    with pytest.raises(InputError, match=r"--engine native: no C compiler found\. Fix: use --engine auto"):
        engines.build_engine(build_model("dgno-cell", scale="smoke"), CPU, engine="native")
    with pytest.raises(InputError, match="CUDA graphs and bf16 are options of the eager engine"):
        engines.build_engine(build_model("dgno-cell", scale="smoke"), CPU, engine="onnxruntime", bf16=True)
    with pytest.raises(ValueError, match="'fast'"):
        engines.build_engine(build_model("dgno-cell", scale="smoke"), CPU, engine="fast")


@needs_kernels
def test_auto_on_a_cpu_is_the_native_engine():
    restore = model_restorer(build_model("dgno-cell", scale="smoke").eval(), CPU, tile=None, overlap=0)
    assert restore.engine == "native" and restore.engine_note == ""


@pytest.mark.slow
def test_onnx_engine_restores_like_eager_at_any_image_size(tmp_path, monkeypatch):
    """The ONNX engine (a file exported for 64-px tiles, parity-checked, cached) restores images smaller and
    larger than its tile as eager PyTorch does; a second engine reuses the cached file."""
    monkeypatch.setenv("DGNO_CACHE", str(tmp_path))
    base = build_model("dgno-cell", scale="smoke").eval()
    rng = np.random.default_rng(0)
    for shape in ((40, 50), (100, 90)):
        img = rng.random(shape).astype(np.float32)
        ref = model_restorer(copy.deepcopy(base), CPU, tile=64, overlap=16, engine="eager")(img)
        restore = model_restorer(copy.deepcopy(base), CPU, tile=64, overlap=16, engine="onnxruntime")
        assert restore.engine == "onnxruntime"
        # (the 40×50 image is reflect-padded to the export's 64 px, as DGNO pads it to its multiple of 32 itself)
        np.testing.assert_allclose(restore(img), ref, atol=1e-4)
    assert len(list((tmp_path / "onnx").glob("*.onnx"))) == 1
