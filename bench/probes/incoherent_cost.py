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
    for transfers, precision in (("kernel", "double"),):
        pool.free_all_blocks()
        t0 = time.perf_counter()
        band = IncoherentBand(session, names, sections=sections, rotation=0.0, transfers=transfers,
                              precision=precision)
        be.synchronize()
        built = time.perf_counter() - t0
        nq, nbf = band.shape
        line = (f"{transfers}/{precision}: {nq} Q x {nbf} k; built {built:.3f} s; value blocks of "
                f"{band.value_block} Q")
        if transfers == "kernel":
            rows = band._blocks()[0]
            X = band._transfers(start, rows, 2)
            tx = timed(be, lambda: band._transfers(start, rows, 2))
            tp = timed(be, lambda: band._products(X, rows, 2))
            X_bytes = X.nbytes
            del X
            line += (f"; block {band.block} Q ({len(band._blocks())} blocks): transfers {tx * 1e3:.2f} ms "
                     f"({X_bytes / tx / 1e9:.0f} GB/s stored), products {tp * 1e3:.2f} ms")
        ts = timed(be, lambda: band._sums(start, 2))
        whole = band._sums(start, 2)
        tc = timed(be, lambda: band._combine(*whole, slice(None), 2))
        del whole
        te = timed(be, lambda: band.evaluate(start))
        tv = timed(be, lambda: band.evaluate(start, order=0))
        print(line + f"; sums (all Q) {ts * 1e3:.1f} ms, combine {tc * 1e3:.1f} ms; evaluation with derivatives "
              f"{te * 1e3:.1f} ms, value {tv * 1e3:.1f} ms; pool total {pool.total_bytes() / 2**30:.1f} GiB",
              flush=True)
    for rows in (4096, 2048):
        pool.free_all_blocks()
        t0 = time.perf_counter()
        v, a, h, b, coherence = fit_incoherent(session, start, rotation=0.0, coarse_rows=rows)
        be.synchronize()
        took = time.perf_counter() - t0
        ts = timed(be, lambda: b.section_objects(v), repeats=1)
        print(f"fit_incoherent (thinned to {rows} rows): {took:.3f} s (section objects {ts * 1e3:.0f} ms); C10 "
              f"{v['C10']:.3f} A (truth {TRUTH['C10']}), thickness {v['thickness']:.2f} A, C12 ({v['C12a']:.3f}, "
              f"{v['C12b']:.3f}); agreement {a:.7f}; depth coherence "
              f"{coherence:.3f}; passes {b.passes}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], *(int(x) for x in sys.argv[2:]))
