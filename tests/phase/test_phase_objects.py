import numpy as np
import pytest

from qora.phase import objects
from qora.phase.physics import detector_intensity


@pytest.mark.parametrize("shape,side", [((32, 30), (7, 6)), ((17, 16, 15), 5)])
def test_box_pattern_in_closed_form_equals_the_fft(shape, side):
    np.testing.assert_allclose(detector_intensity(objects.box(shape, side)), objects.box_intensity(shape, side),
                               atol=1e-12)


def test_triangle_geometry():
    t = objects.triangle(64)
    rows, cols = np.nonzero(t)
    assert rows.max() - rows.min() + 1 == 16 and cols.max() - cols.min() + 1 == 16
    assert np.allclose(np.abs(t[t != 0]), 1)
    phase = np.angle(t[t != 0])
    assert phase.min() == pytest.approx(0) and phase.max() == pytest.approx(1.0)


def test_cut_prism_is_the_prism_minus_a_corner():
    p, c = objects.prism(32), objects.cut_prism(32)
    assert np.all((np.abs(c) > 0) <= (np.abs(p) > 0))
    assert (np.abs(c) > 0).sum() < (np.abs(p) > 0).sum()


def test_simulate_with_poisson_noise():
    obj, clean = objects.simulate("triangle", 32)
    assert clean.sum() == pytest.approx(np.sum(np.abs(obj) ** 2), rel=1e-6)
    _, noisy = objects.simulate("triangle", 32, photons=1e6, seed=3)
    assert np.all(noisy == np.round(noisy)) and noisy.sum() == pytest.approx(1e6, rel=0.01)
    with pytest.raises(ValueError, match="object must be"):
        objects.simulate("sphere")
