"""The FGP step of :mod:`qora.holo.tv` as two fused Numba loops per iteration (CPU fast path).

Per FGP iteration: one pass computes the primal point x = max(v - lam D^T r, 0) at every
voxel; a second computes the dual update at every voxel (forward differences of x, the
projection onto the unit ball, the momentum step), writing p and r in place. The
NumPy version in :mod:`qora.holo.tv` is the reference; ``tests/holo`` compares them.
"""

from __future__ import annotations

import math

from qora.backend.host import numba_threads, openmp_passive

openmp_passive()  # before Numba loads its OpenMP runtime

import numba  # noqa: E402
import numpy as np  # noqa: E402

from qora.holo.fista import momenta  # noqa: E402

__all__ = ["fgp_prox_fused"]


@numba.njit(parallel=True, fastmath=True, cache=True)
def _primal(v, r, lam, lower, upper, x):
    nz, ny, nx = v.shape
    for k in numba.prange(nz):
        for j in range(ny):
            for i in range(nx):
                # D^T r = -(div r): contributions of the forward differences into and out of this voxel
                d = 0.0
                if k < nz - 1:
                    d -= r[0, k, j, i]
                if k > 0:
                    d += r[0, k - 1, j, i]
                if j < ny - 1:
                    d -= r[1, k, j, i]
                if j > 0:
                    d += r[1, k, j - 1, i]
                if i < nx - 1:
                    d -= r[2, k, j, i]
                if i > 0:
                    d += r[2, k, j, i - 1]
                val = v[k, j, i] - lam * d
                if val < lower:
                    val = lower
                elif val > upper:
                    val = upper
                x[k, j, i] = val


@numba.njit(parallel=True, fastmath=True, cache=True)
def _dual(x, p, r, step, momentum):
    nz, ny, nx = x.shape
    for k in numba.prange(nz):
        for j in range(ny):
            for i in range(nx):
                xc = x[k, j, i]
                g0 = x[k + 1, j, i] - xc if k < nz - 1 else 0.0
                g1 = x[k, j + 1, i] - xc if j < ny - 1 else 0.0
                g2 = x[k, j, i + 1] - xc if i < nx - 1 else 0.0
                q0 = r[0, k, j, i] + step * g0
                q1 = r[1, k, j, i] + step * g1
                q2 = r[2, k, j, i] + step * g2
                norm = math.sqrt(q0 * q0 + q1 * q1 + q2 * q2)
                s = 1.0 / norm if norm > 1.0 else 1.0
                n0, n1, n2 = q0 * s, q1 * s, q2 * s
                r[0, k, j, i] = n0 + momentum * (n0 - p[0, k, j, i])
                r[1, k, j, i] = n1 + momentum * (n1 - p[1, k, j, i])
                r[2, k, j, i] = n2 + momentum * (n2 - p[2, k, j, i])
                p[0, k, j, i] = n0
                p[1, k, j, i] = n1
                p[2, k, j, i] = n2


def fgp_prox_fused(v, lam: float, iterations: int, *, dual=None, nonnegative: bool = True, bounds=None):
    """The same iterates as :func:`qora.holo.tv.fgp_prox`, in two fused loops per iteration.

    ``bounds`` (lower, upper) replaces the non-negativity by a box constraint (either may be +-inf)."""
    v = np.ascontiguousarray(v, dtype=np.float64)
    lower, upper = bounds if bounds is not None else ((0.0 if nonnegative else -np.inf), np.inf)
    lower, upper = float(lower), float(upper)
    if lam <= 0:
        return np.clip(v, lower, upper), dual
    p = np.zeros((3,) + v.shape) if dual is None else np.ascontiguousarray(dual, dtype=np.float64)
    r = p.copy()
    x = np.empty_like(v)
    weights = momenta()
    step = 1.0 / (12.0 * lam)
    numba_threads()  # both loops split the volume's planes over the setting's threads
    for _ in range(iterations):
        _primal(v, r, lam, lower, upper, x)
        _dual(x, p, r, step, next(weights))
    _primal(v, p, lam, lower, upper, x)
    return x, p
