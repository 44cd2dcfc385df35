"""From a phased Bragg object to displacement and strain: the object on an orthogonal lab grid, its phase ramp and
offset removed, the displacement along the reflection and the strain along it.

Conventions (docs/phase.md, "Bragg rocking scans"). The array's axes are (frame, row, col); its voxel n (offsets
from the array's centre) lies at the lab position A n, A the geometry's :meth:`~qora.phase.bragg_geometry.
BraggGeometry.direct_basis` at the array's centre. The measured intensity is |F o|^2 with F the forward DFT
(exp(-i q.r)); a crystal whose atoms are displaced by u(r) near the reflection G gives o(r) = rho(r) exp(-i G.u(r)),
so the displacement along G is u_G = -phase / |G| and the strain along it eps = d u_G / d s, s the lab coordinate
along G's unit vector. The strain is taken from the phase's gradient by wrapped differences of neighbouring voxels
(conj(o[i]) o[i+1]), which needs no unwrapping, and only between voxels both inside the support (central where
both neighbours are, one-sided at the edge, none where a voxel has no neighbour inside).
"""

from __future__ import annotations

import numpy as np

from qora.io.errors import InputError

__all__ = ["remove_ramp", "orthogonal_grid", "phase_gradient", "strain_along", "displacement_along",
           "unwrap_in_support", "array_object"]


def _check(obj, support):
    obj = np.asarray(obj)
    support = np.asarray(support, bool)
    if obj.ndim != 3 or support.shape != obj.shape:
        raise InputError(f"a Bragg object and its support are 3D arrays of one shape; got {obj.shape} and "
                         f"{support.shape}")
    if not support.any():
        raise InputError("the support is empty")
    return obj, support


def remove_ramp(obj, support):
    """``obj`` with the linear phase ramp and the mean phase over ``support`` removed: (object, ramp (rad per voxel
    along each axis)). The ramp is the mean wrapped phase difference between neighbours inside the support: a
    shift of the Bragg peak from the array's centre, which the choice of G absorbs."""
    obj, support = _check(obj, support)
    ramp = np.zeros(obj.ndim)
    for axis in range(obj.ndim):
        ahead = [slice(None)] * obj.ndim
        behind = [slice(None)] * obj.ndim
        ahead[axis], behind[axis] = slice(1, None), slice(None, -1)
        pair = support[tuple(ahead)] & support[tuple(behind)]
        if pair.any():
            ramp[axis] = np.angle(np.sum((obj[tuple(ahead)] * np.conj(obj[tuple(behind)]))[pair]))
    grids = np.indices(obj.shape, dtype=np.float64)
    centre = np.array([(n - 1) / 2 for n in obj.shape])
    phase = sum(r * (g - c) for r, g, c in zip(ramp, grids, centre))
    flat = obj * np.exp(-1j * phase)
    offset = np.angle(np.sum(flat[support]))
    return flat * np.exp(-1j * offset), ramp


def orthogonal_grid(obj, support, basis, *, voxel: float | None = None):
    """``obj`` and ``support`` resampled (trilinear; real and imaginary parts apart) onto an orthogonal lab grid of
    cubic voxels of ``voxel`` A (default: the shortest of the basis's steps), covering the support: (object,
    support, voxel, origin (the lab position of voxel 0, A)). ``basis`` is the 3 x 3 direct basis (columns: the lab
    step of one voxel along each array axis)."""
    from scipy.ndimage import map_coordinates

    obj, support = _check(obj, support)
    basis = np.asarray(basis, np.float64)
    if basis.shape != (3, 3) or abs(np.linalg.det(basis)) < 1e-30:
        raise InputError("the direct basis must be an invertible 3 x 3 matrix")
    voxel = float(np.min(np.linalg.norm(basis, axis=0))) if voxel is None else float(voxel)
    centre = (np.asarray(obj.shape) - 1) / 2
    inside = np.argwhere(support) - centre
    corners = inside @ basis.T
    low, high = corners.min(0) - voxel, corners.max(0) + voxel
    shape = tuple(int(np.ceil(s)) + 1 for s in (high - low) / voxel)
    axes = [low[i] + voxel * np.arange(shape[i]) for i in range(3)]
    lab = np.stack(np.meshgrid(*axes, indexing="ij"), -1)
    index = lab @ np.linalg.inv(basis).T + centre
    coords = np.moveaxis(index, -1, 0)
    out = (map_coordinates(obj.real, coords, order=1, cval=0.0)
           + 1j * map_coordinates(obj.imag, coords, order=1, cval=0.0))
    kept = map_coordinates(support.astype(np.float64), coords, order=1, cval=0.0) > 0.5
    return out, kept, voxel, low


def phase_gradient(obj, support, voxel: float) -> np.ndarray:
    """d phase / d x (rad per A) along each axis of an orthogonal grid of ``voxel`` A: (3, ...), NaN where a voxel
    has no neighbour inside the support along that axis. Wrapped differences of neighbours (no unwrapping)."""
    obj, support = _check(obj, support)
    out = np.full((3,) + obj.shape, np.nan)
    for axis in range(3):
        fwd = np.angle(np.roll(obj, -1, axis) * np.conj(obj))  # phase[i+1] - phase[i], wrapped
        ok_fwd = support & np.roll(support, -1, axis)
        edge = [slice(None)] * 3
        edge[axis] = -1
        ok_fwd[tuple(edge)] = False
        bwd = np.roll(fwd, 1, axis)
        ok_bwd = np.roll(ok_fwd, 1, axis)
        both = ok_fwd & ok_bwd
        out[axis] = np.where(both, (fwd + bwd) / 2, np.where(ok_fwd, fwd, np.where(ok_bwd, bwd, np.nan))) / voxel
        out[axis][~support] = np.nan
    return out


def strain_along(obj, support, voxel: float, g_lab) -> np.ndarray:
    """The strain along the reflection, eps = d u_G / d s (dimensionless; NaN outside the support and where the
    gradient cannot be formed), from the object on an orthogonal lab grid (``voxel`` A, axes along the lab x, y,
    z of the geometry) and the reflection's vector ``g_lab`` (1/A, lab frame)."""
    g = np.asarray(g_lab, np.float64)
    norm = float(np.linalg.norm(g))
    if not norm > 0:
        raise InputError("the reflection's vector G must not be zero")
    gradient = phase_gradient(obj, support, voxel)
    return -np.tensordot(g / norm, gradient, axes=(0, 0)) / norm


def unwrap_in_support(obj, support) -> np.ndarray:
    """The phase of ``obj`` unwrapped over the voxels of ``support`` (NaN elsewhere), quality guided: from the
    voxel of largest modulus, each neighbour inside the support is reached from its brightest reached neighbour by
    the wrapped difference, brightest first (the weak voxels at the crystal's edge, where noise is, come last).
    Exact wherever the true phase changes by less than pi between neighbours; a support of several pieces is
    unwrapped piece by piece, each about its own brightest voxel."""
    import heapq

    obj, support = _check(obj, support)
    raw = np.angle(obj)
    weight = np.abs(obj)
    out = np.full(obj.shape, np.nan)
    done = ~support.copy()
    offsets = [np.array(d) for d in ((1, 0, 0), (-1, 0, 0), (0, 1, 0), (0, -1, 0), (0, 0, 1), (0, 0, -1))]
    shape = np.array(obj.shape)
    while not done.all():
        seed = np.unravel_index(np.argmax(np.where(done, -1.0, weight)), obj.shape)
        out[seed], done[seed] = raw[seed], True
        heap = [(-weight[seed], seed)]
        while heap:
            _, here = heapq.heappop(heap)
            for d in offsets:
                there = tuple(np.asarray(here) + d)
                if min(there) < 0 or np.any(np.asarray(there) >= shape) or done[there]:
                    continue
                step = np.angle(np.exp(1j * (raw[there] - raw[here])))
                out[there], done[there] = out[here] + step, True
                heapq.heappush(heap, (-weight[there], there))
    return out


def displacement_along(phase, g_lab) -> np.ndarray:
    """u_G = -phase / |G| (A): the displacement along the reflection from an unwrapped phase (rad)."""
    return -np.asarray(phase, np.float64) / float(np.linalg.norm(g_lab))


def array_object(density, displacement, basis, shape, g_lab) -> np.ndarray:
    """A crystal in the array's frame, for simulations and tests: rho(x) exp(-i G.u(x)) sampled at the lab
    positions basis @ (n - centre) of an array of ``shape``; ``density`` and ``displacement`` are functions of the
    lab positions (..., 3) (A) giving rho and u (A, (..., 3))."""
    centre = (np.asarray(shape) - 1) / 2
    n = np.stack(np.meshgrid(*[np.arange(s) for s in shape], indexing="ij"), -1) - centre
    x = n @ np.asarray(basis, np.float64).T
    return density(x) * np.exp(-1j * (displacement(x) @ np.asarray(g_lab, np.float64)))
