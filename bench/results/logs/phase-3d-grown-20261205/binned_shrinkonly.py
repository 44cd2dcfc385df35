"""Experiment: the binned logo (fine model) with the envelope's positivity shrinkwrap allowed only to shrink."""
import sys, time
sys.path.insert(0, "/work/main/bench/probes")
import numpy as np, scipy.ndimage
from qora.phase import envelope, analysis
import binned_fine_model as bfm
from binned_free_r import FineIterations

mode = sys.argv[1] if len(sys.argv) > 1 else "shrink"
starts = int(sys.argv[2]) if len(sys.argv) > 2 else 3
orig = envelope._Supports.shrinkwrap
def shrink_only(self, x, support, sigma, threshold):
    new = orig(self, x, support, sigma, threshold)
    if threshold == 0.15 and mode == "shrink":
        new = new & support
    return new
envelope._Supports.shrinkwrap = shrink_only
sizes = []
og = envelope._Supports.grown
def grown(self, support, px):
    out = og(self, support, px); sizes.append(("grown", px, [int(v.sum()) for v in out])); return out
envelope._Supports.grown = grown

from qora.bench.phase_measured import load_logo
intensity, mask, truth = load_logo()
n = intensity.shape[0]
binned = np.where(mask, 0, intensity).reshape(n // 2, 2, n // 2, 2).sum(axis=(1, 3))
bmask = mask.reshape(n // 2, 2, n // 2, 2).any(axis=(1, 3))
pattern = bfm.FinePattern(binned, bmask)
t0 = time.perf_counter()
run = FineIterations(pattern, starts)
x, s = envelope.search(pattern, [np.random.default_rng(k) for k in range(starts)], run, scipy.ndimage)
print(mode, f"{time.perf_counter()-t0:.0f} s", sizes, flush=True)
for k in range(starts):
    print(f"start {k}: binned R {bfm.binned_rfactor(x[k], binned, bmask):.4f}, IoU {analysis.support_iou(s[k], truth):.3f}, support {int(s[k].sum())}", flush=True)
