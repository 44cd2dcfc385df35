"""Raw frames to a pattern (qora.phase.raw_frames) against hand-written references."""

import numpy as np
import pytest

from qora.io.errors import InputError
from qora.phase.raw_frames import centre_of_mass, fast_size_below, object_pixel_size, preprocess


def _speckles(shape, centre, seed=0):
    """A smooth positive pattern peaked at ``centre`` (pixels)."""
    rng = np.random.default_rng(seed)
    g = np.meshgrid(*[np.arange(n) - c for n, c in zip(shape, centre)], indexing="ij")
    r2 = sum(x.astype(float) ** 2 for x in g)
    return 1e4 * np.exp(-r2 / 50.0) * (1 + 0.2 * rng.random(shape))


def test_dark_flat_saturation_and_frames():
    shape = (40, 44)
    truth = _speckles(shape, (20, 22))
    rng = np.random.default_rng(1)
    flat = rng.uniform(0.8, 1.2, shape)
    flat[3, 4] = 0.0  # a dead pixel
    dark = rng.uniform(90, 110, (5,) + shape)  # five dark frames
    frames = np.stack([truth * flat / flat[flat > 0].mean() + dark.mean(0)] * 3)
    frames[1, 20, 22] = 7e4  # saturated in one frame
    out = preprocess(frames, dark=dark, flat=flat, saturation=6e4, sum_frames=True, crop=False)
    expected = 3 * truth
    expected[3, 4] = expected[20, 22] = 0.0
    np.testing.assert_allclose(out.intensity, expected, rtol=1e-12, atol=1e-9)
    assert out.mask[3, 4] and out.mask[20, 22] and out.mask.sum() == 2
    assert out.steps["saturated"] == 1 and out.steps["dead"] == 1 and out.steps["frames"] == 3


def test_negative_after_dark_is_zero():
    out = preprocess(np.full((8, 8), 5.0), dark=np.full((8, 8), 7.0), crop=False)
    assert np.all(out.intensity == 0)


def test_binning_against_a_loop():
    rng = np.random.default_rng(2)
    raw = rng.uniform(0, 10, (9, 8))
    mask = np.zeros(raw.shape, bool)
    mask[0, 0] = True            # one of four in the first block: scaled
    mask[2:4, 2:4] = True        # a whole block: masked
    mask[4, 4:7] = True          # 2 of block (2,2)'s 4: kept and scaled; 1 of block (2,3)'s
    out = preprocess(raw, mask=mask, bin=2, crop=False)
    assert out.intensity.shape == (4, 4)
    for i in range(4):
        for j in range(4):
            block = raw[2 * i:2 * i + 2, 2 * j:2 * j + 2]
            bad = mask[2 * i:2 * i + 2, 2 * j:2 * j + 2]
            if bad.sum() * 2 > 4:
                assert out.mask[i, j] and out.intensity[i, j] == 0
            else:
                assert not out.mask[i, j]
                assert out.intensity[i, j] == pytest.approx(block[~bad].sum() * 4 / (~bad).sum())


def test_centre_and_crop_to_a_fast_size():
    shape = (70, 75)
    pattern = _speckles(shape, (30.2, 40.0), seed=3)
    out = preprocess(pattern, crop=True)
    c = centre_of_mass(pattern)
    assert out.steps["centre"] == pytest.approx(list(c))
    # widest window centred on round(c) that fits: rows 2*min(30, 39)+1 = 61 -> 60; cols 2*34+1 = 69 -> 64
    assert out.intensity.shape == (60, 64)
    start = out.steps["crop"]["start"]
    np.testing.assert_array_equal(out.intensity, pattern[start[0]:start[0] + 60, start[1]:start[1] + 64])
    # the centre of mass is at n//2 of the cropped array, to a pixel
    cc = centre_of_mass(out.intensity)
    assert abs(cc[0] - 30) <= 1 and abs(cc[1] - 32) <= 1


def test_fast_size_below():
    assert [fast_size_below(n) for n in (1, 7, 127, 256, 1000, 1001)] == [1, 6, 125, 256, 1000, 1000]


def test_object_pixel_size():
    # 8 keV (1.55 A), 5 m, 75 um pixels, 512 pixels: lambda z / (N p) = 20.2 nm
    d = object_pixel_size(wavelength=1.5498e-10, distance=5.0, pixel_size=75e-6, shape=(512, 512))
    assert d == pytest.approx((1.5498e-10 * 5 / (512 * 75e-6),) * 2)
    assert object_pixel_size(wavelength=1e-10, distance=1, pixel_size=(1e-4, 2e-4), shape=(100, 100), bin=2) == \
        pytest.approx((5e-9, 2.5e-9))
    with pytest.raises(InputError):
        object_pixel_size(wavelength=-1, distance=1, pixel_size=1e-4, shape=(8, 8))


def test_bad_inputs():
    with pytest.raises(InputError, match="dark"):
        preprocess(np.ones((8, 8)), dark=np.ones((7, 8)))
    with pytest.raises(InputError, match="sum_frames"):
        preprocess(np.ones((8, 8)), sum_frames=True)
    with pytest.raises(InputError, match="NaN"):
        preprocess(np.full((8, 8), np.nan))
    with pytest.raises(InputError, match="flat"):
        preprocess(np.ones((8, 8)), flat=np.zeros((8, 8)))


def test_cli_runs_a_raw_stack_with_dark_and_flat(tmp_path):
    """`qora phase run` on raw frames (off-centre in a larger detector, with a dark level and a flat field)
    gives the library's reconstruction of the preprocessed pattern, and the result file holds the object
    pixel size and the preprocessing steps."""
    from click.testing import CliRunner

    from qora.cli import cli
    from qora.phase import objects
    from qora.phase import read_result
    from qora.phase.physics import detector_intensity

    # a real object: its pattern is centrosymmetric, so the centre of mass is q = 0 exactly
    truth = np.abs(objects.triangle(48)).astype(np.complex64)
    pattern = detector_intensity(truth)
    pattern *= 1e8 / pattern.sum()
    rng = np.random.default_rng(0)
    flat = rng.uniform(0.9, 1.1, (55, 57))
    big = np.zeros((55, 57))
    big[3:51, 6:54] = pattern  # q = 0 at (27, 30)
    frames = np.stack([rng.poisson(big / 3 * flat) + 50.0 for _ in range(3)])
    for name, a in (("raw", frames), ("flat", flat), ("dark", np.full((55, 57), 50.0))):
        np.save(tmp_path / f"{name}.npy", a)
    out = CliRunner().invoke(cli, [
        "phase", "run", str(tmp_path / "raw.npy"), "--dark", str(tmp_path / "dark.npy"), "--flat",
        str(tmp_path / "flat.npy"), "--sum-frames", "--wavelength", "1.5e-10", "--distance", "2", "--pixel-size",
        "75e-6", "--starts", "2", "--consensus", "2", "--backend", "cpu", "--quiet", "--out", str(tmp_path / "r.cxi")])
    assert out.exit_code == 0, out.output
    assert "consensus of starts" in out.output
    # the widest fast window centred on (27, 30) in 55 x 57: 2*27+1 = 55 -> 54 rows, 2*26+1 = 53 -> 50 columns
    assert "cropped to (54, 50)" in out.output
    result = read_result(tmp_path / "r.cxi")
    assert result.pixel_size == pytest.approx((1.5e-10 * 2 / (54 * 75e-6), 1.5e-10 * 2 / (50 * 75e-6)))
    assert result.preprocessing["frames"] == 3 and result.preprocessing["crop"]["start"] == [0, 5]
    from qora.phase import reconstruct

    prepared = preprocess(frames, dark=np.full((55, 57), 50.0), flat=flat, sum_frames=True)
    direct = reconstruct(prepared.intensity, mask=prepared.mask, starts=2, backend="cpu")
    np.testing.assert_array_equal(result.object, direct.object)
    assert result.fourier_error < 0.1  # it fits the measured moduli
    assert result.objects is None  # --consensus kept the starts only for the check
    bad = CliRunner().invoke(cli, ["phase", "run", str(tmp_path / "raw.npy"), "--wavelength", "1e-10",
                                   "--out", str(tmp_path / "s.cxi")])
    assert bad.exit_code != 0 and "--pixel-size" in bad.output
