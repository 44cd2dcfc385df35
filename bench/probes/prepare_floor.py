"""Step 2 of ``qora bench ssb-full`` (G made from the memory-mapped file) beside the host's memory floors (issue 38:
0.27-0.30 s against the seed's 0.17), on the benchmark's dataset:

    python bench/probes/prepare_floor.py /tmp/qora-ssb-full [BEFORE.py ...]

BEFORE.py: older ``qora/ssb/stream.py`` files (``git show REV:src/qora/ssb/stream.py``) timed beside the current one.
Prints, each a median of 3 after a warm-up:
- floors on the host's threads (Numba): a streaming read of an anonymous uint16 array of the bright field's size, its
  copy into the two 256 MB page-locked blocks in turn, and into one row's page-locked block written over and over
  (small enough to stay in the host's caches);
- the bright-field gather from the memory map (the runs, as the stream reads them), into the 256 MB blocks and into
  one row's block written over;
- the prepare step (``Session``), before and now, split at the last read's end;
- G's transform along the scan rows alone: NumPy-style slabs of copies (before) against the strided in-place plan.
"""

from __future__ import annotations

import importlib.util
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np


def _median(fn, repeats=3):
    """Median wall seconds of ``repeats`` calls after one untimed."""
    from qora.bench.common import median_wall

    return median_wall(fn, repeats, warmup=1)[1]


def _loops():
    import numba

    @numba.njit(parallel=True, nogil=True)
    def read(a, parts):
        step = (a.size + parts - 1) // parts
        acc = np.zeros(parts, np.uint64)
        for p in numba.prange(parts):
            s = numba.uint64(0)
            for i in range(p * step, min(a.size, (p + 1) * step)):
                s += a[i]
            acc[p] = s
        return acc.sum()

    @numba.njit(parallel=True, nogil=True)
    def copy(src, offset, dst, parts):
        step = (dst.size + parts - 1) // parts
        for p in numba.prange(parts):
            for i in range(p * step, min(dst.size, (p + 1) * step)):
                dst[i] = src[offset + i]

    return read, copy


def floors(nbytes: int, block_bytes: int, row_bytes: int, cp) -> None:
    from qora.backend.host import numba_threads
    from qora.ssb import stream

    threads = numba_threads()
    read, copy = _loops()
    a = np.ones(nbytes // 2, np.uint16)
    t = _median(lambda: read(a, 4 * threads))
    print(f"floor, streaming read of {nbytes / 1e9:.2f} GB (anonymous, {threads} threads): {t:.3f} s, "
          f"{nbytes / t / 1e9:.1f} GB/s", flush=True)
    pool = ThreadPoolExecutor(threads)
    for label, size in (("two 256 MB page-locked blocks", block_bytes), ("one row's page-locked block", row_bytes)):
        bufs = [stream._pinned(cp, (size // 2,), np.uint16) for _ in range(2 if size > row_bytes else 1)]
        offsets = range(0, a.size - bufs[0].size + 1, bufs[0].size)
        cuts = np.linspace(0, bufs[0].size, threads + 1).astype(int)

        def numba_copy():
            for i, off in enumerate(offsets):
                copy(a, off, bufs[i % len(bufs)], 4 * threads)

        def memcpy():  # NumPy's copy (glibc's memcpy: non-temporal stores for large copies) on the host's threads
            for i, off in enumerate(offsets):
                dst = bufs[i % len(bufs)]
                list(pool.map(lambda j: np.copyto(dst[cuts[j]:cuts[j + 1]], a[off + cuts[j]:off + cuts[j + 1]]),
                              range(threads)))
        for how, fn in (("a Numba loop", numba_copy), ("memcpy on threads", memcpy)):
            t = _median(fn)
            print(f"floor, copy into {label} by {how}: {t:.3f} s, {len(offsets) * size / t / 1e9:.1f} GB/s",
                  flush=True)
    pool.shutdown()


def gathers(data, pixels, block_rows: int, cp) -> int:
    from qora.ssb import stream
    from qora.ssb.bright_runs import gather_runs, pixel_runs

    runs = pixel_runs(*pixels)
    sy, sx = data.shape[:2]
    nbf = len(pixels[0])
    useful = sy * sx * nbf * data.itemsize
    lines = sum(((c0 + n) * 2 + 63) // 64 - (c0 * 2) // 64 for _, c0, n, _ in runs) * 64  # per frame, row-aligned
    for label, rows in (("256 MB blocks in turn", block_rows), ("one row's block written over", 1)):
        count = 2 if rows > 1 else 1
        bufs = [stream._pinned(cp, (rows, sx, nbf), data.dtype) for _ in range(count)]
        for streaming in _store_kinds():
            def gather_all():
                for i, s0 in enumerate(range(0, sy, rows)):
                    n = min(rows, sy - s0)
                    gather_runs(data, s0, runs, bufs[i % count][:n], streaming=streaming)
            t = _median(gather_all)
            print(f"gather from the memory map into {label}, {_STORES[streaming]}: {t:.3f} s, "
                  f"{useful / t / 1e9:.1f} GB/s of pixels ({sy * sx * lines / t / 1e9:.1f} GB/s of lines touched, "
                  f"{lines / (nbf * data.itemsize):.2f}x)", flush=True)
    return useful


_STORES = {False: "ordinary stores", True: "streaming stores"}


def _store_kinds() -> tuple:
    from qora.ssb.bright_runs import STREAMING_STORES

    return (False, True) if STREAMING_STORES else (False,)


def _timed_reads(module, ends):
    original = module._RunReader.read

    def read(self, s0, s1, out):
        original(self, s0, s1, out)
        ends.append(time.perf_counter())
    module._RunReader.read = read
    return original


def prepare(data, kw, modules) -> None:
    """Step 2 by each stream module; the current one with the gather's ordinary and streaming stores."""
    from qora.ssb import bright_runs

    kept = bright_runs.STREAMING_DEFAULT
    try:
        for label, module in modules[:-1]:
            _prepare_one(data, kw, label, module)
        for streaming in _store_kinds():
            bright_runs.STREAMING_DEFAULT = streaming  # what the stream's gathers take by default
            _prepare_one(data, kw, f"{modules[-1][0]}, {_STORES[streaming]}", modules[-1][1])
    finally:
        bright_runs.STREAMING_DEFAULT = kept


def _prepare_one(data, kw, label, module) -> None:
    from qora.ssb import Session, stream

    ends: list = []
    original = _timed_reads(module, ends)
    stream.g_on_device, kept = module.g_on_device, stream.g_on_device
    try:
        Session(data, **kw)
        totals, tails = [], []
        for _ in range(3):
            ends.clear()
            t0 = time.perf_counter()
            Session(data, **kw)
            totals.append(time.perf_counter() - t0)
            tails.append(time.perf_counter() - ends[-1] if ends else float("nan"))
    finally:
        module._RunReader.read, stream.g_on_device = original, kept
    print(f"prepare ({label}): {np.median(totals):.3f} s (runs {', '.join(f'{t:.3f}' for t in totals)}), "
          f"after the last read {np.median(tails) * 1e3:.1f} ms", flush=True)


def row_transform(G, cp) -> None:
    from qora.backend.fft import fft
    from qora.ssb.stream import transform_rows

    sync = cp.cuda.get_current_stream().synchronize
    sy, nbf = G.shape[0], G.shape[2]
    slab = max(1, (128 << 20) // (sy * nbf * G.itemsize))

    def slabs():
        for j0 in range(0, G.shape[1], slab):
            G[:, j0:j0 + slab] = fft(G[:, j0:j0 + slab], axis=0) * np.float32(1.0)
        sync()

    def strided():
        transform_rows(G)
        G[...] *= np.float32(1.0)
        sync()
    pool = cp.get_default_memory_pool()
    for label, fn in (("slabs of copies, scaled per slab", slabs), ("strided plan in place, then scaled", strided)):
        pool.free_all_blocks()
        before = pool.total_bytes()
        t = _median(fn)
        print(f"G along the scan rows, {label}: {t * 1e3:.1f} ms (pool grew {(pool.total_bytes() - before) / 2**20:.0f} "
              f"MiB)", flush=True)
    part = cp.asarray(np.random.default_rng(0).standard_normal((sy, 3, nbf)).astype(np.complex64))
    ref = cp.fft.fft(part.astype(cp.complex128), axis=0)
    transform_rows(part)
    print(f"  strided plan against float64: {float(cp.linalg.norm(part - ref) / cp.linalg.norm(ref)):.2e}", flush=True)


def main(directory: str, *befores: str) -> None:
    import cupy as cp

    from qora.bench.ssb_full import ALPHA, KV, dataset
    from qora.ssb import Session, fit_detector, stream

    path, meta = dataset(Path(directory))
    data = np.load(path, mmap_mode="r")
    kw = dict(kv=KV, alpha_mrad=ALPHA, scan_step=meta["scan_step_a"], detector=fit_detector(data, ALPHA, rows=32),
              backend="cuda")
    session = Session(data, **kw)
    pixels = np.unravel_index(session.bf_index, data.shape[2:])
    sx, nbf = data.shape[1], len(session.bf_index)
    block_rows = stream.BLOCK_BYTES // (sx * nbf * data.itemsize)
    useful = data.shape[0] * sx * nbf * data.itemsize
    print(f"{path.name}: {nbf} bright-field pixels, {useful / 1e9:.2f} GB of them; blocks of {block_rows} rows",
          flush=True)
    floors(useful, block_rows * sx * nbf * data.itemsize, sx * nbf * data.itemsize, cp)
    gathers(data, pixels, block_rows, cp)
    modules = []
    for before in befores:
        spec = importlib.util.spec_from_file_location(Path(before).stem, before)
        old = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(old)
        modules.append((Path(before).stem, old))
    modules.append(("now", stream))
    prepare(data, kw, modules)
    row_transform(session.G, cp)


if __name__ == "__main__":
    main(*sys.argv[1:])
