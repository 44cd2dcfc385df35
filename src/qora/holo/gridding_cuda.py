"""Exact gridding on the device: the caps' samples spread onto a twice finer grid, transformed, deconvolved.

The CUDA twin of :class:`qora.holo.plans.MappingPlan` with ``gridding="exact"`` (the host's transform is ducc0's,
:mod:`qora.holo.gridding`). The plan's points and density weights are uploaded once; each call spreads every
sample (``gridding.cu``), inverse-transforms the fine grid (2N per axis), divides by the kernel's transform and
keeps the central N^3 (the centre-origin volume), whose forward transform on the measured bins is the solver's
data, in the layout the nearest-bin :class:`~qora.holo.cuda_stages.Mapper` gives. The nearest-bin hit counts are
written beside it: the solvers' measured bins, the same as the host's.
"""

from __future__ import annotations

import math

import numpy as np

from qora.backend.kernels import get_kernel
from qora.holo.cuda_stages import check_even, cupy
from qora.holo.kernels import THREADS, blocks
from qora.holo.plans import MappingPlan

__all__ = ["ExactMapper", "SPREAD_WIDTH", "kernel_transform"]

SPREAD_WIDTH = 6  # GRID_W of gridding.cu
SPREAD_BETA = 2.30 * SPREAD_WIDTH  # the kernel's shape at twice oversampling (Barnett, Magland and af Klinteberg 2019)
FINE = 2  # the fine grid's oversampling


def kernel_transform(n: int, nf: int, width: int = SPREAD_WIDTH, beta: float = SPREAD_BETA) -> np.ndarray:
    """The spreading kernel's transform at the centre-origin frequencies k = -n/2 .. n/2 - 1 of an ``nf`` grid,
    int phi(s) cos(2 pi s k / nf) ds over |s| < width / 2 (Gauss-Legendre, float64)."""
    s, w = np.polynomial.legendre.leggauss(4 * width + 40)
    s = s * width / 2
    phi = np.exp(beta * (np.sqrt(np.maximum(1 - (2 * s / width) ** 2, 0)) - 1)) * w * width / 2
    k = np.arange(n) - n // 2
    return np.cos(2 * math.pi * np.outer(k, s) / nf) @ phi


class ExactMapper:
    """The exact gridding of 2D spectra (A, N, N) into the solver's data (N^3 complex, already averaged) and the
    nearest-bin hit counts. ``averaged`` tells the solver not to divide by the hits again."""

    averaged = True

    def __init__(self, plan: MappingPlan) -> None:
        if plan.gridding != "exact":
            raise ValueError("ExactMapper takes a plan made with gridding='exact'")
        cp = cupy()
        big = plan.geometry.n
        check_even("solver grid", big)
        self.big, self.nf = big, FINE * big
        sources, weights = [], []
        offset = 0
        for a, (lat, f) in enumerate(zip(plan.lateral, plan.factors)):
            k2 = np.stack(np.unravel_index(lat, (big, big)))
            sign = 1 - 2 * (k2.sum(axis=0) % 2)  # the device's 2D spectra are of centre-origin fields
            sources.append(a * big * big + lat)
            weights.append(f * sign * plan.density[offset:offset + lat.size])
            offset += lat.size
        source = np.concatenate(sources)
        if source.max(initial=0) >= 2**31:
            raise ValueError("the field stack is too large for 32-bit mapping tables")
        self.entries = source.size
        self.source = cp.asarray(source, cp.int32)
        self.weight = cp.asarray(np.concatenate(weights).astype(np.complex64))
        self.points = [cp.asarray(np.ascontiguousarray(plan.points[:, d], np.float32)) for d in range(3)]
        self.hit_table = cp.asarray(plan.hits)
        self.measured = cp.asarray(plan.measured.reshape(-1))  # the data on the measured bins only, as the host's
        self.deconv = cp.asarray((1.0 / kernel_transform(big, self.nf)).astype(np.float32))
        self.fine = cp.empty((self.nf,) * 3, cp.complex64)
        self.table_bytes = int(self.entries * (4 + 8 + 12) + 5 * big**3 + self.fine.nbytes)

    def __call__(self, spectra, sums, hits) -> None:
        cp = cupy()
        big, nf = self.big, self.nf
        self.fine.fill(0)
        get_kernel("qora.holo", "gridding.cu", "spread_exact")(
            (blocks(self.entries),), (THREADS,),
            (spectra, self.source, self.weight, *self.points, np.int64(self.entries), np.int32(nf),
             np.float32(SPREAD_BETA), self.fine))
        fine = cp.fft.ifftn(self.fine, norm="forward")  # sum_l b_l exp(+2 pi i l k / nf), unscaled
        volume = sums.reshape((big,) * 3)
        get_kernel("qora.holo", "gridding.cu", "deconvolve_crop")(
            (blocks(big**3),), (THREADS,), (fine, np.int32(nf), np.int32(big), self.deconv, np.float32(1.0 / big**3),
                                           volume))
        del fine
        spectrum = cp.fft.fftn(volume)  # the centre-origin volume's: the Mapper's layout
        cp.multiply(spectrum.reshape(-1), self.measured, out=sums)
        cp.copyto(hits, self.hit_table)
