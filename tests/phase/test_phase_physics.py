import numpy as np
import pytest

from qora.phase import objects
from qora.phase.cpu import modulus_step, update_step
from qora.phase.physics import (
    autocorrelation_support, fourier_error, modulus_project, native_amplitude, shrinkwrap, support_update,
    update_coefficients,
)


def test_update_coefficients():
    assert update_coefficients("ER") == (0.0, 0.0)
    assert update_coefficients("hio", 0.7) == (1.0, -0.7)
    assert update_coefficients("RAAR", 0.75) == (0.75, -0.5)
    with pytest.raises(ValueError, match="algorithm"):
        update_coefficients("OSS")


def test_raar_coefficients_equal_its_reflection_form(rng):
    # beta/2 (R_S R_M + I) x + (1 - beta) P_M x, with R = 2P - I and P_S = support mask
    beta = 0.8
    x = rng.standard_normal(50) + 1j * rng.standard_normal(50)
    pm = rng.standard_normal(50) + 1j * rng.standard_normal(50)
    s = rng.random(50) > 0.5
    rm = 2 * pm - x
    rs_rm = np.where(s, rm, -rm)
    ref = beta / 2 * (rs_rm + x) + (1 - beta) * pm
    a, b = update_coefficients("RAAR", beta)
    np.testing.assert_allclose(np.where(s, pm, a * x + b * pm), ref, atol=1e-12)


@pytest.mark.parametrize("shape", [(16, 16), (15, 17), (6, 7, 8)])
def test_fused_modulus_step_matches_reference(rng, shape):
    y = (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(np.complex64)
    y.flat[3] = 0  # a zero modulus takes phase 0
    amp = rng.random(shape).astype(np.float32)
    amp[rng.random(shape) < 0.2] = -1  # masked pixels
    scale = 1 / np.sqrt(y.size)
    w_ref, err_ref = modulus_project(y.astype(np.complex128), amp.astype(np.float64), scale)
    w = y.copy()
    err = modulus_step(w, amp, scale)
    np.testing.assert_allclose(w, w_ref, rtol=1e-6, atol=1e-7)
    assert err == pytest.approx(err_ref, rel=1e-5)
    assert w.flat[3] == pytest.approx(scale * amp.flat[3] if amp.flat[3] >= 0 else 0)


@pytest.mark.parametrize("algorithm", ["ER", "HIO", "RAAR"])
@pytest.mark.parametrize("constraint", [None, "real", "positive"])
def test_fused_update_matches_reference(rng, algorithm, constraint):
    shape = (9, 10)
    x = (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(np.complex64)
    p = (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(np.complex64)
    s = rng.random(shape) > 0.4
    a, b = update_coefficients(algorithm, 0.8)
    ref = support_update(x.astype(np.complex128), p.astype(np.complex128), s, a, b, constraint)
    out = x.copy()
    update_step(out, p, s, a, b, constraint)
    np.testing.assert_allclose(out, ref, rtol=1e-6, atol=1e-6)


def test_native_amplitude_layout_and_mask():
    intensity = np.zeros((5, 6))
    intensity[2, 3] = 4.0  # q = 0 in detector layout
    mask = np.zeros((5, 6), bool)
    mask[0, 0] = True
    amp = native_amplitude(intensity, mask)
    assert amp[0, 0] == 2.0  # q = 0 moved to index 0
    assert amp[-2, -3] == -1.0  # the masked corner, ifftshifted
    assert amp.dtype == np.float32


def test_true_object_has_zero_fourier_error():
    obj, intensity = objects.simulate("triangle", 32)
    amp = native_amplitude(intensity)
    assert fourier_error(obj, amp) < 1e-6
    assert fourier_error(obj * np.exp(0.3j), amp) < 1e-6
    assert fourier_error(np.roll(obj, 2, axis=1), amp) < 1e-6  # translation changes only the phase
    assert fourier_error(obj * 1.1, amp) == pytest.approx(0.1, rel=1e-3)


def test_autocorrelation_support_contains_the_object():
    obj, intensity = objects.simulate("triangle", 64)
    sup = autocorrelation_support(intensity)
    true = objects.support_of(obj)
    # the autocorrelation spans O - O, which holds the translate O - o of the object for each o in O
    centre = np.array(true.shape) // 2
    fits = [np.all(sup[np.roll(true, tuple(centre - o), axis=(0, 1))]) for o in np.argwhere(true)]
    assert np.mean(fits) > 0.25  # threshold 0.04 of the maximum: a loose start for shrinkwrap
    assert 2 * true.sum() < sup.sum() < 0.3 * sup.size


def test_shrinkwrap_tightens_and_guards_against_collapse():
    obj = objects.triangle(64)
    loose = np.zeros(obj.shape, bool)
    loose[20:44, 20:44] = True
    new, changed = shrinkwrap(obj, loose, sigma=0.5, threshold=0.25)
    assert changed and np.all(new <= loose)
    true = objects.support_of(obj)
    assert np.all(new[true]) and new.sum() < 1.5 * true.sum()
    tiny = np.zeros(obj.shape, np.complex64)
    tiny[32, 32] = 1.0  # blurs to a few pixels: far below 20% of the old support
    kept, changed = shrinkwrap(tiny, new, sigma=0.5, threshold=0.5)
    assert not changed and np.array_equal(kept, new)
