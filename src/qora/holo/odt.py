"""Optical diffraction tomography by the Fourier diffraction theorem.

Each illumination's scattered-field spectrum lies on a cap of the Ewald sphere in
the object's 3D spectrum. With phi the first-order field ratio (the Rytov phase
log(u / u_in), or u / u_in - 1 for Born), bin kappa of phi's 2D spectrum belongs to

    q = (kappa, nu_z(kappa + nu_in) - nu_z,in),   V^(q) = -4 pi i nu_z(kappa + nu_in) Phi(kappa)

(cycles per um; V = k0^2 (n^2 - n_m^2) the scattering potential). Mapping: each
(illumination, lateral bin) adds its value to the *nearest* axial bin, and every
volume bin is divided by its number of hits. Linear-interpolation gridding was tried
in the seed and failed its voxel-level check; nearest-bin mapping passes it.

The missing cone (and the gaps between caps) is then filled by Gerchberg-Papoulis
with non-negativity of the potential (samples denser than their medium), in C2C or
on half spectra (R2C), or by FISTA with an isotropic TV proximal step (FGP).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from qora.holo.geometry import Geometry, frequencies, nu_z
from qora.holo.unwrap import rytov

__all__ = ["map_spectrum", "reconstruct", "index_from_potential", "potential_from_index", "OdtResult",
           "gerchberg_papoulis", "gerchberg_papoulis_r2c"]


def index_from_potential(v, geometry: Geometry):
    """n = Re sqrt(n_m^2 + V / k0^2) for a (possibly complex) potential V in rad^2/um^2."""
    return np.sqrt(geometry.medium_index**2 + np.asarray(v) / geometry.k0**2 + 0j).real.astype(np.float32)


def potential_from_index(index, geometry: Geometry):
    """V = k0^2 (n^2 - n_m^2)."""
    return geometry.k0**2 * (np.asarray(index, np.float64) ** 2 - geometry.medium_index**2)


def map_spectrum(phi, geometry: Geometry):
    """Volume spectrum (n, n, n) (FFT order, origin at index 0 on every axis) and its hit counts.

    ``phi`` (A, n, n) is the first-order field ratio at z = 0, centre-origin, on the
    geometry's grid. Frequencies outside the detection pupil, or evanescent, are skipped.
    """
    phi = np.asarray(phi)
    count, n = phi.shape[0], geometry.n
    if phi.shape != (geometry.count, n, n):
        raise ValueError(f"phi must be ({geometry.count}, {n}, {n}) for this geometry, got {phi.shape}")
    if geometry.geometry != "scan":
        raise NotImplementedError("the rotation geometry's mapping is not built yet")
    p = geometry.pixel
    f = frequencies(n, p)
    ky, kx = np.meshgrid(f, f, indexing="ij")
    spectrum = np.zeros((n, n, n), np.complex128)
    hits = np.zeros((n, n, n), np.int32)
    km = geometry.medium_frequency
    nu_in_z = geometry.nu_z_in()
    iy, ix = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    for a in range(count):
        nuy, nux = geometry.illuminations[a]
        my, mx = ky + nuy, kx + nux
        nz = nu_z(my, mx, km)
        ok = (np.hypot(my, mx) <= geometry.pupil_frequency) & np.isfinite(nz)
        nz = np.where(ok, nz, 0.0)
        qz = nz - nu_in_z[a]
        kz = np.round(qz * n * p).astype(int) % n
        # continuous Phi ~ p^2 DFT; V_DFT3 = V^ / p^3
        spec2 = np.fft.fft2(np.fft.ifftshift(phi[a])) * p**2
        values = -4j * math.pi * nz * spec2 / p**3
        np.add.at(spectrum, (kz[ok], iy[ok], ix[ok]), values[ok])
        np.add.at(hits, (kz[ok], iy[ok], ix[ok]), 1)
    measured = hits > 0
    spectrum[measured] /= hits[measured]
    return spectrum, hits


def _to_volume(spectrum):
    return np.fft.fftshift(np.fft.ifftn(spectrum))


def gerchberg_papoulis(data, measured, iterations: int):
    """C2C Gerchberg-Papoulis: inverse FFT, keep max(Re, 0), FFT, restore the measured bins.

    Returns the final complex potential (centre-origin) after one more inverse FFT.
    """
    estimate = data.copy()
    for _ in range(iterations):
        v = np.fft.ifftn(estimate)
        v = np.maximum(v.real, 0.0)
        estimate = np.fft.fftn(v)
        estimate[measured] = data[measured]
    return _to_volume(estimate)


def _mirror(a):
    """a(-k) on the FFT grid (origin at index 0) of every axis."""
    out = a
    for ax in range(a.ndim):
        out = np.roll(np.flip(out, axis=ax), 1, axis=ax)
    return out


def gerchberg_papoulis_r2c(data, measured, iterations: int):
    """The same iterates as :func:`gerchberg_papoulis` on half spectra (R2C), returning the real volume.

    After the constraint the estimate E is the spectrum of a real volume, and the
    restore step followed by taking the real part equals H(Y) = a + b E with
    a = (P(k) + conj P(-k)) / 2 and b = 1 - (M(k) + M(-k)) / 2 (see docs/holo.md).
    """
    n = data.shape
    axes = tuple(range(len(n)))
    half = n[-1] // 2 + 1
    m = measured.astype(np.float64)
    a_full = (data * measured + np.conj(_mirror(data * measured))) / 2
    b_full = 1 - (m + _mirror(m)) / 2
    a = a_full[..., :half]
    b = b_full[..., :half]
    estimate = a.copy()
    for _ in range(iterations):
        v = np.maximum(np.fft.irfftn(estimate, s=n, axes=axes), 0.0)
        estimate = a + b * np.fft.rfftn(v, axes=axes)
    return np.fft.fftshift(np.fft.irfftn(estimate, s=n, axes=axes))


@dataclass
class OdtResult:
    """A reconstructed refractive-index volume (z, y, x), float32, centre-origin, and how it was made."""

    index: np.ndarray
    geometry: Geometry
    method: str
    approximation: str
    iterations: int
    info: dict = field(default_factory=dict)


def reconstruct(ratio, geometry: Geometry, *, approximation: str = "rytov", method: str = "gp",
                iterations: int = 50, r2c: bool = False) -> OdtResult:
    """Refractive-index volume from field ratios u / u_in (A, n, n) at z = 0.

    Parameters
    ----------
    ratio : ndarray (A, n, n) complex
        Field ratios, centre-origin, one per illumination of ``geometry``.
    approximation : {"rytov", "born"}
        First-order field: the Rytov phase log(r) (unwrapped, border rule), or r - 1.
    method : {"plain", "gp"}
        Plain inversion of the mapped spectrum, or Gerchberg-Papoulis with non-negativity.
    iterations : int
        Gerchberg-Papoulis iterations.
    r2c : bool
        Run Gerchberg-Papoulis on half spectra (real transforms): same iterates, half the memory.
    """
    ratio = np.asarray(ratio)
    if not np.iscomplexobj(ratio):
        raise ValueError("ratio must be complex (u / u_in)")
    if not np.all(np.isfinite(ratio)):
        raise ValueError("ratio has non-finite values")
    if approximation == "rytov":
        phi = rytov(ratio)
    elif approximation == "born":
        phi = ratio - 1
    else:
        raise ValueError(f"approximation must be 'rytov' or 'born', got {approximation!r}")
    spectrum, hits = map_spectrum(phi, geometry)
    measured = hits > 0
    if method == "plain":
        potential = _to_volume(spectrum)
        iterations = 0
    elif method == "gp":
        if iterations < 1:
            raise ValueError(f"iterations must be at least 1, got {iterations}")
        potential = (gerchberg_papoulis_r2c if r2c else gerchberg_papoulis)(spectrum, measured, iterations)
    else:
        raise ValueError(f"method must be 'plain' or 'gp', got {method!r}")
    return OdtResult(index_from_potential(potential, geometry), geometry, method, approximation, iterations,
                     info={"measured_fraction": float(measured.mean()), "r2c": bool(r2c)})
