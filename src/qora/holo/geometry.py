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

__all__ = ["Geometry", "cone_illuminations", "frequencies", "nu_z", "rotation_axis", "odtbrain_axis", "axis_rotation"]


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


def rotation_axis(tilt: float = 0.0, in_plane: float = 0.0) -> tuple:
    """Unit rotation axis (z, y, x) from two angles in radians.

    Start from the detector's y axis (the rows), turn it in the detector plane by ``in_plane``
    toward +x, then tilt it out of the detector plane by ``tilt`` toward +z (the optical axis):
    (sin tilt, cos tilt cos in_plane, cos tilt sin in_plane). ODTbrain's ``tilted_axis`` [x, y, z]
    is the same vector written in the other order (:func:`odtbrain_axis`).
    """
    t, p = float(tilt), float(in_plane)
    if not (math.isfinite(t) and math.isfinite(p)):
        raise InputError(f"the axis angles must be finite, got tilt={tilt!r}, in_plane={in_plane!r}")
    if abs(t) >= math.radians(80):
        raise InputError(f"an axis tilted by {math.degrees(t):.1f} degrees out of the detector plane (at least 80) "
                         "is nearly the optical axis: a rotation about it gives no new views")
    return (math.sin(t), math.cos(t) * math.cos(p), math.cos(t) * math.sin(p))


def odtbrain_axis(tilted_axis) -> tuple:
    """Our axis (z, y, x) from ODTbrain's ``tilted_axis`` [x, y, z] (same frame: x columns, y rows, z optical axis)."""
    x, y, z = (float(v) for v in np.asarray(tilted_axis, float).reshape(3))
    return (z, y, x)


def axis_rotation(axis, angle: float) -> np.ndarray:
    """Rodrigues' matrix on (z, y, x) vectors: clockwise by ``angle`` (rad) seen from the tip of unit ``axis``.

    In (z, y, x) components the cross-product matrix of the axis changes sign (the frame is
    left-handed), so R = I + sin(angle) K + (1 - cos(angle)) K^2 with K the cross-product matrix
    of ``axis`` written on (z, y, x) is a right-handed turn by -angle in (x, y, z).
    """
    u = np.asarray(axis, float)
    k = np.array([[0.0, -u[2], u[1]], [u[2], 0.0, -u[0]], [-u[1], u[0], 0.0]])
    return np.eye(3) + math.sin(angle) * k + (1 - math.cos(angle)) * (k @ k)


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
        Rotation angles about ``axis``, radians, in any order and spacing (rotation geometry;
        illumination along z).
    axis : (3,) floats
        The rotation axis (z, y, x), normalised on construction (default the y axis; see
        :func:`rotation_axis` for an axis tilted out of the detector plane). Rotation geometry only.
    rotation_sense : int
        +1 (the default, Qora's): a positive angle turns the object's +x toward +z about the y axis,
        i.e. clockwise seen from the tip of ``axis`` (a left-handed turn in the (x, y, z) frame);
        -1: the opposite sense (right-handed; ODTbrain's, see docs/holo.md).
    """

    wavelength: float
    medium_index: float
    pixel: float
    n: int
    na_detection: float
    illuminations: np.ndarray = field(default_factory=lambda: np.zeros((1, 2)))
    angles: np.ndarray | None = None
    axis: tuple = (0.0, 1.0, 0.0)
    rotation_sense: int = 1

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
        axis = _finite_array("axis", self.axis).reshape(-1)
        norm = float(np.linalg.norm(axis)) if axis.size == 3 else 0.0
        if norm == 0.0:
            raise InputError(f"axis must be a non-zero vector (z, y, x), got {self.axis!r}")
        axis = axis / norm
        if self.angles is None and not np.allclose(axis, (0.0, 1.0, 0.0)):
            raise InputError("axis applies to the rotation geometry: give angles too")
        if abs(axis[0]) >= math.sin(math.radians(80)):
            raise InputError(f"the rotation axis {tuple(axis)} is within 10 degrees of the optical axis z: a rotation "
                             "about it gives no new views")
        object.__setattr__(self, "axis", tuple(float(v) for v in axis))
        if self.rotation_sense not in (1, -1) or isinstance(self.rotation_sense, bool):
            raise InputError(f"rotation_sense must be +1 or -1, got {self.rotation_sense!r}")
        object.__setattr__(self, "rotation_sense", int(self.rotation_sense))

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
        """The 3x3 matrix acting on (z, y, x) that turns the object into its pose at angle a.

        Identity for the scanning geometry. The sample's spectrum at angle a is the object's
        spectrum at rotation(a).T @ q: the mapping reads measured frequencies through it.
        About the y axis with sense +1 it is [[c, 0, s], [0, 1, 0], [-s, 0, c]] (c, s of the angle).
        """
        if self.angles is None:
            return np.eye(3)
        return axis_rotation(self.axis, self.rotation_sense * float(self.angles[a]))

    def nu_z_in(self) -> np.ndarray:
        """Axial frequency of each illumination."""
        return nu_z(self.illuminations[:, 0], self.illuminations[:, 1], self.medium_frequency)
