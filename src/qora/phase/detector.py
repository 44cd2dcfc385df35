"""Patterns as a detector records them, for success-rate benchmarks and tests.

:func:`record` turns a noise-free pattern (:func:`qora.phase.physics.detector_intensity`)
into what a pixel detector would give: partial coherence as a Gaussian blur of the
intensity (the pattern convolved with the coherence function's transform), scaled to a
total photon count, Poisson counts, and a mask of what is not measured (a round
beamstop at q = 0, detector gaps as bands of pixels). Masked pixels hold 0 counts and
are True in the mask, the convention of :func:`qora.phase.reconstruct`.

:func:`featured` and :func:`crystal` are test objects a simple shape does not cover:
holes, thin features and a phase ramp (2D or 3D), and a faceted crystal whose phase
is a smooth displacement field (the Bragg-CDI case).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qora.io import validate
from qora.io.errors import InputError
from qora.phase.physics import detector_intensity, gaussian_blur

__all__ = ["Detector", "record", "featured", "crystal"]


@dataclass(frozen=True)
class Detector:
    """How a pattern is recorded.

    Attributes
    ----------
    photons : float or None
        Expected total counts over the whole array (before masking); None: noise-free, unscaled.
    beamstop : float
        Radius of the beamstop at q = 0, pixels (0: none).
    gap : int
        Width of the detector gaps, pixels: one band along each axis, 7 pixels off the centre so the gaps
        cross the low-q speckles without hiding the beamstop (0: none).
    coherence_sigma : float
        Std (pixels) of the Gaussian that blurs the intensity for partial coherence (0: fully coherent).
    """

    photons: float | None = 1e8
    beamstop: float = 3.0
    gap: int = 2
    coherence_sigma: float = 0.0

    def __post_init__(self):
        if self.photons is not None:
            validate.positive("photons", self.photons, unit="counts")
        if self.beamstop < 0 or self.coherence_sigma < 0 or self.gap < 0:
            raise InputError("beamstop, gap and coherence_sigma must be >= 0")


def mask_for(shape, detector: Detector) -> np.ndarray:
    """True where ``detector`` measures nothing: the beamstop disc and the gap bands."""
    grids = np.meshgrid(*[np.arange(n) - n // 2 for n in shape], indexing="ij")
    mask = np.sqrt(sum(g.astype(float) ** 2 for g in grids)) <= detector.beamstop
    if detector.beamstop == 0:
        mask[:] = False
    if detector.gap:
        for ax, g in enumerate(grids):
            # a band perpendicular to each axis except the first (a 2D detector's module gaps)
            if ax == 0 and len(shape) > 2:
                continue
            mask |= (g >= 7) & (g < 7 + detector.gap)
    return mask


def record(obj, detector: Detector = Detector(), *, seed: int = 0):
    """The counts and mask a detector records for a centre-origin ``obj``.

    Returns ``(counts (float64, detector layout), mask (bool))``.
    """
    intensity = detector_intensity(obj)
    if detector.coherence_sigma > 0:
        intensity = np.maximum(gaussian_blur(intensity, detector.coherence_sigma), 0.0)
    mask = mask_for(intensity.shape, detector)
    if detector.photons is not None:
        rng = np.random.default_rng(seed)
        intensity = rng.poisson(intensity * (detector.photons / intensity.sum())).astype(np.float64)
    intensity = np.where(mask, 0.0, intensity)
    return intensity, mask


def _grid(shape):
    return np.meshgrid(*[(np.arange(n) - n // 2) / n for n in shape], indexing="ij")


def featured(n: int = 256, *, ndim: int = 2) -> np.ndarray:
    """An object of about n/4 across with two holes, a thin bar and a phase ramp.

    An irregular body (the union of three overlapping ellipses or ellipsoids), two round holes inside it,
    a bar one pixel thin sticking out, amplitude 1 with a weaker (0.6) lobe, and a phase of 1.5 rad
    across the object plus a 0.5 rad bump. Centre-origin complex64, oversampling >= 4 per axis.
    """
    n = validate.integer("n", n, low=32)
    shape = (n,) * ndim
    g = _grid(shape)
    r = lambda c, s: np.sqrt(sum(((gi - ci) / si) ** 2 for gi, ci, si in zip(g, c, s)))  # noqa: E731
    z = (0.0,) * (ndim - 2)
    body = ((r(z + (0.0, 0.0), (0.07,) * (ndim - 2) + (0.09, 0.06)) <= 1)
            | (r(z + (0.03, 0.05), (0.06,) * (ndim - 2) + (0.05, 0.07)) <= 1))
    lobe = r(z + (-0.06, 0.04), (0.05,) * ndim) <= 1
    holes = (r(z + (0.0, -0.02), (0.018,) * ndim) <= 1) | (r(z + (0.04, 0.06), (0.014,) * ndim) <= 1)
    thin = 1.0 / n
    bar = ((np.abs(g[-2] + 0.07) < 0.6 * thin) & (g[-1] > -0.11) & (g[-1] < 0.0))
    if ndim == 3:
        bar &= np.abs(g[0]) < 0.05
    amp = np.where(body & ~holes, 1.0, 0.0)
    amp = np.where(lobe & ~body, 0.6, amp)
    amp = np.where(bar, 1.0, amp)
    phase = 1.5 * (g[-1] + g[-2]) / 0.25 + 0.5 * np.exp(-sum(gi**2 for gi in g) / (2 * 0.04**2))
    return (amp * np.exp(1j * phase)).astype(np.complex64)


def crystal(n: int = 128, *, size: int = 50, strain: float = 1.2) -> np.ndarray:
    """A faceted crystal of ``size`` voxels across in an n^3 array, phase a smooth displacement field.

    The body is the intersection of eight {111} and six {100} half-spaces (a truncated octahedron, a
    common nanocrystal habit); amplitude 1; phase ``strain`` x (a dipole-like field: a sine along the
    body diagonal times a Gaussian envelope), the form a Bragg-CDI phase takes (2 pi Q.u for a
    displacement u that varies smoothly across the crystal). Centre-origin complex64.
    """
    n = validate.integer("n", n, low=16)
    size = validate.integer("size", size, low=4)
    if size > n // 2:
        raise InputError(f"crystal of {size} voxels needs n >= {2 * size} for oversampling 2")
    x, y, z = (np.arange(n) - n // 2)[:, None, None], (np.arange(n) - n // 2)[None, :, None], \
        (np.arange(n) - n // 2)[None, None, :]
    h = size / 2.0
    inside = (np.abs(x) <= h) & (np.abs(y) <= h) & (np.abs(z) <= h * 0.9)
    inside &= (np.abs(x) + np.abs(y) + np.abs(z)) <= 1.3 * h
    d = (x + y + z) / (np.sqrt(3) * h)
    envelope = np.exp(-(x**2 + y**2 + z**2) / (2 * (0.7 * h) ** 2))
    phase = strain * np.sin(np.pi * d) * envelope
    return np.where(inside, np.exp(1j * phase), 0).astype(np.complex64)
