"""Issue 22: the noise band (qora.phase.band) on the few-photon cases; prints per-start errors.

Usage: PYTHONPATH=src python bench/probes/band_few_photons.py CASE STARTS RECIPE [RECIPE ...]
(the bound is the fixed 0.2: no known-support reference run, to keep the probe short).
"""

import sys
import time

from qora.bench.phase_success import CASES, run_case

case, starts = sys.argv[1], int(sys.argv[2])
for recipe in sys.argv[3:]:
    t0 = time.perf_counter()
    row = run_case(CASES[case], starts=starts, recipe=recipe, backend="cpu", reference=False)
    errors = ", ".join(f"{e:.3f}" for e in row["errors"])
    print(f"{case} | {recipe} | {row['succeeded']}/{starts} below {row['bound']:.3f} | median {row['median_error']:.3f} "
          f"| errors {errors} | {row['s_per_start']:.1f} s/start | wall {time.perf_counter() - t0:.0f} s", flush=True)
