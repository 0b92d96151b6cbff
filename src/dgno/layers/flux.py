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

from collections.abc import Sequence
from typing import Literal, get_args

import torch
from torch import Tensor

FluxName = Literal["central", "jump", "avg_jump", "upwind"]
BoundaryName = Literal["neumann", "dirichlet", "periodic"]

FLUXES: tuple[str, ...] = get_args(FluxName)
BOUNDARIES: tuple[str, ...] = get_args(BoundaryName)
# Fluxes that use the penalty τ; the others have no free coefficient.
PENALTY_FLUXES: tuple[str, ...] = ("jump", "avg_jump")


def check_choice(what: str, value: object, allowed: Sequence[str]) -> None:
    """Raise ``ValueError`` naming the bad ``value`` and the ``allowed`` ones.

    Options are plain strings (``Literal``) so configs stay readable; a typo must
    fail loudly at construction, not silently fall through to a default branch.
    """
    if value not in allowed:
        raise ValueError(f"unknown {what} {value!r}; allowed: {', '.join(map(repr, allowed))}")


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
    """Net flux per element along one grid axis: Σ_f F_f added on L side, subtracted on R side.

    ``minus``/``plus`` hold each element's operator on its low-index face (left or
    top) and high-index face (right or bottom); both have the element grid on
    ``axis``.  Element e is R of interface e−½ (its ``minus`` face meets the
    neighbour's ``plus`` face) and L of interface e+½, hence

        contribution_e = F_{e+½} − F_{e−½}.

    Boundary interfaces (why each):
      * neumann   – zero normal flux: boundary interfaces contribute nothing;
      * dirichlet – the outside is a zero ghost operator: F(0, minus_0) on the
        first face, F(plus_last, 0) on the last, using the element's own outward face;
      * periodic  – the last element's right/lower neighbour is the first element.
    Returns a tensor shaped like ``minus``.
    """
    check_choice("flux", flux, FLUXES)
    check_choice("boundary", boundary, BOUNDARIES)
    axis = axis % minus.dim()
    n = minus.shape[axis]
    if boundary == "periodic":
        # interface e+½ between element e (L, plus face) and e+1 mod n (R, minus face)
        f = numerical_flux(flux, plus, torch.roll(minus, shifts=-1, dims=axis), tau)  # n interfaces
        return f - torch.roll(f, shifts=1, dims=axis)
    ghost = torch.zeros_like(minus.narrow(axis, 0, 1))
    # n+1 interfaces: index i sits between element i−1 (L) and element i (R)
    L_ext = torch.cat([ghost, plus], dim=axis)
    R_ext = torch.cat([minus, ghost], dim=axis)
    f = numerical_flux(flux, L_ext, R_ext, tau)
    if boundary == "neumann":
        # drop the two boundary faces; a 1-element axis has no interior face at all
        interior = f.narrow(axis, 1, n - 1)
        zero = torch.zeros_like(ghost)
        f = torch.cat([zero, interior, zero], dim=axis)
    return f.narrow(axis, 1, n) - f.narrow(axis, 0, n)


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
