"""Support determination from the pattern alone, on ``xp`` arrays (NumPy or CuPy).

- :func:`autocorrelation_estimate`: the first support, the thresholded autocorrelation |F^-1 I|,
  after the unmeasured pixels (beamstop, gaps) are filled by normalised convolution, with a
  threshold chosen from the data (above the autocorrelation's own background).
- :func:`shrinkwrap_update`: a new support where the Gaussian-blurred modulus of the iterate
  exceeds ``threshold`` times a statistic of it (``max`` over the array; ``rms`` or ``mean``
  over the current support), guarded against collapse and growth: a support outside the
  allowed size range is re-thresholded to the nearest bound (the retune is reported).

Everything runs on the arrays' device; each update reads back a handful of scalars (the
support's size), once per shrinkwrap update, never per iteration.
"""

from __future__ import annotations

import math

import numpy as np

from qora.backend import fft, xp_of
from qora.phase.physics import gaussian_blur
from qora.phase.support_shape import shape_support

__all__ = ["STATISTICS", "autocorrelation_estimate", "fill_masked", "shrinkwrap_update", "shrinkwrap_starts",
           "size_range_for", "blur_for", "halve_supports", "within_phase_range"]

STATISTICS = ("max", "rms", "mean")
# Below this the autocorrelation's background is numerical noise: the old fixed threshold then holds.
AUTO_MIN_THRESHOLD = 0.04
# The data-chosen threshold: this many times the median of the blurred autocorrelation. The object's
# autocorrelation fills 2^d times its volume, which is a small part of an oversampled array, so the
# median is the level of what is not the object's (noise, the missing centre's broad residue).
AUTO_BACKGROUND_FACTOR = 2.5


def fill_masked(intensity, mask, *, sigma: float = 1.0, xp=None):
    """``intensity`` with masked pixels replaced by a normalised convolution of the measured ones.

    sum(G * I m') / sum(G * m') with m' the measured pixels and G a Gaussian of std ``sigma`` pixels:
    a smooth guess of what a gap or beamstop hid. Used only for the autocorrelation support (the
    iterations leave masked pixels free), where a hole of zeros would add the hole's own broad
    transform to the autocorrelation and swell the support many times over.
    """
    xp = xp or xp_of(intensity)
    if mask is None:
        return intensity
    measured = (~xp.asarray(mask, bool)).astype(intensity.dtype)
    num = gaussian_blur(intensity * measured, sigma, xp=xp)
    den = gaussian_blur(measured, sigma, xp=xp)
    filled = num / xp.maximum(den, 1e-12)
    # a pixel too deep in a large masked region has no measured neighbour within a few sigma: 0 there
    filled = xp.where(den > 1e-6, xp.maximum(filled, 0), 0)
    return xp.where(measured > 0, intensity, filled)


def autocorrelation_estimate(intensity, *, mask=None, threshold="auto", sigma: float = 1.0, xp=np):
    """The autocorrelation support (centre-origin bool) and the threshold used (fraction of the maximum).

    ``threshold="auto"``: max(0.04, 2.5 x median / max) of the blurred autocorrelation, i.e. clear of
    its background whatever the photon count; a number in (0, 1) fixes it.
    """
    intensity = xp.asarray(intensity, dtype=np.float64)
    if mask is not None:
        intensity = fill_masked(xp.where(xp.asarray(mask, bool), 0.0, intensity), mask, xp=xp)
    axes = tuple(range(intensity.ndim))
    auto = xp.abs(xp.fft.fftshift(fft.ifftn(xp.fft.ifftshift(intensity, axes=axes)), axes=axes))
    auto = gaussian_blur(auto, sigma, xp=xp)
    peak = float(auto.max())
    if threshold == "auto":
        threshold = max(AUTO_MIN_THRESHOLD, AUTO_BACKGROUND_FACTOR * float(xp.median(auto)) / peak)
    return auto > threshold * peak, float(threshold)


def size_range_for(autocorrelation_pixels: int, ndim: int, *, low: float, high: float) -> tuple[int, int]:
    """Allowed support sizes (pixels) from the autocorrelation support's size.

    The autocorrelation of an object of volume V spans 2^d V when the object is centrosymmetric and
    convex, more otherwise (6 V for a triangle), so V ~ A / 2^d is an upper estimate of the object's
    volume; ``low`` and ``high`` are fractions of it.
    """
    estimate = autocorrelation_pixels / 2**ndim
    return max(1, int(low * estimate)), max(2, int(math.ceil(high * estimate)))


def blur_for(autocorrelation_pixels: int, ndim: int, *, fraction: float = 0.05, low: float = 1.0) -> float:
    """A starting shrinkwrap blur (pixels) tied to the object's size: ``fraction`` of its width.

    The width is (A / 2^d)^(1/d) from the autocorrelation support's size A; never below ``low``.
    """
    width = (autocorrelation_pixels / 2**ndim) ** (1.0 / ndim)
    return max(low, fraction * width)


def _statistic(blurred, support, statistic: str, xp):
    if statistic == "max":
        return blurred.max()
    inside = xp.asarray(support, bool)
    count = xp.maximum(inside.sum(), 1)
    if statistic == "rms":
        return xp.sqrt(xp.sum(xp.where(inside, blurred * blurred, 0)) / count)
    if statistic == "mean":
        return xp.sum(xp.where(inside, blurred, 0)) / count
    raise ValueError(f"statistic must be one of {STATISTICS}, got {statistic!r}")


def _top(blurred, count: int, xp):
    """The ``count`` largest values of ``blurred`` (ties may add a few)."""
    flat = blurred.reshape(-1)
    k = flat.size - count
    level = xp.partition(flat, k)[k]
    return blurred >= level


def shrinkwrap_update(x, support, *, sigma: float, threshold: float, statistic: str = "max",
                      size_range=None, min_fraction: float = 0.2, shape: str | None = None,
                      phase_range: float = 0.0, xp=None):
    """A new support from the iterate ``x``, and what happened.

    Parameters
    ----------
    x : complex array, centre-origin
    support : bool array, same shape
    sigma : float
        Blur std, pixels.
    threshold : float
        Fraction of the statistic (> 0).
    statistic : {"max", "rms", "mean"}
        Of the blurred modulus: over the whole array (max) or over the current support (rms, mean;
        PyNX's rule is ``rms``).
    size_range : (int, int), optional
        Allowed support size in pixels; a support outside it is re-thresholded at the bound's size.
    min_fraction : float
        Without a size range: a support smaller than this fraction of the old is refused (old kept).
    phase_range : float
        Radians; 0 switches it off. Pixels of the thresholded support whose phase differs from the
        support's mean phase (the phase of the sum of ``x`` over it: the global phase is arbitrary) by
        more than this are dropped, as cohere's phase constraint drops them: for an object whose phase
        is known to stay within a range (a weak phase object, a thin film), a ghost or a twin's fringe
        that lies outside it leaves the support. Applied before ``shape``.
    shape : {None, "filled", "convex"}
        Shape prior (:func:`qora.phase.support_shape.shape_support`) applied to the thresholded
        support before the size guard, which then judges the support that will be used.

    Returns
    -------
    (support, status) with status "ok", "kept" (refused, old support kept), "retuned_small" or
    "retuned_large" (the threshold moved so the support has the bound's size).
    """
    xp = xp or xp_of(x)
    blurred = gaussian_blur(xp.abs(x).astype(np.float32), sigma, xp=xp)
    new = blurred > threshold * _statistic(blurred, support, statistic, xp)
    if phase_range:
        new = new & within_phase_range(x, new, phase_range, xp=xp)
    new = shape_support(new, shape, xp=xp)
    count = int(new.sum())
    if size_range is not None:
        low, high = size_range
        if count < low:
            return _top(blurred, low, xp).astype(support.dtype), "retuned_small"
        if count > high:
            return _top(blurred, high, xp).astype(support.dtype), "retuned_large"
        return new.astype(support.dtype), "ok"
    if count < max(1, min_fraction * int(support.sum())):
        return support, "kept"
    return new.astype(support.dtype), "ok"


def within_phase_range(x, support, phase_range: float, *, xp=None):
    """Where the phase of ``x`` lies within ``phase_range`` radians of its mean phase over ``support``
    (the phase of the sum of ``x`` there); bool, ``x``'s shape. All on ``x``'s device, no host read."""
    xp = xp or xp_of(x)
    mean = xp.sum(xp.where(support, x, 0))
    rotated = x * xp.conj(mean) / xp.maximum(xp.abs(mean), 1e-30)
    return xp.abs(xp.angle(rotated)) <= phase_range


def shrinkwrap_starts(x, supports, **options) -> list[str]:
    """:func:`shrinkwrap_update` for each start of an engine's ``x`` (B, *shape), writing ``supports``
    (B, *shape; bool or uint8) in place; returns each start's status. Shared by the CPU and GPU engines."""
    statuses = []
    for s in range(len(x)):
        new, status = shrinkwrap_update(x[s], supports[s].astype(bool), **options)
        if status != "kept":
            supports[s] = new.astype(supports.dtype)
        statuses.append(status)
    return statuses


def grow_supports(supports, steps: int, *, xp=None) -> None:
    """Dilate each start's support (B, *shape, engine layout: the origin at index 0) in place by ``steps``
    face-neighbour steps, periodically (the array wraps as the transforms do): after ``steps`` steps a
    pixel is in where one within that many axis steps (city-block distance) was."""
    xp = xp or xp_of(supports)
    grown = supports.astype(bool)
    for _ in range(int(steps)):
        step = grown.copy()
        for axis in range(1, supports.ndim):
            step |= xp.roll(grown, 1, axis=axis) | xp.roll(grown, -1, axis=axis)
        grown = step
    supports[...] = grown.astype(supports.dtype)


def halve_supports(supports, *, axis: int = 0, xp=None) -> None:
    """Detwinning: cut each start's support (B, *shape) in place to the half beyond its centroid along ``axis``.

    The twin conj(x(-r)) occupies the point-reflected support; a support that is not centrosymmetric
    about the iterate's centre cannot hold both, so a few iterations on half the support commit the
    iterate to one of them, after which shrinkwrap lets the support grow back (the cut is the
    device's: a centroid reduction and one comparison, no host read).
    """
    xp = xp or xp_of(supports)
    n = supports.shape[axis + 1]
    coord = xp.arange(n, dtype=np.float64).reshape([-1 if i == axis else 1 for i in range(supports.ndim - 1)])
    for s in range(supports.shape[0]):
        inside = supports[s].astype(bool)
        weight = xp.maximum(inside.sum(), 1)
        centre = xp.sum(xp.where(inside, coord, 0.0)) / weight
        supports[s] = (inside & (coord >= centre)).astype(supports.dtype)
