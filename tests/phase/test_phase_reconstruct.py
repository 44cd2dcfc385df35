"""Whole reconstructions judged against the truth (the seed's accuracy table, CPU rows)."""

import numpy as np
import pytest

from qora.phase import analysis, objects, reconstruct
from qora.phase.solver import Solver

KNOWN = "HIO**400 ER**100"


@pytest.mark.parametrize("n", [64, 256])
def test_known_support_2d_best_of_8(n):
    obj, intensity = objects.simulate("triangle", n)
    r = reconstruct(intensity, support=objects.support_of(obj), recipe=KNOWN, starts=8, backend="cpu", batch=8)
    assert r.fourier_error < 1e-6
    assert analysis.object_error(r.object, obj) < 1e-6
    assert r.errors.shape == (500, 8) and r.starts == 8


@pytest.mark.slow
def test_known_support_3d_cut_prism():
    obj, intensity = objects.simulate("cut_prism", 64)
    r = reconstruct(intensity, support=objects.support_of(obj), recipe=KNOWN, starts=8, backend="cpu", batch=4)
    assert analysis.object_error(r.object, obj) < 1e-5


def test_default_recipe_from_the_autocorrelation():
    obj, intensity = objects.simulate("triangle", 64)
    r = reconstruct(intensity, starts=4, backend="cpu")
    assert analysis.object_error(r.object, obj) < 1e-3
    aligned_support = r.support
    _, info = analysis.align(r.object, obj)
    if info["twin"]:
        aligned_support = analysis.twin(aligned_support.astype(complex)).real > 0.5
    aligned_support = np.roll(aligned_support, [int(round(s)) for s in info["shift"]], axis=(0, 1))
    np.testing.assert_array_equal(aligned_support, objects.support_of(obj))


def test_analytic_box_pattern():
    shape, side = (48, 50), (11, 12)
    intensity = objects.box_intensity(shape, side)
    truth = objects.box(shape, side)
    r = reconstruct(intensity, support=objects.support_of(truth), recipe=KNOWN, starts=2, backend="cpu")
    assert analysis.object_error(r.object, truth) < 1e-5


def test_batched_equals_looped():
    obj, intensity = objects.simulate("triangle", 32)
    sup = objects.support_of(obj)
    looped = reconstruct(intensity, support=sup, recipe="HIO**30 ER**10", starts=3, backend="cpu", batch=1,
                         keep_all=True)
    batched = reconstruct(intensity, support=sup, recipe="HIO**30 ER**10", starts=3, backend="cpu", batch=3,
                          keep_all=True)
    np.testing.assert_allclose(batched.objects, looped.objects, rtol=0, atol=1e-6)
    np.testing.assert_allclose(batched.errors, looped.errors, rtol=1e-5)


def test_masked_pixels_are_left_free():
    obj, intensity = objects.simulate("triangle", 64)
    mask = np.zeros(intensity.shape, bool)
    mask[30:34, 30:34] = True  # the beamstop over q = 0
    corrupted = intensity.copy()
    corrupted[mask] = 0.0
    r = reconstruct(corrupted, mask=mask, support=objects.support_of(obj), recipe=KNOWN, starts=4, backend="cpu")
    assert analysis.object_error(r.object, obj) < 1e-4


def test_free_llk_ranking():
    obj, intensity = objects.simulate("triangle", 32, photons=1e7, seed=1)
    r = reconstruct(intensity, support=objects.support_of(obj), recipe="HIO**100 ER**50", starts=3, backend="cpu",
                    rank="free_llk")
    assert r.rank == "free_llk" and np.all(np.isfinite(r.free_llk)) and r.best == int(np.argmin(r.free_llk))
    assert np.all(np.isfinite(r.llk))


def test_progress_and_early_stop():
    obj, intensity = objects.simulate("triangle", 32)
    seen = []

    def progress(stage, done, total, metrics):
        seen.append((stage, done, total, metrics["fourier_error"]))
        return done < 40

    r = reconstruct(intensity, support=objects.support_of(obj), recipe="HIO**100 ER**20", backend="cpu",
                    progress=progress, sync_every=20)
    assert r.stopped_early and [s[1] for s in seen] == [20, 40] and seen[0][2] == 120
    assert r.errors.shape[0] == 40


def test_same_seed_same_result_and_solver_reuse():
    obj, intensity = objects.simulate("triangle", 32)
    solver = Solver(intensity, backend="cpu")
    a = solver.run(support=objects.support_of(obj), recipe="HIO**20", starts=2, seed=5)
    b = solver.run(support=objects.support_of(obj), recipe="HIO**20", starts=2, seed=5)
    np.testing.assert_array_equal(a.object, b.object)
    assert a.recipe == "HIO**20" and a.seed == 5 and "numpy" in a.versions


@pytest.mark.parametrize("kwargs,match", [
    (dict(intensity=-np.ones((8, 8))), "negative"),
    (dict(intensity=np.full((8, 8), np.nan)), "non-finite"),
    (dict(intensity=np.ones(8)), "2D or 3D"),
    (dict(intensity=np.ones((8, 8)), mask=np.ones((8, 8), bool)), "hides every pixel"),
    (dict(intensity=np.ones((8, 8)), mask=np.ones((8, 9), bool)), "mask shape"),
    (dict(intensity=np.ones((8, 8)), support=np.zeros((8, 8), bool)), "support is empty"),
    (dict(intensity=np.ones((8, 8)), support=np.ones((8, 9), bool)), "support shape"),
    (dict(intensity=np.ones((8, 8)), recipe="HIO**"), "cannot parse"),
    (dict(intensity=np.ones((8, 8)), rank="best"), "rank"),
])
def test_bad_input_is_a_clear_error(kwargs, match):
    intensity = kwargs.pop("intensity")
    with pytest.raises(ValueError, match=match):
        reconstruct(intensity, backend="cpu", **kwargs)


def _deviance_reference(obj, intensity, pixels):
    """Poisson deviance per pixel in float64 from plain NumPy (the object centre-origin)."""
    calc = np.abs(np.fft.fftshift(np.fft.fftn(np.fft.ifftshift(obj.astype(np.complex128)), norm="ortho"))) ** 2
    c, o = np.maximum(calc[pixels], 1e-30), intensity[pixels].astype(np.float64)
    term = np.where(o > 0, o * np.log(np.where(o > 0, o, 1.0) / c), 0.0)
    return float(np.mean(2 * (c - o + term)))


def test_llk_and_free_llk_equal_a_float64_reference():
    obj, intensity = objects.simulate("triangle", 32, photons=1e7, seed=1)
    solver = Solver(intensity, backend="cpu", free_fraction=0.1, seed=2)
    r = solver.run(support=objects.support_of(obj), recipe="HIO**30 ER**10", starts=2, keep_all=True)
    for k in range(2):
        o = r.objects[k]
        assert r.llk[k] == pytest.approx(_deviance_reference(o, intensity, ~solver.free), rel=1e-4)
        assert r.free_llk[k] == pytest.approx(_deviance_reference(o, intensity, solver.free), rel=1e-4)


@pytest.mark.parametrize("shape", [(24, 20), (9, 10, 11)])
def test_starts_built_in_the_engine_equal_the_reference(shape):
    from qora.phase.cpu import CpuEngine
    from qora.phase.physics import native_amplitude
    from qora.phase.solver import fill_random_starts, random_start

    rng = np.random.default_rng(0)
    intensity = rng.random(shape)
    mask = np.zeros(shape, bool)
    mask[(0,) * len(shape)] = True
    amp = native_amplitude(intensity, mask)
    support = rng.random(shape) < 0.4
    engine = CpuEngine(amp, support, batch=3)
    fill_random_starts(engine, 5, [3, 4])
    np.testing.assert_allclose(engine.get_x()[:2], np.stack([random_start(amp, support, 5, s) for s in (3, 4)]),
                               rtol=0, atol=2e-6 * np.abs(engine.get_x()).max())
    assert not engine.get_x()[2].any()


def test_auto_batch_policy():
    from qora.backend import resolve
    from qora.phase.solver import auto_batch

    class FakeCuda:
        is_cuda = True

    assert auto_batch(FakeCuda(), "auto", (256, 256), 20) == 8
    assert auto_batch(FakeCuda(), "auto", (1024, 1024), 3) == 3
    assert auto_batch(FakeCuda(), "auto", (128, 128, 128), 8) == 1  # measured slower batched
    assert auto_batch(FakeCuda(), "mixed", (256, 256), 8) == 1
    assert auto_batch(resolve("cpu"), "auto", (256, 256), 8) == 1
    with pytest.raises(ValueError):
        reconstruct(np.ones((8, 8)), support=np.ones((8, 8), bool), recipe="ER**1", batch=0, backend="cpu")


def test_an_options_object_and_keywords_run_the_same_reconstruction():
    from qora.io.errors import InputError
    from qora.phase import PhaseOptions

    intensity = objects.box_intensity((32, 32), 8)
    options = PhaseOptions(recipe="HIO**20 ER**10", starts=2, seed=5)
    by_options = reconstruct(intensity, options, backend="cpu")
    by_keywords = reconstruct(intensity, recipe="HIO**20 ER**10", starts=2, seed=5, backend="cpu")
    np.testing.assert_array_equal(by_options.object, by_keywords.object)
    np.testing.assert_array_equal(by_options.final_errors, by_keywords.final_errors)
    assert options.to_dict()["recipe"] == "HIO**20 ER**10"
    with pytest.raises(InputError, match=r"unknown phase options \['start'\]"):
        reconstruct(intensity, start=2)
    with pytest.raises(InputError, match="rank must be one of"):
        PhaseOptions(rank="best")
    with pytest.raises(InputError, match="options must be a PhaseOptions"):
        reconstruct(intensity, np.ones((32, 32), bool))  # a support given where the options go
