import sys, numpy as np, scipy.ndimage as ndi
sys.argv=['x','counts']; sys.path.insert(0,'bench/probes')
import logo_1e6_stages as L
from qora.phase import analysis, envelope
from qora.phase.envelope import _Supports
from qora.phase.envelope_iterate import Pattern
import matplotlib; matplotlib.use('Agg'); import matplotlib.pyplot as plt
steps=_Supports(np,ndi,2)
pats, mask, truth = L.variants()
hull = ndi.binary_dilation(ndi.binary_fill_holes(ndi.binary_closing(truth, iterations=6)), iterations=4)
rows, cols = np.nonzero(truth); sl = (slice(rows.min()-15, rows.max()+15), slice(cols.min()-15, cols.max()+15))
fig, ax = plt.subplots(1, 4, figsize=(20, 5)); i = 0
for ph in (1e6, 1e7):
    p = Pattern(pats[ph], mask, np); run = envelope.iterations_for(p, L.BE, 2)
    s = np.broadcast_to(hull, (2,) + hull.shape).copy()
    x = np.stack([np.random.default_rng(k).random(hull.shape).astype(np.float32) for k in (0, 1)]) * s
    x = run.positive(x, s, 1000, hio=True, damp=0.99)
    acc = np.zeros(x.shape); n = 2000
    for _ in range(n):
        pr, err = run.project_real(x, 0.99); acc += np.where(s & (pr >= 0), pr, 0)
        x = run.update(x, pr, s, hio=True, positive=True)
    mean = (acc / n).astype(np.float32)
    for k in range(2):
        m = mean[k]; inside = (m**2 * truth).sum() / (m**2).sum()
        res = []
        for sig in (0.5, 1.0, 2.0):
            for thr in (0.15, 0.25, 0.35, 0.5):
                sw = steps.shrinkwrap(m[None], hull[None], sig, thr)[0]
                iou, cov, pur = L.best_overlap(sw, truth); res.append(f"{sig}/{thr}: {int(sw.sum())} {iou:.2f}")
        print(f"{ph:.0e} hull, mean of {n} HIO+ iterates, seed {k}: R {analysis.amplitude_rfactor(m, pats[ph], mask):.3f} on-truth {inside:.2f}; sw IoU " + ", ".join(res), flush=True)
        ax[i].imshow(m[sl], cmap='gray'); ax[i].set_title(f"{ph:.0e} hull mean HIO seed {k} on-truth {inside:.2f}"); i += 1
plt.tight_layout(); plt.savefig('/tmp/hullavg.png', dpi=55)
