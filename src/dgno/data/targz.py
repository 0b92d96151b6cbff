"""Gzipped tar archives (the authors' ``BBBC006.tar.gz``): verified, unpacked atomically, downloaded with checks.

:func:`verify_targz` reads every member and the gzip trailer, so a truncated or damaged archive is
named before anything is unpacked; :func:`unpack_tar` unpacks into a temporary sibling folder renamed
into place. Members that would land outside it (absolute paths, ``..``), links that point outside it
and device files are refused; links that stay inside (an archive may store a repeated file once) are
written as ordinary copies of their targets. :func:`fetch_targz` is :func:`dgno.data.download.download`
with that check.
"""

from __future__ import annotations

import gzip
import logging
import os
import re
import shutil
import tarfile
import zlib
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import IO

from tqdm import tqdm

from dgno.data.download import CHUNK_BYTES, DownloadError, WrongArchiveKind, download_archive, part_path
from dgno.io import InputError, atomic_dir
from dgno.progress import LogLines
from dgno.progress import bar as progress_bar

log = logging.getLogger(__name__)


class TruncatedArchive(InputError):
    """The archive ends early: most likely an interrupted download, which can be resumed."""


class _CountingReader:
    """A read-only file wrapper that advances a progress bar by the compressed bytes read."""

    def __init__(self, raw: IO[bytes], bar: tqdm | LogLines) -> None:
        self.raw, self.bar = raw, bar

    def read(self, size: int = -1) -> bytes:
        data = self.raw.read(size)
        self.bar.update(len(data))
        return data


def _check_tar_member(member: tarfile.TarInfo, archive: Path) -> None:
    """Refuse members that would land outside the target folder, links that point outside it, devices and FIFOs.

    Links that stay inside are allowed (an archive may store a repeated file once): :func:`unpack_tar`
    writes them as ordinary copies of their targets.
    """
    name = member.name
    if _climbs_out(PurePosixPath(name.replace("\\", "/"))) or re.match(r"^[A-Za-z]:", name) is not None:
        problem = "is an absolute path or climbs out of the target folder"
    elif member.issym() and _climbs_out(PurePosixPath(name).parent / member.linkname):
        problem = f"is a symbolic link to {member.linkname!r}, outside the archive"
    elif member.islnk() and _climbs_out(PurePosixPath(member.linkname)):
        problem = f"is a hard link to {member.linkname!r}, outside the archive"
    elif not (member.isfile() or member.isdir() or member.issym() or member.islnk()):
        problem = "is a device or FIFO"
    else:
        return
    raise InputError(
        f"{archive}: member {name!r} {problem}; refusing to unpack it. "
        "Fix: this is not the dataset's archive, delete it and download it from the dataset's page"
    )


def _climbs_out(path: PurePosixPath) -> bool:
    """An absolute path, or one whose ``..`` parts climb above its start."""
    if path.is_absolute():
        return True
    depth = 0
    for part in path.parts:
        depth += -1 if part == ".." else 0 if part == "." else 1
        if depth < 0:
            return True
    return False


def _inside(tmp: Path, name: str) -> Path:
    """The path of archive member `name` below `tmp` (``..`` resolved; the member was checked not to climb out)."""
    return tmp.joinpath(*os.path.normpath(name.replace("\\", "/")).split("/"))


def _walk_targz(path: Path, visit: Callable[[tarfile.TarInfo, IO[bytes] | None], None], *, progress: bool, desc: str) -> list[str]:
    """Stream through a .tar.gz once: check each member, hand it to `visit`, then read to the gzip trailer.

    One sequential pass (``r|`` stream mode) both verifies and extracts, so a multi-GB archive is
    decompressed once. Reading to the end of the gzip stream makes ``gzip`` check the trailer's CRC-32
    and length; tar header checksums are checked by ``tarfile``. Returns the member names in order.
    """
    fix = f"delete {path} and download it again; if the error repeats, the copy on the server is damaged"
    if not path.exists():
        raise InputError(f"{path}: archive does not exist. Fix: re-run the download rule that writes it")
    _refuse_other_kinds(path)
    names: list[str] = []
    bar = progress_bar(total=path.stat().st_size, unit="B", unit_scale=True, unit_divisor=1024, desc=desc, enabled=progress, leave=False)
    try:
        with bar, open(path, "rb") as raw, gzip.GzipFile(fileobj=_CountingReader(raw, bar), mode="rb") as gz:
            with tarfile.open(fileobj=gz, mode="r|") as tar:
                for member in tar:
                    _check_tar_member(member, path)
                    names.append(member.name)
                    visit(member, tar.extractfile(member) if member.isfile() else None)
            while gz.read(CHUNK_BYTES):
                pass
    except EOFError as exc:
        raise TruncatedArchive(
            f"{path}: the archive is truncated ({exc}; {len(names)} member(s) read). Fix: re-run the download: "
            f"it resumes from the bytes already there; or delete {path} and download it again"
        ) from None
    except tarfile.ReadError as exc:
        cls = TruncatedArchive if "unexpected end" in str(exc) else InputError
        raise cls(f"{path}: not a readable tar.gz archive ({exc}; {len(names)} member(s) read). Fix: {fix}") from None
    except (tarfile.TarError, OSError, zlib.error) as exc:
        raise InputError(f"{path}: corrupt tar.gz archive ({type(exc).__name__}: {exc}). Fix: {fix}") from None
    if not names:
        raise InputError(f"{path}: the tar.gz archive is empty. Fix: {fix}")
    return names


OTHER_KINDS = {b"PK\x03\x04": "a zip archive", b"BZh": "a bzip2 file", b"\xfd7zXZ": "an xz file", b"7z\xbc\xaf": "a 7-Zip archive", b"<": "a web page (HTML or XML)"}


def _refuse_other_kinds(path: Path) -> None:
    """A file that starts like another kind of archive is named as such: fetching it again would give the same file."""
    with open(path, "rb") as fh:
        head = fh.read(8)
    kind = next((k for magic, k in OTHER_KINDS.items() if head.lstrip().startswith(magic)), None)
    if kind is not None:
        raise WrongArchiveKind(
            f"{path}: {kind}, not a gzipped tar (it starts with {head[:4]!r}). Fix: this is not the expected .tar.gz; check the URL "
            "(downloads.bbbc006_authors_url) or the file placed by hand; a zip of the same folders can be unpacked by hand into "
            "<downloads.raw_dir>/bbbc006/BBBC006/"
        )


def _drain(member: tarfile.TarInfo, stream: IO[bytes] | None) -> None:
    if stream is not None:
        while stream.read(CHUNK_BYTES):
            pass


def verify_targz(path: str | Path, *, progress: bool = False) -> list[str]:
    """Check that `path` is a complete, uncorrupted .tar.gz with safe members; return the member names.

    Every member is read through (tar header checksums, data present) and the gzip stream to its
    trailer (CRC-32 and length), so a truncated or damaged archive is reported by name before
    anything is unpacked. A truncated one raises :class:`TruncatedArchive`.
    """
    path = Path(path)
    return _walk_targz(path, _drain, progress=progress, desc=f"verify {path.name}")


def unpack_tar(path: str | Path, out_dir: str | Path, *, progress: bool = True) -> Path:
    """Unpack the .tar.gz at `path` into `out_dir` (replacing it), atomically, verifying as it goes.

    Members go into ``.<out_dir>.tmp-<pid>`` beside `out_dir`, renamed into place only after the
    whole archive, gzip trailer included, has been read without error; absolute paths, ``..``,
    links that point outside and device files are refused, and links inside become copies of their targets. A failure leaves `out_dir` as it was. Returns `out_dir`.
    """
    path, out_dir = Path(path), Path(out_dir)
    with atomic_dir(out_dir) as tmp:
        symlinks: list[tarfile.TarInfo] = []

        def write(member: tarfile.TarInfo, stream: IO[bytes] | None) -> None:
            target = _inside(tmp, member.name)
            if member.isdir():
                target.mkdir(parents=True, exist_ok=True)
                return
            if member.issym():
                symlinks.append(member)  # its target may come later in the archive
                return
            target.parent.mkdir(parents=True, exist_ok=True)
            if member.islnk():
                source = _inside(tmp, member.linkname)
                if not source.is_file():
                    raise InputError(f"{path}: member {member.name!r} is a hard link to {member.linkname!r}, which is not an earlier file of the archive. Fix: delete {path} and download it again")
                shutil.copyfile(source, target)
                return
            with open(target, "wb") as fh:
                shutil.copyfileobj(stream, fh, CHUNK_BYTES)

        _walk_targz(path, write, progress=progress, desc=f"unpack {path.name}")
        for member in symlinks:
            _copy_link_target(tmp, member, path)
    return out_dir


def _copy_link_target(tmp: Path, member: tarfile.TarInfo, archive: Path) -> None:
    """Write a symbolic link member as a copy of its target (a file or a folder); a dangling one is left out, with a warning."""
    target = _inside(tmp, member.name)
    source = _inside(tmp, str(PurePosixPath(member.name).parent / member.linkname))
    if source.is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
    elif source.is_dir():
        shutil.copytree(source, target, dirs_exist_ok=True)
    else:
        log.warning("%s: member %r is a symbolic link to %r, which the archive does not hold; left out", archive, member.name, member.linkname)


def fetch_targz(url: str, dest: str | Path, **download_kw) -> Path:
    """Download a .tar.gz archive (see :func:`download`) and accept it only if :func:`verify_targz` passes.

    A `dest` that exists but is truncated (e.g. an interrupted browser download placed by hand) is
    moved to the part file and the download resumes from its end; any other damage to an existing
    `dest` is reported, not overwritten. A downloaded archive that fails the check is deleted.
    """
    dest = Path(dest)
    if dest.exists() and not part_path(dest).exists():
        try:
            verify_targz(dest)
        except TruncatedArchive:
            log.warning("%s is truncated; resuming its download from byte %d", dest, dest.stat().st_size)
            os.replace(dest, part_path(dest))
        except InputError as exc:
            raise DownloadError(f"{exc} (the file was left in place; it was not downloaded by this run)") from None
    return download_archive(url, dest, check=verify_targz, **download_kw)
