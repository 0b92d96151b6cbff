"""Import the authors' released DGNO checkpoints into this package's DGNO.

The authors (GitHub ``qiiiiiii523/CC_defocus``, ``third_party/DGNO``, a copy of ``Duane245/DGNO``)
save BasicSR checkpoints ``{"params": state_dict}`` (plus ``"params_ema"`` with EMA on) of their
class ``DGNO``, built from the ``network_g`` block of an option file.  This package computes the
same function with its own module names (``dgno.models.dgno.DGNO``), so importing is a renaming
with three reshapes, checked strictly:

* every tensor of the checkpoint is consumed and every tensor of the network is filled;
* shapes must be equal after the documented reshapes; any mismatch names the key;
* the Face variant's integer buffers ``face_idx_*`` (which boundary row/column forms each face)
  are not weights: they are checked against the indices this package uses, then dropped.

:func:`dgno.checkpoint.import_authors` builds the network, converts a checkpoint with
:func:`convert_state_dict` and writes an ordinary project checkpoint (``{"spec", "state_dict", ...}``)
that ``dgno deblur``, ``dgno evaluate`` and ``dgno lam`` load with :func:`dgno.checkpoint.load_trained`.
The conventions the network follows to compute the authors' function are listed in
:mod:`dgno.models.conventions`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml
from torch import Tensor

from dgno import deprecation
from dgno.data.download import DownloadError, download
from dgno.io import InputError, atomic_path

WEIGHT_KEYS = ("params", "params_ema")
# Settings of the authors' constructor that this package reproduces, with the values it supports.
_FIXED = {"type": "DGNO", "bias": False, "LayerNorm_type": "WithBias", "ffn_expansion_factor": 2.66}
# Accepted and ignored: the authors' constructor takes them but its network does not use them.
_UNUSED = {"num_refinement_blocks", "heads", "train_size", "infer_mode"}
_KNOWN = set(_FIXED) | _UNUSED | {
    "variant",
    "inp_channels",
    "out_channels",
    "dim",
    "num_blocks",
    "learnable_tau",
    "init_tau",
    "flux_mode",
    "boundary_type",
    "win_dg",
    "dual_pixel_task",
}
DG_HEADS = 16  # fixed in the authors' network at every decoder scale


RELEASED = Path(__file__).with_name("authors_networks.yaml")
# The deprecated name of the folder that keeps downloaded checkpoints (<raw_dir>/official, $DGNO_CACHE/official):
# a checkpoint found there is used rather than downloaded again.
DEPRECATED_FOLDER = "official"


def released_networks() -> dict[str, dict[str, Any]]:
    """The ``network_g`` blocks of the six released checkpoints, by name (e.g. DGNO_BBBC006_w1_Face)."""
    return {name: dict(entry["network_g"]) for name, entry in yaml.safe_load(RELEASED.read_text()).items()}


def read_network_options(path: str | Path) -> dict[str, Any]:
    """The ``network_g`` block of an authors' option file (YAML; JSON is YAML too), or of a released
    checkpoint named like its option file (``DGNO_BBBC006_w1_Face``)."""
    released = released_networks()
    if str(path) in released and not Path(path).exists():
        return released[str(path)]
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: option file does not exist. Fix: pass an authors' options/DGNO_*.yml or one of {', '.join(released)}")
    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise InputError(f"{path}: cannot read the option file ({exc}). Fix: pass one of the authors' options/DGNO_*.yml") from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("network_g"), dict):
        raise InputError(f"{path}: no 'network_g' block. Fix: pass one of the authors' options/DGNO_*.yml")
    return dict(doc["network_g"])


def model_from_options(network_g: Mapping[str, Any], *, source: str = "options") -> tuple[str, int, dict[str, Any]]:
    """(registry name, channels, config-level overrides) that rebuild the authors' network.

    Raises ``InputError`` naming the key for any setting this package does not reproduce.
    """
    unknown = sorted(set(network_g) - _KNOWN)
    if unknown:
        raise InputError(f"{source}: network_g has unknown key {unknown[0]!r}. Fix: use an option file of the authors' DGNO")
    for key, value in _FIXED.items():
        if network_g.get(key, value) != value:
            raise InputError(f"{source}: network_g.{key} = {network_g[key]!r} is not supported (the authors' DGNO uses {value!r})")
    if network_g.get("dual_pixel_task", False):
        raise InputError(f"{source}: network_g.dual_pixel_task = true is not supported (no released DGNO uses it)")
    variant = network_g.get("variant", "cell")
    if variant not in ("face", "cell"):
        raise InputError(f"{source}: network_g.variant = {variant!r}; allowed: 'face', 'cell'")
    cin, cout = int(network_g.get("inp_channels", 1)), int(network_g.get("out_channels", 1))
    if cin != cout:
        raise InputError(f"{source}: inp_channels ({cin}) != out_channels ({cout}); this package restores images channel for channel")
    dim = int(network_g.get("dim", 48))
    blocks = [int(b) for b in network_g.get("num_blocks", [2, 4, 6, 2])]
    if len(blocks) != 4:
        raise InputError(f"{source}: network_g.num_blocks needs 4 entries, got {blocks}")
    learnable = bool(network_g.get("learnable_tau", True))
    overrides: dict[str, Any] = {
        "encoder_channels": [dim, 2 * dim, 4 * dim, 8 * dim],
        "encoder_blocks": blocks,
        "decoder_channels": [4 * dim, 2 * dim, dim],
        "heads": DG_HEADS,
        "element_size": int(network_g.get("win_dg", 8)) if variant == "cell" else 8,  # Face: window fixed to 8
        "flux": network_g.get("flux_mode", "central"),
        "boundary": network_g.get("boundary_type", "neumann"),
        "tau": "learnable" if learnable else float(network_g.get("init_tau", 0.25)),
    }
    return f"dgno-{variant}", cin, overrides


# --- key mapping ------------------------------------------------------------------------

Rule = tuple[re.Pattern[str], str, Callable[[Tensor], Tensor] | None]


def _squeeze0(t: Tensor) -> Tensor:
    """(1, a, b) → (a, b): the authors stack the scan projections over one scan direction."""
    if t.dim() < 1 or t.shape[0] != 1:
        raise ValueError(f"expected a leading axis of size 1, got shape {tuple(t.shape)}")
    return t[0]


def _head_norm(t: Tensor) -> Tensor:
    """(h, 1, d) → (h, d): the authors' per-head LayerNorm keeps a broadcast axis."""
    if t.dim() != 3 or t.shape[1] != 1:
        raise ValueError(f"expected shape (heads, 1, head_dim), got {tuple(t.shape)}")
    return t[:, 0]


_BLOCK = r"(?P<block>encoder_level[123]|latent)\.(?P<i>\d+)\."
_LEVEL = {"encoder_level1": "enc1", "encoder_level2": "enc2", "encoder_level3": "enc3", "latent": "enc4"}
_DG = {"conv000": "ops4.0", "conv111": "ops4.1", "conv00": "ops2.0", "conv11": "ops2.1", "conv0": "ops1.0", "conv1": "ops1.1"}
_SCM_CONV = {"0": "0", "1": "2", "2": "4", "3": "6"}  # authors' BasicConv index → conv index in SCM.body


def _rules() -> list[Rule]:
    """(authors' key pattern, this package's key template, reshape) in matching order."""
    block = [
        (r"norm1\.body\.(?P<p>weight|bias)", "norm1.{p}", None),
        (r"norm2\.body\.(?P<p>weight|bias)", "norm2.{p}", None),
        (r"attn\.selectiveScan\.x_proj_weight", "assm.x_proj.weight", _squeeze0),
        (r"attn\.selectiveScan\.dt_projs_weight", "assm.dt_proj.weight", _squeeze0),
        (r"attn\.selectiveScan\.dt_projs_bias", "assm.dt_proj.bias", _squeeze0),
        (r"attn\.selectiveScan\.A_logs", "assm.A_log", None),
        (r"attn\.selectiveScan\.Ds", "assm.D", None),
        (r"attn\.(?P<m>out_norm|out_proj|route\.[02])\.(?P<p>weight|bias)", "assm.{m}.{p}", None),
        (r"attn\.in_proj\.0\.(?P<p>weight|bias)", "assm.in_proj.{p}", None),
        (r"attn\.CPE\.0\.(?P<p>weight|bias)", "assm.cpe.{p}", None),
        (r"attn\.embeddingB\.weight", "assm.prompt_codes", None),
        (r"embeddingA\.weight", "assm.prompt_basis", None),
        (r"ffn\.(?P<m>project_in|dwconv|project_out)\.weight", "gdfn.{m}.weight", None),
    ]
    dg = [
        (r"qkv_proj\.(?P<p>weight|bias)", "qkv.{p}", None),
        (r"out_proj1\.(?P<p>weight|bias)", "mlp.0.{p}", None),
        (r"out_proj2\.(?P<p>weight|bias)", "mlp.2.{p}", None),
        (r"kln\.(?P<p>weight|bias)", "k_norm.{p}", _head_norm),
        (r"vln\.(?P<p>weight|bias)", "v_norm.{p}", _head_norm),
        (r"tau", "tau", None),
    ]
    rules: list[tuple[str, str, Callable[[Tensor], Tensor] | None]] = [
        (r"patch_embed\.proj\.weight", "stem.weight", None),
        *((_BLOCK + pat, "{block}.{i}." + tpl, fn) for pat, tpl, fn in block),
        (r"down(?P<a>[123])_\d\.body\.0\.weight", "down{a}.body.0.weight", None),
        (r"up4_3\.body\.0\.weight", "up4.body.0.weight", None),
        (r"up3_2\.body\.0\.weight", "up2.body.0.weight", None),
        (r"up2_1\.body\.0\.weight", "up1.body.0.weight", None),
        (r"reduce_chan_level3\.weight", "reduce4.weight", None),
        (r"reduce_chan_level2\.weight", "reduce2.weight", None),
        (r"reduce_chan_level1\.weight", "reduce1.weight", None),
        (r"output\.weight", "head1.weight", None),
        (r"ConvsOut\.0\.main\.0\.(?P<p>weight|bias)", "head4.{p}", None),
        (r"ConvsOut\.1\.main\.0\.(?P<p>weight|bias)", "head2.{p}", None),
        (r"FAM1\.merge\.main\.0\.(?P<p>weight|bias)", "fam4.merge.{p}", None),
        (r"FAM2\.merge\.main\.0\.(?P<p>weight|bias)", "fam2.merge.{p}", None),
        (r"SCM(?P<s>[12])\.main\.(?P<c>[0-3])\.main\.0\.(?P<p>weight|bias)", "scm{s}.body.{c}.{p}", None),
        (r"SCM(?P<s>[12])\.main\.4\.(?P<p>weight|bias)", "scm{s}.body.7.{p}", None),
        *((r"(?P<dg>conv0{0,3}|conv1{1,3})\." + pat, "{dg}." + tpl, fn) for pat, tpl, fn in dg),
    ]
    return [(re.compile(pat + r"$"), tpl, fn) for pat, tpl, fn in rules]


_RULES = _rules()
_FACE_INDEX = re.compile(r"(?P<dg>conv0{0,3}|conv1{1,3})\.face_idx_(?P<side>left|right|top|bottom)$")


def _target_key(match: re.Match[str], template: str) -> str:
    """Fill ``template`` from the match, translating the authors' module names to this package's."""
    groups = dict(match.groupdict())
    if "block" in groups:
        groups["block"] = _LEVEL[groups["block"]]
    if "dg" in groups:
        groups["dg"] = _DG[groups["dg"]]
    if "s" in groups:  # SCM1 feeds the 1/4 level, SCM2 the 1/2 level
        groups["s"] = {"1": "4", "2": "2"}[groups["s"]]
    if "c" in groups:
        groups["c"] = _SCM_CONV[groups["c"]]
    return template.format(**groups)


def face_indices(p: int) -> dict[str, Tensor]:
    """Row-major pixel indices of the four faces of a p×p element (the authors' face_idx_* buffers)."""
    idx = torch.arange(p * p).reshape(p, p)
    return {"left": idx[:, 0], "right": idx[:, -1], "top": idx[0], "bottom": idx[-1]}


def convert_state_dict(theirs: Mapping[str, Tensor], expected: Mapping[str, Tensor], *, element_size: int = 8) -> dict[str, Tensor]:
    """The authors' state dict renamed and reshaped to this package's keys, checked strictly.

    ``expected`` is the target network's own ``state_dict()`` (for the key set and shapes).
    Raises ``ValueError`` naming the first key that is unknown, missing, or of another shape.
    """
    out: dict[str, Tensor] = {}
    faces = face_indices(element_size)
    for key, value in theirs.items():
        face = _FACE_INDEX.match(key)
        if face:
            if not torch.equal(value.cpu().long(), faces[face["side"]]):
                raise ValueError(f"{key}: face indices {value.tolist()} differ from the {element_size}x{element_size} element's {face['side']} face")
            continue
        rule = next(((m, template, reshape) for pattern, template, reshape in _RULES if (m := pattern.match(key))), None)
        if rule is None:
            raise ValueError(f"{key}: not a tensor of the authors' DGNO (no rule maps it)")
        match, template, reshape = rule
        target = _target_key(match, template)
        if target not in expected:
            raise ValueError(f"{key}: maps to {target!r}, which this network does not have (check the option file: dim, num_blocks, variant, flux_mode)")
        try:
            tensor = reshape(value) if reshape else value
        except ValueError as exc:
            raise ValueError(f"{key}: {exc}") from exc
        if tuple(tensor.shape) != tuple(expected[target].shape):
            raise ValueError(f"{key}: shape {tuple(value.shape)} does not fit {target!r} {tuple(expected[target].shape)} (check dim / inp_channels in the option file)")
        if target in out:
            raise ValueError(f"{key}: a second tensor for {target!r}")
        out[target] = tensor.to(expected[target].dtype)
    missing = [k for k in expected if k not in out]
    if missing:
        raise ValueError(f"checkpoint lacks {len(missing)} tensor(s) of the network, first {missing[0]!r} (check num_blocks / flux_mode / learnable_tau in the option file)")
    return out


def load_authors_state(path: str | Path, *, weights: str = "params") -> dict[str, Tensor]:
    """The state dict under ``weights`` ("params" or "params_ema") of a BasicSR checkpoint.

    Loaded with ``weights_only=True``: a checkpoint is data, and unpickling arbitrary objects
    would run code from the file.
    """
    path = Path(path)
    if weights not in WEIGHT_KEYS:
        raise InputError(f"weights {weights!r}; allowed: {', '.join(map(repr, WEIGHT_KEYS))}")
    try:
        blob = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError as exc:
        raise InputError(f"{path}: checkpoint does not exist. Fix: download the authors' checkpoint or check the path") from exc
    except Exception as exc:  # noqa: BLE001  (unpickling errors have many types)
        raise InputError(f"{path}: not a loadable tensor checkpoint ({type(exc).__name__}: {exc}). Fix: re-download it") from exc
    if isinstance(blob, dict) and weights in blob and isinstance(blob[weights], Mapping):
        return dict(blob[weights])
    keys = sorted(blob) if isinstance(blob, dict) else type(blob).__name__
    raise InputError(f"{path}: no {weights!r} state dict inside (found {keys}). Fix: pass a BasicSR checkpoint of the authors' DGNO or choose --weights")


def regenerate_state_dict(recipe: Mapping[str, Any]) -> dict[str, Tensor]:
    """The authors'-format state dict that a ``weights.json`` recipe describes, bit for bit.

    The reference fixtures (``tests/fixtures/authors``, format in their README) ship weights as a
    recipe rather than as checkpoints: seeded normal draws for the large tensors, listed values for the
    rest. Rebuilding them here, in the order the recipe lists, gives the same bytes on every machine, so
    a checkpoint made from it is the one the authors' network ran on.
    """
    state = {}
    for t in recipe["tensors"]:
        init, shape = t["init"], tuple(t["shape"])
        if init["kind"] == "normal":
            x = np.random.default_rng(init["seed"]).standard_normal(size=shape)
            x = (x * init["std"] + init["mean"]).astype(np.float32)
        elif t["dtype"] == "int64":
            x = np.asarray(init["values"], dtype=np.int64).reshape(shape)
        else:
            x = np.asarray(init["values"], dtype=np.float64).astype(np.float32).reshape(shape)
        state[t["key"]] = torch.from_numpy(np.array(x, copy=True))  # (ascontiguousarray would make 0-d tensors 1-d)
    return state


def adopt_deprecated_copy(dest: str | Path) -> bool:
    """Put the checkpoint kept under the folder's deprecated name (:data:`DEPRECATED_FOLDER`, beside
    ``dest``'s folder) at ``dest``, hard-linked or else copied, saying so once; False when there is none.

    Read rather than downloaded again: a released checkpoint is tens of megabytes, and a copy placed by
    hand there may be the only one a machine without network access has.
    """
    dest = Path(dest)
    old = dest.parent.parent / DEPRECATED_FOLDER / dest.name
    if dest.exists() or not old.is_file():
        return False
    deprecation.renamed("folder", str(old.parent), str(dest.parent))  # once per folder, however many files it holds
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(old, dest)
    except OSError:  # another file system, or one without hard links
        with atomic_path(dest) as tmp:
            tmp.write_bytes(old.read_bytes())
    return True


def fetch_authors_checkpoint(url: str, dest: str | Path, *, retries: int = 4, sha256: str | None = None) -> Path:
    """Download one released checkpoint to ``dest`` (resumable, verified), or fail with instructions.

    The download is accepted only if it loads as a tensor checkpoint with a ``params`` state dict;
    anything else (an HTML error page, a truncated file) is rejected and deleted. A copy under the
    folder's deprecated name is checked the same way instead of downloading (:func:`adopt_deprecated_copy`).
    """
    dest = Path(dest)
    adopt_deprecated_copy(dest)

    def check(part: Path) -> None:
        load_authors_state(part, weights="params")

    try:
        return download(url, dest, sha256=sha256, retries=retries, check=check)
    except (DownloadError, InputError) as exc:
        raise InputError(
            f"{dest}: could not download the authors' checkpoint from {url} ({exc}). Fix: download it by hand on a "
            f"machine with network access and place it at {dest.resolve()} (folder {dest.parent.resolve()}), then re-run"
        ) from exc
