"""The ``dgno`` command: train, evaluate, summarise and apply models outside Snakemake.

Every sub-command is a thin shell around a package function; errors about user input are
printed as one line (file, problem, fix) with exit status 2, not as a traceback. The commands that
run networks are in :mod:`dgno.commands`, imported only when one of them runs and after its arguments
passed the checks that need no torch (:mod:`dgno.arguments`), so that ``dgno --help``, a typo, ``dgno
report`` and ``dgno data check`` never wait for torch. Ctrl-C and SIGTERM stop a command with a line
that says what is done (:mod:`dgno.interrupts`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from dgno import arguments, interrupts
from dgno.data.check import NAMES as DATA_NAMES
from dgno.data.check import data_check
from dgno.inference.engine_names import ENGINES, EXPORT_FORMATS
from dgno.interrupts import quiet_start
from dgno.io import InputError
from dgno.workflow import jobenv

# Commands that restore users' images on machines shared with other work: their OpenMP threads sleep
# when idle instead of spinning (OMP_WAIT_POLICY is read once, when torch loads its OpenMP runtime).
# Spinning threads take the cores other processes need: two concurrent 2-thread runs on 2 shared cores
# took 118 s each with spinning threads and 60 s with sleeping ones, the two one after the other 62 s
# (benchmarks/cpu/deblur_concurrency.py, benchmarks/results/deblur_concurrency.json).
PASSIVE_THREAD_COMMANDS = frozenset({"deblur", "deblur-slide"})
# Command-line words under a deprecated name, still read as their replacement with a one-line notice.
RENAMED_COMMANDS = {"import-official": "import-authors"}
RENAMED_OPTIONS = {"--official": "--authors"}  # of deblur and deblur-slide


class _RenamedOption(argparse.Action):
    """An option under its deprecated name: stored as its replacement, with a one-line notice on stderr."""

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"dgno: {option_string} is deprecated, read as {RENAMED_OPTIONS[option_string]}. Fix: write {RENAMED_OPTIONS[option_string]}", file=sys.stderr)
        setattr(namespace, self.dest, values)


def _released_network_options(which, help_text: str) -> None:
    """--authors NAME in a (checkpoint | released network) group, and its deprecated spelling, hidden from --help."""
    which.add_argument("--authors", metavar="NAME", help=help_text)
    for old, new in RENAMED_OPTIONS.items():
        which.add_argument(old, metavar="NAME", dest=new.removeprefix("--"), action=_RenamedOption, help=argparse.SUPPRESS)


def _run_command(args: argparse.Namespace) -> int:
    """Run a sub-command of :mod:`dgno.commands` (the function named like the command), its arguments checked first."""
    arguments.check(args)  # before torch loads: a typo is said at once
    if args.command in PASSIVE_THREAD_COMMANDS:
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    os.environ.setdefault(*jobenv.HUGE_PAGES)  # read once, at torch's first allocation
    jobenv.keep_freed_memory()  # large tensors reuse freed heap instead of being faulted in anew
    with quiet_start():  # Ctrl-C while torch loads: exit at once (dgno.interrupts)
        from dgno import commands  # torch and matplotlib take seconds to import: only when a command needs them

    return getattr(commands, args.command.replace("-", "_"))(args)


def _cmd_report(args: argparse.Namespace) -> int:
    from dgno.report.build import build_report  # pandas and the report's modules: only for this command
    from dgno.workflow.config import load_config  # jsonschema: only for the commands that read a config

    build_report(load_config(args.config), args.results, args.out)
    print(args.out)
    return 0


def _cmd_estimate(args: argparse.Namespace) -> int:
    from dgno.workflow import estimate  # runs a Snakemake dry run: only for this command

    est = estimate.estimate(args.configfile, args.targets)
    print(json.dumps(estimate.as_json(est), indent=2) if args.json else estimate.render(est))
    return 0


def _cmd_data_check(args: argparse.Namespace) -> int:
    ok, text = data_check(args.name, args.root)
    print(text)
    return 0 if ok else 1


def _add_model_commands(sub) -> None:
    """train, evaluate, summary."""
    p = sub.add_parser("train", help="train one method on a dataset directory")
    p.add_argument("--data", required=True, help="dataset directory (split.csv, gt/, blur/<level>/)")
    p.add_argument("--out", required=True, help="output directory (model.pt, checkpoint.pt, train_metrics.csv)")
    p.add_argument("--method", required=True, help="method name from the config, or a registry model name")
    p.add_argument("--config", default="config.yaml")
    p.add_argument("--scale", choices=["smoke", "demo", "paper"])
    p.add_argument("--levels", nargs="+", help="blur levels to train on (default: the config's train_levels)")
    p.add_argument("--iterations", type=int)
    p.set_defaults(func=_run_command)

    p = sub.add_parser("evaluate", help="score a trained model on one blur level of a dataset's test split")
    p.add_argument(
        "--checkpoint",
        required=True,
        help="model.pt, or a training's checkpoint.pt (a run in progress or interrupted: scored at its iteration, recorded in summary.json and progress.csv)",
    )
    p.add_argument("--data", required=True)
    p.add_argument("--level", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--tile", type=int)
    p.add_argument("--overlap", type=int, default=32)
    p.add_argument("--no-lpips", action="store_true")
    p.add_argument("--tile-batch", type=int, help="tiles per forward pass (default 8 on a GPU, 1 on a CPU)")
    p.add_argument("--cuda-graphs", action="store_true", help="replay the forward pass from CUDA graphs (GPU)")
    p.add_argument("--engine", choices=ENGINES, default="auto", help="how the network runs: eager (PyTorch), native (compiled CPU kernels), onnxruntime; auto: the fastest that runs on the device (docs/export.md)")
    p.add_argument("--overlap-io", action="store_true", help="decode and score/write in background threads while the network runs")
    p.set_defaults(func=_run_command)

    p = sub.add_parser("summary", help="parameters and FLOPs of a registry model ('all' for every model)")
    p.add_argument("model")
    p.add_argument("--scale", choices=["smoke", "demo", "paper"], default="paper")
    p.add_argument("--size", type=int, default=256)
    p.add_argument("--channels", type=int, default=1)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_run_command)


def _add_deblur(sub) -> None:
    p = sub.add_parser(
        "deblur",
        help="restore your own images (TIFF incl. ImageJ/OME, PNG, JPEG; z-stacks, time series, channels) with a trained model.pt or the authors' released weights",
        description="Restore images with a trained network. Each output keeps its input's file name, container, pixel type and "
        "value range: a TIFF stays a TIFF with its ImageJ or OME metadata, pixel size and resolution; a PNG stays a PNG (8/16-bit); "
        "a JPEG stays a JPEG (encoded again at quality 95); a pixel type the container cannot hold (a 12-bit JPEG) is written "
        "as a TIFF named <name>.tif after the whole input name (x.jpg -> x.jpg.tif). Palette and CMYK images are refused. Stacks and channels are restored plane by plane into the same shape. Options, device and output folder "
        "are checked before the first image; one file's failure never stops the batch. Details: docs/own_images.md",
    )
    p.add_argument("inputs", nargs="+", help="image files or folders of them (hidden files such as ._name.tif are skipped)")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--checkpoint", help="a model.pt (dgno train / import-authors) or an authors' checkpoint .pth (detected from the file)")
    _released_network_options(
        which,
        "a released checkpoint of the authors (e.g. DGNO_BBBC006_w1_Cell), downloaded once into $DGNO_CACHE/authors "
        "(default ~/.cache/dgno/authors) and restored with their tile protocol",
    )
    p.add_argument("--options", help="the authors' option file (options/DGNO_*.yml) of an authors' checkpoint whose name is not a released one")
    p.add_argument("--output", required=True, help="output folder, created if needed: the same file names, containers, dtypes and metadata as the inputs")
    p.add_argument("--skip-existing", action="store_true", help="leave inputs whose output is already in --output (to resume a stopped batch); by default outputs are replaced")
    p.add_argument("--tile", type=int, help="tile side in px (default 512); lowered when a pass would not fit the memory budget")
    p.add_argument("--overlap", type=int, help="tile overlap in pixels (default 64; the authors' weights: 32)")
    p.add_argument("--blend", choices=["ramp", "crossfade"], help="tile blending (default ramp; the authors' weights: crossfade, as their test network)")
    p.add_argument("--max-memory", type=float, metavar="GIB", help="memory one pass may use, in GiB (default: half the memory available at the start; on a GPU 80%% of its free memory)")
    p.add_argument("--threads", type=int, help="CPU threads (default: $OMP_NUM_THREADS, else the CPUs this process may use)")
    p.add_argument("--normalise", choices=["minmax", "dtype"], help="intensity scaling into the network (default: the one the model was trained with, recorded in its file)")
    p.add_argument("--channel", type=int, metavar="N", help="restore only channel N (from 0) of multi-channel images; the output holds that channel")
    p.add_argument("--axes", help="the images' axes in tifffile letters when the file's own are missing or wrong, e.g. ZYX (z-stack), SYX (channel-first RGB), ZCYX")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--tile-batch", type=int, help="tiles per forward pass (default: 8 on a GPU, 1 on a CPU)")
    p.add_argument("--cuda-graphs", action="store_true", help="replay the forward pass from CUDA graphs (GPU; needs the triton or mamba_ssm scan)")
    p.add_argument("--engine", choices=ENGINES, default="auto", help="how the network runs: eager (PyTorch), native (compiled CPU kernels), onnxruntime; auto: the fastest that runs on the device (docs/export.md)")
    p.add_argument("--bf16", action="store_true", help="bfloat16 autocast for the forward pass")
    p.set_defaults(func=_run_command)


def _add_image_commands(sub) -> None:
    """deblur, lam, import-authors."""
    _add_deblur(sub)

    p = sub.add_parser("lam", help="local attribution maps: which input pixels trained models use for one output window of your image")
    p.add_argument("image", help="blurred image (8/16-bit grayscale or RGB TIFF/PNG)")
    p.add_argument("--checkpoint", action="append", required=True, help="model.pt; repeat to compare models")
    p.add_argument("--label", action="append", help="name per --checkpoint, in order (default: each checkpoint's folder name)")
    p.add_argument("--out", required=True, help="figure .png (an .svg and a .csv with DI and r50 are written beside it)")
    p.add_argument("--window", type=int, nargs=3, metavar=("Y", "X", "SIZE"), help="output window (default: the one with most edges in the image)")
    p.add_argument("--window-size", type=int, default=16, help="side of the automatic window (default 16)")
    p.add_argument("--crop", type=int, default=256, help="analyse a square of this side about the window (default 256)")
    p.add_argument("--steps", type=int, default=32, help="path-integral steps (default 32)")
    p.add_argument("--sigma-max", type=float, default=8.0, help="blur (px) of the path's start (default 8)")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.set_defaults(func=_run_command)

    p = sub.add_parser("import-authors", help="turn an authors' DGNO checkpoint (BasicSR .pth) into a dgno model.pt")
    p.add_argument("checkpoint", help="the authors' checkpoint, e.g. DGNO_BBBC006_w1_Face.pth ({'params': state_dict, ...})")
    p.add_argument("--options", required=True, help="the authors' option file for it (options/DGNO_*.yml), or a JSON with a network_g block")
    p.add_argument("--out", required=True, help="model.pt to write (loads in dgno deblur / evaluate / lam)")
    p.add_argument(
        "--weights",
        choices=["params", "params_ema"],
        default="params",
        help="which weights of the checkpoint (default params: the ones the authors' test scripts evaluate)",
    )
    p.set_defaults(func=_run_command)


def _add_export_command(sub) -> None:
    """export: a network as TorchScript, ONNX and a bioimage.io model package (docs/export.md)."""
    p = sub.add_parser("export", help="write a network as TorchScript and ONNX (and a bioimage.io package) for QuPath, deepImageJ, napari and ONNX Runtime, each checked against PyTorch")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--checkpoint", help="a model.pt (dgno train / import-authors / finetune) or an authors' checkpoint .pth")
    _released_network_options(which, "a released checkpoint of the authors (e.g. DGNO_3DHistech_Cell), downloaded once into $DGNO_CACHE/authors")
    p.add_argument("--options", help="the authors' option file of a checkpoint whose name is not a released one")
    p.add_argument("--out", required=True, help="output folder: <name>.torchscript.pt, <name>.onnx, <name>.export.json (and <name>.bioimageio.zip)")
    p.add_argument("--format", nargs="+", choices=EXPORT_FORMATS, default=["torchscript", "onnx"], help="what to write (default: torchscript onnx)")
    p.add_argument("--tile", type=int, help="the tile side the files take, a multiple of 32 (default 256: at 512 a paper-scale network takes over 10 min and 12 GB to export and check)")
    p.add_argument("--overlap", type=int, help="overlap of neighbouring tiles in px, recorded for the tools that tile (default: the network's own)")
    p.add_argument("--name", help="file name stem (default: the network's name)")
    p.add_argument("--threads", type=int, help="CPU threads for tracing and the checks (default: $OMP_NUM_THREADS, else the CPUs this process may use)")
    p.set_defaults(func=_run_command)


def _add_slide_command(sub) -> None:
    """deblur-slide: a whole-slide image in, a restored pyramidal OME-TIFF out (docs/slides.md)."""
    p = sub.add_parser("deblur-slide", help="restore whole-slide images (SVS, MRXS, NDPI, SCN, tiled TIFF, OME-TIFF) where they are blurry, into pyramidal OME-TIFFs")
    p.add_argument("slides", nargs="+", help="slide files; RGB brightfield or fluorescence (8/16-bit, multi-channel OME-TIFF)")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--checkpoint", help="a model.pt, or an authors' checkpoint .pth")
    _released_network_options(which, "a released network: DGNO_3DHistech_Cell/_Face (brightfield RGB), DGNO_BBBC006_w1/w2_Cell/_Face (one fluorescence channel)")
    p.add_argument("--options", help="the authors' option file of a checkpoint whose name is not a released one")
    p.add_argument("--output", required=True, help="output folder: <name>.ome.tif, <name>.tiles.csv, <name>.focus.png, <name>.before_after.png, <name>.summary.json")
    level = p.add_mutually_exclusive_group()
    level.add_argument("--level", type=int, help="pyramid level to restore (default 0, full resolution)")
    level.add_argument("--mpp", type=float, help="restore the level nearest this resolution in µm per pixel")
    p.add_argument("--channel", help="fluorescence: the channel a one-channel network restores, by name or index (others are copied)")
    p.add_argument("--restore", choices=["blurry", "all"], default="blurry", help="blurry (default): tissue tiles the focus score finds out of focus; all: every tissue tile")
    p.add_argument("--focus-margin", type=float, default=0.3, help="one-channel (fluorescence) slides: a 16-px cell is blurred when it holds less than 1 − this of the fine detail of the slide's in-focus tissue, on a log scale (default 0.3); a tile is blurry when half its area is. Brightfield slides use the learned focus measure (docs/slides.md), which has no margin")
    p.add_argument("--threshold", type=float, help="an absolute cell focus score (0 sharp … 1 blurred; brightfield: the learned measure's probability of defocus) instead of the relative rule, for slides blurred nearly everywhere")
    p.add_argument("--focus-report", action="store_true", help="also write <name>.focus_report.png: every tissue tile's blurred share against the threshold, and the cell scores against the slide's reference")
    p.add_argument("--min-tissue", type=float, default=0.05, help="share of a tile's area that must be tissue for it to be considered (default 0.05)")
    p.add_argument("--focus-downsample", type=int, default=1, help="measure focus this many times coarser than the restored level (default 1: faster scans lose sensitivity)")
    p.add_argument("--compression", choices=["zlib", "lzw", "jpeg", "none"], default="zlib", help="output compression: zlib (lossless, default), lzw, none, jpeg (8-bit RGB only, lossy)")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--tile-batch", type=int, help="tiles per forward pass (default 8 on a GPU, 1 on a CPU)")
    p.add_argument("--cuda-graphs", action="store_true", help="replay the forward pass from CUDA graphs (GPU; needs the triton or mamba_ssm scan)")
    p.add_argument("--engine", choices=ENGINES, default="auto", help="how the network runs: eager (PyTorch), native (compiled CPU kernels), onnxruntime; auto: the fastest that runs on the device (docs/export.md)")
    p.add_argument("--bf16", action="store_true", help="bfloat16 autocast for the forward pass")
    p.add_argument("--threads", type=int, help="CPU threads for the network, the focus scan and the writer (default: $OMP_NUM_THREADS, else the CPUs this process may use, at most 4 for the scan and writer); a resumed run should use the same")
    p.add_argument("--normalise", choices=["minmax", "dtype"], help="intensity scaling into the network (default: the one the model was trained with, recorded in its file)")
    p.add_argument("--tile", type=int, help="network tile side in px (default: the network's own, 512)")
    p.add_argument("--overlap", type=int, help="overlap of the network's tiles in px (default: the network's own; the authors' networks: 32)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing output slide")
    p.add_argument("--dry-run", action="store_true", help="measure and decide only: tile counts, focus map, tiles.csv and a time estimate from this machine's speed")
    p.set_defaults(func=_run_command)


def _add_finetune_command(sub) -> None:
    """finetune: a released or trained network tuned on a lab's own z-stacks, pairs or multi-plane slides (docs/finetune.md)."""
    p = sub.add_parser("finetune", help="fine-tune a network on your own z-stacks, (blurred, sharp) pairs or multi-plane slides; writes a model file and a report")
    data = p.add_mutually_exclusive_group(required=True)
    data.add_argument("--stacks", nargs="+", metavar="PATH", help="z-stack files (ImageJ/OME TIFF with a Z axis) or folders of them, or folders holding one image per plane")
    data.add_argument("--pairs", nargs=2, metavar=("BLURRED", "SHARP"), help="two folders of images matched by file name")
    data.add_argument("--slides", nargs="+", metavar="FILE", help="whole slides with focal planes (OME-TIFF with a Z axis)")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--authors", metavar="NAME", help="start from a released network of the authors, e.g. DGNO_BBBC006_w1_Cell")
    which.add_argument("--checkpoint", metavar="FILE", help="start from a model.pt, or an authors' .pth (with --options when its name is not a released one)")
    which.add_argument("--scratch", metavar="MODEL", help="train a registry network from scratch, e.g. dgno-cell (--scale sets its size)")
    p.add_argument("--options", help="the authors' option file of a .pth whose name is not a released one")
    p.add_argument("--output", required=True, help="output folder: model.pt, report.html, report.md, finetune.json, data/, eval/")
    p.add_argument("--distances", type=int, nargs="+", metavar="N", help="input planes at these distances (in planes) above and below the in-focus plane (default: every plane)")
    focus = p.add_mutually_exclusive_group()
    focus.add_argument("--focus-plane", type=int, metavar="N", help="the in-focus plane of every stack (from 0), instead of measuring it")
    focus.add_argument("--focus-planes", metavar="CSV", help="a CSV with columns field,plane: the in-focus plane of the fields it names (field = file or folder name)")
    p.add_argument("--channel", type=int, metavar="N", help="the channel a one-channel network is tuned on, for stacks or slides of several channels")
    p.add_argument("--axes", help="the stacks' axes in tifffile letters when the files' own are wrong, e.g. ZYX")
    p.add_argument("--max-shift", type=float, default=5.0, metavar="PX", help="largest shift between planes that is corrected; more is refused (default 5)")
    p.add_argument("--val-fraction", type=float, default=0.2, help="share of fields for validation (early stopping; default 0.2)")
    p.add_argument("--test-fraction", type=float, default=0.2, help="share of fields held out for the report (default 0.2)")
    p.add_argument("--field-size", type=int, default=512, metavar="PX", help="slides: side of the fields cut on tissue (default 512)")
    p.add_argument("--max-fields", type=int, default=64, help="slides: fields per slide at most (default 64)")
    p.add_argument("--iterations", type=int, help="training iterations at most (default 400 on a CPU, 4000 on a GPU; early stopping may end sooner)")
    p.add_argument("--patch", type=int, help="training patch side in px (default 96 on a CPU, 256 on a GPU; at most the smallest field)")
    p.add_argument("--batch", type=int, help="patches per step (default 4 on a CPU, 8 on a GPU)")
    p.add_argument("--lr", type=float, help="learning rate (default 1e-4 from trained weights, 3e-4 from scratch)")
    p.add_argument("--patience", type=int, default=6, help="validations without improvement before stopping (default 6; 0 never stops early)")
    p.add_argument("--scale", choices=["smoke", "demo", "paper"], default="demo", help="--scratch: the network's size (default demo)")
    p.add_argument("--normalise", choices=["minmax", "dtype"], help="intensity scaling (default: the starting network's own)")
    p.add_argument("--seed", type=int, default=0, help="seed of the split and the training (default 0)")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--no-lpips", action="store_true", help="leave LPIPS out of the report")
    p.set_defaults(func=_run_command)


def _add_utility_commands(sub) -> None:
    """data check, bench, report."""
    p = sub.add_parser("data", help="dataset utilities")
    data_sub = p.add_subparsers(dest="data_command", required=True)
    q = data_sub.add_parser("check", help="what is present, what is missing and how to get it")
    q.add_argument("name", choices=DATA_NAMES, help="bbbc006-authors: the DGNO authors' BBBC006.tar.gz (their split)")
    q.add_argument("--root", help="folder to check (default: the dataset's default location)")
    q.set_defaults(func=_cmd_data_check)

    p = sub.add_parser("bench", help="speed/memory of models: forward pass or training step, written to JSON")
    p.add_argument("kind", choices=["forward", "train"])
    p.add_argument("models", nargs="+")
    p.add_argument("--scale", choices=["smoke", "demo", "paper"], default="paper")
    p.add_argument("--sizes", type=int, nargs="+", default=[256])
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1, help="untimed passes first (CUDA kernels, allocator); 0 is fine on CPU for big models")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--bf16", action="store_true", help="bfloat16 autocast (CUDA)")
    p.add_argument(
        "--scan-backend",
        choices=["auto", "torch", "triton", "mamba_ssm", "reference"],
        help="selective-scan backend of the ASSMs (DGNO, GG, LG, MambaIRv2); default: the model's own (auto)",
    )
    p.add_argument("--out", help="JSON file for the results (e.g. results/bench/forward_cpu.json)")
    p.set_defaults(func=_run_command)

    p = sub.add_parser("estimate", help="GPU-hours of a configuration and target before anything runs, from the recorded GPU step times")
    p.add_argument("targets", nargs="*", help="Snakemake targets (rules or files; default: the report)")
    p.add_argument("--configfile", default="config.yaml", help="the configuration to price, e.g. config/claims.yaml or config/paper.yaml")
    p.add_argument("--json", action="store_true", help="every job with its GPU-hours and the rates' provenance, as JSON")
    p.set_defaults(func=_cmd_estimate)

    p = sub.add_parser("report", help="render the HTML report from a results tree")
    p.add_argument("--config", default="config.yaml")
    p.add_argument("--results", default="results")
    p.add_argument("--out", default="report/index.html")
    p.set_defaults(func=_cmd_report)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dgno", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    _add_model_commands(sub)
    _add_image_commands(sub)
    _add_slide_command(sub)
    _add_finetune_command(sub)
    _add_export_command(sub)
    _add_utility_commands(sub)
    return parser


def _renamed_command(argv: list[str]) -> list[str]:
    """``argv`` with a sub-command under its deprecated name (:data:`RENAMED_COMMANDS`) replaced, saying so once."""
    if argv and argv[0] in RENAMED_COMMANDS:
        print(f"dgno: {argv[0]} is deprecated, read as {RENAMED_COMMANDS[argv[0]]}. Fix: write dgno {RENAMED_COMMANDS[argv[0]]}", file=sys.stderr)
        return [RENAMED_COMMANDS[argv[0]], *argv[1:]]
    return argv


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(_renamed_command(list(sys.argv[1:] if argv is None else argv)))
    try:
        with interrupts.sigterm_stops():  # SIGTERM (a time limit, scancel, kill) stops the command as Ctrl-C does
            return args.func(args)
    except KeyboardInterrupt as exc:  # one that the command did not report itself
        stop = "interrupted" if interrupts.exit_status(exc) == interrupts.INTERRUPTED else "stopped by SIGTERM"
        print(f"dgno {args.command}: {stop} before it finished; run the same command again to go on", file=sys.stderr)
        return interrupts.exit_status(exc)  # 130 or 143, as a shell reports a command stopped by the signal
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:
        if type(exc).__name__ == "ConfigError":
            print(f"error: {exc}", file=sys.stderr)
            return 2
        raise


if __name__ == "__main__":
    sys.exit(main())
