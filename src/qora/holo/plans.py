"""The host tables both backends use, computed once per geometry: the one CPU/CUDA seam.

- :class:`CropPlan`: the sideband window (rows, columns, pupil, scale) of :func:`qora.holo.fields.extract_fields`.
- :class:`MappingPlan`: the Ewald mapping (targets, lateral bins, factors, hit counts) of the ODT.
- :func:`solver_grid`: the solver's grid (a fast FFT length of at least n * oversample).
- :class:`BpmTables` / :func:`bpm_tables`: the beam propagation model's per-illumination tables.

Everything here is NumPy on the host (float64 / complex128); the CPU modules use the tables as
they are, the CUDA modules cast and upload them once. Nothing here touches a device; the host work
(the caps of a mapping plan, the caps' transforms) runs on :func:`qora.backend.host.num_threads` threads.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from qora.backend.fft import fast_length
from qora.holo.filters import check_filter, filter_weights
from qora.holo.geometry import Geometry, frequencies, nu_z
from qora.io.errors import InputError
from qora.io.validate import numbers_only

__all__ = ["CropPlan", "stack_holograms", "intensities", "cuda_pipeline_bytes", "MappingPlan", "mapping_plan", "solver_grid", "BpmTables", "bpm_tables", "check_scan",
           "lab_geometry"]


class CropPlan:
    """The crop of :func:`extract_fields`, computed once: window rows and columns, filter, scale.

    ``big``: the hologram size N, or its shape (M, N) for a rectangular one; ``n``: the window (and
    field) size, or its shape (n0, n1). ``filter`` (a shape of :mod:`qora.holo.filters`) of radius
    ``pupil_frequency`` (cycles/um) about the sideband; ``pupil`` holds its weights (n0, n1), FFT order.
    """

    def __init__(self, big, sideband, *, hologram_pixel: float, n, pupil_frequency: float,
                 filter: str = "disk") -> None:
        shape, window = _pair(big), _pair(n)
        if window[0] > shape[0] or window[1] > shape[1]:
            raise InputError(f"the crop window n={n} exceeds the hologram size {big}")
        self.shape, self.window = shape, window
        self.big, self.n = shape[-1], window[-1]  # the square sizes the CUDA stage reads
        self.filter = check_filter(filter)
        self.sideband = np.asarray(sideband, float)
        df = 1.0 / (np.asarray(shape) * hologram_pixel)
        centre = np.round(self.sideband / df).astype(int)  # integer bin of the sideband
        m0, m1 = (np.fft.fftfreq(w, 1.0 / w).astype(int) for w in window)  # window offsets in FFT order
        self.rows = (centre[0] + m0) % shape[0]
        self.cols = (centre[1] + m1) % shape[1]
        fy = (centre[0] + m0) * df[0]
        fx = (centre[1] + m1) * df[1]
        self.pupil = filter_weights(self.filter, fy[:, None] - self.sideband[0], fx[None, :] - self.sideband[1],
                                    pupil_frequency)
        self.scale = window[0] * window[1] / (shape[0] * shape[1])

    @property
    def square(self) -> bool:
        return self.shape[0] == self.shape[1] and self.window[0] == self.window[1]

    def __call__(self, hologram) -> np.ndarray:
        spec = np.fft.fft2(np.fft.ifftshift(hologram))
        window = spec[np.ix_(self.rows, self.cols)] * self.pupil
        return np.fft.fftshift(np.fft.ifft2(window)) * self.scale


def _pair(value) -> tuple[int, int]:
    """An int N as (N, N), a pair as two ints (sizes in pixels)."""
    if np.ndim(value) == 0:
        return int(value), int(value)
    a, b = (int(v) for v in value)
    return a, b


def stack_holograms(holograms, name: str = "holograms", *, square: bool = True):
    """Holograms as a float64 stack (A, M, N) and whether one (M, N) was given; checked real (holograms
    are intensities: complex values are refused, not cast), square (M = N, unless ``square`` is False)
    and finite (InputError saying how many values are not)."""
    holos = intensities(name, holograms)
    single = holos.ndim == 2
    if single:
        holos = holos[None]
    if holos.ndim != 3 or (square and holos.shape[-1] != holos.shape[-2]):
        raise InputError(f"{name} must be (A, N, N) or (N, N), got shape {holos.shape}")
    return holos, single


def intensities(name: str, values, dtype=np.float64) -> np.ndarray:
    """``values`` as a real ``dtype`` array of finite intensities: complex values (a field passed for its
    hologram) and NaN/Inf are refused with an InputError naming ``name`` and saying how many."""
    a = np.asarray(values)
    numbers_only(name, a, hint="holograms are real intensities |u_ref + u|^2 (pass abs(x)**2 if x is a field)")
    a = np.asarray(a, dtype)
    if np.issubdtype(a.dtype, np.floating):
        bad = a.size - int(np.count_nonzero(np.isfinite(a)))
        if bad:
            raise InputError(f"{name}: {bad} non-finite (NaN or Inf) values of {a.size}; correct or "
                             "replace them (e.g. by the neighbours' mean) before reconstructing")
    return a


class MappingPlan:
    """Where each (illumination, lateral bin) lands in the volume spectrum, computed once.

    For illumination a: the flat volume index of its nearest axial bin, the mask of
    lateral bins inside the pupil, and the factor -4 pi i nu_z / pixel that turns a
    2D DFT value of phi into a 3D DFT value of the potential; and the hit counts.

    ``gridding`` "nearest" averages the samples of each bin; "exact" keeps every sample at its own
    frequency (:mod:`qora.holo.gridding`: ``points``, the samples' frequencies in bins (M, 3), and their
    density weights, made once here; ``progress`` is told of each of their iterations). Both keep the nearest-bin
    hits: the solvers' measured bins.
    """

    def __init__(self, geometry: Geometry, gridding: str = "nearest", progress=None) -> None:
        from qora.holo.gridding import GRIDDINGS

        if gridding not in GRIDDINGS:
            raise InputError(f"gridding must be one of {GRIDDINGS}, got {gridding!r}")
        n, p = geometry.n, geometry.pixel
        self.geometry, self.gridding = geometry, gridding
        f = frequencies(n, p)
        ky, kx = np.meshgrid(f, f, indexing="ij")
        km = geometry.medium_frequency
        nu_in_z = geometry.nu_z_in()
        exact = gridding == "exact"

        def cap(a):
            nuy, nux = geometry.illuminations[a]
            my, mx = ky + nuy, kx + nux
            nz = nu_z(my, mx, km)
            ok = (np.hypot(my, mx) <= geometry.pupil_frequency) & np.isfinite(nz)
            q = np.stack([nz[ok] - nu_in_z[a], ky[ok], kx[ok]])
            if geometry.angles is not None:  # rotation: the cap turned back into the object's frame
                q = geometry.rotation(a).T @ q
            u = q * (n * p)  # in bins; scanning: the lateral ones are the volume's own (integers)
            k3 = np.round(u).astype(np.int64) % n
            target = (k3[0] * n + k3[1]) * n + k3[2]
            # continuous Phi ~ p^2 DFT2 and V_DFT3 = V^ / p^3: the factor is -4 pi i nu_z / p
            return target, np.flatnonzero(ok), -4j * math.pi * nz[ok] / p, (u.T if exact else None)

        caps = _per_illumination(cap, geometry.count)
        self.targets = [c[0] for c in caps]
        self.lateral = [c[1] for c in caps]
        self.factors = [c[2] for c in caps]
        every = np.concatenate(self.targets) if caps else np.zeros(0, np.int64)
        self.hits = np.bincount(every, minlength=n**3).astype(np.int32)
        self.measured = (self.hits > 0).reshape(n, n, n)
        self.points = self.density = None
        if exact:
            from qora.holo.gridding import density_weights

            self.points = np.concatenate([c[3] for c in caps]) if caps else np.zeros((0, 3))
            self.density = density_weights(self.points, 1.0 / self.hits[every], n, progress=progress)

    def __call__(self, phi) -> np.ndarray:
        """The mapped volume spectrum (FFT order, origin at index 0), averaged over hits; with exact gridding the
        spectrum of the samples' non-uniform transform on the measured bins (zero elsewhere).

        The caps' 2D spectra are one batched transform on the host's threads; the sums per volume
        bin one ``bincount`` over every (illumination, lateral bin) (``np.add.at`` per illumination
        took most of this stage's time)."""
        from qora.backend.fft import fftn

        g = self.geometry
        n = g.n
        phi = np.asarray(phi)
        if phi.shape != (g.count, n, n):
            raise InputError(f"phi must be ({g.count}, {n}, {n}) for this geometry, got {phi.shape}")
        spectra = fftn(np.fft.ifftshift(phi, axes=(-2, -1)), axes=(-2, -1)).reshape(g.count, -1)
        values = np.concatenate([self.factors[a] * spectra[a][self.lateral[a]] for a in range(g.count)])
        if self.gridding == "exact":
            from qora.holo.gridding import nonuniform_volume

            spectrum = fftn(np.fft.ifftshift(nonuniform_volume(values * self.density, self.points, n)))
            spectrum[~self.measured] = 0  # the solvers' data: measured bins only, as the nearest-bin mapping's
            return spectrum
        every = np.concatenate(self.targets)
        spectrum = (np.bincount(every, values.real, minlength=n**3)
                    + 1j * np.bincount(every, values.imag, minlength=n**3))
        hit = self.hits > 0
        spectrum[hit] /= self.hits[hit]
        return spectrum.reshape(n, n, n)

    def bin_sums(self, phi):
        """Per volume bin (flat, FFT order): the sum of its hits' mapped values and the sum of their squared
        moduli, ``(total complex128, power float64)``; what the spread of repeated estimates is read from."""
        n = self.geometry.n
        phi = np.asarray(phi)
        total = np.zeros(n**3, np.complex128)
        power = np.zeros(n**3, np.float64)
        for a in range(self.geometry.count):
            spec2 = np.fft.fft2(np.fft.ifftshift(phi[a])).reshape(-1)
            v = self.factors[a] * spec2[self.lateral[a]]
            np.add.at(total, self.targets[a], v)
            np.add.at(power, self.targets[a], np.abs(v) ** 2)
        return total, power

    def noise_energy(self, phi) -> float:
        """The expected noise energy sum |noise|^2 of the mapped spectrum over the measured bins (the DFT
        values :meth:`__call__` returns), measured from the data's own redundancy.

        A bin hit h >= 2 times holds h estimates of one value; their sample variance s^2 measures the
        noise of one estimate (with what the nearest-bin rounding adds, which no fit removes either).
        The median over those bins (robust to the few where the object's spectrum changes fast within
        a bin) is the per-estimate variance sigma^2, and the mapped value of a bin, the mean of its h
        hits, has variance sigma^2 / h: the energy is sigma^2 * sum over measured bins of 1 / h.
        Zero when no bin is hit twice (nothing to measure the noise from).
        """
        total, power = self.bin_sums(phi)
        h = self.hits.astype(np.float64)
        multi = h >= 2
        if not multi.any():
            return 0.0
        s2 = (power[multi] - np.abs(total[multi]) ** 2 / h[multi]) / (h[multi] - 1)
        sigma2 = float(np.median(np.maximum(s2, 0.0)))
        return sigma2 * float(np.sum(1.0 / h[h > 0]))


def _per_illumination(fn, count: int) -> list:
    """``[fn(0), ..., fn(count - 1)]``, on :func:`qora.backend.host.num_threads` threads (NumPy's work on
    each cap's n^2 arrays releases the GIL)."""
    from qora.backend.host import map_parts

    return [value for part in map_parts(lambda lo, hi: [fn(a) for a in range(lo, hi)], count) for value in part]


def mapping_plan(geometry: Geometry, options, progress=None) -> MappingPlan:
    """The mapping of a reconstruction with ``options`` (:class:`~qora.holo.options.ReconstructionOptions`): on the
    solver's grid (``options.oversample``) with the options' gridding (``options.grid_rule``); ``progress`` as
    :class:`MappingPlan`'s."""
    return MappingPlan(solver_grid(geometry, options.oversample), options.grid_rule(geometry.angles is not None),
                       progress)


def solver_grid(geometry: Geometry, oversample: float = 1.0) -> Geometry:
    """The geometry the solver runs on: the same pixel on the smallest fast FFT length of at
    least n * oversample (finer k-bins; the fields are zero-padded onto it and the central
    n^3 of the result is kept)."""
    if not oversample >= 1.0:
        raise InputError(f"oversample must be at least 1, got {oversample}")
    big = fast_length(math.ceil(geometry.n * oversample - 1e-9))
    return geometry if big == geometry.n else replace(geometry, n=big)


def cuda_pipeline_bytes(geometry: Geometry, hologram_n: int, options) -> int:
    """A lower bound of the device memory of a CUDA Pipeline (bytes), from the geometry and options
    alone, before anything is allocated: the hologram stack and its half spectra, the fields of every
    stage, the padded fields, and the solver's volumes on its grid (cuFFT's work area not counted)."""
    a, big, n = geometry.count, int(hologram_n), geometry.n
    grid = solver_grid(geometry, options.oversample).n
    total = 4 * a * big * big + 8 * a * big * (big // 2 + 1)  # holograms (float32) and their R2C spectra
    total += (3 + 2.5) * 8 * a * n * n  # sample, background, phi; the first order's psi, v, w
    if grid != n:
        total += 8 * a * grid * grid  # the fields padded onto the solver's grid
    total += 12 * grid**3  # mapped sums (complex64) and hit counts (int32)
    if options.grid_rule(geometry.angles is not None) == "exact":
        # the fine grid (complex64) and its transform, the volume's transform, the hit table and the measured mask
        total += 16 * (2 * grid) ** 3 + 13 * grid**3
    complex_index = bool(getattr(options, "complex_index", False))
    if complex_index or not (options.method == "tv" or (options.method == "gp" and options.r2c)):
        total += 8 * grid**3  # the C2C estimate (a complex index always solves C2C)
    if options.method == "tv":
        parts = 2 if complex_index else 1  # a complex index: the real and imaginary boxes, one prox each
        total += parts * (12 * n**3 + 24 * n**3)  # v, y, x_prev and the FGP dual (3 components, two copies)
    return int(total)


class Unsupported(InputError, NotImplementedError):
    """A combination the engine does not implement (a NotImplementedError too)."""


def check_scan(geometry: Geometry) -> None:
    if geometry.angles is not None:
        raise Unsupported("the beam propagation model is built for the illumination-scanning geometry; "
                                  "the rotation geometry is not supported")


@dataclass
class BpmTables:
    """Per-illumination tables (count, n, n) in the FFT layout of the envelope spectrum (float64 / complex128).

    Attributes
    ----------
    propagator : complex (A, n, n)
        c = exp(2 pi i (nu_z(mu + nu_in) - nu_z,in) d), zero where |mu + nu_in| >= n_m / lambda.
    last : complex (A, n, n)
        From the last slice's plane z_{n_z-1} back to z = 0, times the detection pupil.
    obliquity : float (A, n, n)
        q = (n_m / lambda) / nu_z(mu + nu_in), capped at its pupil-edge value (ones without obliquity).
    n_z : int
        Number of slices the tables are for.
    step : float
        Slice thickness d (the pixel), um.
    k0 : float
        2 pi / lambda, rad/um.
    """

    propagator: np.ndarray
    last: np.ndarray
    obliquity: np.ndarray
    n_z: int
    step: float
    k0: float
    _cache: dict = field(default_factory=dict, repr=False)

    @property
    def count(self) -> int:
        return self.propagator.shape[0]

    @property
    def n(self) -> int:
        return self.propagator.shape[-1]

    def products(self, dtype, index=slice(None)):
        """(c q, c (1 - q), last q, last (1 - q)) in ``dtype`` for the illuminations ``index`` (cached per dtype)."""
        dtype = np.dtype(dtype)
        if dtype not in self._cache:
            q = self.obliquity
            self._cache[dtype] = tuple(t.astype(dtype) for t in (self.propagator * q, self.propagator * (1 - q),
                                                                  self.last * q, self.last * (1 - q)))
        return tuple(t[index] for t in self._cache[dtype])

    def lipschitz(self) -> np.ndarray:
        """Per illumination, n_z (k0 d q_a(0))^2: the largest eigenvalue of J_a^T J_a for a weak object."""
        return self.n_z * (self.k0 * self.step * self.obliquity[:, 0, 0]) ** 2


def lab_geometry(geometry: Geometry) -> Geometry:
    """The illuminations the beam propagation model propagates: the geometry itself (scanning), or for
    the rotation geometry its one normal incidence (every angle is the same plane wave along z through
    the sample in another pose: :mod:`qora.holo.rotate`)."""
    if geometry.angles is None:
        return geometry
    return Geometry(geometry.wavelength, geometry.medium_index, geometry.pixel, geometry.n, geometry.na_detection)


OBLIQUITY_EDGE = 0.99  # the largest NA / n_m the obliquity weight is evaluated at (bpm_tables)


def bpm_tables(geometry: Geometry, n_z: int | None = None, obliquity: bool = True) -> BpmTables:
    """The propagation, last-step and obliquity tables of ``geometry`` for ``n_z`` slices (default n): one per
    illumination, or in the rotation geometry the one table of normal incidence (count 1, shared by every angle)."""
    geometry = lab_geometry(geometry)
    n, d = geometry.n, geometry.pixel
    n_z = int(n_z or n)
    if n_z < 1:
        raise InputError(f"n_z must be positive, got {n_z}")
    f = frequencies(n, d)
    ky, kx = np.meshgrid(f, f, indexing="ij")
    km = geometry.medium_frequency
    nu_in_z = geometry.nu_z_in()
    # the obliquity's cap, its value at the pupil's edge; a pupil of NA = n_m (fields recorded to grazing angles,
    # as FDTD sets are) would make it infinite: capped there at NA 0.99 n_m (82 degrees), beyond which grazing
    # waves carry nothing a camera records
    edge = min(geometry.pupil_frequency, OBLIQUITY_EDGE * km)
    q_max = km / math.sqrt(km**2 - edge**2)
    z_last = (n_z - 1 - n_z // 2) * d
    shape = (geometry.count, n, n)
    prop, last, q = np.zeros(shape, np.complex128), np.zeros(shape, np.complex128), np.ones(shape, np.float64)
    for a, (nuy, nux) in enumerate(geometry.illuminations):
        my, mx = ky + nuy, kx + nux
        nz = nu_z(my, mx, km)
        live = np.isfinite(nz) & (np.hypot(my, mx) < km)
        nz = np.where(live, nz, 1.0)
        dz = nz - nu_in_z[a]
        prop[a] = np.where(live, np.exp(2j * math.pi * dz * d), 0)
        pupil = live & (np.hypot(my, mx) <= geometry.pupil_frequency)
        last[a] = np.where(pupil, np.exp(-2j * math.pi * dz * z_last), 0)  # from z_{n_z-1} back to z = 0
        if obliquity:
            q[a] = np.where(live, np.minimum(km / nz, q_max), q_max)
    return BpmTables(prop, last, q, n_z, d, geometry.k0)
