"""The rotation axis fitted from the data (qora.holo.axis_fit) on fields of known axes."""

import numpy as np
import pytest

from qora.holo.axis_fit import fit_axis
from qora.holo.geometry import Geometry, rotation_axis
from qora.holo.odt import first_order
from qora.holo.phantoms import Sphere, born_ratio
from qora.io.errors import InputError

SPHERES = [Sphere((1.0, 0.5, -1.2), 1.2, 1.36), Sphere((-1.0, -1.0, 1.0), 0.9, 1.35), Sphere((0.3, 1.5, 0.8), 0.7, 1.37)]


def _phi(tilt, in_plane, spheres=SPHERES, n=40, count=48):
    angles = np.linspace(0, 2 * np.pi, count, endpoint=False)
    g = Geometry(wavelength=0.65, medium_index=1.333, pixel=0.2, n=n, na_detection=1.2, angles=angles,
                 axis=rotation_axis(tilt, in_plane))
    return first_order(1 + born_ratio(spheres, g), "rytov"), g


@pytest.mark.parametrize("tilt,in_plane", [(0.2, 0.0), (-0.15, 0.1), (0.0, 0.0)])
def test_the_fitted_axis_is_the_one_the_fields_were_made_with(tilt, in_plane):
    phi, g = _phi(tilt, in_plane)
    straight = Geometry(**{**g.__dict__, "axis": (0.0, 1.0, 0.0)})  # the fit ignores the geometry's own axis
    fit = fit_axis(phi, straight)
    assert fit.tilt == pytest.approx(tilt, abs=0.02) and fit.in_plane == pytest.approx(in_plane, abs=0.02)
    assert fit.determined and fit.interval[0] <= fit.tilt <= fit.interval[1]
    if tilt:
        assert fit.straight_inconsistency > 2 * fit.inconsistency


def test_a_tilt_outside_the_searched_range_is_not_determined():
    phi, g = _phi(0.3, 0.0, n=32, count=32)
    fit = fit_axis(phi, g, tilts=(-0.1, -0.05, 0.0, 0.05, 0.1), in_plane=(-0.05, 0.0, 0.05))
    assert fit.tilt >= 0.09 and not fit.determined  # at or past the edge of the range: not a minimum


def test_scan_geometry_is_refused():
    g = Geometry(wavelength=0.65, medium_index=1.333, pixel=0.2, n=16, na_detection=1.2,
                 illuminations=np.zeros((1, 2)))
    with pytest.raises(InputError, match="rotation"):
        fit_axis(np.zeros((1, 16, 16), complex), g)
