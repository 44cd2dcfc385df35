"""Two CPU probes behind docs/ssb-performance.md, sections 6 and 7.

``search-host``: the TPE search's host time per batch of 8, with a stand-in band whose agreement
costs nothing (so only the search's own NumPy work is timed; 5 searches of 200 trials).

``bias``: the thick-sample fit against the simulated truth by depth: C10 = 100 A, C12 = 20 A at
0.6 rad, tilt (2, -1) mrad, the full-scale optics (300 kV, 30 mrad, 0.373 A steps) on a 48 x 48
scan with a 62-pixel probe window, no noise, 96 search trials; one film per line.

Run: ``PYTHONPATH=src python3 bench/probes/ssb_fit_probe.py search-host|bias``.
"""

import json
import sys
import time

import numpy as np

from qora.ssb import Aberrations, Session, amorphous_slices, simulate, tpe_search

FILMS = (  # (atoms per A^2 per slice, slices, thickness A)
    (0.16, 1, 0.0), (0.02, 8, 120.0), (0.005, 8, 120.0), (0.02, 24, 120.0))


class _FreeBand:
    parameters = ("C10", "C12a", "C12b")

    def evaluate_batch(self, sets):
        return np.array([-(v["C10"] - 100.0) ** 2 - v["C12a"] ** 2 - v["C12b"] ** 2 for v in sets])


def search_host(repeats: int = 5) -> dict:
    t0 = time.perf_counter()
    for seed in range(repeats):
        tpe_search(_FreeBand(), seed=seed)
    return {"host_ms_per_batch": (time.perf_counter() - t0) / repeats / 25 * 1e3}


def bias(density: float, slices: int, thickness: float, scan: int = 48, window: int = 62) -> dict:
    step, kv, alpha = 0.373, 300.0, 30.0
    phases = amorphous_slices((2 * scan, 2 * scan), step / 2, slices=slices, atoms_per_a2=density, seed=1)
    sim = simulate(phases, pixel=step / 2, stride=2, window=window, kv=kv, alpha_mrad=alpha,
                   aberrations=Aberrations(C10=100.0, C12=(20.0, 0.6)), thickness=thickness, tilt=(2e-3, -1e-3))
    fit = Session(sim.data, kv=kv, alpha_mrad=alpha, scan_step=sim.scan_step, rotation=0.0).fit(rotation=0.0,
                                                                                                trials=96)
    return {"density": density, "slices": slices, "thickness": thickness, "phase_rms": float(np.std(sim.phase)),
            "standard": fit["standard"]["parameters"], "thick": fit["thick"]["parameters"],
            "agreement": [fit["standard"]["agreement"], fit["thick"]["agreement"]]}


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else "search-host"
    if what == "search-host":
        print(json.dumps(search_host()))
    elif what == "bias":
        for film in FILMS:
            print(json.dumps(bias(*film)))
    else:
        raise SystemExit("usage: ssb_fit_probe.py search-host|bias")
