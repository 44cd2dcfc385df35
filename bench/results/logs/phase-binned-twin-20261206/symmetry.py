import sys, numpy as np
sys.path.insert(0, "/work/main/src"); sys.path.insert(0, "/work/main/bench/probes")
from binned_twin_trace import twin_scores
from qora.bench.phase_measured import load_logo
I, m, T = load_logo("/work/main/.cdi-data")
x = np.load(sys.argv[1])
for o in x:
    o = np.real(o).astype(np.float64)
    F = np.fft.fft2(o)
    c = np.real(np.fft.ifft2(F * F))  # o correlated with its point reflection: peak at the reflection's shift
    s = np.unravel_index(c.argmax(), c.shape)
    refl = np.roll(o[::-1, ::-1], (s[0] + 1, s[1] + 1), (0, 1))
    print("sym corr", np.sum(o * refl) / np.sum(o * o), "shift", s)
    anti = (o - refl) / 2
    a, b = np.clip(anti, 0, None), np.clip(-anti, 0, None)
    print(" o", twin_scores(o[None], T), " anti+", twin_scores(a[None], T), " anti-", twin_scores(b[None], T), "mass", a.sum(), b.sum())
print("suppression")
for o in x:
    o = np.clip(np.real(o).astype(np.float64), 0, None)
    for it in range(6):
        F = np.fft.fft2(o)
        c = np.real(np.fft.ifft2(F * F)); s = np.unravel_index(c.argmax(), c.shape)
        refl = np.roll(o[::-1, ::-1], (s[0] + 1, s[1] + 1), (0, 1))
        o = np.clip(o - 0.9 * refl, 0, None)
        sup = o > 0.15 * o.max()
        print(it, twin_scores(o[None], T), "sym", np.sum(o*np.roll(o[::-1, ::-1], (s[0] + 1, s[1] + 1), (0, 1)))/np.sum(o*o), int(sup.sum()))
