"""The authors' released checkpoints on a user's own images (``dgno deblur --authors NAME``).

A released checkpoint (Hugging Face ``Duane245/DGNO``, ``pretrained/<NAME>.pth``) is downloaded once
into a cache folder, imported once into a project ``model.pt`` (:func:`dgno.checkpoint.import_authors`)
and then restored with, by default, the authors' tile protocol: 512-px tiles, 32 px overlap, linear
cross-fade. The cache is ``$DGNO_CACHE/authors`` (default ``$XDG_CACHE_HOME/dgno/authors``, else
``~/.cache/dgno/authors``); ``$DGNO_AUTHORS_URL`` replaces the release's base URL (a mirror, a
loopback server in the tests). The variable's deprecated name (:data:`DEPRECATED_URL_ENV`) and
checkpoints in the cache folder's deprecated name (:func:`dgno.models.authors.adopt_deprecated_copy`)
are still read, each with a one-line notice (:mod:`dgno.deprecation`).

``dgno deblur --checkpoint FILE`` takes either a project ``model.pt`` or an authors' ``.pth``; which
one is read from the file (:func:`checkpoint_kind`). An authors' file is imported into the same
cache, keyed by its checksum, so a second run reuses the import.

Intensities: the authors trained their BBBC006 networks (1 channel) on images normalised by each
image's own minimum and maximum, and their 3DHistech networks (RGB) on 8-bit values / 255; the
imported model file records it (``"normalise"``) and the restoration follows it, mapping the result
back to the input's range and dtype (``dgno.inference.normalisation``).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from dgno import deprecation
from dgno.checkpoint import check_model_path, import_authors, released_normalisation
from dgno.data.download import sha256_file
from dgno.io import InputError
from dgno.models.authors import adopt_deprecated_copy, fetch_authors_checkpoint, read_network_options, released_networks

RELEASE_URL = "https://huggingface.co/Duane245/DGNO/resolve/main/pretrained/"
CACHE_ENV, URL_ENV = "DGNO_CACHE", "DGNO_AUTHORS_URL"
DEPRECATED_URL_ENV = "DGNO_OFFICIAL_URL"  # read when URL_ENV is not set
AUTHORS_TILES = {"tile": 512, "overlap": 32, "blend": "crossfade"}  # their BBBC006 test network's tiling


@dataclass(frozen=True)
class Restoration:
    """A model file to restore with and how: tiles, normalisation, whether channels must match exactly."""

    model: Path
    name: str
    tile: int | None = 512
    overlap: int = 64
    blend: str = "ramp"
    normalise: str | None = None  # "minmax" or "dtype" (dgno.inference.normalisation); None: as the model file records
    strict_channels: bool = False
    channels: int | None = None


def cache_dir() -> Path:
    """Where released checkpoints and their imports are kept (module docstring)."""
    root = os.environ.get(CACHE_ENV) or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "dgno"
    return Path(root) / "authors"


def release_url() -> str:
    """The released checkpoints' base URL: ``$DGNO_AUTHORS_URL``, its deprecated name, else the release's."""
    if os.environ.get(URL_ENV):
        return os.environ[URL_ENV]
    if os.environ.get(DEPRECATED_URL_ENV):
        deprecation.renamed("environment", f"${DEPRECATED_URL_ENV}", f"${URL_ENV}")
        return os.environ[DEPRECATED_URL_ENV]
    return RELEASE_URL


def checkpoint_kind(path: str | Path) -> str:
    """"dgno" for a project model.pt (model spec + state dict), "authors" for a BasicSR .pth (``params``)."""
    path = Path(path)
    check_model_path(path, missing_fix="check the path, or use --authors NAME to download a released one")
    try:
        blob = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - unpickling errors have many types
        raise InputError(f"{path}: not a loadable tensor checkpoint ({type(exc).__name__}). Fix: re-download or re-copy it") from exc
    if isinstance(blob, dict) and "spec" in blob and "state_dict" in blob:
        return "dgno"
    if isinstance(blob, dict) and ("params" in blob or "params_ema" in blob):
        return "authors"
    keys = sorted(blob)[:5] if isinstance(blob, dict) else type(blob).__name__
    raise InputError(
        f"{path}: not a dgno model file (no model spec inside) nor an authors' DGNO checkpoint (no 'params'); found {keys}. "
        "Fix: pass a model.pt written by dgno train / import-authors, or a .pth of the authors"
    )


def _imported(pth: Path, options: str | Path, name: str, cache: Path) -> Path:
    """The project model.pt of an authors' checkpoint, imported once per (checkpoint bytes, network options)."""
    network = json.dumps(read_network_options(options), sort_keys=True)
    key = hashlib.sha256(f"{sha256_file(pth)}:{network}".encode()).hexdigest()[:16]
    out = cache / f"{name}.{key}.pt"
    if not out.exists():
        print(f"importing {pth} ({name}) → {out}")
        import_authors(pth, options, out)
    return out


def _restoration(model: Path, name: str, options: str | Path) -> Restoration:
    channels = int(read_network_options(options).get("inp_channels", 1))
    # The import records it too; naming it here also serves cached imports whose model file lacks the key.
    normalise = released_normalisation(channels)
    return Restoration(model, name, normalise=normalise, strict_channels=True, channels=channels, **AUTHORS_TILES)


def released(name: str, *, options: str | Path | None = None, cache: str | Path | None = None, url: str | None = None, retries: int = 4) -> Restoration:
    """A released checkpoint by name: downloaded once into the cache, imported once, restored as the authors do."""
    known = released_networks()
    if name not in known and options is None:
        raise InputError(f"--authors {name}: not a released checkpoint; released: {', '.join(known)}. Fix: use one of those names, or --checkpoint FILE.pth --options FILE.yml")
    cache = Path(cache) if cache is not None else cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    pth = cache / f"{name}.pth"
    if not pth.exists() and not adopt_deprecated_copy(pth):
        base = url or release_url()
        print(f"downloading {name} once into {cache} (set {CACHE_ENV} to keep it elsewhere)")
        fetch_authors_checkpoint(base.rstrip("/") + f"/{name}.pth", pth, retries=retries)
    return _restoration(_imported(pth, options or name, name, cache), name, options or name)


def local(path: str | Path, *, options: str | Path | None = None, cache: str | Path | None = None) -> Restoration:
    """``--checkpoint FILE``: a project model.pt as it is, or an authors' .pth imported into the cache."""
    path = Path(path)
    if checkpoint_kind(path) == "dgno":
        if options is not None:
            raise InputError(f"{path}: a dgno model file, which holds its network; --options {options} is for an authors' .pth checkpoint. Fix: leave out --options")
        return Restoration(path, path.name)
    name = path.stem
    if options is None and name not in released_networks():
        raise InputError(
            f"{path}: an authors' checkpoint whose name is not one of the released ones ({', '.join(released_networks())}), "
            "so its network is unknown. Fix: pass --options with its option file (options/DGNO_*.yml)"
        )
    cache = Path(cache) if cache is not None else cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    return _restoration(_imported(path, options or name, name, cache), name, options or name)
