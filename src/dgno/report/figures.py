"""Figures of the report, each written as PNG (for the HTML) and SVG (for papers and slides).

One visual style for all figures (seaborn 'ticks', colour-blind palette), sized to stay
readable at laptop width.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from dgno import metrics  # noqa: E402
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
    max_cols: int = 7,
) -> None:
    """Blurred | each method | sharp, for a few test images, with a 2× zoom of the centre below.

    methods: (results folder name, display label) pairs; restored images are read from
    ``eval_root/<method>/<level>/restored/<id>.tif``.
    """
    data_dir, eval_root = Path(data_dir), Path(eval_root)
    norm = dataset_normalisation(data_dir)
    panels = [("Blurred", None)] + list(methods) + [("Sharp", None)]
    # Many methods (Table 1 has eleven) wrap onto several rows so each panel stays readable.
    n_cols = min(len(panels), max_cols)
    chunks = [panels[i : i + n_cols] for i in range(0, len(panels), n_cols)]
    n_rows = 2 * len(ids) * len(chunks)  # each chunk: the images, then their zoomed centres
    fig, axes = plt.subplots(n_rows, n_cols, figsize=(1.7 * n_cols, 1.75 * n_rows), squeeze=False, layout="constrained")
    for ax in axes.flat:
        ax.set_axis_off()
    for r, image_id in enumerate(ids):
        gt = read_image(data_dir / "gt" / f"{image_id}.tif", normalise=norm)
        zy, zx = _zoom_box(gt.shape[:2])
        for k, chunk in enumerate(chunks):
            row = 2 * (r * len(chunks) + k)
            for c, (name, label) in enumerate(chunk):
                if name == "Blurred":
                    img, title = read_image(data_dir / "blur" / level / f"{image_id}.tif", normalise=norm), "Blurred"
                elif name == "Sharp":
                    img, title = gt, "Sharp"
                else:
                    img, title = read_image(eval_root / name / level / "restored" / f"{image_id}.tif"), label
                if name != "Sharp":
                    title = f"{title}\n{psnr(img, gt):.2f} dB"
                top, bottom = axes[row, c], axes[row + 1, c]
                top.imshow(img, cmap="magma", vmin=0, vmax=1)
                top.add_patch(plt.Rectangle((zx.start, zy.start), zx.stop - zx.start, zy.stop - zy.start, fill=False, ec="cyan", lw=0.8))
                top.set_title(title, fontsize=8)
                bottom.imshow(img[zy, zx], cmap="magma", vmin=0, vmax=1, interpolation="nearest")
                for ax in (top, bottom):
                    ax.set_axis_on()
                    ax.set_xticks([])
                    ax.set_yticks([])
            axes[row, 0].set_ylabel(image_id, fontsize=8)
    fig.suptitle(f"{data_dir.name} · {level} (PSNR vs sharp; cyan box enlarged below)", fontsize=9)
    save_figure(fig, out_png)


def training_curves(curves: dict[str, pd.DataFrame], out_png: str | Path, *, title: str, trends: dict | None = None) -> None:
    """Training loss and validation PSNR (EMA weights) against iteration, one line per method and seed.

    Seed replicates ("<label> (seed r)") share their method's colour, dashed. trends: {label:
    dgno.stats.TrainingTrend}; a model still improving at the end (``under_trained``) is named in the
    legend with its rise and its tail window is shaded, so a reader sees which verdicts rest on it.
    """
    fig, (ax_loss, ax_val) = plt.subplots(1, 2, figsize=(9, 3.2))
    bases = list(dict.fromkeys(label.split(" (seed ")[0] for label in curves))
    colour = dict(zip(bases, sns.color_palette("colorblind", len(bases))))
    for label, df in curves.items():
        style = {"color": colour[label.split(" (seed ")[0]], "lw": 1, "ls": "--" if " (seed " in label else "-"}
        trend = (trends or {}).get(label)
        shown = label
        if trend is not None and trend.under_trained:
            shown += f" — under-trained: +{trend.rise_db:.2f} dB over iterations {trend.window[0]:.0f}-{trend.window[1]:.0f}"
            ax_val.axvspan(*trend.window, color=style["color"], alpha=0.08, lw=0)
        ax_loss.plot(df["iteration"], df["loss"], label=label, **style)
        val = df.dropna(subset=["val_psnr"])
        if not val.empty:
            ax_val.plot(val["iteration"], val["val_psnr"], marker="o", ms=3, label=shown, **style)
    ax_loss.set(xlabel="iteration", ylabel="training loss", yscale="log", title="loss")
    ax_val.set(xlabel="iteration", ylabel="PSNR (dB)", title="validation PSNR (EMA weights)")
    ax_val.legend(fontsize=6, frameon=False)
    sns.despine(fig)
    fig.suptitle(title, fontsize=9)
    save_figure(fig, out_png)


def measured_vs_paper_bars(frame: pd.DataFrame, out_png: str | Path, *, metric: str, title: str) -> None:
    """Grouped bars of a measured metric with the paper's value as a black tick where it exists.

    frame columns: group, label, measured, paper (NaN where the paper has no number).
    """
    groups = list(dict.fromkeys(frame["group"]))
    labels = list(dict.fromkeys(frame["label"]))
    group_width = max(3.2, 0.32 * len(labels) + 1.0)  # keep rotated tick labels apart when there are many methods
    fig, axes = plt.subplots(1, len(groups), figsize=(group_width * len(groups) + 0.5, 3.4), squeeze=False)
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
) -> np.ndarray:
    """The paper's residual figure: blurred, sharp, |e_GG| − |e_DG| (red = DG better) and the edge band.

    The map is :func:`dgno.metrics.error_difference_map` (predictions clipped as every metric clips
    them); it is returned so its numbers can be checked against what the figure shows.
    """
    diff = metrics.error_difference_map(pred_gg, pred_dg, gt)
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
    return diff


def effective_rank_bars(frame: pd.DataFrame, out_png: str | Path, *, title: str) -> None:
    """The paper's rank figure: (a) effective rank, (b) utilisation erank/d per (scale, t), one bar per method.

    frame columns: label, scale, t, channels, erank, erank_std, utilization (one row per method × scale × t).
    """
    frame = frame.sort_values(["scale", "t"])
    keys = list(dict.fromkeys(zip(frame["scale"], frame["t"], frame["channels"])))
    labels = list(dict.fromkeys(frame["label"]))
    x = np.arange(len(keys))
    width = 0.8 / max(len(labels), 1)
    palette = sns.color_palette("colorblind", len(labels))
    fig, (ax_r, ax_u) = plt.subplots(1, 2, figsize=(10, 3.4))
    for i, label in enumerate(labels):
        sub = frame[frame["label"] == label].set_index(["scale", "t", "channels"]).reindex(keys)
        offset = (i - (len(labels) - 1) / 2) * width
        ax_r.bar(x + offset, sub["erank"], width, yerr=sub["erank_std"], color=palette[i], label=label, error_kw={"lw": 0.6})
        ax_u.bar(x + offset, sub["utilization"], width, color=palette[i], label=label)
    ticks = [f"{s} · t={t}\n(d={c})" for s, t, c in keys]
    ax_r.set(ylabel="effective rank r_eff", title="(a) effective rank of z")
    ax_u.set(ylabel="r_eff / d", title="(b) utilisation r_eff / d", ylim=(0, 1))
    for ax in (ax_r, ax_u):
        ax.set_xticks(x, ticks, fontsize=7)
    ax_u.legend(fontsize=7, frameon=False)
    sns.despine(fig)
    fig.suptitle(title, fontsize=9)
    save_figure(fig, out_png)


def cost_vs_resolution(frame: pd.DataFrame, out_png: str | Path, *, title: str) -> None:
    """Fig. 1 (right): multiply-accumulates of one forward pass against image side, one line per method (log-log).

    frame columns: label, size, gmacs, params_m.
    """
    fig, ax = plt.subplots(figsize=(5.2, 3.6))
    labels = list(dict.fromkeys(frame["label"]))
    palette = sns.color_palette("colorblind", len(labels))
    markers = "osD^v<>ph*Xd8P"
    for i, label in enumerate(labels):
        sub = frame[frame["label"] == label].sort_values("size")
        ax.plot(sub["size"], sub["gmacs"], marker=markers[i % len(markers)], ms=4, lw=1, color=palette[i % len(palette)], label=f"{label} ({sub['params_m'].iloc[0]:.2f} M)")
    sizes = sorted(frame["size"].unique())
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(sizes, [f"{s}²" for s in sizes])
    ax.set(xlabel="image size (pixels, 1 channel)", ylabel="GMACs per forward pass", title=title)
    ax.legend(fontsize=6, frameon=False, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    sns.despine(fig)
    save_figure(fig, out_png)


def psnr_vs_params(measured: pd.DataFrame, paper: pd.DataFrame, out_png: str | Path, *, title: str) -> None:
    """Fig. 1 (left): PSNR against parameters; measured runs as filled circles, paper values as hollow diamonds.

    measured / paper columns: label, params_m, psnr. The two sets are never mixed: a paper point is
    drawn only where the paper (or the method's original paper) prints both numbers.
    """
    fig, ax = plt.subplots(figsize=(5.6, 3.8))
    if not measured.empty:
        ax.scatter(measured["params_m"], measured["psnr"], s=28, color=sns.color_palette("colorblind")[0], label="measured (this run)", zorder=3)
        for _, r in measured.iterrows():
            ax.annotate(r["label"], (r["params_m"], r["psnr"]), fontsize=6, xytext=(3, 3), textcoords="offset points")
    if not paper.empty:
        ax.scatter(paper["params_m"], paper["psnr"], s=34, marker="D", facecolors="none", edgecolors="black", label="paper (reported)", zorder=3)
        for _, r in paper.iterrows():
            ax.annotate(r["label"], (r["params_m"], r["psnr"]), fontsize=6, color="0.35", xytext=(3, -8), textcoords="offset points")
    ax.set_xscale("log")
    ax.set(xlabel="parameters (M, log scale)", ylabel="PSNR (dB)", title=title)
    ax.legend(fontsize=7, frameon=False, loc="lower right")
    sns.despine(fig)
    save_figure(fig, out_png)


def runtime_memory(frame: pd.DataFrame, out_png: str | Path, *, title: str) -> None:
    """Throughput and peak memory against image size, one row of panels per device, one line per model.

    A device measured at a single size gets bars per model instead of lines (a line needs two sizes).
    frame columns: device, model, size, images_per_second, peak_memory_mb.
    """
    devices = list(dict.fromkeys(frame["device"]))
    fig, axes = plt.subplots(len(devices), 2, figsize=(10, 3.4 * len(devices)), squeeze=False, layout="constrained")
    for row, device in zip(axes, devices):
        sub = frame[frame["device"] == device]
        sizes = sorted(sub["size"].unique())
        models = list(dict.fromkeys(sub["model"]))
        palette = sns.color_palette("husl", len(models)) if len(models) > 10 else sns.color_palette("colorblind", len(models))
        if len(sizes) == 1:
            x = np.arange(len(models))
            g = sub.set_index("model").reindex(models)
            row[0].bar(x, g["images_per_second"], color=palette)
            row[1].bar(x, g["peak_memory_mb"], color=palette)
            for ax in row:
                ax.set_xticks(x, models, rotation=40, ha="right", fontsize=7)
            xlabel = f"model ({sizes[0]}×{sizes[0]} px)"
        else:
            for i, model in enumerate(models):
                g = sub[sub["model"] == model].sort_values("size")
                row[0].plot(g["size"], g["images_per_second"], marker="o", ms=3, lw=1, color=palette[i], label=model)
                row[1].plot(g["size"], g["peak_memory_mb"], marker="o", ms=3, lw=1, color=palette[i], label=model)
            for ax in row:
                ax.set_xticks(sizes, [str(n) for n in sizes])
            row[1].legend(fontsize=7, frameon=False)
            xlabel = "image size (pixels per side)"
        row[0].set(xlabel=xlabel, ylabel="images / s", yscale="log", title=f"throughput — {device}")
        row[1].set(xlabel=xlabel, ylabel="peak memory (MB)", title=f"peak memory — {device}")
    sns.despine(fig)
    fig.suptitle(title, fontsize=9)
    save_figure(fig, out_png)


_LABEL_BOX = {"facecolor": "white", "alpha": 0.7, "lw": 0, "pad": 1}  # panel labels readable on any colour map


def _display_box(views: Sequence, max_side: int) -> tuple[int, int, int, int]:
    """(y0, x0, h, w) in image pixels of the part of the image shown by ``operator_maps``.

    Whole image when it fits in ``max_side``; otherwise a centred window whose corner sits on the
    coarsest element grid present, so the drawn grid lines are the real element borders and the
    8×8 elements stay visible instead of blurring into a hatch on a 700 px field.
    """
    h, w = views[0].blurred.shape
    align = 1
    for v in views:
        if v.element_size is not None:
            align = math.lcm(align, v.element_size * v.stride)
    side_h, side_w = min(h, max_side), min(w, max_side)
    y0 = max(0, (h - side_h) // 2) // align * align
    x0 = max(0, (w - side_w) // 2) // align * align
    return y0, x0, side_h, side_w


def _crop(a: np.ndarray, box: tuple[int, int, int, int], stride: int = 1) -> np.ndarray:
    """The part of a map (at ``stride`` px per value) inside the display box (y0, x0, h, w) in image pixels."""
    y0, x0, bh, bw = box
    s = stride
    return a[..., y0 // s : (y0 + bh + s - 1) // s, x0 // s : (x0 + bw + s - 1) // s]


def _hi(a: np.ndarray) -> float:
    """Colour-scale top: the 99.5th percentile of |a| (never 0)."""
    return float(np.percentile(np.abs(a), 99.5)) or 1e-6


def _operator_row(row: Sequence, v, k: int, box: tuple[int, int, int, int]) -> None:
    """One (method, t) row of ``operator_maps``: blurred, k basis channels, latent, flux with elements, restored."""
    row[0].imshow(_crop(v.blurred, box), cmap="gray", vmin=0, vmax=1)
    for c in range(k):
        ax = row[1 + c]
        if c < v.basis.shape[0]:
            b = _crop(v.basis[c], box, v.stride)
            lim = _hi(b)
            ax.imshow(b, cmap="RdBu_r", vmin=-lim, vmax=lim)
            ax.text(0.03, 0.97, f"ch {v.basis_channels[c]}", transform=ax.transAxes, fontsize=6, va="top", bbox=_LABEL_BOX)
    lat = _crop(v.latent, box, v.stride)
    row[k + 1].imshow(lat, cmap="magma", vmin=0, vmax=_hi(lat))
    ax_flux = row[k + 2]
    if v.flux is None:
        why = "no flux\n(one global element)" if v.element_size is None else "no flux\n(independent windows)"
        ax_flux.text(0.5, 0.5, why, ha="center", va="center", fontsize=7, transform=ax_flux.transAxes)
        ax_flux.set_frame_on(False)
    else:
        fl = _crop(v.flux, box, v.stride)
        ax_flux.imshow(fl, cmap="magma", vmin=0, vmax=_hi(fl))
        ratio = v.stats.get("flux_interface_ratio", float("nan"))
        if np.isfinite(ratio):
            ax_flux.text(0.03, 0.97, f"iface ×{ratio:.2f}", transform=ax_flux.transAxes, fontsize=6, va="top", bbox=_LABEL_BOX)
    if v.element_size is not None:
        p = v.element_size
        oy, ox = (box[0] // v.stride) % p, (box[1] // v.stride) % p
        fh, fw = lat.shape
        for ax in (ax_flux,) if v.flux is not None else (row[k + 1],):  # LG: its window borders
            for yy in range(p - oy, fh, p):
                ax.axhline(yy - 0.5, color="cyan", lw=0.35, alpha=0.6)
            for xx in range(p - ox, fw, p):
                ax.axvline(xx - 0.5, color="cyan", lw=0.35, alpha=0.6)
    row[k + 3].imshow(_crop(v.restored, box), cmap="gray", vmin=0, vmax=1)
    row[0].set_ylabel(f"{v.label}\n{v.scale} · t={v.t}", fontsize=7)
    for ax in row:
        ax.set_xticks([])
        ax.set_yticks([])


def operator_maps(views: Sequence, out_png: str | Path, *, title: str, max_side: int = 128) -> None:
    """The paper's qualitative operator figure: one row per (method, t), columns

    blurred | k channels of Q (dynamic basis) | ‖Q(KᵀV)‖ | ‖flux‖ with the element grid | restored.

    views: objects with the attributes of ``dgno.analysis.operators.OperatorView`` (label, t, stride,
    element_size, blurred, restored, basis (k, h, w), basis_channels, latent, flux or None, stats).
    Each map is scaled to its own 99.5th percentile (Q symmetric about 0), since basis channels and
    terms of different methods have unrelated magnitudes; the flux panel states its interface-energy ratio.
    """
    if not views:
        raise ValueError("operator_maps needs at least one view")
    k = max(v.basis.shape[0] for v in views)
    ncols = k + 4
    box = _display_box(views, max_side)
    fig, axes = plt.subplots(len(views), ncols, figsize=(1.55 * ncols, 1.65 * len(views) + 0.4), squeeze=False)
    for r, v in enumerate(views):
        _operator_row(axes[r], v, k, box)
    heads = ["(a) blurred"] + [f"(b) Q basis {c + 1}" for c in range(k)] + ["(c) ‖Q(KᵀV)‖", "(d) ‖flux‖ + elements", "(e) restored"]
    for ax, head in zip(axes[0], heads):
        ax.set_title(head, fontsize=8)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    save_figure(fig, out_png)


def _show(ax: plt.Axes, img: np.ndarray) -> None:
    """Grayscale (h, w) or colour (h, w, 3) image in [0, 1]."""
    if img.ndim == 2:
        ax.imshow(img, cmap="gray", vmin=0, vmax=1)
    else:
        ax.imshow(np.clip(img, 0, 1))


def lam_maps(views: Sequence, out_png: str | Path, *, title: str) -> None:
    """The paper's LAM figure: per method, (top) the local attribution map over the blurred input, with the
    analysed output window (cyan) and the radius r₅₀ that holds half of the attribution (dashed), and
    (bottom) the restored image; the first column shows the blurred input and the sharp image (if any).

    views: objects with the attributes of ``dgno.analysis.lam.LamView``.  Each map is scaled to its own
    99.5th percentile: attributions of different networks have unrelated magnitudes, and DI / r₅₀ (printed
    on the panel) are the scale-free comparison.
    """
    if not views:
        raise ValueError("lam_maps needs at least one view")
    n = len(views) + 1
    fig, axes = plt.subplots(2, n, figsize=(1.9 * n, 4.0), squeeze=False)
    first = views[0]

    def box(ax: plt.Axes, window: tuple[int, int, int]) -> None:
        wy, wx, ws = window
        ax.add_patch(plt.Rectangle((wx - 0.5, wy - 0.5), ws, ws, fill=False, ec="cyan", lw=1.0))

    _show(axes[0, 0], first.blurred)
    axes[0, 0].set_title("(a) blurred input", fontsize=8)
    box(axes[0, 0], first.window)
    if first.sharp is not None:
        _show(axes[1, 0], first.sharp)
        axes[1, 0].set_title("sharp", fontsize=8)
        box(axes[1, 0], first.window)
    else:
        axes[1, 0].set_axis_off()
    for c, v in enumerate(views, start=1):
        top, bottom = axes[0, c], axes[1, c]
        gray = v.blurred if v.blurred.ndim == 2 else v.blurred.mean(-1)
        top.imshow(gray, cmap="gray", vmin=0, vmax=1)
        hi = float(np.percentile(v.attribution, 99.5)) or float(v.attribution.max()) or 1.0
        top.imshow(np.clip(v.attribution / hi, 0, 1), cmap="inferno", alpha=0.75, vmin=0, vmax=1)
        box(top, v.window)
        cy, cx = v.window[0] + (v.window[2] - 1) / 2, v.window[1] + (v.window[2] - 1) / 2
        top.add_patch(plt.Circle((cx, cy), v.r50_px, fill=False, ec="white", lw=0.8, ls="--"))
        top.text(0.03, 0.97, f"DI {v.di:.1f}\nr₅₀ {v.r50_px:.1f} px", transform=top.transAxes, fontsize=6, va="top", bbox=_LABEL_BOX)
        top.set_title(v.label, fontsize=8)
        _show(bottom, v.restored)
        box(bottom, v.window)
        if v.psnr is not None:
            bottom.text(0.03, 0.97, f"{v.psnr:.2f} dB", transform=bottom.transAxes, fontsize=6, va="top", bbox=_LABEL_BOX)
    for ax in axes.ravel():
        ax.set_xticks([])
        ax.set_yticks([])
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    save_figure(fig, out_png)


def noise_sensitivity(frame: pd.DataFrame, out_png: str | Path, *, labels: dict[str, str], title: str, operating_sigma: float | None = None) -> None:
    """Mean PSNR against the camera's read-noise σ, one line per method (``nonblind.sensitivity``'s CSV).

    frame columns: read_sigma, method, psnr.  labels: method → legend text.  operating_sigma: the σ of the
    non-blind table's data, marked by a dotted line so the figure and the table can be read together.
    """
    fig, ax = plt.subplots(figsize=(4.8, 3.4))
    methods = list(dict.fromkeys(frame["method"]))
    palette = sns.color_palette("colorblind", len(methods))
    markers = "osD^v<>ph*"
    for i, method in enumerate(methods):
        sub = frame[frame["method"] == method].sort_values("read_sigma")
        style = dict(ls="--", color="0.4") if method == "input" else dict(color=palette[i])
        ax.plot(sub["read_sigma"], sub["psnr"], marker=markers[i % len(markers)], ms=4, lw=1.2, label=labels.get(method, method), **style)
    if operating_sigma is not None:
        ax.axvline(float(operating_sigma), color="0.6", lw=0.8, ls=":", label="table's noise level")
    sigmas = sorted(frame["read_sigma"].unique())
    ax.set_xticks(sigmas, [f"{v:g}" for v in sigmas])
    ax.set(xlabel="read-noise σ (shot noise fixed)", ylabel="PSNR (dB)", title=title)
    ax.legend(fontsize=7, frameon=False, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    sns.despine(fig)
    save_figure(fig, out_png)
