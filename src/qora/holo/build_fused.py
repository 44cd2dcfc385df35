"""Build the prebuilt modules of the BPM's ``fused_fft`` and ``fused_resident`` variants and of the GP loop's
``fused_fft``: ``kernels/bpm_fused.<arch>.cubin``, ``kernels/bpm_resident.<arch>.cubin`` and
``kernels/gp_fused.<arch>.cubin``.

The kernels (``kernels/bpm_fused.cu`` and ``kernels/bpm_resident.cu``, with the slice algebra of
``kernels/bpm_slice.cuh``, and ``kernels/gp_fused.cu``, all with the line transforms of
``qora/backend/kernels/line_fft.cuh``) are written
against cuFFTDx, so they are compiled once, here, and the cubin ships as package data
(:mod:`qora.backend.cubin` says why). A digest of both sources is written beside it: a CPU test fails
when they change and the cubin was not rebuilt.

Usage::

    pip download --no-deps nvidia-mathdx==25.6.0 && unzip nvidia_mathdx-*.whl -d mathdx
    python -m qora.holo.build_fused --mathdx mathdx/nvidia/mathdx [--arch sm_90]
"""

from __future__ import annotations

from pathlib import Path

from qora.backend import cubin

__all__ = ["KERNELS", "SOURCES", "RESIDENT_SOURCES", "GP_SOURCES", "MODULE", "RESIDENT", "GP", "source_digest",
           "build"]

KERNELS = Path(__file__).parent / "kernels"
#: the files the cubin is built from, in digest order
SOURCES = (KERNELS / "bpm_fused.cu", KERNELS / "bpm_slice.cuh", cubin.KERNELS / "line_fft.cuh")
RESIDENT_SOURCES = (KERNELS / "bpm_resident.cu", KERNELS / "bpm_slice.cuh", cubin.KERNELS / "line_fft.cuh")
GP_SOURCES = (KERNELS / "gp_fused.cu", cubin.KERNELS / "line_fft.cuh")

MODULE = cubin.PrebuiltModule(SOURCES, __doc__.splitlines()[0])
RESIDENT = cubin.PrebuiltModule(RESIDENT_SOURCES, __doc__.splitlines()[0])
GP = cubin.PrebuiltModule(GP_SOURCES, __doc__.splitlines()[0])
source_digest = MODULE.source_digest


def build(**options):
    """The three modules (``arch``, ``mathdx``, ``nvcc`` as :meth:`qora.backend.cubin.PrebuiltModule.build`)."""
    return [MODULE.build(**options), RESIDENT.build(**options), GP.build(**options)]


def main(argv=None) -> None:
    args = cubin.build_parser(__doc__.splitlines()[0]).parse_args(argv)
    for path in build(arch=args.arch, mathdx=args.mathdx, nvcc=args.nvcc):
        print(path)


if __name__ == "__main__":
    main()
