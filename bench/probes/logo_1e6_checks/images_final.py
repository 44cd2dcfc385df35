import sys, numpy as np
sys.argv=['x','counts']; sys.path.insert(0,'bench/probes')
import logo_1e6_stages as L
import matplotlib; matplotlib.use('Agg'); import matplotlib.pyplot as plt
pats, mask, truth = L.variants()
out = {}
for name, kw in (("default", {}), ("avg", {"average": True})):
    x, s = L.traced_search(pats[1e6], mask, truth, [0], trace=False, **kw)
    out[name] = (x[0], s[0])
x7, s7 = L.traced_search(pats[1e7], mask, truth, [0], trace=False)
out["1e7 default"] = (x7[0], s7[0])
np.savez('/tmp/images_final.npz', **{k+'_x': v[0] for k, v in out.items()}, **{k+'_s': v[1] for k, v in out.items()})
def align(s):
    # best shift/twin onto truth
    ref = np.conj(np.fft.fft2(truth.astype(float))); best=None
    for flip in (False, True):
        c = s[::-1, ::-1] if flip else s
        cc = np.real(np.fft.ifft2(np.fft.fft2(c.astype(float)) * ref)); k = np.unravel_index(cc.argmax(), cc.shape)
        if best is None or cc.max() > best[0]: best = (cc.max(), flip, k)
    return best[1], best[2]
rows, cols = np.nonzero(truth); sl = (slice(rows.min()-15, rows.max()+15), slice(cols.min()-15, cols.max()+15))
fig, ax = plt.subplots(2, 3, figsize=(15, 10))
for i, (k, (x, s)) in enumerate(out.items()):
    flip, sh = align(s)
    f = (lambda a: a[::-1, ::-1]) if flip else (lambda a: a)
    xs = np.roll(f(np.abs(x)), (-sh[0], -sh[1]), (0, 1)); ss = np.roll(f(s), (-sh[0], -sh[1]), (0, 1))
    ax[0, i].imshow(xs[sl], cmap='gray'); ax[0, i].set_title(k + ' |x|')
    rgb = np.zeros(truth[sl].shape + (3,)); rgb[..., 0] = ss[sl]; rgb[..., 1] = truth[sl]
    ax[1, i].imshow(rgb); ax[1, i].set_title(k + ' support (red) vs truth (green)')
plt.tight_layout(); plt.savefig('/tmp/images_final.png', dpi=60)
