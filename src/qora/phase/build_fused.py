"""Build the prebuilt module of the ``fused_fft`` variant: ``kernels/fused_fft.<arch>.cubin``.

cuFFTDx is a header library (94 MB with its per-size database) that is not in a user's CUDA
install, and NVRTC would recompile it on every machine for a minute or more; so the variant's
kernels are compiled once, here, with nvcc and the headers of the ``nvidia-mathdx`` wheel, and the
cubin ships as package data (:mod:`qora.backend.cubin`). A digest of the sources is written beside
it: a test fails when the sources change and the cubin was not rebuilt.

Usage::

    pip download --no-deps nvidia-mathdx && unzip nvidia_mathdx-*.whl -d mathdx
    python -m qora.phase.build_fused --mathdx mathdx/nvidia/mathdx [--arch sm_90]
"""

from __future__ import annotations

from pathlib import Path

from qora.backend import cubin
from qora.backend.cubin import find_mathdx

__all__ = ["SOURCES", "source_digest", "find_mathdx", "build"]

KERNELS = Path(__file__).parent / "kernels"
#: the files the cubin is built from, in digest order (the line transforms are the backend's, shared with
#: qora.holo's fused BPM)
SOURCES = (KERNELS / "fused_fft.cu", KERNELS / "phase_ops.cuh", cubin.KERNELS / "line_fft.cuh")


MODULE = cubin.PrebuiltModule(SOURCES, __doc__.splitlines()[0])
source_digest = MODULE.source_digest
build = MODULE.build
main = MODULE.main

if __name__ == "__main__":
    main()
