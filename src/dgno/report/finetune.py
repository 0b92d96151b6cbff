"""The fine-tuning report: did fine-tuning help on the held-out fields? ``report.md`` and ``report.html``.

Reads what :func:`dgno.train.finetune.finetune` wrote into its folder (``finetune.json``, the prepared
data's ``fields.csv`` and ``pairs.csv``, ``eval/<input|start|finetuned>/per_image.csv``, the example
crops, ``train_metrics.csv``) and computes nothing but means and intervals:

* per defocus distance (planes from the in-focus plane, both sides together) and over all pairs: the
  held-out mean PSNR, SSIM and LPIPS (when scored) of the input, the starting network and the fine-tuned
  one, each with its bootstrap interval, and the difference fine-tuned − start with its interval. The
  resampling unit is the held-out field (the pairs of one field are one scene: they are averaged first,
  ``dgno.stats``); with fewer than ``dgno.stats.MIN_IMAGES`` held-out fields no interval is given;
* a warning at the top when the fine-tuned network is not better than the start on the held-out fields
  (mean PSNR difference ≤ 0), and a caution when its lead's interval includes 0;
* each field's in-focus plane (measured or given), its input planes, the shifts corrected, its split;
* the validation curve (the start's score at iteration 0) and the iteration kept;
* one example per distance: input | start | fine-tuned | sharp.
"""

from __future__ import annotations

import base64
import html
import math
from pathlib import Path
from typing import Any

import pandas as pd

from dgno import metric_spec, stats
from dgno.io import atomic_path, read_json

METHODS = {"input": "input (blurred plane)", "start": "starting network", "finetuned": "fine-tuned network"}
FIELD_COLUMNS = ["field", "split", "planes", "focus_plane", "focus", "levels", "corrected", "crop"]
MAX_FIELD_ROWS = 60


def load_scores(out_dir: Path) -> pd.DataFrame:
    """Every held-out pair's scores, long: method, id (pair), field, level, distance ("all" for pairs of folders), metrics."""
    pairs = pd.read_csv(out_dir / "data" / "pairs.csv", dtype={"distance": str}).fillna({"distance": "pair"})
    frames = []
    for method in METHODS:
        path = out_dir / "eval" / method / "per_image.csv"
        if path.is_file():
            frames.append(pd.read_csv(path).merge(pairs, on="id").assign(method=method))
    return pd.concat(frames, ignore_index=True)


def _field_means(frame: pd.DataFrame, method: str, metric: str) -> pd.Series:
    return frame[frame["method"] == method].groupby("field")[metric].mean()


def _interval(values, **kw) -> stats.Interval:
    return stats.bootstrap_interval(pd.Series(values).to_numpy(dtype=float), **kw)


def compare(frame: pd.DataFrame, metric: str, *, base: str) -> dict[str, Any]:
    """{method: mean interval over fields} and ``diff``: fine-tuned − ``base`` over the same fields."""
    out: dict[str, Any] = {m: _interval(_field_means(frame, m, metric)) for m in METHODS if (frame["method"] == m).any()}
    a, b = (frame[frame["method"] == m].rename(columns={"id": "pair", "field": "id"})[["id", "level", metric]] for m in ("finetuned", base))
    out["diff"] = stats.paired_interval(a, b, metric, names=("finetuned", base))
    return out


def verdict(diff: stats.Interval, base: str) -> tuple[str, str | None]:
    """(one line on whether fine-tuning helped, a warning when it did not or is not shown to)."""
    what = METHODS[base]
    line = f"fine-tuned − {what}: {diff.estimate:+.2f} dB held-out PSNR"
    if math.isfinite(diff.low):
        line += f" [{diff.low:+.2f}, {diff.high:+.2f}] ({diff.confidence:.0%} interval over {diff.n_images} held-out fields)"
    else:
        line += f" over {diff.n_images} held-out fields ({diff.method})"
    if diff.estimate <= 0 and base == "input":
        return line, "WARNING: the fine-tuned network does not restore the held-out fields better than their blurred input. Do not use it: give more fields, more iterations, or a trained starting network"
    if diff.estimate <= 0:
        return line, f"WARNING: the fine-tuned network is not better than the {what} on the held-out fields. Keep using the {what}, or give more fields or other distances"
    if diff.side() <= 0:
        return line, f"CAUTION: the fine-tuned network's lead over the {what} is not resolved (its interval includes 0, or there are too few held-out fields for one)"
    return line, None


def _cell(iv: stats.Interval, digits: int, signed: bool = False) -> str:
    fmt = f"{{:{'+' if signed else ''}.{digits}f}}"
    text = fmt.format(iv.estimate)
    return text + (f" [{fmt.format(iv.low)}, {fmt.format(iv.high)}]" if math.isfinite(iv.low) else "")


def metric_table(frame: pd.DataFrame, metric: str, *, base: str) -> list[list[str]]:
    """Rows: distance (then all pairs): held-out pairs, fields, each method's mean [interval], the difference."""
    digits = metric_spec.digits(metric)
    rows = [["distance (planes)", "pairs", "fields", *[METHODS[m] for m in METHODS if (frame["method"] == m).any()], f"fine-tuned − {base}"]]
    groups = [(str(d), g) for d, g in frame.groupby("distance", sort=False)]
    groups = sorted(groups, key=lambda t: (not t[0].isdigit(), int(t[0]) if t[0].isdigit() else 0)) + ([("all", frame)] if len(groups) > 1 else [])
    for name, group in groups:
        res = compare(group, metric, base=base)
        n_pairs = int((group["method"] == "finetuned").sum())
        rows.append([name, str(n_pairs), str(group["field"].nunique()), *[_cell(res[m], digits) for m in METHODS if m in res], _cell(res["diff"], digits, signed=True)])
    return rows


def _curve(out_dir: Path) -> list[list[str]]:
    path = out_dir / "train_metrics.csv"
    if not path.is_file():
        return []
    log = pd.read_csv(path, dtype=str).fillna("")
    rows = [["iteration", "validation PSNR (dB)", "training loss"]]
    rows += [[r["iteration"], r["val_psnr"], r["loss"]] for _, r in log.iterrows() if r["val_psnr"]]
    return rows


def _fields(out_dir: Path) -> list[list[str]]:
    fields = pd.read_csv(out_dir / "data" / "fields.csv", dtype=str).fillna("")
    return [FIELD_COLUMNS] + [[r[c] for c in FIELD_COLUMNS] for _, r in fields.head(MAX_FIELD_ROWS).iterrows()]


def _setup(summary: dict[str, Any]) -> list[str]:
    data, sel, recipe = summary["data"], summary.get("selection") or {}, summary["recipe"]
    stopped = f"stopped early at iteration {sel['stopped_at']}" if sel.get("stopped_at") is not None else f"ran all {recipe['iterations']} iterations"
    kept = "the starting weights (no validation beat them)" if sel.get("best_iteration") == 0 else f"iteration {sel.get('best_iteration')}"
    start_psnr = f"{sel['start_psnr']:.2f} dB" if sel.get("start_psnr") is not None else "n/a"
    return [
        f"Starting network: {summary['start']['label']} (intensity scaling: {summary['start']['normalise']})",
        f"Inputs ({summary['inputs']['kind']}): {', '.join(summary['inputs']['paths'])}",
        f"Fields: {data['fields']['train']} training, {data['fields']['val']} validation, {data['fields']['test']} held out (split by {data['split_by']}); {data['pairs']} pairs",
        f"Recipe: patch {recipe['patch_size']}, batch {recipe['batch_size']}, learning rate {recipe['lr']:g}, validation every {recipe['val_every']} iterations; {stopped}; kept {kept}",
        f"Validation PSNR: start {start_psnr}, best {sel.get('best_psnr', float('nan')):.2f} dB; training took {summary['train_seconds'] / 60:.1f} min on {summary['provenance']['device']}",
        f"LPIPS: {summary['lpips']}",
    ]


def build(out_dir: str | Path) -> dict[str, Any]:
    """Everything the report shows, as plain data (also what ``dgno finetune`` prints)."""
    out_dir = Path(out_dir)
    summary = read_json(out_dir / "finetune.json")
    frame = load_scores(out_dir)
    base = "start" if (frame["method"] == "start").any() else "input"
    line, warning = verdict(compare(frame, "psnr", base=base)["diff"], base)
    metrics = [m for m in metric_spec.shown_names() if m in frame.columns and frame[m].notna().all()]
    examples_file = out_dir / summary.get("examples", "eval/examples.json")
    return {
        "out_dir": out_dir, "summary": summary, "verdict": line, "warning": warning, "base": base, "setup": _setup(summary),
        "tables": {m: metric_table(frame, m, base=base) for m in metrics}, "fields": _fields(out_dir), "curve": _curve(out_dir),
        "examples": read_json(examples_file) if examples_file.is_file() else [],
    }  # fmt: skip


def _md_table(rows: list[list[str]]) -> str:
    if not rows:
        return ""
    lines = ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows[1:]]) + "\n"


def _html_table(rows: list[list[str]]) -> str:
    if not rows:
        return ""
    head = "".join(f"<th>{html.escape(c)}</th>" for c in rows[0])
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows[1:])
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>\n"


def _sections(report: dict[str, Any]) -> list[tuple[str, str, list[list[str]] | None]]:
    """(title, text, table) of each part, in order; shared by both renderings."""
    parts = [("Held-out fields", report["verdict"], None)]
    for metric, rows in report["tables"].items():
        parts.append((metric_spec.label(metric), f"Mean over held-out pairs, {stats.CONFIDENCE:.0%} bootstrap interval over fields in brackets.", rows))
    parts.append(("Validation curve", "Iteration 0 is the starting network; the weights of the best validation are in model.pt.", report["curve"]))
    more = f" (the first {MAX_FIELD_ROWS})" if len(report["fields"]) > MAX_FIELD_ROWS else ""
    parts.append(("Fields", f"In-focus plane per field (measured: the sharpest plane; given: by the user), input planes, shifts corrected and split{more}.", report["fields"]))
    return parts


def render_markdown(report: dict[str, Any]) -> str:
    text = ["# Fine-tuning report", ""]
    text += [f"**{report['warning']}**", ""] if report["warning"] else []
    text += [f"- {line}" for line in report["setup"]] + [""]
    for title, note, rows in _sections(report):
        text += [f"## {title}", "", note, "", _md_table(rows) if rows else ""]
    text += ["## Examples", "", "Panels, left to right: " + ", ".join(report["examples"][0]["panels"]) + "." if report["examples"] else "No examples.", ""]
    text += [f"![{e['pair']}](eval/examples/{e['file']})  \n{e['pair']} (field {e['field']}, {e['level']}): {e['gain_db']:+.2f} dB" for e in report["examples"]]
    return "\n".join(text) + "\n"


def render_html(report: dict[str, Any]) -> str:
    out_dir = report["out_dir"]
    body = ["<h1>Fine-tuning report</h1>"]
    if report["warning"]:
        body.append(f'<p class="warning">{html.escape(report["warning"])}</p>')
    body.append("<ul>" + "".join(f"<li>{html.escape(line)}</li>" for line in report["setup"]) + "</ul>")
    for title, note, rows in _sections(report):
        body += [f"<h2>{html.escape(title)}</h2>", f"<p>{html.escape(note)}</p>", _html_table(rows) if rows else ""]
    body.append("<h2>Examples</h2>")
    for e in report["examples"]:
        png = base64.b64encode((out_dir / "eval" / "examples" / e["file"]).read_bytes()).decode("ascii")
        caption = f"{e['pair']} (field {e['field']}, {e['level']}): {', '.join(e['panels'])}; fine-tuned − start {e['gain_db']:+.2f} dB"
        body.append(f'<figure><img alt="{html.escape(e["pair"])}" src="data:image/png;base64,{png}"><figcaption>{html.escape(caption)}</figcaption></figure>')
    style = "body{font-family:sans-serif;max-width:70em;margin:2em auto}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.2em .5em}.warning{background:#fdd;padding:.5em;font-weight:bold}img{image-rendering:pixelated;max-width:100%}"
    return f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>Fine-tuning report</title><style>{style}</style></head><body>\n' + "\n".join(body) + "\n</body></html>\n"


def write_report(out_dir: str | Path) -> dict[str, Any]:
    """Write ``report.md`` and ``report.html`` into the fine-tuning folder; returns :func:`build`'s data."""
    report = build(out_dir)
    for name, text in (("report.md", render_markdown(report)), ("report.html", render_html(report))):
        with atomic_path(report["out_dir"] / name) as tmp:
            tmp.write_text(text, encoding="utf-8")
    return report
