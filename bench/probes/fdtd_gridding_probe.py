"""The FDTD cell's index bias and nucleus contrast with the Ewald mapping's nearest-bin gridding against trilinear
splatting (issue 39, an experiment; docs/holo.md, "The index bias on the FDTD set"): each cap sample spread over
its 8 neighbouring bins with trilinear weights, each bin the weighted mean (bins whose weights sum to at most
THRESH left unmeasured). CPU only: the CUDA mapper keeps nearest-bin tables.

    PYTHONPATH=src python bench/probes/fdtd_gridding_probe.py nearest|tri [THRESH] [ARCHIVE]
    QORA_OVERSAMPLE=3 PYTHONPATH=src python bench/probes/fdtd_gridding_probe.py tri 0.1
"""
import math, sys, time
import numpy as np
from qora.holo import plans
from qora.holo.plans import frequencies, nu_z, _per_illumination

class Trilinear(plans.MappingPlan):
    def __init__(self, geometry):
        n, p = geometry.n, geometry.pixel
        self.geometry = geometry
        f = frequencies(n, p)
        ky, kx = np.meshgrid(f, f, indexing="ij")
        km = geometry.medium_frequency
        nu_in_z = geometry.nu_z_in()
        def cap(a):
            nuy, nux = geometry.illuminations[a]
            my, mx = ky + nuy, kx + nux
            nz = nu_z(my, mx, km)
            ok = (np.hypot(my, mx) <= geometry.pupil_frequency) & np.isfinite(nz)
            qz = nz[ok] - nu_in_z[a]
            q = geometry.rotation(a).T @ np.stack([qz, ky[ok], kx[ok]])
            u = q * n * p
            f0 = np.floor(u)
            fr = u - f0
            f0 = f0.astype(np.int64)
            targets, weights = [], []
            for dz in (0, 1):
                for dy in (0, 1):
                    for dx in (0, 1):
                        w = (fr[0] if dz else 1 - fr[0]) * (fr[1] if dy else 1 - fr[1]) * (fr[2] if dx else 1 - fr[2])
                        t = (((f0[0] + dz) % n) * n + (f0[1] + dy) % n) * n + (f0[2] + dx) % n
                        targets.append(t); weights.append(w)
            return np.concatenate(targets), np.concatenate(weights), np.flatnonzero(ok), -4j * math.pi * nz[ok] / p
        caps = _per_illumination(cap, geometry.count)
        self.targets = [c[0] for c in caps]
        self.weights = [c[1] for c in caps]
        self.lateral = [c[2] for c in caps]
        self.factors = [c[3] for c in caps]
        every = np.concatenate(self.targets)
        self.wsum = np.bincount(every, np.concatenate(self.weights), minlength=n**3)
        self.hits = (self.wsum > THRESH).astype(np.int32)
        self.measured = (self.wsum > THRESH).reshape(n, n, n)

    def __call__(self, phi):
        from qora.backend.fft import fftn
        g = self.geometry; n = g.n
        spectra = fftn(np.fft.ifftshift(np.asarray(phi), axes=(-2, -1)), axes=(-2, -1)).reshape(g.count, -1)
        vals = []
        for a in range(g.count):
            v = self.factors[a] * spectra[a][self.lateral[a]]
            vals.append(np.tile(v, 8) * self.weights[a])
        values = np.concatenate(vals); every = np.concatenate(self.targets)
        spectrum = np.bincount(every, values.real, minlength=n**3) + 1j * np.bincount(every, values.imag, minlength=n**3)
        hit = self.wsum > THRESH
        spectrum[hit] /= self.wsum[hit]
        spectrum[~hit] = 0
        return spectrum.reshape(n, n, n)

THRESH = float(sys.argv[2]) if len(sys.argv) > 2 else 0.1
if sys.argv[1] == "tri":
    plans.MappingPlan = Trilinear
    import qora.holo.odt as odt
    odt.MappingPlan = Trilinear
    import qora.holo.api as api
    api.MappingPlan = Trilinear
ARCHIVE = sys.argv[3] if len(sys.argv) > 3 else "../shared/data/odt/fdtd_3d_sino_A220_R6.500_tiltyz0.2.tar.lzma"
sys.argv = [sys.argv[0], ARCHIVE, "cpu", "plain"]
sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))
import fdtd_cell_probe
fdtd_cell_probe.main(*sys.argv[1:])
