"""Phase background correction: a low-order surface fitted where there is no object, and removed.

A measured phase image carries, beside the object, a smooth background: an offset (the arbitrary
phase of the reference), a tilt (a residual carrier, a tilted coverslip) and a curvature (a
defocused reference, the objective's field curvature). As qpimage does, the background is fitted
by least squares on pixels known to hold no object and subtracted everywhere:

- ``profile``: "offset" (a constant), "tilt" (a plane a + b x + c y) or "poly2" (the full second-order
  polynomial, adding x^2, x y, y^2); an integer k fits the full polynomial of order k (0 to 4).
- where: ``mask`` (True on background pixels), or else a frame of ``border`` pixels along the image's
  edges (the object sits in the middle: qpimage's "border" fit); :func:`object_mask` gives a mask
  from a threshold of the phase, for an object that reaches close to the border.

Coordinates are scaled to [-1, 1] so that the normal equations stay well conditioned at every order.
NumPy or CuPy arrays in, the same kind out (:func:`qora.backend.xp_of`).
"""

from __future__ import annotations

import numpy as np

from qora.backend import xp_of
from qora.io.errors import InputError
from qora.io.validate import integer

__all__ = ["PROFILES", "background_surface", "correct_background", "object_mask", "border_mask"]

PROFILES = {"offset": 0, "tilt": 1, "poly2": 2}


def _order(profile) -> int:
    if isinstance(profile, str):
        if profile not in PROFILES:
            raise InputError(f"profile must be one of {tuple(PROFILES)} or a polynomial order 0 to 4, got {profile!r}")
        return PROFILES[profile]
    return integer("profile (polynomial order)", profile, low=0, high=4)


def border_mask(shape, border: int):
    """True on a frame ``border`` pixels wide along the edges of an image of ``shape`` (M, N)."""
    m, n = shape
    border = integer("border (pixels)", border, low=1, high=max(1, min(m, n) // 2))
    mask = np.ones((m, n), bool)
    mask[border:m - border, border:n - border] = False
    return mask


def object_mask(phase, *, threshold: float, margin: int = 0):
    """True where the object is: |phase - median| above ``threshold`` rad, grown by ``margin`` pixels
    (its halo). The background for :func:`correct_background` is the complement."""
    xp = xp_of(phase)
    phase = xp.asarray(phase, dtype=float)
    if not (np.isfinite(threshold) and threshold > 0):
        raise InputError(f"threshold must be a positive phase (rad), got {threshold!r}")
    mask = xp.abs(phase - xp.median(phase)) > threshold
    for _ in range(integer("margin (pixels)", margin, low=0)):  # a 4-neighbour dilation per pixel of margin
        grown = mask.copy()
        grown[1:] |= mask[:-1]
        grown[:-1] |= mask[1:]
        grown[:, 1:] |= mask[:, :-1]
        grown[:, :-1] |= mask[:, 1:]
        mask = grown
    return mask


def _monomials(xp, shape, order: int):
    m, n = shape
    y = xp.linspace(-1.0, 1.0, m)[:, None]
    x = xp.linspace(-1.0, 1.0, n)[None, :]
    return [xp.broadcast_to(y**i * x**j, (m, n)) for total in range(order + 1) for i in range(total + 1)
            for j in (total - i,)]


def background_surface(phase, *, profile="tilt", mask=None, border: int | None = None):
    """The fitted background (M, N) of a phase image (M, N), rad: the polynomial ``profile`` fitted by least
    squares on ``mask`` (True: background) or, without one, on a frame of ``border`` pixels (default
    a tenth of the smaller edge, at least 1)."""
    xp = xp_of(phase)
    phase = xp.asarray(phase, dtype=float)
    if phase.ndim != 2:
        raise InputError(f"phase must be one image (M, N), got shape {phase.shape}")
    order = _order(profile)
    if mask is None:
        mask = border_mask(phase.shape, border if border is not None else max(1, min(phase.shape) // 10))
    mask = xp.asarray(mask, dtype=bool)
    if mask.shape != phase.shape:
        raise InputError(f"the background mask {mask.shape} must have the phase's shape {phase.shape}")
    terms = _monomials(xp, phase.shape, order)
    count = int(mask.sum())
    if count < len(terms):
        raise InputError(f"the background mask holds {count} pixels, too few to fit {len(terms)} coefficients "
                         f"(profile {profile!r})")
    design = xp.stack([t[mask] for t in terms], axis=1)
    # an explicit cutoff (NumPy's default for rcond=None), which CuPy's lstsq takes as NumPy does
    cutoff = float(np.finfo(float).eps * max(design.shape))
    coefficients = xp.linalg.lstsq(design, phase[mask], rcond=cutoff)[0]
    return sum(c * t for c, t in zip(coefficients, terms))


def correct_background(phase, *, profile="tilt", mask=None, border: int | None = None):
    """``phase`` minus its :func:`background_surface` (rad): the object on a flat, zero background."""
    xp = xp_of(phase)
    phase = xp.asarray(phase, dtype=float)
    return phase - background_surface(phase, profile=profile, mask=mask, border=border)
