"""MambaIRv2's ASSM block: shapes, deterministic evaluation, gradients, and the scan it uses."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import dgno.layers.selective_scan as ss
from dgno.layers.blocks import make_encoder_block
from dgno.layers.mambair import ASSM, GDFN, ASSMBlock


@pytest.fixture
def block() -> ASSMBlock:
    torch.manual_seed(0)
    return ASSMBlock(dim=12, num_tokens=8, inner_rank=4)


@pytest.mark.parametrize("size", [(7, 9), (1, 5), (16, 16)])
def test_shape_preserved_on_any_size(block, size):
    x = torch.randn(2, 12, *size)
    assert block(x).shape == x.shape
    block.eval()
    assert block(x).shape == x.shape


def test_eval_mode_is_deterministic(block):
    """Eval routes by argmax (no Gumbel noise), so two calls agree bit for bit."""
    block.eval()
    x = torch.randn(2, 12, 9, 7)
    with torch.no_grad():
        torch.testing.assert_close(block(x), block(x), atol=0, rtol=0)


def test_training_mode_samples_routes(block):
    """Training routes by a hard Gumbel-softmax: one-hot rows, and not always the argmax; eval has no one-hot."""
    x = torch.randn(1, 40, 12)
    assm = block.assm.train()
    route, one_hot = assm.routes(x)
    assert torch.equal(one_hot.sum(-1), torch.ones(1, 40)) and torch.equal(one_hot.argmax(-1), route)
    assm.eval()
    argmax, none = assm.routes(x)
    assert none is None and argmax.shape == (1, 40)
    assm.train()
    assert any(not torch.equal(assm.routes(x)[0], argmax) for _ in range(5))


def test_gradients_reach_every_parameter(block):
    """Including the router (straight-through Gumbel) and the prompt dictionary."""
    block.train()
    x = torch.randn(2, 12, 6, 5, requires_grad=True)
    (block(x) ** 2).mean().backward()
    missing = [n for n, p in block.named_parameters() if p.grad is None or not torch.isfinite(p.grad).all() or p.grad.abs().sum() == 0]
    assert not missing, f"no gradient for {missing}"
    assert x.grad is not None and torch.isfinite(x.grad).all()


def test_uses_the_fast_scan_and_matches_the_reference(block, monkeypatch):
    """The block's scan on CPU is the chunked torch scan; the token loop gives the same output."""
    block.eval()
    x = torch.randn(1, 12, 8, 6)
    calls = []
    original = ss._ChunkedScan.apply
    monkeypatch.setattr(ss._ChunkedScan, "apply", lambda *a: calls.append(1) or original(*a))
    with torch.no_grad():
        fast = block(x)
        assert calls, "ASSM did not use the chunked scan"
        block.assm.scan_backend = "reference"
        ref = block(x)
    torch.testing.assert_close(fast, ref, atol=1e-5, rtol=1e-5)


def test_tokens_are_scanned_in_route_order(monkeypatch):
    """Semantic-guided neighbouring: the scan sees tokens stably sorted by route, the prompts are
    added in raster order (the authors' convention), and every output goes back to its token's
    raster position."""
    torch.manual_seed(1)
    assm = ASSM(dim=6, num_tokens=4, inner_rank=2).eval()
    x = torch.randn(1, 10, 6)
    seen = {}
    original = assm._scan

    def spy(v, prompt):
        seen["v"], seen["prompt"] = v, prompt
        seen["y"] = original(v, prompt)
        return seen["y"]

    monkeypatch.setattr(assm, "_scan", spy)
    with torch.no_grad():
        y = assm(x, (2, 5))
        routes = F.one_hot(assm.routes(x)[0][0], assm.prompt_codes.shape[0]).float()  # (L, num_tokens)
        v = assm.in_proj(x.transpose(1, 2).reshape(1, 6, 2, 5))
        v = (v * torch.sigmoid(assm.cpe(v))).flatten(2).transpose(1, 2)  # (1, L, hidden)
        prompt = routes @ (assm.prompt_codes @ assm.prompt_basis)  # (L, N)
        expected_y = assm.out_proj(assm.out_norm(seen["y"]))  # sorted order
    order = routes.argmax(-1).argsort(stable=True)
    torch.testing.assert_close(seen["v"], v[:, order])
    assert not torch.equal(order, torch.arange(10))  # the sort does move tokens here
    torch.testing.assert_close(seen["prompt"], prompt[None])
    torch.testing.assert_close(y[:, order], expected_y)


def test_registered_as_encoder_block():
    blk = make_encoder_block("assm", 24)
    assert isinstance(blk, ASSMBlock)
    assert blk(torch.randn(1, 24, 5, 3)).shape == (1, 24, 5, 3)


def test_paper_hyperparameters():
    """d_state 8, 64 routes, rank-32 prompts, expand 2, GDFN expansion 2.66."""
    blk = make_encoder_block("assm", 48)
    assm = blk.assm
    assert assm.A_log.shape == (96, 8)
    assert assm.prompt_codes.shape == (64, 32) and assm.prompt_basis.shape == (32, 8)
    assert assm.route[-1].out_features == 64
    assert blk.gdfn.project_out.in_channels == int(48 * 2.66)


def test_gdfn_shape():
    assert GDFN(dim=8).forward(torch.randn(2, 8, 5, 7)).shape == (2, 8, 5, 7)


def test_bad_scan_backend_is_named():
    with pytest.raises(ValueError, match=r"'cuda'.*allowed"):
        ASSM(dim=12, scan_backend="cuda")


def test_set_scan_backend_switches_every_assm_of_a_model():
    """One call moves every ASSM of a registry model to a backend; the output does not change."""
    from dgno.layers.mambair import set_scan_backend
    from dgno.models.registry import build_model

    torch.manual_seed(0)
    model = build_model("dgno-cell", scale="smoke", encoder_block="assm").eval()
    x = torch.rand(1, 1, 16, 16)
    with torch.no_grad():
        fast = model(x)
        n = set_scan_backend(model, "reference")
        ref = model(x)
    assms = [m for m in model.modules() if isinstance(m, ASSM)]
    assert n == len(assms) > 0 and {m.scan_backend for m in assms} == {"reference"}
    for a, b in zip(fast if isinstance(fast, list) else [fast], ref if isinstance(ref, list) else [ref], strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match=r"'gpu'.*allowed"):
        set_scan_backend(model, "gpu")
    with pytest.raises(ValueError, match="no selective-scan"):
        set_scan_backend(build_model("nafnet", scale="smoke"), "torch")
