"""The ``dgno`` command: train, evaluate, summarise and apply models outside Snakemake.

Every sub-command is a thin shell around a package function; errors about user input are
printed as one line (file, problem, fix) with exit status 2, not as a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from dgno.io import InputError

# Exit status of a training stopped by SIGTERM after writing its checkpoint: 128 + SIGTERM, what a
# shell reports for a process the signal ended, so SLURM and Snakemake see a failed job and retry.
INTERRUPTED_EXIT = 143


def _cmd_train(args: argparse.Namespace) -> int:
    from dgno.config import load_config
    from dgno.train import Interrupted, ModelChoice, TrainConfig, train

    cfg = load_config(args.config)
    settings = TrainConfig.from_dict({**cfg["train"], "seed": cfg["seed"], "device": cfg["device"]})
    if args.iterations:
        settings.iterations = args.iterations
    method = cfg["methods"].get(args.method, {"model": args.method})
    levels = args.levels or cfg["datasets"].get(Path(args.data).name, {}).get("train_levels")
    if not levels:
        raise InputError(f"{args.data}: no --levels given and the config has no dataset of that name. Fix: pass --levels z02 z06")
    try:
        path = train(
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


def _cmd_evaluate(args: argparse.Namespace) -> int:
    from dgno.inference.evaluate import evaluate_checkpoint

    summary = evaluate_checkpoint(
        args.checkpoint, args.data, args.level, args.out, tile=args.tile, overlap=args.overlap, with_lpips=not args.no_lpips
    )
    print(json.dumps({k: summary[k] for k in ("method", "level", "n_images", "psnr", "ssim", "lpips", "lpips_source")}, indent=2))
    return 0


def _cmd_summary(args: argparse.Namespace) -> int:
    from dgno.models.registry import list_models
    from dgno.summary import summarize

    names = list_models() if args.model == "all" else [args.model]
    rows = [{"model": n, "scale": args.scale, **summarize(n, scale=args.scale, size=args.size, in_channels=args.channels)} for n in names]
    if args.json:
        print(json.dumps(rows if len(rows) > 1 else rows[0], indent=2))
    else:
        print(f"{'model':<12} {'scale':<6} {'params (M)':>11} {'GFLOPs @' + str(args.size):>14}")
        for r in rows:
            print(f"{r['model']:<12} {r['scale']:<6} {r['params_m']:>11.3f} {r['gflops']:>14.2f}")
    return 0


def _cmd_deblur(args: argparse.Namespace) -> int:
    from dgno.inference.deblur import deblur_files

    failures = deblur_files(
        args.inputs,
        args.output,
        checkpoint=args.checkpoint,
        tile=args.tile,
        overlap=args.overlap,
        device=args.device,
        tile_batch=args.tile_batch,
        cuda_graphs=args.cuda_graphs,
        bf16=args.bf16,
    )
    for _path, message in failures:
        print(f"error: {message}", file=sys.stderr)
    if failures:
        print(f"{len(failures)} of {len(args.inputs)} file(s) failed", file=sys.stderr)
    return 1 if failures else 0


def _cmd_lam(args: argparse.Namespace) -> int:
    from dgno.analysis.lam import image_lam
    from dgno.io import write_csv
    from dgno.report.figures import lam_maps
    from dgno.train import pick_device

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
        device=str(pick_device(args.device)),
    )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_csv(out.with_suffix(".csv"), frame)
    row = frame.iloc[0]
    lam_maps(views, out, title=f"{Path(args.image).name}: LAM of the {row['window_size']}-px window at ({row['window_y0']}, {row['window_x0']})")
    print(frame[["label", "di", "r50_px"]].to_string(index=False))
    print(f"wrote {out}, {out.with_suffix('.svg')} and {out.with_suffix('.csv')}")
    return 0


def _cmd_import_official(args: argparse.Namespace) -> int:
    from dgno.models.official import import_official

    print(import_official(args.checkpoint, args.options, args.out, weights=args.weights))
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from dgno.config import load_config
    from dgno.report.build import build_report

    build_report(load_config(args.config), args.results, args.out)
    print(args.out)
    return 0


def _cmd_data_check(args: argparse.Namespace) -> int:
    from dgno.data.check import data_check

    ok, text = data_check(args.name, args.root)
    print(text)
    return 0 if ok else 1


def _cmd_bench(args: argparse.Namespace) -> int:
    from dgno.analysis.bench import bench_forward, bench_train, write_results

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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dgno", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("train", help="train one method on a dataset directory")
    p.add_argument("--data", required=True, help="dataset directory (split.csv, gt/, blur/<level>/)")
    p.add_argument("--out", required=True, help="output directory (model.pt, checkpoint.pt, train_metrics.csv)")
    p.add_argument("--method", required=True, help="method name from the config, or a registry model name")
    p.add_argument("--config", default="config.yaml")
    p.add_argument("--scale", choices=["smoke", "demo", "paper"])
    p.add_argument("--levels", nargs="+", help="blur levels to train on (default: the config's train_levels)")
    p.add_argument("--iterations", type=int)
    p.set_defaults(func=_cmd_train)

    p = sub.add_parser("evaluate", help="score a trained model on one blur level of a dataset's test split")
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--level", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--tile", type=int)
    p.add_argument("--overlap", type=int, default=32)
    p.add_argument("--no-lpips", action="store_true")
    p.set_defaults(func=_cmd_evaluate)

    p = sub.add_parser("summary", help="parameters and FLOPs of a registry model ('all' for every model)")
    p.add_argument("model")
    p.add_argument("--scale", choices=["smoke", "demo", "paper"], default="paper")
    p.add_argument("--size", type=int, default=256)
    p.add_argument("--channels", type=int, default=1)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_summary)

    p = sub.add_parser("deblur", help="restore your own TIFF/PNG images with a trained model.pt")
    p.add_argument("inputs", nargs="+", help="image files (8/16-bit grayscale or RGB TIFF/PNG)")
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--output", required=True, help="output directory (same file names, same dtype)")
    p.add_argument("--tile", type=int, default=512, help="tile size for large images (default 512)")
    p.add_argument("--overlap", type=int, default=64)
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--tile-batch", type=int, help="tiles per forward pass (default: 8 on a GPU, 1 on a CPU)")
    p.add_argument("--cuda-graphs", action="store_true", help="replay the forward pass from CUDA graphs (GPU; needs the triton or mamba_ssm scan)")
    p.add_argument("--bf16", action="store_true", help="bfloat16 autocast for the forward pass")
    p.set_defaults(func=_cmd_deblur)

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
    p.set_defaults(func=_cmd_lam)

    p = sub.add_parser("import-official", help="turn an authors' DGNO checkpoint (BasicSR .pth) into a dgno model.pt")
    p.add_argument("checkpoint", help="the authors' checkpoint, e.g. DGNO_BBBC006_w1_Face.pth ({'params': state_dict, ...})")
    p.add_argument("--options", required=True, help="the authors' option file for it (options/DGNO_*.yml), or a JSON with a network_g block")
    p.add_argument("--out", required=True, help="model.pt to write (loads in dgno deblur / evaluate / lam)")
    p.add_argument(
        "--weights",
        choices=["params", "params_ema"],
        default="params",
        help="which weights of the checkpoint (default params: the ones the authors' test scripts evaluate)",
    )
    p.set_defaults(func=_cmd_import_official)

    p = sub.add_parser("data", help="dataset utilities")
    data_sub = p.add_subparsers(dest="data_command", required=True)
    q = data_sub.add_parser("check", help="what is present, what is missing and how to get it")
    q.add_argument("name", choices=["bbbc006", "3dhistech", "dpdd", "realdof", "demo"])
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
    p.set_defaults(func=_cmd_bench)

    p = sub.add_parser("report", help="render the HTML report from a results tree")
    p.add_argument("--config", default="config.yaml")
    p.add_argument("--results", default="results")
    p.add_argument("--out", default="report/index.html")
    p.set_defaults(func=_cmd_report)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
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
