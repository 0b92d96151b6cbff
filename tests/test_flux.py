"""Numerical fluxes and their conservative assembly, pinned on hand-made operators."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from dgno.layers.flux import (
    BOUNDARIES,
    FLUXES,
    assemble_axis,
    avg_jump,
    central,
    interface_fluxes,
    jump,
    numerical_flux,
    upwind,
)

H, D = 2, 3  # heads, head dim


def _op(value: float) -> torch.Tensor:
    """A constant (h, d, d) operator, easy to reason about by hand."""
    return torch.full((H, D, D), value)


def test_central_is_average():
    assert_close(central(_op(1.0), _op(3.0)), _op(2.0))


def test_jump_penalises_difference():
    # −τ (R − L) = −0.5 (3 − 1) = −1
    assert_close(jump(_op(1.0), _op(3.0), 0.5), _op(-1.0))


def test_avg_jump_is_central_plus_jump():
    # ½(1 + 3) − 0.25 (3 − 1) = 2 − 0.5
    assert_close(avg_jump(_op(1.0), _op(3.0), 0.25), _op(1.5))


def test_upwind_weights_by_mean_difference_per_head():
    L = torch.stack([torch.full((D, D), 0.0), torch.full((D, D), 2.0)])  # head means 0, 2
    R = torch.stack([torch.full((D, D), 1.0), torch.full((D, D), 2.0)])  # head means 1, 2
    a0 = torch.sigmoid(torch.tensor(1.0))  # head 0: α = σ(1 − 0)
    expected = torch.stack([a0 * R[0] + (1 - a0) * L[0], R[1]])  # head 1: equal → ½L + ½R = 2
    assert_close(upwind(L, R), expected)
    # a non-constant matrix: α uses the mean over all d×d entries
    L2 = torch.arange(9.0).view(1, 3, 3)
    R2 = torch.zeros(1, 3, 3)
    a = torch.sigmoid(torch.tensor(0.0 - 4.0))
    assert_close(upwind(L2, R2), a * R2 + (1 - a) * L2)


def test_numerical_flux_dispatch_and_errors():
    L, R = torch.randn(H, D, D), torch.randn(H, D, D)
    assert_close(numerical_flux("central", L, R), central(L, R))
    assert_close(numerical_flux("jump", L, R, 0.3), jump(L, R, 0.3))
    assert_close(numerical_flux("avg_jump", L, R, 0.3), avg_jump(L, R, 0.3))
    assert_close(numerical_flux("upwind", L, R), upwind(L, R))
    with pytest.raises(ValueError, match="'roe'.*'central'.*'jump'.*'avg_jump'.*'upwind'"):
        numerical_flux("roe", L, R)
    with pytest.raises(ValueError, match="tau"):
        numerical_flux("jump", L, R)


def _grid(b=2, nh=3, nw=4, seed=0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(b, nh, nw, H, D, D, generator=g)


def _line(values: list[float]) -> torch.Tensor:
    """A 1×1×n grid (axis 2) of constant operators."""
    return torch.stack([_op(v) for v in values]).view(1, 1, len(values), H, D, D)


def test_assembly_1d_neumann_by_hand():
    # elements 1, 2, 4 along the width; interfaces F(1,2), F(2,4); jump with τ = 1
    ops = _line([1.0, 2.0, 4.0])
    got = assemble_axis(ops, ops, axis=2, flux="jump", boundary="neumann", tau=1.0)
    f12, f24 = -(2.0 - 1.0), -(4.0 - 2.0)
    expected = _line([f12, f24 - f12, -f24])  # + on L side, − on R side, nothing at the ends
    assert_close(got, expected)


def test_assembly_dirichlet_adds_flux_of_the_inner_face_against_a_zero_ghost():
    # the authors' convention: on both ends + F(K_b, 0), K_b = the boundary element's face that
    # points into the domain (first element: its plus face; last element: its minus face)
    minus, plus = _line([1.0, 2.0, 4.0]), _line([10.0, 20.0, 40.0])
    for kind in FLUXES:
        got = assemble_axis(minus, plus, axis=2, flux=kind, boundary="dirichlet", tau=0.7)
        neu = assemble_axis(minus, plus, axis=2, flux=kind, boundary="neumann", tau=0.7)
        zero = torch.zeros_like(minus[:, :, :1])
        assert_close(got[:, :, :1] - neu[:, :, :1], numerical_flux(kind, plus[:, :, :1], zero, 0.7))
        assert_close(got[:, :, -1:] - neu[:, :, -1:], numerical_flux(kind, minus[:, :, -1:], zero, 0.7))
        assert_close(got[:, :, 1:-1], neu[:, :, 1:-1])
    # central: the old convention (− F(0, K) on the first side) would give −½·10 here, not +½·10
    first = assemble_axis(minus, plus, axis=2, flux="central", boundary="dirichlet")[0, 0, 0, 0, 0, 0]
    assert_close(first, torch.tensor(0.5 * 10.0 + 0.5 * (10.0 + 2.0)))


def test_assembly_periodic_wraps_minus_of_last_against_plus_of_first():
    # authors' face wrap: F(left face of the last column, right face of the first column)
    minus, plus = _line([1.0, 2.0, 4.0]), _line([10.0, 20.0, 40.0])
    got = assemble_axis(minus, plus, axis=2, flux="jump", boundary="periodic", tau=1.0)
    f01, f12, wrap = -(2.0 - 10.0), -(4.0 - 20.0), -(10.0 - 4.0)  # −τ (R − L)
    assert_close(got, _line([f01 - wrap, f12 - f01, wrap - f12]))


def test_assembly_periodic_wraps_last_to_first():
    ops = _line([1.0, 2.0, 4.0])
    got = assemble_axis(ops, ops, axis=2, flux="central", boundary="periodic")
    f = [central(_op(a), _op(b))[0, 0, 0].item() for a, b in [(1, 2), (2, 4), (4, 1)]]
    # element 0: + F(0→1) − F(2→0 wrap); element 2: + F(2→0 wrap) − F(1→2)
    expected = _line([f[0] - f[2], f[1] - f[0], f[2] - f[1]])
    assert_close(got, expected)


def test_face_operators_pair_the_facing_faces():
    # with distinct minus/plus faces, interface e+½ must use plus[e] (L) and minus[e+1] (R)
    minus, plus = _line([10.0, 20.0]), _line([1.0, 2.0])
    got = assemble_axis(minus, plus, axis=2, flux="jump", boundary="neumann", tau=1.0)
    f = -(20.0 - 1.0)  # −τ (minus[1] − plus[0])
    assert_close(got, _line([f, -f]))


@pytest.mark.parametrize("kind", FLUXES)
@pytest.mark.parametrize("boundary", ["neumann", "periodic"])
def test_conservation_fluxes_sum_to_zero(kind, boundary):
    top, bottom, left, right = (_grid(seed=s) for s in range(4))
    total = interface_fluxes(top, bottom, left, right, flux=kind, boundary=boundary, tau=0.4)
    assert total.shape == top.shape
    # every interface is added once and subtracted once: the grid sum vanishes per sample/head
    assert_close(total.sum(dim=(1, 2)), torch.zeros_like(total[:, 0, 0]), atol=1e-5, rtol=0)


def test_dirichlet_grid_sum_equals_boundary_fluxes():
    top, bottom, left, right = (_grid(seed=s) for s in range(4))
    total = interface_fluxes(top, bottom, left, right, flux="avg_jump", boundary="dirichlet", tau=0.4)
    z = torch.zeros_like(top[:, :1])
    zc = torch.zeros_like(left[:, :, :1])
    # interior fluxes cancel; each side adds F(inner face of its boundary elements, 0)
    expected = (
        numerical_flux("avg_jump", bottom[:, :1], z, 0.4).sum(dim=(1, 2))
        + numerical_flux("avg_jump", top[:, -1:], z, 0.4).sum(dim=(1, 2))
        + numerical_flux("avg_jump", right[:, :, :1], zc, 0.4).sum(dim=(1, 2))
        + numerical_flux("avg_jump", left[:, :, -1:], zc, 0.4).sum(dim=(1, 2))
    )
    assert_close(total.sum(dim=(1, 2)), expected, atol=1e-5, rtol=1e-5)


def test_single_element_gets_no_flux_except_dirichlet():
    op = _grid(b=1, nh=1, nw=1)
    for kind in FLUXES:
        for boundary in ("neumann", "periodic"):
            total = interface_fluxes(op, op, op, op, flux=kind, boundary=boundary, tau=0.5)
            assert_close(total, torch.zeros_like(op))


def test_vertical_and_horizontal_axes():
    # 2×1 grid: only a vertical interface (bottom of upper vs top of lower)
    top, bottom = _grid(b=1, nh=2, nw=1, seed=1), _grid(b=1, nh=2, nw=1, seed=2)
    left = right = torch.zeros_like(top)
    total = interface_fluxes(top, bottom, left, right, flux="jump", boundary="neumann", tau=1.0)
    f = jump(bottom[:, 0], top[:, 1], 1.0)
    assert_close(total[:, 0], f)
    assert_close(total[:, 1], -f)


def test_tau_gradient_flows():
    tau = torch.tensor(0.25, requires_grad=True)
    ops = _grid()
    interface_fluxes(ops, ops, ops, ops, flux="jump", boundary="dirichlet", tau=tau).square().sum().backward()
    assert tau.grad is not None and tau.grad.abs() > 0


def test_bad_boundary_lists_allowed():
    ops = _grid()
    with pytest.raises(ValueError) as err:
        interface_fluxes(ops, ops, ops, ops, flux="central", boundary="reflective")
    msg = str(err.value)
    assert "'reflective'" in msg and all(repr(b) in msg for b in BOUNDARIES)
