"""CUDA-graph inference (``dgno.inference.cuda_graphs``): refusals on any machine, replay == eager on a GPU."""

from __future__ import annotations

import pytest
import torch

from dgno.inference.cuda_graphs import GraphedForward, capturable, forward_fn
from dgno.layers.mambair import set_scan_backend
from dgno.models.registry import build_model

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (the GPU environment)")


def _assm_dgno() -> torch.nn.Module:
    """A small DGNO whose lifting encoder uses ASSM blocks (the paper's encoder), so it has selective scans."""
    torch.manual_seed(0)
    return build_model("dgno-cell", scale="smoke", encoder_block="assm")


def test_capturable_refuses_cpu_and_the_host_synchronising_scan():
    model = _assm_dgno()
    ok, why = capturable(model, torch.device("cpu"))
    assert not ok and "CUDA device" in why
    set_scan_backend(model, "torch")
    ok, why = capturable(model, torch.device("cuda"))
    assert not ok and "'torch' selective scan synchronises" in why
    set_scan_backend(model, "triton")
    assert capturable(model, torch.device("cuda")) == (True, "")


def test_eager_forward_fn_matches_the_model_and_casts_bf16_back():
    model = build_model("dgno-cell", scale="smoke").eval()
    x = torch.rand(2, 1, 24, 24)
    with torch.no_grad():
        ref = model(x)
    out = forward_fn(model, torch.device("cpu"))(x)
    assert all(torch.equal(a, b) for a, b in zip(out, ref))
    low = forward_fn(model, torch.device("cpu"), bf16=True)(x)
    assert [t.dtype for t in low] == [torch.float32] * 3
    assert max(float((a - b).abs().max()) for a, b in zip(low, ref)) < 0.1


@cuda
@pytest.mark.parametrize("bf16", [False, True])
def test_graph_replay_equals_eager(bf16):
    model = _assm_dgno().cuda().eval()
    set_scan_backend(model, "triton")
    x = torch.rand(2, 1, 40, 40, device="cuda")
    eager = forward_fn(model, x.device, bf16=bf16)(x)
    graphed = GraphedForward(model, bf16=bf16)
    for _ in range(2):  # capture, then replay with new data in the same static buffer
        out = graphed(x)
        for a, b in zip(out, eager):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
    y = torch.rand_like(x)
    torch.testing.assert_close(graphed(y)[-1], forward_fn(model, x.device, bf16=bf16)(y)[-1], atol=1e-5, rtol=0)
