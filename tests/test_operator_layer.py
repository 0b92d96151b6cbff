"""GG / LG / DG operator layers: maths, shapes on odd sizes, gradients, option errors."""

from __future__ import annotations

import pytest
import torch
from einops import rearrange
from torch.testing import assert_close

from dgno.layers.flux import BOUNDARIES, FLUXES, interface_fluxes
from dgno.layers.operator import (
    DGOperatorLayer,
    GlobalGalerkinLayer,
    LocalGalerkinLayer,
    galerkin_operator,
    make_operator_layer,
)

C, HEADS = 8, 2


def _x(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _randomise(layer: torch.nn.Module, seed: int = 1) -> torch.nn.Module:
    """Non-trivial norm affines, so the tests see per-head scales and shifts."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for norm in (layer.k_norm, layer.v_norm):
            norm.weight.copy_(1 + 0.3 * torch.randn(norm.weight.shape, generator=g))
            norm.bias.copy_(0.3 * torch.randn(norm.bias.shape, generator=g))
    return layer


def _reference_qkv(layer, x):
    """Q, K̃, Ṽ as (B, h, H·W, d), computed the slow obvious way."""
    q, k, v = layer.qkv(x).chunk(3, dim=1)
    q, k, v = (rearrange(t, "b (h d) y x -> b h (y x) d", h=layer.heads) for t in (q, k, v))
    def ln(t, n):  # the authors' per-head norm: unbiased std, ε added to the std
        t = (t - t.mean(-1, keepdim=True)) / (t.std(-1, keepdim=True) + n.eps)
        return t * n.weight[:, None] + n.bias[:, None]
    return q, ln(k, layer.k_norm), ln(v, layer.v_norm)


def test_global_layer_matches_srno_formula():
    layer = _randomise(GlobalGalerkinLayer(dim=C, heads=HEADS))
    x = _x(2, C, 6, 10)
    q, k, v = _reference_qkv(layer, x)
    op = k.transpose(-1, -2) @ v / (6 * 10)  # (B, h, d, d)
    qk = rearrange(q @ op, "b h (y x) d -> b (h d) y x", y=6)
    # out = x + MLP(x + Q K): the operator term only enters through the MLP
    assert_close(layer(x), x + layer.mlp(x + qk), atol=1e-5, rtol=1e-5)


def test_dg_single_element_without_flux_equals_gg():
    # one p×p element covering the image: no interior interface, Neumann → no flux at all
    dg = _randomise(DGOperatorLayer(dim=C, heads=HEADS, element_size=8, flux="central", boundary="neumann"))
    gg = GlobalGalerkinLayer(dim=C, heads=HEADS)
    gg.load_state_dict(dg.state_dict())
    x = _x(2, C, 8, 8)
    assert_close(dg(x), gg(x))


def test_dg_zero_penalty_equals_lg():
    dg = _randomise(DGOperatorLayer(dim=C, heads=HEADS, element_size=4, flux="jump", tau=0.0, learn_tau=False))
    lg = LocalGalerkinLayer(dim=C, heads=HEADS, element_size=4)
    lg.load_state_dict(dg.state_dict())
    x = _x(1, C, 12, 8)
    assert_close(dg(x), lg(x))


def test_lg_windows_are_independent():
    lg = _randomise(LocalGalerkinLayer(dim=C, heads=HEADS, element_size=4))
    x = _x(1, C, 8, 8)
    y = x.clone()
    y[..., 4:, 4:] += 1.0  # change only the bottom-right window
    d = (lg(x) - lg(y)).abs()
    assert d[..., :4, :].max() == 0 and d[..., :, :4].max() == 0
    assert d[..., 4:, 4:].max() > 0


def test_dg_couples_neighbouring_elements():
    dg = _randomise(DGOperatorLayer(dim=C, heads=HEADS, element_size=4, variant="face"))
    x = _x(1, C, 4, 8)
    y = x.clone()
    y[..., :, 4:] += 1.0  # change only the right element
    assert (dg(x) - dg(y))[..., :, :4].abs().max() > 0  # the left element feels it through the flux


@pytest.mark.parametrize("variant", ["face", "cell"])
def test_dg_layer_matches_explicit_assembly(variant):
    p = 4
    dg = _randomise(
        DGOperatorLayer(dim=C, heads=HEADS, element_size=p, variant=variant, flux="avg_jump", boundary="dirichlet")
    )
    x = _x(2, C, 8, 12)
    q, k, v = _reference_qkv(dg, x)  # (B, h, H·W, d)
    def grid(t):
        return rearrange(t, "b h (nh p1 nw p2) d -> b nh nw h p1 p2 d", p1=p, p2=p, nh=2)
    q, k, v = grid(q), grid(k), grid(v)
    def gram(a, b):
        return a.transpose(-1, -2) @ b / a.shape[-2]
    vol = gram(k.flatten(-3, -2), v.flatten(-3, -2))
    if variant == "cell":
        faces = (vol, vol, vol, vol)
    else:
        faces = (
            gram(k[..., 0, :, :], v[..., 0, :, :]),  # top row
            gram(k[..., -1, :, :], v[..., -1, :, :]),  # bottom row
            gram(k[..., :, 0, :], v[..., :, 0, :]),  # left column
            gram(k[..., :, -1, :], v[..., :, -1, :]),  # right column
        )
    op = vol + interface_fluxes(*faces, flux="avg_jump", boundary="dirichlet", tau=dg.tau)
    z = torch.einsum("bijhxyk,bijhkl->bijhxyl", q, op)
    z = rearrange(z, "b nh nw h p1 p2 d -> b (h d) (nh p1) (nw p2)")
    assert_close(dg(x), x + dg.mlp(x + z), atol=1e-5, rtol=1e-5)


def test_galerkin_operator_is_scaled_gram():
    k, v = _x(3, 4, 5, seed=1), _x(3, 4, 5, seed=2)  # (batch, d, n)
    assert_close(galerkin_operator(k, v), k @ v.transpose(-1, -2) / 5)


def test_tau_learnable_or_fixed():
    learn = DGOperatorLayer(dim=C, heads=HEADS, flux="jump")
    assert isinstance(learn.tau, torch.nn.Parameter) and learn.tau.item() == pytest.approx(0.25)
    fixed = DGOperatorLayer(dim=C, heads=HEADS, element_size=4, flux="avg_jump", tau=0.5, learn_tau=False)
    assert not any(n == "tau" for n, _ in fixed.named_parameters())
    assert fixed.tau.item() == pytest.approx(0.5)
    assert DGOperatorLayer(dim=C, heads=HEADS, flux="central").tau is None  # no penalty term, no τ
    # a different fixed τ changes the output; the learnable one starts where fixed 0.25 is
    x = _x(1, C, 8, 16)
    other = DGOperatorLayer(dim=C, heads=HEADS, element_size=4, flux="avg_jump", tau=1.0, learn_tau=False)
    other.load_state_dict(fixed.state_dict())
    assert not torch.allclose(fixed(x), other(x))
    quarter = DGOperatorLayer(dim=C, heads=HEADS, element_size=4, flux="avg_jump", tau=0.25, learn_tau=False)
    learn4 = DGOperatorLayer(dim=C, heads=HEADS, element_size=4, flux="avg_jump")
    quarter.load_state_dict(fixed.state_dict())
    learn4.load_state_dict(fixed.state_dict(), strict=False)  # all but the τ parameter
    assert_close(quarter(x), learn4(x))


@pytest.mark.parametrize("variant", ["face", "cell"])
@pytest.mark.parametrize("boundary", BOUNDARIES)
def test_odd_sizes_keep_shape(variant, boundary):
    layer = DGOperatorLayer(dim=C, heads=HEADS, element_size=8, variant=variant, boundary=boundary)
    x = _x(2, C, 20, 28)
    y = layer(x)
    assert y.shape == x.shape and torch.isfinite(y).all()


@pytest.mark.parametrize("cls", [GlobalGalerkinLayer, LocalGalerkinLayer])
def test_gg_lg_odd_sizes(cls):
    x = _x(1, C, 13, 7)
    assert cls(dim=C, heads=HEADS)(x).shape == x.shape


@pytest.mark.parametrize("flux", FLUXES)
@pytest.mark.parametrize("variant", ["face", "cell"])
def test_gradients_reach_every_parameter(flux, variant):
    layer = DGOperatorLayer(dim=C, heads=HEADS, element_size=4, variant=variant, flux=flux, boundary="dirichlet")
    x = _x(1, C, 10, 9).requires_grad_()
    layer(x).square().mean().backward()
    for name, p in layer.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name
    assert x.grad is not None and torch.isfinite(x.grad).all()


def test_periodic_flux_reaches_across_the_wrap():
    # 1×3 elements: the left element only touches the right one through the periodic wrap
    layer = _randomise(DGOperatorLayer(dim=C, heads=HEADS, element_size=4, boundary="periodic", variant="cell"))
    x = _x(1, C, 4, 12)
    y = x.clone()
    y[..., 8:] += 1.0
    assert (layer(x) - layer(y))[..., :4].abs().max() > 0
    neu = DGOperatorLayer(dim=C, heads=HEADS, element_size=4, boundary="neumann", variant="cell")
    neu.load_state_dict(layer.state_dict())
    # with Neumann the left element sees the right one only through the middle: 2 layers away
    assert (neu(x) - neu(y))[..., :4].abs().max() == 0


@pytest.mark.parametrize(
    ("kwargs", "bad", "allowed"),
    [
        ({"variant": "edge"}, "'edge'", ["'face'", "'cell'"]),
        ({"flux": "lax"}, "'lax'", ["'central'", "'jump'", "'avg_jump'", "'upwind'"]),
        ({"boundary": "robin"}, "'robin'", ["'neumann'", "'dirichlet'", "'periodic'"]),
    ],
)
def test_bad_options_raise(kwargs, bad, allowed):
    with pytest.raises(ValueError) as err:
        DGOperatorLayer(dim=C, heads=HEADS, **kwargs)
    assert bad in str(err.value) and all(a in str(err.value) for a in allowed)


def test_make_operator_layer():
    assert isinstance(make_operator_layer("gg", dim=C, heads=HEADS), GlobalGalerkinLayer)
    assert isinstance(make_operator_layer("lg", dim=C, heads=HEADS, element_size=4), LocalGalerkinLayer)
    assert isinstance(make_operator_layer("dg", dim=C, heads=HEADS, variant="face"), DGOperatorLayer)
    with pytest.raises(ValueError, match="'fno'.*'gg'.*'lg'.*'dg'"):
        make_operator_layer("fno", dim=C, heads=HEADS)
    with pytest.raises(ValueError, match="divisible"):
        GlobalGalerkinLayer(dim=10, heads=4)


def test_layer_moves_with_to():
    layer = DGOperatorLayer(dim=C, heads=HEADS, flux="jump", learn_tau=False).to(torch.float64)
    x = _x(1, C, 8, 8).double()
    assert layer(x).dtype == torch.float64
