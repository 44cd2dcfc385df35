"""Where ``qora bench ssb-full``'s steps 1, 2, 3 (columnar) and 5 spend their time, and where the pool's peak is
reached (issue 38: steps 1/2/5 above the seed's 0.44/0.17/0.25 s, the columnar fit 0.55-0.66 s against 0.32 s, the
peak 19.25 GiB against 16), on the benchmark's dataset:

    python bench/probes/ssb_steps_profile.py /tmp/qora-ssb-full

Prints, each a median of 3 after a warm-up:
- step 1 split: the 32 rows read and averaged on one thread (the old code) against ``mean_pattern``'s threads;
- step 2 split: the frames' boxes read into pinned memory alone (8 and 16 threads), one pinned 64 MB block copied
  to the device (the H2D rate), ``Session`` with ``stream.READ_THREADS`` 8 and 16 and ``BLOCK_BYTES`` 64 and 256 MB,
  with the time inside ``_read_rows``;
- the fits (``tilt=False`` and the columnar tilt fit): stage timings, the identity orientation beside the search,
  the array code's block budget capped at 2 GiB beside the default, cProfile's top entries by cumulative time,
  and the Python stack where the pool's peak was first reached.
"""

from __future__ import annotations

import cProfile
import gc
import io
import pstats
import sys
import time
import traceback
from pathlib import Path

import numpy as np


def _median(fn, repeats=3):
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def step1(data):
    from qora.ssb.detector import mean_pattern

    rows = np.unique(np.linspace(0, data.shape[0] - 1, 32).round().astype(int))
    old = _median(lambda: np.asarray(data[rows].mean(axis=(0, 1), dtype=np.float64)))
    new = _median(lambda: mean_pattern(data, rows))
    print(f"step 1: mean of 32 rows, one thread {old:.3f} s, mean_pattern's threads {new:.3f} s", flush=True)


def step2(data, kw, cp):
    from concurrent.futures import ThreadPoolExecutor

    from qora.ssb import Session, stream

    sess = Session(data, **kw)
    rows, cols = np.unravel_index(sess.bf_index, data.shape[2:])
    box = (int(rows.min()), int(rows.max()) + 1, int(cols.min()), int(cols.max()) + 1)
    del sess
    cp.get_default_memory_pool().free_all_blocks()
    sy, sx = data.shape[:2]
    frame = (box[1] - box[0]) * (box[3] - box[2]) * 2
    block = stream.BLOCK_BYTES // (sx * frame)
    pinned = stream._pinned(cp, (block, sx, box[1] - box[0], box[3] - box[2]), data.dtype)
    total = sy * sx * frame
    print(f"step 2: box {box}, {total / 1e9:.2f} GB of boxes, blocks of {block} rows", flush=True)
    with ThreadPoolExecutor(16) as pool:
        def read_all():
            for s0 in range(0, sy, block):
                n = min(block, sy - s0)
                stream._read_rows(pool, 16, data, s0, s0 + n, box, pinned[:n])
        t = _median(read_all, 2)
    print(f"  boxes read into pinned memory, 16 threads: {t:.3f} s ({total / t / 1e9:.1f} GB/s)", flush=True)
    from qora.ssb.bright_runs import gather_runs, pixel_runs

    runs = pixel_runs(rows, cols)
    flat = pinned.reshape(-1)[:block * sx * len(rows)].reshape(block, sx, len(rows))
    plain = np.asarray(data)

    def gather_all():
        for s0 in range(0, sy, block):
            n = min(block, sy - s0)
            gather_runs(plain, s0, runs, flat[:n])
    t = _median(gather_all, 2)
    pixels = sy * sx * len(rows) * 2
    print(f"  bright-field runs gathered into pinned memory (Numba): {t:.3f} s ({pixels / t / 1e9:.1f} GB/s of "
          f"{pixels / 1e9:.2f} GB)", flush=True)
    for name, loop in _gather_variants().items():
        def variant():
            for s0 in range(0, sy, block):
                n = min(block, sy - s0)
                loop(plain, s0, runs, flat[:n])
        variant()
        check = np.empty_like(flat[:2])
        loop(plain, 7, runs, check)
        ok = np.array_equal(check, plain[7:9][:, :, rows, cols])
        t = _median(variant, 2)
        print(f"  variant {name}: {t:.3f} s ({pixels / t / 1e9:.1f} GB/s), equal: {ok}", flush=True)
    dev = cp.empty(pinned.shape, pinned.dtype)

    def h2d():
        for _ in range(8):
            dev.set(pinned)
        cp.cuda.get_current_stream().synchronize()
    t = _median(h2d) / 8
    print(f"  H2D of one pinned block ({pinned.nbytes / 1e6:.0f} MB): {pinned.nbytes / t / 1e9:.1f} GB/s; "
          f"all boxes at that rate {total / (pinned.nbytes / t):.3f} s", flush=True)
    del dev, pinned
    cp.get_default_memory_pool().free_all_blocks()
    spent = []

    def timed(method):
        def run(self, *a, **k):
            t0 = time.perf_counter()
            method(self, *a, **k)
            spent.append(time.perf_counter() - t0)
        return run

    run_read, box_read, takes = stream._RunReader.read, stream._BoxReader.read, stream._RunReader.takes
    stream._RunReader.read, stream._BoxReader.read = timed(run_read), timed(box_read)
    for reader, block_mb in (("runs", 64), ("runs", 256), ("runs", 16), ("boxes", 64)):
        stream.BLOCK_BYTES = block_mb << 20
        stream._RunReader.takes = staticmethod(takes if reader == "runs" else (lambda data: False))
        session = None

        def prepare():
            nonlocal session
            session = None
            spent.clear()
            session = Session(data, **kw)
        t = _median(prepare)
        print(f"  Session, {reader} ({stream.READ_THREADS} threads for boxes), {block_mb} MB blocks: {t:.3f} s, "
              f"of it reading {sum(spent):.3f} s", flush=True)
    stream._RunReader.read, stream._BoxReader.read = run_read, box_read
    stream._RunReader.takes = staticmethod(takes)
    stream.BLOCK_BYTES = 64 << 20
    session = Session(data, **kw)
    return session


def _gather_variants() -> dict:
    """The run gather's other candidate Numba loops (issue 38, step 2), beside gather_runs' flat views."""
    import numba

    @numba.njit(parallel=True, nogil=True)
    def slices(data, s0, runs, out):
        n, sx = out.shape[0], out.shape[1]
        for f in numba.prange(n * sx):
            i, c = f // sx, f % sx
            dst = out[i, c]
            for r in range(runs.shape[0]):
                src = data[s0 + i, c, runs[r, 0]]
                dst[runs[r, 3]:runs[r, 3] + runs[r, 2]] = src[runs[r, 1]:runs[r, 1] + runs[r, 2]]

    @numba.njit(parallel=True, nogil=True)
    def rows_outer(data, s0, runs, out):  # a thread per scan row of the block: long sequential reads
        n, sx = out.shape[0], out.shape[1]
        for i in numba.prange(n):
            for c in range(sx):
                dst = out[i, c]
                for r in range(runs.shape[0]):
                    src = data[s0 + i, c, runs[r, 0]]
                    dst[runs[r, 3]:runs[r, 3] + runs[r, 2]] = src[runs[r, 1]:runs[r, 1] + runs[r, 2]]

    return {"slices": slices, "rows_outer": rows_outer}  # the flat-view loop is gather_runs' now


class _PeakWhere:
    """A CuPy memory hook keeping the stack at each new peak of the pool's bytes in use."""

    def __init__(self, cp):
        from cupy.cuda import memory_hook

        pool = cp.get_default_memory_pool()
        outer = self

        class Hook(memory_hook.MemoryHook):
            name = "PeakWhere"

            def malloc_postprocess(self, device_id, size, mem_size, mem_ptr=None, pmem_id=None):
                used = pool.used_bytes()
                if used > outer.peak:
                    outer.peak = used
                    outer.stack = traceback.format_stack(limit=14)[:-1]
                    outer.size = size
                    if used > outer.census_above:  # the live device arrays over 64 MiB at this peak
                        outer.census = sorted(((o.nbytes, o.shape, str(o.dtype)) for o in gc.get_objects()
                                               if isinstance(o, cp.ndarray) and o.nbytes > 64 << 20), reverse=True)

        self.hook, self.peak, self.stack, self.size = Hook(), pool.used_bytes(), [], 0
        self.census_above, self.census = self.peak + (2 << 30), []


def fits(session, cp):
    from qora.ssb import band as band_module

    def fit(**opts):
        return session.fit(rotation=0.0, seed=0, **opts)

    cases = (("5 tilt=False", dict(tilt=False)), ("5 tilt=False, orientation identity", dict(tilt=False, orientation="identity")),
             ("3 columnar", dict(tilt=True, depth_model="columnar")),
             ("3 columnar, orientation identity", dict(tilt=True, depth_model="columnar", orientation="identity")))
    for label, opts in cases:
        t = _median(lambda: fit(**opts))
        r = fit(**opts)
        print(f"fit {label}: {t:.3f} s; stages " + ", ".join(f"{k} {v:.3f}" for k, v in r["timings_s"].items())
              + f"; passes {r.get('passes')}", flush=True)
    from qora.ssb import session as session_module

    gathers = []
    band_rows = session_module.Session.band_rows

    def counted(self, keep, **kw):
        hit = self._band_holder().get("key") == keep.tobytes()
        gathers.append(("hit" if hit else "miss", getattr(self, "orientation", "?"), int(keep.sum())))
        return band_rows(self, keep, **kw)

    session_module.Session.band_rows = counted
    for label, opts in cases[::2]:
        gathers.clear()
        fit(**opts)
        print(f"fit {label}: band_rows calls (hit/miss, orientation, rows) {gathers}", flush=True)
    session_module.Session.band_rows = band_rows
    budget = band_module.block_budget
    for cap in (None,):
        if cap is not None:
            band_module.block_budget = lambda xp, host=64 << 20: min(budget(xp, host=host), cap)
        pool = cp.get_default_memory_pool()
        pool.free_all_blocks()
        for label, opts in cases[::2]:
            where = _PeakWhere(cp)
            with where.hook:
                t0 = time.perf_counter()
                fit(**opts)
                t = time.perf_counter() - t0
            print(f"fit {label}, block cap {cap}: {t:.3f} s, peak {where.peak / 2**30:.2f} GiB (G "
                  f"{session.nbytes / 2**30:.2f}, band cache {session.band_cache_bytes / 2**30:.2f}), at an "
                  f"allocation of {where.size / 2**20:.0f} MiB in:", flush=True)
            print("".join(line for line in where.stack if "qora" in line)[-1500:], flush=True)
            print("  live arrays over 64 MiB at the peak (bytes, shape, dtype):", where.census, flush=True)
    band_module.block_budget = budget
    for label, opts in cases[2:3]:
        prof = cProfile.Profile()
        prof.enable()
        fit(**opts)
        cp.cuda.get_current_stream().synchronize()
        prof.disable()
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(r"qora", 40)
        print(f"--- cProfile, fit {label} ---\n" + out.getvalue()[-7000:], flush=True)


def derivative_blocks(session, cp):
    """The derivative kernel at the blocks per SM its launch bounds ask for (band.cu's QORA_DERIVATIVE_BLOCKS_3/6:
    0 the compiler's choice, 249 and 98 registers), on the whole and the thinned band, by CUDA events."""
    from qora.backend.kernels import DEFAULT_OPTIONS, get_kernel
    from qora.ssb import Band, kernels

    values = {"C10": 100.0, "C12a": 10.0, "C12b": 5.0, "thickness": 120.0, "tilt_y": 1e-3, "tilt_x": 0.0}
    thick = Band(session, ("C10", "C12a", "C12b", "thickness", "tilt_y", "tilt_x"))
    standard = Band(session, ("C10", "C12a", "C12b"))
    original = kernels.kernel
    for np_, blocks_list in ((6, (0, 2)), (3, (0, 3, 4))):
        name = f"band_quad_derivatives<{np_}>"
        reference = None
        for blocks in blocks_list:
            fn = get_kernel("qora.ssb", "band.cu", name, name_expressions=kernels._MODULES["band.cu"],
                            options=tuple(DEFAULT_OPTIONS) + (f"-DQORA_DERIVATIVE_BLOCKS_{np_}={blocks}",))
            kernels.kernel = lambda n, fn=fn, name=name: fn if n == name else original(n)
            for label, band in (("whole", thick if np_ == 6 else standard),
                                ("thinned 5", (thick if np_ == 6 else standard).thinned(5))):
                band._derivative_raw(values)
                start, end = cp.cuda.Event(), cp.cuda.Event()
                times = []
                for _ in range(10):
                    start.record()
                    out = band._derivative_raw(values)
                    end.record()
                    end.synchronize()
                    times.append(cp.cuda.get_elapsed_time(start, end))
                if label == "whole":
                    host = out.get()
                    reference = host if reference is None else reference
                    diff = float(np.abs(host - reference).max() / np.abs(reference).max())
                else:
                    diff = float("nan")
                print(f"derivatives, {np_} parameters, blocks {blocks}, {label}: {np.median(times):.2f} ms "
                      f"(registers {fn.num_regs}, local {fn.local_size_bytes} B; max difference {diff:.1e})",
                      flush=True)
    kernels.kernel = original


def main(directory: str) -> None:
    from qora.backend import resolve
    from qora.bench.ssb_full import ALPHA, KV, dataset
    from qora.ssb import fit_detector

    be = resolve("cuda")
    cp = be.xp
    path, meta = dataset(Path(directory), backend=be)
    cp.fft.config.get_plan_cache().clear()
    cp.get_default_memory_pool().free_all_blocks()
    data = np.load(path, mmap_mode="r")
    step1(data)
    detector = fit_detector(data, ALPHA, rows=32)
    kw = dict(kv=KV, alpha_mrad=ALPHA, scan_step=meta["scan_step_a"], detector=detector, backend=be)
    session = step2(data, kw, cp)
    derivative_blocks(session, cp)
    fits(session, cp)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/tmp/qora-ssb-full")
