"""Build the prebuilt module of the ``fused_fft`` variant: ``kernels/fused_fft.<arch>.cubin``.

cuFFTDx is a header library (94 MB with its per-size database) that is not in a user's CUDA
install, and NVRTC would recompile it on every machine for a minute or more; so the variant's
kernels are compiled once, here, with nvcc and the headers of the ``nvidia-mathdx`` wheel, and the
cubin ships as package data. A digest of the sources is written beside it: a test fails when the
sources change and the cubin was not rebuilt.

Usage::

    pip download --no-deps nvidia-mathdx && unzip nvidia_mathdx-*.whl -d mathdx
    python -m qora.phase.build_fused --mathdx mathdx/nvidia/mathdx [--arch sm_90]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
from pathlib import Path

__all__ = ["SOURCES", "source_digest", "find_mathdx", "build"]

KERNELS = Path(__file__).parent / "kernels"
SOURCES = ("fused_fft.cu", "phase_ops.cuh")


def source_digest() -> str:
    """SHA-256 of the sources the cubin is built from, in :data:`SOURCES` order."""
    h = hashlib.sha256()
    for name in SOURCES:
        h.update((KERNELS / name).read_bytes())
    return h.hexdigest()


def find_mathdx(path: str | os.PathLike | None = None) -> Path:
    """The ``nvidia/mathdx`` folder (holding ``include/cufftdx.hpp``): ``path``, ``$QORA_MATHDX``, or an
    installed ``nvidia-mathdx`` wheel on ``sys.path``."""
    candidates = [Path(p) for p in (path, os.environ.get("QORA_MATHDX")) if p]
    candidates += [Path(p) / "nvidia" / "mathdx" for p in sys.path if p]
    for c in candidates:
        if (c / "include" / "cufftdx.hpp").is_file():
            return c
    raise FileNotFoundError("the cuFFTDx headers were not found: install nvidia-mathdx, or give --mathdx "
                            "(the folder holding include/cufftdx.hpp) or QORA_MATHDX")


def build(*, arch: str = "sm_90", mathdx=None, nvcc: str = "nvcc") -> Path:
    """Compile ``fused_fft.cu`` for ``arch`` and write the cubin and its source digest; returns the cubin."""
    root = find_mathdx(mathdx)
    out = KERNELS / f"fused_fft.{arch}.cubin"
    cmd = [nvcc, "-std=c++17", f"-arch={arch}", "-O3", "-cubin", "--resource-usage",
           "-I", str(root / "include"), "-I", str(root / "external" / "cutlass" / "include"), "-I", str(KERNELS),
           str(KERNELS / "fused_fft.cu"), "-o", str(out)]
    subprocess.run(cmd, check=True)
    (KERNELS / f"fused_fft.{arch}.cubin.sha256").write_text(source_digest() + "\n")
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default="sm_90")
    parser.add_argument("--mathdx", default=None, help="the nvidia/mathdx folder (include/cufftdx.hpp inside)")
    parser.add_argument("--nvcc", default="nvcc")
    args = parser.parse_args(argv)
    print(build(arch=args.arch, mathdx=args.mathdx, nvcc=args.nvcc))


if __name__ == "__main__":
    main()
