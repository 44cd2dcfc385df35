"""The fits' thinned band (``coarse_rows``: the orientation check, the search, the C10 grid and every start's Newton
run on it) at full scale (issue 38: the columnar fit 0.35 s against 0.32, the ``tilt=False`` fit 0.21-0.28 s against
0.25): each of ``qora bench ssb-full``'s fits at 8,192 (the default), 4,096 and 2,048 rows, median of 3 after a
warm-up, with the values and the passes each took.

    python bench/probes/coarse_rows_probe.py /tmp/qora-ssb-full
"""

import sys
import time
from pathlib import Path

import numpy as np


def main(directory: str) -> None:
    from qora.bench.ssb_full import full_session

    session = full_session(Path(directory))
    fits = {"default": dict(tilt=True, depth_model="auto"), "columnar": dict(tilt=True, depth_model="columnar"),
            "tilt=False": dict(tilt=False)}
    for rows in (8192, 4096, 2048):
        for label, opts in fits.items():
            session.fit(rotation=0.0, coarse_rows=rows, **opts)  # warm
            times = []
            for seed in range(3):
                t0 = time.perf_counter()
                r = session.fit(rotation=0.0, coarse_rows=rows, seed=seed, **opts)
                times.append(time.perf_counter() - t0)
            best = r.get("better", "standard")
            p = r[best]["parameters"]
            print(f"coarse_rows {rows}, {label}: {np.median(times):.3f} s ({', '.join(f'{t:.3f}' for t in times)}); "
                  f"{best}: " + ", ".join(f"{k} {v:.3f}" for k, v in p.items()) +
                  f"; agreement {r[best]['agreement']:.6f}; stages "
                  + ", ".join(f"{k} {v:.3f}" for k, v in r["timings_s"].items()) + f"; passes {r['passes']}",
                  flush=True)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/tmp/qora-ssb-full")
