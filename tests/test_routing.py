"""Eval-time ASSM routing: argmax (default, deterministic) and the authors' seeded Gumbel-noise routing."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from dgno.layers.mambair import ASSM
from dgno.models.registry import build_model
from dgno.models.routing import set_routing


@pytest.fixture(scope="module")
def model() -> nn.Module:
    torch.manual_seed(0)
    return build_model("dgno-face", scale="smoke", encoder_block="assm").eval()


@pytest.fixture(scope="module")
def x() -> torch.Tensor:
    return torch.rand(1, 1, 32, 32, generator=torch.Generator().manual_seed(1))


def _run(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(x)[-1]


def test_argmax_is_the_default_and_unchanged(model, x):
    assert {m.routing for m in model.modules() if isinstance(m, ASSM)} == {"argmax"}
    before = _run(model, x)
    set_routing(model, "gumbel", seed=5)
    _run(model, x)
    assert set_routing(model, "argmax") == 4
    torch.testing.assert_close(_run(model, x), before, atol=0, rtol=0)


def test_the_same_seed_reproduces_and_other_seeds_differ(model, x):
    outputs = {}
    for seed in (1, 2, 1):
        set_routing(model, "gumbel", seed=seed)
        outputs.setdefault(seed, []).append(_run(model, x))
    set_routing(model, "argmax")
    argmax = _run(model, x)
    torch.testing.assert_close(outputs[1][0], outputs[1][1], atol=0, rtol=0)
    for a, b in [(outputs[1][0], outputs[2][0]), (outputs[1][0], argmax)]:
        assert (a - b).abs().max() > 1e-4


def test_repeats_in_one_stream_differ_and_the_stream_reproduces(model, x):
    set_routing(model, "gumbel", seed=7)
    first = [_run(model, x) for _ in range(2)]
    set_routing(model, "gumbel", seed=7)
    second = [_run(model, x) for _ in range(2)]
    set_routing(model, "argmax")
    assert (first[0] - first[1]).abs().max() > 1e-4  # the noise advances from one call to the next
    for a, b in zip(first, second):
        torch.testing.assert_close(a, b, atol=0, rtol=0)


def test_gumbel_routes_sample_the_routers_distribution():
    """Hard Gumbel-softmax at tau 1: one-hot routes, each drawn with the router's softmax probability."""
    torch.manual_seed(3)
    assm = ASSM(dim=6, num_tokens=4, inner_rank=2).eval()
    with torch.no_grad():
        assm.route[-1].weight.mul_(5)  # spread the probabilities so the test has power
    token = torch.randn(1, 1, 6).expand(1, 20000, 6)
    set_routing(assm, "gumbel", seed=0)
    with torch.no_grad():
        routes = F.one_hot(assm.routes(token)[0], 4).float()
        probs = torch.softmax(assm.route(token[0, :1]), dim=-1)[0]
    assert torch.equal(routes.sum(-1), torch.ones(1, 20000)) and set(routes.unique().tolist()) == {0.0, 1.0}
    torch.testing.assert_close(routes[0].mean(0), probs, atol=0.015, rtol=0)
    assert probs.max() < 0.9 and probs.min() > 0.02  # several routes likely: the test has power


def test_training_mode_keeps_its_straight_through_routes():
    """Training draws from torch's global generator with gradients, whatever eval routing is set."""
    assm = ASSM(dim=6, num_tokens=4, inner_rank=2).train()
    set_routing(assm, "gumbel", seed=0)
    x = torch.randn(1, 50, 6)
    torch.manual_seed(11)
    first = assm.routes(x)[1]
    torch.manual_seed(11)
    assert torch.equal(first, assm.routes(x)[1]) and first.requires_grad


@pytest.mark.parametrize(
    "args, match",
    [
        (("softmax",), "routing 'softmax'; allowed: 'argmax', 'gumbel'"),
        (("gumbel",), "needs a seed"),
        (("argmax", 3), "seed=3 given for routing 'argmax'"),
    ],
)
def test_bad_arguments_are_refused(args, match):
    kw = {"seed": args[1]} if len(args) > 1 else {}
    with pytest.raises(ValueError, match=match):
        set_routing(ASSM(dim=6, num_tokens=4, inner_rank=2), args[0], **kw)


def test_a_model_without_assm_is_refused():
    with pytest.raises(ValueError, match="Linear has no ASSM"):
        set_routing(nn.Linear(2, 2), "argmax")


def test_gumbel_routed_models_are_not_captured_in_cuda_graphs(model):
    """A CUDA graph would replay the one draw made at capture; capturable() says so (checked before any GPU work)."""
    from dgno.inference.cuda_graphs import capturable

    set_routing(model, "gumbel", seed=1)
    try:
        ok, why = capturable(model, torch.device("cuda"))
        assert not ok and "routing 'gumbel'" in why and "replay one draw" in why
    finally:
        set_routing(model, "argmax")


def test_per_image_seeds_make_an_image_independent_of_the_others(model, x):
    """Each image's Gumbel draws depend on (seed, repeat, id) only: its result does not change with the order."""
    from dgno.inference.gumbel import image_seed, routing_hook

    assert image_seed(0, 1, "a01_s1") != image_seed(0, 2, "a01_s1") != image_seed(0, 1, "a01_s2")
    other = torch.rand(1, 1, 32, 32, generator=torch.Generator().manual_seed(9))
    hook, record = routing_hook(model, "gumbel", seed=3, repeat=1)
    assert record["routing"] == "gumbel" and record["gumbel_repeat"] == 1
    try:
        hook("img0")
        first = _run(model, x)
        hook("img1")
        _run(model, other)
        hook("img0")
        again = _run(model, x)  # after another image: the same draws
        torch.testing.assert_close(again, first, atol=0, rtol=0)
    finally:
        set_routing(model, "argmax")
    assert routing_hook(model, "argmax") == (None, {"routing": "argmax"})
    plain = build_model("nafnet", scale="smoke").eval()
    assert routing_hook(plain, "gumbel", seed=0)[0] is None  # nothing to route: recorded as argmax
