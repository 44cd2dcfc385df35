"""Where the envelope search's time goes (the search's iterations and support steps, then the report: R-factors,
the starts' agreement), on the logo from 10 starts, twice (the first includes compiling and graph capture).
Usage: ``QORA_CDI_DATA=.cdi-data python bench/probes/envelope_timing.py [cuda|cpu] [starts]``."""

import sys
import time

from qora.bench.phase_measured import load_logo
from qora.phase import reconstruct

backend = sys.argv[1] if len(sys.argv) > 1 else "cuda"
starts = int(sys.argv[2]) if len(sys.argv) > 2 else 10
intensity, mask, _ = load_logo()
for run in range(2):
    t0 = time.perf_counter()
    result = reconstruct(intensity, mask=mask, starts=starts, backend=backend)
    wall = time.perf_counter() - t0
    t = result.timings
    print(f"run {run}: {backend} {starts} starts, recipe {result.recipe}: wall {wall:.2f} s (search {t['search_s']:.2f} s,"
          f" report {t['report_s']:.2f} s); best R {min(t['rfactor']):.4f}; {result.agreement['message']}", flush=True)
