"""The bright-field pixels of 4D-STEM frames copied out of a NumPy array (a memory-mapped file
too) by the host's threads, one detector row's run of pixels at a time: what G's streaming
(:mod:`qora.ssb.stream`) sends to the device, with no bounding box around them (a disk of 8,765
pixels has a 105 x 105 box: a quarter more bytes to read, pin and copy) and no NumPy call per frame.
"""

from __future__ import annotations

from qora.backend.host import numba_threads, openmp_passive

openmp_passive()  # before Numba loads its OpenMP runtime

import numba  # noqa: E402
import numpy as np  # noqa: E402

__all__ = ["pixel_runs", "gather_runs"]


def pixel_runs(rows, cols) -> np.ndarray:
    """The pixels (rows, cols) as runs of consecutive columns in one row: (runs, 4) int64 of
    (row, first column, length, first index in the pixels' order); pixels in row-major order (a
    flat ``flatnonzero`` of a mask) make one run per row of a disk."""
    rows, cols = np.asarray(rows, np.int64), np.asarray(cols, np.int64)
    if rows.ndim != 1 or rows.shape != cols.shape or not rows.size:
        raise ValueError(f"rows and cols must be equal 1D arrays of pixels, got {rows.shape} and {cols.shape}")
    new = np.ones(rows.size, bool)
    new[1:] = (rows[1:] != rows[:-1]) | (cols[1:] != cols[:-1] + 1)
    starts = np.flatnonzero(new)
    lengths = np.diff(np.append(starts, rows.size))
    return np.stack([rows[starts], cols[starts], lengths, starts], 1)


@numba.njit(parallel=True, cache=True, nogil=True)
def _gather(data, s0, runs, out):
    # flat views and unsigned offsets: no negative-index wraparound test per element, so each run's copy
    # is a plain vectorised loop (H200 host, 4.6 GB of ssb-full's pixels: 38.5 GB/s, where slices of
    # 4D views ran at 28 GB/s and element-wise 4D indexing at 10.5 GB/s)
    n, sx, npix = out.shape[0], out.shape[1], out.shape[2]
    frame = data.shape[2] * data.shape[3]
    width = data.shape[3]
    src = data.reshape(-1)
    dst = out.reshape(-1)
    for f in numba.prange(n * sx):
        base = numba.uint64((s0 * sx + f) * frame)
        obase = numba.uint64(f * npix)
        for r in range(runs.shape[0]):
            a = base + numba.uint64(runs[r, 0] * width + runs[r, 1])
            b = obase + numba.uint64(runs[r, 3])
            for j in range(numba.uint64(runs[r, 2])):
                dst[b + j] = src[a + j]


def gather_runs(data: np.ndarray, s0: int, runs: np.ndarray, out: np.ndarray) -> None:
    """``out[i, c, :] = the pixels of data[s0 + i, c]`` for ``out`` (n, scan_col, pixels) of the
    data's dtype, the pixels given by their :func:`pixel_runs`; in parallel over frames. ``data``
    and ``out`` C-contiguous."""
    if not (data.flags.c_contiguous and out.flags.c_contiguous):
        raise ValueError("gather_runs needs C-contiguous data and output")
    numba_threads()
    _gather(data, int(s0), runs, out)
