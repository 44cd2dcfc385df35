"""Phantoms: spheres as volumes, their analytic first-Born fields, and holograms.

The forward model here evaluates the sphere's Fourier transform at the exact
Ewald-cap frequencies of each illumination, so it shares no gridding with the
reconstruction (which maps measured frequencies to the nearest volume bin).

Scattering potential: V(r) = k0^2 (n(r)^2 - n_m^2), with (lap + k_m^2) u = -V u.
First Born, refocused to z = 0 (see docs/holo.md for the derivation): the field
ratio phi = u_s / u_in has the continuous 2D spectrum

    Phi(kappa) = i V^(kappa, nu_z(kappa + nu_in) - nu_z,in) / (4 pi nu_z(kappa + nu_in))

inside the detection pupil |kappa + nu_in| <= NA / lambda, and zero outside.
"""

from __future__ import annotations

import cmath
import math
import numbers
from dataclasses import dataclass

import numpy as np

from qora.holo.geometry import Geometry, frequencies, nu_z
from qora.io.errors import InputError
from qora.io.validate import memory_needed, nonnegative, positive

__all__ = ["Sphere", "render_spheres", "sphere_transform", "born_ratio", "holograms", "add_noise",
           "simulate_holograms", "scattering_amplitude", "partial_wave_ratio", "simulation_bytes",
           "check_simulation_memory"]


@dataclass(frozen=True)
class Sphere:
    """A homogeneous sphere: centre (z, y, x) in um from the volume centre, radius in um, index."""

    center: tuple = (0.0, 0.0, 0.0)
    radius: float = 1.5
    index: float = 1.36

    def __post_init__(self) -> None:
        try:
            c = tuple(float(v) for v in np.asarray(self.center, float).reshape(-1))
        except (TypeError, ValueError):
            raise InputError(f"the sphere's center must be three numbers (z, y, x) in um, got {self.center!r}") from None
        if len(c) != 3 or not all(math.isfinite(v) for v in c):
            raise InputError(f"the sphere's center must be three finite numbers (z, y, x) in um, got {self.center!r}")
        positive("the sphere's radius", self.radius, unit="um")
        index = self.index
        if not isinstance(index, numbers.Number) or isinstance(index, bool) or not cmath.isfinite(index) \
                or not complex(index).real > 0:
            raise InputError(f"the sphere's index must be a finite number with a positive real part, got {index!r}")


def _axes(n: int, pixel: float) -> np.ndarray:
    return (np.arange(n) - n // 2) * pixel


def render_spheres(spheres, n: int, pixel: float, medium_index: float, *, supersample: int = 1) -> np.ndarray:
    """Refractive-index volume (n, n, n), float32, of spheres in the medium.

    ``pixel`` is the voxel edge (um); ``medium_index`` and the result are dimensionless.

    ``supersample`` > 1 anti-aliases: each voxel takes the index contrast times the
    fraction of its supersample^3 sub-voxels inside the sphere (hard edges with 1).
    Overlapping spheres: the later one wins.
    """
    z = _axes(n, pixel)
    vol = np.full((n, n, n), medium_index, np.float64)
    s = max(1, int(supersample))
    sub = (np.arange(s) + 0.5) / s - 0.5  # sub-voxel offsets, in pixels
    for sph in spheres:
        c = np.asarray(sph.center, float)
        # only the bounding box of the sphere needs work
        lo = np.searchsorted(z, c - sph.radius - pixel) - 1
        hi = np.searchsorted(z, c + sph.radius + pixel) + 1
        lo = np.clip(lo, 0, n)
        hi = np.clip(hi, 0, n)
        sl = tuple(slice(a, b) for a, b in zip(lo, hi))
        gz, gy, gx = np.meshgrid(z[sl[0]], z[sl[1]], z[sl[2]], indexing="ij")
        frac = np.zeros(gz.shape)
        for dz in sub:
            for dy in sub:
                for dx in sub:
                    r2 = ((gz + dz * pixel - c[0]) ** 2 + (gy + dy * pixel - c[1]) ** 2
                          + (gx + dx * pixel - c[2]) ** 2)
                    frac += r2 <= sph.radius**2
        frac /= s**3
        block = vol[sl]
        vol[sl] = np.where(frac > 0, block * (1 - frac) + sph.index * frac, block)
    return vol.astype(np.float32)


def sphere_transform(q, radius: float):
    """Fourier transform (cycles convention, exp(-2 pi i q.r)) of the unit ball of ``radius`` at |q| = ``q``.

    4 pi R^3 (sin x - x cos x) / x^3 with x = 2 pi |q| R; its value at q = 0 is the volume.
    """
    x = 2 * math.pi * np.asarray(q, float) * radius
    small = np.abs(x) < 1e-3
    xs = np.where(small, 1.0, x)
    full = 4 * math.pi * radius**3 * (np.sin(xs) - xs * np.cos(xs)) / xs**3
    series = 4 * math.pi * radius**3 * (1 / 3 - x**2 / 30)
    return np.where(small, series, full)


def born_ratio(spheres, geometry: Geometry, *, n: int | None = None, pixel: float | None = None) -> np.ndarray:
    """The first-Born field ratio u_s / u_in at z = 0 for every illumination: (A, n, n) complex128.

    Computed on a grid of ``n`` x ``n`` samples at ``pixel`` um (the geometry's by
    default; a hologram grid of twice the samples at half the pixel has the same
    frequency bins), centre-origin.
    """
    n = n or geometry.n
    pixel = pixel or geometry.pixel
    f = frequencies(n, pixel)
    ky, kx = np.meshgrid(f, f, indexing="ij")
    km = geometry.medium_frequency
    out = np.empty((geometry.count, n, n), np.complex128)
    nu_in_z = geometry.nu_z_in()
    for a, (nuy, nux) in enumerate(geometry.illuminations):
        my, mx = ky + nuy, kx + nux
        inside = np.hypot(my, mx) <= geometry.pupil_frequency
        nz = nu_z(my, mx, km)
        inside &= np.isfinite(nz)
        nz = np.where(inside, nz, 1.0)
        qz = nz - nu_in_z[a]
        spec = np.zeros((n, n), np.complex128)
        for sph in spheres:
            dv = geometry.k0**2 * (sph.index**2 - geometry.medium_index**2)
            qabs = np.sqrt(ky**2 + kx**2 + qz**2)
            c = geometry.rotation(a) @ np.asarray(sph.center, float)  # the sample's pose at this angle
            shift = np.exp(-2j * math.pi * (qz * c[0] + ky * c[1] + kx * c[2]))
            spec += dv * sphere_transform(qabs, sph.radius) * shift
        spec = np.where(inside, 1j * spec / (4 * math.pi * nz), 0)
        # continuous spectrum -> samples: ifft2 gives sum_kappa Phi e^{2 pi i kappa r} / n^2; the
        # integral over kappa has the bin area 1 / (n pixel)^2
        out[a] = np.fft.fftshift(np.fft.ifft2(spec)) / pixel**2
    return out


def holograms(ratio, geometry: Geometry, carrier, *, hologram_pixel: float | None = None) -> np.ndarray:
    """Off-axis holograms |u_ref + u_in r|^2, (A, N, N) float64, on the grid of ``ratio``.

    ``ratio`` (A, N, N) is the field ratio r = u / u_in on the hologram grid (pixel
    ``hologram_pixel``, half the geometry's pixel by default); ``carrier`` (nu_y, nu_x)
    is the reference wave's frequency. A ratio of ones gives the background holograms.
    """
    ratio = np.asarray(ratio)
    count, n = ratio.shape[0], ratio.shape[-1]
    pixel = hologram_pixel or geometry.pixel / 2
    y = _axes(n, pixel)
    Y, X = np.meshgrid(y, y, indexing="ij")
    ref = np.exp(2j * math.pi * (carrier[0] * Y + carrier[1] * X))
    out = np.empty(ratio.shape, np.float64)
    for a in range(count):
        nuy, nux = geometry.illuminations[a]
        u_in = np.exp(2j * math.pi * (nuy * Y + nux * X))
        out[a] = np.abs(ref + u_in * ratio[a]) ** 2
    return out


def add_noise(holos, fraction: float = 0.02, *, seed: int = 0) -> np.ndarray:
    """Gaussian noise of ``fraction`` times the mean hologram intensity."""
    rng = np.random.default_rng(seed)
    holos = np.asarray(holos, float)
    return holos + rng.normal(0.0, fraction * holos.mean(), holos.shape)


def scattering_amplitude(cos_theta, radius: float, sphere_index: complex, medium_index: float, wavelength: float,
                         *, terms: int | None = None):
    """Scalar scattering amplitude f(theta) (um) of a homogeneous sphere: u_s ~ f e^{ikr} / r.

    Partial waves of (lap + k^2) u = 0 with u and du/dr continuous at the surface:

        A_l = [k1 j_l'(k1 a) j_l(k a) - k j_l(k1 a) j_l'(k a)] / [k j_l(k1 a) h_l'(k a) - k1 j_l'(k1 a) h_l(k a)]
        f(theta) = -(i / k) sum (2l + 1) A_l P_l(cos theta)

    with k = 2 pi n_m / lambda outside and k1 = 2 pi n / lambda inside (rad/um).
    """
    from scipy.special import spherical_jn, spherical_yn

    k = 2 * math.pi * medium_index / wavelength
    k1 = 2 * math.pi * sphere_index / wavelength
    x, x1 = k * radius, k1 * radius
    lmax = terms or int(np.ceil(abs(x) + 4 * abs(x) ** (1 / 3) + 10))
    ls = np.arange(lmax + 1)
    j, jd = spherical_jn(ls, x), spherical_jn(ls, x, derivative=True)
    y, yd = spherical_yn(ls, x), spherical_yn(ls, x, derivative=True)
    h, hd = j + 1j * y, jd + 1j * yd
    j1, j1d = spherical_jn(ls, x1), spherical_jn(ls, x1, derivative=True)
    a = (k1 * j1d * j - k * j1 * jd) / (k * j1 * hd - k1 * j1d * h)
    c = np.asarray(cos_theta, float)
    total = np.zeros(c.shape, np.complex128)
    p_prev, p = np.ones_like(c), c.copy()  # Legendre recurrence
    for l in ls:
        pl = p_prev if l == 0 else p
        total += (2 * l + 1) * a[l] * pl
        if l >= 1:
            p_prev, p = p, ((2 * l + 1) * c * p - l * p_prev) / (l + 1)
    return -1j / k * total


def partial_wave_ratio(sphere: Sphere, geometry: Geometry, *, n: int | None = None,
                       pixel: float | None = None) -> np.ndarray:
    """The exact scalar field ratio u_s / u_in of one sphere at z = 0, through the pupil: (A, n, n).

    The outgoing partial waves are written as plane waves (exact for z beyond the sphere)
    and refocused to z = 0: U_s(mu) = i f(Theta(mu)) / nu_z(mu), Theta the angle between the
    scattered direction and the illumination (the sphere is symmetric), for |mu| <= NA /
    lambda; a sphere centred at c adds the phase of the incident wave at c and the shift.
    """
    n = n or geometry.n
    pixel = pixel or geometry.pixel
    f = frequencies(n, pixel)
    ky, kx = np.meshgrid(f, f, indexing="ij")
    km = geometry.medium_frequency
    nu_in_z = geometry.nu_z_in()
    out = np.empty((geometry.count, n, n), np.complex128)
    for a, (nuy, nux) in enumerate(geometry.illuminations):
        c = geometry.rotation(a) @ np.asarray(sphere.center, float)
        my, mx = ky + nuy, kx + nux
        nz = nu_z(my, mx, km)
        inside = (np.hypot(my, mx) <= geometry.pupil_frequency) & np.isfinite(nz)
        nz = np.where(inside, nz, 1.0)
        cos_t = (my * nuy + mx * nux + nz * nu_in_z[a]) / km**2
        amp = scattering_amplitude(np.clip(cos_t, -1, 1), sphere.radius, sphere.index, geometry.medium_index,
                                   geometry.wavelength)
        qz = nz - nu_in_z[a]
        shift = np.exp(-2j * math.pi * (qz * c[0] + ky * c[1] + kx * c[2]))
        spec = np.where(inside, 1j * amp / nz * shift, 0)
        out[a] = np.fft.fftshift(np.fft.ifft2(spec)) / pixel**2
    return out


def simulation_bytes(geometry: Geometry, model: str = "born", *, truth: bool = True) -> int:
    """The peak host memory (bytes) of simulating holograms of ``geometry`` by ``model`` ("born", "exact"
    or "bpm"), and with ``truth`` of rendering the index volume (float64, n^3, with its float32 copy):
    known before anything is allocated, to refuse a size that cannot fit."""
    a, n = geometry.count, geometry.n
    big2 = (2 * n) ** 2
    # the fields (complex128) with the background's ones, the sample and background holograms (float64),
    # and one image's temporaries
    total = a * big2 * (2 * 16 + 2 * 8) + 24 * 16 * big2
    if model == "bpm":  # the contrast and its screens, the envelopes and ratios of every illumination
        total += n**3 * (8 + 16) + 4 * a * n * n * 16 + 2 * a * big2 * 16  # and the upsampling's spectra
    if truth:
        total += n**3 * (8 + 4)
    return int(total)


def check_simulation_memory(geometry: Geometry, model: str = "born", *, truth: bool = False,
                            hint: str = "make the volume smaller (a smaller geometry n)") -> None:
    """Refuse (MemoryNeeded) a simulation that needs more host memory than is available."""
    from qora.backend import host

    available = host.available_memory()
    memory_needed(simulation_bytes(geometry, model, truth=truth), f"simulating {geometry.count} holograms of "
                  f"{2 * geometry.n}^2 ({model})", available=available, hint=hint)


def simulate_holograms(spheres, geometry: Geometry, *, model: str = "born", noise: float = 0.0, seed: int = 0,
                       carrier=None):
    """Sample and background holograms (A, 2n, 2n) of spheres, at half the geometry's pixel.

    ``model``: "born" gives the Rytov-consistent field u_in exp(phi_Born) (what the Rytov
    reconstruction inverts exactly), "exact" the partial-wave solution of one sphere.
    ``carrier`` (nu_y, nu_x), cycles/um, defaults to the reference's (a quarter of the sampling frequency on
    the diagonal); ``noise`` is a fraction of the mean intensity. Returns
    ``(holograms, backgrounds, hologram_pixel)``: intensities in units of the (unit-amplitude) reference
    wave's, and the hologram pixel in um.
    """
    big, hp = 2 * geometry.n, geometry.pixel / 2
    noise = nonnegative("noise", noise)
    if model not in ("born", "exact"):
        raise InputError(f"model must be 'born' or 'exact', got {model!r}")
    check_simulation_memory(geometry, model)
    if model == "exact":
        if len(spheres) != 1:
            raise InputError("the exact partial-wave model is for one sphere")
        field = 1 + partial_wave_ratio(spheres[0], geometry, n=big, pixel=hp)
    elif model == "born":
        field = np.exp(born_ratio(spheres, geometry, n=big, pixel=hp))
    else:
        raise InputError(f"model must be 'born' or 'exact', got {model!r}")
    return holograms_from_fields(field, geometry, noise=noise, seed=seed, carrier=carrier)


def holograms_from_fields(field, geometry: Geometry, *, noise: float = 0.0, seed: int = 0, carrier=None):
    """Sample and background holograms of field ratios u / u_in (A, 2n, 2n) at half the geometry's
    pixel: ``(holograms, backgrounds, hologram_pixel)``; ``carrier`` and ``noise`` as in
    :func:`simulate_holograms`. ``field``: dimensionless complex ratios on the (2n, 2n) hologram grid;
    the holograms are intensities in units of the (unit-amplitude) reference wave's, ``hologram_pixel`` in um."""
    from qora.holo import reference

    big, hp = np.shape(field)[-1], geometry.pixel / 2
    carrier = reference.carrier(big, hp) if carrier is None else np.asarray(carrier, float)
    holos = holograms(field, geometry, carrier, hologram_pixel=hp)
    bgs = holograms(np.ones_like(field), geometry, carrier, hologram_pixel=hp)
    if noise > 0:
        holos, bgs = add_noise(holos, noise, seed=seed), add_noise(bgs, noise, seed=seed + 1)
    return holos, bgs, hp
