"""What a bioimage.io package of a DGNO says about itself: README, terms of use, citation, cover, test tile.

Kept apart from the writer (:mod:`dgno.inference.bioimageio`) because it is prose and pictures: the
writer decides what goes into the package, this module how it reads to a person browsing a model zoo.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from torch import nn

PAPER_TITLE = "Discontinuous Galerkin Neural Operator for Pathology Defocus Deblurring"
PAPER_AUTHORS = ("Shaoqing Duan", "Haofei Song", "Xintian Mao", "Qingli Li", "Yan Wang")
AFFILIATION = "East China Normal University"
PAPER_URL = "https://openreview.net/forum?id=Og7FKaRBQA"  # the ICML 2026 paper, as the authors' lab links it
CODE_URL = "https://github.com/Duane245/DGNO"  # the authors' code, the implementation of the paper
WEIGHTS_URL = "https://huggingface.co/Duane245/DGNO"  # the authors' released checkpoints
CITATIONS = [
    {"text": f"{', '.join(PAPER_AUTHORS)}. {PAPER_TITLE}. ICML 2026.", "url": PAPER_URL},
    {"text": "The authors' code and released checkpoints (DGNO, ICML 2026).", "url": CODE_URL},
]
DISPLAY_NAMES = {"dgno-cell": "DGNO-Cell", "dgno-face": "DGNO-Face"}
VERSIONS_SHOWN = ("python", "dgno", "torch", "numpy", "onnx", "onnxruntime")
NAME_CHARACTERS = re.compile(r"[^A-Za-z0-9_+\- ()]")  # what the format allows in a name


@dataclass(frozen=True)
class Facts:
    """The facts the README and rdf.yaml state, gathered once."""

    name: str
    network: str
    hparams: dict[str, Any]
    parameters: int
    channels: int
    tile: int
    overlap: int
    blend: str
    normalise: str
    bits: int
    parity: dict[str, dict[str, float]]
    eager_difference: float
    test_source: str
    weights_origin: str
    versions: dict[str, str]

    @classmethod
    def of(cls, record, blob: dict[str, Any], *, model: nn.Module, bits: int, eager_difference: float, test_source: str) -> Facts:
        return cls(
            name=record.name, network=str(blob["spec"]["name"]), hparams=dict(model.hparams),
            parameters=sum(p.numel() for p in model.parameters()), channels=record.channels, tile=record.tile,
            overlap=record.overlap, blend=record.blend, normalise=record.normalise, bits=bits, parity=record.parity,
            eager_difference=eager_difference, test_source=test_source, weights_origin=weights_origin(blob),
            versions={k: v for k, v in record.versions.items() if k in VERSIONS_SHOWN},
        )  # fmt: skip

    @property
    def display(self) -> str:
        """'DGNO-Cell', 'DGNO-Face', or the registry name of another network."""
        return DISPLAY_NAMES.get(self.network, self.network)

    @property
    def title(self) -> str:
        title = NAME_CHARACTERS.sub("-", f"{self.display} ({self.name})")
        return title[:128]

    @property
    def halo(self) -> int:
        return self.overlap // 2

    @property
    def summary(self) -> str:
        return (
            f"{self.display}, the network of '{PAPER_TITLE}' (ICML 2026): restores defocus blur in "
            f"{self.channels}-channel microscopy images, {self.tile}x{self.tile}-pixel tiles. {self.weights_origin}"
        )[:512]

    @property
    def architecture(self) -> str:
        return (
            "Lifting encoder and decoder whose stages end in discontinuous Galerkin operator layers (element-local "
            "volume operators and interface numerical fluxes); constructor arguments: " + ", ".join(f"{k}={v}" for k, v in self.hparams.items())
        )

    @property
    def tags(self) -> list[str]:
        modality = ["whole-slide-imaging", "transmission-light-microscopy"] if self.channels == 3 else ["fluorescence-light-microscopy"]
        return ["image-restoration", "deblurring", "defocus", "neural-operator", "2d", "cells", "pytorch", "onnx", "torchscript", *modality]


def weights_origin(blob: dict[str, Any]) -> str:
    """One sentence on where the weights come from: an authors' checkpoint, or a training of this pipeline."""
    authors = blob.get("authors")
    if authors:
        return (
            f"Weights: the authors' released checkpoint {Path(str(authors['checkpoint'])).name} "
            f"(sha256 {str(authors.get('checkpoint_sha256', ''))[:16]}...), imported by dgno import-authors."
        )
    iterations = blob.get("iterations")
    trained = f"{iterations} iterations" if iterations else "a training"
    return f"Weights: trained with the dgno reproduction pipeline ({trained}, {blob.get('weights', 'ema')} weights)."


def example_tile(channels: int, tile: int, *, seed: int = 0) -> np.ndarray:
    """(channels, tile, tile) float32 in [0, 1]: soft round blobs on a dim background, like defocused nuclei.

    Why blobs, not noise: the test tile doubles as the cover picture, and a smooth image is what a
    deblurring network is made for, so its output is a fair sample of what the network does.
    """
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:tile, 0:tile].astype(np.float32)
    density = np.zeros((channels, tile, tile), np.float32)
    for _ in range(max(6, tile * tile // 2048)):
        cy, cx = rng.uniform(0, tile, 2)
        radius = rng.uniform(tile / 40, tile / 14)
        blob = np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * radius**2))
        density += blob[None] * rng.uniform(0.6, 1.6, (channels, 1, 1)).astype(np.float32)
    return (0.08 + 0.9 * (1 - np.exp(-density))).astype(np.float32)  # saturates smoothly below 1


def write_cover(path: Path, unit: np.ndarray, output: np.ndarray) -> None:
    """cover.png: the test input | the network's output, side by side (2:1, the format's preferred shape)."""
    import matplotlib.image  # a plotting library only when a package is written

    picture = np.concatenate([unit, np.clip(output, 0, 1)], axis=-1)  # (C, tile, 2·tile)
    if picture.shape[0] == 3:
        matplotlib.image.imsave(path, np.moveaxis(picture, 0, -1))
    else:
        matplotlib.image.imsave(path, picture[0], cmap="gray", vmin=0.0, vmax=1.0)


def readme(f: Facts) -> str:
    """README.md of the package: what the network is, what goes in and out, how it was checked, how to cite it."""
    return "\n".join([
        f"# {f.title}", "",
        f"{f.summary}", "",
        f"The network: {f.display}, {f.parameters:,} parameters, {f.channels} channel(s) in and out. "
        f"{f.architecture}.", "",
        _io_section(f), _validation_section(f), _use_section(f), _citation_section(), "",
    ])  # fmt: skip


def _io_section(f: Facts) -> str:
    if f.normalise == "minmax":
        scale = (
            "Each image is scaled by its own minimum and maximum to [0, 1] (preprocessing `scale_range`, "
            "0th and 100th percentiles over channels, y and x of one image), as in training. "
            "The output is **not** mapped back: it stays in that [0, 1] scale, because no postprocessing step "
            "of the bioimage.io format undoes a per-image min-max. To get the input's units back, multiply "
            "by (max − min) of the input image and add its min."
        )
    else:
        full = 2**f.bits - 1
        scale = (
            f"The input is {f.bits}-bit data divided by {full} (preprocessing `scale_linear`, gain 1/{full}), "
            f"as in training. Data of another bit depth must be divided by its own full scale first. "
            f"The output stays in the [0, 1] scale (multiply by {full} for {f.bits}-bit values)."
        )
    return "\n".join([
        "## Input, output and tiling", "",
        f"- Input `input`: (batch, channel, y, x) with y = x = {f.tile} pixels (the exported files take this tile size "
        f"only), any batch size. {scale}",
        "- Output `output`: float32, same shape, the restored image.",
        f"- Tiling: larger images are restored tile by tile. The output declares a halo of {f.halo} pixels: crop "
        f"{f.halo} pixels from each side of every output tile, so neighbouring tiles overlap by {f.overlap} pixels. "
        f"dgno itself cross-fades the overlap ({f.blend}); tools that crop halos stitch the tile centres instead, "
        f"which can leave faint seams where the tiles meet. Images smaller than a tile must be padded "
        f"(reflect) to {f.tile} and cropped back.", "",
    ])  # fmt: skip


def _validation_section(f: Facts) -> str:
    lines = ["## Validation", "", "Checked when this package was written (dgno export):", ""]
    for fmt, checks in f.parity.items():
        shown = "; ".join(f"{k}: {v:.1e}" for k, v in checks.items())
        lines.append(f"- {fmt}: max |difference| to the PyTorch network {shown} (the export refuses a file above 1e-4).")
    lines += [
        f"- Test tensors: `test_input.npy` (a tile of soft blobs, as the input stores it) and `test_output.npy` "
        f"(computed by the {f.test_source} file). The PyTorch network (`pytorch_state_dict`) differs from it by "
        f"{f.eager_difference:.1e} at most.",
        "- bioimage.io: the package validated offline with `bioimageio.spec` and passed `bioimageio.core`'s test, "
        "which runs the test input through every weight format and allows an absolute difference of 1e-4.", "",
        "To validate the network on your own data: restore blurred images whose in-focus counterparts you have "
        "(e.g. a focal stack) and compare with PSNR and SSIM on [0, 1] images; `dgno evaluate` does this for "
        "paired sets. Software versions at export: " + ", ".join(f"{k} {v}" for k, v in sorted(f.versions.items())) + ".", "",
    ]  # fmt: skip
    return "\n".join(lines)


def _use_section(f: Facts) -> str:
    return "\n".join([
        "## Using it", "",
        "- **deepImageJ** (Fiji): install the zip as a model; it runs the TorchScript or ONNX weights.",
        "- **QuPath**: the TorchScript file runs through Deep Java Library (the QuPath Deep Java Library extension).",
        "- **napari / Python**: `bioimageio.core` (used for the test above) or ONNX Runtime with the tiling above.",
        "- The `pytorch_state_dict` weights need the dgno package installed (the architecture is imported from "
        "`dgno.inference.bioimageio`); TorchScript and ONNX need nothing but their runtimes.", "",
        "Only the Python side (bioimageio.core, ONNX Runtime, TorchScript) was run when the package was made; "
        "the Java viewers were not.", "",
    ])  # fmt: skip


def _citation_section() -> str:
    return "\n".join([
        "## Citation and terms of use", "",
        f"{', '.join(PAPER_AUTHORS)}. *{PAPER_TITLE}*. ICML 2026. {PAPER_URL}", "",
        f"Code and released checkpoints of the authors: {CODE_URL}, {WEIGHTS_URL}. Terms of use: LICENSE.md.",
    ])  # fmt: skip


def licence() -> str:
    """LICENSE.md: the terms as far as they are known, without inventing a licence."""
    return "\n".join([
        "# Terms of use", "",
        f"The network architecture is the work of {', '.join(PAPER_AUTHORS)} ({PAPER_TITLE}, ICML 2026). "
        f"Their code and released checkpoints are at {CODE_URL} and {WEIGHTS_URL}; their terms apply to the "
        "architecture and, in a package of a released checkpoint, to the weights. Their README states no licence; "
        "a third-party copy of their code reports the repository's LICENSE as an Academic Public License for "
        "non-commercial academic research only. Read the LICENSE file of the authors' repository before any other use.", "",
        "Weights trained with the dgno reproduction pipeline carry the terms their trainer gives them; this package "
        "states none. The dgno pipeline that wrote this package does not state a licence for its code.", "",
    ])  # fmt: skip
