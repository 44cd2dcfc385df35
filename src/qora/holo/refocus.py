"""Numerical refocus of complex fields by angular-spectrum propagation, and autofocus.

A field u(x, y) given in one plane is propagated by a distance d (um, along +z, the direction of
the light) as

    u_d = F^-1[ F[u](nu) exp(2 pi i d (nu_z(nu) - n_m / lambda)) ],   nu_z = sqrt((n_m / lambda)^2 - |nu|^2),

with the evanescent part (|nu| > n_m / lambda) dropped. The term n_m / lambda keeps the phase of
the normally incident plane wave, so a field ratio u / u_in at normal incidence (a QPI image, a
rotation series) stays a ratio with background 1; this is exact (no paraxial approximation). Fields
are padded with their border mean (the background) to a fast square before the FFT, so what leaves
the field of view does not come back on the other side.

Autofocus scans a sharpness metric over distances and refines the best by golden-section search.
Two metrics, smaller is sharper:

- ``"amplitude variance"`` (default): the variance of |u|. A phase object (a cell) has a flat
  amplitude in focus, and defocus turns its phase into amplitude contrast; this holds for weak and
  strong (several rad) phase objects alike.
- ``"compactness"``: the mean of |u - u_b| (u_b the border mean, the background). Propagation is
  unitary, so the energy of the scattered part u - u_b is the same in every plane while its spread
  is smallest in focus: for absorbing objects and weak scatterers, whose amplitude variance is
  largest (not smallest) in focus. It fails for strong phase objects (exp(i phi) - 1 is not smallest
  in focus), and when the object fills the field of view (light leaving the field lowers it).

The interval must keep the scattered light inside the field of view: far from focus it leaves the
field, and either metric of what remains can fall again.

Everything takes NumPy or CuPy arrays and returns the same kind (:func:`qora.backend.xp_of`).
"""

from __future__ import annotations

import math

import numpy as np

from qora.backend import xp_of
from qora.backend.fft import fast_length
from qora.io.errors import InputError
from qora.io.validate import positive

__all__ = ["propagate", "sharpness", "autofocus", "refocused", "METRICS", "depth_of_field"]

METRICS = ("compactness", "amplitude variance")
_GOLDEN = (math.sqrt(5) - 1) / 2


def depth_of_field(wavelength: float, na: float) -> float:
    """lambda / NA^2 (um): the axial extent over which a field of numerical aperture ``na`` stays in focus."""
    return positive("wavelength", wavelength, unit="um") / positive("na", na) ** 2


def _stack(fields):
    xp = xp_of(fields)
    u = xp.asarray(fields)
    if not xp.iscomplexobj(u):
        u = u.astype(xp.complex128)
    if u.ndim not in (2, 3) or min(u.shape[-2:]) < 2:
        raise InputError(f"fields must be (M, N) or (A, M, N) complex images, got shape {u.shape}")
    return xp, u


def _border_mean(u):
    xp = xp_of(u)
    border = xp.concatenate([u[..., 0, :], u[..., -1, :], u[..., 1:-1, 0], u[..., 1:-1, -1]], axis=-1)
    return border.mean(axis=-1)


class _Propagator:
    """The padded spectra of a field stack, made once, and the transfer function for any distances."""

    def __init__(self, u, *, wavelength, medium_index, pixel, pad: bool = True) -> None:
        xp = xp_of(u)
        self.xp, self.shape = xp, u.shape[-2:]
        m, n = self.shape
        size = fast_length(max(m, n) + (2 * math.ceil(max(m, n) / 4) if pad else 0))
        self.size = (size, size) if pad else (m, n)
        self.offset = ((self.size[0] - m) // 2, (self.size[1] - n) // 2)
        background = _border_mean(u)[..., None, None]
        padded = xp.empty(u.shape[:-2] + self.size, dtype=u.dtype)
        padded[...] = background
        o0, o1 = self.offset
        padded[..., o0:o0 + m, o1:o1 + n] = u
        self.spectrum = xp.fft.fft2(padded)
        km = medium_index / wavelength
        fy = xp.fft.fftfreq(self.size[0], pixel)[:, None]
        fx = xp.fft.fftfreq(self.size[1], pixel)[None, :]
        q = km**2 - fy**2 - fx**2
        self.live = q > 0
        self.dz = xp.where(self.live, xp.sqrt(xp.maximum(q, 0.0)), 0.0) - km  # nu_z - n_m / lambda

    def __call__(self, distance):
        """The fields propagated by ``distance`` (um: a number, or one per field), cropped to their shape."""
        xp = self.xp
        d = xp.asarray(distance, dtype=float)
        d = d.reshape(d.shape + (1, 1))
        transfer = xp.where(self.live, xp.exp(2j * math.pi * d * self.dz), 0)
        out = xp.fft.ifft2(self.spectrum * transfer)
        o0, o1 = self.offset
        return out[..., o0:o0 + self.shape[0], o1:o1 + self.shape[1]]


def _optics(wavelength, medium_index, pixel):
    return (positive("wavelength", wavelength, unit="um"), positive("medium_index", medium_index),
            positive("pixel", pixel, unit="um"))


def propagate(fields, distance, *, wavelength: float, medium_index: float, pixel: float, pad: bool = True):
    """Fields (M, N) or (A, M, N), complex, propagated by ``distance`` um along +z (a number, or (A,)
    distances, one per field) in a medium of index ``medium_index`` at vacuum ``wavelength`` um, pixel
    ``pixel`` um. ``pad``: pad with the border mean to a fast square (no wrap-around)."""
    wavelength, medium_index, pixel = _optics(wavelength, medium_index, pixel)
    xp, u = _stack(fields)
    d = np.asarray(distance, float) if not hasattr(distance, "__cuda_array_interface__") else distance
    if not bool(xp.all(xp.isfinite(xp.asarray(d)))):
        raise InputError(f"the propagation distance must be finite (um), got {distance!r}")
    return _Propagator(u, wavelength=wavelength, medium_index=medium_index, pixel=pixel, pad=pad)(d)


def sharpness(fields, metric: str = "amplitude variance"):
    """The autofocus metric of each field (..., M, N): smaller is sharper (see the module's text)."""
    xp = xp_of(fields)
    if metric == "compactness":
        return xp.abs(fields - _border_mean(fields)[..., None, None]).mean(axis=(-2, -1))
    if metric == "amplitude variance":
        return xp.abs(fields).var(axis=(-2, -1))
    raise InputError(f"metric must be one of {METRICS}, got {metric!r}")


def autofocus(fields, *, wavelength: float, medium_index: float, pixel: float, interval=(-10.0, 10.0),
              step: float | None = None, tolerance: float | None = None, metric: str = "amplitude variance",
              common: bool = False, pad: bool = True):
    """The distance (um) that brings each field into focus: ``propagate(fields, autofocus(...))`` is sharp.

    Scans ``interval`` (um, (start, stop)) in steps of ``step`` (default half the wavelength in the
    medium: an object's focus is at least a Rayleigh range, pi lambda, deep), then refines the best by golden-section search down to ``tolerance`` (default 1/1000 of the
    wavelength in the medium). ``fields`` (M, N) gives a number; (A, M, N) gives (A,) distances, or with
    ``common`` one distance for the whole series (the sum of the metrics: a series recorded in one plane).
    Returns NumPy numbers (host) whatever the fields' array module.
    """
    wavelength, medium_index, pixel = _optics(wavelength, medium_index, pixel)
    if metric not in METRICS:
        raise InputError(f"metric must be one of {METRICS}, got {metric!r}")
    try:
        lo, hi = (float(v) for v in interval)
    except (TypeError, ValueError):
        raise InputError(f"interval must be two distances (start, stop) in um, got {interval!r}") from None
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise InputError(f"interval must be two finite distances with start < stop (um), got {interval!r}")
    lam = wavelength / medium_index
    step = positive("step", step, unit="um") if step is not None else lam / 2
    tolerance = positive("tolerance", tolerance, unit="um") if tolerance is not None else lam / 1000
    xp, u = _stack(fields)
    single = u.ndim == 2
    u = u[None] if single else u
    prop = _Propagator(u, wavelength=wavelength, medium_index=medium_index, pixel=pixel, pad=pad)

    def cost(d):  # d: (A,) host distances -> (A,) host metric values (or their sum, broadcast)
        uniform = bool(np.all(d == d[0]))  # one transfer function for all fields (the scan; a common search)
        values = sharpness(prop(float(d[0]) if uniform else xp.asarray(d)), metric)
        values = values.get() if hasattr(values, "get") else np.asarray(values)
        return np.full(len(d), values.sum()) if common else values

    grid = np.linspace(lo, hi, max(3, int(math.ceil((hi - lo) / step)) + 1))
    scan = np.stack([cost(np.full(u.shape[0], z)) for z in grid])  # (distances, A)
    best = np.argmin(scan, axis=0)
    a = grid[np.maximum(best - 1, 0)]
    b = grid[np.minimum(best + 1, len(grid) - 1)]
    c, d = b - _GOLDEN * (b - a), a + _GOLDEN * (b - a)
    fc, fd = cost(c), cost(d)
    while np.max(b - a) > tolerance:
        left = fc < fd  # the minimum lies in [a, d]
        a, b = np.where(left, a, c), np.where(left, d, b)
        c_new, d_new = b - _GOLDEN * (b - a), a + _GOLDEN * (b - a)
        f_new = cost(np.where(left, c_new, d_new))
        fc, fd = np.where(left, f_new, fd), np.where(left, fc, f_new)
        c, d = np.where(left, c_new, d), np.where(left, c, d_new)
    found = (a + b) / 2
    if common:
        return float(found[0])
    return float(found[0]) if single else found


def refocused(fields, distance=None, *, wavelength: float, medium_index: float, pixel: float, pad: bool = True,
            **autofocus_options):
    """``(fields propagated into focus, distances in um)``: by ``distance`` (um, a number or one per field)
    or, when it is None, by :func:`autofocus` with ``autofocus_options``."""
    optics = dict(wavelength=wavelength, medium_index=medium_index, pixel=pixel, pad=pad)
    if distance is None:
        distance = autofocus(fields, **optics, **autofocus_options)
    elif autofocus_options:
        raise InputError(f"autofocus options {sorted(autofocus_options)} need distance=None")
    return propagate(fields, distance, **optics), distance
