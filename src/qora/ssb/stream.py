"""G(Q, k) made on the GPU from 4D data streamed from the host, a few scan rows at a time.

A 512 x 512 scan with a 192 x 192 uint16 detector is 19 GB on disk, and reading its ~8,800
bright-field pixels pixel by pixel would touch every frame once per chunk of pixels. Here the
scan is read once, in blocks of scan rows: each frame's bright-field pixels are copied, one
detector row's run at a time, by the host's threads (a Numba loop; a lazy array that is not a
NumPy array is read by its bounding box and gathered on the device) into one of two pinned
buffers, sent to the device on a copy stream while the device transforms the block before it,
and transformed along the scan columns (a real FFT) into its rows of G. A read-ahead thread reads
block i + 1 while block i is sent and transformed, and the last blocks are small, so little is
left to send after the last read. When every row is in, G is transformed along the scan rows in
place (one strided cuFFT plan, no copy) and scaled by the bright-field level. (issue 38: the boxes
copied by NumPy on 8 threads read 16 GB/s, the prepare step 0.60 s on an H200; the runs, read ahead,
0.27-0.31 s there; the host's read, near its memory's floor, sets the time: docs/ssb-performance.md,
sections 15 and 27.)

Peak device memory: G plus a few blocks, no copy of the data.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np

from qora.backend import cpu_count, require_cupy
from qora.backend.fft import rfft
from qora.ssb.detector import check_level

__all__ = ["g_on_device", "row_blocks", "transform_rows"]

BLOCK_BYTES = 256 << 20  # host bytes per block of scan rows read (H200, ssb-full: 0.28 s against 0.33 at 64 MB)
WORK_BYTES = 256 << 20  # cuFFT work area the row transform may take at once (G's columns go in chunks beyond)
READ_THREADS = 16  # host threads copying frames' boxes into the pinned buffers, at most (16: 0.44 s, 8: 0.60 s, H200 host)


def g_on_device(data, pixels, dtype, level: float | None = None):
    """``(G, level, bright_field)``: G (scan_row, scan_col // 2 + 1, nbf) of ``dtype`` on the device,
    normalised by ``level`` (the mean count of a bright-field pixel, measured here when None),
    and the host image of the summed bright-field counts (scan_row, scan_col), unnormalised.

    ``pixels``: (rows, cols) of the bright-field pixels on the detector.
    """
    cp = require_cupy("G made on the device (qora.ssb.stream)")
    sy, sx = data.shape[:2]
    nbf = len(np.asarray(pixels[0]))
    real = np.float32 if dtype == np.complex64 else np.float64
    reader = _RunReader(data, pixels) if _RunReader.takes(data) else _BoxReader(data, pixels, cp)
    frame_bytes = int(np.prod(reader.frame)) * np.dtype(data.dtype).itemsize
    block = max(1, min(sy, BLOCK_BYTES // max(1, sx * frame_bytes)))
    G = cp.empty((sy, sx // 2 + 1, nbf), dtype)
    bright = cp.empty((sy, sx), np.float64)
    pinned = [_pinned(cp, (block, sx) + reader.frame, data.dtype) for _ in range(2)]
    staged = [cp.empty((block, sx) + reader.frame, data.dtype) for _ in range(2)]
    copied = [cp.cuda.Event() for _ in range(2)]  # the H2D copy out of pinned[i] is done
    used = [cp.cuda.Event() for _ in range(2)]  # the device is done with staged[i]
    copy_stream = cp.cuda.Stream(non_blocking=True)
    compute = cp.cuda.get_current_stream()
    blocks = row_blocks(sy, block)

    def read(i: int) -> None:  # on the read-ahead thread: block i into pinned[i % 2]
        (s0, s1), b = blocks[i], i % 2
        copied[b].synchronize()  # the copy out of pinned[b] two blocks ago is done: it may be overwritten
        reader.read(s0, s1, pinned[b][:s1 - s0])

    # the host reads block i + 1 while this thread sends block i and queues its transforms: the read, the
    # slowest part (issue 38), is never waiting on the launches
    with reader, ThreadPoolExecutor(1, thread_name_prefix="qora-g-read") as ahead:
        pending = ahead.submit(read, 0)
        for i, (s0, s1) in enumerate(blocks):
            n, b = s1 - s0, i % 2
            pending.result()  # block i is in pinned[b] (a reader's error is raised here)
            if i + 1 < len(blocks):
                pending = ahead.submit(read, i + 1)
            with copy_stream:
                copy_stream.wait_event(used[b])
                staged[b][:n].set(pinned[b][:n], stream=copy_stream)
                copied[b].record(copy_stream)
            compute.wait_event(copied[b])
            x = reader.pixels(staged[b][:n]).astype(real)  # (n, sx, nbf)
            used[b].record(compute)
            bright[s0:s1] = x.sum(-1, dtype=np.float64)
            G[s0:s1] = rfft(x, axis=1)
            del x
    copy_stream.synchronize()
    bright_host = cp.asnumpy(bright)
    if level is None:
        level = float(bright_host.sum() / (sy * sx * nbf))
    check_level(level, data)
    transform_rows(G)
    G *= real(1.0 / float(level))
    return G, float(level), bright_host


def row_blocks(rows: int, block: int) -> list[tuple[int, int]]:
    """The scan rows in blocks of ``block`` rows, the last full block split into halves down to an
    eighth: what is sent and transformed after the last read is a small block, not a whole one."""
    cuts = list(range(0, max(0, rows - block), block))
    tail, start = min(rows, block) if rows else 0, max(0, rows - block)
    while tail > max(1, block // 8):
        half = (tail + 1) // 2
        cuts.append(start)
        start, tail = start + half, tail - half
    cuts.append(start)
    return [(a, b) for a, b in zip(cuts, cuts[1:] + [rows]) if b > a]


def transform_rows(G) -> None:
    """G's transform along its first axis (the scan rows), in place: one cuFFT plan whose
    transforms run down the columns (stride = the columns, idist 1), so no copy of G and no slab of
    temporaries (ssb-full, H100: 49 -> 18 ms with the scale, docs/ssb-performance.md section 27).
    Where the plan's work area would pass :data:`WORK_BYTES` (a row count with a large prime factor:
    cuFFT's Bluestein transforms take work space per transform), or cuFFT refuses so many columns in one plan (the
    H100's cuFFT 13.2: 1031 rows x 2,252,605 columns, CUFFT_INVALID_SIZE), the columns go in chunks."""
    from qora.backend.fft import C2C, FORWARD, Z2Z, RawPlan, WorkArea

    rows, columns = G.shape[0], G.size // G.shape[0]
    if not G.flags.c_contiguous:
        raise ValueError("transform_rows needs a C-contiguous G")

    def plan(batch: int) -> RawPlan:
        return RawPlan(C2C if G.dtype == np.complex64 else Z2Z, (rows,), batch=batch, inembed=(rows,),
                       onembed=(rows,), idist=1, odist=1, stride=columns)

    first = columns
    while True:
        try:
            whole = plan(first)
            break
        except RuntimeError:  # cuFFT refused the layout: half the columns a plan
            if first == 1:
                raise
            first = (first + 1) // 2
    chunk = first if whole.work_size <= WORK_BYTES else max(1, first * WORK_BYTES // whole.work_size)
    plans = {chunk: whole if chunk == first else plan(chunk)}
    if columns % chunk:
        plans[columns % chunk] = plan(columns % chunk)
    work = WorkArea()
    for p in plans.values():
        work.add(p)
    work.allocate()
    for c0 in range(0, columns, chunk):
        address = G.data.ptr + c0 * G.itemsize
        plans[min(chunk, columns - c0)].execute(address, address, FORWARD)


class _RunReader:
    """Frames' bright-field pixels copied run by run into the pinned buffer by a Numba loop on the
    host's threads (:mod:`qora.ssb.bright_runs`): for data held as a NumPy array or memory map."""

    @staticmethod
    def takes(data) -> bool:
        return (isinstance(data, np.ndarray) and data.ndim == 4 and data.dtype.isnative
                and data.flags.c_contiguous)

    def __init__(self, data, pixels):
        from qora.ssb.bright_runs import pixel_runs

        self.data = np.asarray(data)  # a memory map as a plain array view (Numba types it)
        self.runs = pixel_runs(*pixels)
        self.frame = (len(np.asarray(pixels[0])),)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def read(self, s0: int, s1: int, out: np.ndarray) -> None:
        from qora.ssb.bright_runs import gather_runs

        gather_runs(self.data, s0, self.runs, out)

    @staticmethod
    def pixels(staged):
        return staged


class _BoxReader:
    """Frames' bounding boxes of the bright field copied by NumPy on a pool of threads (any array
    that reads by slicing: a lazy reader's view), gathered to the bright-field pixels on the device."""

    def __init__(self, data, pixels, cp):
        rows, cols = (np.asarray(p) for p in pixels)
        r0, r1, c0, c1 = int(rows.min()), int(rows.max()) + 1, int(cols.min()), int(cols.max()) + 1
        self.data, self.box, self.frame = data, (r0, r1, c0, c1), (r1 - r0, c1 - c0)
        self.index = cp.asarray((rows - r0) * (c1 - c0) + (cols - c0))
        self.threads = max(1, min(READ_THREADS, cpu_count()))

    def __enter__(self):
        self.pool = ThreadPoolExecutor(self.threads)
        return self

    def __exit__(self, *exc):
        self.pool.shutdown()
        return False

    def read(self, s0: int, s1: int, out: np.ndarray) -> None:
        _read_rows(self.pool, self.threads, self.data, s0, s1, self.box, out)

    def pixels(self, staged):
        n, sx = staged.shape[:2]
        return staged.reshape(n, sx, -1)[:, :, self.index]


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
