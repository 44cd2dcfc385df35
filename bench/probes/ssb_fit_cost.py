"""The standard fit's cost before and after the thinned-band multi-start (issue 23), on the CPU at a
reduced size, in one sitting:

    PYTHONPATH=src python bench/probes/ssb_fit_cost.py [SCAN] [WINDOW] [OUT.json]

The simulator's astigmatic film (``qora bench ssb``'s: C10 150 A, here with 15 A of C12), a SCAN^2
scan (default 128) and a WINDOW^2 detector (default 64); ``fit_session(rotation=0, tilt=False)``
for three seeds, once with the search and the starts on the whole band ("before": ``coarse_rows``
above the band's size) and once thinned at the stride the full-scale band gets by default
(44,247 // COARSE_ROWS = 5, "after"), with the orientation given and searched. Reports per case the
median process time (CPU seconds: the machine is shared, wall time is not comparable), the wall
time, the passes over G of the whole band and of the thinned one, and their sum in whole-band
passes (a thinned pass reads 1 / stride of G), and the fitted values (which must agree).
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np

FULL_SCALE_ROWS = 44247  # the ssb-full band's frequencies (bench-ssb-full.log)


def main(scan: int = 128, window: int = 64, out: str | None = None) -> dict:
    from qora.ssb import Aberrations, Band, Session, amorphous_slices, fit_session, simulate
    from qora.ssb.identify import COARSE_ROWS

    sim = simulate(amorphous_slices((2 * scan, 2 * scan), 0.2, atoms_per_a2=0.1, seed=0), pixel=0.2, stride=2,
                   window=window, aberrations=Aberrations(C10=150.0, C12=(15.0, 0.4)))
    s = Session(sim.data, kv=sim.kv, alpha_mrad=sim.alpha_mrad, scan_step=sim.scan_step)
    nq, nbf = Band(s, ("C10", "C12a", "C12b")).shape
    stride = FULL_SCALE_ROWS // COARSE_ROWS
    fit_session(s, rotation=0.0, tilt=False, trials=16, orientation="identity")  # warm: Numba compiles
    result = {"scan": scan, "window": window, "band": [nq, nbf], "stride_after": stride, "cases": {}}
    for orientation in ("identity", "auto"):
        for label, rows in (("before", 10**9), ("after", nq // stride)):
            cpu, wall, runs = [], [], []
            for seed in range(3):
                c0, w0 = time.process_time(), time.perf_counter()
                r = fit_session(s, rotation=0.0, tilt=False, seed=seed, orientation=orientation, coarse_rows=rows)
                cpu.append(time.process_time() - c0)
                wall.append(time.perf_counter() - w0)
                runs.append(r)
            passes = runs[0]["passes"]
            whole = sum(passes["standard"].values())
            thin = passes.get("standard_coarse", {})
            thin_sum = sum(thin.get(k, 0) for k in ("batch", "value", "derivatives"))
            case = {"cpu_s": float(np.median(cpu)), "wall_s": float(np.median(wall)), "passes": passes,
                    "whole_band_passes": whole + thin_sum / thin.get("stride", 1),
                    "values": [r["standard"]["parameters"] for r in runs],
                    "determined": [all(e["determined"] for e in r["standard"]["identifiability"]["parameters"].values())
                                   for r in runs]}
            result["cases"][f"{orientation}/{label}"] = case
            print(f"{orientation:8s} {label:6s}: {case['cpu_s']:.2f} CPU s ({case['wall_s']:.2f} s wall), "
                  f"{case['whole_band_passes']:.1f} whole-band passes {passes}", flush=True)
        b, a = result["cases"][f"{orientation}/before"], result["cases"][f"{orientation}/after"]
        print(f"{orientation}: after/before CPU time {a['cpu_s'] / b['cpu_s']:.2f}, passes "
              f"{a['whole_band_passes'] / b['whole_band_passes']:.2f}")
    if out:
        with open(out, "w") as f:
            json.dump(result, f, indent=1)
    return result


if __name__ == "__main__":
    args = sys.argv[1:]
    main(int(args[0]) if args else 128, int(args[1]) if len(args) > 1 else 64, args[2] if len(args) > 2 else None)
