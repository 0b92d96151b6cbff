"""A miniature BBBC006 served over HTTP on 127.0.0.1, with switches that inject network faults.

Use in a test module with a plain import (pytest finds fixtures by name in the module)::

    from fixtures_http import bbbc006_http_session, bbbc006_server  # noqa: F401

The archives have the real structure: ``BBBC006_v1_images_z_NN.zip`` holding
``BBBC006_v1_images_z_NN/mcf-z-stacks-03212011_<well>_s<site>_w<1|2><UUID>.tif`` (16-bit, 24×32,
a different UUID-like suffix per file) and ``BBBC006_v1_labels.zip`` holding 16-bit PNG instance
masks ``BBBC006_v1_labels/mcf-z-stacks-03212011_<well>_s<site>.png``. Row 0 of every image encodes
(plane, well index, site, channel number), so a test can verify that pairing picked the right file.

The handler is written here (no third-party server): it honours ``Range: bytes=N-``, ``bytes=N-M`` and ``bytes=-N`` with 206, answers
416 past the end, and its fault switches (reset before every test) are:

- ``drop_first``: the first served response of a file sends half its body, then drops the connection;
- ``fail_first[name] = n``: the first n requests of a file get HTTP 503;
- ``corrupt``: serve the zip with one byte of a member's data flipped (CRC failure, same length);
- ``wrong_bytes``: serve other bytes of the same length (checksum mismatch);
- ``ignore_range``: answer 200 with the whole body even when a Range is asked for.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import re
import socket
import threading
import uuid
import zipfile
from collections import defaultdict
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

import imageio.v3 as iio
import numpy as np
import pytest
import tifffile

PREFIX = "mcf-z-stacks-03212011"
WELLS = ("a01", "b07", "c12", "h03", "p24")
SITES = (1, 2)
CHANNELS = ("w1", "w2")
PLANES = (1, 2, 5, 6, 10, 13, 16)
SHAPE = (24, 32)  # (H, W)
URL_PATH = "/bbbc/BBBC006/"


def signature(z: int, well: str, site: int, channel: str) -> list[int]:
    """The first four pixels of row 0 of the image of (plane, well, site, channel)."""
    return [z, WELLS.index(well), site, int(channel[1])]


def make_image(z: int, well: str, site: int, channel: str) -> np.ndarray:
    seed = int.from_bytes(hashlib.sha256(f"{z}{well}{site}{channel}".encode()).digest()[:4], "little")
    img = np.random.default_rng(seed).integers(200, 4000, size=SHAPE, dtype=np.uint16)
    img[0, :4] = signature(z, well, site, channel)
    return img


def make_mask(well: str, site: int) -> np.ndarray:
    """Two rectangular 'nuclei' with ids 1 and 2 at well/site-dependent places."""
    mask = np.zeros(SHAPE, np.uint16)
    k = WELLS.index(well) + site
    mask[2 + k % 5 : 8 + k % 5, 3:9] = 1
    mask[12:18, 14 + k % 7 : 22 + k % 7] = 2
    return mask


def image_name(well: str, site: int, channel: str, z: int) -> str:
    # A UUID-like suffix that differs per file (as in the real data), upper-case hex.
    suffix = str(uuid.UUID(bytes=hashlib.md5(f"{well}{site}{channel}{z}".encode()).digest())).upper()
    return f"{PREFIX}_{well}_s{site}_{channel}{suffix}.tif"


def zip_bytes(members: dict[str, bytes]) -> bytes:
    """A zip archive in memory: {member name: content}."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return buf.getvalue()


def _tiff_bytes(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    tifffile.imwrite(buf, arr, photometric="minisblack", metadata=None)
    return buf.getvalue()


def build_archives(planes=PLANES, wells=WELLS) -> dict[str, bytes]:
    """{archive file name: zip bytes} of the miniature BBBC006."""
    out = {}
    for z in planes:
        top = f"BBBC006_v1_images_z_{z:02d}"
        members = {
            f"{top}/{image_name(w, s, c, z)}": _tiff_bytes(make_image(z, w, s, c)) for w in wells for s in SITES for c in CHANNELS
        }
        members[f"{top}/README.txt"] = b"not an image: pairing must ignore it\n"
        out[f"{top}.zip"] = zip_bytes(members)
    labels = {
        f"BBBC006_v1_labels/{PREFIX}_{w}_s{s}.png": iio.imwrite("<bytes>", make_mask(w, s), extension=".png") for w in wells for s in SITES
    }
    out["BBBC006_v1_labels.zip"] = zip_bytes(labels)
    return out


def corrupt_zip(data: bytes) -> bytes:
    """Flip one byte in the middle of the first member's compressed data: same length, CRC fails."""
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        info = zf.infolist()[0]
    header = info.header_offset
    name_len = int.from_bytes(data[header + 26 : header + 28], "little")
    extra_len = int.from_bytes(data[header + 28 : header + 30], "little")
    pos = header + 30 + name_len + extra_len + info.compress_size // 2
    return data[:pos] + bytes([data[pos] ^ 0xFF]) + data[pos + 1 :]


@dataclass
class Faults:
    drop_first: set[str] = field(default_factory=set)
    fail_first: dict[str, int] = field(default_factory=dict)
    corrupt: set[str] = field(default_factory=set)
    wrong_bytes: set[str] = field(default_factory=set)
    ignore_range: set[str] = field(default_factory=set)


@dataclass
class MiniBBBC006:
    """What a test gets: where the archives are served, their bytes and checksums, fault switches, a request log."""

    base_url: str
    archives: dict[str, bytes]
    faults: Faults
    requests: list[dict]  # {"name", "range", "status", "sent"} per request, in arrival order
    wells: tuple[str, ...] = WELLS
    sites: tuple[int, ...] = SITES
    planes: tuple[int, ...] = PLANES
    shape: tuple[int, int] = SHAPE
    _counts: dict = field(default_factory=lambda: defaultdict(int))
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def url(self, name: str) -> str:
        return self.base_url + name

    def sha256(self, name: str) -> str:
        return hashlib.sha256(self.archives[name]).hexdigest()

    def reset(self) -> None:
        self.faults = Faults()
        self.requests.clear()
        self._counts.clear()

    def served(self, name: str) -> list[dict]:
        return [r for r in self.requests if r["name"] == name]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    state: MiniBBBC006  # set on a subclass per server

    def log_message(self, format, *args):  # noqa: A002 - keep test output clean
        pass

    def _send(self, status: int, body: bytes, headers: dict[str, str], *, drop: bool = False, name: str = "", rng=None) -> None:
        payload = body[: len(body) // 2] if drop else body
        with self.state._lock:  # logged before anything goes out: the client may be done right after
            self.state.requests.append({"name": name, "range": rng, "status": status, "sent": len(payload)})
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(payload)
        self.wfile.flush()
        if drop:
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def do_GET(self):  # noqa: N802 - http.server's naming
        st = self.state
        path = urlsplit(self.path).path
        name = path[len(URL_PATH) :] if path.startswith(URL_PATH) else ""
        rng = self.headers.get("Range")
        body = st.archives.get(name)
        if body is None:
            return self._send(404, b"not found", {"Content-Type": "text/plain"}, name=name, rng=rng)
        with st._lock:
            st._counts[name, "req"] += 1
            n_req = st._counts[name, "req"]
        if n_req <= st.faults.fail_first.get(name, 0):
            return self._send(503, b"busy", {"Content-Type": "text/plain"}, name=name, rng=rng)
        if name in st.faults.corrupt:
            body = corrupt_zip(body)
        if name in st.faults.wrong_bytes:
            body = bytes(b ^ 0x5A for b in body)
        start, end, status, headers = 0, len(body), 200, {"Content-Type": "application/zip", "Accept-Ranges": "bytes"}
        m = re.fullmatch(r"bytes=(\d*)-(\d*)", rng or "")
        if m and (m.group(1) or m.group(2)) and name not in st.faults.ignore_range:
            if m.group(1):  # bytes=N- or bytes=N-M (M inclusive)
                start, end = int(m.group(1)), min(len(body), int(m.group(2)) + 1) if m.group(2) else len(body)
            else:  # bytes=-N: the last N bytes
                start = max(0, len(body) - int(m.group(2)))
            if start >= len(body) or end <= start:
                return self._send(416, b"", {"Content-Range": f"bytes */{len(body)}"}, name=name, rng=rng)
            status = 206
            headers["Content-Range"] = f"bytes {start}-{end - 1}/{len(body)}"
        with st._lock:
            st._counts[name, "served"] += 1
            first = st._counts[name, "served"] == 1
        self._send(status, body[start:end], headers, drop=first and name in st.faults.drop_first, name=name, rng=rng)


@contextlib.contextmanager
def serve(archives: dict[str, bytes]):
    """A loopback server of `archives` (file name → bytes) under ``<base_url>``, with the fault switches."""
    state = MiniBBBC006(base_url="", archives=archives, faults=Faults(), requests=[])
    handler = type("MiniBBBC006Handler", (_Handler,), {"state": state})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    state.base_url = f"http://127.0.0.1:{server.server_address[1]}{URL_PATH}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.fixture(scope="session")
def bbbc006_http_session():
    with serve(build_archives()) as state:
        yield state


@pytest.fixture
def bbbc006_server(bbbc006_http_session) -> MiniBBBC006:
    """The running loopback server, with faults and the request log cleared for this test."""
    bbbc006_http_session.reset()
    yield bbbc006_http_session
    bbbc006_http_session.reset()
    for extra in [k for k in bbbc006_http_session.archives if not k.startswith("BBBC006_v1_")]:
        del bbbc006_http_session.archives[extra]  # archives a test added (e.g. a RealDOF stand-in)
