"""The mean of a stage's last iterates (recipe option average=N, qora.phase.average) against a loop written out
in float64 with numpy.fft, and the recipe checks."""

import numpy as np
import pytest

from qora.phase import objects
from qora.phase.detector import Detector, record
from qora.phase.recipe import Recipe, RecipeError
from qora.phase.solver import Solver


def _reference(x0, counts, mask, support, iterations, average, beta=0.9):
    """HIO (a = 1, b = -beta) in float64, FFT layout of the amplitude, centre-origin object; the mean of the last
    ``average`` in-support iterates, each multiplied by exp(-i angle(<first, iterate>))."""
    amp = np.sqrt(np.fft.ifftshift(counts))
    measured = ~np.fft.ifftshift(mask)
    x = x0.astype(np.complex128)
    total, first, n = 0, None, 0
    for i in range(iterations):
        y = np.fft.fftn(x, norm="ortho")
        mag = np.abs(y)
        unit = np.where(mag > 0, y / np.where(mag > 0, mag, 1), 1)
        p = np.fft.ifftn(np.where(measured, amp * unit, y), norm="ortho")
        x = np.where(support, p, x - beta * p)
        if i >= iterations - average:
            inside = np.where(support, x, 0)
            if first is None:
                first = inside.copy()
            overlap = np.vdot(first, inside)
            total = total + inside * np.exp(-1j * np.angle(overlap))
            n += 1
    return total / n


def test_average_stage_is_the_phase_matched_mean_of_the_last_iterates():
    obj = objects.triangle(32)
    counts, mask = record(obj, Detector(photons=1e5, beamstop=1, gap=1), seed=3)
    support = objects.support_of(obj)
    solver = Solver(counts, mask=mask, backend="cpu")
    start = solver.run(support=support, recipe="ER**1", starts=1, keep_all=True).objects[0]
    engine = solver._engine_for(support)
    engine.x[0] = start
    engine.x_written()
    solver._support_log = []
    errors, _ = solver._run_recipe(engine, Recipe.parse("HIO(average=7)**12"), 0, 12, None, 50)
    got = engine.get_x()[0]
    expected = _reference(start, counts, mask, support, 12, 7)
    np.testing.assert_allclose(got, expected, atol=2e-4 * np.abs(expected).max())
    assert errors.shape == (12, 1) and np.all(np.isfinite(errors))
    # the first 5 iterations ran on the engine's fused loop, the last 7 as array code: one history
    assert not np.any(got[~support])


def test_average_options_print_back_and_are_checked():
    text = "HIO(average=30)**40 ER**5"
    assert str(Recipe.parse(text)) == text
    for bad, message in (("HIO(average=50)**40", "average must be"), ("ER(sw=20, average=5)**40", "without sw"),
                         ("ER(psf=gaussian, average=5)**40", "without sw"), ("ML(average=2)**4", "without sw")):
        with pytest.raises(RecipeError, match=message):
            Recipe.parse(bad)


@pytest.mark.gpu
@pytest.mark.parametrize("variant", ["graph", "naive", "fused"])
def test_average_stage_on_gpu_matches_cpu(variant):
    obj = objects.triangle(64)
    counts, mask = record(obj, Detector(photons=1e6, beamstop=2, gap=1), seed=0)
    support = objects.support_of(obj)
    recipe = "HIO**10 HIO(average=15)**20 ER**5"
    runs = [Solver(counts, mask=mask, backend=b, variant=v, batch=2).run(support=support, recipe=recipe, starts=2,
                                                                         keep_all=True)
            for b, v in (("cpu", "auto"), ("cuda", variant))]
    np.testing.assert_allclose(runs[1].objects, runs[0].objects, atol=1e-4 * np.abs(runs[0].objects).max())
    np.testing.assert_allclose(runs[1].errors, runs[0].errors, rtol=1e-3, atol=1e-6)
