import numpy as np
import pytest

from qora.phase import analysis, objects


def test_align_removes_phase_translation_and_twin():
    obj = objects.triangle(64).astype(np.complex128)
    moved = analysis.shift(analysis.twin(obj), (3.25, -2.5)) * np.exp(1.1j)
    aligned, info = analysis.align(moved, obj)
    assert info["twin"]
    assert np.linalg.norm(aligned - obj) / np.linalg.norm(obj) < 1e-5
    assert analysis.object_error(moved, obj) < 1e-5


def test_twin_is_an_involution_and_reflects_about_the_centre():
    x = np.random.default_rng(0).standard_normal((7, 8)) + 0j
    np.testing.assert_array_equal(analysis.twin(analysis.twin(x)), x)
    assert analysis.twin(x)[3, 4] == np.conj(x[3, 4])  # the centre (n//2) stays


def test_object_error_of_a_different_object_is_large():
    assert analysis.object_error(objects.triangle(32), objects.box((32, 32), 8)) > 0.3


def test_prtf_and_modes_of_identical_starts():
    obj, intensity = objects.simulate("triangle", 32)
    starts = np.stack([obj, np.roll(obj, 1, axis=0) * 1j, analysis.twin(obj)])
    q, curve = analysis.prtf(starts, intensity)
    strong = intensity[intensity > 1e-3 * intensity.max()]
    assert strong.size and np.nanmin(curve[:4]) == pytest.approx(1.0, abs=1e-3)
    m, w = analysis.modes(starts, count=2)
    assert w[0] == pytest.approx(1.0, abs=1e-6) and m.shape == (2, 32, 32)


def test_consensus_of_agreeing_and_disagreeing_starts():
    """Starts that are one object up to shift, phase, twin and scale agree to rounding; a different
    object's pairs show its error against the others, computed here directly."""
    from qora.phase.analysis import consensus, object_error, shift, twin
    from qora.phase import objects as objs

    obj = objs.triangle(32).astype(np.complex128)
    other = objs.box((32, 32), 8).astype(np.complex128)
    starts = np.stack([obj, 2.0 * np.exp(0.3j) * shift(obj, (1.5, -2.0)), 0.5 * twin(obj), other])
    scores = np.array([0.1, 0.2, 0.3, 0.05])
    out = consensus(starts, scores, keep=3)
    assert out["starts"] == [3, 0, 1]
    expected = object_error(obj / np.linalg.norm(obj), other / np.linalg.norm(other))
    np.testing.assert_allclose(out["errors"][0, 1:], expected, rtol=1e-6)
    assert out["errors"][1, 2] < 1e-6 and out["max"] == pytest.approx(expected, rel=1e-6)
    agree = consensus(starts[:3], scores[:3], keep=5)
    assert agree["max"] < 1e-6 and agree["errors"].shape == (3, 3)


def _overlap_full_ramp(x, ref, d):
    """The overlap |<shift(x, d), ref>| with the phase ramp formed over the whole array (the reference
    for the separable contraction of analysis._overlap_at)."""
    fx, fr = np.fft.fftn(x), np.fft.fftn(ref)
    ramp = sum(np.fft.fftfreq(n).reshape([-1 if i == ax else 1 for i in range(x.ndim)]) * di
               for ax, (n, di) in enumerate(zip(x.shape, d)))
    return abs(np.vdot(fx * np.exp(-2j * np.pi * ramp), fr))


@pytest.mark.parametrize("shape", [(12, 10), (8, 10, 6)])
def test_separable_overlap_equals_the_full_ramp(shape):
    rng = np.random.default_rng(1)
    x = rng.standard_normal(shape) + 1j * rng.standard_normal(shape)
    ref = rng.standard_normal(shape) + 1j * rng.standard_normal(shape)
    cross = np.conj(np.fft.fftn(x)) * np.fft.fftn(ref)
    freqs = [np.fft.fftfreq(n) for n in shape]
    for d in ([0.0] * len(shape), [1.3, -2.7, 0.4][: len(shape)], [-4.5, 0.25, 3.0][: len(shape)]):
        assert analysis._overlap_at(cross, freqs, d) == pytest.approx(_overlap_full_ramp(x, ref, d), rel=1e-12)


def test_sub_pixel_shift_found_in_3d():
    """A smooth 3D object moved by a known sub-pixel translation: the alignment finds it to 1e-4 px."""
    g = np.meshgrid(*[np.arange(24) - 12.0] * 3, indexing="ij")
    obj = np.exp(-sum(gi**2 for gi in g) / (2 * 3.0**2)) * np.exp(0.1j * g[0])
    moved = analysis.shift(obj, (1.3, -2.6, 0.45))
    aligned, info = analysis.align(moved, obj, allow_twin=False)
    np.testing.assert_allclose(info["shift"], (-1.3, 2.6, -0.45), atol=1e-4)
    assert np.linalg.norm(aligned - obj) / np.linalg.norm(obj) < 1e-6


@pytest.mark.parametrize("shape,delta", [((64, 48), (3.3, -7.72)), ((20, 24, 16), (1.3, -2.6, 0.45))])
def test_newtons_peak_is_the_nelder_mead_peak(shape, delta):
    """The sub-pixel search's Newton steps (analytic gradient and Hessian of the cross-correlation) end where
    Nelder-Mead ends, at least as high; from a start beyond the peak's concave neighbourhood they decline, and
    the alignment then takes Nelder-Mead."""
    rng = np.random.default_rng(1)
    g = np.meshgrid(*[np.arange(n) - n / 2 for n in shape], indexing="ij")
    obj = np.exp(-sum(gi**2 for gi in g) / 18.0) * (1 + 0.3 * rng.random(shape)) + 0j
    cross = np.conj(np.fft.fftn(analysis.shift(obj, delta))) * np.fft.fftn(obj)
    freqs = [np.fft.fftfreq(n) for n in shape]
    start = -np.round(delta)
    newton = analysis._newton_peak(cross, freqs, start, 1e-6)
    simplex = analysis._nelder_mead_peak(cross, freqs, start, 1e-6)
    np.testing.assert_allclose(newton, -np.array(delta), atol=1e-3)
    np.testing.assert_allclose(newton, simplex, atol=1e-5)
    assert analysis._overlap_at(cross, freqs, newton) >= analysis._overlap_at(cross, freqs, simplex) * (1 - 1e-12)
    assert analysis._newton_peak(cross, freqs, start + 5.0, 1e-6) is None  # far off: left to Nelder-Mead
    np.testing.assert_allclose(analysis._best_shift(np.fft.fftn(analysis.shift(obj, delta)), np.fft.fftn(obj)),
                               -np.array(delta), atol=1e-4)
