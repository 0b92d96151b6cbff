"""Operator-valued numerical fluxes and their conservative assembly (paper Sec. 3, App. C-D).

Every function here works on *operators*: tensors whose last three axes are
``(h, d, d)`` (one d×d coefficient matrix per attention head).  Leading axes are
free, so a whole grid of elements ``(B, nH, nW, h, d, d)`` is processed at once.

Orientation used throughout: an interface sits between a left/upper element ``L``
and a right/lower element ``R``.  A flux ``F(L, R)`` is added to ``L``'s operator and
subtracted from ``R``'s, so whatever one element gains through a face the other
loses (conservation, as in finite-volume/DG schemes).
"""

from __future__ import annotations

from typing import Literal, get_args

import torch
from torch import Tensor

from dgno.choices import check_choice

FluxName = Literal["central", "jump", "avg_jump", "upwind"]
BoundaryName = Literal["neumann", "dirichlet", "periodic"]

FLUXES: tuple[str, ...] = get_args(FluxName)
BOUNDARIES: tuple[str, ...] = get_args(BoundaryName)
# Fluxes that use the penalty τ; the others have no free coefficient.
PENALTY_FLUXES: tuple[str, ...] = ("jump", "avg_jump")


def central(L: Tensor, R: Tensor) -> Tensor:
    """F = ½(L + R).

    The arithmetic average of both traces: symmetric coupling, no dissipation.
    """
    return 0.5 * (L + R)


def jump(L: Tensor, R: Tensor, tau: Tensor | float) -> Tensor:
    """F = −τ (R − L).

    A pure interior-penalty term on the operator discontinuity [K] = R − L; τ sets
    how strongly neighbouring elements are coupled.
    """
    return -tau * (R - L)


def avg_jump(L: Tensor, R: Tensor, tau: Tensor | float) -> Tensor:
    """F = ½(L + R) − τ (R − L).

    Central consistency term plus the jump penalty (SIP-like): the average carries
    the information across the face, the penalty controls the discontinuity.
    """
    return central(L, R) + jump(L, R, tau)


def upwind(L: Tensor, R: Tensor) -> Tensor:
    """F = α R + (1 − α) L,  α = sigmoid(mean(R) − mean(L)) per head.

    A data-dependent, directional choice: the side whose operator has the larger
    mean entry (the scalar summary s(·) of the paper) dominates the face.  The mean
    runs over the d×d entries, so α has shape ``(..., h, 1, 1)``.
    """
    alpha = torch.sigmoid(R.mean(dim=(-2, -1), keepdim=True) - L.mean(dim=(-2, -1), keepdim=True))
    return alpha * R + (1.0 - alpha) * L


def numerical_flux(kind: FluxName, L: Tensor, R: Tensor, tau: Tensor | float | None = None) -> Tensor:
    """F(L, R) for ``kind`` in FLUXES; ``tau`` is required by "jump" and "avg_jump" only."""
    check_choice("flux", kind, FLUXES)
    if kind in PENALTY_FLUXES and tau is None:
        raise ValueError(f"flux {kind!r} needs a penalty tau")
    if kind == "central":
        return central(L, R)
    if kind == "jump":
        return jump(L, R, tau)
    if kind == "avg_jump":
        return avg_jump(L, R, tau)
    return upwind(L, R)


def assemble_axis(
    minus: Tensor,
    plus: Tensor,
    *,
    axis: int,
    flux: FluxName,
    boundary: BoundaryName,
    tau: Tensor | float | None = None,
) -> Tensor:
    """Net flux per element along one grid axis, in the authors' conventions.

    ``minus``/``plus`` hold each element's operator on its low-index face (left or
    top) and high-index face (right or bottom); both have the n elements on ``axis``.

    Interior interface e+½ (0 ≤ e < n−1) joins element e (L, its ``plus`` face) and
    e+1 (R, its ``minus`` face); F_{e+½} = F(plus_e, minus_{e+1}) is added to e and
    subtracted from e+1 (conservation), so contribution_e = F_{e+½} − F_{e−½}.

    Domain boundary, as the authors' code computes it (their code made the paper's
    numbers; App. D of the paper describes a different ghost placement):
      * neumann   – zero normal flux: nothing is added;
      * dirichlet – zero ghost on *every* side, always as F(K_b, 0) and always *added*:
        the first element adds F(plus_0, 0), the last adds F(minus_{n−1}, 0), i.e. the
        boundary element's face that points *into* the domain (for the cell variant
        both are K_vol);
      * periodic  – one wrap interface F(minus_{n−1}, plus_0), added to the last
        element and subtracted from the first.
    Returns a tensor shaped like ``minus``.
    """
    check_choice("flux", flux, FLUXES)
    check_choice("boundary", boundary, BOUNDARIES)
    axis = axis % minus.dim()
    n = minus.shape[axis]
    first, last = (lambda t: t.narrow(axis, 0, 1)), (lambda t: t.narrow(axis, n - 1, 1))
    interior = numerical_flux(flux, plus.narrow(axis, 0, n - 1), minus.narrow(axis, 1, n - 1), tau)  # n−1 interfaces
    zero = torch.zeros_like(first(minus))
    out = torch.cat([interior, zero], dim=axis) - torch.cat([zero, interior], dim=axis)
    if boundary == "neumann":
        return out
    if boundary == "dirichlet":  # (added to the first element, added to the last)
        head, tail = numerical_flux(flux, first(plus), zero, tau), numerical_flux(flux, last(minus), zero, tau)
    else:  # periodic: the wrap interface, last element on its left
        wrap = numerical_flux(flux, last(minus), first(plus), tau)
        head, tail = -wrap, wrap
    if n == 1:  # one element is both first and last
        return out + head + tail
    # built by concatenation, not by adding into slices of a zero tensor: exporters (ONNX) do not
    # always keep in-place writes through views
    middle = torch.zeros_like(out.narrow(axis, 1, n - 2))
    return out + torch.cat([head, middle, tail], dim=axis)


def interface_fluxes(
    top: Tensor,
    bottom: Tensor,
    left: Tensor,
    right: Tensor,
    *,
    flux: FluxName,
    boundary: BoundaryName,
    tau: Tensor | float | None = None,
) -> Tensor:
    """Σ_{f ⊂ ∂D_e} K^flux_{e,f}: the assembled flux operator of every element.

    All four inputs are face operators on the element grid, ``(B, nH, nW, h, d, d)``
    (for the P0DG/cell variant pass the volume operator four times).  Vertical
    interfaces pair an upper element's ``bottom`` with the lower element's ``top``
    (grid axis 1); horizontal ones pair ``right`` of the left element with ``left``
    of the right element (grid axis 2).  Output: ``(B, nH, nW, h, d, d)``.
    """
    vertical = assemble_axis(top, bottom, axis=1, flux=flux, boundary=boundary, tau=tau)
    horizontal = assemble_axis(left, right, axis=2, flux=flux, boundary=boundary, tau=tau)
    return vertical + horizontal
