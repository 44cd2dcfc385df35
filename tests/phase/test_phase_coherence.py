"""Partial coherence (qora.phase.coherence): the blurred modulus constraint and the Richardson-Lucy kernel
update against float64 references, and the psf recipe stage end to end."""

import numpy as np
import pytest

from qora.io.errors import InputError
from qora.phase import objects, reconstruct
from qora.phase.coherence import (Coherence, FWHM_PER_SIGMA, blur, kernel_profile, psf_modulus_step,
                                  richardson_lucy_step, window_radius)
from qora.phase.detector import Detector, record
from qora.phase.physics import modulus_project, native_amplitude
from qora.phase.recipe import Recipe, RecipeError


def _spectrum(n=32, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n, n)) + 1j * rng.standard_normal((n, n))) * 3.0


def _delta(shape):
    k = np.zeros(shape)
    k[(0,) * len(shape)] = 1.0
    return k


def test_kernel_profiles_are_normalised_windowed_and_have_their_width():
    g = kernel_profile((64, 64), model="gaussian", sigma=1.5, xp=np, dtype=np.float64)
    assert g.sum() == pytest.approx(1.0, abs=1e-12) and g.min() >= 0
    r = np.hypot(*np.meshgrid(np.fft.fftfreq(64) * 64, np.fft.fftfreq(64) * 64, indexing="ij"))
    assert np.all(g[r > window_radius(1.5)] == 0)
    # second moment of a Gaussian of std s per axis: s^2 (the window keeps 3 FWHM, > 7 std)
    assert np.sum(g * r**2) / 2 == pytest.approx(1.5**2, rel=1e-3)
    v = kernel_profile((64, 64), model="voigt", sigma=1.5, eta=0.5, xp=np, dtype=np.float64)
    half = 0.5 * FWHM_PER_SIGMA * 1.5
    gauss = np.where(r <= window_radius(1.5), np.exp(-r**2 / (2 * 1.5**2)), 0)
    lorentz = np.where(r <= window_radius(1.5), 1 / (1 + (r / half) ** 2), 0)
    np.testing.assert_allclose(v, 0.5 * gauss / gauss.sum() + 0.5 * lorentz / lorentz.sum(), atol=1e-15)
    assert v.sum() == pytest.approx(1.0, abs=1e-12)


def test_blur_is_the_direct_periodic_convolution():
    rng = np.random.default_rng(2)
    intensity = rng.random((12, 10))
    kernel = kernel_profile((12, 10), model="voigt", sigma=0.8, eta=0.3, xp=np, dtype=np.float64)
    direct = np.zeros_like(intensity)
    for t in zip(*np.nonzero(kernel)):
        direct += kernel[t] * np.roll(intensity, t, axis=(0, 1))
    np.testing.assert_allclose(blur(intensity, np.fft.rfftn(kernel), intensity.shape), direct, atol=1e-13)


def test_delta_kernel_gives_the_modulus_projection():
    """With K = delta the constrained step is today's modulus projection (float64, to rounding)."""
    n = 32
    y = _spectrum(n)
    amp = np.abs(_spectrum(n, seed=1))
    amp[:3, :5] = -1  # masked pixels keep F x
    w, coherent, err = psf_modulus_step(y, amp, np.fft.rfftn(_delta((n, n))), (n, n), np)
    # modulus_project works on the unscaled transform; unitary: scale 1, same thing
    expected, expected_err = modulus_project(y, amp, 1.0)
    np.testing.assert_allclose(w, expected, rtol=1e-12, atol=1e-12)
    assert float(err) == pytest.approx(expected_err, rel=1e-12)
    np.testing.assert_allclose(coherent, np.abs(y) ** 2, rtol=1e-14)


def test_blurred_constraint_fits_the_blurred_model():
    """After the step, the blurred model of a spectrum is not yet the data, but the step is exact for the
    model it states: w = y sqrt(I / (K * |y|^2)) on measured pixels (float64)."""
    n = 24
    y = _spectrum(n)
    amp = np.abs(_spectrum(n, seed=3))
    kernel = kernel_profile((n, n), sigma=1.0, xp=np, dtype=np.float64)
    w, _, _ = psf_modulus_step(y, amp, np.fft.rfftn(kernel), (n, n), np)
    model = np.real(np.fft.ifftn(np.fft.fftn(np.abs(y) ** 2) * np.fft.fftn(kernel)))
    np.testing.assert_allclose(w, y * amp / np.sqrt(model), rtol=1e-10)


def test_richardson_lucy_recovers_a_known_blur():
    """Counts made by blurring a speckled coherent intensity with a Gaussian of std 0.9 px: RL steps from a
    wider Gaussian (std 1.6) recover the kernel; pixels in a masked band, where the data are wrong,
    are ignored."""
    n = 64
    truth_obj = objects.triangle(n).astype(np.complex128)
    coherent = np.abs(np.fft.fftn(truth_obj, norm="ortho")) ** 2
    true_kernel = kernel_profile((n, n), sigma=0.9, radius=12, xp=np, dtype=np.float64)
    counts = blur(coherent, np.fft.rfftn(true_kernel), (n, n))
    used = np.ones((n, n), bool)
    used[5:8, :] = False
    counts[~used] = 1e6  # garbage where not measured: must not matter
    kernel = kernel_profile((n, n), sigma=1.6, radius=12, xp=np, dtype=np.float64)
    start = np.abs(kernel - true_kernel).sum()
    for _ in range(300):
        kernel = richardson_lucy_step(kernel, coherent, counts, used, (n, n), np)
    assert kernel.sum() == pytest.approx(1.0, abs=1e-12) and kernel.min() >= 0
    assert np.abs(kernel - true_kernel).sum() < 0.1 * start
    r2 = np.add.outer((np.fft.fftfreq(n) * n) ** 2, (np.fft.fftfreq(n) * n) ** 2)
    assert np.sum(kernel * r2) / 2 == pytest.approx(0.81, rel=0.05)


def test_richardson_lucy_keeps_the_true_kernel():
    """The true kernel is a fixed point: the ratio is 1 on every used pixel."""
    n = 32
    coherent = np.abs(_spectrum(n)) ** 2
    kernel = kernel_profile((n, n), model="voigt", sigma=0.7, eta=0.4, xp=np, dtype=np.float64)
    counts = blur(coherent, np.fft.rfftn(kernel), (n, n))
    used = np.ones((n, n), bool)
    used[:4, :4] = False
    np.testing.assert_allclose(richardson_lucy_step(kernel, coherent, counts, used, (n, n), np), kernel, atol=1e-12)


def test_width_steps_recover_a_known_blur():
    """psf_fit=width: counts made by blurring a triangle's coherent intensity with a Gaussian of std 0.6 px (and
    Poisson noise); from 0.3 and from 1.0 px each refinement moves the width one 0.05 px step towards 0.6, and
    it stays there; the kernel is the profile of that width."""
    n = 64
    coherent = np.abs(np.fft.fftn(objects.triangle(n).astype(np.complex128), norm="ortho")) ** 2
    coherent *= 1e6 / coherent.sum()
    counts = blur(coherent, np.fft.rfftn(kernel_profile((n, n), sigma=0.6, xp=np, dtype=np.float64)), (n, n))
    counts = np.random.default_rng(3).poisson(np.maximum(counts, 0)).astype(float)

    class Engine:  # the attributes Coherence reads
        class backend:
            xp = np
        shape = (n, n)
        batch = 2
        amp = np.sqrt(counts)
    state = Coherence(Engine, sigmas=[0.3, 1.0], fit="width")
    path = []
    for _ in range(12):
        state.refine(coherent.astype(np.float32)[None].repeat(2, 0), np)
        path.append(list(state.sigmas))
    assert path[:3] == [[0.35, 0.95], [0.4, 0.9], [0.45, 0.85]]
    assert path[-1] == [0.6, 0.6] and path[-2] == [0.6, 0.6]
    np.testing.assert_allclose(state.kernels[0], kernel_profile((n, n), sigma=0.6, xp=np), atol=1e-7)
    with pytest.raises(InputError, match="psf fit"):
        Coherence(Engine, fit="lbfgs")


def _psf_case(n=64, sigma=0.7, photons=None, seed=0):
    obj = objects.triangle(n)
    counts, mask = record(obj, Detector(photons=photons, beamstop=0, gap=0, coherence_sigma=sigma), seed=seed)
    return obj, counts, mask


def test_psf_recipe_removes_the_partial_coherence_floor():
    """Known support, noise-free pattern blurred by a 0.7-px Gaussian: the coherent model stalls on an object
    error the blur sets; with the psf stage the object is recovered several times better and the kernel
    found has the blur's width."""
    from qora.bench.phase_success import aligned_error

    obj, counts, mask = _psf_case()
    support = objects.support_of(obj)
    coherent = reconstruct(counts, support=support, recipe="HIO**150 ER**100", backend="cpu", starts=1)
    psf = reconstruct(counts, support=support, recipe="HIO(psf=gaussian)**150 ER(psf=gaussian)**100",
                      backend="cpu", starts=1)
    e_coh, e_psf = aligned_error(coherent.object, obj), aligned_error(psf.object, obj)
    assert e_psf < 0.3 * e_coh, (e_coh, e_psf)
    k = psf.psf
    assert k.shape == counts.shape and k.sum() == pytest.approx(1.0, abs=1e-5)
    c = np.array(k.shape) // 2
    r2 = np.add.outer((np.arange(64) - c[0]) ** 2, (np.arange(64) - c[1]) ** 2)
    assert np.sqrt(np.sum(k * r2) / 2) == pytest.approx(0.7, rel=0.25)
    assert coherent.psf is None and "psf=gaussian" in psf.recipe


def test_psf_delta_like_stage_on_coherent_data_matches_the_plain_stage():
    """psf_every=0 with a very narrow Gaussian (a delta on the pixel grid to float32) follows the plain engine."""
    obj = objects.triangle(32)
    counts, mask = record(obj, Detector(photons=None, beamstop=1, gap=1))
    support = objects.support_of(obj)
    plain = reconstruct(counts, mask=mask, support=support, recipe="HIO**30 ER**10", backend="cpu")
    psf = reconstruct(counts, mask=mask, support=support, backend="cpu",
                      recipe="HIO(psf=gaussian, psf_sigma=0.05, psf_every=0)**30 ER(psf=gaussian, psf_sigma=0.05, "
                             "psf_every=0)**10")
    np.testing.assert_allclose(psf.object, plain.object, atol=2e-4 * np.abs(plain.object).max())
    np.testing.assert_allclose(psf.errors, plain.errors, rtol=2e-3, atol=1e-5)  # float32 floor near 1e-6


def test_coherence_fits_only_measured_pixels():
    obj, counts, _ = _psf_case(n=32)

    class Engine:  # the attributes Coherence reads
        class backend:
            xp = np
        shape = counts.shape
        batch = 2
    Engine.amp = native_amplitude(counts, np.pad(np.ones((2, 32), bool), ((0, 30), (0, 0))))
    state = Coherence(Engine, sigma=0.7)
    assert state.kernels.shape == (2, 32, 32) and not state.used[np.fft.ifftshift(
        np.pad(np.ones((2, 32), bool), ((0, 30), (0, 0))))].any()


def test_a_psf_run_is_scored_by_the_blurred_model():
    """A run ending on a psf stage reports the error and deviance of the model it fitted: its object's intensity
    blurred by its kernel (float64 reference here), as its last iteration's error does; a run whose last stage
    is coherent is scored unblurred."""
    obj, counts, _ = _psf_case(n=64, photons=1e7)
    support = objects.support_of(obj)
    psf = reconstruct(counts, support=support, recipe="HIO**100 ER(psf=gaussian)**60", backend="cpu", starts=1)
    a = np.sqrt(np.fft.ifftshift(counts))
    y = np.fft.fftn(np.fft.ifftshift(psf.object.astype(np.complex128)), norm="ortho")
    kernel = np.fft.ifftshift(psf.psf.astype(np.float64))
    model = np.maximum(blur(np.abs(y) ** 2, np.fft.rfftn(kernel), counts.shape), 0)
    expected = np.sqrt(np.sum((np.sqrt(model) - a) ** 2) / np.sum(a**2))
    unblurred = np.sqrt(np.sum((np.abs(y) - a) ** 2) / np.sum(a**2))
    assert psf.final_errors[0] == pytest.approx(expected, rel=1e-4)
    assert psf.final_errors[0] == pytest.approx(psf.errors[-1, 0], rel=0.05)  # one ER step apart
    assert unblurred > 1.5 * expected  # the blur it modelled is not charged to it
    obs = np.fft.ifftshift(counts)
    deviance = 2 * (model - obs + np.where(obs > 0, obs * np.log(np.where(obs > 0, obs, 1) / np.maximum(model, 1e-30)),
                                            0))
    assert psf.llk[0] == pytest.approx(deviance.mean(), rel=1e-3)
    coherent = reconstruct(counts, support=support, recipe="HIO**100 ER(psf=gaussian)**60 ER**5", backend="cpu",
                           starts=1)
    y = np.fft.fftn(np.fft.ifftshift(coherent.object.astype(np.complex128)), norm="ortho")
    assert coherent.final_errors[0] == pytest.approx(np.sqrt(np.sum((np.abs(y) - a) ** 2) / np.sum(a**2)), rel=1e-4)
    assert psf.blurred_model and not coherent.blurred_model and coherent.psf is not None


@pytest.mark.parametrize("text, message", [
    ("ER(psf=airy)**5", "psf must be"),
    ("ML(psf=gaussian)**5", "not to ML"),
    ("ER(psf=gaussian, psf_sigma=-0.5)**5", "psf_sigma"),  # 0 is allowed: fitted per start
    ("ER(psf=voigt, psf_eta=1.5)**5", "psf_eta"),
    ("ER(psf=gaussian, psf_every=-1)**5", "psf_every"),
    ("ER(psf=gaussian, psf_fit=lbfgs)**5", "psf_fit"),
    ("ER(masked=zero)**5", "masked must be"),
])
def test_bad_psf_options(text, message):
    with pytest.raises(RecipeError, match=message):
        Recipe.parse(text)


def test_psf_options_print_back():
    text = ("HIO(psf=voigt, psf_sigma=0.8, psf_eta=0.3, psf_every=10, masked=fill)**20 ER(psf=gaussian)**5 "
            "ER(psf=gaussian, psf_sigma=0, psf_fit=width)**4 ER**3")
    recipe = Recipe.parse(text)
    assert str(recipe) == text and Recipe.parse(str(recipe)) == recipe
    assert str(Recipe.parse("ER(psf_sigma=2)**3")) == "ER**3"  # psf options without psf do nothing


def test_kernel_profile_bad_input():
    with pytest.raises(InputError):
        kernel_profile((8, 8), model="box")
    with pytest.raises(InputError):
        kernel_profile((8, 8), sigma=-1)


def test_masked_fill_stage_restores_the_measured_amplitude():
    """A masked=fill stage fits interpolated values on the unmeasured pixels; later stages and the scores see
    the measured amplitude again (a run ending with a fill stage scores like any other)."""
    from qora.phase.solver import Solver

    obj = objects.triangle(32)
    counts, mask = record(obj, Detector(photons=None, beamstop=2, gap=1))
    solver = Solver(counts, mask=mask, backend="cpu")
    support = objects.support_of(obj)
    filled = solver.run(support=support, recipe="ER(masked=fill)**5")
    assert np.array_equal(solver._engine.amp, solver.amp)
    again = solver.run(support=support, recipe="ER**5")
    assert not np.allclose(filled.errors, again.errors)  # the fill stage fitted other values
    x = filled.object.astype(np.complex128)
    measured = np.fft.ifftshift(~mask)
    y = np.abs(np.fft.fftn(np.fft.ifftshift(x), norm="ortho"))
    a = np.sqrt(np.fft.ifftshift(counts))
    expected = np.sqrt(np.sum((y - a)[measured] ** 2) / np.sum(a[measured] ** 2))
    assert filled.final_errors[0] == pytest.approx(expected, rel=1e-4)


@pytest.mark.gpu
@pytest.mark.parametrize("variant", ["graph", "naive", "fused", "callback", "fused_fft"])
def test_psf_and_fill_stages_on_gpu_match_cpu(variant):
    """The psf stages (blurred constraint, Richardson-Lucy) and a masked=fill stage on the GPU engine's arrays
    against the CPU engine, from the same start, two starts batched on the GPU."""
    from qora.phase.solver import Solver

    obj, counts, _ = _psf_case(n=64)  # 64: the smallest size fused_fft is built for
    mask = np.zeros(counts.shape, bool)
    mask[31:34, 31:34] = True
    counts = np.where(mask, 0, counts)
    support = objects.support_of(obj)
    recipe = ("HIO(psf=gaussian, psf_every=3, masked=fill)**12 ER(psf=voigt, psf_every=2)**8 "
              "ER(psf=gaussian, psf_sigma=0.4, psf_every=2, psf_fit=width)**6 ER**5")
    runs = [Solver(counts, mask=mask, backend=b, variant=v, batch=2).run(support=support, recipe=recipe, starts=2,
                                                                         keep_all=True)
            for b, v in (("cpu", "auto"), ("cuda", variant))]
    np.testing.assert_allclose(runs[1].objects, runs[0].objects, atol=1e-4 * np.abs(runs[0].objects).max())
    np.testing.assert_allclose(runs[1].errors, runs[0].errors, rtol=1e-3, atol=1e-6)
    np.testing.assert_allclose(runs[1].psf, runs[0].psf, atol=1e-5)


def test_named_partial_coherence_recipe_and_the_cli(tmp_path):
    """The named recipe has psf on its ER stages; `qora phase run --recipe` takes psf options."""
    from click.testing import CliRunner

    from qora.cli import cli
    from qora.phase.files import write_pattern
    from qora.phase.recipe import named_recipe

    assert [s.psf for s in named_recipe("partial-coherence").stages] == [None, "gaussian", "gaussian"]
    obj, counts, _ = _psf_case(n=32)
    pattern, support, out = tmp_path / "p.cxi", tmp_path / "s.npy", tmp_path / "r.cxi"
    write_pattern(pattern, counts)
    np.save(support, objects.support_of(obj))
    res = CliRunner().invoke(cli, ["phase", "run", str(pattern), "--support", str(support), "--recipe",
                                   "HIO(psf=gaussian, psf_sigma=0.7)**20 ER(psf=gaussian, psf_sigma=0.7)**10",
                                   "--starts", "1", "--backend", "cpu", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "partial coherence: the kernel found" in res.output
    assert "Fourier error" in res.output and "(of its intensity blurred by the fitted psf)" in res.output
    bad = CliRunner().invoke(cli, ["phase", "run", str(pattern), "--recipe", "ER(psf=airy)**3", "--out",
                                   str(tmp_path / "x.cxi"), "--backend", "cpu"])
    assert bad.exit_code != 0 and "psf must be" in bad.output
