"""From raw detector frames to a pattern :func:`qora.phase.reconstruct` takes.

:func:`preprocess` applies, in this order (docs/phase.md, "Measurements in"):

1. saturation: a pixel at or above ``saturation`` counts in any frame is masked (its value is a
   lower bound, not a measurement);
2. dark field: the mean dark frame is subtracted from every frame;
3. flat field: every frame is divided by the flat normalised to mean 1 over its positive pixels;
   pixels where the flat is not positive are masked (dead pixels);
4. frames: summed over axis 0 (``sum_frames=True``: repeated exposures of one 2D pattern) or kept
   (the stack is itself the pattern, e.g. a Bragg rocking scan);
5. negative values after the dark subtraction are set to 0 (a count cannot be negative);
6. binning by ``bin`` per axis: a binned pixel is the sum over its block, scaled by block size over
   measured pixels where some are masked, and masked where more than half are;
7. centring and cropping: the array is cropped to the largest size per axis that is a fast FFT
   length (2, 3, 5 smooth), centred on the pattern's centre of mass (rounded to a pixel), so q = 0
   lands at index n//2.

:func:`object_pixel_size` gives the reconstruction's pixel size from the geometry.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from qora.io import validate
from qora.io.errors import InputError

__all__ = ["Prepared", "preprocess", "object_pixel_size", "fast_size_below", "centre_of_mass"]


@dataclass
class Prepared:
    """A pattern ready for reconstruction and what was done to it.

    Attributes
    ----------
    intensity : ndarray (float64), detector layout, q = 0 at n//2 per axis
    mask : ndarray (bool), True where not measured
    steps : dict
        ``saturated`` and ``dead`` pixel counts, ``frames`` summed, ``bin``, ``centre`` (the centre of
        mass, pixels, of the binned array) and ``crop`` (start index and size per axis).
    """

    intensity: np.ndarray
    mask: np.ndarray
    steps: dict = field(default_factory=dict)


def _is_fast(n: int) -> bool:
    for p in (2, 3, 5):
        while n % p == 0:
            n //= p
    return n == 1


def fast_size_below(n: int) -> int:
    """The largest 2,3,5-smooth length <= n (an FFT of it is fast), at least 1."""
    n = int(n)
    while n > 1 and not _is_fast(n):
        n -= 1
    return max(n, 1)


def centre_of_mass(intensity, mask=None) -> tuple:
    """The intensity-weighted centre (pixels, per axis) of the measured pixels."""
    w = np.where(mask, 0.0, intensity) if mask is not None else np.asarray(intensity, float)
    total = w.sum()
    if not total > 0:
        raise InputError("the pattern has no positive measured counts: no centre of mass")
    grids = np.meshgrid(*[np.arange(n) for n in w.shape], indexing="ij")
    return tuple(float((g * w).sum() / total) for g in grids)


def _bin(intensity, mask, b: int):
    if b == 1:
        return intensity, mask
    shape = tuple(n // b for n in intensity.shape)
    crop = tuple(slice(0, s * b) for s in shape)
    blocks = []
    for n in shape:
        blocks += [n, b]
    measured = (~mask[crop]).reshape(blocks)
    values = np.where(mask, 0.0, intensity)[crop].reshape(blocks)
    axes = tuple(range(1, 2 * len(shape), 2))
    count = measured.sum(axis=axes)
    total = values.sum(axis=axes)
    size = b ** len(shape)
    out_mask = count * 2 < size  # more than half of the block unmeasured
    scaled = np.where(count > 0, total * size / np.maximum(count, 1), 0.0)
    return np.where(out_mask, 0.0, scaled), out_mask


def preprocess(frames, *, dark=None, flat=None, mask=None, saturation: float | None = None,
               sum_frames: bool = False, bin: int = 1, crop: bool = True) -> Prepared:
    """Raw frames to a centred, cropped pattern with its mask (the module docstring lists the steps).

    Parameters
    ----------
    frames : ndarray
        (F, H, W) frames summed to one 2D pattern when ``sum_frames``; else the pattern itself (2D or 3D),
        counts (photons or ADU), q = 0 anywhere (it is found by the centre of mass).
    dark : ndarray, optional
        Dark frame(s): the detector shape (H, W) or the pattern's, or a stack of them (averaged over axis 0).
    flat : ndarray, optional
        Flat field, the detector's (or the pattern's) shape; relative response, any scale.
    mask : bool ndarray, optional
        True where not measured (gaps, beamstop), the detector's or the pattern's shape.
    saturation : float, optional
        Counts at or above which a pixel is saturated (masked).
    bin : int
        Binning factor per axis (1: none).
    crop : bool
        Centre on the centre of mass and crop to a fast FFT size.
    """
    frames = np.asarray(frames, dtype=np.float64)
    bin = validate.integer("bin", bin, low=1)
    if sum_frames and frames.ndim != 3:
        raise InputError(f"sum_frames needs a stack of 2D frames (F, H, W), got shape {frames.shape}")
    stack = frames if sum_frames else frames[None]
    detector = stack.shape[1:]
    if not np.all(np.isfinite(stack)):
        raise InputError("the frames hold NaN or infinite values")

    def _frame_shaped(name, a):
        if a is None:
            return None
        a = np.asarray(a)
        if a.shape == detector:
            return a
        if a.ndim == len(detector) + 1 and a.shape[1:] == detector:
            return a.mean(axis=0)
        raise InputError(f"{name} has shape {a.shape}; expected {detector} (or a stack of those)")

    dark = _frame_shaped("dark", dark)
    flat = _frame_shaped("flat", flat)
    mask = _frame_shaped("mask", mask)
    bad = np.zeros(detector, bool) if mask is None else mask.astype(bool)
    steps = {"frames": int(stack.shape[0]), "bin": bin, "saturated": 0, "dead": 0}
    if saturation is not None:
        saturation = validate.positive("saturation", saturation, unit="counts")
        saturated = (stack >= saturation).any(axis=0)
        steps["saturated"] = int((saturated & ~bad).sum())
        bad = bad | saturated
    if dark is not None:
        stack = stack - dark
    if flat is not None:
        flat = np.asarray(flat, np.float64)
        dead = ~(flat > 0)
        if dead.all():
            raise InputError("the flat field has no positive pixel")
        steps["dead"] = int((dead & ~bad).sum())
        bad = bad | dead
        norm = flat / flat[~dead].mean()
        stack = stack / np.where(dead, 1.0, norm)
    intensity = np.maximum(stack.sum(axis=0), 0.0)
    intensity = np.where(bad, 0.0, intensity)
    intensity, bad = _bin(intensity, bad, bin)
    if crop:
        centre = centre_of_mass(intensity, bad)
        starts, sizes = [], []
        for c, n in zip(centre, intensity.shape):
            c = int(round(c))
            half = min(c, n - 1 - c)  # the widest window centred on c that fits
            size = fast_size_below(2 * half + 1)
            start = c - size // 2
            starts.append(start)
            sizes.append(size)
        window = tuple(slice(s, s + z) for s, z in zip(starts, sizes))
        intensity, bad = intensity[window], bad[window]
        steps["centre"] = [float(c) for c in centre]
        steps["crop"] = {"start": starts, "size": sizes}
    return Prepared(intensity=intensity, mask=bad, steps=steps)


def object_pixel_size(*, wavelength: float, distance: float, pixel_size, shape, bin: int = 1) -> tuple:
    """The object's pixel size (m) per axis: lambda z / (N p b) for N pixels of size p binned by b.

    A detector of N pixels of pitch p at distance z samples q up to N p / (lambda z) in total, so one
    object pixel is the inverse of that extent (small-angle far field; wavelength, distance and pixel
    size in metres).
    """
    wavelength = validate.positive("wavelength", wavelength, unit="m")
    distance = validate.positive("distance", distance, unit="m")
    pitch = np.broadcast_to(np.asarray(pixel_size, float), (len(shape),))
    if not np.all(pitch > 0):
        raise InputError(f"pixel_size must be positive, got {pixel_size}")
    return tuple(float(wavelength * distance / (n * p * bin)) for n, p in zip(shape, pitch))
