"""`dgno`'s arguments: checked before torch loads, messages whose fix works, the model read before the
output folder is made, and plain words for a full disk and a thread count."""

from __future__ import annotations

import errno
import json
import subprocess
import sys

import numpy as np
import pytest
import tifffile
from conftest import ROOT
from fixtures_deblur import model_file
from fixtures_slides import brightfield_slide

from dgno.cli import main
from dgno.inference import authors, deblur


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return model_file(tmp_path_factory.mktemp("model") / "model.pt")


@pytest.fixture
def image(tmp_path):
    path = tmp_path / "a.tif"
    tifffile.imwrite(path, np.random.default_rng(2).integers(0, 4096, (64, 64)).astype(np.uint16))
    return path


def _deblur(image, out, *extra) -> int:
    return main(["deblur", str(image), "--output", str(out), "--device", "cpu", *map(str, extra)])


def test_the_tile_message_names_the_overlap_that_applies_and_its_fix_works(model, image, tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"
    assert _deblur(image, out, "--checkpoint", model, "--tile", 16) == 2
    err = capsys.readouterr().err
    assert "--tile 16: a tile must be at least 32 px and larger than --overlap (by default 64 px, 32 px for the authors' networks)" in err
    assert "(0 px)" not in err and "any size from 65; from 33 for the authors' networks" in err
    assert _deblur(image, out, "--checkpoint", model, "--tile", 48) == 2  # read the model: its overlap is 64 px
    assert "--tile 48: a tile must be at least 32 px and larger than --overlap (64 px). Fix: --tile 512 (or any size from 65)" in capsys.readouterr().err
    assert _deblur(image, out, "--checkpoint", model, "--tile", 65) == 0  # the size the message offers works (one pass here)
    assert _deblur(image, tmp_path / "o8", "--checkpoint", model, "--tile", 16, "--overlap", 8) == 2
    assert "larger than --overlap (8 px). Fix: --tile 512 (or any size from 32)" in capsys.readouterr().err
    monkeypatch.setenv(authors.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setenv(authors.URL_ENV, "http://127.0.0.1:9/")  # nothing may be downloaded
    assert _deblur(image, tmp_path / "oa", "--authors", "DGNO_BBBC006_w1_Cell", "--tile", 16) == 2
    assert "larger than --overlap (32 px). Fix: --tile 512 (or any size from 33)" in capsys.readouterr().err
    assert not (tmp_path / "cache").exists() and not (tmp_path / "oa").exists()


@pytest.mark.parametrize("content", [None, b"not a checkpoint at all", "folder"], ids=["missing", "unreadable", "a folder"])
def test_a_model_that_cannot_be_read_leaves_no_output_folder(image, tmp_path, capsys, content):
    ckpt = tmp_path / "model.pt"
    if content == "folder":
        ckpt.mkdir()
    elif content is not None:
        ckpt.write_bytes(content)
    assert _deblur(image, tmp_path / "deep" / "out", "--checkpoint", ckpt) == 2
    assert str(ckpt) in capsys.readouterr().err
    assert not (tmp_path / "deep").exists()
    slide = tmp_path / "s.tif"
    brightfield_slide(slide, shape=(300, 300), regions=[])
    assert main(["deblur-slide", str(slide), "--checkpoint", str(ckpt), "--output", str(tmp_path / "slides"), "--device", "cpu"]) == 2
    assert str(ckpt) in capsys.readouterr().err and not (tmp_path / "slides").exists()


def test_an_output_folder_that_cannot_be_made_is_said_before_the_model_is_read(image, tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert _deblur(image, blocker / "out", "--checkpoint", tmp_path / "missing.pt") == 2
    err = capsys.readouterr().err
    assert f"--output {blocker / 'out'}: cannot write there ({blocker} is a file, not a folder)" in err


CHECKS = """
import json, sys
from dgno.cli import main
results = {}
for name, argv in json.loads(sys.argv[1]).items():
    try:
        code = main(argv)
    except SystemExit as exc:  # --help, argparse's own errors
        code = exc.code
    results[name] = [code, "torch" in sys.modules]
print(json.dumps(results))
"""


def test_arguments_and_help_are_checked_without_loading_torch(model, image, tmp_path):
    slide = tmp_path / "s.tif"
    slide.write_bytes(b"")
    common = [str(image), "--checkpoint", str(model), "--output", str(tmp_path / "out")]
    cases = {
        "help": ["--help"],
        "deblur help": ["deblur", "--help"],
        "a typo in an option": ["deblur", *common, "--tiles", "16"],
        "tile": ["deblur", *common, "--tile", "16"],
        "threads": ["deblur", *common, "--threads", "0"],
        "axes": ["deblur", *common, "--axes", "ZZYX"],
        "missing model": ["deblur", str(image), "--checkpoint", str(tmp_path / "none.pt"), "--output", str(tmp_path / "out")],
        "slide numbers": ["deblur-slide", str(slide), "--checkpoint", str(model), "--output", str(tmp_path / "out"), "--min-tissue", "5"],
        "slide level": ["deblur-slide", str(slide), "--checkpoint", str(model), "--output", str(tmp_path / "out"), "--level", "-1"],
        "train iterations": ["train", "--data", str(tmp_path), "--out", str(tmp_path / "run"), "--method", "lg", "--iterations", "0"],
        "evaluate data": ["evaluate", "--checkpoint", str(model), "--data", str(tmp_path / "none"), "--level", "a", "--out", str(tmp_path / "e")],
    }
    proc = subprocess.run([sys.executable, "-c", CHECKS, json.dumps(cases)], capture_output=True, text=True, timeout=300, cwd=ROOT)
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    assert results.pop("help") == results.pop("deblur help") == [0, False]
    assert results == dict.fromkeys(cases.keys() - {"help", "deblur help"}, [2, False]), proc.stderr
    for says in ("--tile 16:", "--threads 0:", "--axes ZZYX:", "none.pt: checkpoint does not exist", "--min-tissue 5.0:", "--level -1:", "--iterations 0:", "--data "):
        assert says in proc.stderr
    assert not (tmp_path / "out").exists()


def test_a_full_disk_says_disk_full_and_how_to_go_on(model, image, tmp_path, capsys, monkeypatch):
    def full(path, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(deblur, "write_like", full)
    assert _deblur(image, tmp_path / "out", "--checkpoint", model) == 1
    err = capsys.readouterr().err
    assert f"{image}: cannot write {tmp_path / 'out' / 'a.tif'}: disk full" in err and "Fix: free space on the disk of" in err
    assert "then rerun with --skip-existing" in err and "permissions" not in err


def test_threads_0_suggests_a_plain_number(model, image, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert _deblur(image, tmp_path / "out", "--checkpoint", model, "--threads", 0) == 2
    assert "--threads 0: at least one thread. Fix: --threads 3, or leave it out to use 3 ($OMP_NUM_THREADS)" in capsys.readouterr().err
