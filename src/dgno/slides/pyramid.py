"""Writing a tiled pyramidal OME-TIFF from a stream of tiles: level 0 is never in memory.

Layout: OME-TIFF with the reduced levels in SubIFDs (the OME pyramid, what QuPath/Bio-Formats and
tifffile read), 512-px tiles, BigTIFF when the data could pass 4 GB, the input's dtype and channels:
RGB(A) as one interleaved page, one grey channel as one page, several channels as one page per
channel (OME ``CYX``). Physical pixel size goes into the OME ``PhysicalSizeX/Y`` and into every
level's TIFF resolution tags (what OpenSlide reports as ``openslide.mpp-x/y``). Lossless by default
(deflate with the horizontal predictor); ``jpeg`` for 8-bit RGB.

OpenSlide does not follow SubIFDs: it takes a generic TIFF's pyramid from the chain of top-level
pages. When level 0 is one page (RGB(A) or one grey channel), each reduced level's IFD is therefore
also appended to that chain, as a copy of its directory entries that points at the same tile data
(a few hundred bytes per level, no pixel stored twice). OME readers go by the OME-XML, which names
only page 0, so they still see one image with SubIFD levels.

Streaming: tifffile takes each level as a generator of tiles in its order (channel by channel, then
row by row). Every level-k tile that goes out is also reduced 2× (the mean of each 2×2 block, rounded
to nearest for integers) into one quarter of a tile of level k+1, kept on disk in a raw store of
256-px blocks beside the output; level k+1 is then written from that store. Memory holds a few tiles
whatever the slide's size.

Determinism: no time stamp is written, the OME UUID is derived from the caller's key, compression is
deterministic, so the same tiles give the same bytes (a resumed run equals an uninterrupted one).
"""

from __future__ import annotations

import os
import struct
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tifffile

from dgno.choices import check_choice
from dgno.slides.grid import to_dtype

OUT_TILE = 512
COMPRESSIONS = ("zlib", "lzw", "jpeg", "none")
TileSource = Callable[[int, int, int], np.ndarray]  # (plane, tile row, tile col) → (h, w, samples)


@dataclass(frozen=True)
class OutputLayout:
    """What the output holds: level-0 size, dtype, photometric ("rgb", "rgba", "grey", "channels"), channel names, µm/px."""

    height: int
    width: int
    dtype: np.dtype
    photometric: str
    channel_names: tuple[str, ...]
    mpp: tuple[float, float] | None

    @property
    def planes(self) -> list[tuple[int, ...]]:
        """Slide channels per written page: all together for RGB(A), one each otherwise."""
        n = len(self.channel_names)
        return [tuple(range(n))] if self.photometric in ("rgb", "rgba") else [(c,) for c in range(n)]

    def level_sizes(self) -> list[tuple[int, int]]:
        """(h, w) of each level: halved (rounded up) until the long side fits one tile."""
        sizes = [(self.height, self.width)]
        while max(sizes[-1]) > OUT_TILE:
            h, w = sizes[-1]
            sizes.append(((h + 1) // 2, (w + 1) // 2))
        return sizes


def reduce2(tile: np.ndarray) -> np.ndarray:
    """(h, w, S) → (ceil(h/2), ceil(w/2), S): 2×2 block means, an odd last row/column paired with itself."""
    h, w = tile.shape[:2]
    if h % 2 or w % 2:
        tile = np.pad(tile, ((0, h % 2), (0, w % 2), (0, 0)), mode="edge")
    exact = np.float64 if tile.dtype.itemsize >= 4 else np.float32
    t = tile.astype(exact)
    mean = (t[0::2, 0::2] + t[1::2, 0::2] + t[0::2, 1::2] + t[1::2, 1::2]) / 4
    return to_dtype(mean, tile.dtype)


class _LevelStore:
    """A level kept on disk as 256-px blocks (quarters of its 512-px tiles), written and read by offset."""

    def __init__(self, path: Path, size: tuple[int, int], samples: int, dtype: np.dtype) -> None:
        self.path, self.size, self.samples, self.dtype = path, size, samples, np.dtype(dtype)
        self.half = OUT_TILE // 2
        self.across = -(-size[1] // OUT_TILE)
        self.block_bytes = self.half * self.half * samples * self.dtype.itemsize
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)

    def _offset(self, i: int, j: int, q: int) -> int:
        return ((i * self.across + j) * 4 + q) * self.block_bytes

    def put(self, i: int, j: int, q: int, block: np.ndarray) -> None:
        full = np.zeros((self.half, self.half, self.samples), self.dtype)
        full[: block.shape[0], : block.shape[1]] = block
        data = full.tobytes()
        if os.pwrite(self.fd, data, self._offset(i, j, q)) != len(data):
            raise OSError(f"short write to {self.path}")

    def tile(self, i: int, j: int) -> np.ndarray:
        """Tile (i, j) of this level, cropped to the level's border."""
        h, w = min(OUT_TILE, self.size[0] - i * OUT_TILE), min(OUT_TILE, self.size[1] - j * OUT_TILE)
        out = np.empty((h, w, self.samples), self.dtype)
        for q in range(4):
            qy, qx = divmod(q, 2)
            y0, x0 = qy * self.half, qx * self.half
            if y0 >= h or x0 >= w:
                continue
            raw = os.pread(self.fd, self.block_bytes, self._offset(i, j, q))
            block = np.frombuffer(raw, self.dtype).reshape(self.half, self.half, self.samples)
            out[y0 : y0 + self.half, x0 : x0 + self.half] = block[: h - y0, : w - x0]
        return out

    def close(self) -> None:
        os.close(self.fd)
        self.path.unlink(missing_ok=True)


def _ome_metadata(layout: OutputLayout, key: str) -> dict:
    axes = {"rgb": "YXS", "rgba": "YXS", "grey": "YX"}.get(layout.photometric, "CYX")
    meta: dict = {"axes": axes, "UUID": f"urn:uuid:{uuid.uuid5(uuid.NAMESPACE_URL, 'dgno-slide:' + key)}", "Creator": "dgno deblur-slide"}
    if layout.mpp:
        meta.update(PhysicalSizeX=layout.mpp[0], PhysicalSizeXUnit="µm", PhysicalSizeY=layout.mpp[1], PhysicalSizeYUnit="µm")
    if axes != "YXS":
        meta["Channel"] = {"Name": list(layout.channel_names)}
    return meta


def _options(layout: OutputLayout, compression: str, level: int, workers: int) -> dict:
    """tifffile.write keywords of one level (its resolution scaled by 2^level)."""
    samples = len(layout.channel_names) if layout.photometric in ("rgb", "rgba") else 1
    # tifffile compresses `buffersize` bytes of tiles at a time with several workers (by default 512 MB:
    # a whole level of a small slide); four tiles per worker keep the workers busy and memory flat.
    buffer = 4 * max(1, workers) * OUT_TILE * OUT_TILE * samples * layout.dtype.itemsize
    opts: dict = {"tile": (OUT_TILE, OUT_TILE), "dtype": layout.dtype, "maxworkers": workers, "buffersize": buffer}
    if layout.photometric in ("rgb", "rgba"):
        opts["photometric"] = "rgb"
        if layout.photometric == "rgba":
            opts["extrasamples"] = ("unassalpha",)
    else:
        opts["photometric"] = "minisblack"
    if compression == "zlib":
        opts.update(compression="zlib", predictor=True)
    elif compression == "lzw":
        opts.update(compression="lzw", predictor=True)
    elif compression == "jpeg":
        opts.update(compression="jpeg", compressionargs={"level": 90})
    if layout.mpp:
        sizes = layout.level_sizes()
        fy, fx = layout.height / sizes[level][0], layout.width / sizes[level][1]
        opts.update(resolution=(1e4 / (layout.mpp[0] * fx), 1e4 / (layout.mpp[1] * fy)), resolutionunit="CENTIMETER")
    return opts


def _series_shape(layout: OutputLayout, size: tuple[int, int]) -> tuple[int, ...]:
    n = len(layout.channel_names)
    return (*size, n) if layout.photometric in ("rgb", "rgba") else (size if n == 1 else (n, *size))


def tile_count(layout: OutputLayout) -> int:
    """How many tiles the pyramid of ``layout`` holds, over every level and written page."""
    return len(layout.planes) * sum(-(-h // OUT_TILE) * -(-w // OUT_TILE) for h, w in layout.level_sizes())


def write_pyramid(
    path: Path, layout: OutputLayout, source: TileSource, *, scratch: Path, compression: str = "zlib", key: str = "", workers: int = 2, written: Callable[[], None] | None = None
) -> None:
    """Write the OME-TIFF pyramid of the level-0 tiles ``source(plane, i, j)`` to ``path`` (module docstring).

    ``scratch``: a folder for the reduced levels' stores (removed blocks, not the folder). ``key``:
    determines the OME UUID (same key, same bytes). ``written``: called once per tile handed to the
    writer, of every level (:func:`tile_count` in all), for a progress indication.
    """
    check_choice("compression", compression, COMPRESSIONS)
    if compression == "jpeg" and not (layout.photometric == "rgb" and layout.dtype == np.uint8):
        raise ValueError(f"compression='jpeg' needs 8-bit RGB, got {layout.photometric} {layout.dtype}")
    sizes = layout.level_sizes()
    raw_bytes = sum(h * w for h, w in sizes) * len(layout.channel_names) * layout.dtype.itemsize
    planes = layout.planes
    open_stores: list[_LevelStore] = []
    with tifffile.TiffWriter(path, bigtiff=raw_bytes > 2**32 - 2**28, ome=True) as tw:
        try:
            held: list[_LevelStore] | None = None  # the stores of the level being written (None for level 0)
            for level, size in enumerate(sizes):
                below = None
                if level + 1 < len(sizes):
                    below = [_LevelStore(scratch / f"level{level + 1}-plane{p}.raw", sizes[level + 1], len(pl), layout.dtype) for p, pl in enumerate(planes)]
                    open_stores.extend(below)
                read = source if held is None else _store_reader(held)
                tiles = _tiles(read, size, len(planes), below, squeeze=layout.photometric not in ("rgb", "rgba"), written=written)
                extra = {"subifds": len(sizes) - 1, "metadata": _ome_metadata(layout, key)} if level == 0 else {"subfiletype": 1, "metadata": None}
                tw.write(tiles, shape=_series_shape(layout, size), **_options(layout, compression, level, workers), **extra)
                for store in held or []:
                    store.close()
                    open_stores.remove(store)
                held = below
        finally:
            for store in open_stores:
                store.close()
    if len(planes) == 1:
        chain_reduced_levels(path)


def chain_reduced_levels(path: Path) -> int:
    """Append a copy of each SubIFD directory of page 0 to the top-level page chain; return how many.

    The copies keep every entry as written, so out-of-line values (tile offsets, byte counts,
    resolution) point at the SubIFDs' own data. Directories sizes are even (2 + 12 n + 4 bytes, or
    8 + 20 n + 8 in BigTIFF), so aligning the first copy keeps every copy on a word boundary.
    """
    with tifffile.TiffFile(path) as tf:
        if len(tf.pages) != 1 or not tf.pages[0].subifds:
            return 0
        fmt, first, subifds = tf.tiff, tf.pages[0].offset, list(tf.pages[0].subifds)
    with open(path, "r+b") as fh:
        directories = [_directory(fh, fmt, offset) for offset in [first, *subifds]]
        end = fh.seek(0, os.SEEK_END)
        start = end + end % 2
        sizes = [fmt.tagnosize + len(raw) + fmt.offsetsize for _, raw in directories[1:]]
        offsets = [start + sum(sizes[:k]) for k in range(len(sizes))]
        chain = b"\0" * (start - end)
        for k, (count, raw) in enumerate(directories[1:]):
            following = offsets[k + 1] if k + 1 < len(offsets) else 0
            chain += struct.pack(fmt.tagnoformat, count) + raw + struct.pack(fmt.offsetformat, following)
        fh.write(chain)
        fh.seek(first + fmt.tagnosize + len(directories[0][1]))  # page 0's "next directory" field
        fh.write(struct.pack(fmt.offsetformat, offsets[0]))
    return len(subifds)


def _directory(fh, fmt, offset: int) -> tuple[int, bytes]:
    """(entry count, raw entries) of the TIFF directory at ``offset``."""
    fh.seek(offset)
    count = struct.unpack(fmt.tagnoformat, fh.read(fmt.tagnosize))[0]
    return count, fh.read(count * fmt.tagsize)


def _store_reader(stores: list[_LevelStore]) -> TileSource:
    return lambda p, i, j: stores[p].tile(i, j)


def _tiles(read: TileSource, size: tuple[int, int], n_planes: int, below: list[_LevelStore] | None, *, squeeze: bool, written: Callable[[], None] | None) -> Iterator[np.ndarray]:
    """Tiles of one level in tifffile's order, each also reduced into the next level's store."""
    rows, cols = -(-size[0] // OUT_TILE), -(-size[1] // OUT_TILE)
    for p in range(n_planes):
        for i in range(rows):
            for j in range(cols):
                tile = read(p, i, j)
                if below is not None:
                    below[p].put(i // 2, j // 2, (i % 2) * 2 + (j % 2), reduce2(tile))
                if written is not None:  # before the yield: tifffile stops asking once it has a level's last tile
                    written()
                yield tile[..., 0] if squeeze else tile
