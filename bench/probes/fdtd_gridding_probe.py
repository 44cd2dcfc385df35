"""The FDTD cell's index bias and nucleus contrast by the Ewald mapping's gridding (issue 39, an experiment;
docs/holo.md, "The index bias on the FDTD set"), plain Rytov on the CPU:

- ``nearest``: the default (each cap sample to its nearest bin, each bin the mean of its hits);
- ``tri [THRESH]``: trilinear splatting (each sample over its 8 neighbouring bins, each bin the weighted mean;
  bins whose weights sum to at most THRESH, default 0.1, left unmeasured);
- ``nufft [ITER]``: each sample at its exact frequency by a type-1 NUFFT (ducc0) into the volume, weighted by
  Pipe and Menon's density compensation (ITER iterations, default 6, of w <- w / (w convolved with a Hann
  window's transform) from 1 / the nearest-bin hit count); ``QORA_ROUND=1`` rounds the frequencies to bins,
  which must give ``nearest``'s volume (the check of the NUFFT's conventions).

    PYTHONPATH=src python bench/probes/fdtd_gridding_probe.py nearest|tri|nufft [THRESH|ITER] [ARCHIVE [METHOD ...]]
    QORA_OVERSAMPLE=3 PYTHONPATH=src python bench/probes/fdtd_gridding_probe.py tri 0.1
    QORA_OVERSAMPLE=1.5 PYTHONPATH=src python bench/probes/fdtd_gridding_probe.py nufft 6 ARCHIVE gp tv

METHOD: plain (default), gp, tv (fdtd_cell_probe.py's); GP and TV take the exact spectrum on the nearest-bin
measured bins.

The CUDA mapper keeps nearest-bin tables: this runs on the CPU only.
"""

import math
import os
import sys
from pathlib import Path

import numpy as np

from qora.holo import plans
from qora.holo.plans import _per_illumination, frequencies, nu_z


def _cap_coordinates(geometry, a, ky, kx):
    """Illumination ``a``'s cap: its lateral bins inside the pupil, their factor -4 pi i nu_z / p and the cap's
    continuous 3D coordinates in bins (3, m), turned into the object's frame."""
    n, p = geometry.n, geometry.pixel
    nuy, nux = geometry.illuminations[a]
    my, mx = ky + nuy, kx + nux
    nz = nu_z(my, mx, geometry.medium_frequency)
    ok = (np.hypot(my, mx) <= geometry.pupil_frequency) & np.isfinite(nz)
    qz = nz[ok] - geometry.nu_z_in()[a]
    q = geometry.rotation(a).T @ np.stack([qz, ky[ok], kx[ok]])
    return np.flatnonzero(ok), -4j * math.pi * nz[ok] / p, q * n * p


def _grids(geometry):
    f = frequencies(geometry.n, geometry.pixel)
    return np.meshgrid(f, f, indexing="ij")


def _cap_values(plan, phi):
    from qora.backend.fft import fftn

    g = plan.geometry
    spectra = fftn(np.fft.ifftshift(np.asarray(phi), axes=(-2, -1)), axes=(-2, -1)).reshape(g.count, -1)
    return [plan.factors[a] * spectra[a][plan.lateral[a]] for a in range(g.count)]


class Trilinear(plans.MappingPlan):
    threshold = 0.1

    def __init__(self, geometry):
        n = geometry.n
        self.geometry = geometry
        ky, kx = _grids(geometry)

        def cap(a):
            lateral, factor, u = _cap_coordinates(geometry, a, ky, kx)
            f0 = np.floor(u)
            fr, f0 = u - f0, f0.astype(np.int64)
            targets, weights = [], []
            for dz in (0, 1):
                for dy in (0, 1):
                    for dx in (0, 1):
                        weights.append((fr[0] if dz else 1 - fr[0]) * (fr[1] if dy else 1 - fr[1])
                                       * (fr[2] if dx else 1 - fr[2]))
                        targets.append((((f0[0] + dz) % n) * n + (f0[1] + dy) % n) * n + (f0[2] + dx) % n)
            return np.concatenate(targets), np.concatenate(weights), lateral, factor

        caps = _per_illumination(cap, geometry.count)
        self.targets, self.weights, self.lateral, self.factors = (list(c) for c in zip(*caps))
        self.wsum = np.bincount(np.concatenate(self.targets), np.concatenate(self.weights), minlength=n**3)
        self.hits = (self.wsum > self.threshold).astype(np.int32)
        self.measured = (self.wsum > self.threshold).reshape(n, n, n)

    def __call__(self, phi):
        n = self.geometry.n
        values = np.concatenate([np.tile(v, 8) * w for v, w in zip(_cap_values(self, phi), self.weights)])
        every = np.concatenate(self.targets)
        spectrum = np.bincount(every, values.real, minlength=n**3) + 1j * np.bincount(every, values.imag,
                                                                                       minlength=n**3)
        hit = self.wsum > self.threshold
        spectrum[hit] /= self.wsum[hit]
        spectrum[~hit] = 0
        return spectrum.reshape(n, n, n)


class Nufft(plans.MappingPlan):
    iterations = 6

    def __init__(self, geometry):
        super().__init__(geometry)
        ky, kx = _grids(geometry)
        u = np.concatenate([_cap_coordinates(geometry, a, ky, kx)[2].T for a in range(geometry.count)])
        self.u = np.round(u) if os.environ.get("QORA_ROUND") == "1" else u

    def _density(self):
        import ducc0

        n = self.geometry.n
        coord = 2 * math.pi * self.u / n
        w = (1.0 / self.hits[np.concatenate(self.targets)]).astype(np.complex128)
        r = np.arange(n) - n // 2
        hann = np.cos(np.pi * r / n) ** 2
        window = hann[:, None, None] * hann[None, :, None] * hann[None, None, :]
        for it in range(self.iterations):
            grid = np.zeros((n, n, n), np.complex128)
            ducc0.nufft.nu2u(points=w, coord=coord, forward=False, epsilon=1e-6, nthreads=0, out=grid)
            d = ducc0.nufft.u2nu(grid=grid * window, coord=coord, forward=True, epsilon=1e-6, nthreads=0).real / n**3
            w = w / np.maximum(d, 1e-12)
            print(f"  density iteration {it}: min {d.min():.3f} median {np.median(d):.3f} max {d.max():.3f}",
                  flush=True)
        return w.real

    def __call__(self, phi):
        import ducc0

        from qora.backend.fft import fftn

        n = self.geometry.n
        values = np.concatenate(_cap_values(self, phi))
        density = self._density() if self.iterations else 1.0 / self.hits[np.concatenate(self.targets)]
        out = np.zeros((n, n, n), np.complex128)
        ducc0.nufft.nu2u(points=values * density, coord=2 * math.pi * self.u / n, forward=False, epsilon=1e-9,
                         nthreads=0, out=out)
        return fftn(np.fft.ifftshift(out / n**3))  # the volume's spectrum, FFT order


def main(mode: str = "nearest", setting: str | None = None,
         archive: str = "../shared/data/odt/fdtd_3d_sino_A220_R6.500_tiltyz0.2.tar.lzma", *methods) -> None:
    import qora.holo.api as api
    import qora.holo.odt as odt

    plan = {"nearest": None, "tri": Trilinear, "nufft": Nufft}[mode]
    if plan is Trilinear and setting is not None:
        Trilinear.threshold = float(setting)
    if plan is Nufft and setting is not None:
        Nufft.iterations = int(setting)
    if plan is not None:
        plans.MappingPlan = odt.MappingPlan = api.MappingPlan = plan
    sys.path.insert(0, str(Path(__file__).parent))
    import fdtd_cell_probe

    fdtd_cell_probe.main(archive, "cpu", *(methods or ("plain",)))


if __name__ == "__main__":
    main(*sys.argv[1:])
