"""Diagnostic (device): a shard Session on CUDA against the CPU shard, G and band agreement."""
import numpy as np

from qora.ssb.agreement import Band
from qora.ssb.optics import Aberrations
from qora.ssb.session import Session
from qora.ssb.simulate import amorphous_slices, simulate

sim = simulate(amorphous_slices((96, 96), 0.2, seed=4), pixel=0.2, stride=2, window=48, kv=300.0,
               alpha_mrad=20.0, aberrations=Aberrations(C10=120.0, C12=(15.0, 0.4)))
data = sim.data.astype(np.float32)
kw = dict(kv=300.0, alpha_mrad=20.0, scan_step=sim.scan_step)
full = Session(data, **kw)
n = len(full.bf_index)
for sl in (slice(0, n // 2), slice(n // 2, n)):
    c = Session(data, detector=full.detector, pixels=sl, level=full.level, **kw)
    g = Session(data, detector=full.detector, pixels=sl, level=full.level, backend="cuda", **kw)
    print("G rel", np.linalg.norm(g.host_G() - c.G) / np.linalg.norm(c.G))
    for names in (("C10",), ("C10", "C12a", "C12b")):
        bc, bg = Band(c, names), Band(g, names)
        v = {"C10": 120.0, "C12a": 5.0, "C12b": 3.0}
        print(names, "total", bc.total, bg.total, "grid", [len(x) for x in bg._grid[:2]])
        mc, mg = bc.moments(v, order=0), bg.moments(v, order=0)
        print("  S rel", float(np.linalg.norm(mg["S"].get() - mc["S"]) / np.linalg.norm(mc["S"])),
              "N rel", float(np.linalg.norm(mg["N"].get() - mc["N"]) / np.linalg.norm(mc["N"])))
