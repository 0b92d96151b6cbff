"""The file names in the Broad BBBC006 plane archives, read without downloading the archives.

Why: the authors' ``BBBC006.tar.gz`` may keep the Broad names of its blur files
(``mcf-z-stacks-03212011_<well>_s<site>_w<ch><UUID>.tif``), whose UUID-like suffix differs per plane,
so neither the name nor its place in the sorted triple says the plane. The Broad archive of each plane
(``BBBC006_v1_images_z_02.zip`` ...) lists its members in the zip's central directory, at the end of
the file. :class:`HttpRangeFile` hands :class:`zipfile.ZipFile` a read-only, seekable file whose
reads are HTTP Range requests, so ``namelist()`` costs the end-of-central-directory record and the
central directory (about a hundred kilobytes per plane), not the archive (hundreds of megabytes). A
server that ignores Range (answers 200) gets the full, resumable download instead
(:func:`dgno.data.download.fetch_zip`). A plane archive or unpacked plane folder already under
``raw_root`` is read locally, with no network at all.

:func:`broad_listing` never raises for an unreachable server: it records the reason per plane, and the
preparation then assigns those planes by sharpness and says so (:mod:`dgno.data.bbbc006_pairing`).
"""

from __future__ import annotations

import http.client
import io
import logging
import re
import time
import urllib.error
import urllib.request
import zipfile
from collections.abc import Iterable
from pathlib import Path, PurePosixPath

from dgno.data import bbbc006
from dgno.data.download import USER_AGENT, DownloadError, fetch_zip
from dgno.io import InputError, is_hidden, read_json, visible_files, write_json

log = logging.getLogger(__name__)

LISTING = "broad_names.json"  # under the Broad raw folder (resources/bbbc006/): the cached listing
TAIL_BYTES = (1 << 16) + 22  # the end-of-central-directory record and the longest zip comment
TIFF_SUFFIXES = (".tif", ".tiff")
_CONTENT_RANGE_RE = re.compile(r"^\s*bytes\s+(\d+)-(\d+)/(\d+)\s*$", re.I)


class RangeIgnored(Exception):
    """The server answered a Range request with the whole file (HTTP 200) or another range."""


class HttpRangeFile(io.RawIOBase):
    """A read-only, seekable file over HTTP Range requests: what :class:`zipfile.ZipFile` needs to read a remote zip's index.

    The first request fetches the last :data:`TAIL_BYTES` bytes (``Range: bytes=-N``), which gives the
    file size and holds the end-of-central-directory record; every later read that the fetched bytes do
    not cover is one request for exactly its range. ``requests`` and ``bytes_read`` say what it cost.
    """

    def __init__(self, url: str, *, timeout: float = 30, retries: int = 2, backoff: float = 0.5) -> None:
        super().__init__()
        self.url, self.timeout, self.retries, self.backoff = url, timeout, retries, backoff
        self.requests = self.bytes_read = 0
        self._pos = 0
        self._chunks: list[tuple[int, bytes]] = []
        start, body, self.size = self._get(f"bytes=-{TAIL_BYTES}")
        self._chunks.append((start, body))

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self.size}[whence]
        if base + offset < 0:
            raise OSError(f"seek to {base + offset} before the start of {self.url}")
        self._pos = base + offset
        return self._pos

    def read(self, size: int = -1) -> bytes:
        end = self.size if size is None or size < 0 else min(self.size, self._pos + size)
        if end <= self._pos:
            return b""
        data = self._cached(self._pos, end)
        if data is None:
            start, data, _ = self._get(f"bytes={self._pos}-{end - 1}")
            if start != self._pos or len(data) != end - self._pos:
                raise RangeIgnored(f"asked for bytes {self._pos}-{end - 1}, got {len(data)} bytes from {start}")
            self._chunks.append((start, data))
        self._pos = end
        return data

    def readall(self) -> bytes:
        return self.read(-1)

    def readinto(self, buffer) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def _cached(self, start: int, end: int) -> bytes | None:
        for first, data in self._chunks:
            if first <= start and end <= first + len(data):
                return data[start - first : end - first]
        return None

    def _get(self, byte_range: str) -> tuple[int, bytes, int]:
        """(first byte, body, file size) of one Range request, retrying transient failures; RangeIgnored on a 200."""
        request = urllib.request.Request(self.url, headers={"User-Agent": USER_AGENT, "Accept-Encoding": "identity", "Range": byte_range})
        for attempt in range(self.retries + 1):
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as resp:
                    m = _CONTENT_RANGE_RE.match(resp.headers.get("Content-Range", "") or "")
                    if resp.status != 206 or m is None:
                        raise RangeIgnored(f"HTTP {resp.status} to 'Range: {byte_range}'")
                    body = resp.read()
                self.requests += 1
                self.bytes_read += len(body)
                return int(m.group(1)), body, int(m.group(3))
            except urllib.error.HTTPError as exc:
                exc.close()
                if exc.code < 500 and exc.code not in (408, 429) or attempt == self.retries:
                    raise
            except (urllib.error.URLError, OSError, http.client.HTTPException):
                if attempt == self.retries:
                    raise
            time.sleep(self.backoff * 2**attempt)
        raise AssertionError("unreachable: the loop returns or raises")


def remote_zip_names(url: str, *, timeout: float = 30, retries: int = 2, backoff: float = 0.5) -> tuple[list[str], dict]:
    """(member names, cost) of the zip at `url`, from its central directory alone; RangeIgnored if the server ignores Range."""
    with HttpRangeFile(url, timeout=timeout, retries=retries, backoff=backoff) as remote, zipfile.ZipFile(remote) as zf:
        names = zf.namelist()
        return names, {"requests": remote.requests, "bytes_read": remote.bytes_read, "archive_bytes": remote.size}


def _images(names: Iterable[str]) -> tuple[list[str], int]:
    """(file names of the TIFF members, how many members were skipped as hidden)."""
    kept, hidden = [], 0
    for name in names:
        pure = PurePosixPath(name.replace("\\", "/"))
        if pure.suffix.lower() not in TIFF_SUFFIXES:
            continue
        if is_hidden(pure):
            hidden += 1
        else:
            kept.append(pure.name)
    return sorted(kept), hidden


def plane_listing(raw_root: str | Path, z: int, *, base_url: str = bbbc006.BASE_URL, retries: int = 2, backoff: float = 0.5, timeout: float = 30, progress: bool = False) -> dict:
    """The image names of Broad plane `z`: from a local archive or folder under `raw_root`, else from its central directory over HTTP.

    Raises (URLError, HTTPError, DownloadError, BadZipFile ...) when none of these can be read.
    """
    raw_root = Path(raw_root)
    archive, url = raw_root / "archives" / bbbc006.plane_archive(z), bbbc006.plane_url(z, base_url)
    record = {"plane": z, "archive": bbbc006.plane_archive(z), "url": url}
    folder = bbbc006.plane_dir(raw_root, z)
    if archive.is_file():
        with zipfile.ZipFile(archive) as zf:
            names, record["source"] = zf.namelist(), f"the local archive {archive}"
    elif folder is not None:
        kept, hidden = visible_files(folder, TIFF_SUFFIXES, recursive=True)
        names, record["source"] = [str(p.relative_to(folder)) for p in kept + hidden], f"the unpacked folder {folder}"
    else:
        try:
            names, cost = remote_zip_names(url, timeout=timeout, retries=retries, backoff=backoff)
            record |= {"source": "the archive's central directory, read with HTTP Range requests", **cost}
        except RangeIgnored as exc:
            log.warning("%s: the server does not honour Range (%s); downloading the whole archive to %s", url, exc, archive)
            fetch_zip(url, archive, retries=retries, backoff=backoff, timeout=timeout, progress=progress)
            with zipfile.ZipFile(archive) as zf:
                names = zf.namelist()
            record["source"] = f"the whole archive, downloaded to {archive} (the server ignores Range requests)"
    record["names"], record["hidden_skipped"] = _images(names)
    return record


def broad_listing(raw_root: str | Path, *, planes: Iterable[int] = bbbc006.TRAIN_PLANES, base_url: str = bbbc006.BASE_URL, **kw) -> dict:
    """Every plane's listing (:func:`plane_listing`); a plane that cannot be listed gets ``status: unavailable`` and the reason.

    ``status`` of the whole: ``listed`` (every plane), ``partial`` or ``unavailable`` (none).
    """
    out: dict = {"base_url": base_url, "planes": {}}
    for z in sorted({int(z) for z in planes}):
        try:
            out["planes"][bbbc006.level_name(z)] = {"status": "listed", **plane_listing(raw_root, z, base_url=base_url, **kw)}
        except (OSError, urllib.error.URLError, http.client.HTTPException, zipfile.BadZipFile, RangeIgnored, DownloadError, InputError) as exc:
            reason = f"{type(exc).__name__}: {getattr(exc, 'reason', None) or exc}"
            log.warning("Broad plane z%02d cannot be listed (%s); its files' planes will be assigned by sharpness", z, reason)
            out["planes"][bbbc006.level_name(z)] = {"status": "unavailable", "plane": z, "url": bbbc006.plane_url(z, base_url), "reason": reason}
    listed = [p["status"] == "listed" for p in out["planes"].values()]
    out["status"] = "listed" if all(listed) else "partial" if any(listed) else "unavailable"
    return out


def write_listing(raw_root: str | Path, out: str | Path, **kw) -> dict:
    """Rule ``bbbc006_broad_names``: :func:`broad_listing` written to `out` (JSON), the cache the preparation reads."""
    listing = broad_listing(raw_root, **kw)
    write_json(out, listing)
    return listing


def read_listing(path: str | Path | None) -> dict | None:
    """The cached listing at `path`, or None when there is none."""
    return read_json(path) if path is not None and Path(path).is_file() else None


def plane_lookup(listing: dict | None) -> dict[str, int]:
    """{lower-case file stem: plane} of every listed name; a stem listed in two planes is left out (it decides nothing)."""
    seen: dict[str, set[int]] = {}
    for plane in (listing or {}).get("planes", {}).values():
        for name in plane.get("names", []) if plane.get("status") == "listed" else []:
            seen.setdefault(Path(name).stem.lower(), set()).add(int(plane["plane"]))
    return {stem: next(iter(zs)) for stem, zs in seen.items() if len(zs) == 1}
