"""Photons per speckle of the benchmark's cases as the default recipe computes them (measured counts over the
object volume A / 2^d of the autocorrelation support), for seeds 0 and 1: which cases the few-photon recipe
(below 1000) applies to."""
import numpy as np
from qora.bench import phase_success as ps
from qora.phase.recipe import looks_like_counts, photons_per_speckle
from qora.phase.solver import Solver

for name in ("triangle_256_1e6", "triangle_256", "featured_256", "prism_48", "featured_256_psf"):
    case = ps.CASES[name]
    truth = case.object()
    for seed in (0, 1):
        counts, mask = ps.record(truth, case.detector, seed=seed)
        solver = Solver(counts, mask=mask, backend="cpu")
        pixels = int(solver.default_support().sum()) / 2 ** counts.ndim
        measured = np.where(mask, 0.0, counts) if mask is not None else counts
        pps = photons_per_speckle(float(measured.sum()), pixels)
        print(f"{name} seed {seed}: counts {measured.sum():.3g}, object volume {pixels:.0f} px, "
              f"{pps:.0f} photons per speckle, counts: {looks_like_counts(counts, mask)}, "
              f"few-photon recipe: {looks_like_counts(counts, mask) and pps < 1000}", flush=True)
