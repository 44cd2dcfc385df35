"""Sideband filters: the weight each spectral bin of the sideband keeps, by shape and radius.

A filter is centred on the sideband and has a radius R in cycles/um: given physically (the
detection NA over the wavelength) or as a fraction of the sideband's distance from zero frequency
(an off-axis setup's natural scale: the autocorrelation term reaches out to twice the object's
bandwidth, so a radius of a third keeps it out). The shapes are those of qpretrieve (whose phases
the tests compare against), defined here from their documented parameters:

- ``disk``: 1 inside |nu| <= R, 0 outside (the detection pupil itself);
- ``smooth disk``: the disk convolved with a Gaussian of sigma R / 5, scaled to a peak of 1;
- ``gauss``: exp(-|nu|^2 / (2 sigma^2)) with sigma = 0.6 R;
- ``square``: 1 inside max(|nu_y|, |nu_x|) <= R;
- ``smooth square``: the square convolved with a Gaussian of sigma R / 5, scaled to a peak of 1;
- ``tukey``: the product of two 1D Tukey windows of half-width R with a cosine taper over the
  outer tenth of the width (alpha = 0.1).

The smooth shapes are convolved on the window's own grid by FFT with the Gaussian's analytic
transform, so they are the discrete convolution a user would compute, independent of the window's
bin size. Everything here runs on the host (NumPy): the weights become the crop's table, which the
CPU path and the CUDA field stage both use as it is.
"""

from __future__ import annotations

import math

import numpy as np

from qora.io.errors import InputError

__all__ = ["FILTERS", "filter_weights", "check_filter", "filter_radius"]

FILTERS = ("disk", "smooth disk", "gauss", "square", "smooth square", "tukey")
SMOOTH_SIGMA = 1 / 5  # of the radius: the Gaussian blur of the smooth shapes
GAUSS_SIGMA = 0.6  # of the radius
TUKEY_ALPHA = 0.1  # tapered fraction of the full width


def check_filter(name: str) -> str:
    """``name`` if it is a known filter shape (underscores read as spaces); InputError listing them otherwise."""
    key = str(name).replace("_", " ").replace("-", " ").strip().lower()
    if key not in FILTERS:
        raise InputError(f"filter must be one of {FILTERS}, got {name!r}")
    return key


def filter_radius(sideband, *, radius: float | None = None, fraction: float | None = None) -> float:
    """The filter radius in cycles/um: ``radius`` as given, or ``fraction`` of the sideband's distance
    |sideband| (cycles/um) from zero frequency; neither: a third of it (both: an InputError)."""
    if radius is not None and fraction is not None:
        raise InputError("give the filter radius in cycles/um or as a fraction of the sideband distance, not both")
    if radius is not None:
        if not (math.isfinite(radius) and radius > 0):
            raise InputError(f"the filter radius must be positive (cycles/um), got {radius!r}")
        return float(radius)
    fraction = 1 / 3 if fraction is None else fraction
    if not (math.isfinite(fraction) and 0 < fraction < 1):
        raise InputError(f"the filter radius as a fraction of the sideband distance must lie in (0, 1), got "
                         f"{fraction!r} (at 1 the filter would reach the zero-frequency term)")
    return float(fraction * np.hypot(*np.asarray(sideband, float)))


def _tukey(u):
    """The Tukey window of |t| / R = u (0 at the centre, 1 at the edge), tapered over [1 - alpha, 1]."""
    taper = 0.5 * (1 + np.cos(math.pi * (u - 1 + TUKEY_ALPHA) / TUKEY_ALPHA))
    return np.where(u <= 1 - TUKEY_ALPHA, 1.0, np.where(u <= 1, taper, 0.0))


def _blurred(mask, step_y: float, step_x: float, sigma: float):
    """``mask`` (a window in FFT order, bins step_y x step_x cycles/um) convolved with a unit-area Gaussian
    of ``sigma`` cycles/um, by FFT with the Gaussian's analytic transform (periodic on the window)."""
    n0, n1 = mask.shape
    y = np.fft.fftfreq(n0, step_y)  # the conjugate coordinate of the window (um)
    x = np.fft.fftfreq(n1, step_x)
    transfer = np.exp(-2 * (math.pi * sigma) ** 2 * (y[:, None] ** 2 + x[None, :] ** 2))
    out = np.fft.ifft2(np.fft.fft2(mask.astype(float)) * transfer).real
    return np.clip(out / out.max(), 0.0, 1.0)


def filter_weights(name: str, dy, dx, radius: float):
    """Weights (n0, n1) in [0, 1] of the filter ``name`` at the offsets ``dy`` (n0, 1) and ``dx`` (1, n1)
    from the sideband's centre, cycles/um, for a ``radius`` in cycles/um (the offsets: a regular grid in
    FFT order, which the smooth shapes need for their convolution)."""
    name = check_filter(name)
    dy, dx = np.asarray(dy, float), np.asarray(dx, float)
    r2 = dy**2 + dx**2
    if name == "disk":
        return (r2 <= radius**2).astype(float)
    if name == "gauss":
        return np.exp(-r2 / (2 * (GAUSS_SIGMA * radius) ** 2))
    box = (np.abs(dy) <= radius) & (np.abs(dx) <= radius)
    if name == "square":
        return box.astype(float)
    if name == "tukey":
        return _tukey(np.abs(dy) / radius) * _tukey(np.abs(dx) / radius)
    steps = [abs(float(np.ravel(d)[1] - np.ravel(d)[0])) if np.size(d) > 1 else 1.0 for d in (dy, dx)]
    mask = (r2 <= radius**2) if name == "smooth disk" else box
    return _blurred(np.broadcast_to(mask, np.broadcast_shapes(dy.shape, dx.shape)), *steps, SMOOTH_SIGMA * radius)
