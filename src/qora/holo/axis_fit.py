"""The rotation axis fitted from the data: the tilt that makes the mapped spectra agree.

In the rotation geometry most bins of the object's 3D spectrum are hit by several angles' Ewald caps;
each hit is one estimate of the same value. With the right axis the estimates agree (to noise and the
first-order model's error); with a wrong one each cap lands on the wrong surface and estimates of
different frequencies meet in a bin. The score of a candidate axis is the *inconsistency*

    I = sum over bins hit twice or more of (sum_h |v_h|^2 - |sum_h v_h|^2 / h)  /  sum of sum_h |v_h|^2,

the within-bin spread over the power of those bins (0: every estimate agrees; 1 - 1/h: no agreement).
Unlike the median of :meth:`~qora.holo.plans.MappingPlan.noise_energy`, the power weighting lets the
strong low frequencies, where a tilt moves the caps most, decide.

The search is coarse-to-fine over (tilt, in-plane angle) of :func:`~qora.holo.geometry.rotation_axis`:
a grid of tilts with the axis in the detector plane, then the in-plane angle at the best tilt, then
both refined by a parabola through three neighbours. The fields are first cropped in frequency to at
most ``FIT_SIZE`` pixels (the low frequencies hold the power; 8x fewer bins at half the size).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from qora.holo.geometry import Geometry, rotation_axis
from qora.holo.odt import pad_fields
from qora.holo.plans import MappingPlan, solver_grid
from qora.io.errors import InputError
from qora.progress import report

__all__ = ["AxisFit", "inconsistency", "fit_axis", "fit_axis_to_ratio", "describe", "FIT_SIZE", "TILTS", "IN_PLANE", "NEAR"]

NEAR = 0.05  # scores within 5% of the best count as equally good (interval, sign, flat curves)
FIT_SIZE = 96  # fields cropped to at most this many pixels for the fit
TILTS = tuple(np.round(np.arange(-0.4, 0.4001, 0.05), 10))  # rad, the coarse grid of tilts out of the detector plane
IN_PLANE = tuple(np.round(np.arange(-0.3, 0.3001, 0.05), 10))  # rad, of the axis turned in the detector plane


@dataclasses.dataclass
class AxisFit:
    """The fitted axis: ``tilt`` and ``in_plane`` (rad, :func:`~qora.holo.geometry.rotation_axis`'s angles),
    ``axis`` (z, y, x), the inconsistency at the fit and at the untilted axis, and every candidate scored
    (``scores``: (tilt, in_plane, inconsistency)); ``interval`` the tilts scored within ``NEAR`` (5%) of the
    best on the first scan (axis in the detector plane), with the fit. ``determined`` is False when the data cannot tell the tilt: the minimum on the
    edge of the searched range, all scores within 5%, or the mirror tilt -t scoring within 5% of t (a sample
    symmetric about its mid-plane)."""

    tilt: float
    in_plane: float
    axis: tuple
    inconsistency: float
    straight_inconsistency: float
    interval: tuple
    scores: list
    determined: bool


def _cropped(phi, geometry: Geometry, size: int):
    """First-order fields cropped in frequency to ``size`` pixels, and the geometry of that coarser grid."""
    n = geometry.n
    if n <= size:
        return phi, geometry
    m = size
    lo = n // 2 - m // 2
    spec = np.fft.fftshift(np.fft.fft2(np.fft.ifftshift(phi, axes=(1, 2))), axes=(1, 2))[:, lo:lo + m, lo:lo + m]
    small = np.fft.fftshift(np.fft.ifft2(np.fft.ifftshift(spec, axes=(1, 2))), axes=(1, 2)) * (m / n) ** 2
    pixel = geometry.pixel * n / m
    na = min(geometry.na_detection, 0.999 * geometry.wavelength / (2 * pixel))  # the cropped grid's Nyquist
    return small, dataclasses.replace(geometry, n=m, pixel=pixel, na_detection=na)


def inconsistency(phi, geometry: Geometry) -> float:
    """The power-weighted within-bin spread of the mapped estimates (module docstring) for ``geometry``'s axis."""
    plan = MappingPlan(geometry)
    total, power = plan.bin_sums(phi)
    h = plan.hits.astype(np.float64)
    multi = h >= 2
    if not multi.any():
        raise InputError("no spectrum bin is hit by two angles: the axis cannot be fitted from these data")
    spread = power[multi] - np.abs(total[multi]) ** 2 / h[multi]
    return float(spread.sum() / power[multi].sum())


def _vertex(xs, ys) -> float:
    """The abscissa of the parabola through three points (the middle one when they are collinear)."""
    (x0, x1, x2), (y0, y1, y2) = xs, ys
    den = (x0 - x1) * (x0 - x2) * (x1 - x2)
    a = (x2 * (y1 - y0) + x1 * (y0 - y2) + x0 * (y2 - y1)) / den
    b = (x2**2 * (y0 - y1) + x1**2 * (y2 - y0) + x0**2 * (y1 - y2)) / den
    return x1 if a <= 0 else min(max(-b / (2 * a), x0), x2)


def fit_axis(phi, geometry: Geometry, *, tilts=TILTS, in_plane=IN_PLANE, size: int = FIT_SIZE,
             oversample: float = 2.0, progress=None) -> AxisFit:
    """Fit the rotation axis's tilt (and in-plane angle) to first-order fields ``phi`` (A, n, n) of a
    rotation ``geometry`` (its own axis is ignored; its rotation sense is kept). Angles in radians."""
    if geometry.geometry != "rotation":
        raise InputError("the axis is fitted in the rotation geometry only")
    small, g = _cropped(np.asarray(phi), geometry, size)
    if oversample > 1:  # a finer grid in k: less of the nearest-bin rounding that no axis removes
        g = solver_grid(g, oversample)
        small = pad_fields(small, g.n)
    scores = {}
    total = len(tilts) + len(in_plane) + 4

    def score(t, p):
        key = (round(float(t), 6), round(float(p), 6))
        if key not in scores:
            scores[key] = inconsistency(small, dataclasses.replace(g, axis=rotation_axis(*key)))
            report(progress, "axis fit", min(len(scores), total), total)
        return scores[key]

    best_t = min(tilts, key=lambda t: score(t, 0.0))
    best_p = min(in_plane, key=lambda p: score(best_t, p))
    best_t = _refine(lambda t: score(t, best_p), best_t, tilts)
    best_p = _refine(lambda p: score(best_t, p), best_p, in_plane)
    value, straight = score(best_t, best_p), score(0.0, 0.0)
    mirror = score(-best_t, best_p)  # a sample symmetric in z scores +t and -t alike: the sign is then unknown
    close = [t for (t, p), v in scores.items() if p == 0 and v <= (1 + NEAR) * value] + [best_t]  # the first scan's
    # the data tell the axis when the scores differ, the minimum lies inside the searched range, and its
    # mirror tilt scores clearly worse (or the best is the untilted axis, its own mirror)
    inside = abs(best_t) < max(abs(t) for t in tilts) and abs(best_p) < max(abs(p) for p in in_plane)
    signed = abs(best_t) < _step(tilts) / 2 or mirror > (1 + NEAR) * value
    determined = inside and signed and max(scores.values()) > (1 + NEAR) * value
    return AxisFit(best_t, best_p, rotation_axis(best_t, best_p), value, straight, (min(close), max(close)),
                   [(t, p, v) for (t, p), v in sorted(scores.items())], bool(determined))


def _refine(f, best, grid) -> float:
    """The parabola's vertex through the best grid point and its neighbours (the grid's step apart)."""
    step = _step(grid)
    if step == 0:
        return float(best)
    xs = (best - step, best, best + step)
    return float(_vertex(xs, [f(x) for x in xs]))


def _step(grid) -> float:
    """The spacing of a grid of angles (0 for a single value)."""
    return float(np.min(np.diff(sorted(grid)))) if len(grid) > 1 else 0.0


def fit_axis_to_ratio(ratio, geometry: Geometry, *, approximation: str = "rytov", progress=None, **search) -> AxisFit:
    """:func:`fit_axis` on field ratios u / u_in (A, n, n) of a rotation ``geometry``: their first-order
    field (``approximation``, "rytov" or "born", as the reconstruction will use) is fitted."""
    from qora.holo.odt import check_ratio, first_order

    ratio = check_ratio("ratio", ratio, geometry)
    return fit_axis(first_order(ratio, approximation), geometry, progress=progress, **search)


def describe(fit: AxisFit) -> str:
    """One line for the command line: the fit, its interval, and whether it is used."""
    deg = math.degrees
    lo, hi = fit.interval
    text = (f"axis fitted to the data: tilt {deg(fit.tilt):.1f} deg ({fit.tilt:.3f} rad), in-plane "
            f"{deg(fit.in_plane):.1f} deg; tilts within 5% of the best: {lo:.3f} to {hi:.3f} rad; spectra "
            f"inconsistency {fit.inconsistency:.4g} (untilted axis {fit.straight_inconsistency:.4g})")
    if not fit.determined:
        text += ("; NOT determined (the minimum is at the searched range's edge, the scores are flat, or -tilt "
                 "fits as well): the given axis is kept")
    return text
