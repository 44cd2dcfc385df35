"""Probe (issue 37's binned variant): a sparsity prior in the positivity passes, so that a fog of low values inside a
loose support is pulled to zero and the shrinkwrap can drop it.

On the binned logo the real-object search ends on supports three times the logo's, filled by a low "fog" that fits
the binned data better than the logo does (docs/phase.md, "The ESRF logo"); no force pulls a loose support in. Here
the ER iterations that end each cycle of the positivity passes (not the final refinement, whose fit stays unbiased)
are followed by the soft threshold max(x - lam, 0) inside the support, before the cycle's shrinkwrap, lam = KAPPA times each start's 99th percentile of p there.

    PYTHONPATH=src:bench/probes python bench/probes/binned_shrinkage.py BINS KAPPA [STARTS] [THRESHOLD]
    # BINS 2x2, 1x2 (the fine model on the binned pattern) or 1x1 (the file itself, the same search)
"""

import sys
import time

import numpy as np
import scipy.ndimage

from binned_free_r import FineIterations, FinePattern, rfactors, search

from qora.phase import analysis


class ShrinkIterations(FineIterations):
    """The fine model's iterations, the soft threshold after the positivity passes' ER iterations (damp < 1)."""

    kappa = 0.1

    def positive(self, x, support, count, *, hio, damp):
        x = super().positive(x, support, count, hio=hio, damp=damp)
        if hio or damp >= 1.0 or self.kappa <= 0:
            return x
        inside = np.where(support, x, 0)
        scale = np.array([np.percentile(v[s], 99) if s.any() else 0.0 for v, s in zip(inside, support)])
        lam = (self.kappa * scale).astype(np.float32)[:, None, None]
        return np.where(support, np.maximum(x - lam, 0), 0).astype(np.float32)


def main(bins="2x2", kappa=0.1, starts=3, threshold=0.15):
    from qora.bench.phase_measured import LOGO_IOU_BOUND, load_logo

    intensity, mask, truth = load_logo()
    b = tuple(int(v) for v in bins.split("x"))
    n0, n1 = intensity.shape
    binned = np.where(mask, 0, intensity).reshape(n0 // b[0], b[0], n1 // b[1], b[1]).sum(axis=(1, 3))
    bmeas = ~mask.reshape(n0 // b[0], b[0], n1 // b[1], b[1]).any(axis=(1, 3))
    pattern = FinePattern(binned, bmeas, b)
    run = ShrinkIterations(pattern, starts)
    run.kappa = float(kappa)
    t0 = time.perf_counter()
    x, s = search(pattern, [np.random.default_rng(k) for k in range(starts)], run, scipy.ndimage, threshold=threshold)
    took = time.perf_counter() - t0
    print(f"bins {b}, kappa {kappa}, threshold {threshold}: {took:.0f} s for {starts} ({took / starts:.1f} s a start)",
          flush=True)
    for k in range(starts):
        (r,) = rfactors(x[k], binned, [bmeas], b)
        iou = analysis.support_iou(s[k], truth)
        print(f"start {k}: binned R {r:.4f}, IoU {iou:.3f} (>= {LOGO_IOU_BOUND}), support {int(s[k].sum())} px",
              flush=True)


if __name__ == "__main__":
    main(*(t(a) for t, a in zip((str, float, int, float), sys.argv[1:])))
