"""Exact gridding of the Ewald caps: every cap sample at its own 3D frequency (issue 39).

The nearest-bin mapping (:class:`qora.holo.plans.MappingPlan`) rounds each cap sample to the nearest
volume bin. At the low frequencies, where a cell's smooth phase keeps most of its power, that moves a
sample by a large part of its own frequency, and a lower-index inclusion loses contrast (the FDTD cell's
nucleus read 0.0033 for a truth of 0.0050 at oversample 2; docs/holo.md, "The index bias on the FDTD set").
Here each sample keeps its frequency: the volume is the type-1 non-uniform DFT of the samples,

    v(x) = (1 / N^3) sum_j w_j V_j exp(+2 pi i u_j . x / N)      (x, u_j in bins/voxels, centre origin)

with density weights w_j that make the sum an integral over the caps (Pipe and Menon's iteration,
w <- w / (w convolved with the transform of a Hann window), from 1 / the nearest-bin hit count). With the
frequencies rounded to bins and no iteration it is the nearest-bin volume exactly (the check of the
conventions, tests/holo/test_holo_gridding.py). The transform is ducc0's NUFFT on the host (to 1e-9 for the data,
1e-3 for the weights); the CUDA
pipeline spreads on the device (:mod:`qora.holo.gridding_cuda`) with the same weights.

The weights depend on the geometry alone: they are made once per plan.
"""

from __future__ import annotations

import math

import numpy as np

from qora.io.errors import InputError

__all__ = ["GRIDDINGS", "DENSITY_ITERATIONS", "density_weights", "nonuniform_volume", "direct_volume",
           "hann_window"]

GRIDDINGS = ("nearest", "exact")
#: Pipe-Menon iterations of the density weights: the FDTD cell's contrast was the same after 6 and 10
DENSITY_ITERATIONS = 6
# the weights' own transforms: on the FDTD cell's plan 1e-3 moves no weight by more than 3.0e-4 of itself (rms 7e-5)
# against 1e-5, and takes 18.8 s where 1e-5 took 28 s (two cores)
DENSITY_EPSILON = 1e-3
VOLUME_EPSILON = 1e-9


def _ducc0():
    try:
        import ducc0
    except ImportError as e:  # a dependency; a trimmed install says what is missing
        raise InputError("gridding='exact' needs ducc0 (pip install ducc0)") from e
    return ducc0


def _coordinates(points, n: int) -> np.ndarray:
    """ducc0's coordinates (radians per voxel) of frequencies in bins (M, 3)."""
    return np.ascontiguousarray(2 * math.pi * np.asarray(points, np.float64) / n)


def hann_window(n: int) -> np.ndarray:
    """The separable Hann window cos^2(pi r / n) on the centre-origin n^3 grid, r the voxel offset from the centre:
    its transform, a kernel about three bins wide, is what the density weights are convolved with."""
    r = np.arange(n) - n // 2
    h = np.cos(np.pi * r / n) ** 2
    return h[:, None, None] * h[None, :, None] * h[None, None, :]


def nonuniform_volume(values, points, n: int, *, epsilon: float = VOLUME_EPSILON, threads: int = 0) -> np.ndarray:
    """sum_j values_j exp(+2 pi i u_j . x / n) / n^3 on the centre-origin n^3 grid (complex128), u_j = ``points`` (M, 3)
    in bins (any period; x from -n/2): the type-1 NUFFT to ``epsilon``."""
    ducc0 = _ducc0()
    out = np.zeros((n, n, n), np.complex128)
    ducc0.nufft.nu2u(points=np.asarray(values, np.complex128), coord=_coordinates(points, n), forward=False,
                     epsilon=epsilon, nthreads=threads, out=out)
    out /= n**3
    return out


def direct_volume(values, points, n: int) -> np.ndarray:
    """:func:`nonuniform_volume` by the direct sum in float64 (M n^3 exponentials: the reference for small cases)."""
    r = np.arange(n) - n // 2
    values, points = np.asarray(values, np.complex128), np.asarray(points, np.float64)
    ez, ey, ex = (np.exp(2j * math.pi * np.outer(points[:, d], r) / n) for d in range(3))
    return np.einsum("m,mz,my,mx->zyx", values, ez, ey, ex) / n**3


def density_weights(points, start, n: int, iterations: int = DENSITY_ITERATIONS, *, threads: int = 0,
                    progress=None) -> np.ndarray:
    """Pipe and Menon's density compensation: weights w (M,) with (w convolved with K)(u_j) = 1 at every sample,
    K the transform of :func:`hann_window`; ``start`` the first guess (1 / the nearest-bin hit count).

    Each iteration is one type-1 and one type-2 transform on the n^3 grid (19 s in all for the FDTD cell's 4.3 M
    samples on 384^3, two cores): ``progress`` gets ("gridding weights k of K", 0, 1) before each."""
    from qora.progress import report

    ducc0 = _ducc0()
    coord = _coordinates(points, n)
    w = np.asarray(start, np.float64).copy()
    window = hann_window(n)
    grid = np.empty((n, n, n), np.complex128)
    for k in range(int(iterations)):
        report(progress, f"gridding weights {k + 1} of {int(iterations)}", 0, 1)
        ducc0.nufft.nu2u(points=w.astype(np.complex128), coord=coord, forward=False, epsilon=DENSITY_EPSILON,
                         nthreads=threads, out=grid)
        grid *= window
        d = ducc0.nufft.u2nu(grid=grid, coord=coord, forward=True, epsilon=DENSITY_EPSILON, nthreads=threads)
        w /= np.maximum(d.real / n**3, 1e-12)
    return w
