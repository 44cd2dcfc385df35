import math

import numpy as np
import pytest
import scipy.fft

from qora.holo.unwrap import dct, dct2, idct, idct2, rytov, unwrap, wrap


@pytest.mark.parametrize("shape,axis", [((8,), -1), ((7, 9), -1), ((7, 9), 0), ((3, 4, 5), 1)])
def test_dct_matches_scipy_and_round_trips(rng, shape, axis):
    x = rng.standard_normal(shape)
    np.testing.assert_allclose(dct(x, axis), scipy.fft.dct(x, type=2, axis=axis), atol=1e-12)
    np.testing.assert_allclose(idct(dct(x, axis), axis), x, atol=1e-13)


def test_dct2_round_trip(rng):
    x = rng.standard_normal((2, 6, 11))
    np.testing.assert_allclose(idct2(dct2(x)), x, atol=1e-13)
    np.testing.assert_allclose(dct2(x), scipy.fft.dctn(x, type=2, axes=(-2, -1)), atol=1e-11)


def _smooth_phase(n=128):
    y, x = np.mgrid[:n, :n] / n
    return 40 * np.exp(-((y - 0.5) ** 2 + (x - 0.45) ** 2) / 0.08) + 3 * np.sin(3 * y + 1)


def test_unwraps_a_40_rad_phase_up_to_a_multiple_of_2pi():
    true = _smooth_phase()
    assert np.ptp(true) > 40
    got = unwrap(wrap(true))
    d = got - true
    d -= 2 * math.pi * np.round(d.mean() / (2 * math.pi))
    assert np.abs(d).max() < 2e-3


def test_unwrap_is_congruent_with_the_wrapped_phase(rng):
    psi = wrap(_smooth_phase(64) + 0.3 * rng.standard_normal((64, 64)))  # noisy: LS differs from psi
    got = unwrap(psi)
    k = (got - psi) / (2 * math.pi)
    np.testing.assert_allclose(k, np.round(k), atol=1e-9)


def test_rytov_border_rule_and_logarithm():
    n = 64
    y, x = np.mgrid[:n, :n] - n // 2
    phase = 6.0 * np.exp(-(x**2 + y**2) / 80.0) + 4 * math.pi  # border near 4 pi: must come back to ~0
    amp = np.exp(0.1 * np.exp(-(x**2 + y**2) / 50.0))
    r = rytov(amp * np.exp(1j * phase))
    np.testing.assert_allclose(r.imag, phase - 4 * math.pi, atol=1e-9)
    np.testing.assert_allclose(r.real, np.log(amp), atol=1e-12)
    with pytest.raises(ValueError, match="zero"):
        rytov(np.zeros((4, 4), complex))
