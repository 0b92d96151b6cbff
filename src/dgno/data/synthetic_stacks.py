"""Generated z-stacks of fluorescence-like fields, with a known in-focus plane and a known blur.

What the fine-tuning benchmark, the tests and the workflow's generated stacks are made of. A field's
in-focus scene is a noise-free nuclei render (:func:`dgno.data.synth.render_nuclei`); plane k of its
stack is that scene blurred by the defocus of the signed distance d = k − focus (in planes), plus fresh
camera noise (every plane is a new exposure of the same microscope). Two blur models:

* ``gaussian``: the demo's defocus, a smooth random sigma map (:func:`dgno.optics.sigma_blur.sigma_blur`)
  in the range of distance |d| (:func:`gaussian_range`: the nuclei demo's levels z10, z06 and z02 for
  |d| = 1, 2, 3, continued linearly). The demo's networks are trained on exactly this blur.
* ``seidel``: a pupil with defocus W020 = ``defocus_waves`` · d on top of fixed spherical aberration,
  astigmatism and coma seen at the field's own position in the objective's field
  (:func:`dgno.optics.seidel.seidel_psf`): the blur differs above and below focus (spherical aberration)
  and is elongated (astigmatism) and one-sided (coma), which the Gaussian model never is. One PSF per
  plane, the same over the field.

``drift`` shifts plane k laterally by ``drift`` · d px (a stage that creeps while focusing), so the
alignment check has something to find. Everything is seeded per field: the same arguments give the
same stacks.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import tifffile
import torch
from scipy import ndimage, signal

from dgno.choices import check_choice
from dgno.data import synth
from dgno.data.slides import fluorescence_tissue
from dgno.io import atomic_path
from dgno.optics.aberrations import SeidelCoefficients
from dgno.optics.seidel import seidel_psf, suggest_psf_size
from dgno.optics.sigma_blur import random_sigma_map, sigma_blur

BLURS = ("gaussian", "seidel")
CAMERA_LEVELS = 4095  # planes are written as 12-bit values in 16-bit files, as a microscope camera writes them


def gaussian_range(distance: int) -> tuple[float, float]:
    """Sigma range (px) of the Gaussian model at |d| planes from focus: (0.4 + 0.8|d|, 1.0 + 1.2|d|).

    At |d| = 1, 2, 3 these are the nuclei demo's levels z10 [1.2, 2.2], z06 [2.0, 3.4] and z02 [2.8, 4.6].
    """
    d = abs(int(distance))
    return (0.4 + 0.8 * d, 1.0 + 1.2 * d) if d else (0.0, 0.0)


@dataclass(frozen=True)
class StackSpec:
    """How to generate one set of stacks (module docstring).

    ``planes`` per stack; the in-focus plane is the middle one moved by up to ``focus_jitter`` planes
    (drawn per field, so a focus detector has to look). ``seidel``: coefficients in waves (W040
    spherical, W222 astigmatism and W131 coma at the edge of the field, H = 1).
    """

    size: tuple[int, int] = (96, 96)
    planes: int = 7
    blur: str = "gaussian"
    focus_jitter: int = 1
    drift: float = 0.0
    seed: int = 0
    correlation_length: float = 24.0
    defocus_waves: float = 0.6
    oversampling: float = 1.2
    seidel: dict[str, float] = field(default_factory=lambda: {"W040": 0.6, "W222": 0.9, "W131": 0.5})

    def __post_init__(self) -> None:
        check_choice("blur", self.blur, BLURS)
        if self.planes < 1 or self.focus_jitter < 0 or 2 * self.focus_jitter >= self.planes:
            raise ValueError(f"planes={self.planes}, focus_jitter={self.focus_jitter}: need planes >= 1 and the focus jitter inside the stack")


def _field_seed(spec: StackSpec, index: int) -> np.random.SeedSequence:
    return np.random.SeedSequence([spec.seed, 0x5A1C, index])


def _seidel_psf(spec: StackSpec, d: int, position: tuple[float, float]) -> np.ndarray:
    """The PSF (odd square, unit sum) of the Seidel model at signed distance d for a field at ``position``."""
    coeffs = SeidelCoefficients(**spec.seidel, W020=spec.defocus_waves * d)
    size = min(suggest_psf_size(coeffs, max_field=1.0, oversampling=spec.oversampling), 2 * (min(spec.size) // 2) - 1)
    psf = seidel_psf(coeffs, torch.tensor(position, dtype=torch.float64), size=size, oversampling=spec.oversampling)
    return psf.numpy()


def _blurred(spec: StackSpec, clean: np.ndarray, d: int, rng: np.random.Generator, position: tuple[float, float]) -> np.ndarray:
    if d == 0:
        return clean.astype(np.float32)
    if spec.blur == "gaussian":
        sigma = random_sigma_map(clean.shape, gaussian_range(d), seed=int(rng.integers(2**31)), correlation_length=spec.correlation_length)
        return sigma_blur(clean, sigma)
    psf = _seidel_psf(spec, d, position)
    r = psf.shape[0] // 2
    padded = np.pad(clean.astype(np.float64), r, mode="reflect")
    return np.clip(signal.fftconvolve(padded, psf, mode="same")[r:-r, r:-r], 0.0, 1.0).astype(np.float32)


def render_stack(spec: StackSpec, index: int) -> tuple[np.ndarray, int]:
    """(stack float32 (planes, H, W) in [0, 1], index of its in-focus plane) of field ``index``."""
    seq = _field_seed(spec, index)
    rng = np.random.default_rng(seq)
    scene_seed = int(seq.generate_state(1)[0])
    photometry = synth.sample_photometry([scene_seed, 4])
    n_nuclei = max(1, spec.size[0] * spec.size[1] // 1600)
    clean, _ = synth.render_nuclei(spec.size, n_nuclei=n_nuclei, seed=scene_seed, noise=False, photometry=photometry)
    focus = spec.planes // 2 + int(rng.integers(-spec.focus_jitter, spec.focus_jitter + 1))
    angle, radius = rng.uniform(0, 2 * np.pi), np.sqrt(rng.uniform(0.0, 1.0))
    position = (float(radius * np.cos(angle)), float(radius * np.sin(angle)))
    planes = []
    for k in range(spec.planes):
        d = k - focus
        plane = _blurred(spec, clean, d, rng, position)
        if spec.drift and d:
            plane = ndimage.shift(plane, (spec.drift * d, -0.5 * spec.drift * d), order=3, mode="reflect")
        planes.append(synth.add_camera_noise(np.clip(plane, 0.0, 1.0), seed=[scene_seed, 7, k], photometry=photometry))
    return np.stack(planes), focus


def write_stacks(out_dir: str | Path, spec: StackSpec, *, fields: int, prefix: str = "field") -> list[Path]:
    """``fields`` stacks as ImageJ TIFFs (ZYX, 12-bit values in uint16) named ``<prefix>_<i>.tif``, and
    ``stacks.json`` beside them with the spec and every field's true in-focus plane (what a test checks)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths, truth = [], {}
    for i in range(fields):
        stack, focus = render_stack(spec, i)
        path = out_dir / f"{prefix}_{i:03d}.tif"
        with atomic_path(path) as tmp:
            tifffile.imwrite(tmp, np.rint(stack * CAMERA_LEVELS).astype(np.uint16), imagej=True, metadata={"axes": "ZYX"})
        paths.append(path)
        truth[path.name] = focus
    with atomic_path(out_dir / "stacks.json") as tmp:
        tmp.write_text(json.dumps({"spec": asdict(spec), "focus": truth}, indent=2, sort_keys=True) + "\n")
    return paths


def write_focal_slide(path: str | Path, *, shape: tuple[int, int] = (768, 768), planes: int = 5, step: float = 1.2, tilt: float = 1.0,
                      seed: int = 0, tile: int = 256) -> dict:  # fmt: skip
    """A two-channel fluorescence slide with ``planes`` focal planes, as a tiled OME-TIFF (ZCYX), and its truth.

    The section is :func:`dgno.data.slides.fluorescence_tissue`'s; it is tilted: its in-focus plane runs from
    ``centre − tilt/2`` at the left edge to ``centre + tilt/2`` at the right, so plane k is blurred by a
    Gaussian of σ = ``step`` · |k − focus(x)| px (:func:`dgno.optics.sigma_blur.sigma_blur`). Returns
    ``{"focus_left", "focus_right", "planes"}``.
    """
    section = np.moveaxis(fluorescence_tissue(shape, seed=seed), 0, -1).astype(np.float32)  # (H, W, 2)
    centre = (planes - 1) / 2
    focus = centre + tilt * (np.arange(shape[1]) / max(shape[1] - 1, 1) - 0.5)  # per column
    stack = []
    for k in range(planes):
        sigma = np.broadcast_to(step * np.abs(k - focus)[None, :], shape).astype(np.float32)
        stack.append(np.moveaxis(sigma_blur(section, sigma), -1, 0))
    data = np.clip(np.rint(np.stack(stack)), 0, 65535).astype(np.uint16)  # (Z, C, H, W)
    with atomic_path(Path(path)) as tmp, tifffile.TiffWriter(tmp, ome=True) as tw:
        tw.write(data, tile=(tile, tile), compression="zlib", photometric="minisblack", metadata={"axes": "ZCYX", "Channel": {"Name": ["DAPI", "Actin"]}})
    return {"focus_left": float(focus[0]), "focus_right": float(focus[-1]), "planes": planes}
