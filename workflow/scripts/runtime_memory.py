"""Rule `runtime_memory`: throughput and peak memory vs image size from the benchmark JSON files."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _log  # noqa: E402

_log.redirect(snakemake.log[0])  # noqa: F821
sm = snakemake  # noqa: F821

from dgno.analysis.runtime import load_bench_results  # noqa: E402
from dgno.io import write_csv  # noqa: E402
from dgno.report.figures import runtime_memory  # noqa: E402

frame = load_bench_results(sm.input)
write_csv(sm.output.table, frame)
print(frame.to_string(), flush=True)
# one curve per model and file: batch-1 float32 passes of the older layouts, and of benchmarks/gpu/speed.py
# files the paper's protocol (autograd on), whose memory is comparable with the paper's
forward = frame[(frame["kind"] == "forward") & (frame["batch"] == 1) & ~frame["amp_bf16"].astype(bool) & (frame["mode"].isna() | (frame["mode"] == "autograd"))]
runtime_memory(forward, sm.output.figure, title="Recorded forward-pass benchmarks, batch 1: throughput and peak memory vs image size (files: " + ", ".join(sorted(set(forward["file"]))) + ")")
