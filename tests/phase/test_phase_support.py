"""Support determination (qora.phase.support) against independent float64 references, on CPU and GPU."""

import numpy as np
import pytest
import scipy.ndimage

from qora.phase import objects
from qora.phase.detector import Detector, record
from qora.phase.recipe import Recipe, RecipeError, named_recipe
from qora.phase.support import (autocorrelation_estimate, fill_masked, halve_supports, shrinkwrap_starts,
                                shrinkwrap_update, size_range_for)


def _blob(n=48, seed=3):
    rng = np.random.default_rng(seed)
    x = np.zeros((n, n), np.complex64)
    x[16:32, 14:34] = (rng.uniform(0.5, 1.0, (16, 20)) * np.exp(1j * rng.uniform(-1, 1, (16, 20))))
    x += 0.01 * rng.standard_normal((n, n))
    return x


def _reference_support(x, support, sigma, threshold, statistic):
    """float64, scipy.ndimage's periodic Gaussian (an independent blur), the statistic written out."""
    blurred = scipy.ndimage.gaussian_filter(np.abs(x).astype(np.float64), sigma, mode="wrap", truncate=8.0)
    inside = blurred[support]
    level = {"max": blurred.max(), "rms": np.sqrt(np.mean(inside**2)), "mean": np.mean(inside)}[statistic]
    return blurred > threshold * level, blurred


def _xp(backend):
    if backend == "cpu":
        return np
    from qora.backend import resolve

    return resolve("cuda").xp


@pytest.mark.parametrize("statistic,threshold", [("max", 0.3), ("rms", 0.5), ("mean", 0.6)])
def test_shrinkwrap_statistic_matches_reference(backend, statistic, threshold):
    xp = _xp(backend)
    x = _blob()
    support = np.zeros(x.shape, bool)
    support[10:38, 10:38] = True
    expected, blurred = _reference_support(x, support, 1.5, threshold, statistic)
    new, status = shrinkwrap_update(xp.asarray(x), xp.asarray(support), sigma=1.5, threshold=threshold,
                                    statistic=statistic)
    new = new.get() if hasattr(new, "get") else new
    assert status == "ok"
    # float32 blur against float64: pixels within rounding of the level may differ, no others
    level = threshold * {"max": blurred.max(), "rms": np.sqrt(np.mean(blurred[support] ** 2)),
                         "mean": np.mean(blurred[support])}[statistic]
    differ = new != expected
    assert np.all(np.abs(blurred[differ] - level) < 1e-4 * level)
    assert differ.sum() <= 2


def _loose():
    support = np.zeros((48, 48), bool)
    support[10:38, 10:38] = True
    return support


def test_rms_is_looser_than_max_for_the_same_fraction():
    x = _blob()
    support = _loose()
    by_max, _ = shrinkwrap_update(x, support, sigma=1, threshold=0.3, statistic="max")
    by_rms, _ = shrinkwrap_update(x, support, sigma=1, threshold=0.3, statistic="rms")
    assert by_rms.sum() > by_max.sum() and np.all(by_rms[by_max])


@pytest.mark.parametrize("bound", ["small", "large"])
def test_size_guard_retunes_to_the_bound(backend, bound):
    xp = _xp(backend)
    x = _blob()
    support = _loose()
    free, _ = shrinkwrap_update(x, support, sigma=1, threshold=0.3)
    count = int(free.sum())
    size_range = (count + 40, count + 400) if bound == "small" else (10, count - 40)
    new, status = shrinkwrap_update(xp.asarray(x), xp.asarray(support), sigma=1, threshold=0.3,
                                    size_range=size_range)
    new = new.get() if hasattr(new, "get") else new
    assert status == f"retuned_{bound}"
    target = size_range[0] if bound == "small" else size_range[1]
    assert target <= new.sum() <= target + 2  # ties in the blurred values may add a pixel
    # the retuned support is a level set of the same blurred modulus: it nests with the free one
    assert np.all(new[free]) if bound == "small" else np.all(free[new])


def test_collapse_is_refused_without_a_size_range():
    x = np.zeros((32, 32), np.complex64)
    x[16, 16] = 100.0
    x[4:28, 4:28] += 0.01
    support = np.ones(x.shape, bool)
    new, status = shrinkwrap_update(x, support, sigma=0.5, threshold=0.5, min_fraction=0.2)
    assert status == "kept" and new is support


def test_shrinkwrap_starts_writes_each_start_and_reports():
    x = np.stack([_blob(seed=1), np.zeros((48, 48), np.complex64)])
    x[1, 20, 20] = 1.0
    supports = np.stack([_loose(), np.ones((48, 48), bool)]).astype(np.uint8)
    statuses = shrinkwrap_starts(x, supports, sigma=1, threshold=0.3, min_fraction=0.2)
    assert statuses == ["ok", "kept"]
    assert 0 < supports[0].sum() < _loose().sum() and supports[1].all()


def test_fill_masked_is_exact_on_a_smooth_field():
    """Normalised convolution reproduces a constant exactly, and a smooth periodic field across a
    gap to second order (a symmetric kernel over symmetric measured neighbours)."""
    i = np.full((40, 40), 7.0)
    mask = np.zeros_like(i, bool)
    mask[18:21, :] = True
    np.testing.assert_allclose(fill_masked(np.where(mask, 0, i), mask), i, rtol=1e-12)
    wave = np.add.outer(10 + np.sin(2 * np.pi * np.arange(40.0) / 40), np.zeros(40))
    filled = fill_masked(np.where(mask, 0, wave), mask, sigma=1.0)
    # the kernel's second moment (sigma^2 = 1) times the field's curvature (|f''| <= 0.025) bounds the error
    np.testing.assert_allclose(filled[19], wave[19], atol=0.03)  # the gap's middle row: symmetric neighbours
    assert np.abs(filled[18:21] - wave[18:21]).max() > 0  # it is an estimate, not a copy


def test_autocorrelation_estimate_with_beamstop_and_gaps():
    """With the centre and gaps masked, zero-filling swells the support many times over; filling them
    brings it back to the autocorrelation's own size (2^d to 6x the object), and it still holds it."""
    obj = objects.triangle(128)
    counts, mask = record(obj, Detector(photons=1e8, beamstop=3, gap=2))
    volume = objects.support_of(obj).sum()
    support, threshold = autocorrelation_estimate(counts, mask=mask)
    zero_filled, _ = autocorrelation_estimate(counts, threshold=0.04)
    assert 3 <= support.sum() / volume <= 8 and zero_filled.sum() / volume > 12
    assert 0.04 <= threshold < 0.2
    # the autocorrelation support holds the object centred on its own centroid
    centred = np.roll(objects.support_of(obj), [64 - c for c in np.round(np.argwhere(obj != 0).mean(0)).astype(int)],
                      axis=(0, 1))
    assert support[centred].mean() > 0.99


def test_autocorrelation_estimate_cpu_gpu_parity(backend):
    xp = _xp(backend)
    obj = objects.prism(32)
    counts, mask = record(obj, Detector(photons=1e8, beamstop=2, gap=0))
    ref, ref_t = autocorrelation_estimate(counts, mask=mask)
    got, got_t = autocorrelation_estimate(xp.asarray(counts), mask=xp.asarray(mask), xp=xp)
    got = got.get() if hasattr(got, "get") else got
    assert got_t == pytest.approx(ref_t, rel=1e-9)
    assert (got != ref).sum() <= 2


def test_halve_supports_cuts_at_the_centroid(backend):
    xp = _xp(backend)
    supports = np.zeros((2, 20, 16), np.uint8)
    supports[0, 4:14, 3:9] = 1  # rows 4..13: centroid 8.5, rows >= 8.5 are 9..13
    supports[1, 2:5, :] = 1     # rows 2..4: centroid 3, rows 3 and 4 stay
    dev = xp.asarray(supports)
    halve_supports(dev, xp=xp)
    out = dev.get() if hasattr(dev, "get") else dev
    expected = supports.copy()
    expected[0, :9] = 0
    expected[1, :3] = 0
    np.testing.assert_array_equal(out, expected)


def test_size_range_for():
    assert size_range_for(4000, 2, low=0.25, high=1.5) == (250, 1500)
    assert size_range_for(8000, 3, low=0.5, high=2.0) == (500, 2000)


def test_recipe_support_options_round_trip_and_errors():
    text = "HIO(sw=20, threshold=0.3, stat=rms, smin=0.2, smax=1.5)**100 ER(detwin=1)**10"
    r = Recipe.parse(text)
    assert r.stages[0].stat == "rms" and r.stages[0].smax == 1.5 and r.stages[1].detwin == 1
    assert Recipe.parse(str(r)) == r
    assert named_recipe("pynx-rule").stages[0].stat == "rms"
    with pytest.raises(RecipeError, match="stat"):
        Recipe.parse("HIO(sw=20, stat=median)**10")
    with pytest.raises(RecipeError, match="threshold"):
        Recipe.parse("HIO(sw=20, threshold=1.5)**10")
    Recipe.parse("HIO(sw=20, threshold=1.5, stat=rms)**10")  # above 1 is fine relative to the rms
    with pytest.raises(RecipeError, match="smin"):
        Recipe.parse("HIO(sw=20, smin=2, smax=1)**10")
    with pytest.raises(RecipeError, match="detwin"):
        Recipe.parse("HIO(detwin=2)**10")
    grown = Recipe.parse("ER(grow=3)**600")
    assert grown.stages[0].grow == 3 and Recipe.parse(str(grown)) == grown and "grow=3" in str(grown)
    for bad in ("-1", "17", "1.5"):
        with pytest.raises(RecipeError, match="grow"):
            Recipe.parse(f"ER(grow={bad})**10")


def test_grow_supports_is_a_periodic_face_neighbour_dilation():
    """Against scipy's binary_dilation (its cross, iterated) on a support padded so that nothing wraps, and
    across the array's edge, where the engine layout's support wraps as the transforms do."""
    from scipy.ndimage import binary_dilation

    from qora.phase.support import grow_supports

    rng = np.random.default_rng(1)
    inner = np.zeros((2, 20, 22, 18), bool)
    inner[:, 6:14, 5:15, 6:12] = rng.random((2, 8, 10, 6)) < 0.3
    for steps in (1, 2, 3):
        got = inner.astype(np.float32)
        grow_supports(got, steps)
        want = np.stack([binary_dilation(s, iterations=steps) for s in inner])
        np.testing.assert_array_equal(got.astype(bool), want)
    edge = np.zeros((1, 8, 8), bool)
    edge[0, 0, 0] = True
    grow_supports(edge, 1)
    assert edge[0, 7, 0] and edge[0, 0, 7] and edge[0, 1, 0] and edge[0, 0, 1] and edge.sum() == 5


def test_a_grow_stage_dilates_the_support_it_starts_from():
    """ER without shrinkwrap keeps its support: after ER(grow=2) it is the given one dilated by two steps."""
    from scipy.ndimage import binary_dilation

    from qora.phase import reconstruct

    obj = objects.triangle(64)
    counts, mask = record(obj, Detector(photons=1e8, beamstop=2, gap=1))
    support = np.abs(obj) > 0
    result = reconstruct(counts, mask=mask, support=support, recipe="ER(grow=2)**5", backend="cpu")
    np.testing.assert_array_equal(result.support, binary_dilation(support, iterations=2))


def test_size_guard_in_a_run_stops_a_collapse_and_logs_it():
    """A threshold of 0.9 of the maximum would shrink the support to a few pixels; the guard keeps it
    at a quarter of the autocorrelation's volume estimate and says so in the result's support log."""
    from qora.phase import reconstruct
    from qora.phase.support import autocorrelation_estimate

    obj = objects.triangle(64)
    counts, mask = record(obj, Detector(photons=1e8, beamstop=2, gap=1))
    auto, _ = autocorrelation_estimate(counts, mask=mask)
    low, _ = size_range_for(int(auto.sum()), 2, low=0.25, high=2)
    guarded = reconstruct(counts, mask=mask, recipe="HIO(sw=10, threshold=0.9, sigma=1, smin=0.25, smax=2)**40",
                          backend="cpu")
    assert guarded.support.sum() >= low
    assert guarded.support_log and {e["status"] for e in guarded.support_log} == {"retuned_small"}
    assert [e["iteration"] for e in guarded.support_log] == [10, 20, 30, 40]
    # without a size range the older rule refuses each collapsing update: the loose start support stays
    free = reconstruct(counts, mask=mask, recipe="HIO(sw=10, threshold=0.9, sigma=1)**40", backend="cpu")
    assert {e["status"] for e in free.support_log} == {"kept"}
    np.testing.assert_array_equal(free.support, auto)


def test_phase_range_drops_pixels_far_from_the_mean_phase_whatever_the_global_phase(backend):
    xp = _xp(backend)
    n = 48
    y, x = np.mgrid[:n, :n]
    body = (abs(y - 24) < 9) & (abs(x - 20) < 9)
    ghost = (abs(y - 24) < 3) & (abs(x - 36) < 3)
    phase = np.where(ghost, 0.3 + 2.5, 0.3 + 0.2 * np.sin(y / 5.0))
    obj = np.where(body | ghost, np.exp(1j * phase), 0).astype(np.complex64)
    support = np.zeros((n, n), bool)
    support[10:40, 6:44] = True
    for global_phase in (0.0, 2.0, -2.9):
        rotated = (obj * np.exp(1j * global_phase)).astype(np.complex64)
        new, status = shrinkwrap_update(xp.asarray(rotated), xp.asarray(support), sigma=0.3, threshold=0.5,
                                        phase_range=1.0)
        new = new.get() if hasattr(new, "get") else np.asarray(new)
        # reference: the plain thresholded support minus the pixels more than 1 rad from the mean phase
        plain, _ = shrinkwrap_update(rotated, support, sigma=0.3, threshold=0.5)
        mean = np.angle(rotated[plain].sum())
        far = np.abs(np.angle(np.exp(1j * (np.angle(rotated) - mean)))) > 1.0
        assert status == "ok"
        np.testing.assert_array_equal(new, plain & ~far)
        assert plain[ghost].all() and new[body].mean() > 0.95 and not new[ghost].any()


def test_recipe_phase_range_option():
    r = Recipe.parse("HIO(sw=20, prange=0.8)**100 ER**10")
    assert r.stages[0].prange == 0.8 and Recipe.parse(str(r)) == r
    with pytest.raises(RecipeError, match="prange"):
        Recipe.parse("HIO(sw=20, prange=4)**10")


def test_grown_finish_appends_a_grown_er_that_keeps_the_last_stages_psf():
    """The default's 3D ending: the recipe as it was, then ER on the support dilated by GROWN_FINISH_VOXELS; after
    a psf stage the new one asks for the same kernel options, so the Solver keeps each start's fitted kernel."""
    from qora.phase.recipe import (GROWN_FINISH_ITERATIONS, GROWN_FINISH_VOXELS, default_recipe,
                                   partial_coherence_recipe, with_grown_finish)

    plain = with_grown_finish(default_recipe())
    last = plain.stages[-1]
    assert plain.stages[:-1] == default_recipe().stages
    assert (last.algorithm, last.iterations, last.grow, last.sw, last.psf) == (
        "ER", GROWN_FINISH_ITERATIONS, GROWN_FINISH_VOXELS, 0, None)
    sharpened = partial_coherence_recipe(0.4)
    grown = with_grown_finish(sharpened)
    before, after = sharpened.stages[-1], grown.stages[-1]
    assert after.psf == "gaussian" and after.grow == GROWN_FINISH_VOXELS
    assert (after.psf_sigma, after.psf_eta, after.psf_every) == (before.psf_sigma, before.psf_eta, before.psf_every)
    assert Recipe.parse(str(grown)) == grown


def test_the_default_grows_its_final_support_in_3d_and_not_in_2d():
    """Solver.run with the default: a 3D pattern's recipe ends with the grown ER stage, and its final support is a
    dilation by the growth's city-block ball (so opening it by that ball leaves it unchanged); a 2D pattern's recipe
    has no grown stage."""
    from scipy.ndimage import binary_opening

    from qora.phase.recipe import GROWN_FINISH_VOXELS
    from qora.phase.solver import Solver

    counts3, mask3 = record(objects.cut_prism(24), Detector(photons=1e8, beamstop=2, gap=1))
    result3 = Solver(counts3, mask=mask3, backend="cpu").run(seed=0)
    assert result3.recipe.endswith(f"ER(grow={GROWN_FINISH_VOXELS})**600")
    final = result3.support
    assert not (final[0].any() or final[-1].any() or final[:, 0].any() or final[:, :, -1].any())  # nothing wraps
    np.testing.assert_array_equal(binary_opening(final, iterations=GROWN_FINISH_VOXELS), final)
    counts2, mask2 = record(objects.triangle(32), Detector(photons=1e8, beamstop=2, gap=1))
    result2 = Solver(counts2, mask=mask2, backend="cpu").run(seed=0)
    assert "grow" not in result2.recipe and result2.recipe.endswith("ER**300")
