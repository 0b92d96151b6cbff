"""Estimate the disk taken by restored test images in the paper run: every evaluation vs where read.

Usage: python -m benchmarks.estimates.disk_footprint [--ratio 0.81] [--out benchmarks/results/disk_footprint_paper.json]

The evaluations come from a dry run of the paper config (`snakemake -n --configfile config/paper.yaml`),
the ones whose restored images a later rule reads from the workflow's own `restored_readers()`
(workflow/rules/common.smk). Image counts and sizes of each dataset's test split are those the config
and data modules state (table below); RealDOF's size is not stated there and is taken as DPDD's.
`ratio` is the size of a losslessly compressed float32 restored TIFF relative to the raw one; 0.81 was
measured on the demo's restored nuclei images (`--measure DIR` measures it on a folder of restored
TIFFs instead). An estimate: nothing is run or written besides the JSON.
"""

from __future__ import annotations

import argparse
import io
import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# dataset -> (test images, height, width, channels), from config/paper.yaml and dgno.data.paired_sets / bbbc006.
TEST_SPLIT = {
    "3dhistech": (18909, 256, 256, 3),
    "dpdd": (76, 1120, 1680, 3),
    "realdof": (50, 1120, 1680, 3),  # assumption: DPDD's size
    "bbbc006_w1": (153, 520, 696, 1),
    "bbbc006_w2": (153, 520, 696, 1),
    "bbbc006_w1_sigma": (153, 520, 696, 1),
    "bbbc006_w1_seidel": (153, 520, 696, 1),
    "shapes_narrow": (50, 256, 256, 1),
    "shapes_wide": (50, 256, 256, 1),
}
PROBE = 'include: "Snakefile"\n\nprint("RESTORED_READERS=" + json.dumps(sorted(restored_readers())))\n'


def evaluations(configfile: str) -> tuple[list[tuple[str, str, str]], set[tuple[str, str, str]]]:
    """(every evaluation writing a restored folder, those a later rule reads) of the config's DAG."""
    probe = ROOT / ".disk_footprint_probe.smk"
    probe.write_text(PROBE)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "snakemake", "-s", str(probe), "-d", str(ROOT), "--configfile", configfile, "-n", "--forceall", "all"],
            capture_output=True, text=True, cwd=ROOT, check=False,
        )  # fmt: skip
    finally:
        probe.unlink()
    out = proc.stdout + proc.stderr
    if proc.returncode != 0:
        raise SystemExit(out[-3000:])
    readers = {tuple(x) for x in json.loads(re.search(r"RESTORED_READERS=(.*)", out).group(1))}
    jobs = []
    for rule, wc in re.findall(r"rule (evaluate|evaluate_input|deconvolve|deconvolve_ring):\n(?:.*\n)*?\s+wildcards: (.*)", out):
        w = dict(kv.split("=", 1) for kv in wc.split(", "))
        jobs.append((w["dataset"], w.get("method") or w.get("deconv") or "input", w["level"], rule))
    readers |= {(d, m, lvl) for d, m, lvl, rule in jobs if rule.startswith("deconvolve")}  # scored from their folder
    return [(d, m, lvl) for d, m, lvl, _ in jobs], readers


def measure_ratio(folder: Path) -> float:
    import tifffile

    raw = packed = 0
    for path in sorted(folder.rglob("*.tif"))[:200]:
        arr = tifffile.imread(path).astype("float32")
        buf = io.BytesIO()
        tifffile.imwrite(buf, arr, compression="zlib", predictor=True)
        raw, packed = raw + arr.nbytes, packed + len(buf.getvalue())
    return packed / raw


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configfile", default="config/paper.yaml")
    ap.add_argument("--ratio", type=float, default=0.81)
    ap.add_argument("--measure", help="folder of restored TIFFs to measure the compression ratio on")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "disk_footprint_paper.json"))
    args = ap.parse_args()
    ratio = measure_ratio(Path(args.measure)) if args.measure else args.ratio
    jobs, readers = evaluations(args.configfile)
    unknown = sorted({d for d, _, _ in jobs} - set(TEST_SPLIT))
    if unknown:
        raise SystemExit(f"no test-split size for {unknown}: add them to TEST_SPLIT")

    def gb(d: str) -> float:
        n, h, w, c = TEST_SPLIT[d]
        return n * h * w * c * 4 / 1e9

    all_raw = Counter(dict.fromkeys(TEST_SPLIT, 0.0))  # every evaluation writes its restored images, uncompressed
    read_compressed = Counter(dict.fromkeys(TEST_SPLIT, 0.0))  # only those a later rule reads, compressed
    for d, m, lvl in jobs:
        all_raw[d] += gb(d)
        if (d, m, lvl) in readers:
            read_compressed[d] += gb(d) * ratio
    result = {
        "estimate": "restored test images of the paper run (float32), every evaluation raw vs only those read, compressed",
        "command": "python -m benchmarks.estimates.disk_footprint " + " ".join(sys.argv[1:]),
        "evaluations": len(jobs),
        "evaluations_with_restored_images": sum((d, m, lvl) in readers for d, m, lvl in jobs),
        "compression_ratio": round(ratio, 3),
        "all_raw_gb": round(sum(all_raw.values()), 1),
        "read_compressed_gb": round(sum(read_compressed.values()), 1),
        "per_dataset_gb": {d: {"all_raw": round(all_raw[d], 2), "read_compressed": round(read_compressed[d], 2)} for d in TEST_SPLIT},
        "test_split_sizes": {d: dict(zip(("images", "height", "width", "channels"), v, strict=True)) for d, v in TEST_SPLIT.items()},
    }
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("evaluations", "evaluations_with_restored_images", "all_raw_gb", "read_compressed_gb")}))


if __name__ == "__main__":
    main()
