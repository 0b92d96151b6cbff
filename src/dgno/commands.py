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
import shlex
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
from dgno.inference.evaluate import evaluate_checkpoint
from dgno.inference.export import export_restoration
from dgno.interrupts import exit_status, signal_name
from dgno.io import InputError, write_csv
from dgno.report.figures import lam_maps
from dgno.report.finetune import write_report as write_finetune_report
from dgno.slides.inputs import unique_names
from dgno.slides.network import load_network
from dgno.slides.restore import output_files, restore_slide
from dgno.slides.run import SlideInterrupted
from dgno.slides.work import WorkFolder
from dgno.train import INTERRUPTED_EXIT, Interrupted, ModelChoice, TrainConfig
from dgno.train import train as train_model
from dgno.train.finetune import finetune as finetune_network
from dgno.train.finetune import start_from
from dgno.train.finetune_data import Inputs, Preparation, read_focus_planes
from dgno.workflow.config import load_config


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


def _deblur_options(args: argparse.Namespace, how: authors.Restoration) -> DeblurOptions:
    """The command line's options, with the model's own tiling and normalisation where none is given."""
    return DeblurOptions(
        tile=args.tile if args.tile is not None else how.tile,
        overlap=args.overlap if args.overlap is not None else how.overlap,
        blend=args.blend or how.blend,
        tile_batch=args.tile_batch,
        cuda_graphs=args.cuda_graphs,
        bf16=args.bf16,
        engine=args.engine,
        normalise=args.normalise or how.normalise,
        strict_channels=how.strict_channels,
        channel=args.channel,
        axes=args.axes,
        threads=args.threads,
        max_memory_gb=args.max_memory,
        skip_existing=args.skip_existing,
        model_name=how.name,
    )


def deblur(args: argparse.Namespace) -> int:
    # The options and the output folder were checked before torch loaded (dgno.arguments); the device next,
    # before any download. The output folder is created once the model has loaded (deblur_batch).
    preflight.check_device(args.device)
    how = authors.released(args.authors, options=args.options) if args.authors else authors.local(args.checkpoint, options=args.options)
    summary = deblur_batch(args.inputs, args.output, checkpoint=how.model, device=args.device, options=_deblur_options(args, how))
    print(summary.line())
    if summary.failed:
        print(f"{len(summary.failed)} of {summary.total} file(s) failed (errors above)", file=sys.stderr)
    if summary.interrupted:
        print(f"dgno deblur: {summary.resume_line(skip_existing=args.skip_existing)}", file=sys.stderr)
        return exit_status(summary.interrupted)
    return 1 if summary.failed else 0


def _slide_line(summary: dict) -> str:
    t = summary["tiles"]
    head = f"{summary['slide']}: {t['total']} tiles, {t['tissue']} tissue, {t['blurry']} blurry, {t['restored']} to restore"
    if summary["dry_run"]:
        return f"{head}; {summary['network']} on {summary['device']}: {summary['seconds_per_tile']:.3g} s per tile → about {summary['estimated_seconds'] / 60:.1f} min of network time"
    return f"{head}; restored in {summary['seconds']:.1f} s → {summary['files']['slide']}"


def _slide_stopped(path: str, reason: str, args: argparse.Namespace, done: list[str], left: list[str]) -> str:
    """What a stopped ``dgno deblur-slide`` leaves (the finished tiles, the slides complete) and the rerun that resumes it."""
    work = output_files(Path(path), Path(args.output)).work
    kept = f"its finished tiles are kept in {work}" if WorkFolder(work).holds_tiles() else "none of its tiles was restored yet"
    if not done:
        return f"dgno deblur-slide: {path}: {reason}; {kept}; run the same command again to resume"
    complete = ", ".join(str(output_files(Path(d), Path(args.output)).slide) for d in done)
    return (f"dgno deblur-slide: {path}: {reason}; {kept}; complete: {complete}. To resume, run the same command again "
            f"with only the slides not finished ({shlex.join(left)}) in place of the slide list")  # fmt: skip


def deblur_slide(args: argparse.Namespace) -> int:
    """Restore each slide; one line per slide; stopped by a signal, say what is done and exit 143 (130 for Ctrl-C)."""
    # The options and the output folder were checked before torch loaded (dgno.arguments). The network is
    # read before the output folder is created, so that a model that fails to load leaves nothing behind.
    threads = preflight.check_threads(args.threads)
    slides = list(unique_names(args.slides, fix="restore them into different --output folders").values())  # a slide named twice: once
    network = load_network(checkpoint=args.checkpoint, authors=args.authors, options=args.options, device=args.device, tile_batch=args.tile_batch,
                           cuda_graphs=args.cuda_graphs, bf16=args.bf16, threads=threads, normalise=args.normalise, tile=args.tile, overlap=args.overlap,
                           engine=args.engine)  # fmt: skip
    if network.engine_note:
        print(f"note: {network.engine_note}; using engine {network.engine}", file=sys.stderr)
    preflight.prepare_output_dir(args.output)
    options = dict(level=args.level, mpp=args.mpp, channel=args.channel, restore=args.restore, threshold=args.threshold, margin=args.focus_margin,
                   min_tissue=args.min_tissue, focus_downsample=args.focus_downsample, compression=args.compression, overwrite=args.overwrite,
                   dry_run=args.dry_run, focus_report=args.focus_report, workers=threads if args.threads else min(threads, 4))  # fmt: skip
    failures, done, stopped = [], [], None
    for i, path in enumerate(slides):
        try:
            print(_slide_line(restore_slide(path, args.output, network=network, **options)))
            done.append(path)
        except SlideInterrupted as exc:  # a signal while its tiles were restored or written
            stopped = (_slide_stopped(path, str(exc), args, done, slides[i:]), exc.status)
        except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM outside that: the focus analysis, the pictures
            stopped = (_slide_stopped(path, f"stopped by {signal_name(exc)}", args, done, slides[i:]), exit_status(exc))
        except InputError as exc:
            failures.append(str(exc) if str(path) in str(exc) else f"{path}: {exc}")
        if stopped:
            break
    for message in failures:
        print(f"error: {message}", file=sys.stderr)
    if failures:
        print(f"{len(failures)} of {len(args.slides)} slide(s) failed", file=sys.stderr)
    if stopped:
        print(stopped[0], file=sys.stderr)
        return stopped[1]
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
    # Tile, threads, model path and output folder were checked before torch loaded (dgno.arguments); the
    # folder is created only once the network is read (export_restoration), so a bad model leaves none behind.
    preflight.use_threads(preflight.check_threads(args.threads))
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


def _finetune_preparation(args: argparse.Namespace) -> dict:
    """Preparation settings from the command line, checked before any download or training."""
    preparation = dict(
        distances=tuple(args.distances) if args.distances else None, focus_plane=args.focus_plane,
        focus_planes=read_focus_planes(args.focus_planes) if args.focus_planes else {}, channel=args.channel, axes=args.axes,
        max_shift=args.max_shift, val_fraction=args.val_fraction, test_fraction=args.test_fraction, field_size=args.field_size, max_fields=args.max_fields,
    )  # fmt: skip
    Preparation(normalise="minmax", **preparation)  # raises an InputError for a bad value, before any download
    for option, value in (("--iterations", args.iterations), ("--patch", args.patch), ("--batch", args.batch), ("--lr", args.lr)):
        preflight.check_positive(option, value)
    if args.patience < 0:
        raise InputError(f"--patience {args.patience}: a number of validations, 0 or more. Fix: --patience 6, or 0 to never stop early")
    return preparation


def finetune(args: argparse.Namespace) -> int:
    """Fine-tune, then write the report; exit 143 when stopped by a signal (the same command resumes)."""
    inputs = Inputs(stacks=tuple(args.stacks or ()), pairs=tuple(args.pairs) if args.pairs else None, slides=tuple(args.slides or ()))
    preparation = _finetune_preparation(args)
    preflight.check_device(args.device)
    start = start_from(authors=args.authors, checkpoint=args.checkpoint, options=args.options, scratch=args.scratch, scale=args.scale, normalise=args.normalise)
    preflight.prepare_output_dir(args.output)  # after the start is read: a bad model file leaves no folder behind
    overrides = {"iterations": args.iterations, "patch_size": args.patch, "batch_size": args.batch, "lr": args.lr}
    try:
        finetune_network(inputs, args.output, start=start, preparation=preparation, overrides=overrides, patience=args.patience,
                         device=args.device, seed=args.seed, lpips=not args.no_lpips)  # fmt: skip
    except Interrupted as err:
        print(f"dgno finetune: {err}; run the same command again to resume", file=sys.stderr)
        return INTERRUPTED_EXIT
    report = write_finetune_report(args.output)
    print(report["verdict"])
    if report["warning"]:
        print(report["warning"], file=sys.stderr)
    print(f"model: {Path(args.output) / 'model.pt'}  report: {Path(args.output) / 'report.html'}")
    return 0
