import numpy as np
from qora.holo import reference as R
from qora.holo.plans import MappingPlan
for n in (128, 256):
    g = R.geometry(n)
    plan = MappingPlan(g)
    hits = np.asarray(plan.hits).reshape(n, n, n)
    # c = M(k) + M(-k) on the half spectrum (z, y, x <= n/2)
    m = hits > 0
    mm = np.roll(m[::-1, ::-1, ::-1], 1, axis=(0, 1, 2))
    c = (m.astype(int) + mm)[:, :, : n // 2 + 1]
    nz = c > 0
    print(n, "angles", g.count, "half-spectrum values with c>0:", nz.mean())
    # sectors of 4 consecutive x
    W = n // 2 + 1; P = -(-W // 16) * 16
    pad = np.zeros((n, n, P), bool); pad[:, :, :W] = nz
    sect = pad.reshape(n, n, P // 4, 4).any(-1)
    valid = np.zeros((n, n, P // 4), bool); valid[:, :, : -(-W // 4)] = True
    print("  32-B sectors of a with any c>0:", sect[valid].mean())
    lines = nz.any(axis=0)  # (y, x) z-lines with any data
    print("  z-lines (y, x<=n/2) with data:", lines.mean())
    for F in (8, 16):
        padl = np.zeros((n, P), bool); padl[:, :W] = lines
        tiles = padl.reshape(n, P // F, F).any(-1)
        validt = np.zeros((n, P // F), bool); validt[:, : -(-W // F)] = True
        print(f"  z tiles of {F} x-lines with data:", tiles[validt].mean())
