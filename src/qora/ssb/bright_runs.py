"""The bright-field pixels of 4D-STEM frames copied out of a NumPy array (a memory-mapped file
too) by the host's threads, one detector row's run of pixels at a time: what G's streaming
(:mod:`qora.ssb.stream`) sends to the device, with no bounding box around them (a disk of 8,765
pixels has a 105 x 105 box: a quarter more bytes to read, pin and copy) and no NumPy call per frame.
"""

from __future__ import annotations

from qora.backend.host import numba_threads, openmp_passive

openmp_passive()  # before Numba loads its OpenMP runtime

import platform  # noqa: E402

import numba  # noqa: E402
import numpy as np  # noqa: E402

from qora.backend.streaming import STREAMING_STORES, store_fence, store_streaming  # noqa: E402

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


# Streaming stores: an ordinary store first reads the output's cache line from memory (write-allocate), so the gather
# moves its output through the host's memory three times (read for ownership, write back, the copy engine's read);
# memcpy's non-temporal stores skip the first (qora.backend.streaming; docs/ssb-performance.md, section 29).
# Elsewhere the ordinary gather runs.
# Taken by default where they pay (docs/ssb-performance.md, section 30): an output block of 64 MB or more (larger
# than the last-level cache of common hosts, so written back to memory anyway; not measured per host) on a host of
# many threads (whose gather is bound by memory traffic). On two 16-thread H100 hosts step 2 went 0.194 -> 0.175 s
# and 0.253 -> 0.237 s with them, while a gather into one row's block (cached) slowed 0.080 -> 0.115 s; on the
# 2-core development machine they ran at 0.85-1.0x (section 29).
STREAMING_DEFAULT = True
STREAMING_FROM_BYTES = 64 << 20  # an output block at least this large
STREAMING_FROM_THREADS = 8  # on a host with at least this many threads


@numba.njit(cache=True, nogil=True, inline="always")
def _gather_frame(src, base, width, runs, dst, obase):
    for r in range(runs.shape[0]):
        a = base + numba.uint64(runs[r, 0] * width + runs[r, 1])
        b = obase + numba.uint64(runs[r, 3])
        for j in range(numba.uint64(runs[r, 2])):
            dst[b + j] = src[a + j]


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
        _gather_frame(src, numba.uint64((s0 * sx + f) * frame), width, runs, dst, numba.uint64(f * npix))


@numba.njit(parallel=True, cache=True, nogil=True)
def _gather_streaming(data, s0, runs, out, words):
    # frames in pairs, each pair gathered into a scratch array (in cache), then streamed out as whole 32-bit words: a
    # pair's pixels are an even number of 2- or 4-byte values (the caller checks), so words tile them. The scratch is
    # made per pair: rows of one per-thread array (numba.get_thread_id) ran 1.3x slower on the 2-core machine
    n, sx, npix = out.shape[0], out.shape[1], out.shape[2]
    frame = data.shape[2] * data.shape[3]
    width = data.shape[3]
    src = data.reshape(-1)
    dst = out.reshape(-1)
    pair_words = npix * out.itemsize // 2  # 2 npix values of 2 or 4 bytes, in 4-byte words
    for p in numba.prange((n * sx) // 2):
        pair = np.empty(2 * npix, out.dtype)
        for h in range(2):
            f = 2 * p + h
            _gather_frame(src, numba.uint64((s0 * sx + f) * frame), width, runs, pair, numba.uint64(h * npix))
        pair_as_words = pair.view(np.uint32)
        o = numba.uint64(p * pair_words)
        for j in range(pair_words):
            store_streaming(words, o + numba.uint64(j), pair_as_words[j])
        store_fence()
    if (n * sx) % 2:
        f = n * sx - 1
        _gather_frame(src, numba.uint64((s0 * sx + f) * frame), width, runs, dst, numba.uint64(f * npix))


def _streams(out: np.ndarray) -> bool:
    """Whether the streaming gather can write ``out``: x86-64, 32-bit aligned, a pair of frames' pixels whole words."""
    pair_bytes = 2 * out.shape[2] * out.itemsize
    return (STREAMING_STORES and out.itemsize in (2, 4) and pair_bytes % 4 == 0 and out.ctypes.data % 4 == 0
            and out.shape[0] * out.shape[1] >= 2)


def gather_runs(data: np.ndarray, s0: int, runs: np.ndarray, out: np.ndarray, *, streaming: bool | None = None) -> None:
    """``out[i, c, :] = the pixels of data[s0 + i, c]`` for ``out`` (n, scan_col, pixels) of the
    data's dtype, the pixels given by their :func:`pixel_runs`; in parallel over frames. ``data``
    and ``out`` C-contiguous. ``streaming``: write ``out`` by non-temporal stores (None: :data:`STREAMING_DEFAULT`,
    where the block, the host's threads and the layout allow them); the pixels are the same either way."""
    if not (data.flags.c_contiguous and out.flags.c_contiguous):
        raise ValueError("gather_runs needs C-contiguous data and output")
    threads = numba_threads()
    if streaming is None:
        streaming = (STREAMING_DEFAULT and out.nbytes >= STREAMING_FROM_BYTES and threads >= STREAMING_FROM_THREADS
                     and _streams(out))
    elif streaming and not _streams(out):
        raise ValueError(f"streaming stores need an x86-64 host and 2- or 4-byte pixels, 32-bit aligned; got "
                         f"{platform.machine()}, {out.dtype} at address {out.ctypes.data:#x}")
    if not streaming:
        _gather(data, int(s0), runs, out)
        return
    pairs = out.shape[0] * out.shape[1] // 2
    flat = out.reshape(-1)
    words = flat[:pairs * 2 * out.shape[2]].view(np.uint32)
    _gather_streaming(data, int(s0), runs, out, words)
