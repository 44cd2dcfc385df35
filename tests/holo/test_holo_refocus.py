"""Angular-spectrum refocus and autofocus against the analytic field of a Gaussian spot (an independent
method: the Fresnel solution of a Gaussian beam, exact to (lambda / w0)^2 here)."""

import math

import numpy as np
import pytest

from qora.holo import reference as R
from qora.holo import refocus as RF
from qora.io.errors import InputError

LAM, NM, PIXEL, N = R.WAVELENGTH, R.MEDIUM_INDEX, R.PIXEL, 96
OPTICS = dict(wavelength=LAM, medium_index=NM, pixel=PIXEL)
W0 = 1.0  # um: the spot's waist
# a tenth of the depth of field lambda / NA^2 of the reference setup (NA 1.2): 0.037 um
TOLERANCE = RF.depth_of_field(LAM, R.NA_DETECTION) / 10


def spot(z, amplitude=0.3j, centre=(0.0, 0.0)):
    """1 + a Gaussian beam of waist W0 focused at z = 0, seen in the plane z (um), the plane wave's phase
    removed: the paraxial Fresnel solution 1 / q exp(-r^2 / (W0^2 q)), q = 1 + i z / z_R."""
    x = (np.arange(N) - N // 2) * PIXEL
    y, x = np.meshgrid(x - centre[0], x - centre[1], indexing="ij")
    z_r = math.pi * W0**2 / (LAM / NM)
    q = 1 + 1j * np.asarray(z, float)[..., None, None] / z_r
    return 1 + amplitude * np.exp(-(x**2 + y**2) / (W0**2 * q)) / q


@pytest.mark.parametrize("distance", [2.0, -3.7])
def test_propagation_matches_the_fresnel_solution(distance):
    u = RF.propagate(spot(0.0), distance, **OPTICS)
    assert np.abs(u - spot(distance)).max() < 3e-3 * 0.3  # the paraxial solution's own error is ~1e-3


def test_propagation_is_unitary_and_reversible():
    u = spot(1.5)
    back = RF.propagate(RF.propagate(u, 2.5, **OPTICS), -2.5, **OPTICS)
    np.testing.assert_allclose(back, u, atol=1e-10)


@pytest.mark.parametrize("amplitude", [0.3j, 0.3, 0.5 + 0.5j], ids=["phase", "absorbing", "mixed"])
@pytest.mark.parametrize("distance", [2.0, -3.7])
def test_compactness_autofocus_within_a_tenth_of_the_depth_of_field(amplitude, distance):
    found = RF.autofocus(spot(distance, amplitude), metric="compactness", **OPTICS)
    assert abs(found + distance) < TOLERANCE, (found, distance, TOLERANCE)


@pytest.mark.parametrize("phase, waist", [(0.3, 1.0), (3.0, 2.0)], ids=["weak", "strong"])
@pytest.mark.parametrize("distance", [2.0, -3.7])
def test_amplitude_variance_autofocus_of_phase_objects(phase, waist, distance):
    """A pure phase object exp(i phi) (a cell), defocused by the propagation the Fresnel test checks."""
    x = (np.arange(N) - N // 2) * PIXEL
    y, x = np.meshgrid(x, x, indexing="ij")
    u = RF.propagate(np.exp(1j * phase * np.exp(-(x**2 + y**2) / waist**2)), distance, **OPTICS)
    found = RF.autofocus(u, interval=(-6, 6), **OPTICS)
    assert abs(found + distance) < TOLERANCE, (found, distance, TOLERANCE)
    if phase > 1:  # the test can fail: compactness misses a strong phase object's focus
        assert abs(RF.autofocus(u, interval=(-6, 6), metric="compactness", **OPTICS) + distance) > 1.0


def test_autofocus_of_a_series_per_field_and_common():
    distances = np.array([1.0, -2.5, 4.2])
    fields = spot(distances)
    found = RF.autofocus(fields, interval=(-6, 6), metric="compactness", **OPTICS)
    assert found.shape == (3,) and np.all(np.abs(found + distances) < TOLERANCE)
    same = spot(np.full(3, 2.2))
    assert abs(RF.autofocus(same, common=True, interval=(-6, 6), metric="compactness", **OPTICS) + 2.2) < TOLERANCE
    refocused, d = RF.refocused(fields, interval=(-6, 6), metric="compactness", **OPTICS)
    np.testing.assert_allclose(d, found)
    assert np.abs(refocused - spot(np.zeros(3))).max() < 0.01


def test_autofocus_fails_outside_its_interval():
    """The test can fail: a focus outside the interval is not found."""
    found = RF.autofocus(spot(6.0), interval=(-3, 3), metric="compactness", **OPTICS)
    assert abs(found + 6.0) > 1.0


@pytest.mark.parametrize("call, match", [
    (lambda: RF.propagate(spot(0.0), float("nan"), **OPTICS), "finite"),
    (lambda: RF.propagate(np.ones(5, complex), 1.0, **OPTICS), "fields must be"),
    (lambda: RF.propagate(spot(0.0), 1.0, wavelength=-1, medium_index=NM, pixel=PIXEL), "wavelength"),
    (lambda: RF.autofocus(spot(0.0), interval=(3, -3), **OPTICS), "start < stop"),
    (lambda: RF.autofocus(spot(0.0), metric="sharp", **OPTICS), "metric"),
    (lambda: RF.refocused(spot(0.0), 1.0, interval=(-1, 1), **OPTICS), "distance=None"),
])
def test_bad_input_is_a_clear_error(call, match):
    with pytest.raises(InputError, match=match):
        call()
