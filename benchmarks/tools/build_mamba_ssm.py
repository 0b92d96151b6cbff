"""Compile ``mamba_ssm``'s selective-scan CUDA extension from its sdist for this machine's GPU only.

    python -m benchmarks.tools.build_mamba_ssm SDIST_DIR BUILD_DIR [--jobs 16]

``pip install mamba-ssm`` first tries to download a prebuilt wheel from GitHub and otherwise
compiles the kernels for every architecture the CUDA toolkit knows (nine with CUDA 13), which
takes long on a GPU host that has no network.  This compiles the same sources
(``csrc/selective_scan/*.cpp|*.cu``, unmodified, with the package's own nvcc flags) for the local
GPU's architecture alone, with torch's JIT extension builder and ninja, and writes
``BUILD_DIR/selective_scan_cuda*.so``.  Then

    PYTHONPATH=BUILD_DIR:SDIST_DIR python -c "import mamba_ssm.ops.selective_scan_interface"

imports the genuine ``selective_scan_fn``; ``dgno``'s "auto"/"mamba_ssm" scan backends pick it up.
SDIST_DIR is the unpacked ``mamba_ssm-X.tar.gz`` from PyPI (the folder with ``csrc/`` and
``mamba_ssm/``).  Prints the build time.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

# mamba_ssm's setup.py flags for nvcc, less the -gencode list (replaced by the local arch) and the
# verbose ptxas report.
NVCC_FLAGS = [
    "-O3",
    "-std=c++17",
    "-U__CUDA_NO_HALF_OPERATORS__",
    "-U__CUDA_NO_HALF_CONVERSIONS__",
    "-U__CUDA_NO_BFLOAT16_OPERATORS__",
    "-U__CUDA_NO_BFLOAT16_CONVERSIONS__",
    "-U__CUDA_NO_BFLOAT162_OPERATORS__",
    "-U__CUDA_NO_BFLOAT162_CONVERSIONS__",
    "--expt-relaxed-constexpr",
    "--expt-extended-lambda",
    "--use_fast_math",
    "-lineinfo",
]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sdist", type=Path, help="unpacked mamba_ssm sdist (has csrc/selective_scan)")
    ap.add_argument("build_dir", type=Path)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 4, help="parallel nvcc processes (ninja)")
    args = ap.parse_args(argv)

    import torch
    from torch.utils.cpp_extension import load

    src = args.sdist / "csrc" / "selective_scan"
    sources = sorted(str(p) for p in src.glob("selective_scan*.c*") if p.suffix in (".cpp", ".cu"))
    if not sources:
        raise SystemExit(f"{src}: no selective_scan sources; pass the unpacked mamba_ssm sdist folder")
    major, minor = torch.cuda.get_device_capability()
    os.environ["TORCH_CUDA_ARCH_LIST"] = f"{major}.{minor}"
    os.environ["MAX_JOBS"] = str(args.jobs)
    args.build_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    load(
        name="selective_scan_cuda",
        sources=sources,
        extra_cflags=["-O3", "-std=c++17"],
        extra_cuda_cflags=NVCC_FLAGS,
        extra_include_paths=[str(src)],
        build_directory=str(args.build_dir),
        verbose=False,
    )
    print(f"built selective_scan_cuda for sm_{major}{minor} from {len(sources)} sources in {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
