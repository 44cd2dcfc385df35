"""How far the free-LLK switch's final free LLK spreads between the CPU and the CUDA variants, and
between seeds on one backend (issue 22: the graph variant's parity test).

    PYTHONPATH=src python bench/probes/phase_switch_spread.py [SEEDS]

The case of tests/phase/test_phase_llk.py (48^2 triangle, 1e5 photons, 5% held out, recipe
"HIO(switch=10)**400 ER**30"). Prints one JSON line per (backend, variant, seed): the switch iteration,
the final free LLK, the Fourier error; and for the CUDA kernel variants the largest difference between
the ``fused`` (eager launches) and ``graph`` (the same kernels as a CUDA graph) objects and error
histories, which must be zero if the graph replays what the eager loop does.
"""

import json
import sys

import numpy as np

from qora.phase import objects
from qora.phase.detector import Detector, record
from qora.phase.solver import Solver

seeds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
obj = objects.triangle(48)
counts, mask = record(obj, Detector(photons=1e5, beamstop=2, gap=1), seed=0)
recipe = "HIO(switch=10)**400 ER**30"
kept = {}
for backend, variant in (("cpu", "auto"), ("cuda", "naive"), ("cuda", "fused"), ("cuda", "graph")):
    for seed in range(seeds):
        r = Solver(counts, mask=mask, backend=backend, variant=variant, free_fraction=0.05).run(
            support=objects.support_of(obj), recipe=recipe, starts=1, seed=seed)
        switched = [e["iteration"] for e in r.support_log if e["status"] == "switched"]
        kept[(variant, seed)] = r
        print(json.dumps({"backend": backend, "variant": variant, "seed": seed, "switched": switched,
                          "free_llk": float(r.free_llk[0]), "fourier_error": float(r.final_errors[0])}), flush=True)
for seed in range(seeds):
    a, b = kept[("fused", seed)], kept[("graph", seed)]
    print(json.dumps({"seed": seed, "graph_vs_fused_object": float(np.max(np.abs(a.object - b.object))),
                      "graph_vs_fused_errors": float(np.nanmax(np.abs(a.errors - b.errors)))}), flush=True)
