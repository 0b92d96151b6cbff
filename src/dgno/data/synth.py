"""Procedural test images: fluorescence-like nuclei (with instance labels) and the paper's controlled patterns.

These stand in for BBBC006 when the real data cannot be downloaded (the default demo runs offline),
and reproduce the paper's controlled synthetic experiment ("filled squares, hollow boxes, and thin
lines" under a known sigma map). All generators are pure functions of their arguments: every random
draw comes from ``np.random.default_rng`` seeded by the caller's integer seed, so a seed names an image.

Photometry (nuclei only): a real widefield fluorescence image is not a dark, clean field. Each image draws
its own :class:`Photometry` from configurable ranges (``sample_photometry``): a diffuse background level,
uneven illumination (a smooth fall-off from an off-centre optical axis), out-of-focus haze from nuclei in
other planes, an exposure (photons at intensity 1) and a camera offset and read noise. The noise-free
scene is  illumination · (background + haze + nuclei),  scaled down only if its brightest pixel would
saturate; the camera turns it into  y = clip((Poisson(photons · x) + N(0, read_noise²)) / photons + offset, 0, 1).
Camera noise is applied to the clean sharp rendering to make the ground truth, and — independently drawn,
same photometry — to the clean *blurred* rendering to make a blurred observation, because a defocused
plane is a new exposure with its own noise; blurring the noisy ground truth instead would smooth the
noise away and make the degraded image unrealistically clean. The demo writer then applies the BBBC006
protocol's per-image min-max normalisation (``dgno.data.demo.to_uint16_full_range``), which removes the
offset and the overall scale but not the background-to-signal ratio, the haze, the shading or the noise.
The controlled patterns are noise-free, as in the paper, where the degradation is exactly the known blur.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np
from scipy import ndimage
from skimage.draw import line_aa

from dgno.optics.noise import camera_noise

# Nuclei geometry and photometry (pixels, [0, 1] intensities). Radii are those of BBBC006 U2OS nuclei
# at 20× (about 15–25 px across); the demo keeps that pixel scale so sigma values mean the same blur.
NUCLEUS_RADIUS_RANGE = (7.0, 12.0)  # mean semi-axis
NUCLEUS_ASPECT_RANGE = (1.0, 1.6)  # long / short axis
NUCLEUS_BRIGHTNESS_RANGE = (0.3, 0.9)
BOUNDARY_WOBBLE = 0.05  # max amplitude of each of the harmonics 2..5 of the boundary radius
EDGE_WIDTH = 0.7  # px, logistic width of the intensity edge

# Photometry ranges of the demo's training data, sampled per image (config key datasets.<name>.photometry,
# whose schema defaults must equal these; tests/test_synth_data.py checks). Intensities are in units where
# a nucleus is 0.3-0.9 bright; photons log-uniform, every other key uniform.
PHOTOMETRY_RANGES: dict[str, tuple[float, float]] = {
    "background": (0.02, 0.3),  # diffuse background (medium, autofluorescence), before illumination
    "offset": (0.0, 0.1),  # camera bias added after the noise (keeps read noise from clipping at 0)
    "photons": (30.0, 3000.0),  # expected photo-electrons at intensity 1: the exposure
    "read_noise": (1.0, 4.0),  # camera read noise, electrons rms
    "haze": (0.0, 0.4),  # brightness of out-of-focus nuclei relative to in-focus ones
    "haze_blur": (3.0, 8.0),  # px, Gaussian defocus blur of those out-of-plane nuclei
    "illumination": (0.0, 0.4),  # relative fall-off of the illumination at the field point farthest from the axis
}
LOG_UNIFORM = frozenset({"photons"})

_STREAM_SCENE, _STREAM_NOISE, _STREAM_PHOTOMETRY, _STREAM_HAZE = 0, 1, 2, 3  # independent streams of one seed

Seed = int | Sequence[int]


def _check_size(size: Sequence[int]) -> tuple[int, int]:
    h, w = (int(v) for v in size)
    if h < 8 or w < 8:
        raise ValueError(f"size={tuple(size)!r}: both sides must be >= 8 pixels")
    return h, w


@dataclass(frozen=True)
class Photometry:
    """One image's photometry: the keys of PHOTOMETRY_RANGES plus where the illumination peaks.

    illumination_centre is the optical axis as a fraction (y, x) of the field; the illumination is
    1 there and falls off quadratically to 1 − illumination at the farthest field point.
    """

    background: float
    offset: float
    photons: float
    read_noise: float
    haze: float
    haze_blur: float
    illumination: float
    illumination_centre: tuple[float, float] = (0.5, 0.5)

    def __post_init__(self):
        if not self.photons > 0:
            raise ValueError(f"photons={self.photons!r}: must be > 0 (expected photo-electrons at intensity 1)")
        for name in ("background", "offset", "read_noise", "haze", "haze_blur"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name}={getattr(self, name)!r}: must be >= 0")
        if self.offset >= 1:
            raise ValueError(f"offset={self.offset!r}: must be < 1 (the camera's full range is [0, 1])")
        if not 0 <= self.illumination < 1:
            raise ValueError(f"illumination={self.illumination!r}: must be in [0, 1) (relative fall-off)")

    def to_dict(self) -> dict:
        d = asdict(self)
        d["illumination_centre"] = list(self.illumination_centre)
        return d

    @classmethod
    def from_dict(cls, d: Mapping) -> Photometry:
        d = dict(d)
        d["illumination_centre"] = tuple(d.get("illumination_centre", (0.5, 0.5)))
        return cls(**d)


def photometry_ranges(ranges: Mapping[str, Sequence[float]] | None = None) -> dict[str, tuple[float, float]]:
    """PHOTOMETRY_RANGES with `ranges` on top, checked: known keys, lo <= hi, values allowed by Photometry."""
    out = dict(PHOTOMETRY_RANGES)
    for key, rng in (ranges or {}).items():
        if key not in PHOTOMETRY_RANGES:
            raise ValueError(f"photometry key {key!r} is unknown; allowed: {', '.join(PHOTOMETRY_RANGES)}")
        if len(rng) != 2 or not float(rng[0]) <= float(rng[1]):
            raise ValueError(f"photometry.{key}={list(rng)!r}: must be [lo, hi] with lo <= hi")
        out[key] = (float(rng[0]), float(rng[1]))
    Photometry(**{k: lo for k, (lo, _) in out.items()})  # both ends must be valid photometry
    Photometry(**{k: hi for k, (_, hi) in out.items()})
    return out


def sample_photometry(seed: Seed, ranges: Mapping[str, Sequence[float]] | None = None) -> Photometry:
    """One image's photometry, each key uniform in its range (photons log-uniform: exposures span decades)."""
    rng = np.random.default_rng(seed)
    values = {}
    for key, (lo, hi) in photometry_ranges(ranges).items():  # fixed key order: a seed names a photometry
        u = rng.uniform()
        values[key] = float(np.exp(np.log(lo) + u * (np.log(hi) - np.log(lo)))) if key in LOG_UNIFORM else float(lo + u * (hi - lo))
    centre = tuple(float(v) for v in rng.uniform(0.0, 1.0, 2))
    return Photometry(**values, illumination_centre=centre)


def add_camera_noise(image: np.ndarray, *, seed: Seed, photometry: Photometry) -> np.ndarray:
    """y = clip((Poisson(photons · x) + N(0, read_noise²)) / photons + offset, 0, 1), float32.

    Shot noise grows with brightness (variance x / photons), which is what distinguishes fluorescence
    from additive-noise models; the read noise (electrons) matters most at low photon counts; the offset
    is the camera bias, which keeps the read noise of dark pixels from clipping at 0. The camera model is
    :func:`dgno.optics.noise.camera_noise`; this applies one image's photometry with a seeded generator.
    Images are in [0, 1] (renders are clipped, blurs are convex), so x needs no clipping at 1.
    """
    p = photometry
    return camera_noise(image, photons=p.photons, read_noise=p.read_noise, offset=p.offset, unit="electrons", rng=np.random.default_rng(seed))


def illumination_field(shape: tuple[int, int], photometry: Photometry) -> np.ndarray:
    """1 − u · d² / d_max²: 1 on the optical axis, 1 − u at the farthest field point (u = photometry.illumination)."""
    h, w = shape
    cy, cx = photometry.illumination_centre[0] * (h - 1), photometry.illumination_centre[1] * (w - 1)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float64)
    d2 = (yy - cy) ** 2 + (xx - cx) ** 2
    return 1.0 - photometry.illumination * d2 / max(float(d2.max()), 1e-12)


def _ellipse(yy: np.ndarray, xx: np.ndarray, cy: float, cx: float, a: float, b: float, angle: float) -> np.ndarray:
    u = ((xx - cx) * np.cos(angle) + (yy - cy) * np.sin(angle)) / a
    v = (-(xx - cx) * np.sin(angle) + (yy - cy) * np.cos(angle)) / b
    return (u * u + v * v <= 1.0).astype(np.float64)


def haze(shape: tuple[int, int], *, n_nuclei: int, seed: Seed, photometry: Photometry) -> np.ndarray:
    """Out-of-focus light: n_nuclei nuclei of other planes, each a uniform ellipse, Gaussian-blurred.

    Positions, shapes and brightness come from `seed` alone (the haze stream), so the scene's out-of-plane
    nuclei do not change with the photometry; photometry.haze scales their brightness (0 = none) and
    photometry.haze_blur is their defocus blur in pixels. They may lie under in-focus nuclei.
    """
    h, w = shape
    out = np.zeros((h, w))
    if photometry.haze == 0 or n_nuclei == 0:
        return out
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float64)
    for _ in range(n_nuclei):
        rbar, aspect = rng.uniform(*NUCLEUS_RADIUS_RANGE), rng.uniform(*NUCLEUS_ASPECT_RANGE)
        cy, cx, angle = rng.uniform(0, h), rng.uniform(0, w), rng.uniform(0.0, np.pi)
        out += rng.uniform(*NUCLEUS_BRIGHTNESS_RANGE) * _ellipse(yy, xx, cy, cx, rbar * np.sqrt(aspect), rbar / np.sqrt(aspect), angle)
    return photometry.haze * ndimage.gaussian_filter(out, photometry.haze_blur, mode="reflect")


def _chromatin(rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
    """Band-pass noise (difference of Gaussians at 1 and 2.5 px), unit std: granular chromatin texture."""
    white = rng.standard_normal(shape)
    band = ndimage.gaussian_filter(white, 1.0, mode="wrap") - ndimage.gaussian_filter(white, 2.5, mode="wrap")
    return band / band.std()


@dataclass(frozen=True)
class _NucleusShape:
    """One nucleus before placement: mean radius, semi-axes, boundary wobble, orientation and reach (px)."""

    rbar: float
    a: float
    b: float
    coef: np.ndarray  # (4,) wobble amplitudes of cos(kθ + φ_k), k = 2..5
    phase: np.ndarray  # (4,) φ_k
    angle: float
    outer: float  # radius beyond which the soft mask is negligible


def _nucleus_shape(rng: np.random.Generator) -> _NucleusShape:
    """Draw one nucleus's shape (radius, aspect, wobble, orientation, in this order from `rng`)."""
    rbar = rng.uniform(*NUCLEUS_RADIUS_RANGE)
    aspect = rng.uniform(*NUCLEUS_ASPECT_RANGE)
    a, b = rbar * np.sqrt(aspect), rbar / np.sqrt(aspect)
    coef = rng.uniform(0.0, BOUNDARY_WOBBLE, 4)
    phase = rng.uniform(0.0, 2 * np.pi, 4)
    angle = rng.uniform(0.0, np.pi)
    return _NucleusShape(rbar, a, b, coef, phase, angle, a * (1.0 + coef.sum()) + 3 * EDGE_WIDTH)


def _draw_nucleus(rng: np.random.Generator, n: _NucleusShape, centre: tuple[float, float], image: np.ndarray, labels: np.ndarray, chromatin: np.ndarray, label_id: int) -> None:
    """Add one nucleus at `centre` to `image` and its label to `labels`, in place (texture, spots and
    brightness drawn from `rng`); only the nucleus's bounding box is computed."""
    (h, w), (cy, cx) = image.shape, centre
    r = int(np.ceil(n.outer)) + 2
    y0, y1, x0, x1 = max(int(cy) - r, 0), min(int(cy) + r + 1, h), max(int(cx) - r, 0), min(int(cx) + r + 1, w)
    yy, xx = np.mgrid[y0:y1, x0:x1].astype(np.float64)
    dy, dx = yy - cy, xx - cx
    u = (dx * np.cos(n.angle) + dy * np.sin(n.angle)) / n.a  # ellipse-normalised coordinates
    v = (-dx * np.sin(n.angle) + dy * np.cos(n.angle)) / n.b
    rho, theta = np.hypot(u, v), np.arctan2(v, u)
    boundary = 1.0 + sum(c * np.cos(k * theta + p) for k, c, p in zip(range(2, 6), n.coef, n.phase))
    signed = (boundary - rho) * n.rbar  # ≈ distance to the boundary in px, > 0 inside
    with np.errstate(over="ignore"):
        soft = 1.0 / (1.0 + np.exp(-signed / EDGE_WIDTH))
    dome = 1.0 - 0.3 * np.clip(rho / boundary, 0.0, 1.0) ** 2

    texture = np.clip(1.0 + rng.uniform(0.1, 0.25) * chromatin[y0:y1, x0:x1], 0.6, None)
    for _ in range(rng.integers(0, 5)):  # chromocentres: small bright spots well inside
        sr, st = 0.6 * np.sqrt(rng.uniform()), rng.uniform(0, 2 * np.pi)
        su, sv = sr * np.cos(st), sr * np.sin(st)
        spot_sigma = rng.uniform(0.8, 1.5)
        d2 = ((u - su) * n.a) ** 2 + ((v - sv) * n.b) ** 2
        texture += rng.uniform(0.15, 0.4) * np.exp(-d2 / (2 * spot_sigma**2))

    image[y0:y1, x0:x1] += rng.uniform(*NUCLEUS_BRIGHTNESS_RANGE) * soft * dome * texture
    comp, _ = ndimage.label(signed >= 0)
    centre_id = comp[int(cy) - y0, int(cx) - x0]
    inside = comp == centre_id if centre_id > 0 else np.zeros_like(signed, dtype=bool)
    labels[y0:y1, x0:x1][inside] = label_id


def _exposed(nuclei: np.ndarray, photometry: Photometry, *, n_nuclei: int, seed: Seed) -> np.ndarray:
    """s · I · (background + haze + nuclei), clipped to [0, 1], float32; s < 1 only where the camera would saturate."""
    shape = nuclei.shape
    scene = illumination_field(shape, photometry) * (
        photometry.background + haze(shape, n_nuclei=n_nuclei, seed=[seed, _STREAM_HAZE], photometry=photometry) + nuclei
    )
    peak = float(scene.max())
    if peak + photometry.offset > 1.0:  # exposure: shorter only where the camera would saturate
        scene *= (1.0 - photometry.offset) / peak
    return np.clip(scene, 0.0, 1.0).astype(np.float32)


def render_nuclei(
    size: tuple[int, int] = (256, 256),
    *,
    n_nuclei: int,
    seed: int,
    noise: bool = True,
    photometry: Photometry | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """image = s · I · (background + haze + Σ_i b_i · m_i · dome_i · texture_i) (+ camera noise); labels_i = {m_i ≥ ½}.

    Each nucleus is an ellipse (semi-axes a, b, random orientation) whose boundary radius wobbles,
    ρ_boundary(θ) = 1 + Σ_{k=2..5} c_k cos(kθ + φ_k) in ellipse-normalised coordinates; the soft mask
    m = logistic(signed distance / EDGE_WIDTH) gives the smooth intensity falloff of a fluorescent
    object, the dome a slightly brighter centre, and the texture band-pass "chromatin" plus a few bright
    chromocentre spots. Nuclei are placed by rejection sampling so their masks never overlap (they may
    nearly touch), which keeps the instance labels unambiguous; fewer than n_nuclei are placed when the
    field is too crowded. Each label is the connected part of {m ≥ ½} containing the nucleus centre,
    so every label id is one connected region, and lies where the clean image is well above background.

    I is the illumination field, the haze comes from nuclei of other planes (``haze``), and s ≤ 1 is the
    exposure: 1 unless the brightest pixel plus the camera offset would exceed 1, then just enough to
    avoid saturation. photometry=None draws one from PHOTOMETRY_RANGES with the seed's photometry stream.
    The in-focus nuclei, and so the labels, depend on `seed` only, never on the photometry.
    noise=True applies ``add_camera_noise`` (seeded from `seed`); noise=False returns the clean rendering
    (the demo blurs that and then adds noise, see the module docstring).
    Returns (image float32 (H, W) in [0, 1], labels uint16 (H, W), 0 = background, ids 1..n).
    """
    h, w = _check_size(size)
    if n_nuclei < 0:
        raise ValueError(f"n_nuclei={n_nuclei!r}: must be >= 0")
    if photometry is None:
        photometry = sample_photometry([seed, _STREAM_PHOTOMETRY])
    rng = np.random.default_rng([seed, _STREAM_SCENE])

    image = np.zeros((h, w))  # in-focus nuclei; background, haze and illumination are applied below
    labels = np.zeros((h, w), dtype=np.uint16)
    chromatin = _chromatin(rng, (h, w))

    placed: list[tuple[float, float, float]] = []  # (cy, cx, outer radius)
    attempts = 0
    while len(placed) < n_nuclei and attempts < 200 * max(n_nuclei, 1):
        attempts += 1
        shape = _nucleus_shape(rng)
        cy, cx = rng.uniform(0, h), rng.uniform(0, w)
        if any(np.hypot(cy - py, cx - px) < shape.outer + pr + 1.0 for py, px, pr in placed):
            continue
        placed.append((cy, cx, shape.outer))
        _draw_nucleus(rng, shape, (cy, cx), image, labels, chromatin, len(placed))

    # Ids stay consecutive even if a (border-clipped) nucleus ended up without label pixels.
    present = np.unique(labels[labels > 0])
    relabel = np.zeros(len(placed) + 1, dtype=np.uint16)
    relabel[present] = np.arange(1, present.size + 1, dtype=np.uint16)
    labels = relabel[labels]
    image = _exposed(image, photometry, n_nuclei=n_nuclei, seed=seed)
    if noise:
        image = add_camera_noise(image, seed=[seed, _STREAM_NOISE], photometry=photometry)
    return image, labels


def render_shapes(size: tuple[int, int] = (256, 256), *, seed: int) -> np.ndarray:
    """max(background, filled squares, hollow boxes, thin lines): the paper's controlled sharp patterns.

    Counts, positions, sizes and intensities are random: 2–4 filled squares and 2–4 hollow boxes
    (1–3 px walls), axis-aligned, with sides 6–25 % of the short image side, and 3–6 straight
    anti-aliased 1-px lines at random angles; intensities 0.4–1 on a dark background 0–0.05.
    Shapes combine by maximum, so overlaps stay in [0, 1] and keep their edges. Noise-free on purpose:
    the experiment isolates the known blur. Returns float32 (H, W) in [0, 1].
    """
    h, w = _check_size(size)
    rng = np.random.default_rng([seed, _STREAM_SCENE])
    short = min(h, w)
    image = np.full((h, w), rng.uniform(0.0, 0.05))

    def box(size_frac: tuple[float, float], square: bool) -> tuple[int, int, int, int]:
        bh = max(3, int(rng.uniform(*size_frac) * short))
        bw = bh if square else max(3, int(rng.uniform(*size_frac) * short))
        y0, x0 = int(rng.integers(0, h - bh + 1)), int(rng.integers(0, w - bw + 1))
        return y0, x0, bh, bw

    for _ in range(rng.integers(2, 5)):  # filled squares
        y0, x0, bh, bw = box((0.06, 0.25), square=True)
        patch = image[y0 : y0 + bh, x0 : x0 + bw]
        np.maximum(patch, rng.uniform(0.4, 1.0), out=patch)
    for _ in range(rng.integers(2, 5)):  # hollow boxes
        y0, x0, bh, bw = box((0.1, 0.3), square=False)
        t = int(rng.integers(1, 4))
        wall = np.ones((bh, bw), dtype=bool)
        wall[t : bh - t, t : bw - t] = False
        patch = image[y0 : y0 + bh, x0 : x0 + bw]
        patch[wall] = np.maximum(patch[wall], rng.uniform(0.4, 1.0))
    for _ in range(rng.integers(3, 7)):  # thin lines, at least a fifth of the short side long
        while True:
            r0, c0, r1, c1 = rng.integers(0, h), rng.integers(0, w), rng.integers(0, h), rng.integers(0, w)
            if np.hypot(r1 - r0, c1 - c0) >= 0.2 * short:
                break
        rr, cc, val = line_aa(int(r0), int(c0), int(r1), int(c1))
        ok = (rr >= 0) & (rr < h) & (cc >= 0) & (cc < w)
        rr, cc, val = rr[ok], cc[ok], val[ok]
        image[rr, cc] = np.maximum(image[rr, cc], rng.uniform(0.4, 1.0) * val)
    return np.clip(image, 0.0, 1.0).astype(np.float32)
