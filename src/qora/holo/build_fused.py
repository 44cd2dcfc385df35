"""Build the prebuilt module of the BPM's ``fused_fft`` variant: ``kernels/bpm_fused.<arch>.cubin``.

The kernels (``kernels/bpm_fused.cu``, with the line transforms of ``qora/backend/kernels/line_fft.cuh``)
are written against cuFFTDx, so they are compiled once, here, and the cubin ships as package data
(:mod:`qora.backend.cubin` says why). A digest of both sources is written beside it: a CPU test fails
when they change and the cubin was not rebuilt.

Usage::

    pip download --no-deps nvidia-mathdx==25.6.0 && unzip nvidia_mathdx-*.whl -d mathdx
    python -m qora.holo.build_fused --mathdx mathdx/nvidia/mathdx [--arch sm_90]
"""

from __future__ import annotations

from pathlib import Path

from qora.backend import cubin

__all__ = ["KERNELS", "SOURCES", "source_digest", "build"]

KERNELS = Path(__file__).parent / "kernels"
#: the files the cubin is built from, in digest order
SOURCES = (KERNELS / "bpm_fused.cu", cubin.KERNELS / "line_fft.cuh")


MODULE = cubin.PrebuiltModule(SOURCES, __doc__.splitlines()[0])
source_digest = MODULE.source_digest
build = MODULE.build
main = MODULE.main

if __name__ == "__main__":
    main()
