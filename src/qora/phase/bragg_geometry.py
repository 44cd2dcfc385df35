"""Beamline geometry of a Bragg rocking scan: detector pixels and rocking steps to scattering vectors (1/A).

The diffractometer is a stack of circles, each a rotation about a lab axis written as in xrayutilities: "y+" is a
right-handed rotation about +y, "z-" about -z. The sample circles are listed outermost first (their rotations
compose in that order), and so are the detector's. The incident beam runs along ``beam`` (a unit lab vector).

A detector pixel (row, col) at zero detector angles sits at

    r = D beam + (row - centre_row) p_row e_row + (col - centre_col) p_col e_col,

D the sample-detector distance, p the pixel pitch and e the pixel directions ("x+", "y-": the lab axes along which
the row and column indices grow), ``centre`` the pixel the direct beam hits at zero detector angles. The detector
circles turn r; the scattered wave vector is k r' / |r'| and Q_lab = k (r' / |r'| - beam), k = 2 pi / lambda.
Q in the sample's frame is the inverse of the sample circles' rotation applied to Q_lab: the frame that turns
with the specimen, where a rocking scan's frames sample one fixed reciprocal-space neighbourhood.

The 34-ID-C six-circle (APS): sample Theta "y+", Chi "z-", Phi "y+"; detector Delta "y+", Gamma "x-"; beam +z; 55 um
pixels; a TIFF frame's rows along -y and its columns along +x. cohere-ui describes the detector as "x+", "y-", but
for its arrays, which are the TIFF frames transposed (cohere_ui's read_tif): the same directions. The real scan 54
says so too: as the crystal rocks, its Bragg peak moves by (-0.088, +0.092) px a frame along (row, col), where this
assignment predicts (-0.096, +0.094) and the transposed one (+0.094, -0.096) (tests/phase/test_bragg_readers.py).
ESRF ID01 (:data:`CIRCLES_ID01`): sample eta "x-", phi "y-"; detector nu "y-", delta "x-"; beam +z; rows along -y
(cdiutils' description, in the CXI frame). Both checked against xrayutilities' QConversion at several angles
(tests/phase/test_bragg_geometry.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from qora.io.errors import InputError

__all__ = ["Circles", "BraggGeometry", "CIRCLES_34IDC", "CIRCLES_ID01", "rotation", "HC_EV_A"]

HC_EV_A = 12398.419843320026  # h c (eV A): lambda (A) = HC_EV_A / energy (eV)
_AXES = {"x": 0, "y": 1, "z": 2}


def _axis(code: str):
    if len(code) != 2 or code[0] not in _AXES or code[1] not in "+-":
        raise InputError(f"a circle or pixel direction is one of x+, x-, y+, y-, z+, z-; got {code!r}")
    return _AXES[code[0]], 1.0 if code[1] == "+" else -1.0


def _unit(code: str) -> np.ndarray:
    index, sign = _axis(code)
    e = np.zeros(3)
    e[index] = sign
    return e


def rotation(code: str, degrees) -> np.ndarray:
    """The right-handed rotation about the signed lab axis ``code`` by ``degrees``: (..., 3, 3) for an array of
    angles."""
    index, sign = _axis(code)
    a = np.deg2rad(np.asarray(degrees, np.float64)) * sign
    c, s = np.cos(a), np.sin(a)
    out = np.zeros(a.shape + (3, 3))
    i, j = [(1, 2), (2, 0), (0, 1)][index]  # the plane the rotation turns: (y, z) about x, (z, x) about y, ...
    out[..., index, index] = 1.0
    out[..., i, i] = c
    out[..., j, j] = c
    out[..., j, i] = s
    out[..., i, j] = -s
    return out


@dataclass(frozen=True)
class Circles:
    """A diffractometer: its sample and detector circles (names, axes outermost first) and beam direction."""

    sample_names: tuple
    sample_axes: tuple
    detector_names: tuple
    detector_axes: tuple
    beam: tuple = (0.0, 0.0, 1.0)
    pixel_directions: tuple = ("x+", "y-")

    def __post_init__(self):
        for codes in (self.sample_axes, self.detector_axes, self.pixel_directions):
            for code in codes:
                _axis(code)
        if len(self.sample_names) != len(self.sample_axes) or len(self.detector_names) != len(self.detector_axes):
            raise InputError("each circle needs one name and one axis")


CIRCLES_34IDC = Circles(("Theta", "Chi", "Phi"), ("y+", "z-", "y+"), ("Delta", "Gamma"), ("y+", "x-"),
                        pixel_directions=("y-", "x+"))
# ESRF ID01 in the CXI lab frame (z downstream, y up, x outboard), as cdiutils describes it: sample eta "x-" and phi
# "y-", detector nu "y-" and delta "x-", the detector's rows along -y and columns along +x
CIRCLES_ID01 = Circles(("eta", "phi"), ("x-", "y-"), ("nu", "delta"), ("y-", "x-"), beam=(0.0, 0.0, 1.0),
                       pixel_directions=("y-", "x+"))


def _composed(codes, angles) -> np.ndarray:
    """The product of the circles' rotations, outermost first; angles broadcast (a rocking circle's array)."""
    arrays = [np.asarray(a, np.float64) for a in angles]
    shape = np.broadcast_shapes(*(a.shape for a in arrays))
    total = np.broadcast_to(np.eye(3), shape + (3, 3)).copy()
    for code, a in zip(codes, arrays):
        total = total @ rotation(code, np.broadcast_to(a, shape))
    return total


@dataclass
class BraggGeometry:
    """One rocking scan's geometry.

    Parameters
    ----------
    circles : Circles
    angles : dict
        Every circle's angle (degrees) by name; the rocking circle's at the scan's first frame.
    energy_ev : float
        X-ray energy (eV).
    distance_m : float
        Sample-detector distance (m).
    pixel_m : (float, float)
        Pixel pitch along rows and columns (m).
    centre : (float, float)
        The pixel (row, col) the direct beam hits at zero detector angles, in the frames' indices.
    rocking : str
        The rocking circle's name (a sample circle).
    step_deg : float
        Its step between frames (degrees).
    """

    circles: Circles
    angles: dict
    energy_ev: float
    distance_m: float
    pixel_m: tuple
    centre: tuple
    rocking: str
    step_deg: float
    notes: dict = field(default_factory=dict)

    def __post_init__(self):
        names = self.circles.sample_names + self.circles.detector_names
        missing = [n for n in names if n not in self.angles]
        if missing:
            raise InputError(f"the geometry needs every circle's angle: missing {', '.join(missing)}")
        if self.rocking not in self.circles.sample_names:
            raise InputError(f"the rocking circle must be a sample circle ({', '.join(self.circles.sample_names)}), "
                             f"got {self.rocking!r}")
        for name, value in (("energy_ev", self.energy_ev), ("distance_m", self.distance_m)):
            if not (np.isfinite(value) and value > 0):
                raise InputError(f"{name} must be positive, got {value}")

    @property
    def wavelength_a(self) -> float:
        return HC_EV_A / self.energy_ev

    def sample_rotation(self, frames=0.0) -> np.ndarray:
        """The sample circles' rotation at frame index ``frames`` (array or number): (..., 3, 3)."""
        frames = np.asarray(frames, np.float64)
        angles = [self.angles[n] + (self.step_deg * frames if n == self.rocking else 0.0)
                  for n in self.circles.sample_names]
        return _composed(self.circles.sample_axes, angles)

    def q_lab(self, rows, cols) -> np.ndarray:
        """Q (1/A, lab frame) of the pixels ``rows``, ``cols`` (broadcast): (..., 3). The detector does not rock."""
        rows, cols = np.broadcast_arrays(np.asarray(rows, np.float64), np.asarray(cols, np.float64))
        beam = np.asarray(self.circles.beam, np.float64)
        beam = beam / np.linalg.norm(beam)
        e_row, e_col = (_unit(c) for c in self.circles.pixel_directions)
        r = (self.distance_m * beam + ((rows - self.centre[0]) * self.pixel_m[0])[..., None] * e_row
             + ((cols - self.centre[1]) * self.pixel_m[1])[..., None] * e_col)
        turn = _composed(self.circles.detector_axes, [self.angles[n] for n in self.circles.detector_names])
        r = r @ turn.T
        k = 2 * np.pi / self.wavelength_a
        return k * (r / np.linalg.norm(r, axis=-1, keepdims=True) - beam)

    def q_sample(self, frames, rows, cols) -> np.ndarray:
        """Q (1/A) in the sample's frame of pixel (``rows``, ``cols``) in frame ``frames`` (broadcast): (..., 3)."""
        frames, rows, cols = np.broadcast_arrays(*(np.asarray(a, np.float64) for a in (frames, rows, cols)))
        turn = self.sample_rotation(frames)
        return np.einsum("...ji,...j->...i", turn, self.q_lab(rows, cols))

    def reciprocal_basis(self, frame: float, row: float, col: float, *, lab: bool = True) -> np.ndarray:
        """The change of Q (1/A) per step of each array index at (``frame``, ``row``, ``col``): a 3 x 3 matrix whose
        columns are dQ/dframe, dQ/drow, dQ/dcol, in the lab frame at that frame's sample angles (``lab``) or in the
        sample's frame. Central differences over one index step (Q is smooth over a detector: exact to ~1e-8)."""
        def q(f, r, c):
            value = self.q_sample(f, r, c)
            return self.sample_rotation(frame) @ value if lab else value

        steps = np.eye(3) * 0.5
        return np.stack([q(*(np.array([frame, row, col]) + d)) - q(*(np.array([frame, row, col]) - d))
                         for d in steps], axis=1)

    def direct_basis(self, shape, frame: float, row: float, col: float, *, lab: bool = True) -> np.ndarray:
        """The real-space step (A) of the object's voxel along each array axis (frame, row, col) for an array of
        ``shape`` sampled around (``frame``, ``row``, ``col``): columns a_j with a_j . b_i = 2 pi delta_ij / N_i,
        b the :meth:`reciprocal_basis`. The voxels of a rocking scan's object are not orthogonal: |a_j| is each
        axis's step, and the matrix maps array indices to lab (or sample) positions."""
        b = self.reciprocal_basis(frame, row, col, lab=lab)
        return 2 * np.pi * np.linalg.inv(b).T / np.asarray(shape, np.float64)[None, :]
