"""The six Seidel aberration coefficients and their sign conventions.

Plain numbers, no torch: configs, the report and the non-blind experiment's settings read them
without loading the PSF code (``dgno.optics.seidel``), which turns them into wavefronts and PSFs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch
    from torch import Tensor

SEIDEL_NAMES: tuple[str, ...] = ("W040", "W131", "W222", "W220", "W311", "W020")
EVEN_TERMS: tuple[str, ...] = ("W040", "W222", "W220", "W020")  # flip together without changing the PSF


@dataclass(frozen=True)
class SeidelCoefficients:
    """Seidel wavefront coefficients in waves (see the equation of :mod:`dgno.optics.seidel`)."""

    W040: float = 0.0  # spherical aberration, ρ⁴
    W131: float = 0.0  # coma, H ρ³ cos θ
    W222: float = 0.0  # astigmatism, H² ρ² cos²θ
    W220: float = 0.0  # field curvature, H² ρ²
    W311: float = 0.0  # distortion, H³ ρ cos θ
    W020: float = 0.0  # defocus, ρ²

    def as_tensor(self, *, dtype: torch.dtype | None = None, device: torch.device | str | None = None) -> Tensor:
        """The coefficients as a (6,) tensor (float64 unless ``dtype``) in the order of ``SEIDEL_NAMES``."""
        import torch  # the PSF code needs it; reading a config or a report must not

        return torch.tensor([getattr(self, n) for n in SEIDEL_NAMES], dtype=torch.float64 if dtype is None else dtype, device=device)

    def as_dict(self) -> dict[str, float]:
        return {k: float(v) for k, v in asdict(self).items()}

    @classmethod
    def from_tensor(cls, t: Tensor | Sequence[float]) -> SeidelCoefficients:
        """Inverse of :meth:`as_tensor`; `t` has shape (6,) (a tensor or a sequence of numbers)."""
        values = [float(v) for v in (t.detach().cpu().tolist() if hasattr(t, "detach") else t)]
        if len(values) != len(SEIDEL_NAMES):
            raise ValueError(f"expected {len(SEIDEL_NAMES)} coefficients {SEIDEL_NAMES}, got {len(values)}")
        return cls(*values)

    @classmethod
    def from_rdmpy(cls, values: Tensor | Sequence[float]) -> SeidelCoefficients:
        """Coefficients as rdmpy gives them (its calibration output, waves, order W040, W131, W222, W220,
        W311, W020 as here) in this package's convention.

        rdmpy's PSF for the same numbers is this package's mirrored through the source point (its pupil
        phase enters as exp(−ikW) on a negated frequency grid). Mirroring flips exactly the odd terms, coma
        W131 and distortion W311; the even ones give point-symmetric PSFs and stay as they are.
        """
        c = cls.from_tensor(values)
        return cls(**{**c.as_dict(), "W131": -c.W131, "W311": -c.W311})

    def to_rdmpy(self) -> list[float]:
        """The inverse of :meth:`from_rdmpy`: the six numbers rdmpy would take for the same PSFs."""
        return [self.W040, -self.W131, self.W222, self.W220, -self.W311, self.W020]

    @classmethod
    def from_dict(cls, d: Mapping[str, float]) -> SeidelCoefficients:
        """Build from a mapping; unknown keys raise so a typo ("W13") cannot silently become zero."""
        unknown = set(d) - set(SEIDEL_NAMES)
        if unknown:
            raise ValueError(f"unknown Seidel coefficient(s) {sorted(unknown)}; allowed: {', '.join(SEIDEL_NAMES)}")
        return cls(**{k: float(v) for k, v in d.items()})

    def canonical(self) -> SeidelCoefficients:
        """The same PSFs with the even terms' sign chosen so the largest-magnitude even term is ≥ 0.

        P(−W_even, W_odd) gives exactly the PSF of P(W_even, W_odd) (conjugation mirrors the PSF through the
        origin and the odd terms' mirror symmetry about the field axis undoes it), so fits can only
        recover the even terms up to one common sign; comparing canonical forms removes that ambiguity.
        """
        even = [getattr(self, n) for n in EVEN_TERMS]
        biggest = max(even, key=abs)
        if biggest >= 0:
            return self
        flipped = {n: (-getattr(self, n) if n in EVEN_TERMS else getattr(self, n)) for n in SEIDEL_NAMES}
        return SeidelCoefficients(**flipped)
