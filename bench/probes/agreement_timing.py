"""Probe (issue 37's GPU row): the agreement report of 10 starts at 512^2 on the host and on the device, timed and
profiled (the top entries by cumulative time).

    QORA_CDI_DATA=.cdi-data PYTHONPATH=src python bench/probes/agreement_timing.py
"""

import cProfile
import pstats
import time

import numpy as np

from qora.bench.phase_measured import load_logo
from qora.phase import analysis


def objects_like_a_run(truth, starts=10, seed=0):
    """The true support with 10% noise, shifted by up to 20 px, every third start its twin."""
    rng = np.random.default_rng(seed)
    out = []
    for k in range(starts):
        o = truth.astype(np.complex64) * (1 + 0.1 * rng.standard_normal(truth.shape))
        o = np.roll(o, tuple(rng.integers(-20, 20, 2)), (0, 1))
        out.append((analysis.twin(o) if k % 3 == 0 else o).astype(np.complex64))
    return np.stack(out)


def main():
    import cupy as cp

    intensity, _, truth = load_logo()
    objects = objects_like_a_run(truth)
    supports = np.abs(objects) > 0.5
    scores = np.arange(10.0)
    for label, objs in (("host", objects), ("device", cp.asarray(objects))):
        for run in range(2):
            t0 = time.perf_counter()
            report = analysis.agreement(objs, supports, scores, intensity=intensity)
            print(f"{label} run {run}: {time.perf_counter() - t0:.3f} s; {report['message']}", flush=True)
        profile = cProfile.Profile()
        profile.enable()
        analysis.agreement(objs, supports, scores, intensity=intensity)
        profile.disable()
        pstats.Stats(profile).sort_stats("cumulative").print_stats(14)


if __name__ == "__main__":
    main()
