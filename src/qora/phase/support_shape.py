"""Shape priors for a shrinkwrap support, applied after each update where the physics allows them.

- ``"filled"``: enclosed holes of the support are filled (:func:`fill_holes`). Right for an object
  known to have no voids through which the beam passes unscattered (a crystal, a cell, a particle);
  wrong for a lithographic test object whose holes are part of what is measured.
- ``"convex"``: the support becomes its convex hull (:func:`convex_hull`). Right for a faceted
  crystal of Bragg CDI, which is convex by growth; it also fills every hole.

Both only ever add pixels to the support, so they cannot collapse it; the size guard of the
shrinkwrap still applies to the support they are given. The arrays are periodic and an iterate may
drift across an edge, so each prior first rolls the support to put its widest empty band on the
array's border (:func:`_unwrap_shifts`) and rolls the result back.
"""

from __future__ import annotations

import numpy as np
import scipy.ndimage
import scipy.spatial

from qora.backend import cupy_submodule, xp_of

__all__ = ["SHAPES", "shape_support", "fill_holes", "convex_hull"]

SHAPES = (None, "filled", "convex")


def shape_support(support, shape: str | None, *, xp=None):
    """``support`` with the shape prior ``shape`` (one of :data:`SHAPES`) applied; bool, same array type."""
    if shape is None:
        return support
    if shape == "filled":
        return fill_holes(support, xp=xp)
    if shape == "convex":
        return convex_hull(support, xp=xp)
    raise ValueError(f"support shape must be one of {SHAPES}, got {shape!r}")


def _unwrap_shifts(occupied_per_axis) -> tuple[int, ...]:
    """For each axis (a host bool vector: whether any support pixel lies at that index), the roll
    that moves the middle of its longest circular run of empty indices to index 0, so that a
    support split by the periodic edge becomes one piece."""
    shifts = []
    for occupied in occupied_per_axis:
        n = len(occupied)
        if occupied.all() or not occupied.any():
            shifts.append(0)
            continue
        empty = np.concatenate([~occupied, ~occupied])  # circular runs as linear runs of the doubled vector
        best, best_start, run = 0, 0, 0
        for i, e in enumerate(empty):
            run = run + 1 if e else 0
            if run > best and run <= n:
                best, best_start = run, i - run + 1
        shifts.append(int(-(best_start + best // 2) % n))
    return tuple(shifts)


def _occupancy(support, xp):
    ndim = support.ndim
    out = []
    for ax in range(ndim):
        v = xp.any(support, axis=tuple(i for i in range(ndim) if i != ax))
        out.append(np.asarray(v.get() if xp is not np else v, bool))
    return out


def _rolled(support, shifts, xp):
    return xp.roll(support, shifts, axis=tuple(range(support.ndim)))


def fill_holes(support, *, xp=None):
    """The support with every region of background not connected to the array's border added.

    Face connectivity (4 in 2D, 6 in 3D): a hole joined to the outside only by an edge or corner
    is still a hole. On CuPy the fill is CuPy's own (a labelling, on the device).
    """
    xp = xp or xp_of(support)
    ndi = scipy.ndimage if xp is np else cupy_submodule("cupyx.scipy.ndimage")
    support = xp.asarray(support, bool)
    shifts = _unwrap_shifts(_occupancy(support, xp))
    filled = ndi.binary_fill_holes(_rolled(support, shifts, xp))
    return _rolled(filled, tuple(-s for s in shifts), xp)


def convex_hull(support, *, xp=None, tolerance: float = 1e-5):
    """The pixels whose centres lie in the convex hull of the support's pixel centres.

    The hull is found on the host by Qhull from the support's boundary pixels (the interior ones
    cannot be vertices), then tested on the array's device over the support's bounding box only,
    one facet plane at a time; coplanar facets (a crystal's flat faces, triangulated by Qhull) are
    merged first. A support too small or too flat for a hull in its dimension is returned as it is.
    """
    xp = xp or xp_of(support)
    host = np.asarray(support.get() if xp is not np else support, bool)
    shifts = _unwrap_shifts(_occupancy(host, np))
    host = _rolled(host, shifts, np)
    interior = scipy.ndimage.binary_erosion(host)
    points = np.argwhere(host & ~interior).astype(np.float64)
    ndim = host.ndim
    back = tuple(-s for s in shifts)
    if len(points) <= ndim:
        return xp.asarray(_rolled(host, back, np))
    try:
        hull = scipy.spatial.ConvexHull(points)
    except scipy.spatial.QhullError:  # all points in a line or plane: no volume to fill
        return xp.asarray(_rolled(host, back, np))
    planes = np.unique(np.round(hull.equations, 9), axis=0)
    low = points.min(axis=0).astype(int)
    high = points.max(axis=0).astype(int) + 1
    inside = xp.ones(tuple(high - low), bool)
    axes = [xp.arange(lo, hi, dtype=np.float64) for lo, hi in zip(low, high)]
    for plane in planes:
        # n . p + c <= 0 inside; a sum of one broadcast coordinate per axis keeps the test separable
        value = plane[-1]
        for ax in range(ndim):
            value = value + plane[ax] * axes[ax].reshape([-1 if i == ax else 1 for i in range(ndim)])
        inside &= value <= tolerance
    out = xp.asarray(host).copy()
    out[tuple(slice(lo, hi) for lo, hi in zip(low, high))] |= inside
    return _rolled(out, back, xp)
