"""Figures of the report, each written as PNG (for the HTML) and SVG (for papers and slides).

One visual style for all figures (seaborn 'ticks', colour-blind palette), sized to stay
readable at laptop width.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from dgno.data.paired import dataset_normalisation  # noqa: E402
from dgno.io import atomic_path, read_image  # noqa: E402
from dgno.metrics import psnr  # noqa: E402

sns.set_theme(style="ticks", palette="colorblind", font_scale=0.9)


def save_figure(fig: plt.Figure, png_path: str | Path) -> None:
    """Write `fig` as PNG at `png_path` and as SVG beside it (atomic, both)."""
    png_path = Path(png_path)
    for path, fmt in ((png_path, "png"), (png_path.with_suffix(".svg"), "svg")):
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format=fmt, dpi=130, bbox_inches="tight")
    plt.close(fig)


def _zoom_box(shape: tuple[int, int], frac: float = 0.35) -> tuple[slice, slice]:
    """The central crop shown enlarged under each panel."""
    h, w = shape
    ch, cw = max(int(h * frac), 8), max(int(w * frac), 8)
    y0, x0 = (h - ch) // 2, (w - cw) // 2
    return slice(y0, y0 + ch), slice(x0, x0 + cw)


def visual_comparison(
    *,
    data_dir: str | Path,
    eval_root: str | Path,
    level: str,
    ids: Sequence[str],
    methods: Sequence[tuple[str, str]],
    out_png: str | Path,
) -> None:
    """Blurred | each method | sharp, for a few test images, with a 2× zoom of the centre below.

    methods: (results folder name, display label) pairs; restored images are read from
    ``eval_root/<method>/<level>/restored/<id>.tif``.
    """
    data_dir, eval_root = Path(data_dir), Path(eval_root)
    norm = dataset_normalisation(data_dir)
    cols = [("Blurred", None)] + list(methods) + [("Sharp", None)]
    fig, axes = plt.subplots(2 * len(ids), len(cols), figsize=(1.6 * len(cols), 3.3 * len(ids)), squeeze=False)
    for r, image_id in enumerate(ids):
        gt = read_image(data_dir / "gt" / f"{image_id}.tif", normalise=norm)
        zy, zx = _zoom_box(gt.shape[:2])
        for c, (name, label) in enumerate(cols):
            if name == "Blurred":
                img, title = read_image(data_dir / "blur" / level / f"{image_id}.tif", normalise=norm), "Blurred"
            elif name == "Sharp":
                img, title = gt, "Sharp"
            else:
                img, title = read_image(eval_root / name / level / "restored" / f"{image_id}.tif"), label
            if name != "Sharp":
                title = f"{title}\n{psnr(img, gt):.2f} dB"
            top, bottom = axes[2 * r, c], axes[2 * r + 1, c]
            top.imshow(img, cmap="magma", vmin=0, vmax=1)
            top.add_patch(plt.Rectangle((zx.start, zy.start), zx.stop - zx.start, zy.stop - zy.start, fill=False, ec="cyan", lw=0.8))
            top.set_title(title, fontsize=8)
            bottom.imshow(img[zy, zx], cmap="magma", vmin=0, vmax=1, interpolation="nearest")
            for ax in (top, bottom):
                ax.set_xticks([])
                ax.set_yticks([])
        axes[2 * r, 0].set_ylabel(image_id, fontsize=8)
    fig.suptitle(f"{data_dir.name} · {level} (PSNR vs sharp; cyan box enlarged below)", fontsize=9)
    save_figure(fig, out_png)


def training_curves(curves: dict[str, pd.DataFrame], out_png: str | Path, *, title: str) -> None:
    """Training loss and validation PSNR (EMA weights) against iteration, one line per method."""
    fig, (ax_loss, ax_val) = plt.subplots(1, 2, figsize=(9, 3.2))
    for label, df in curves.items():
        ax_loss.plot(df["iteration"], df["loss"], label=label, lw=1)
        val = df.dropna(subset=["val_psnr"])
        if not val.empty:
            ax_val.plot(val["iteration"], val["val_psnr"], marker="o", ms=3, label=label, lw=1)
    ax_loss.set(xlabel="iteration", ylabel="training loss", yscale="log", title="loss")
    ax_val.set(xlabel="iteration", ylabel="PSNR (dB)", title="validation PSNR (EMA weights)")
    ax_val.legend(fontsize=7, frameon=False)
    sns.despine(fig)
    fig.suptitle(title, fontsize=9)
    save_figure(fig, out_png)


def measured_vs_paper_bars(frame: pd.DataFrame, out_png: str | Path, *, metric: str, title: str) -> None:
    """Grouped bars of a measured metric with the paper's value as a black tick where it exists.

    frame columns: group, label, measured, paper (NaN where the paper has no number).
    """
    groups = list(dict.fromkeys(frame["group"]))
    labels = list(dict.fromkeys(frame["label"]))
    fig, axes = plt.subplots(1, len(groups), figsize=(3.2 * len(groups) + 0.5, 3.2), squeeze=False)
    palette = sns.color_palette("colorblind", len(labels))
    for ax, group in zip(axes[0], groups):
        sub = frame[frame["group"] == group].set_index("label").reindex(labels)
        x = np.arange(len(labels))
        ax.bar(x, sub["measured"], color=palette)
        if sub["paper"].notna().any():
            ax.scatter(x, sub["paper"], marker="_", s=300, color="black", zorder=3, label="paper")
            ax.legend(fontsize=7, frameon=False, loc="lower right")
        finite = pd.concat([sub["measured"], sub["paper"]]).dropna()
        if not finite.empty:
            lo, hi = finite.min(), finite.max()
            ax.set_ylim(lo - 0.15 * (hi - lo + 1), hi + 0.1 * (hi - lo + 1))
        ax.set_xticks(x, labels, rotation=30, ha="right", fontsize=8)
        ax.set_title(group, fontsize=9)
        ax.set_ylabel(metric)
    sns.despine(fig)
    fig.suptitle(title, fontsize=9)
    save_figure(fig, out_png)


def error_difference(
    *, gt: np.ndarray, blur: np.ndarray, pred_gg: np.ndarray, pred_dg: np.ndarray, band: np.ndarray, out_png: str | Path, title: str
) -> None:
    """The paper's residual figure: blurred, sharp, |e_GG| − |e_DG| (red = DG better) and the edge band."""
    diff = np.abs(pred_gg - gt) - np.abs(pred_dg - gt)
    lim = float(np.percentile(np.abs(diff), 99.5)) or 1e-3
    fig, axes = plt.subplots(1, 4, figsize=(11, 3.0))
    axes[0].imshow(blur, cmap="gray", vmin=0, vmax=1)
    axes[0].set_title("(a) blurred")
    axes[1].imshow(gt, cmap="gray", vmin=0, vmax=1)
    axes[1].set_title("(b) sharp")
    im = axes[2].imshow(diff, cmap="RdBu_r", vmin=-lim, vmax=lim)
    axes[2].set_title("(c) |e_GG| − |e_DG|")
    fig.colorbar(im, ax=axes[2], fraction=0.046)
    axes[3].imshow(band, cmap="gray")
    axes[3].set_title("(d) edge band")
    for ax in axes:
        ax.set_xticks([])
        ax.set_yticks([])
    fig.suptitle(title, fontsize=9)
    save_figure(fig, out_png)
