import sys, time, numpy as np, scipy.ndimage as ndi
sys.argv=['x','counts']; sys.path.insert(0,'bench/probes')
import logo_1e6_stages as L
from qora.phase import analysis
from qora.phase.envelope_iterate import Pattern
pats, mask, truth = L.variants()
hull = ndi.binary_dilation(ndi.binary_fill_holes(ndi.binary_closing(truth, iterations=6)), iterations=4)
for ph in (1e6, 1e7):
    for k in (1.0, 2.0):
        t=time.perf_counter()
        p = Pattern(pats[ph], mask, np)
        run = L.band_iterations(p, 1, k)
        s = hull[None].copy()
        x = np.random.default_rng(0).random(hull.shape).astype(np.float32)[None] * s
        x = run.positive(x, s, 1000, hio=True, damp=0.99)
        x = run.positive(x, s, 100, hio=False, damp=0.99)[0]
        r = analysis.amplitude_rfactor(x, pats[ph], mask)
        inside = (np.abs(x)**2 * truth).sum() / (np.abs(x)**2).sum()
        np.save(f'/tmp/band_{ph:.0e}_{k}.npy', x)
        print(f"{ph:.0e} hull, band k={k}: R {r:.3f}, |x|^2 on truth {inside:.3f}; sw IoU " + L.shrinkwrap_sweep(x, hull, truth), f"{time.perf_counter()-t:.0f} s", flush=True)
