"""Robust HTTP downloads and zip handling for the dataset rules.

Why this exists: the paper's datasets are multi-gigabyte archives on academic web servers that
drop connections, and Snakemake takes *any* existing output file as complete. So:

- a download is written to ``<dest>.part`` and renamed onto ``dest`` only after its size and
  checksum (when known) and an optional content check (e.g. zip integrity) pass; a failed,
  interrupted or corrupt download never leaves ``dest`` behind;
- an interrupted download resumes from the ``.part`` file with an HTTP ``Range`` request (a server
  that ignores ``Range`` and answers 200 is handled by starting again from byte 0);
- transient failures (refused or dropped connections, time-outs, HTTP 5xx/429, truncated bodies)
  are retried with exponential back-off; permanent ones (404, 403, checksum mismatch) fail at once.

Zip archives are checked with :func:`verify_zip` (CRC of every member) and unpacked with
:func:`unpack_zip` into a temporary sibling folder that is renamed into place, refusing members
that would land outside it (path traversal) or that are symbolic links. Gzipped tar archives get
the same treatment in :mod:`dgno.data.targz`. A ``file://`` URL (a mirror on a shared disk) is
copied and checked like a download.
"""

from __future__ import annotations

import hashlib
import http.client
import logging
import os
import re
import shutil
import stat
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path, PurePosixPath

import dgno
from dgno.io import InputError, atomic_dir
from dgno.progress import bar as progress_bar

log = logging.getLogger(__name__)

CHUNK_BYTES = 1 << 20
USER_AGENT = f"dgno/{dgno.__version__} (dataset download; python-urllib)"
# Statuses worth another attempt: the server (or a proxy in front of it) is briefly unable to answer.
RETRY_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})
_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
_CONTENT_RANGE_RE = re.compile(r"^\s*bytes\s+(\d+)-(\d+)/(\d+|\*)\s*$", re.I)
_UNSATISFIED_RANGE_RE = re.compile(r"^\s*bytes\s+\*/(\d+)\s*$", re.I)


class DownloadError(InputError):
    """A download failed for good (after its retries) or delivered bytes other than the expected ones."""


class WrongArchiveKind(InputError):
    """The file is an archive of another kind (a zip where a tar.gz was expected): downloading it again cannot help."""


class _Retry(Exception):
    """A transient failure: worth another attempt after a back-off."""


def part_path(dest: str | Path) -> Path:
    """Where the bytes of `dest` accumulate until they are complete and verified."""
    dest = Path(dest)
    return dest.with_name(dest.name + ".part")


def sha256_file(path: str | Path) -> str:
    """Hex SHA-256 of a file, read in 1 MiB chunks so multi-GB archives need no memory."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(CHUNK_BYTES), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _verify_bytes(path: Path, sha256: str | None, size: int | None) -> str | None:
    """Return what is wrong with `path` against the expected size/checksum, or None if it matches."""
    actual_size = path.stat().st_size
    if size is not None and actual_size != size:
        return f"size is {actual_size} bytes, expected {size}"
    if sha256 is not None:
        actual = sha256_file(path)
        if actual != sha256:
            return f"SHA-256 is {actual}, expected {sha256}"
    return None


def _validate_download_args(sha256: str | None, size: int | None, retries: int, backoff: float, timeout: float) -> str | None:
    if sha256 is not None:
        sha256 = sha256.strip().lower()
        if not _SHA256_RE.match(sha256):
            raise ValueError(f"sha256={sha256!r}: expected 64 hexadecimal digits or None")
    if size is not None and size < 0:
        raise ValueError(f"size={size!r}: expected a byte count >= 0 or None")
    if retries < 0:
        raise ValueError(f"retries={retries!r}: expected >= 0")
    if backoff < 0:
        raise ValueError(f"backoff={backoff!r}: expected >= 0 seconds")
    if timeout <= 0:
        raise ValueError(f"timeout={timeout!r}: expected > 0 seconds")
    return sha256


def download(
    url: str,
    dest: str | Path,
    *,
    sha256: str | None = None,
    size: int | None = None,
    retries: int = 4,
    backoff: float = 1.0,
    timeout: float = 60,
    progress: bool = True,
    check: Callable[[Path], object] | None = None,
) -> Path:
    """Download `url` to `dest`, resumably, and return `dest`.

    Bytes go to ``dest.part``; a re-run after an interruption resumes from that file's size with
    ``Range: bytes=N-``. Transient failures are retried `retries` times, waiting
    ``backoff * 2**k`` seconds before retry k (k = 0, 1, ...). When the body is complete, `size`
    and `sha256` (if given) are checked and then `check(part_file)` (if given; it raises to
    reject the content, e.g. :func:`verify_zip`); only then is the part file renamed onto `dest`.
    A rejected download deletes the part file (its bytes are wrong, resuming would keep them).

    An existing `dest` is returned as is when it matches the given size/checksum and passes
    `check` (it can only have been completed by this function or placed by hand); a mismatching
    one is an error, not silently replaced, because it may be a hand-placed copy worth keeping.

    Raises DownloadError (an InputError) naming the URL, the file, the problem and the fix.
    """
    sha256 = _validate_download_args(sha256, size, retries, backoff, timeout)
    dest = Path(dest)
    if dest.exists():
        problem = _verify_bytes(dest, sha256, size)
        if problem is not None:
            raise DownloadError(f"{dest}: already exists but its {problem}. Fix: delete {dest} and re-run to download {url} again")
        if check is not None:
            check(dest)
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = part_path(dest)
    if urllib.parse.urlsplit(url).scheme == "file":
        _copy_local(url, part)
    else:
        _fetch_part(url, part, size=size, retries=retries, backoff=backoff, timeout=timeout, progress=progress, label=dest.name)
    _accept(url, part, dest, sha256=sha256, size=size, check=check)
    return dest


def _copy_local(url: str, part: Path) -> None:
    """A ``file://`` URL (a mirror on a shared disk): copied, then checked like a download."""
    source = Path(urllib.request.url2pathname(urllib.parse.urlsplit(url).path))
    if not source.is_file():
        raise DownloadError(f"{url}: no such file ({source}). Fix: check the path in the URL, or place the file by hand")
    shutil.copyfile(source, part)


def _fetch_part(url: str, part: Path, *, size: int | None, retries: int, backoff: float, timeout: float, progress: bool, label: str) -> None:
    """Attempt the download until `part` holds the whole body, backing off between transient failures."""
    failures = 0
    while True:
        try:
            _attempt(url, part, size=size, timeout=timeout, progress=progress, label=label)
            return
        except _Retry as exc:
            failures += 1
            kept = part.stat().st_size if part.exists() else 0
            if failures > retries:
                raise DownloadError(
                    f"{url}: download failed after {failures} attempt(s); last error: {exc}. Fix: check the network "
                    f"and the URL, then re-run; the {kept} bytes already in {part} are kept and the next run resumes from there"
                ) from None
            delay = backoff * 2 ** (failures - 1)
            log.warning("%s: %s; retry %d of %d in %.1f s (resuming from byte %d)", url, exc, failures, retries, delay, kept)
            time.sleep(delay)


def _accept(url: str, part: Path, dest: Path, *, sha256: str | None, size: int | None, check: Callable[[Path], object] | None) -> None:
    """Check the complete part file (size, checksum, content) and rename it onto `dest`; a rejected one is deleted."""
    problem = _verify_bytes(part, sha256, size)
    if problem is not None:
        part.unlink()
        raise DownloadError(
            f"{url}: the downloaded file's {problem}; it was deleted and {dest} was not written. Fix: re-run to download "
            "it again; if the mismatch repeats, the file on the server changed: check the dataset's page and update the "
            "expected checksum/size in the config"
        )
    if check is not None:
        try:
            check(part)
        except BaseException:
            part.unlink(missing_ok=True)
            raise
    os.replace(part, dest)


def _open(url: str, offset: int, timeout: float):
    headers = {"User-Agent": USER_AGENT, "Accept-Encoding": "identity"}
    if offset:
        headers["Range"] = f"bytes={offset}-"
    return urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=timeout)


def _attempt(url: str, part: Path, *, size: int | None, timeout: float, progress: bool, label: str) -> None:
    """One request: append the missing bytes to `part`. Raises _Retry for transient failures."""
    offset = part.stat().st_size if part.exists() else 0
    if size is not None and offset == size:
        return  # complete already (an earlier run died after the last byte)
    if size is not None and offset > size:
        part.unlink()  # longer than the whole file: not a prefix of it
        offset = 0
    resp = _request(url, part, offset, timeout)
    if resp is None:
        return  # the part file already holds every byte the server has
    with resp:
        offset, total, mode = _response_start(resp, url, part, offset)
        expected = size if size is not None else total
        written = _receive(resp, part, mode=mode, offset=offset, expected=expected, progress=progress, label=label)
    if expected is not None and written < expected:
        raise _Retry(f"connection closed after {written} of {expected} bytes")
    if expected is not None and written > expected:
        part.unlink()
        raise DownloadError(
            f"{url}: the server sent {written} bytes, more than the expected {expected}; the partial file was deleted. "
            "Fix: check the expected size in the config against the dataset's page"
        )


def _request(url: str, part: Path, offset: int, timeout: float):
    """The open response from byte `offset`, or None when the server has no byte past it (HTTP 416 at the end)."""
    try:
        return _open(url, offset, timeout)
    except urllib.error.HTTPError as exc:
        exc.close()
        if exc.code == 416 and offset:
            m = _UNSATISFIED_RANGE_RE.match(exc.headers.get("Content-Range", "") or "")
            if m and int(m.group(1)) == offset:
                return None
            part.unlink()
            raise _Retry(f"server refused to resume at byte {offset} (HTTP 416); restarting from byte 0") from None
        if exc.code in RETRY_STATUSES:
            raise _Retry(f"HTTP {exc.code} {exc.reason}") from None
        raise DownloadError(
            f"{url}: HTTP {exc.code} {exc.reason}. Fix: check the URL (and the configured base URL); "
            "if the dataset moved, download it by hand as `dgno data check NAME` describes"
        ) from None
    except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
        raise _Retry(f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}") from None


def _response_start(resp, url: str, part: Path, offset: int) -> tuple[int, int | None, str]:
    """(byte the body starts at, total size if known, file mode): a resumed 206, or a 200 from byte 0."""
    length = resp.headers.get("Content-Length")
    if resp.status == 206:
        m = _CONTENT_RANGE_RE.match(resp.headers.get("Content-Range", "") or "")
        if m is None or int(m.group(1)) != offset:
            part.unlink(missing_ok=True)
            raise _Retry(f"server answered the resume request with range {resp.headers.get('Content-Range')!r}; restarting")
        total = int(m.group(3)) if m.group(3) != "*" else (offset + int(length) if length else None)
        return offset, total, "ab"
    if resp.status == 200:
        if offset:
            log.warning("%s: server ignored the Range request; downloading again from byte 0", url)
        return 0, int(length) if length else None, "wb"
    raise _Retry(f"unexpected HTTP status {resp.status}")


def _receive(resp, part: Path, *, mode: str, offset: int, expected: int | None, progress: bool, label: str) -> int:
    """Write the body to `part` (appended or from the start) with a progress bar; return the bytes now in it."""
    written = offset
    bar = progress_bar(total=expected, initial=offset, unit="B", unit_scale=True, unit_divisor=1024, desc=label, enabled=progress, leave=False)
    with bar, open(part, mode) as fh:
        while True:
            try:
                chunk = resp.read(CHUNK_BYTES)
            except (OSError, http.client.HTTPException) as exc:
                raise _Retry(f"connection lost after {written} bytes ({type(exc).__name__})") from None
            if not chunk:
                return written
            fh.write(chunk)
            written += len(chunk)
            bar.update(len(chunk))


# --------------------------------------------------------------------------------------------- zip


def verify_zip(path: str | Path) -> list[str]:
    """Check that `path` is a readable zip whose every member passes its CRC; return the member names.

    Run before anything is unpacked, so a truncated or corrupted archive is reported by name
    instead of surfacing later as a half-extracted dataset.
    """
    path = Path(path)
    fix = f"delete {path} and download it again; if the error repeats, the copy on the server is damaged"
    if not path.exists():
        raise InputError(f"{path}: archive does not exist. Fix: re-run the download rule that writes it")
    try:
        zf = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, EOFError) as exc:
        raise InputError(f"{path}: not a readable zip archive ({exc}). Fix: {fix}") from None
    with zf:
        try:
            bad = zf.testzip()
        except (zipfile.BadZipFile, zlib.error, OSError, EOFError, NotImplementedError, ValueError) as exc:
            raise InputError(f"{path}: corrupt zip archive ({type(exc).__name__}: {exc}). Fix: {fix}") from None
        if bad is not None:
            raise InputError(f"{path}: corrupt zip archive (member {bad!r} fails its CRC check). Fix: {fix}")
        names = zf.namelist()
    if not names:
        raise InputError(f"{path}: the zip archive is empty. Fix: {fix}")
    return names


def _check_member(info: zipfile.ZipInfo, archive: Path) -> None:
    """Refuse members that would be written outside the target folder or as symbolic links."""
    name = info.filename
    pure = PurePosixPath(name.replace("\\", "/"))
    unsafe = (
        pure.is_absolute()
        or ".." in pure.parts
        or re.match(r"^[A-Za-z]:", name) is not None
        or stat.S_ISLNK(info.external_attr >> 16)
    )
    if unsafe:
        raise InputError(
            f"{archive}: member {name!r} is an absolute path, climbs out of the target folder or is a symbolic link; "
            "refusing to unpack it. Fix: this is not the dataset's archive, delete it and download it from the dataset's page"
        )


def unpack_zip(path: str | Path, out_dir: str | Path) -> Path:
    """Verify the zip at `path` and unpack it into `out_dir` (replacing it), atomically.

    Members are extracted into ``.<out_dir>.tmp-<pid>`` beside `out_dir` and the folder is renamed
    into place at the end, so a failure leaves no half-unpacked `out_dir` that a rule could mistake
    for complete. Returns `out_dir`.
    """
    path, out_dir = Path(path), Path(out_dir)
    verify_zip(path)
    with zipfile.ZipFile(path) as zf:
        for info in zf.infolist():
            _check_member(info, path)
        with atomic_dir(out_dir) as tmp:
            zf.extractall(tmp)
    return out_dir


def fetch_zip(url: str, dest: str | Path, **download_kw) -> Path:
    """Download a zip archive (see :func:`download`) and accept it only if :func:`verify_zip` passes.

    The integrity check runs on the part file before it is renamed, so a corrupt archive never
    appears at `dest`; the error names the URL and the fix.
    """
    return download_archive(url, Path(dest), check=verify_zip, **download_kw)


def download_archive(url: str, dest: Path, *, check: Callable[[Path], object], **download_kw) -> Path:
    """:func:`download` with an archive ``check``; content the check refuses becomes a DownloadError saying what to do."""
    try:
        return download(url, dest, check=check, **download_kw)
    except DownloadError:
        raise
    except WrongArchiveKind as exc:
        raise DownloadError(f"{url}: {str(exc).split(': ', 1)[1]}") from None
    except InputError as exc:
        raise DownloadError(
            f"{url}: the downloaded archive is corrupt ({exc}); it was deleted and {dest} was not written. "
            f"Fix: re-run to download it again; if it fails the same way, the server's copy is damaged: "
            f"fetch the archive by hand from the dataset's page and place it at {dest}"
        ) from None
