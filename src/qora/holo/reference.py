"""The reference case: one geometry for every holography test and benchmark.

Vacuum wavelength 0.532 um, medium index 1.333, object-space pixel 0.1 um, volume
128^3, holograms 256^2 (hologram pixel 0.05 um) with the carrier at a quarter of the
sampling frequency along the diagonal, detection NA 1.2, 49 illuminations (normal
incidence and 48 evenly spaced in azimuth on a cone of NA 0.8), a sphere of 3 um
diameter and index 1.36 at the centre. "Noise" is Gaussian noise of 2% of the mean
hologram intensity.
"""

from __future__ import annotations

import numpy as np

from qora.holo.geometry import Geometry, cone_illuminations

WAVELENGTH = 0.532
MEDIUM_INDEX = 1.333
PIXEL = 0.1
N = 128
HOLOGRAM_N = 256
NA_DETECTION = 1.2
NA_ILLUMINATION = 0.8
CONE_COUNT = 48
SPHERE_DIAMETER = 3.0
SPHERE_INDEX = 1.36
NOISE = 0.02


def geometry(n: int = N, *, on_grid: bool = True) -> Geometry:
    """The reference geometry (optionally at another volume size, same pixel).

    With ``on_grid`` (the default) each illumination frequency is rounded to the
    nearest frequency bin of the n x n field grid (at most half a bin, 0.04 um^-1 at
    n = 128, an NA change below 0.02). A plane wave whose frequency is off the grid
    is not periodic on it, so synthetic holograms of such waves carry leakage that
    real measurements do not; the reconstruction is told the rounded frequencies, so
    the data and the model agree exactly.
    """
    ill = cone_illuminations(NA_ILLUMINATION, WAVELENGTH, CONE_COUNT)
    if on_grid:
        df = 1.0 / (n * PIXEL)
        ill = np.round(ill / df) * df
    return Geometry(WAVELENGTH, MEDIUM_INDEX, PIXEL, n, NA_DETECTION, illuminations=ill)


def carrier(hologram_n: int = HOLOGRAM_N, hologram_pixel: float = PIXEL / 2) -> np.ndarray:
    """The reference carrier (nu_y, nu_x): a quarter of the sampling frequency along the diagonal."""
    fs = 1.0 / hologram_pixel
    return np.array([fs / 4, fs / 4])
