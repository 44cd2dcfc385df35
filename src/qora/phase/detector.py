"""Patterns as a detector records them, for success-rate benchmarks and tests.

:func:`record` turns a noise-free pattern (:func:`qora.phase.physics.detector_intensity`)
into what a pixel detector would give: partial coherence as a Gaussian blur of the
intensity (the pattern convolved with the coherence function's transform), scaled to a
total photon count, Poisson counts, and a mask of what is not measured (a round
beamstop at q = 0, detector gaps as bands of pixels). Masked pixels hold 0 counts and
are True in the mask, the convention of :func:`qora.phase.reconstruct`.

:func:`featured` and :func:`crystal` are test objects a simple shape does not cover:
holes, thin features and a phase ramp (2D or 3D), and a faceted crystal whose phase
is a smooth displacement field (the Bragg-CDI case). :func:`lithograph` is the fine structure of a
lithographic test pattern (a ring of dots round an empty centre above block letters), and
:data:`BEAMLINE_BOXES` the rectangular beamstop and gap boxes of a real detector's mask (the ESRF ID10
logo pattern's, scaled to the array), for the missing data a round 3-pixel beamstop does not cover.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qora.io import validate
from qora.io.errors import InputError
from qora.phase.physics import detector_intensity, gaussian_blur

__all__ = ["Detector", "record", "featured", "crystal", "lithograph", "BEAMLINE_BOXES"]

# The unmeasured boxes of the ESRF ID10 logo pattern (../shared/data/cdi, the mask of PyNX's example): (row, column,
# height, width) of each box's corner relative to q = 0, in pixels of a 512^2 array; scaled with the array. The
# central one (17 x 25 px, slightly off q = 0) is the beamstop; it hides the object's features larger than ~20 px,
# 57% of the logo's intensity (docs/phase.md, "The ESRF logo").
BEAMLINE_BOXES = ((-8, -12, 17, 25), (-18, -28, 6, 6), (13, -28, 6, 6), (-19, -256, 8, 25), (12, 232, 8, 24),
                  (-256, -9, 17, 23), (240, -13, 16, 23), (-256, 227, 22, 29), (235, -256, 21, 30))


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
    boxes : tuple of (row, column, height, width)
        Rectangular unmeasured regions of a 2D detector (a beamstop's shadow, module gaps), their corners
        relative to q = 0 in pixels of a 512^2 array, scaled to the pattern's size (:data:`BEAMLINE_BOXES`).
    """

    photons: float | None = 1e8
    beamstop: float = 3.0
    gap: int = 2
    coherence_sigma: float = 0.0
    boxes: tuple = ()

    def __post_init__(self):
        if self.photons is not None:
            validate.positive("photons", self.photons, unit="counts")
        if self.beamstop < 0 or self.coherence_sigma < 0 or self.gap < 0:
            raise InputError("beamstop, gap and coherence_sigma must be >= 0")
        if any(len(b) != 4 or b[2] < 1 or b[3] < 1 for b in self.boxes):
            raise InputError("each box is (row, column, height, width) with height and width >= 1 pixels")


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
    if detector.boxes:
        if len(shape) != 2:
            raise InputError("detector boxes are for 2D patterns")
        for box in detector.boxes:
            r0, c0, h, w = (int(round(v * shape[i % 2] / 512)) for i, v in enumerate(box))
            mask |= ((grids[0] >= r0) & (grids[0] < r0 + max(1, h)) & (grids[1] >= c0) & (grids[1] < c0 + max(1, w)))
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


def _letter_strokes(letter: str):
    """Block-letter strokes as (row, column, height, width) in a 5 x 4 cell (row 0 at the top)."""
    top, mid, low = (0, 0, 1, 4), (2, 0, 1, 4), (4, 0, 1, 4)
    left, right = (0, 0, 5, 1), (0, 3, 5, 1)
    return {"E": (left, top, mid, low), "S": (top, mid, low, (0, 0, 3, 1), (2, 3, 3, 1)),
            "R": (left, top, mid, (0, 3, 3, 1), (3, 2, 1, 1), (4, 3, 1, 1)), "F": (left, top, mid)}[letter]


def lithograph(n: int = 512, *, text: str = "ESRF") -> np.ndarray:
    """A lithographic test pattern with the fine structure of the ESRF logo, about n/4 across.

    Above, a sunburst: 24 rays of round dots on four rings about an empty centre, the dots shrinking
    outwards (radii 3.5 to 2 px at n = 512); below, block letters (strokes 6 px) between two thin bars (3 px).
    Amplitude 1 (binary), phase flat, as a thin gold pattern in transmission; centre-origin complex64.
    Dimensions scale with n / 512 (so at 256 the finest dots are 1 px across).
    """
    n = validate.integer("n", n, low=128)
    k = n / 512.0
    rows, cols = np.meshgrid(np.arange(n) - n // 2, np.arange(n) - n // 2, indexing="ij")
    amp = np.zeros((n, n), bool)
    centre = (-30 * k, 0.0)
    for ring, (radius, dot) in enumerate(((20, 3.5), (29, 3.0), (38, 2.5), (47, 2.0))):
        for ray in range(24):
            angle = 2 * np.pi * (ray + 0.5 * (ring % 2)) / 24
            cy, cx = centre[0] + k * radius * np.sin(angle), centre[1] + k * radius * np.cos(angle)
            amp |= (rows - cy) ** 2 + (cols - cx) ** 2 <= (k * dot) ** 2
    cell, gap_px, stroke = 6.0 * k, 6.0 * k, 6.0 * k
    width = len(text) * 4 * cell + (len(text) - 1) * gap_px
    top, left = 28 * k, -width / 2
    for i, letter in enumerate(text.upper()):
        x0 = left + i * (4 * cell + gap_px)
        for r, c, h, w in _letter_strokes(letter):
            amp |= ((rows >= top + r * cell) & (rows < top + r * cell + h * stroke)
                    & (cols >= x0 + c * cell) & (cols < x0 + c * cell + w * stroke))
    for y in (top - 7 * k, top + 5 * cell + 4 * k):
        amp |= (rows >= y) & (rows < y + 3 * k) & (np.abs(cols) <= width / 2 + 6 * k)
    return amp.astype(np.complex64)
