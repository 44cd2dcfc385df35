"""A cell phantom (cytoplasm, nucleus, nucleolus) and an independent forward model for it.

:class:`CellPhantom` is three nested ellipsoids of refractive index, evaluated analytically at any
point of the object's frame, so the sample can be rendered in its pose at every rotation angle
without resampling a volume. :func:`multislice_ratio` simulates the field ratios u / u_in a
rotation (or scanning) measurement records, by split-step wide-angle multislice on a grid twice as
fine as the reconstruction's (half the pixel, half the slice): the exact angular-spectrum
propagator exp(2 pi i (nu_z - n_m / lambda) dz) between slices and a phase screen
exp(i k0 (n - n_m) dz) per slice. It shares no code with the reconstruction (no Ewald mapping, no
first-order model) nor with :mod:`qora.holo.bpm` (which runs on the reconstruction's grid with its
own tables), and it keeps multiple scattering, so it is a fair truth for the solvers' tests and
the benchmark in docs/holo.md. Lengths in um, frequencies in cycles/um, arrays centre-origin (z, y, x).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from qora.holo.geometry import Geometry, frequencies, nu_z
from qora.io.validate import integer

__all__ = ["Ellipsoid", "CellPhantom", "default_cell", "multislice_ratio", "region_masks", "structure_metrics",
           "edge_width"]


@dataclass(frozen=True)
class Ellipsoid:
    """An ellipsoid of ``index`` (complex for absorption): centre (z, y, x) and semi-axes (z, y, x) in um."""

    center: tuple
    semi_axes: tuple
    index: complex

    def inside(self, z, y, x):
        c, s = self.center, self.semi_axes
        return ((z - c[0]) / s[0]) ** 2 + ((y - c[1]) / s[1]) ** 2 + ((x - c[2]) / s[2]) ** 2 <= 1.0


@dataclass(frozen=True)
class CellPhantom:
    """Nested regions in a medium; a later region replaces the earlier ones where it lies (nucleus
    inside cytoplasm, nucleolus inside nucleus). ``names`` label the regions (for the metrics)."""

    regions: tuple
    names: tuple
    medium_index: float

    def index(self, z, y, x, *, supersample: int = 1, pixel: float = 0.0):
        """Refractive index at the points (z, y, x) (um, object frame), averaged over supersample^3
        sub-points spread across a voxel of edge ``pixel`` (anti-aliased edges)."""
        s = max(1, int(supersample))
        sub = ((np.arange(s) + 0.5) / s - 0.5) * pixel
        dtype = complex if any(np.iscomplexobj(r.index) for r in self.regions) else float
        out = np.zeros(np.broadcast(z, y, x).shape, dtype)
        for dz in sub:
            for dy in sub:
                for dx in sub:
                    v = np.full(out.shape, self.medium_index, dtype)
                    for r in self.regions:
                        v = np.where(r.inside(z + dz, y + dy, x + dx), r.index, v)
                    out += v
        return out / s**3

    def render(self, n: int, pixel: float, *, supersample: int = 3) -> np.ndarray:
        """The index volume (n, n, n) on the centre-origin grid of ``pixel`` um (object frame)."""
        ax = (np.arange(n) - n // 2) * pixel
        z, y, x = np.meshgrid(ax, ax, ax, indexing="ij", sparse=True)
        return self.index(z, y, x, supersample=supersample, pixel=pixel)


def default_cell(medium_index: float = 1.333, *, scale: float = 1.0, absorption: float = 0.0) -> CellPhantom:
    """A cell of about 5.6 x 4.8 x 4.4 um (times ``scale``): cytoplasm n_m + 0.012, an off-centre nucleus
    n_m + 0.022 and a nucleolus n_m + 0.032 in it (index contrasts of the order HL60 cells show);
    ``absorption`` the imaginary index of the nucleolus."""
    s = float(scale)
    m = medium_index
    cyto = Ellipsoid((0.0, 0.0, 0.0), (2.2 * s, 2.4 * s, 2.8 * s), m + 0.012)
    nucleus = Ellipsoid((0.2 * s, -0.3 * s, 0.5 * s), (1.3 * s, 1.4 * s, 1.6 * s), m + 0.022)
    nucleolus = Ellipsoid((0.1 * s, -0.5 * s, 0.9 * s), (0.55 * s, 0.55 * s, 0.6 * s), m + 0.032 + 1j * absorption)
    return CellPhantom((cyto, nucleus, nucleolus), ("cytoplasm", "nucleus", "nucleolus"), m)


def region_masks(phantom: CellPhantom, n: int, pixel: float, *, margin: float = 0.0) -> dict:
    """Boolean masks (n, n, n) of each region's voxels (the later regions excluded), eroded by ``margin``
    um (voxels within it of an edge are left out: the metrics read the regions' insides)."""
    ax = (np.arange(n) - n // 2) * pixel
    z, y, x = np.meshgrid(ax, ax, ax, indexing="ij", sparse=True)
    masks = {}
    shrunk = [Ellipsoid(r.center, tuple(max(a - margin, 1e-9) for a in r.semi_axes), r.index) for r in phantom.regions]
    grown = [Ellipsoid(r.center, tuple(a + margin for a in r.semi_axes), r.index) for r in phantom.regions]
    for i, name in enumerate(phantom.names):
        m = np.broadcast_to(shrunk[i].inside(z, y, x), (n, n, n)).copy()
        for later in grown[i + 1:]:
            m &= ~later.inside(z, y, x)
        masks[name] = m
    outside = np.ones((n, n, n), bool)
    for r in grown:
        outside &= ~np.broadcast_to(r.inside(z, y, x), (n, n, n))
    masks["medium"] = outside
    return masks


def multislice_ratio(phantom: CellPhantom, geometry: Geometry, *, fine: int = 2, supersample: int = 1) -> np.ndarray:
    """Field ratios u / u_in (A, n, n) at z = 0 of ``phantom`` for every pose of ``geometry``, by
    wide-angle multislice on a grid ``fine`` times finer (pixel and slice ``geometry.pixel / fine``).

    Each pose is rendered analytically (the object-frame index at rotation(a).T r), the plane wave of
    the illumination is propagated through the fine volume, the exit field is propagated back to the
    focal plane z = 0, divided by the incident wave, and band-limited by the detection pupil onto the
    geometry's n x n grid. Returns complex128.
    """
    fine = integer("fine", fine, low=1)
    n, p = geometry.n, geometry.pixel
    nf, d = n * fine, p / fine
    km = geometry.medium_frequency
    k0 = geometry.k0
    ax = (np.arange(nf) - nf // 2) * d
    f = frequencies(nf, d)
    ky, kx = np.meshgrid(f, f, indexing="ij")
    yy, xx = np.meshgrid(ax, ax, indexing="ij")
    out = np.empty((geometry.count, n, n), np.complex128)
    fc = frequencies(n, p)
    cy, cx = np.meshgrid(fc, fc, indexing="ij")
    lo = np.concatenate([np.arange(n - n // 2), np.arange(nf - n // 2, nf)])  # the coarse bins in the fine FFT order
    nu_in_z = geometry.nu_z_in()
    for a, (nuy, nux) in enumerate(geometry.illuminations):
        my, mx = ky + nuy, kx + nux
        nz = nu_z(my, mx, km)
        live = np.isfinite(nz)
        # the envelope u / exp(2 pi i nu_in . r): propagator relative to the incident wave
        prop = np.where(live, np.exp(2j * math.pi * (np.where(live, nz, 0) - nu_in_z[a]) * d), 0)
        rot = geometry.rotation(a)
        env = np.ones((nf, nf), np.complex128)
        for k in range(nf):
            zk = ax[k]
            # the object-frame coordinates of the lab points (zk, y, x): rotation(a).T @ r
            oz = rot[0, 0] * zk + rot[1, 0] * yy + rot[2, 0] * xx
            oy = rot[0, 1] * zk + rot[1, 1] * yy + rot[2, 1] * xx
            ox = rot[0, 2] * zk + rot[1, 2] * yy + rot[2, 2] * xx
            contrast = phantom.index(oz, oy, ox, supersample=supersample, pixel=d) - phantom.medium_index
            # thin slice: phase screen of the contrast (the obliquity of a tilted wave is in nu_z)
            env = np.fft.ifft2(np.fft.fft2(env * np.exp(1j * k0 * contrast * d)) * prop)
        # each screen stands for the slab centred on its plane, so the loop ends one slice past the
        # last plane: propagate from there back to the focal plane z = 0
        z_end = ax[-1] + d
        back = np.where(live, np.exp(-2j * math.pi * (np.where(live, nz, 0) - nu_in_z[a]) * z_end), 0)
        spec = (np.fft.fft2(np.fft.ifftshift(env)) * back)[np.ix_(lo, lo)]
        pupil = np.hypot(cy + nuy, cx + nux) <= geometry.pupil_frequency
        out[a] = np.fft.fftshift(np.fft.ifft2(spec * pupil)) * (n / nf) ** 2
    return out


def edge_width(volume, phantom: CellPhantom, pixel: float, region: int = 1) -> float:
    """The 90%-to-10% width (um) of the edge of ``phantom.regions[region]`` against the region around it,
    along the +x ray from the region's centre (linear interpolation between voxels).

    The levels are the two regions' mean indices inside (:func:`region_masks`, eroded by a pixel); NaN
    when the profile never falls to 10% (an edge that is gone).
    """
    n = volume.shape[0]
    masks = region_masks(phantom, n, pixel, margin=pixel)
    inner = float(np.real(volume[masks[phantom.names[region]]]).mean())
    outer = float(np.real(volume[masks[phantom.names[region - 1]]]).mean())
    c = phantom.regions[region].center
    kz, ky = (int(round(v / pixel)) + n // 2 for v in c[:2])
    i0 = int(round(c[2] / pixel)) + n // 2
    x = (np.arange(i0, n) - n // 2) * pixel
    prof = (np.real(volume[kz, ky, i0:]) - outer) / (inner - outer)

    def crossing(level):
        below = np.flatnonzero(prof < level)
        if not below.size or below[0] == 0:
            return math.nan
        j = below[0]
        return x[j - 1] + (prof[j - 1] - level) / (prof[j - 1] - prof[j]) * (x[j] - x[j - 1])

    return crossing(0.1) - crossing(0.9)


def structure_metrics(volume, phantom: CellPhantom, pixel: float) -> dict:
    """RMSE (index), each region's contrast against the medium relative to the truth's (1 is exact), and the
    nucleus edge width (um) of ``volume`` and of the truth (rendered supersampled)."""
    n = volume.shape[0]
    truth = np.real(phantom.render(n, pixel))
    masks = region_masks(phantom, n, pixel, margin=pixel)
    m = phantom.medium_index
    contrast = {k: (float(np.real(volume[v]).mean()) - m) / (float(truth[v].mean()) - m)
                for k, v in masks.items() if k != "medium"}
    return {"rmse": float(np.sqrt(np.mean((np.real(volume) - truth) ** 2))), "contrast": contrast,
            "edge_um": edge_width(volume, phantom, pixel), "edge_truth_um": edge_width(truth, phantom, pixel)}
