import sys, numpy as np, scipy.ndimage as ndi
sys.argv=['x','counts']; sys.path.insert(0,'bench/probes')
import logo_1e6_stages as L
from qora.phase import analysis
import matplotlib; matplotlib.use('Agg'); import matplotlib.pyplot as plt
pats, mask, truth = L.variants()
q = L.radius(mask.shape)
rows, cols = np.nonzero(truth); sl = (slice(rows.min()-15, rows.max()+15), slice(cols.min()-15, cols.max()+15))
hull = ndi.binary_dilation(ndi.binary_fill_holes(ndi.binary_closing(truth, iterations=6)), iterations=4)
fig, ax = plt.subplots(2, 4, figsize=(20, 10))
for j, ph in enumerate((1e6, 1e7)):
    for i, Q in enumerate((None, 160, 128, 96)):
        fm = mask if Q is None else mask | (q > Q)
        x = L.fixed(pats[ph], fm, hull, seeds=(0,), hio=1000, er=100, damp=0.99)[0]
        r = analysis.amplitude_rfactor(x, pats[ph], mask)
        rl = analysis.amplitude_rfactor(x, pats[ph], fm)
        inside = (np.abs(x)**2 * truth).sum() / (np.abs(x)**2).sum()
        print(f"{ph:.0e} hull, fit |q|<={Q}, damp 0.99: R {r:.3f} (R fitted {rl:.3f}), |x|^2 on truth {inside:.3f}; sw IoU " + L.shrinkwrap_sweep(x, hull, truth), flush=True)
        ax[j, i].imshow(np.abs(x)[sl], cmap='gray'); ax[j, i].set_title(f"{ph:.0e} hull fit q<={Q} on-truth {inside:.2f}")
plt.tight_layout(); plt.savefig('/tmp/hull_lowpass.png', dpi=55)
