"""``dgno bench``: rows carry what was measured and how, including the scan backend asked for."""

from __future__ import annotations

import json

import pytest

from dgno.cli import main


def test_bench_forward_records_scan_backend_and_device(tmp_path, capsys):
    out = tmp_path / "fwd.json"
    args = ["bench", "forward", "mambairv2", "--scale", "smoke", "--sizes", "16", "--device", "cpu", "--repeats", "1", "--warmup", "0"]
    assert main([*args, "--scan-backend", "reference", "--out", str(out)]) == 0
    (row,) = json.loads(out.read_text())["results"]
    assert row["scan_backend"] == "reference" and row["size"] == 16 and row["images_per_second"] > 0
    assert row["provenance"]["device"].startswith("cpu")
    assert "forward" in capsys.readouterr().out


def test_bench_train_default_keeps_the_models_own_backend(tmp_path):
    out = tmp_path / "train.json"
    args = ["bench", "train", "dgno-cell", "--scale", "smoke", "--sizes", "16", "--device", "cpu", "--repeats", "1", "--warmup", "0"]
    assert main([*args, "--out", str(out)]) == 0
    (row,) = json.loads(out.read_text())["results"]
    assert row["scan_backend"] is None and row["iterations_per_second"] > 0


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
