"""Calibration of 4D-STEM data (docs/ssb.md, "Detector calibration", "Descan", "Anisotropic scan
steps"): the detector's scale from a soft-edged disk or from a file, the descan fitted and taken out
before G, and a scan whose steps differ along its rows and columns."""

import math
from pathlib import Path

import numpy as np
import pytest

from qora.io.errors import InputError
from qora.ssb import Aberrations, Session, amorphous_slices, simulate
from qora.ssb.descan import correct_descan, disk_centers, fit_descan
from qora.ssb.detector import fit_detector, fit_detector_from_mean, scan_frequencies, scan_steps

FIXTURE = Path(__file__).parent / "fixtures" / "abtem_weak_phase.npz"


# -- the detector's scale ------------------------------------------------------------------------

def _disk(radius, center, shape=(64, 64), *, profile):
    """A pattern of a disk of ``radius`` px about ``center``: ``profile`` "amplitude ramp" (abTEM's
    aperture: amplitude clip((a - r) / 1 px + 1/2, 0, 1), intensity its square, sampled at pixel
    centres) or "blurred" (a hard disk averaged over 16 x 16 sub-pixels and blurred by a Gaussian
    point spread of 0.8 px: what a counting detector records)."""
    if profile == "amplitude ramp":
        r = np.hypot(*(np.indices(shape) - np.asarray(center)[:, None, None]))
        return np.clip(radius - r + 0.5, 0, 1) ** 2
    n = 16
    fine = (np.arange(shape[0] * n) + 0.5) / n - 0.5
    yy, xx = np.meshgrid(fine - center[0], fine - center[1], indexing="ij")
    hard = (np.hypot(yy, xx) <= radius).reshape(shape[0], n, shape[1], n).mean((1, 3))
    from scipy.ndimage import gaussian_filter

    return gaussian_filter(hard, 0.8, mode="constant")


@pytest.mark.parametrize("center", [(32.0, 32.0), (31.3, 33.6)])
@pytest.mark.parametrize("radius", [7.5, 12.2])
def test_edge_models(radius, center):
    """Each edge reading is right for its edge and wrong for the other by the amount docs/ssb.md gives:
    intensity for a blur that keeps the counts, amplitude for abTEM's soft aperture (whose intensity
    disk is dk / 6 alpha small)."""
    blurred = fit_detector_from_mean(_disk(radius, center, profile="blurred"), 20.0)
    assert blurred.radius == pytest.approx(radius, rel=2e-3)
    assert blurred.center == pytest.approx(center, abs=0.01)
    ramp = _disk(radius, center, profile="amplitude ramp")
    by_intensity = fit_detector_from_mean(ramp, 20.0)
    by_amplitude = fit_detector_from_mean(ramp, 20.0, edge="amplitude")
    assert by_amplitude.radius == pytest.approx(radius, rel=3e-3)
    # dk / 6 alpha small, to the pixel grid's sampling of a small disk
    assert by_intensity.radius / radius - 1 == pytest.approx(-1 / (6 * radius), abs=3.5e-3)
    assert by_intensity.radius / radius - 1 < -0.01
    assert by_amplitude.mrad_per_pixel == pytest.approx(20.0 / by_amplitude.radius)


def test_abtem_disk_with_the_amplitude_edge():
    """abTEM's own detector sampling: the intensity reading is 1.5% small, the amplitude reading
    within 0.3% of it."""
    with np.load(FIXTURE) as f:
        data, truth = f["data"].astype(np.float64), float(f["detector_mrad_per_pixel"])
    assert fit_detector(data, 20.0).mrad_per_pixel / truth - 1 > 0.012
    assert fit_detector(data, 20.0, edge="amplitude").mrad_per_pixel == pytest.approx(truth, rel=3e-3)


def test_calibrated_scale_and_bad_edge():
    pattern = _disk(10.0, (32, 32), profile="blurred")
    fit = fit_detector_from_mean(pattern, 20.0, mrad_per_pixel=1.7)
    assert fit.mrad_per_pixel == 1.7 and fit.radius == pytest.approx(10.0, rel=2e-3)  # the disk still measured
    with pytest.raises(InputError, match="edge must be one of intensity, amplitude"):
        fit_detector_from_mean(pattern, 20.0, edge="soft")
    with pytest.raises(InputError, match="mrad_per_pixel"):
        fit_detector_from_mean(pattern, 20.0, mrad_per_pixel=-1.0)


# -- descan ---------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def film():
    sim = simulate(amorphous_slices((64, 64), 0.2, seed=1), pixel=0.2, stride=2, window=48, alpha_mrad=20.0,
                   aberrations=Aberrations(C10=80.0))
    return sim


def _fourier_shift(data, shifts):
    """Patterns moved by ``shifts`` (scan_row, scan_col, 2) px: the truth's descan, applied here."""
    ky = np.fft.fftfreq(data.shape[2])[:, None]
    kx = np.fft.fftfreq(data.shape[3])[None, :]
    ramp = np.exp(-2j * np.pi * (shifts[..., 0, None, None] * ky + shifts[..., 1, None, None] * kx))
    return np.fft.ifft2(np.fft.fft2(data, axes=(2, 3)) * ramp, axes=(2, 3)).real


@pytest.mark.parametrize("model", ["plane", "parabola"])
def test_descan_ramp_is_found_and_taken_out(film, model):
    """A known descan of up to 1.5 px (a plane; with the parabola also curved) on simulated data:
    fitted to < 0.05 px at every position, the corrected data's own descan < 0.05 px, and the image
    of the corrected data that of the undisturbed data (the disturbed one is noise)."""
    d = film.data
    sy, sx = d.shape[:2]
    y, x = np.meshgrid(np.linspace(-1, 1, sy), np.linspace(-1, 1, sx), indexing="ij")
    true = np.stack([0.8 * y - 0.5 * x + 0.3, 0.4 * y + 1.1 * x], -1)
    if model == "parabola":
        true = true + np.stack([0.4 * x * x - 0.3 * x * y, 0.5 * y * y], -1)
    drifted = _fourier_shift(d, true)
    descan = fit_descan(drifted, model=model)
    assert np.abs(descan.shifts() - (true - true.mean((0, 1)))).max() < 0.01  # the brief: < 0.05
    assert descan.span > 1.0
    corrected = correct_descan(drifted, descan, in_memory=False)
    assert not isinstance(corrected, np.ndarray)  # lazy: shifted as it is read
    np.testing.assert_allclose(correct_descan(drifted, descan, in_memory=True), np.asarray(corrected), atol=1e-6)
    assert fit_descan(corrected, model=model).span < 0.02  # measured again: taken out
    kw = dict(kv=300.0, alpha_mrad=20.0, scan_step=film.scan_step)
    ab = Aberrations(C10=80.0)
    ref = Session(d, **kw).image(ab)

    def r(data):
        return np.corrcoef(Session(data, **kw).image(ab).ravel(), ref.ravel())[0, 1]

    assert r(drifted) < 0.3 and r(corrected) > 0.9
    if model == "parabola":  # a plane cannot take out a curved descan
        assert fit_descan(drifted, model="plane").residual > 5 * descan.residual


def test_descan_refusals(film):
    with pytest.raises(InputError, match="descan model must be one of plane, parabola"):
        fit_descan(film.data, model="cubic")
    descan = fit_descan(film.data)
    assert descan.span < 0.05  # the simulator has no descan: nothing found
    with pytest.raises(InputError, match="fitted on a"):
        correct_descan(film.data[:4], descan)
    assert disk_centers(film.data[:2, :2]).shape == (2, 2, 2)


# -- anisotropic scan steps -----------------------------------------------------------------------

def test_scan_steps_and_frequencies():
    assert scan_steps(0.4) == (0.4, 0.4) and scan_steps((0.4, 0.2)) == (0.4, 0.2)
    with pytest.raises(InputError, match="scan_step"):
        scan_steps((0.4, -0.2))
    with pytest.raises(InputError, match="one number or"):
        scan_steps((0.1, 0.2, 0.3))
    qy, qx = scan_frequencies((4, 6), (0.5, 0.25), math.pi / 2, half=False)
    # the scan turned by 90 degrees: the detector's y is the scan's x, its x minus the scan's y
    np.testing.assert_allclose(qy, np.fft.fftfreq(6, 0.25)[None, :] * np.ones((4, 1)), atol=1e-12)
    np.testing.assert_allclose(qx, -np.fft.fftfreq(4, 0.5)[:, None] * np.ones((1, 6)), atol=1e-12)


@pytest.fixture(scope="module")
def fine_scan():
    """A scan of 0.2 A steps (stride 1) over a film with C10 -90 A, C12 25 A at 30 degrees."""
    ab = Aberrations(C10=-90.0, C12=(25.0, math.radians(30.0)))
    return simulate(amorphous_slices((48, 48), 0.2, seed=3), pixel=0.2, stride=1, window=48, alpha_mrad=20.0,
                    aberrations=ab), ab


def test_anisotropic_scan_fits_as_the_isotropic_one_resampled(fine_scan):
    """Every other row of a 0.2 A scan is a scan of steps (0.4, 0.2) A; every other row and column,
    an isotropic scan of 0.4 A. Both fit to the same aberrations (and to the truth); the anisotropic
    scan taken as isotropic does not, so the test can fail."""
    from qora.ssb import fit

    sim, ab = fine_scan
    kw = dict(kv=300.0, alpha_mrad=20.0, backend="cpu")
    aniso = Session(sim.data[::2], scan_step=(0.4, 0.2), **kw)
    iso = Session(sim.data[::2, ::2], scan_step=0.4, **kw)
    # the images agree on the positions both scans visit
    np.testing.assert_allclose(aniso.image(ab)[:, ::2], iso.image(ab), atol=0.15 * np.abs(iso.image(ab)).max())
    fits = [fit(s, rotation=0.0, tilt=False, trials=48, seed=0)["standard"]["parameters"] for s in (aniso, iso)]
    for p in fits:
        assert p["C10"] == pytest.approx(-90.0, abs=3.0)
        assert np.hypot(p["C12a"], p["C12b"]) == pytest.approx(25.0, abs=2.0)
    assert fits[0]["C10"] == pytest.approx(fits[1]["C10"], abs=2.0)
    assert fits[0]["C12a"] == pytest.approx(fits[1]["C12a"], abs=2.0)
    assert fits[0]["C12b"] == pytest.approx(fits[1]["C12b"], abs=2.0)
    wrong = Session(sim.data[::2], scan_step=0.4, **kw)
    wp = fit(wrong, rotation=0.0, tilt=False, trials=48, seed=0)["standard"]
    assert wp["agreement"] < fit(aniso, rotation=0.0, tilt=False, trials=48, seed=0)["standard"]["agreement"] - 0.05


def test_anisotropic_parallax_upsampled(fine_scan):
    """The upsampled parallax image of the (0.4, 0.2) A scan, on its fine grid of (0.2, 0.1) A,
    resampled to 0.2 A, against the one of the isotropic 0.2 A scan."""
    sim, ab = fine_scan
    kw = dict(kv=300.0, alpha_mrad=20.0, backend="cpu")
    aniso = Session(sim.data[::2], scan_step=(0.4, 0.2), **kw).image(ab, "parallax", upsample=2)
    full = Session(sim.data, scan_step=0.2, **kw).image(ab, "parallax")
    assert aniso.shape == (48, 96)
    r = np.corrcoef(aniso[:, ::2].ravel(), full.ravel())[0, 1]
    assert r > 0.8


def test_abtem_fit_with_the_amplitude_edge_needs_no_calibration():
    """The abTEM fixture fitted from a cold start (rotation given) with the scale fitted from the disk
    by its amplitude edge, no calibration given: abTEM's C10 within 2 A and C12 within 1 A (and 2
    degrees), closer than with the intensity reading (the coefficients scale with the square of the
    pixel's angle)."""
    from qora.ssb import Band, defocus_search, newton, parameters_to_aberrations

    with np.load(FIXTURE) as f:
        fx = {k: f[k] for k in f.files}
    data = fx["data"].astype(np.float64)
    results = {}
    for edge in ("amplitude", "intensity"):
        session = Session(data, kv=float(fx["kv"]), alpha_mrad=float(fx["alpha_mrad"]), scan_step=float(fx["scan_step"]),
                          detector=fit_detector(data, float(fx["alpha_mrad"]), edge=edge))
        band = Band(session, ("C10", "C12a", "C12b"))
        c10, _ = defocus_search(band)
        values, _, _ = newton(band, {"C10": c10, "C12a": 0.0, "C12b": 0.0}, iterations=40)
        results[edge] = parameters_to_aberrations(values)
    fitted = results["amplitude"]
    mag, angle = fitted.values["C12"]
    assert abs(fitted.get("C10") - float(fx["C10"])) < 2.0
    assert abs(mag - float(fx["C12"])) < 1.0
    assert abs(math.degrees(angle - float(fx["phi12"]))) < 2.0
    assert abs(mag - float(fx["C12"])) < abs(results["intensity"].values["C12"][0] - float(fx["C12"]))
