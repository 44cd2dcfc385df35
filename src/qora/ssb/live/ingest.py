"""The host's pass over each batch of frames as it arrives: one read of every frame that adds it
into the running mean pattern and gathers its bright-field pixels, in parallel over the frames
(Numba, without the GIL, so the receiver thread keeps receiving meanwhile).

Why on the host, before any copy to the device (docs/ssb-performance.md, "Live: the host's
stages"): the mean pattern needs every pixel of every frame, but G needs only the ~9,800 pixels
gathered of 36,864 (192^2). Summing on the host where the frames already are, and sending only
the gathered pixels, cuts the bytes to the device 3.8-fold (uint16) and replaces the NumPy
passes (a float64 sum, a box slice, an index gather, a conversion: four passes and three
temporaries a batch) by one pass at the host's memory bandwidth.

:func:`ingest` writes the gathered pixels into a staging array of the frames' own type (counts):
on the CPU backend that array is ordinary memory; on CUDA it is page-locked
(:meth:`Staging.array`), so that the copy to the device runs at the bus's full rate.
"""

from __future__ import annotations

import numba
import numpy as np

from qora.backend.host import numba_threads

__all__ = ["ingest", "warm", "Staging"]


@numba.njit(cache=True, nogil=True, parallel=True)
def _ingest(frames, flat_index, partial, out):
    """frames (n, pixels); partial (chunks, pixels) float64, zero; out (n, gathered).
    Chunk t of the frames is summed into partial[t] (no two threads write one row of it)."""
    n, pixels = frames.shape
    chunks = partial.shape[0]
    count = flat_index.shape[0]
    for t in numba.prange(chunks):
        lo = t * n // chunks
        hi = (t + 1) * n // chunks
        acc = partial[t]
        for f in range(lo, hi):
            frame = frames[f]
            for p in range(pixels):
                acc[p] += frame[p]
            row = out[f]
            for j in range(count):
                row[j] = frame[flat_index[j]]


def ingest(frames: np.ndarray, flat_index: np.ndarray, mean_sum: np.ndarray, out: np.ndarray) -> None:
    """Add ``frames`` (n, det_row, det_col), native-endian counts, into ``mean_sum`` (det_row,
    det_col) float64, and write their pixels at ``flat_index`` (gathered,) int64 (flat detector
    indices) into ``out`` (n, gathered), the frames' dtype or wider. One read of each frame."""
    n = frames.shape[0]
    flat = np.ascontiguousarray(frames).reshape(n, -1)
    chunks = max(1, min(n, numba_threads()))
    partial = np.zeros((chunks, flat.shape[1]), np.float64)
    _ingest(flat, flat_index, partial, out)
    mean_sum.reshape(-1)[:] += partial.sum(0) if chunks > 1 else partial[0]


def warm(dtypes=(np.uint8, np.uint16, np.uint32)) -> None:
    """Compile (or load from Numba's cache) :func:`ingest` for the detectors' count types now,
    before a scan starts: the first batch of a live run must not wait a second for the compiler."""
    index = np.zeros(1, np.int64)
    for dtype in dtypes:
        if all(sig[0].dtype != np.dtype(dtype) for sig in _ingest.signatures):
            ingest(np.zeros((1, 1, 1), dtype), index, np.zeros((1, 1)), np.empty((1, 1), dtype))


class Staging:
    """The gathered pixels of a batch on their way to the rows: host memory reused batch after
    batch, page-locked when the rows are on a CUDA device (an allocation through the backend; the
    CPU path needs no CuPy)."""

    def __init__(self, backend) -> None:
        self.backend = backend
        self._array = None

    def array(self, frames: int, gathered: int, dtype) -> np.ndarray:
        """A (frames, gathered) array of ``dtype``, reused while it is large enough. On CUDA the
        device's queue is drained first: a copy from page-locked memory may still be reading the
        last batch's pixels when this returns the same memory for the next."""
        self.backend.synchronize()
        a = self._array
        if a is None or a.dtype != dtype or a.shape[1] != gathered or a.shape[0] < frames:
            rows = max(frames, 256 if a is None else a.shape[0])
            a = self._array = self.backend.host_empty((rows, gathered), dtype)
        return a[:frames]
