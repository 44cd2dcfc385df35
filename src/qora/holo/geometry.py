"""Geometry of an optical diffraction tomography measurement, in micrometres.

Conventions
-----------
- Lengths in micrometres, spatial frequencies in cycles per micrometre.
- Real-space arrays are centre-origin (r = 0 at index n//2 on every axis); volumes
  are (z, y, x) = (plane, row, column), fields (y, x).
- An illumination is a plane wave exp(2 pi i nu_in . r) in the medium, with lateral
  frequency ``nu_in = (nu_y, nu_x)`` and ``nu_z = sqrt((n_m / lambda)^2 - |nu_in|^2)``.
- Fields are compared at z = 0, the focal plane, through the detection pupil
  |nu| <= NA / lambda. A field ratio is u / u_in, the total field over the incident one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

__all__ = ["Geometry", "cone_illuminations", "frequencies", "nu_z"]


def nu_z(nu_y, nu_x, medium_frequency: float):
    """Axial frequency sqrt(k_m^2 - |nu|^2) (cycles/um) of a propagating wave; NaN when evanescent."""
    rad = medium_frequency**2 - np.asarray(nu_y) ** 2 - np.asarray(nu_x) ** 2
    with np.errstate(invalid="ignore"):
        return np.where(rad > 0, np.sqrt(np.maximum(rad, 0)), np.nan)


def frequencies(n: int, pixel: float) -> np.ndarray:
    """The DFT frequencies (cycles/um) of n samples at ``pixel`` um, in FFT order."""
    return np.fft.fftfreq(n, d=pixel)


def cone_illuminations(na: float, wavelength: float, count: int, *, include_normal: bool = True) -> np.ndarray:
    """Lateral frequencies (A, 2) of ``count`` illuminations evenly in azimuth on a cone of NA ``na``.

    Returns (nu_y, nu_x) pairs in cycles/um; the normal incidence (0, 0) first when asked.
    """
    radius = na / wavelength
    phi = 2 * math.pi * np.arange(count) / count
    cone = np.stack([radius * np.sin(phi), radius * np.cos(phi)], axis=1)
    if include_normal:
        cone = np.concatenate([np.zeros((1, 2)), cone])
    return cone


@dataclass(frozen=True)
class Geometry:
    """One ODT measurement geometry (illumination scanning, or sample rotation about the y axis).

    Attributes
    ----------
    wavelength : float
        Vacuum wavelength, um.
    medium_index : float
        Refractive index of the medium n_m.
    pixel : float
        Object-space pixel of the fields and the volume (dz = pixel), um.
    n : int
        Lateral size of fields and volume (the volume is n^3).
    na_detection : float
        Detection numerical aperture (the pupil radius is NA / wavelength).
    illuminations : ndarray (A, 2)
        Lateral illumination frequencies (nu_y, nu_x), cycles/um (scanning geometry).
    angles : ndarray (A,) or None
        Rotation angles about the y axis, radians (rotation geometry; illumination along z).
    """

    wavelength: float
    medium_index: float
    pixel: float
    n: int
    na_detection: float
    illuminations: np.ndarray = field(default_factory=lambda: np.zeros((1, 2)))
    angles: np.ndarray | None = None

    def __post_init__(self):
        for name in ("wavelength", "medium_index", "pixel", "na_detection"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.na_detection > self.medium_index:
            raise ValueError(f"na_detection ({self.na_detection}) cannot exceed the medium index ({self.medium_index})")
        if self.n < 4:
            raise ValueError(f"n must be at least 4, got {self.n}")
        ill = np.asarray(self.illuminations, float).reshape(-1, 2)
        object.__setattr__(self, "illuminations", ill)
        if np.any(np.hypot(ill[:, 0], ill[:, 1]) >= self.medium_frequency):
            raise ValueError("an illumination frequency reaches the medium wavenumber: it would not propagate")
        if self.angles is not None:
            angles = np.asarray(self.angles, float).reshape(-1)
            object.__setattr__(self, "angles", angles)
            if np.any(ill != 0):
                raise ValueError("the rotation geometry illuminates along z: give angles or illuminations, not both")
            object.__setattr__(self, "illuminations", np.zeros((len(angles), 2)))

    @property
    def geometry(self) -> str:
        return "rotation" if self.angles is not None else "scan"

    @property
    def count(self) -> int:
        """Number of illuminations (or rotation angles)."""
        return len(self.angles) if self.angles is not None else len(self.illuminations)

    @property
    def medium_frequency(self) -> float:
        """n_m / lambda, cycles/um."""
        return self.medium_index / self.wavelength

    @property
    def k0(self) -> float:
        """Vacuum wavenumber 2 pi / lambda, rad/um."""
        return 2 * math.pi / self.wavelength

    @property
    def pupil_frequency(self) -> float:
        """NA / lambda, cycles/um."""
        return self.na_detection / self.wavelength

    def rotation(self, a: int) -> np.ndarray:
        """The 3x3 matrix acting on (z, y, x) that turns the object into its pose at angle a (about y).

        Identity for the scanning geometry. The sample's spectrum at angle a is the object's
        spectrum at rotation(a).T @ q: the mapping reads measured frequencies through it.
        """
        if self.angles is None:
            return np.eye(3)
        t = self.angles[a]
        c, s = math.cos(t), math.sin(t)
        return np.array([[c, 0.0, s], [0.0, 1.0, 0.0], [-s, 0.0, c]])

    def nu_z_in(self) -> np.ndarray:
        """Axial frequency of each illumination."""
        return nu_z(self.illuminations[:, 0], self.illuminations[:, 1], self.medium_frequency)
