"""``dgno bench``: rows carry what was measured and how, including the scan backend asked for."""

from __future__ import annotations

import json
import time

import pytest
from conftest import patient

from dgno.cli import main

REPEATS = 5  # timed runs per size: the fastest of them is what a busy machine leaves least changed


def _bench(tmp_path, *args: str) -> tuple[list[dict], float]:
    """Rows of one ``dgno bench`` call and the wall time the call took."""
    out = tmp_path / "bench.json"
    t0 = time.perf_counter()
    assert main(["bench", *args, "--scale", "smoke", "--device", "cpu", "--repeats", str(REPEATS), "--warmup", "1", "--out", str(out)]) == 0
    return json.loads(out.read_text())["results"], time.perf_counter() - t0


def _measured(rows: list[dict], wall: float, rate: str) -> None:
    """Each row's timed runs happened inside the call (`repeats` positive durations that fit in its wall
    time) and its rate is one of theirs (between the slowest and the fastest run's)."""
    for r in rows:
        assert len(r["times"]) == REPEATS and min(r["times"]) > 0, r
        per_run = r["batch"] if rate == "images_per_second" else 1
        assert per_run / max(r["times"]) <= r[rate] <= per_run / min(r["times"]), r
    assert sum(sum(r["times"]) for r in rows) < wall


def test_bench_forward_records_scan_backend_and_device(tmp_path, capsys):
    """A forward pass on 16× the pixels takes longer: the timings measure the model. Compared on each
    size's fastest run, which a busy machine only slows down (measured 12× slower, idle and busy)."""
    rows, wall = _bench(tmp_path, "forward", "mambairv2", "--sizes", "16", "64", "--scan-backend", "reference")
    small, large = rows
    assert [small["size"], large["size"]] == [16, 64] and {r["scan_backend"] for r in rows} == {"reference"}
    _measured(rows, wall, "images_per_second")
    assert min(large["times"]) > 3 * min(small["times"]), rows
    assert small["provenance"]["device"].startswith("cpu")
    assert "forward" in capsys.readouterr().out


@pytest.mark.slow
def test_bench_train_default_keeps_the_models_own_backend(tmp_path):
    """A training step on 256× the pixels takes longer (fastest runs; measured 5-30× slower on a busy
    machine: a step also has fixed costs, and the small one suffers most from a busy CPU)."""
    rows, wall = _bench(tmp_path, "train", "dgno-cell", "--sizes", "16", "256")
    small, large = rows
    assert small["scan_backend"] is None and large["scan_backend"] is None
    _measured(rows, wall, "iterations_per_second")
    assert min(large["times"]) > 2 * min(small["times"]), rows


def test_bench_scan_backend_on_a_model_without_a_scan_is_an_error():
    with pytest.raises(ValueError, match="no selective-scan"):
        main(
            [
                "bench",
                "forward",
                "nafnet",
                "--scale",
                "smoke",
                "--sizes",
                "16",
                "--device",
                "cpu",
                "--repeats",
                "1",
                "--scan-backend",
                "torch",
            ]
        )


@pytest.mark.slow
def test_ring_benchmark_interleaves_the_methods_and_records_every_round(tmp_path):
    """benchmarks/cpu/ring.py at toy size: one ratio per interleaved round, the headline is their median,
    and the ring result is close to brute force (the speed-up is measured on comparable outputs)."""
    import statistics
    import subprocess
    import sys
    from pathlib import Path

    out = tmp_path / "ring.json"
    root = Path(__file__).resolve().parents[1]
    args = ["--sizes", "32", "--speedup-sizes", "32", "--rounds", "3", "--ring-runs", "2", "--repeats", "1"]
    subprocess.run([sys.executable, "-m", "benchmarks.cpu.ring", str(out), *args], check=True, capture_output=True, timeout=patient(300), cwd=root)
    data = json.loads(out.read_text())
    assert [row["cache"] for row in data["forward"]] == [True, False]
    assert [row["coeffs"] for row in data["speedup_vs_brute_force"]] == ["reference", "reference_x2"]
    for row in data["speedup_vs_brute_force"]:
        for case in ("end_to_end", "end_to_end_cold", "apply"):
            rounds = row[case]["speedup_per_round"]
            assert len(rounds) == 3 and all(r > 0 for r in rounds)
            assert row[case]["speedup"] == pytest.approx(statistics.median(rounds))
            assert row[case]["ring_min_s"] <= row[case]["ring_s"]
        assert row["rel_l2_ring_vs_brute"] < 0.05


@pytest.mark.slow
def test_ring_stage_benchmark_times_every_stage(tmp_path):
    """benchmarks/cpu/ring_stages.py at toy size: every stage timed (min ≤ median) and the faults counted."""
    import subprocess
    import sys
    from pathlib import Path

    out = tmp_path / "stages.json"
    root = Path(__file__).resolve().parents[1]
    cmd = [sys.executable, "-m", "benchmarks.cpu.ring_stages", str(out), "--size", "32", "--runs", "2"]
    subprocess.run(cmd, check=True, capture_output=True, timeout=patient(300), cwd=root)
    data = json.loads(out.read_text())
    assert set(data["stages"]) == {"taps", "sampling_plan", "radial_psfs", "spectra", "apply", "end_to_end", "end_to_end_cold"}
    assert all(0 < s["min_ms"] <= s["median_ms"] for s in data["stages"].values())
    assert data["end_to_end_minor_page_faults"] >= 0 and data["size"] == 32
    assert 0 < data["psf_reads_per_build"] < data["psf_reads_in_block_windows"]  # the per-ring windows skip reads


def test_every_benchmark_module_imports_as_part_of_the_benchmarks_package():
    """`python -m benchmarks.<folder>.<script>` finds each script and everything it imports (a renamed helper
    or a script that still reaches for a file through sys.path fails here, not on a rented GPU)."""
    import importlib
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    names = sorted(".".join(p.relative_to(root).with_suffix("").parts).removesuffix(".__init__") for p in (root / "benchmarks").rglob("*.py"))
    sys.path.insert(0, str(root))  # what `python -m` from the repository root does
    try:
        modules = [importlib.import_module(name) for name in names]
    finally:
        sys.path.remove(str(root))
    scripts = [m for m in modules if hasattr(m, "main")]
    assert len(scripts) >= 15 and all(callable(m.main) for m in scripts), [m.__name__ for m in scripts]
