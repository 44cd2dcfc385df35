"""Prototype (issue 37's binned variant): the logo's pattern binned 2x2, reconstructed on the original (2x finer)
grid, each measured pixel the sum of its 2x2 sub-pixels' intensities.

    PYTHONPATH=src python bench/probes/binned_fine_model.py [STARTS]
"""

import sys
import time

import numpy as np
import scipy.ndimage

from binned_free_r import FineIterations, block_sum  # the modulus step on rectangular bins: one copy

from qora.phase import analysis, envelope


class FinePattern:
    """What envelope.search needs of a pattern, for binned data on the fine grid (FFT layout bins: (2K, 2K+1))."""

    def __init__(self, binned, binned_mask, b=2):
        xp = np
        self.xp, self.b = xp, (b, b)
        n = tuple(s * b for s in binned.shape)
        self.shape, self.axes = n, (1, 2)
        measured_b = ~binned_mask
        # detector layout, fine: each bin's intensity spread over its sub-pixels
        fine = np.kron(np.where(measured_b, binned, 0) / b**2, np.ones((b, b)))
        self.intensity, self.measured = fine, np.kron(measured_b, np.ones((b, b), bool))
        # FFT layout of the bins: shifting the fine grid by n//2 (even) keeps the blocks aligned
        self.bins = np.fft.ifftshift(np.where(measured_b, binned, 0))  # binned FFT layout (n//2/b shift)
        self.bmeas = np.fft.ifftshift(measured_b)
        self.norm = float(self.bins[self.bmeas].sum())
        self.sqrt_bins = np.sqrt(self.bins).astype(np.float32)


def binned_rfactor(obj, binned, binned_mask, b=2):
    power = np.abs(np.fft.fftshift(np.fft.fft2(obj, norm="ortho"))) ** 2
    model = np.sqrt(block_sum(power[None], (b, b))[0])
    meas = ~binned_mask
    data = np.sqrt(binned)
    return float(np.sum(np.abs(model - data)[meas]) / np.sum(data[meas]))


def main(starts=3):
    from qora.bench.phase_measured import LOGO_IOU_BOUND, load_logo

    intensity, mask, truth = load_logo()
    n = intensity.shape[0]
    binned = np.where(mask, 0, intensity).reshape(n // 2, 2, n // 2, 2).sum(axis=(1, 3))
    bmask = mask.reshape(n // 2, 2, n // 2, 2).any(axis=(1, 3))
    print(f"binned {binned.shape}, unmeasured bins {int(bmask.sum())}", flush=True)
    pattern = FinePattern(binned, bmask)
    t0 = time.perf_counter()
    run = FineIterations(pattern, starts)
    rngs = [np.random.default_rng(k) for k in range(starts)]
    x, s = envelope.search(pattern, rngs, run, scipy.ndimage)
    print(f"{time.perf_counter() - t0:.0f} s", flush=True)
    for k in range(starts):
        r = binned_rfactor(x[k], binned, bmask)
        iou = analysis.support_iou(s[k], truth)
        print(f"start {k}: binned R {r:.4f}, IoU {iou:.3f} (>= {LOGO_IOU_BOUND}), support {int(s[k].sum())} px",
              flush=True)
    np.save("/tmp/binned_fine_objects.npy", x)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
