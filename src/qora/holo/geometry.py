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

from qora.io.errors import InputError
from qora.io.validate import integer, positive

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

    ``na`` is dimensionless (n_m sin theta), ``wavelength`` the vacuum wavelength in um.
    Returns (nu_y, nu_x) pairs in cycles/um; the normal incidence (0, 0) first when asked.
    """
    radius = na / wavelength
    phi = 2 * math.pi * np.arange(count) / count
    cone = np.stack([radius * np.sin(phi), radius * np.cos(phi)], axis=1)
    if include_normal:
        cone = np.concatenate([np.zeros((1, 2)), cone])
    return cone


def _finite_array(name: str, values) -> np.ndarray:
    """``values`` as a finite float array (InputError naming ``name`` otherwise)."""
    a = np.asarray(values)
    if np.iscomplexobj(a) or not (np.issubdtype(a.dtype, np.number) or a.dtype == bool):
        raise InputError(f"{name} must be real numbers, got dtype {a.dtype}")
    a = a.astype(float)
    bad = int(np.count_nonzero(~np.isfinite(a)))
    if bad:
        raise InputError(f"{name} has {bad} non-finite (NaN or Inf) values of {a.size}")
    return a


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
        for name, unit in (("wavelength", "um"), ("medium_index", ""), ("pixel", "um"), ("na_detection", "")):
            object.__setattr__(self, name, positive(name, getattr(self, name), unit=unit))
        if self.na_detection > self.medium_index:
            raise InputError(f"na_detection ({self.na_detection:g}) cannot exceed the medium index "
                             f"({self.medium_index:g}): a numerical aperture beyond n_m is unphysical")
        object.__setattr__(self, "n", integer("n (the volume size)", self.n, low=4))
        ill = _finite_array("illuminations", self.illuminations)
        if ill.size == 0 or ill.size % 2:
            raise InputError(f"illuminations must be (A, 2) frequencies (nu_y, nu_x), got shape {np.shape(ill)}")
        ill = ill.reshape(-1, 2)
        object.__setattr__(self, "illuminations", ill)
        if np.any(np.hypot(ill[:, 0], ill[:, 1]) >= self.medium_frequency):
            raise InputError("an illumination frequency reaches the medium wavenumber n_m / wavelength = "
                             f"{self.medium_frequency:.4g} cycles/um: it would not propagate (its NA would "
                             f"exceed the medium index {self.medium_index:g})")
        if self.angles is not None:
            angles = _finite_array("angles", self.angles).reshape(-1)
            if not angles.size:
                raise InputError("angles is empty: give one rotation angle per hologram")
            object.__setattr__(self, "angles", angles)
            if np.any(ill != 0):
                raise InputError("the rotation geometry illuminates along z: give angles or illuminations, not both")
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
