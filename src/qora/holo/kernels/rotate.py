"""Launchers of the kernels in ``rotate.cu``: the pose of a volume and its exact adjoint on the device.

The pose (the matrix m = R^T and the centre) comes from :func:`qora.holo.rotate.pose_map`, the
host reference's own, so both sides apply the same numbers. Nothing here allocates or synchronises.
"""

from __future__ import annotations

import numpy as np

from qora.backend.kernels import get_kernel
from qora.holo.kernels import THREADS, blocks, grid_limit
from qora.holo.rotate import pose_map

__all__ = ["rotate", "rotate_adjoint"]


def _launch(name: str, src, rotation, out) -> None:
    nz, ny, nx = (int(s) for s in src.shape)
    m, c = pose_map(rotation, src.shape)
    pose = tuple(np.float64(v) for v in (*m.ravel(), *c))
    grid = (min(blocks(src.size), grid_limit()),)
    get_kernel("qora.holo", "rotate.cu", name)(grid, (THREADS,), (src, np.int32(nz), np.int32(ny), np.int32(nx),
                                                                   *pose, out))


def rotate(*, volume, rotation, out) -> None:
    """out = the float32 volume (nz, ny, nx) in its pose R (``rotation``). Reference: :func:`qora.holo.rotate.rotate`."""
    _launch("rotate_gather", volume, rotation, out)


def rotate_adjoint(*, lab, rotation, out) -> None:
    """out += the adjoint turn of the float32 lab volume. Reference: :func:`qora.holo.rotate.rotate_adjoint`
    (which starts from zero: clear ``out`` first for the same result)."""
    _launch("rotate_scatter", lab, rotation, out)
