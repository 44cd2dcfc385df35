"""G(Q, k) made on the GPU from 4D data streamed from the host, a few scan rows at a time.

A 512 x 512 scan with a 192 x 192 uint16 detector is 19 GB on disk, and reading its ~8,800
bright-field pixels pixel by pixel would touch every frame once per chunk of pixels. Here the
scan is read once, in blocks of scan rows: the bright-field disk's bounding box of each frame is
copied by a few host threads into one of two pinned buffers, sent to the device on a copy stream
while the device transforms the block before it, gathered to the bright-field pixels and
transformed along the scan columns (a real FFT) into its rows of G. When every row is in, G is
transformed along the scan rows, a slab of columns at a time, and scaled by the bright-field level.
Peak device memory: G plus a few blocks, no copy of the data.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np

from qora.backend import cpu_count, require_cupy
from qora.backend.fft import fft, rfft
from qora.ssb.detector import check_level

__all__ = ["g_on_device"]

BLOCK_BYTES = 64 << 20  # host bytes per block of scan rows (the bounding boxes' raw data)
SLAB_BYTES = 128 << 20  # device bytes per slab of the column transform (each holds ~4 such temporaries)


def g_on_device(data, pixels, dtype, level: float | None = None):
    """``(G, level, bright_field)``: G (scan_row, scan_col // 2 + 1, nbf) of ``dtype`` on the device,
    normalised by ``level`` (the mean count of a bright-field pixel, measured here when None),
    and the host image of the summed bright-field counts (scan_row, scan_col), unnormalised.

    ``pixels``: (rows, cols) of the bright-field pixels on the detector.
    """
    cp = require_cupy("G made on the device (qora.ssb.stream)")
    rows, cols = (np.asarray(p) for p in pixels)
    sy, sx = data.shape[:2]
    r0, r1, c0, c1 = int(rows.min()), int(rows.max()) + 1, int(cols.min()), int(cols.max()) + 1
    box = (r1 - r0, c1 - c0)
    nbf = len(rows)
    real = np.float32 if dtype == np.complex64 else np.float64
    index = cp.asarray((rows - r0) * box[1] + (cols - c0))
    frame_bytes = box[0] * box[1] * np.dtype(data.dtype).itemsize
    block = max(1, min(sy, BLOCK_BYTES // max(1, sx * frame_bytes)))
    G = cp.empty((sy, sx // 2 + 1, nbf), dtype)
    bright = cp.empty((sy, sx), np.float64)
    pinned = [_pinned(cp, (block, sx) + box, data.dtype) for _ in range(2)]
    staged = [cp.empty((block, sx) + box, data.dtype) for _ in range(2)]
    copied = [cp.cuda.Event() for _ in range(2)]  # the H2D copy out of pinned[i] is done
    used = [cp.cuda.Event() for _ in range(2)]  # the device is done with staged[i]
    copy_stream = cp.cuda.Stream(non_blocking=True)
    compute = cp.cuda.get_current_stream()
    threads = max(1, min(8, cpu_count()))
    with ThreadPoolExecutor(threads) as pool:
        for i, s0 in enumerate(range(0, sy, block)):
            s1 = min(sy, s0 + block)
            n, b = s1 - s0, i % 2
            copied[b].synchronize()  # pinned[b] may be overwritten
            _read_rows(pool, threads, data, s0, s1, (r0, r1, c0, c1), pinned[b][:n])
            with copy_stream:
                copy_stream.wait_event(used[b])
                staged[b][:n].set(pinned[b][:n], stream=copy_stream)
                copied[b].record(copy_stream)
            compute.wait_event(copied[b])
            x = staged[b][:n].reshape(n, sx, -1)[:, :, index].astype(real)  # (n, sx, nbf)
            used[b].record(compute)
            bright[s0:s1] = x.sum(-1, dtype=np.float64)
            G[s0:s1] = rfft(x, axis=1)
            del x
    copy_stream.synchronize()
    bright_host = cp.asnumpy(bright)
    if level is None:
        level = float(bright_host.sum() / (sy * sx * nbf))
    check_level(level, data)
    scale = 1.0 / float(level)
    slab = max(1, SLAB_BYTES // max(1, sy * nbf * G.itemsize))
    for j0 in range(0, G.shape[1], slab):
        part = G[:, j0:j0 + slab]
        G[:, j0:j0 + slab] = fft(part, axis=0) * real(scale)
    return G, float(level), bright_host


def _pinned(cp, shape, dtype) -> np.ndarray:
    """A host array in page-locked memory (so the copy to the device runs asynchronously)."""
    count = int(np.prod(shape))
    memory = cp.cuda.alloc_pinned_memory(count * np.dtype(dtype).itemsize)
    return np.frombuffer(memory, dtype, count).reshape(shape)


def _read_rows(pool, threads: int, data, s0: int, s1: int, box, out: np.ndarray) -> None:
    """``out[:] = data[s0:s1, :, box]``, split over scan rows (or columns, for one row) between the
    pool's threads: NumPy copies without the GIL, so a memory-mapped file is read in parallel."""
    r0, r1, c0, c1 = box
    n, sx = out.shape[:2]
    if n >= threads:
        cuts = np.linspace(0, n, threads + 1).astype(int)
        jobs = [(slice(s0 + a, s0 + b), slice(None), slice(a, b), slice(None)) for a, b in zip(cuts, cuts[1:]) if b > a]
    else:
        cuts = np.linspace(0, sx, threads + 1).astype(int)
        jobs = [(slice(s0, s1), slice(a, b), slice(None), slice(a, b)) for a, b in zip(cuts, cuts[1:]) if b > a]

    def copy(job):
        src_rows, src_cols, dst_rows, dst_cols = job
        src = data[src_rows, src_cols, r0:r1, c0:c1]
        np.copyto(out[dst_rows, dst_cols], src if isinstance(src, np.ndarray) else np.asarray(src))

    list(pool.map(copy, jobs))  # waits for every copy and raises the first error
