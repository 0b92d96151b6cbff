"""The authors' released checkpoints in the workflow: download (loopback server) → import → evaluate.

A checkpoint regenerated from the reference fixture ``w1_cell`` (tests/fixtures/authors) (the authors' format, reduced size) is
served over HTTP on 127.0.0.1; the workflow downloads it, imports it and evaluates it as the method
``dgno-cell-authors``, exactly as the paper config does for the six released checkpoints.
"""

from __future__ import annotations

import functools
import http.server
import json
import subprocess
import threading
from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml
from conftest import ROOT, SNAKEMAKE, patient
from fixtures_authors import AUTHORS_FIXTURES

from dgno.checkpoint import load_trained, weights_digest
from dgno.data.paired import load_pairs
from dgno.inference.evaluate import model_restorer
from dgno.io import InputError
from dgno.metrics import psnr
from dgno.models.authors import fetch_authors_checkpoint, regenerate_state_dict

NAME = "DGNO_BBBC006_w1_Cell"


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - keep test output clean
        pass


@pytest.fixture
def served(tmp_path):
    """(base URL, folder): a loopback HTTP server over a folder holding the fixture checkpoint."""
    case = AUTHORS_FIXTURES / "w1_cell"
    folder = tmp_path / "served"
    folder.mkdir()
    state = regenerate_state_dict(json.loads((case / "weights.json").read_text()))
    torch.save({"params": state, "params_ema": state}, folder / f"{NAME}.pth")
    (folder / "not_a_checkpoint.pth").write_text("<html>404 page of a proxy</html>")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(folder)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/", folder
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.e2e
def test_workflow_downloads_imports_and_evaluates_the_authors_weights(served, tmp_path):
    base_url, folder = served
    options = tmp_path / "options"
    options.mkdir()
    network_g = json.loads((AUTHORS_FIXTURES / "w1_cell" / "options.json").read_text())["network_g"]
    (options / f"{NAME}.yml").write_text(yaml.safe_dump({"name": NAME, "network_g": network_g}))
    cfg = yaml.safe_load((ROOT / "tests" / "smoke.yaml").read_text())
    cfg["datasets"] = {"nuclei": cfg["datasets"]["nuclei"]}
    cfg["methods"] = {"dgno-cell-authors": {"model": "dgno-cell", "label": "DGNO-Cell (authors' weights)", "authors_checkpoints": {"nuclei": NAME}}}
    cfg["experiments"] = {"main": {"datasets": ["nuclei"], "methods": ["dgno-cell-authors"]}}
    cfg.pop("ablations", None)
    cfg.pop("slides", None)  # its network is a method this config no longer has
    cfg["evaluate"] = {**cfg.get("evaluate", {}), "lpips": False}
    cfg["downloads"] = {"authors_checkpoints_url": base_url, "authors_options": str(options), "raw_dir": str(tmp_path / "resources"), "retries": 0}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    target = "results/eval/nuclei/dgno-cell-authors/z02/summary.json"
    cmd = [SNAKEMAKE, "--snakefile", str(ROOT / "Snakefile"), "--directory", str(tmp_path), "--configfile", str(tmp_path / "config.yaml"), "--cores", "2", target]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=patient(600))
    assert proc.returncode == 0, proc.stderr[-6000:]
    assert "rule train" not in proc.stderr  # nothing was trained: the weights are the authors'

    downloaded = tmp_path / "resources" / "authors" / f"{NAME}.pth"
    assert downloaded.read_bytes() == (folder / f"{NAME}.pth").read_bytes()
    model, blob = load_trained(tmp_path / "results" / "authors" / "nuclei" / "dgno-cell-authors" / "model.pt")
    assert blob["authors"]["weights"] == "params" and blob["authors"]["network_g"]["flux_mode"] == "jump"
    direct = tmp_path / "direct.pt"
    subprocess.run([str(Path(SNAKEMAKE).with_name("dgno")), "import-authors", str(downloaded), "--options", str(options / f"{NAME}.yml"), "--out", str(direct)], check=True)
    assert weights_digest(model.state_dict()) == weights_digest(load_trained(direct)[0].state_dict())
    # The scores are those of the authors' weights on these images: the imported model, run here on each
    # test image, gives the per-image PSNR the workflow wrote (and not the blurred input's).
    summary = json.loads((tmp_path / target).read_text())
    per_image = pd.read_csv(tmp_path / target.replace("summary.json", "per_image.csv")).set_index("id")
    pairs = load_pairs(tmp_path / "results" / "data" / "nuclei", split="test", levels=["z02"])
    assert sorted(per_image.index) == sorted(p.id for p in pairs) and summary["n_images"] == cfg["datasets"]["nuclei"]["n_test"] == len(pairs)
    restore = model_restorer(model, torch.device("cpu"), tile=None, overlap=0)
    for pair in pairs:
        assert per_image.loc[pair.id, "psnr"] == pytest.approx(psnr(restore(pair.blur), pair.gt), abs=1e-4), pair.id
        assert abs(per_image.loc[pair.id, "psnr"] - psnr(pair.blur, pair.gt)) > 0.1, pair.id
    assert summary["psnr"] == pytest.approx(per_image["psnr"].mean(), abs=1e-9)


def test_failed_download_says_where_to_place_the_file(served, tmp_path):
    base_url, _ = served
    dest = tmp_path / "resources" / "authors" / "DGNO_BBBC006_w9_Face.pth"
    with pytest.raises(InputError, match=r"place it at .*resources/authors/DGNO_BBBC006_w9_Face\.pth"):
        fetch_authors_checkpoint(base_url + "DGNO_BBBC006_w9_Face.pth", dest, retries=0)
    assert not dest.exists()
    # a body that is not a checkpoint (an error page) is rejected and not kept
    bad = tmp_path / "resources" / "authors" / "not_a_checkpoint.pth"
    with pytest.raises(InputError, match=r"not a loadable tensor checkpoint"):
        fetch_authors_checkpoint(base_url + "not_a_checkpoint.pth", bad, retries=0)
    assert not bad.exists() and not bad.with_name(bad.name + ".part").exists()
