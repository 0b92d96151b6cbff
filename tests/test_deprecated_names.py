"""The released weights' deprecated names still work, each with a one-line notice naming the replacement.

The concept is called `authors` everywhere (docs/authors_weights.md#deprecated-names). What a user may
have typed under the deprecated name "official" (or the config block "reproduction") is read as its
replacement: the sub-command and options of ``dgno``, the download URL's environment variable, a cache
or download folder that already holds checkpoints, and every config key.
"""

from __future__ import annotations

import subprocess

import pytest
import torch
import yaml
from conftest import ROOT, SNAKEMAKE, patient
from fixtures_authors import AUTHORS_FIXTURES, toy_release

from dgno import deprecation
from dgno.checkpoint import load_trained
from dgno.cli import build_parser, main
from dgno.inference import authors
from dgno.models.authors import adopt_deprecated_copy, fetch_authors_checkpoint, regenerate_state_dict
from dgno.workflow.config import ConfigError, validate_config

NAME = "DGNO_BBBC006_w1_Cell"
NOWHERE = "http://127.0.0.1:9/"  # the discard port: nothing listens, so any download attempt fails at once


@pytest.fixture(autouse=True)
def fresh_notices(monkeypatch):
    """Each test starts as a fresh process would: no notice said yet."""
    monkeypatch.setattr(deprecation, "SAID", set())


# ------------------------------------------------------------------------------------- command line


def test_import_official_runs_import_authors_with_a_notice(tmp_path, capsys):
    case = AUTHORS_FIXTURES / "w1_cell"
    torch.save({"params": regenerate_state_dict(yaml.safe_load((case / "weights.json").read_text()))}, tmp_path / "w1.pth")
    out = tmp_path / "model.pt"
    assert main(["import-official", str(tmp_path / "w1.pth"), "--options", str(case / "options.json"), "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "dgno: import-official is deprecated, read as import-authors. Fix: write dgno import-authors" in err
    assert len(err.strip().splitlines()) == 1
    _, blob = load_trained(out)
    assert blob["authors"]["weights"] == "params"  # the same import as `dgno import-authors`


@pytest.mark.parametrize("command", ["deblur", "deblur-slide"])
@pytest.mark.parametrize("spelling", [["--official", NAME], [f"--official={NAME}"]])
def test_official_option_is_read_as_authors(command, spelling, capsys):
    args = build_parser().parse_args([command, "in.tif", *spelling, "--output", "out"])
    assert args.authors == NAME and args.checkpoint is None
    err = capsys.readouterr().err
    assert err.strip() == "dgno: --official is deprecated, read as --authors. Fix: write --authors"


@pytest.mark.parametrize("command", ["deblur", "deblur-slide"])
def test_official_option_is_hidden_and_still_excludes_checkpoint(command, capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args([command, "--help"])
    shown = capsys.readouterr().out
    assert "--authors NAME" in shown and "official" not in shown
    with pytest.raises(SystemExit):
        build_parser().parse_args([command, "in.tif", "--official", NAME, "--checkpoint", "m.pt", "--output", "out"])
    assert "not allowed with argument" in capsys.readouterr().err


# ------------------------------------------------------------------------------- environment, folders


def test_official_url_variable_is_read_when_authors_url_is_not_set(monkeypatch, capsys):
    monkeypatch.delenv(authors.URL_ENV, raising=False)
    monkeypatch.delenv(authors.DEPRECATED_URL_ENV, raising=False)
    assert authors.release_url() == authors.RELEASE_URL
    monkeypatch.setenv("DGNO_OFFICIAL_URL", "http://mirror.example/old/")
    assert authors.release_url() == "http://mirror.example/old/" == authors.release_url()
    assert capsys.readouterr().err == "environment: $DGNO_OFFICIAL_URL: renamed $DGNO_AUTHORS_URL\n"  # once
    monkeypatch.setattr(deprecation, "SAID", set())
    monkeypatch.setenv("DGNO_AUTHORS_URL", "http://mirror.example/authors/")
    assert authors.release_url() == "http://mirror.example/authors/"
    assert capsys.readouterr().err == ""  # the replacement wins, silently


def test_a_checkpoint_in_the_deprecated_folder_is_linked_not_downloaded(tmp_path, capsys):
    old = tmp_path / "official" / f"{NAME}.pth"
    old.parent.mkdir()
    old.write_bytes(b"checkpoint bytes")
    dest = tmp_path / "authors" / f"{NAME}.pth"
    assert not adopt_deprecated_copy(tmp_path / "authors" / "DGNO_other.pth")  # none there
    assert adopt_deprecated_copy(dest)
    said = capsys.readouterr().err
    assert said == f"folder: {old.parent}: renamed {dest.parent}\n"
    assert dest.read_bytes() == b"checkpoint bytes"
    deprecation.SAID.clear()  # as in a new process
    assert not adopt_deprecated_copy(dest)  # in place now: nothing to do, nothing said
    assert capsys.readouterr().err == ""


def test_released_network_from_the_deprecated_cache_folder(tmp_path, monkeypatch, capsys):
    """`dgno deblur --authors NAME` with the checkpoint only in $DGNO_CACHE/official: no download (the URL leads nowhere)."""
    files, options = toy_release(tmp_path / "release", names=(NAME,))
    (tmp_path / "cache" / "official").mkdir(parents=True)
    (tmp_path / "cache" / "official" / f"{NAME}.pth").write_bytes(files[f"{NAME}.pth"])
    monkeypatch.setenv(authors.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setenv(authors.URL_ENV, NOWHERE)
    how = authors.released(NAME, options=options / f"{NAME}.yml", retries=0)
    assert f"folder: {tmp_path / 'cache' / 'official'}: renamed" in capsys.readouterr().err
    assert how.model.parent == tmp_path / "cache" / "authors" and how.model.exists()
    assert (tmp_path / "cache" / "authors" / f"{NAME}.pth").read_bytes() == files[f"{NAME}.pth"]


def test_the_workflow_download_takes_the_checkpoint_from_the_deprecated_raw_folder(tmp_path, capsys):
    files, _ = toy_release(tmp_path / "release", names=(NAME,))
    (tmp_path / "resources" / "official").mkdir(parents=True)
    (tmp_path / "resources" / "official" / f"{NAME}.pth").write_bytes(files[f"{NAME}.pth"])
    dest = tmp_path / "resources" / "authors" / f"{NAME}.pth"
    assert fetch_authors_checkpoint(NOWHERE + f"{NAME}.pth", dest, retries=0) == dest
    assert f"folder: {tmp_path / 'resources' / 'official'}: renamed" in capsys.readouterr().err
    assert dest.read_bytes() == files[f"{NAME}.pth"]


# ------------------------------------------------------------------------------------------ config

SHA = "0" * 64


def _paper_pair() -> tuple[dict, dict]:
    """config/paper.yaml with every renamed key spelled the current way, and the same with the deprecated names."""
    new = yaml.safe_load((ROOT / "config" / "paper.yaml").read_text())
    new["downloads"] = {"authors_checkpoints_url": "http://mirror.example/", "authors_options": "opts", "authors_checkpoints_sha256": {NAME: SHA}}
    old = yaml.safe_load(yaml.safe_dump(new, sort_keys=False))
    old["reproduction"] = old.pop("authors")
    old["downloads"] = {"official_url": "http://mirror.example/", "official_options": "opts", "official_sha256": {NAME: SHA}}
    for method in ("dgno-face-authors", "dgno-cell-authors"):
        old["methods"][method]["official"] = old["methods"][method].pop("authors_checkpoints")
    old["protocol"] = {("reproduction.tolerances" if k == "authors.tolerances" else k): v for k, v in old["protocol"].items()}
    ring = old["experiments"]["nonblind"]["ring"]
    old["experiments"]["nonblind"]["ring"] = {k.replace("tv_weight", "lam"): v for k, v in ring.items()}
    return new, old


def test_every_deprecated_config_key_reads_as_its_replacement(capsys):
    new, old = _paper_pair()
    expected = validate_config(new)
    assert capsys.readouterr().err == ""  # the current names: no notice
    got = validate_config(old)
    assert got == expected
    said = capsys.readouterr().err.splitlines()
    for old_key, new_key in [
        ("reproduction", "authors"),
        ("downloads.official_url", "downloads.authors_checkpoints_url"),
        ("downloads.official_options", "downloads.authors_options"),
        ("downloads.official_sha256", "downloads.authors_checkpoints_sha256"),
        ("methods.dgno-face-authors.official", "methods.dgno-face-authors.authors_checkpoints"),
        ("methods.dgno-cell-authors.official", "methods.dgno-cell-authors.authors_checkpoints"),
        ("protocol.reproduction.tolerances", "protocol.authors.tolerances"),
        *((f"experiments.nonblind.ring.{k}", f"experiments.nonblind.ring.{k.replace('lam', 'tv_weight')}") for k in ("lam", "lam_per_sigma", "lam_min")),
    ]:
        assert f"config: {old_key}: renamed {new_key}" in said
    assert len(said) == 10
    _, old = _paper_pair()
    validate_config(old)
    assert capsys.readouterr().err == ""  # once per key in a process


def test_a_key_given_under_both_names_is_an_error():
    new, _ = _paper_pair()
    new["reproduction"] = dict(new["authors"])
    with pytest.raises(ConfigError, match=r"config key reproduction: deprecated name of authors, and both are given. Fix: keep only authors"):
        validate_config(new)


def _job_counts(configfile) -> tuple[dict[str, int], str]:
    proc = subprocess.run([SNAKEMAKE, "-n", "authors", "--configfile", str(configfile)], cwd=ROOT, capture_output=True, text=True, timeout=patient(300))
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    table = (proc.stdout + proc.stderr).split("Job stats:")[1].split("total")[0]
    return {row.split()[0]: int(row.split()[1]) for row in table.splitlines()[3:] if row.strip()}, proc.stderr


@pytest.mark.slow  # a Snakemake dry run: make test
def test_snakemake_runs_a_config_with_the_deprecated_names(tmp_path):
    """The `authors` target from a config that spells every key the deprecated way: the same jobs, and the notices."""
    new, old = _paper_pair()
    for cfg in (new, old):
        cfg["downloads"]["authors_options" if "authors_options" in cfg["downloads"] else "official_options"] = None
    (tmp_path / "new.yaml").write_text(yaml.safe_dump(new, sort_keys=False))
    (tmp_path / "old.yaml").write_text(yaml.safe_dump(old, sort_keys=False))
    jobs, _ = _job_counts(tmp_path / "new.yaml")
    jobs_old, err = _job_counts(tmp_path / "old.yaml")
    assert jobs_old == jobs and jobs["authors_checkpoint"] == 6 and jobs["import_authors"] == 6
    assert err.count("config: reproduction: renamed authors\n") == 1 and "FutureWarning" not in err
