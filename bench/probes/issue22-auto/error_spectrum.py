"""triangle_256_1e6: where in q the found objects' error lies (share of |F(x - truth)|^2 per shell of |q| in pixels,
after alignment at unit norm), and the error after a low-pass at the q where the shells' mean count drops below 1."""
import numpy as np
from qora.bench import phase_success as ps
from qora.phase import reconstruct, analysis
from qora.phase.detector import record

case = ps.CASES["triangle_256_1e6"]; truth = case.object(); counts, mask = record(truth, case.detector, seed=0)
n = truth.shape[0]
g = np.meshgrid(*[np.arange(m) - m // 2 for m in truth.shape], indexing="ij")
q = np.sqrt(sum(a**2 for a in g))
shells = [(0, 4.5), (4.5, 8), (8, 16), (16, 32), (32, 64), (64, 200)]
meas = counts[~mask] if mask is not None else counts.ravel()
for lo, hi in shells:
    sel = (q >= lo) & (q < hi) & ~mask
    print(f"shell {lo}-{hi} px: mean count {counts[sel].mean() if sel.any() else float('nan'):.2f}")
r = reconstruct(counts, mask=mask, starts=4, backend="cpu", keep_all=True)
t = truth / np.linalg.norm(truth)
T = np.fft.fftshift(np.fft.fftn(np.fft.ifftshift(t), norm="ortho"))
for k, o in enumerate(r.objects):
    al, _ = analysis.align(o / np.linalg.norm(o), t)
    D = np.abs(np.fft.fftshift(np.fft.fftn(np.fft.ifftshift(al - t), norm="ortho"))) ** 2
    tot = D.sum()
    shares = [D[(q >= lo) & (q < hi)].sum() / tot for lo, hi in shells]
    err = np.sqrt(tot)
    lows = []
    for cut in (16, 32, 48):
        X = np.fft.fftshift(np.fft.fftn(np.fft.ifftshift(al), norm="ortho")); lp = q < cut
        lows.append(np.linalg.norm((X - T)[lp]) / np.linalg.norm(T[lp]))
    print(f"start {k}: error {err:.3f}; share per shell {[round(s, 3) for s in shares]}; "
          f"error within q<16/32/48: {[round(v, 3) for v in lows]}", flush=True)
