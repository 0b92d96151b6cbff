"""The sub-commands of ``dgno`` that run networks: train, evaluate, summary, deblur, lam, import-authors, bench.

Each is a thin shell around a package function, called by :func:`dgno.cli.main` with the parsed
arguments. They live apart from the parser because they need torch (and the figures matplotlib),
which take seconds to import: ``dgno --help``, ``dgno report`` and ``dgno data check`` never load
this module.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from dgno import metric_spec
from dgno.analysis.bench import bench_forward, bench_train, write_results
from dgno.analysis.cost import summary_rows
from dgno.analysis.lam import image_lam
from dgno.checkpoint import import_authors as import_authors_checkpoint
from dgno.inference import authors, preflight
from dgno.inference.bioimageio import write_package
from dgno.inference.deblur import DeblurOptions, deblur_batch
from dgno.inference.deblur import check_options as check_deblur_options
from dgno.inference.evaluate import evaluate_checkpoint
from dgno.inference.export import export_restoration
from dgno.io import InputError, write_csv
from dgno.report.figures import lam_maps
from dgno.slides.inputs import unique_names
from dgno.slides.network import load_network
from dgno.slides.restore import restore_slide
from dgno.slides.run import SlideInterrupted
from dgno.train import INTERRUPTED_EXIT, Interrupted, ModelChoice, TrainConfig
from dgno.train import train as train_model
from dgno.workflow.config import load_config

INTERRUPTED_BY_USER = 130  # the shell's status for a command stopped by Ctrl-C (128 + SIGINT)


def train(args: argparse.Namespace) -> int:
    cfg = load_config(args.config)
    settings = TrainConfig.from_dict({**cfg["train"], "seed": cfg["seed"], "device": cfg["device"]})
    if args.iterations:
        settings.iterations = args.iterations
    method = cfg["methods"].get(args.method, {"model": args.method})
    levels = args.levels or cfg["datasets"].get(Path(args.data).name, {}).get("train_levels")
    if not levels:
        raise InputError(f"{args.data}: no --levels given and the config has no dataset of that name. Fix: pass --levels z02 z06")
    try:
        path = train_model(
            args.data,
            args.out,
            model_choice=ModelChoice(name=method["model"], scale=args.scale or cfg["scale"], overrides=method.get("overrides", {})),
            levels=levels,
            cfg=settings,
        )
    except Interrupted as err:  # SIGTERM (SLURM's time-limit warning): checkpoint written, not finished
        print(f"dgno train: {err}; run the same command again to resume", file=sys.stderr)
        return INTERRUPTED_EXIT
    if os.environ.get("RANK", "0") == "0":  # under torchrun, one line per run, not per process
        print(path)
    return 0


def evaluate(args: argparse.Namespace) -> int:
    summary = evaluate_checkpoint(
        args.checkpoint, args.data, args.level, args.out, tile=args.tile, overlap=args.overlap, with_lpips=not args.no_lpips,
        tile_batch=args.tile_batch, cuda_graphs=args.cuda_graphs, overlap_io=args.overlap_io, engine=args.engine,
    )  # fmt: skip
    keys = ("method", "level", "n_images", *metric_spec.summary_columns(), "iteration", "iterations", "in_progress")
    print(json.dumps({k: summary.get(k) for k in keys}, indent=2))
    return 0


def summary(args: argparse.Namespace) -> int:
    rows = summary_rows(args.model, scale=args.scale, size=args.size, in_channels=args.channels)
    if args.json:
        print(json.dumps(rows if len(rows) > 1 else rows[0], indent=2))
    else:
        print(f"{'model':<12} {'scale':<6} {'params (M)':>11} {'GFLOPs @' + str(args.size):>14}")
        for r in rows:
            print(f"{r['model']:<12} {r['scale']:<6} {r['params_m']:>11.3f} {r['gflops']:>14.2f}")
    return 0


def _deblur_options(args: argparse.Namespace, how: authors.Restoration | None) -> DeblurOptions:
    """The command line's options; without ``how`` (the model not resolved yet) only what the user gave."""
    return DeblurOptions(
        tile=args.tile if args.tile is not None or how is None else how.tile,
        overlap=args.overlap if args.overlap is not None else (how.overlap if how else 0),
        blend=args.blend or (how.blend if how else "ramp"),
        tile_batch=args.tile_batch,
        cuda_graphs=args.cuda_graphs,
        bf16=args.bf16,
        engine=args.engine,
        normalise=args.normalise or (how.normalise if how else None),
        strict_channels=bool(how and how.strict_channels),
        channel=args.channel,
        axes=args.axes,
        threads=args.threads,
        max_memory_gb=args.max_memory,
        skip_existing=args.skip_existing,
        model_name=how.name if how else None,
    )


def deblur(args: argparse.Namespace) -> int:
    # Options, device and output folder first: a mistake there is said before any download or image.
    check_deblur_options(_deblur_options(args, None))
    preflight.check_device(args.device)
    preflight.prepare_output_dir(args.output)
    how = authors.released(args.authors, options=args.options) if args.authors else authors.local(args.checkpoint, options=args.options)
    summary = deblur_batch(args.inputs, args.output, checkpoint=how.model, device=args.device, options=_deblur_options(args, how))
    print(summary.line())
    if summary.failed:
        print(f"{len(summary.failed)} of {summary.total} file(s) failed (errors above)", file=sys.stderr)
    if summary.interrupted:
        print(f"interrupted: the {len(summary.restored)} restored file(s) are complete; rerun with --skip-existing to go on", file=sys.stderr)
        return INTERRUPTED_BY_USER
    return 1 if summary.failed else 0


def _slide_line(summary: dict) -> str:
    t = summary["tiles"]
    head = f"{summary['slide']}: {t['total']} tiles, {t['tissue']} tissue, {t['blurry']} blurry, {t['restored']} to restore"
    if summary["dry_run"]:
        return f"{head}; {summary['network']} on {summary['device']}: {summary['seconds_per_tile']:.3g} s per tile → about {summary['estimated_seconds'] / 60:.1f} min of network time"
    return f"{head}; restored in {summary['seconds']:.1f} s → {summary['files']['slide']}"


def deblur_slide(args: argparse.Namespace) -> int:
    """Restore each slide; one line per slide; exit 143 when stopped by a signal (a rerun resumes)."""
    # Options, threads, output folder and names first: a mistake there is said before any download or slide.
    threads = preflight.check_threads(args.threads)
    slides = list(unique_names(args.slides, fix="restore them into different --output folders").values())  # a slide named twice: once
    preflight.prepare_output_dir(args.output)
    network = load_network(checkpoint=args.checkpoint, authors=args.authors, options=args.options, device=args.device, tile_batch=args.tile_batch,
                           cuda_graphs=args.cuda_graphs, bf16=args.bf16, threads=threads, normalise=args.normalise, tile=args.tile, overlap=args.overlap,
                           engine=args.engine)  # fmt: skip
    if network.engine_note:
        print(f"note: {network.engine_note}; using engine {network.engine}", file=sys.stderr)
    options = dict(level=args.level, mpp=args.mpp, channel=args.channel, restore=args.restore, threshold=args.threshold, margin=args.focus_margin,
                   min_tissue=args.min_tissue, focus_downsample=args.focus_downsample, compression=args.compression, overwrite=args.overwrite,
                   dry_run=args.dry_run, workers=threads if args.threads else min(threads, 4))  # fmt: skip
    failures = []
    for path in slides:
        try:
            print(_slide_line(restore_slide(path, args.output, network=network, **options)))
        except SlideInterrupted as exc:
            print(f"dgno deblur-slide: {path}: {exc}; the finished tiles are kept, run the same command again to resume", file=sys.stderr)
            return INTERRUPTED_EXIT
        except InputError as exc:
            failures.append(str(exc) if str(path) in str(exc) else f"{path}: {exc}")
    for message in failures:
        print(f"error: {message}", file=sys.stderr)
    if failures:
        print(f"{len(failures)} of {len(args.slides)} slide(s) failed", file=sys.stderr)
    return 1 if failures else 0


def lam(args: argparse.Namespace) -> int:
    labels = args.label or [Path(c).parent.name or Path(c).stem for c in args.checkpoint]
    if len(labels) != len(args.checkpoint) or len(set(labels)) != len(labels):
        raise InputError(f"--label: give one distinct name per --checkpoint ({len(args.checkpoint)}), got {labels}. Fix: pass --label once per checkpoint")
    views, frame = image_lam(
        args.image,
        dict(zip(labels, args.checkpoint)),
        window=tuple(args.window) if args.window else None,
        window_size=args.window_size,
        crop=args.crop,
        sigma_max=args.sigma_max,
        steps=args.steps,
        device=args.device,
    )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_csv(out.with_suffix(".csv"), frame)
    row = frame.iloc[0]
    lam_maps(views, out, title=f"{Path(args.image).name}: LAM of the {row['window_size']}-px window at ({row['window_y0']}, {row['window_x0']})")
    print(frame[["label", "di", "r50_px"]].to_string(index=False))
    print(f"wrote {out}, {out.with_suffix('.svg')} and {out.with_suffix('.csv')}")
    return 0


def export(args: argparse.Namespace) -> int:
    """Write the network's files into --out, each checked against PyTorch; one line per file."""
    preflight.use_threads(preflight.check_threads(args.threads))
    if args.tile is not None and (args.tile < 32 or args.tile % 32):
        raise InputError(f"--tile {args.tile}: exported networks take tiles whose side is a multiple of 32. Fix: pass e.g. --tile {max(32, args.tile // 32 * 32)}")
    preflight.prepare_output_dir(args.out)
    how = authors.released(args.authors, options=args.options) if args.authors else authors.local(args.checkpoint, options=args.options)
    formats = tuple(f for f in args.format if f != "bioimageio")
    record = export_restoration(how, args.out, formats=formats or ("torchscript", "onnx"), tile=args.tile, overlap=args.overlap, name=args.name)
    for fmt, file in record.files.items():
        print(f"{Path(args.out) / file}  ({fmt}, {record.tile}x{record.tile} tiles, max |difference| to PyTorch {max(record.parity[fmt].values()):.1e})")
    if "bioimageio" in args.format:
        print(write_package(record, args.out, model_file=how.model, note=lambda line: print(line, file=sys.stderr, flush=True)))
    return 0


def import_authors(args: argparse.Namespace) -> int:
    print(import_authors_checkpoint(args.checkpoint, args.options, args.out, weights=args.weights))
    return 0


def bench(args: argparse.Namespace) -> int:
    fn = bench_forward if args.kind == "forward" else bench_train
    rows = []
    for model in args.models:
        for size in args.sizes:
            r = fn(
                model,
                scale=args.scale,
                size=size,
                batch=args.batch,
                device=args.device,
                warmup=args.warmup,
                repeats=args.repeats,
                amp=args.bf16,
                scan_backend=args.scan_backend,
            )
            rows.append(r)
            rate = r.get("images_per_second") or r.get("iterations_per_second")
            mem = r["peak_memory_mb"]
            print(
                f"{args.kind:<8} {model:<12} {args.scale:<6} {size:>5}px batch {args.batch}: {rate:8.3f}/s  peak {mem if mem is None else round(mem)} MB  ({r['provenance']['device']})"
            )
    if args.out:
        write_results(rows, args.out)
        print(args.out)
    return 0
