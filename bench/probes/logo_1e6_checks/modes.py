import sys, numpy as np, scipy.ndimage as ndi
sys.argv=['x','counts']; sys.path.insert(0,'bench/probes')
import logo_1e6_stages as L
from qora.phase import analysis
pats, mask, truth = L.variants()
x0 = L.fixed(pats[0], mask, truth, seeds=(0,))[0]
model = np.abs(np.fft.fftshift(np.fft.fft2(np.fft.ifftshift(x0), norm="ortho")))**2
print("model share of power behind the mask:", model[mask].sum() / model.sum())
hull = ndi.binary_dilation(ndi.binary_fill_holes(ndi.binary_closing(truth, iterations=6)), iterations=4)
rng = np.random.default_rng(7)
for ph in (1e6, 1e7):
    I = rng.poisson(model * ph / model[~mask].sum()).astype(float)
    for label, m in (("mask", mask), ("no mask", np.zeros_like(mask))):
        out = []
        for sup_label, s in (("true", truth), ("hull", hull)):
            xs = L.fixed(I, m, s, seeds=(0, 1), hio=1000, er=100, damp=0.99)
            for x in xs:
                r = analysis.amplitude_rfactor(x, I, m)
                inside = (np.abs(x)**2 * truth).sum() / (np.abs(x)**2).sum()
                out.append(f"{sup_label}: R {r:.3f} on-truth {inside:.2f}")
        rt = analysis.amplitude_rfactor(x0 * np.sqrt(ph / model[~mask].sum()), I, m)
        print(f"{ph:.0e} synthetic from the file object, {label}: truth R {rt:.3f}; " + "; ".join(out), flush=True)
        if ph == 1e6:
            L.traced_search(I, m, truth, [0, 1], trace=False)
