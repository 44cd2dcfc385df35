"""A volume turned into its pose by trilinear interpolation, and the exact adjoint of that turn.

The beam propagation model in the rotation geometry (:mod:`qora.holo.bpm`) turns the unknown
object-frame volume into the lab frame at every angle, then propagates normal incidence through it.
The lab voxel p (centre-origin, in voxels: index minus ``n // 2`` on each axis, the same pixel on
all three axes) holds the object at s = R^T p, R = ``Geometry.rotation(a)`` (the same pose the Ewald
mapping and the cell phantom's multislice read): trilinear interpolation between the eight object
voxels around s, zero outside the volume. The operator T: x -> (lab volume) is linear; its adjoint
T^T scatters each lab value back onto the same eight voxels with the same weights, so
<T x, y> = <x, T^T y> holds to rounding (the gradient of the BPM is exact, not the gradient of a
slightly different model, as an inverse rotation by interpolation would give).

The gather runs in parallel over the lab planes; the scatter is serial (parallel writes would race,
and it costs as much as one gather: 8 multiply-adds per voxel). The matrix and the centres are the
shared part with the CUDA kernels (:func:`pose_map`); both sides apply the same formula.
"""

from __future__ import annotations

from qora.backend.host import numba_threads, openmp_passive, parallel_and_serial

openmp_passive()  # before Numba loads its OpenMP runtime

import numba  # noqa: E402
import numpy as np  # noqa: E402

from qora.io.errors import InputError  # noqa: E402

__all__ = ["pose_map", "rotate", "rotate_adjoint"]


def pose_map(rotation, shape) -> tuple:
    """(m, centre): the 3x3 matrix m = R^T taking a lab offset p - centre (voxels, (z, y, x)) to the object
    offset it reads, and the centre-origin voxel (shape // 2 per axis, float64) of the volume ``shape``."""
    m = np.ascontiguousarray(np.asarray(rotation, np.float64).T)
    centre = np.array([s // 2 for s in shape], np.float64)
    return m, centre


@numba.njit(inline="always", cache=True)
def _source(m, c, pz, py, px):
    """The object voxel below s = m p + c (p centre-origin) and s's fractional offsets from it."""
    sz = m[0, 0] * pz + m[0, 1] * py + m[0, 2] * px + c[0]
    sy = m[1, 0] * pz + m[1, 1] * py + m[1, 2] * px + c[1]
    sx = m[2, 0] * pz + m[2, 1] * py + m[2, 2] * px + c[2]
    z0, y0, x0 = int(np.floor(sz)), int(np.floor(sy)), int(np.floor(sx))
    return z0, y0, x0, sz - z0, sy - y0, sx - x0


def _gather_loop(vol, m, c, out):
    nz, ny, nx = out.shape
    for k in numba.prange(nz):
        pz = k - c[0]
        for j in range(ny):
            py = j - c[1]
            for i in range(nx):
                px = i - c[2]
                z0, y0, x0, fz, fy, fx = _source(m, c, pz, py, px)
                acc = 0.0
                for dz in range(2):
                    zz = z0 + dz
                    if zz < 0 or zz >= nz:
                        continue
                    wz = fz if dz else 1.0 - fz
                    for dy in range(2):
                        yy = y0 + dy
                        if yy < 0 or yy >= ny:
                            continue
                        wy = wz * (fy if dy else 1.0 - fy)
                        for dx in range(2):
                            xx = x0 + dx
                            if xx < 0 or xx >= nx:
                                continue
                            acc += wy * (fx if dx else 1.0 - fx) * vol[zz, yy, xx]
                out[k, j, i] = acc


def _scatter_loop(lab, m, c, out):
    nz, ny, nx = lab.shape
    for k in range(nz):
        pz = k - c[0]
        for j in range(ny):
            py = j - c[1]
            for i in range(nx):
                v = lab[k, j, i]
                if v == 0:
                    continue
                px = i - c[2]
                z0, y0, x0, fz, fy, fx = _source(m, c, pz, py, px)
                for dz in range(2):
                    zz = z0 + dz
                    if zz < 0 or zz >= nz:
                        continue
                    wz = fz if dz else 1.0 - fz
                    for dy in range(2):
                        yy = y0 + dy
                        if yy < 0 or yy >= ny:
                            continue
                        wy = wz * (fy if dy else 1.0 - fy)
                        for dx in range(2):
                            xx = x0 + dx
                            if xx < 0 or xx >= nx:
                                continue
                            out[zz, yy, xx] += wy * (fx if dx else 1.0 - fx) * v


_gather = parallel_and_serial(_gather_loop, cache=True)
_scatter = numba.njit(cache=True)(_scatter_loop)


def _check(volume, name):
    v = np.asarray(volume)
    if v.ndim != 3 or np.iscomplexobj(v):
        raise InputError(f"{name} must be a real (n_z, n, n) volume, got {v.dtype} {v.shape}")
    real = np.float32 if v.dtype == np.float32 else np.float64
    return np.ascontiguousarray(v, real)


def rotate(volume, rotation):
    """The object-frame volume (n_z, n, n) in its lab pose: out[p] = volume(R^T p) by trilinear
    interpolation, zero where R^T p leaves the volume (``rotation`` R: a 3x3 matrix on (z, y, x),
    ``Geometry.rotation(a)``). Same dtype (float32 or float64) and shape."""
    v = _check(volume, "volume")
    m, c = pose_map(rotation, v.shape)
    out = np.empty_like(v)
    parallel = v.size >= 2**16 and numba_threads() > 1
    _gather[0 if parallel else 1](v, m, c, out)
    return out


def rotate_adjoint(lab, rotation):
    """The exact adjoint of :func:`rotate` for the same ``rotation``: each lab value scattered onto the
    eight object voxels it was read from, with the same weights (float64 accumulation)."""
    y = _check(lab, "lab volume")
    m, c = pose_map(rotation, y.shape)
    out = np.zeros(y.shape, np.float64)
    _scatter(y, m, c, out)
    return out.astype(y.dtype, copy=False)
