"""The metrics the pipeline reports, as data: one entry per metric, read by every stage that names one.

Evaluation scores each test image with every entry of :data:`METRICS` (``per_image.csv`` columns, the
means in ``summary.json``); the results tables, their statistics (``<table>_stats.csv``), the report's
tables, the claims and the captions take the same entries' names, direction, digits and labels from
here. Adding a metric is one edit of this file: an entry below whose function either names one that
exists (``"module:function"``) or is a function written here, just above the entry (it imports numpy
inside its body); removing one is deleting its entry.

:data:`QUANTITIES` are the other numbers the report prints — derived from the scores (edge-band PSNR and
gains, StarDist AP) or counted (parameters, FLOPs) — with their digits and labels, so that no module
keeps its own copy of either.

Plain data, no numpy or torch: the Snakefile reads it while it builds the DAG. A metric's function is
named as ``"module:function"`` and imported only when an image is scored.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

Direction = Literal["higher", "lower"]
DIRECTIONS = ("higher", "lower")
APPLIES_TO = ("any", "rgb")


@dataclass(frozen=True)
class Metric:
    """One image-quality metric: how it is computed and how it is shown.

    name: the column of ``per_image.csv`` and key of ``summary.json``. function: ``"module:function"`` or
    the function itself, called as ``function(pred, gt)`` on float images in [0, 1]; it returns the value, or with
    ``needs_lpips_weights`` the pair (value or None, weight source) of :func:`dgno.metrics.lpips`.
    direction: which way is better ("higher" / "lower"). applies_to: "rgb" for a metric of colour images
    only (the authors' 8-bit luma PSNR). shown: a column of the report's metric tables (psnr_y8 is not:
    it replaces PSNR in the column of an RGB dataset).
    """

    name: str
    function: str | Callable[..., Any]
    direction: Direction
    digits: int
    label: str
    unit: str = ""
    needs_lpips_weights: bool = False
    applies_to: Literal["any", "rgb"] = "any"
    shown: bool = True

    def __post_init__(self) -> None:
        if self.direction not in DIRECTIONS:
            raise ValueError(f"metric {self.name!r}: direction {self.direction!r} is not one of {', '.join(DIRECTIONS)}")
        if self.applies_to not in APPLIES_TO:
            raise ValueError(f"metric {self.name!r}: applies_to {self.applies_to!r} is not one of {', '.join(APPLIES_TO)}")
        if not callable(self.function) and ":" not in self.function:
            raise ValueError(f"metric {self.name!r}: function {self.function!r} is neither a function nor 'module:function'")

    @property
    def higher_is_better(self) -> bool:
        return self.direction == "higher"

    def applies(self, image_shape: tuple[int, ...]) -> bool:
        """Whether this metric scores an image of this shape ((H, W) or (H, W, C))."""
        return self.applies_to == "any" or (len(image_shape) == 3 and image_shape[-1] == 3)

    def compute(self) -> Callable[..., Any]:
        """The scoring function, imported on this call: scoring needs numpy and scikit-image, the DAG does not."""
        if callable(self.function):
            return self.function
        module, _, attr = self.function.partition(":")
        return getattr(importlib.import_module(module), attr)


@dataclass(frozen=True)
class Quantity:
    """A number the report prints that is not scored per image by evaluation: digits, label, direction."""

    name: str
    digits: int
    label: str
    direction: Direction | None = None
    unit: str = ""


# Table order: the columns of the results tables and the metrics of their statistics.
METRICS: tuple[Metric, ...] = (
    Metric("psnr", "dgno.metrics:psnr", "higher", 2, "PSNR (dB)", unit=" dB"),
    Metric("ssim", "dgno.metrics:ssim", "higher", 3, "SSIM"),
    Metric("lpips", "dgno.metrics:lpips", "lower", 3, "LPIPS", needs_lpips_weights=True),
    Metric("psnr_y8", "dgno.metrics:psnr_luma8", "higher", 2, "PSNR, 8-bit luma (dB)", unit=" dB", applies_to="rgb", shown=False),
)

QUANTITIES: tuple[Quantity, ...] = (
    Quantity("params_m", 2, "Params (M)"),
    Quantity("gflops", 2, "GFLOPs"),
    Quantity("gmacs", 2, "GMACs"),
    Quantity("psnr_edge", 2, "edge-band PSNR ↑", "higher", " dB"),
    Quantity("psnr_interior", 2, "interior PSNR ↑", "higher", " dB"),
    Quantity("psnr_edge_gain", 2, "edge-band gain over GG (dB)", "higher", " dB"),
    Quantity("psnr_interior_gain", 2, "interior gain over GG (dB)", "higher", " dB"),
    Quantity("psnr_boundary_gain", 2, "edge-band gain over GG (dB)", "higher", " dB"),
    Quantity("psnr_gain", 2, "PSNR gain over GG (dB)", "higher", " dB"),
    Quantity("psnr_gain_input", 2, "gain over blurred input (dB)", "higher", " dB"),
    Quantity("ap50", 4, "AP@0.5", "higher"),
    Quantity("ap70", 4, "AP@0.7", "higher"),
    Quantity("ap90", 4, "AP@0.9", "higher"),
    Quantity("map", 4, "mAP", "higher"),
    Quantity("di", 3, "diffusion index DI"),
    Quantity("r50_px", 3, "r₅₀ (px)"),
)
DEFAULT_DIGITS = 3
LPIPS_SOURCE = "lpips_source"  # the summary's column beside a metric that needs LPIPS weights: where they came from


def metric_names() -> list[str]:
    """Every metric evaluation scores, in table order."""
    return [m.name for m in METRICS]


def shown_names() -> list[str]:
    """The metrics of the report's metric tables (one column each)."""
    return [m.name for m in METRICS if m.shown]


def metric(name: str) -> Metric:
    """The entry of metric ``name`` (ValueError naming the known ones otherwise)."""
    for m in METRICS:
        if m.name == name:
            return m
    raise ValueError(f"metric {name!r} is not one of {', '.join(metric_names())} (dgno.metric_spec.METRICS)")


def _entry(name: str) -> Metric | Quantity | None:
    return next((e for e in (*METRICS, *QUANTITIES) if e.name == name), None)


def digits(name: str) -> int:
    """Decimals a value of ``name`` is printed with (3 for a name without an entry)."""
    entry = _entry(name)
    return entry.digits if entry is not None else DEFAULT_DIGITS


def label(name: str) -> str:
    """The column header of ``name``: a metric's label with its direction (↑ / ↓), a quantity's label; else the name."""
    entry = _entry(name)
    if isinstance(entry, Metric):
        return f"{entry.label} {'↑' if entry.higher_is_better else '↓'}"
    return entry.label if entry is not None else name


def unit(name: str) -> str:
    entry = _entry(name)
    return entry.unit if entry is not None else ""


def higher_is_better(name: str) -> bool | None:
    """True / False for a metric or quantity with a direction; None for a count without one (params, DI)."""
    entry = _entry(name)
    if entry is None or entry.direction is None:
        return None
    return entry.direction == "higher"


def summary_columns() -> list[str]:
    """The metric columns of an evaluation summary: each metric, and beside one that needs LPIPS weights, their source."""
    return [c for m in METRICS for c in ((m.name, LPIPS_SOURCE) if m.needs_lpips_weights else (m.name,))]


__all__ = [
    "LPIPS_SOURCE", "METRICS", "QUANTITIES", "Metric", "Quantity", "digits", "higher_is_better", "label", "metric",
    "metric_names", "shown_names", "summary_columns", "unit",
]  # fmt: skip
