"""Compiled CPU kernels for inference (``native_kernels.c``): built at first use, loaded with ctypes.

Two operations where PyTorch's CPU kernels leave most of the machine idle:

* the selective scan: the PyTorch scans of this package keep the (tokens × channels × states) array of
  all states in memory, block by block; the kernel keeps a block of channels' states in vector
  registers and reads every input once, so the scan costs a few multiply-adds and one exponential per
  state and token;
* the depth-wise k×k convolution on channels-last maps (the GDFN's and the ASSM's 3×3 convolutions):
  oneDNN's depth-wise kernel ran at about 1 GFLOP/s on the odd channel counts of these blocks.

Both are inference only (no gradient) and float32 only; ``dgno.inference.engines`` puts them in place.

Building needs a C compiler (``$CC``, else ``cc``, ``gcc`` or ``clang`` on the PATH); nothing else: no
Python headers, no build system.  The library is compiled for the machine it runs on (``-march=native``)
and cached in ``$DGNO_CACHE/kernels`` (default ``~/.cache/dgno/kernels``) under a name that holds the
digest of the source, the compiler and the CPU, so a changed source, compiler or machine builds anew.
Where no compiler works, :func:`unavailable_reason` says why and callers use the PyTorch scan.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

SOURCE = Path(__file__).with_name("native_kernels.c")
MAX_STATE = 64  # MAX_STATE in native_kernels.c
FLAGS = ("-O3", "-march=native", "-fno-math-errno", "-shared", "-fPIC", "-Wno-psabi")


def cache_dir() -> Path:
    """Where compiled kernels are kept: ``$DGNO_CACHE/kernels``, default ``~/.cache/dgno/kernels``."""
    root = os.environ.get("DGNO_CACHE") or Path.home() / ".cache" / "dgno"
    return Path(root) / "kernels"


def find_compiler() -> str | None:
    """``$CC`` if set, else the first of cc, gcc, clang on the PATH."""
    if os.environ.get("CC"):
        return os.environ["CC"]
    return next((c for c in ("cc", "gcc", "clang") if shutil.which(c)), None)


def _cpu_key() -> str:
    """What -march=native depends on: the CPU's model and flags (Linux), else the platform's description."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() + platform.machine()
    lines = [ln for ln in text.splitlines() if ln.startswith(("model name", "flags"))]
    return "\n".join(sorted(set(lines)))


@functools.lru_cache(maxsize=1)
def _build() -> tuple[ctypes.CDLL | None, str]:
    """(library, "") or (None, why it is unavailable); built once per process, cached on disk."""
    cc = find_compiler()
    if cc is None:
        return None, "no C compiler found (set CC, or install gcc or clang)"
    try:
        version = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"the C compiler {cc!r} does not run ({exc})"
    digest = hashlib.sha256("\0".join([SOURCE.read_text(), version, _cpu_key(), *FLAGS]).encode()).hexdigest()[:16]
    target = cache_dir() / f"native_kernels-{digest}.so"
    if not target.exists():
        error = _compile(cc, target)
        if error:
            return None, error
    try:
        lib = ctypes.CDLL(str(target))
    except OSError as exc:
        return None, f"the compiled kernel {target} does not load ({exc})"
    ptr, i64 = ctypes.c_void_p, ctypes.c_int64
    lib.dgno_scan_f32.argtypes = [ptr] * 8 + [i64] * 8 + [ctypes.c_int]
    lib.dgno_scan_f32.restype = ctypes.c_int
    lib.dgno_depthwise_f32.argtypes = [ptr] * 4 + [i64] * 6
    lib.dgno_depthwise_f32.restype = None
    lib.dgno_depthwise_sigmoid_f32.argtypes = [ptr] * 5 + [i64] * 6
    lib.dgno_depthwise_sigmoid_f32.restype = ctypes.c_int
    lib.dgno_lanes.argtypes, lib.dgno_lanes.restype = [], ctypes.c_int
    lib.dgno_gemm_f32.argtypes = [ptr, i64, ptr, ptr, ptr] + [i64] * 4
    lib.dgno_gemm_f32.restype = None
    lib.dgno_panel.argtypes, lib.dgno_panel.restype = [], ctypes.c_int
    lib.dgno_dg_cut_f32.argtypes = [ptr] + [i64] * 6 + [ptr] * 4 + [ctypes.c_float] + [ptr] * 3 + [i64] * 2
    lib.dgno_dg_cut_f32.restype = None
    lib.dgno_dg_apply_f32.argtypes = [ptr] * 4 + [i64] * 8
    lib.dgno_dg_apply_f32.restype = None
    lib.dgno_gdfn_f32.argtypes = [ptr] * 6 + [i64] * 7
    lib.dgno_gdfn_f32.restype = None
    return lib, ""


def lanes() -> int:
    """Channels per register block of the compiled scan (its LANES: 16 with AVX-512, else 8); the scan's
    channels are padded to a multiple of it."""
    lib = _lib()
    return int(lib.dgno_lanes())


def _compile(cc: str, target: Path) -> str:
    """Compile SOURCE to ``target`` (atomically: a temporary file, then a rename); returns "" or the error."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)
    os.close(fd)
    try:
        proc = subprocess.run([cc, *FLAGS, str(SOURCE), "-o", tmp], capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            return f"compiling the scan kernel with {cc} failed: {proc.stderr.strip().splitlines()[-1:] or proc.returncode}"
        os.replace(tmp, target)
        return ""
    except (OSError, subprocess.SubprocessError) as exc:
        return f"compiling the scan kernel with {cc} failed ({exc})"
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def available() -> bool:
    """True when the kernel is compiled (or compiles now) and loads."""
    return _build()[0] is not None


def unavailable_reason() -> str:
    """Why the kernel cannot be used ("" when it can)."""
    return _build()[1]


@functools.lru_cache(maxsize=4)
def _pool(threads: int) -> ThreadPoolExecutor:
    """Threads that run kernel calls side by side (ctypes releases the GIL during a call)."""
    return ThreadPoolExecutor(max_workers=threads, thread_name_prefix="dgno-scan")


def selective_scan_native(u, delta, A, B, C, D, delta_bias, delta_softplus: bool) -> Tensor:
    """y (b, d, L) of the selective scan with the compiled kernel; arguments as ``selective_scan``, B and C
    as (b, G, N, L), all float32 CPU tensors, no gradient.

    The inputs are copied once into the kernel's layout: token-major, channels padded to a multiple of
    :func:`lanes` (padded channels have u = 0, so their state stays 0 and their output is dropped).  The work is
    split into equal channel ranges over ``torch.get_num_threads()`` threads.
    """
    lib = _lib()
    b, d, L = u.shape
    g, n = B.shape[1], B.shape[2]
    if n > MAX_STATE:
        raise ValueError(f"the native scan kernel handles up to {MAX_STATE} states, got {n}")
    per_group = d // g
    block = lanes()
    pad = (-per_group) % block  # pad each group's channels, so a block never straddles two groups
    dp = (per_group + pad) * g

    def channels(x: Tensor) -> Tensor:  # (..., d) → (..., dp), contiguous (no copy when it already is)
        if pad:
            x = F.pad(x.unflatten(-1, (g, per_group)), (0, pad)).flatten(-2)
        return x.contiguous()

    ut, xt = channels(u.transpose(1, 2)), channels(delta.transpose(1, 2))  # (b, L, dp)
    At = channels(A.t()).t().contiguous()  # (dp, N)
    Bt, Ct = (x.permute(0, 3, 1, 2).contiguous() for x in (B, C))  # (b, L, G, N)
    Dp = None if D is None else channels(D)
    bias = None if delta_bias is None else channels(delta_bias)
    y = torch.empty_like(ut)
    jobs = _split(b, dp, torch.get_num_threads(), block)

    def run(job: tuple[int, int, int]) -> int:
        i, c0, c1 = job
        return lib.dgno_scan_f32(
            ut[i].data_ptr(), xt[i].data_ptr(), At.data_ptr(), Bt[i].data_ptr(), Ct[i].data_ptr(),
            None if Dp is None else Dp.data_ptr(), None if bias is None else bias.data_ptr(), y[i].data_ptr(),
            L, dp, n, g, dp, g * n, c0, c1, int(delta_softplus),
        )  # fmt: skip

    codes = _run_jobs(run, jobs)
    if any(codes):
        raise RuntimeError(f"the native scan kernel refused its arguments (code {max(codes)})")
    y = y.unflatten(-1, (g, per_group + pad))[..., :per_group].flatten(-2)  # (b, L, d)
    return y.transpose(1, 2)


def _split(batch: int, channels: int, threads: int, block: int) -> list[tuple[int, int, int]]:
    """(sequence, c0, c1) jobs: every sequence's ``block``-channel blocks dealt into about ``threads`` equal
    ranges per sequence (whole sequences when there are at least as many as threads)."""
    blocks = channels // block
    per_seq = max(1, min(blocks, -(-threads // batch)))
    size = -(-blocks // per_seq)
    return [(i, k * block, min(blocks, k + size) * block) for i in range(batch) for k in range(0, blocks, size)]


def depthwise_conv_native(x: Tensor, weight: Tensor, bias: Tensor | None, *, sigmoid_gate: bool = False) -> Tensor:
    """Depth-wise k×k convolution, stride 1, zero padding k // 2: x (B, C, H, W), weight (C, 1, k, k), bias (C,).

    With ``sigmoid_gate``, x ⊙ σ(conv) (the ASSM's positional gate) in the same pass, the convolution never
    written out; C must then be a multiple of :func:`lanes`.  Returns a channels-last (B, C, H, W) tensor (a
    view of (B, H, W, C) memory); x is copied to that layout unless it is in it.  The rows of every image
    are split over ``torch.get_num_threads()`` threads.
    """
    lib = _lib()
    b, c, h, w = x.shape
    k = weight.shape[-1]
    if sigmoid_gate and c % lanes():
        raise ValueError(f"the gated depth-wise kernel needs channels in multiples of {lanes()}, got {c}")
    xt = x.permute(0, 2, 3, 1).contiguous()  # (B, H, W, C): no copy when x is channels-last
    wt = weight.reshape(c, k * k).t().contiguous()  # (k·k, C)
    bt = None if bias is None else bias.contiguous()
    out = torch.empty_like(xt)

    def run(job: tuple[int, int, int]) -> int:
        i, y0, y1 = job
        args = (xt[i].data_ptr(), wt.data_ptr(), None if bt is None else bt.data_ptr(), out[i].data_ptr())
        if not sigmoid_gate:
            lib.dgno_depthwise_f32(*args, h, w, c, k, y0, y1)
            return 0
        row = torch.empty(c)  # the kernel's scratch: one convolved pixel
        return lib.dgno_depthwise_sigmoid_f32(*args, row.data_ptr(), h, w, c, k, y0, y1)

    codes = _run_jobs(run, _row_jobs(b, h))
    if any(codes):
        raise RuntimeError(f"the native depth-wise kernel refused its arguments (code {max(codes)})")
    return out.permute(0, 3, 1, 2)


def panel() -> int:
    """Output channels per panel of the compiled matrix product (its PANEL: two vector registers)."""
    lib = _lib()
    return int(lib.dgno_panel())


def pack_linear(weight: Tensor, bias: Tensor | None) -> tuple[Tensor, Tensor]:
    """W (N, K) and its bias (N,) or None in the layout of :func:`linear_native`: panels (N'/P, K, P) of P
    output channels and the bias padded to N' (zeros), N' the next multiple of P = :func:`panel`."""
    n, k = weight.shape
    width = panel()
    padded = -(-n // width) * width
    w = F.pad(weight.detach().float(), (0, 0, 0, padded - n))  # (N', K)
    packed = w.view(padded // width, width, k).transpose(1, 2).contiguous()  # (N'/P, K, P)
    b = torch.zeros(padded) if bias is None else F.pad(bias.detach().float(), (0, padded - n))
    return packed, b


def linear_native(x: Tensor, packed: Tensor, bias: Tensor, n_out: int) -> Tensor:
    """x (..., K) · Wᵀ + bias → (..., N) with the compiled kernel; ``packed`` and ``bias`` from
    :func:`pack_linear`.  x's last axis must be contiguous (channels-last maps, token rows); the rows
    are split over ``torch.get_num_threads()`` threads."""
    lib = _lib()
    k = x.shape[-1]
    a = x.reshape(-1, k)
    if a.stride(1) != 1 or (a.shape[0] > 1 and a.stride(0) < k):
        a = a.contiguous()
    m = a.shape[0]
    out = a.new_empty(m, n_out)
    threads = torch.get_num_threads()
    rows = -(-m // (6 * threads)) * 6  # whole blocks of the kernel's 6 rows per thread
    jobs = [(m0, min(m, m0 + rows)) for m0 in range(0, m, rows)]

    def run(job: tuple[int, int]) -> None:
        lib.dgno_gemm_f32(a.data_ptr(), a.stride(0), packed.data_ptr(), bias.data_ptr(), out.data_ptr(), n_out, k, *job)

    _run_jobs(run, jobs)
    return out.view(*x.shape[:-1], n_out)


def _row_jobs(batch: int, rows: int) -> list[tuple[int, int, int]]:
    """(image, r0, r1) jobs: every image's rows (of pixels, or of elements) in about ``torch.get_num_threads()``
    equal ranges over the batch."""
    threads = torch.get_num_threads()
    size = -(-rows // max(1, -(-threads // batch)))
    return [(i, r0, min(rows, r0 + size)) for i in range(batch) for r0 in range(0, rows, size)]


def _run_jobs(run, jobs: list) -> list:
    """``run`` on every job, side by side on the kernel threads (one job runs here); the results in order."""
    return list(_pool(torch.get_num_threads()).map(run, jobs)) if len(jobs) > 1 else [run(jobs[0])]


def dg_cut(qkv: Tensor, heads: int, p1: int, p2: int, k_norm: tuple[Tensor, Tensor, float], v_norm: tuple[Tensor, Tensor, float]):
    """The Galerkin layers' Q, K̃, Ṽ on p1 × p2 elements, each (B, nH, nW, heads, d, p1, p2), from the
    [Q | K | V] map qkv (B, 3C, H, W) (channels-last: no copy), K and V through their per-head norms
    (``(weight (heads, d), bias (heads, d), eps)`` each).  One pass over the map instead of three
    rearranging copies and a dozen element-wise passes over a 7-axis layout."""
    lib = _lib()
    b, c3, h, w = qkv.shape
    c = c3 // 3
    d, nh, nw = c // heads, h // p1, w // p2
    xt = qkv.permute(0, 2, 3, 1).contiguous()  # (B, H, W, 3C)
    q, k, v = (xt.new_empty(b, nh, nw, c, p1, p2) for _ in range(3))
    (kw, kb, keps), (vw, vb, veps) = k_norm, v_norm
    kw, kb, vw, vb = (t.detach().float().contiguous() for t in (kw, kb, vw, vb))
    if keps != veps:
        raise ValueError("the native element cut takes one epsilon for both norms")

    def run(job: tuple[int, int, int]) -> None:
        i, r0, r1 = job
        lib.dgno_dg_cut_f32(xt[i].data_ptr(), h, w, c, heads, p1, p2, kw.data_ptr(), kb.data_ptr(), vw.data_ptr(), vb.data_ptr(),
                            float(keps), q[i].data_ptr(), k[i].data_ptr(), v[i].data_ptr(), r0, r1)  # fmt: skip

    _run_jobs(run, _row_jobs(b, nh))
    return tuple(t.view(b, nh, nw, heads, d, p1, p2) for t in (q, k, v))


def dg_apply(q: Tensor, op: Tensor, x: Tensor) -> Tensor:
    """x + Q K_e as a channels-last (B, C, H, W) map: q (B, nH, nW, heads, d, p1, p2) from :func:`dg_cut`,
    op (B, nH, nW, heads, d, d), x (B, C, H, W).  The product, the element-to-map layout and the residual
    sum in one pass."""
    lib = _lib()
    b, nh, nw, heads, d, p1, p2 = q.shape
    c, h, w = heads * d, nh * p1, nw * p2
    q, op = q.contiguous(), op.contiguous()
    xt = x.permute(0, 2, 3, 1).contiguous()  # (B, H, W, C)
    out = torch.empty_like(xt)

    def run(job: tuple[int, int, int]) -> None:
        i, r0, r1 = job
        lib.dgno_dg_apply_f32(q[i].data_ptr(), op[i].data_ptr(), xt[i].data_ptr(), out[i].data_ptr(), h, w, c, heads, p1, p2, r0, r1)

    _run_jobs(run, _row_jobs(b, nh))
    return out.permute(0, 3, 1, 2)


def gdfn(x: Tensor, w_in: Tensor, w_dw: Tensor, w_out: Tensor, hidden: int) -> Tensor:
    """Restormer's GDFN, W_out(GELU(a) ⊙ b) with [a, b] = DWConv(W_in x), in one compiled pass per band of
    rows (the hidden map, five times the input, stays in cache): x (B, C, H, W) (channels-last: no copy);
    w_in and w_out packed by :func:`pack_linear` ((2h')-by-C and C-by-h'), w_dw (2h', 1, k, k), h' =
    ``hidden`` a multiple of :func:`lanes`.  Returns a channels-last (B, C, H, W) tensor."""
    lib = _lib()
    b, c, h, w = x.shape
    k = w_dw.shape[-1]
    xt = x.permute(0, 2, 3, 1).contiguous()
    wt = w_dw.reshape(2 * hidden, k * k).t().contiguous()  # (k·k, 2h')
    out = torch.empty_like(xt)
    def run(job: tuple[int, int, int]) -> None:
        i, y0, y1 = job
        scratch = torch.empty(k * w * 2 * hidden + w * hidden + 2 * hidden)
        lib.dgno_gdfn_f32(xt[i].data_ptr(), w_in.data_ptr(), wt.data_ptr(), w_out.data_ptr(), out[i].data_ptr(), scratch.data_ptr(),
                          h, w, c, hidden, k, y0, y1)  # fmt: skip

    _run_jobs(run, _row_jobs(b, h))
    return out.permute(0, 3, 1, 2)


def _lib() -> ctypes.CDLL:
    """The compiled library, or RuntimeError saying why it is unavailable."""
    lib, why = _build()
    if lib is None:
        raise RuntimeError(f"the native kernels are unavailable: {why}")
    return lib
