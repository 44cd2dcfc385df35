"""The noise-aware modulus constraint (qora.phase.band) against float64 references, and the band stage."""

import numpy as np
import pytest

from qora.phase import objects, reconstruct
from qora.phase.band import SIGMA_SQRT_POISSON, band_modulus_step
from qora.phase.detector import Detector, record
from qora.phase.physics import modulus_project, update_coefficients
from qora.phase.recipe import Recipe, RecipeError


def _case(n=32, seed=0):
    rng = np.random.default_rng(seed)
    y = (rng.standard_normal((2, n, n)) + 1j * rng.standard_normal((2, n, n))) * 3.0
    amp = np.sqrt(rng.poisson(9.0, (n, n))).astype(np.float64)  # sqrt counts, zeros included
    amp[:3, :5] = -1  # masked pixels keep F x
    y[0, 5, 5] = 0  # phase 0 where F x = 0
    return y, amp


def test_band_zero_is_the_modulus_projection():
    """k = 0 is today's modulus projection (float64, to rounding), misfit included."""
    y, amp = _case()
    w, err = band_modulus_step(y, amp, 0.0, np)
    for s in range(2):
        expected, expected_err = modulus_project(y[s], amp, 1.0)  # unitary transform: scale 1
        np.testing.assert_allclose(w[s], expected, rtol=1e-13, atol=1e-13)
        assert float(err[s]) == pytest.approx(expected_err, rel=1e-12)


@pytest.mark.parametrize("k", [0.5, 1.0, 3.0])
def test_band_against_a_pixel_loop(k):
    """Each pixel by hand: kept inside [max(0, a - k/2), a + k/2], the nearest edge outside, phase kept."""
    y, amp = _case(n=16, seed=3)
    w, err = band_modulus_step(y, amp, k, np)
    half = k * SIGMA_SQRT_POISSON
    moved = kept = 0
    for s in range(2):
        misfit = 0.0
        for i in range(16):
            for j in range(16):
                v, a = complex(y[s, i, j]), float(amp[i, j])
                if a < 0:
                    assert w[s, i, j] == v
                    continue
                m = abs(v)
                misfit += (m - a) ** 2
                lo, hi = max(0.0, a - half), a + half
                if lo <= m <= hi:
                    assert w[s, i, j] == pytest.approx(v, rel=1e-12, abs=1e-12)
                    kept += 1
                    continue
                edge = lo if m < lo else hi
                phase = v / m if m > 0 else 1.0
                assert w[s, i, j] == pytest.approx(edge * phase, rel=1e-12, abs=1e-12)
                moved += 1
        assert float(err[s]) == pytest.approx(misfit, rel=1e-12)
    assert moved and kept  # the case exercises both branches


def test_zero_counts_get_the_band_from_zero():
    """A pixel with 0 counts allows a model amplitude up to k/2 (the decision in docs/phase.md)."""
    y = np.array([[0.3 + 0.0j, 0.3j, 0.8 + 0.0j, 0.0j]])
    amp = np.zeros((1, 4))
    w, _ = band_modulus_step(y, amp, 1.0, np)
    np.testing.assert_allclose(w, [[0.3, 0.3j, 0.5, 0.0]], atol=1e-15)


def test_narrow_band_stage_follows_the_plain_stage():
    """A band far below the float32 rounding of the amplitudes follows the engine's own projection."""
    obj = objects.triangle(32)
    counts, mask = record(obj, Detector(photons=None, beamstop=1, gap=1))
    support = objects.support_of(obj)
    plain = reconstruct(counts, mask=mask, support=support, recipe="HIO**30 ER**10", backend="cpu")
    band = reconstruct(counts, mask=mask, support=support, recipe="HIO(band=1e-9)**30 ER(band=1e-9)**10",
                       backend="cpu")
    np.testing.assert_allclose(band.object, plain.object, atol=2e-4 * np.abs(plain.object).max())
    np.testing.assert_allclose(band.errors, plain.errors, rtol=2e-3, atol=1e-5)


def test_band_keeps_the_truth_where_the_exact_projection_moves_it():
    """From the true object on the true support, Poisson counts (~100 per pixel): a wide band leaves the
    truth a fixed point of ER; the exact projection (band 0) moves it to a fixed point of the noise."""
    from qora.phase.band import band_iterate
    from qora.phase.cpu import CpuEngine

    n = 32
    support = np.fft.ifftshift(objects.support_of(objects.triangle(n)))
    truth = np.where(support, 10.0, 0).astype(np.complex64)
    rng = np.random.default_rng(1)
    counts = rng.poisson(np.abs(np.fft.fftn(truth, norm="ortho")) ** 2)
    amp = np.sqrt(counts).astype(np.float32)  # FFT layout already

    def er_from_truth(k):
        engine = CpuEngine(amp, support)
        engine.x[...] = truth
        engine.x_written()
        band_iterate(engine, k, 20, *update_coefficients("ER"))
        return np.abs(engine.get_x()[0] - truth).max() / np.abs(truth).max()

    assert er_from_truth(12.0) < 1e-5  # 12 sigma: every pixel's noise lies inside
    assert er_from_truth(0.0) > 1e-2


@pytest.mark.parametrize("text, message", [("ER(band=-1)**5", "band must be"), ("ER(band=nan)**5", "band must be"),
                                           ("ML(band=1)**5", "not to ML"),
                                           ("ER(band=1, psf=gaussian)**5", "band and psf")])
def test_bad_band_options(text, message):
    with pytest.raises(RecipeError, match=message):
        Recipe.parse(text)


def test_band_option_prints_back():
    r = Recipe.parse("HIO(band=1.5)**10 ER**5")
    assert str(r) == "HIO(band=1.5)**10 ER**5" and Recipe.parse(str(r)) == r


@pytest.mark.gpu
@pytest.mark.parametrize("variant", ["graph", "naive", "fused", "callback", "fused_fft"])
def test_band_stages_on_gpu_match_cpu(variant):
    """Band stages on the GPU engine's arrays against the CPU engine, two starts batched, with a beamstop."""
    from qora.phase.solver import Solver

    obj = objects.triangle(64)  # 64: the smallest size fused_fft is built for
    counts, mask = record(obj, Detector(photons=1e6, beamstop=2, gap=0), seed=2)
    support = objects.support_of(obj)
    recipe = "HIO(band=1)**12 ER(band=2, masked=fill)**8 ER**5"
    runs = [Solver(counts, mask=mask, backend=b, variant=v, batch=2).run(support=support, recipe=recipe, starts=2,
                                                                         keep_all=True)
            for b, v in (("cpu", "auto"), ("cuda", variant))]
    np.testing.assert_allclose(runs[1].objects, runs[0].objects, atol=1e-4 * np.abs(runs[0].objects).max())
    np.testing.assert_allclose(runs[1].errors, runs[0].errors, rtol=1e-3, atol=1e-6)


def test_band_stage_from_the_cli(tmp_path):
    """`qora phase run --recipe` takes the band option and stores it in the recipe it ran."""
    from click.testing import CliRunner

    from qora.cli import cli
    from qora.phase import read_result, write_pattern

    obj = objects.triangle(32)
    counts, mask = record(obj, Detector(photons=1e6, beamstop=1, gap=0), seed=0)
    data = tmp_path / "pattern.cxi"
    write_pattern(data, counts, mask=mask)
    out = tmp_path / "result.cxi"
    run = CliRunner().invoke(cli, ["phase", "run", str(data), "--recipe", "HIO(band=1)**20 ER(band=1)**10",
                                   "--starts", "1", "--backend", "cpu", "--out", str(out)])
    assert run.exit_code == 0, run.output
    assert "band=1" in read_result(out).recipe
