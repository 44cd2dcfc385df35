"""Poisson maximum-likelihood refinement (qora.phase.ml) against finite differences and float64 NumPy."""

import numpy as np
import pytest

from qora.phase import objects, reconstruct
from qora.phase.detector import Detector, record
from qora.phase.ml import ml_step, poisson_gradient, poisson_nll
from qora.phase.physics import native_amplitude


def _case(n=32, photons=1e5, seed=0):
    obj = objects.triangle(n)
    counts, mask = record(obj, Detector(photons=photons, beamstop=1, gap=1), seed=seed)
    return obj, counts, mask, native_amplitude(counts, mask, dtype=np.float64)


def test_gradient_matches_finite_differences():
    """dL/d conj(x) = (dL/d Re x + i dL/d Im x) / 2, checked by central differences of L in float64."""
    obj, counts, mask, amp = _case()
    rng = np.random.default_rng(1)
    x = (obj * np.sqrt(1e5 / np.sum(np.abs(obj) ** 2)) + 0.3 * rng.standard_normal(obj.shape)).astype(np.complex128)
    g = poisson_gradient(x, amp)
    h = 1e-4  # L is ~1e5: a smaller step loses the difference to rounding
    for idx in [(16, 16), (12, 20), (3, 5)]:
        e = np.zeros_like(x)
        e[idx] = 1
        d_re = (poisson_nll(x + h * e, amp) - poisson_nll(x - h * e, amp)) / (2 * h)
        d_im = (poisson_nll(x + 1j * h * e, amp) - poisson_nll(x - 1j * h * e, amp)) / (2 * h)
        assert g[idx] == pytest.approx((d_re + 1j * d_im) / 2, rel=1e-5, abs=1e-5 * np.abs(g).max())


def test_step_is_the_written_formula():
    """ml_step against the formula written out in NumPy (float64), support applied."""
    obj, counts, mask, amp = _case()
    x = (obj + 0.05).astype(np.complex128) * 50
    support = np.abs(obj) > 0
    y = np.fft.fftn(x, norm="ortho")
    measured = amp >= 0
    ratio = np.where(measured, 1 - counts_native(counts, mask) / np.maximum(np.abs(y) ** 2, 1e-12), 0)
    expected = np.where(support, x - 0.5 * np.fft.ifftn(ratio * y, norm="ortho"), 0)
    np.testing.assert_allclose(ml_step(x, amp, support), expected, rtol=1e-10, atol=1e-10)


def counts_native(counts, mask):
    return np.fft.ifftshift(np.where(mask, 0, counts))


def test_ml_stage_lowers_the_poisson_likelihood():
    """From the object ER converged to on low counts, ML steps lower the Poisson negative log-likelihood
    (what they minimise) where more ER would not."""
    obj, counts, mask, amp = _case(photons=2e4)
    support = objects.support_of(obj)
    er = reconstruct(counts, mask=mask, support=support, recipe="HIO**200 ER**200", backend="cpu")
    more_er = reconstruct(counts, mask=mask, support=support, recipe="HIO**200 ER**250", backend="cpu")
    ml = reconstruct(counts, mask=mask, support=support, recipe="HIO**200 ER**200 ML**50", backend="cpu")
    nll = {k: poisson_nll(r.object.astype(np.complex128), amp) for k, r in
           (("er", er), ("more_er", more_er), ("ml", ml))}
    assert nll["ml"] < nll["er"] and nll["ml"] < nll["more_er"]
    assert ml.errors.shape == (450, 1) and "ML**50" in ml.recipe


@pytest.mark.gpu
@pytest.mark.parametrize("variant", ["graph", "naive"])
def test_ml_on_gpu_matches_cpu(variant):
    """The ML stage on the GPU engine's arrays against the CPU engine, from the same start."""
    from qora.phase.solver import Solver

    obj, counts, mask, amp = _case()
    support = objects.support_of(obj)
    runs = [Solver(counts, mask=mask, backend=b, variant=v).run(support=support, recipe="ER**20 ML**10", starts=1)
            for b, v in (("cpu", "auto"), ("cuda", variant))]
    np.testing.assert_allclose(runs[1].object, runs[0].object, atol=1e-4 * np.abs(runs[0].object).max())
    np.testing.assert_allclose(runs[1].errors[-10:], runs[0].errors[-10:], rtol=1e-3)
