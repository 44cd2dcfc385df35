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
    n, sx = out.shape[0], out.shape[1]
    for f in numba.prange(n * sx):
        i, c = f // sx, f % sx
        dst = out[i, c]
        for r in range(runs.shape[0]):  # a slice copy a run: element by element with 4D indices ran at 10 GB/s
            src = data[s0 + i, c, runs[r, 0]]
            dst[runs[r, 3]:runs[r, 3] + runs[r, 2]] = src[runs[r, 1]:runs[r, 1] + runs[r, 2]]


def gather_runs(data: np.ndarray, s0: int, runs: np.ndarray, out: np.ndarray) -> None:
    """``out[i, c, :] = the pixels of data[s0 + i, c]`` for ``out`` (n, scan_col, pixels) of the
    data's dtype, the pixels given by their :func:`pixel_runs`; in parallel over frames."""
    numba_threads()
    _gather(data, int(s0), runs, out)
