"""Where the depth-incoherent fit's time goes at full scale (issue 38), on the H200.

Reads ``qora bench ssb-full``'s dataset (made by that benchmark into DIR), prepares the session as step 2
does, and times, for the kernel's transfers in complex64 and complex128 and for the array code, one
block's transfers, its products, the per-Q combine, a whole evaluation with derivatives and a value; then
fit_incoherent from the columnar fit's values (the default's path), its stages and its error.

    python bench/probes/incoherent_cost.py /tmp/qora-ssb-full [sections]
"""

import json
import sys
import time
from pathlib import Path

import numpy as np

from qora.backend import resolve
from qora.bench.ssb_full import ALPHA, KV, TRUTH
from qora.ssb import Session, fit_detector
from qora.ssb.depth import IncoherentBand, fit_incoherent


def timed(be, fn, repeats=3):
    fn()
    be.synchronize()
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        be.synchronize()
        out.append(time.perf_counter() - t0)
    return float(np.median(out))


def main(directory: str, sections: int = 5) -> None:
    be = resolve("cuda")
    path = next(Path(directory).glob("ssb-512x512x192x192-uint16.npy"))
    meta = json.loads(path.with_suffix(".json").read_text())
    data = np.load(path, mmap_mode="r")
    session = Session(data, kv=KV, alpha_mrad=ALPHA, scan_step=meta["scan_step_a"], detector=fit_detector(data, ALPHA,
                                                                                                          rows=32),
                      backend=be)
    names = ("C10", "C12a", "C12b", "thickness")
    start = {"C10": 110.6, "C12a": 0.0, "C12b": 0.0, "thickness": 100.6}  # the columnar fit's (ssb-full log)
    pool = be.xp.get_default_memory_pool()
    for transfers, precision in (("kernel", "single"), ("kernel", "double")):
        pool.free_all_blocks()
        t0 = time.perf_counter()
        band = IncoherentBand(session, names, sections=sections, rotation=0.0, transfers=transfers,
                              precision=precision)
        be.synchronize()
        built = time.perf_counter() - t0
        rows = band._blocks()[0]
        X = band._transfers(start, rows, 2)
        sums = band._products(X, rows, 2)
        tx = timed(be, lambda: band._transfers(start, rows, 2))
        tp = timed(be, lambda: band._products(X, rows, 2))
        whole = band._sums(start, 2)
        tc = timed(be, lambda: band._combine(*whole, slice(None), 2))
        del X, sums, whole
        te = timed(be, lambda: band.evaluate(start))
        tv = timed(be, lambda: band.evaluate(start, order=0))
        nq, nbf = band.shape
        X_bytes = band.block * 15 * sections * nbf * np.dtype(band._complex).itemsize
        print(f"{transfers}/{precision}: {nq} Q x {nbf} k, block {band.block} Q ({len(band._blocks())} blocks); "
              f"built {built:.3f} s; one block: transfers {tx * 1e3:.2f} ms ({X_bytes / tx / 1e9:.0f} GB/s stored), "
              f"products {tp * 1e3:.2f} ms; combine (all Q) {tc * 1e3:.1f} ms; evaluation with derivatives "
              f"{te * 1e3:.1f} ms, value {tv * 1e3:.1f} ms; pool peak so far {pool.total_bytes() / 2**30:.1f} GiB",
              flush=True)
    for precision, coarse in (("single", None), ("single", 10**9), ("double", None)):
        pool.free_all_blocks()
        t0 = time.perf_counter()
        v, a, h, b, coherence = fit_incoherent(session, start, rotation=0.0, coarse_rows=coarse, precision=precision)
        be.synchronize()
        took = time.perf_counter() - t0
        print(f"fit_incoherent ({precision}, {'thinned then whole' if coarse is None else 'whole band'}): "
              f"{took:.3f} s; C10 {v['C10']:.2f} A (truth {TRUTH['C10']}), thickness {v['thickness']:.1f} A, "
              f"C12 ({v['C12a']:.2f}, {v['C12b']:.2f}); agreement {a:.6f}; depth coherence {coherence:.3f}; "
              f"passes {b.passes}", flush=True)


    # the finish on the whole band: Newton's default tolerance (1e-10 of the agreement) against looser ones, and
    # a band thinned twice as far; the values must not move by more than a small part of their standard errors
    from qora.ssb.identify import coarse_stride
    from qora.ssb.optimize import newton

    for rows, tolerance in ((8192, 1e-8), (8192, 1e-7), (4096, 1e-10), (4096, 1e-8)):
        pool.free_all_blocks()
        t0 = time.perf_counter()
        b = IncoherentBand(session, names, sections=sections, rotation=0.0)
        coarse = b.thinned(coarse_stride(b, rows))
        v, _, _ = newton(coarse, dict(start), iterations=60)
        t1 = time.perf_counter()
        v, a, h = newton(b, v, iterations=60, tolerance=tolerance)
        be.synchronize()
        print(f"thinned to {rows} rows then the whole band at tolerance {tolerance:g}: {time.perf_counter() - t0:.3f} s "
              f"(thinned {t1 - t0:.3f} s, passes {coarse.passes}; whole {b.passes}); C10 {v['C10']:.3f} A, thickness "
              f"{v['thickness']:.2f} A, C12 ({v['C12a']:.3f}, {v['C12b']:.3f}); agreement {a:.7f}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], *(int(x) for x in sys.argv[2:]))
