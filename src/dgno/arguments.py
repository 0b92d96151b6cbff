"""Checks of a ``dgno`` command's arguments that need neither torch nor a model, made before torch loads.

Why: the commands that run networks import torch first, which takes seconds (13 to 60 s on a busy
cluster node); a typo in a number or a path must not wait for it. :func:`check` runs the checks of the
command being run (:data:`CHECKS`, one function per command, each an
:class:`~dgno.io.InputError` naming the option and its fix); ``dgno.commands`` later checks what needs
torch or the model (the device, the model file's content, the tile against the model's own overlap).
A command without an entry here is checked by its own code only.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from dgno import progress
from dgno.inference import preflight
from dgno.io import InputError, check_model_path
from dgno.slides.options import check_numbers


def check(args: argparse.Namespace) -> None:
    """Every check of ``args.command`` that needs no torch; also the progress interval of the environment."""
    progress.interval()  # a bad DGNO_PROGRESS_SECONDS fails now, not at the first progress line
    CHECKS.get(args.command, lambda args: None)(args)


def _overlap(args: argparse.Namespace) -> int | None:
    """The tile overlap that will apply, when known before the model is read: the option, else the
    authors' networks' own; None for a ``--checkpoint``, whose kind (project or authors') is in the file."""
    if args.overlap is not None:
        return args.overlap
    return preflight.AUTHORS_TILES["overlap"] if getattr(args, "authors", None) else None


def _model_file(args: argparse.Namespace) -> None:
    if args.checkpoint is not None:
        check_model_path(Path(args.checkpoint), missing_fix="check the path, or use --authors NAME to download a released one")


def _folder(option: str, path: str) -> None:
    if not Path(path).is_dir():
        raise InputError(f"{option} {path}: {'not a folder' if Path(path).exists() else 'folder does not exist'}. Fix: check the path")


def _deblur(args: argparse.Namespace) -> None:
    preflight.check_image_options(tile=args.tile, overlap=_overlap(args), tile_batch=args.tile_batch, threads=args.threads,
                                  max_memory_gb=args.max_memory, channel=args.channel, axes=args.axes)  # fmt: skip
    preflight.check_output_dir(args.output)
    _model_file(args)


def _deblur_slide(args: argparse.Namespace) -> None:
    preflight.check_tiling(tile=args.tile, overlap=_overlap(args), tile_batch=args.tile_batch)
    preflight.check_threads(args.threads)
    if args.level is not None and args.level < 0:
        raise InputError(f"--level {args.level}: levels are numbered from 0 (full resolution). Fix: --level 0, or leave it out")
    check_numbers(margin=args.focus_margin, min_tissue=args.min_tissue, focus_downsample=args.focus_downsample, threshold=args.threshold, mpp=args.mpp)
    preflight.check_output_dir(args.output)
    _model_file(args)


def _evaluate(args: argparse.Namespace) -> None:
    preflight.check_tiling(tile=args.tile, overlap=args.overlap, tile_batch=args.tile_batch)
    check_model_path(Path(args.checkpoint), missing_fix="check the path; a training writes results/train/<dataset>/<method>/model.pt (and checkpoint.pt while it runs)")
    _folder("--data", args.data)


def _train(args: argparse.Namespace) -> None:
    _folder("--data", args.data)
    if args.iterations is not None and args.iterations < 1:
        raise InputError(f"--iterations {args.iterations}: at least one. Fix: leave it out for the config's train.iterations, or give a positive number")


def _exists(option: str, path: str) -> None:
    if not Path(path).exists():
        raise InputError(f"{option} {path}: does not exist. Fix: check the path")


def _finetune(args: argparse.Namespace) -> None:
    for path in args.stacks or args.slides or ():
        _exists("--stacks" if args.stacks else "--slides", path)
    for path in args.pairs or ():
        _folder("--pairs", path)
    for option in ("iterations", "patch", "batch", "lr", "max_shift", "field_size", "max_fields"):
        value = getattr(args, option)
        if value is not None and value <= 0:
            raise InputError(f"--{option.replace('_', '-')} {value}: must be positive. Fix: give a positive number, or leave it out for the default")
    for option in ("val_fraction", "test_fraction"):
        if not 0 < getattr(args, option) < 1:
            raise InputError(f"--{option.replace('_', '-')} {getattr(args, option)}: a share between 0 and 1. Fix: for example 0.2")
    if args.checkpoint is not None:
        check_model_path(Path(args.checkpoint), missing_fix="check the path, or use --authors NAME to start from a released network")
    preflight.check_output_dir(args.output)


def _export(args: argparse.Namespace) -> None:
    if args.tile is not None and (args.tile < 32 or args.tile % 32):
        raise InputError(f"--tile {args.tile}: exported networks take tiles whose side is a multiple of 32. Fix: pass e.g. --tile {max(32, args.tile // 32 * 32)}")
    if args.overlap is not None and args.overlap < 0:
        raise InputError(f"--overlap {args.overlap}: must be 0 or more. Fix: leave it out for the network's own")
    preflight.check_threads(args.threads)
    _model_file(args)
    preflight.check_output_dir(args.out)


CHECKS: dict[str, Callable[[argparse.Namespace], None]] = {
    "deblur": _deblur,
    "deblur-slide": _deblur_slide,
    "evaluate": _evaluate,
    "train": _train,
    "finetune": _finetune,
    "export": _export,
}
