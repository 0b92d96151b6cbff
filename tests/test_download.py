"""Resumable, verified downloads and safe zip handling, against the loopback server of fixtures_http."""

from __future__ import annotations

import io
import socket
import zipfile

import pytest
from fixtures_http import bbbc006_http_session, bbbc006_server  # noqa: F401

from dgno.data.download import DownloadError, download, fetch_zip, part_path, sha256_file, unpack_zip, verify_zip
from dgno.io import InputError

NAME = "BBBC006_v1_images_z_16.zip"
FAST = dict(backoff=0.0, timeout=10, progress=False)


def test_resume_after_connection_dropped_half_way(bbbc006_server, tmp_path):
    srv = bbbc006_server
    srv.faults.drop_first.add(NAME)
    dest = download(srv.url(NAME), tmp_path / NAME, sha256=srv.sha256(NAME), size=len(srv.archives[NAME]), **FAST)
    assert dest.read_bytes() == srv.archives[NAME]
    assert not part_path(dest).exists()
    first, second = srv.served(NAME)
    assert first["status"] == 200 and first["range"] is None and first["sent"] == len(srv.archives[NAME]) // 2
    # The retry asks only for the missing tail and the server answers 206 from there.
    assert second["status"] == 206 and second["range"] == f"bytes={first['sent']}-"


def test_resume_from_part_file_of_an_earlier_run(bbbc006_server, tmp_path):
    srv = bbbc006_server
    dest = tmp_path / NAME
    part_path(dest).write_bytes(srv.archives[NAME][:1000])
    download(srv.url(NAME), dest, sha256=srv.sha256(NAME), **FAST)
    assert dest.read_bytes() == srv.archives[NAME]
    assert [r["range"] for r in srv.served(NAME)] == ["bytes=1000-"]


def test_server_ignoring_range_restarts_from_zero(bbbc006_server, tmp_path):
    srv = bbbc006_server
    srv.faults.ignore_range.add(NAME)
    dest = tmp_path / NAME
    part_path(dest).write_bytes(srv.archives[NAME][:1000])
    download(srv.url(NAME), dest, sha256=srv.sha256(NAME), **FAST)
    assert dest.read_bytes() == srv.archives[NAME]  # not 1000 bytes too long
    assert [r["status"] for r in srv.served(NAME)] == [200]


def test_retries_transient_5xx(bbbc006_server, tmp_path):
    srv = bbbc006_server
    srv.faults.fail_first[NAME] = 2
    dest = download(srv.url(NAME), tmp_path / NAME, retries=2, **FAST)
    assert dest.read_bytes() == srv.archives[NAME]
    assert [r["status"] for r in srv.served(NAME)] == [503, 503, 200]


def test_gives_up_after_retries_and_leaves_no_dest(bbbc006_server, tmp_path):
    srv = bbbc006_server
    srv.faults.fail_first[NAME] = 10
    dest = tmp_path / NAME
    with pytest.raises(DownloadError, match=r"failed after 3 attempt\(s\).*503.*Fix:"):
        download(srv.url(NAME), dest, retries=2, **FAST)
    assert not dest.exists()
    assert len(srv.served(NAME)) == 3


def test_missing_file_fails_at_once(bbbc006_server, tmp_path):
    srv = bbbc006_server
    with pytest.raises(DownloadError, match=r"HTTP 404.*Fix: check the URL"):
        download(srv.url("BBBC006_v1_images_z_99.zip"), tmp_path / "x.zip", retries=3, **FAST)
    assert len(srv.requests) == 1


def test_connection_refused_is_retried_then_reported(tmp_path):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(DownloadError, match="2 attempt"):
        download(f"http://127.0.0.1:{port}/x.zip", tmp_path / "x.zip", retries=1, **FAST)
    assert not (tmp_path / "x.zip").exists()


def test_wrong_checksum_is_an_error_and_leaves_nothing(bbbc006_server, tmp_path):
    srv = bbbc006_server
    srv.faults.wrong_bytes.add(NAME)
    dest = tmp_path / NAME
    with pytest.raises(DownloadError, match=r"SHA-256 is [0-9a-f]{64}, expected " + srv.sha256(NAME)):
        download(srv.url(NAME), dest, sha256=srv.sha256(NAME), **FAST)
    assert not dest.exists() and not part_path(dest).exists()


def test_wrong_size_is_an_error(bbbc006_server, tmp_path):
    srv = bbbc006_server
    dest = tmp_path / NAME
    with pytest.raises(DownloadError, match="size is"):
        download(srv.url(NAME), dest, size=len(srv.archives[NAME]) + 10, **FAST)
    assert not dest.exists() and not part_path(dest).exists()


def test_existing_verified_dest_is_not_downloaded_again(bbbc006_server, tmp_path):
    srv = bbbc006_server
    dest = tmp_path / NAME
    dest.write_bytes(srv.archives[NAME])
    assert download(srv.url(NAME), dest, sha256=srv.sha256(NAME), **FAST) == dest
    assert srv.requests == []
    dest.write_bytes(b"something else")
    with pytest.raises(DownloadError, match="already exists.*Fix: delete"):
        download(srv.url(NAME), dest, sha256=srv.sha256(NAME), **FAST)


def test_bad_arguments_echo_the_value():
    with pytest.raises(ValueError, match="'abc'"):
        download("http://127.0.0.1/x", "x", sha256="abc")


def test_corrupt_zip_is_rejected_before_it_appears(bbbc006_server, tmp_path):
    srv = bbbc006_server
    srv.faults.corrupt.add(NAME)
    dest = tmp_path / NAME
    with pytest.raises(DownloadError, match=r"corrupt.*CRC.*Fix: re-run"):
        fetch_zip(srv.url(NAME), dest, **FAST)
    assert not dest.exists() and not part_path(dest).exists()


def test_verify_zip_names_file_problem_and_fix(tmp_path, bbbc006_server):
    good = tmp_path / "good.zip"
    good.write_bytes(bbbc006_server.archives[NAME])
    assert any(n.endswith(".tif") for n in verify_zip(good))
    truncated = tmp_path / "truncated.zip"
    truncated.write_bytes(good.read_bytes()[:5000])
    with pytest.raises(InputError, match=rf"{truncated}: not a readable zip archive.*Fix: delete"):
        verify_zip(truncated)
    from fixtures_http import corrupt_zip

    bad = tmp_path / "bad.zip"
    bad.write_bytes(corrupt_zip(good.read_bytes()))
    with pytest.raises(InputError, match=rf"{bad}: corrupt zip archive.*Fix: delete"):
        verify_zip(bad)


def _zip_with(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return buf.getvalue()


@pytest.mark.parametrize("evil", ["../escape.txt", "/abs/escape.txt", "a/../../escape.txt"])
def test_unpack_rejects_path_traversal(tmp_path, evil):
    archive = tmp_path / "evil.zip"
    archive.write_bytes(_zip_with({"ok.txt": b"1", evil: b"2"}))
    out = tmp_path / "sub" / "out"
    with pytest.raises(InputError, match="refusing to unpack"):
        unpack_zip(archive, out)
    assert not out.exists() and not (tmp_path / "escape.txt").exists()
    assert not (tmp_path / "sub").exists()  # members are checked before anything is created


def test_unpack_is_atomic_and_replaces(tmp_path):
    archive = tmp_path / "a.zip"
    archive.write_bytes(_zip_with({"top/one.txt": b"1"}))
    out = unpack_zip(archive, tmp_path / "out")
    assert (out / "top" / "one.txt").read_bytes() == b"1"
    archive.write_bytes(_zip_with({"top/two.txt": b"2"}))
    unpack_zip(archive, out)
    assert sorted(p.name for p in (out / "top").iterdir()) == ["two.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.zip", "out"]


def test_sha256_file(tmp_path):
    p = tmp_path / "f"
    p.write_bytes(b"abc")
    assert sha256_file(p) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
