"""qora.ssb part 1 on the CPU: optics, the simulator, the detector fit, G(Q, k) and the images."""

import math

import numpy as np
import pytest

from qora.ssb import (Aberrations, Session, amorphous_slices, chi, chi_gradient, fit_detector, scan_truth, simulate,
                     wavelength)

PIXEL, STRIDE, WINDOW, KV, ALPHA = 0.2, 2, 64, 300.0, 20.0


@pytest.fixture(scope="module")
def defocused():
    slices = amorphous_slices((128, 128), PIXEL, seed=1)
    ab = Aberrations(C10=150.0)
    return simulate(slices, pixel=PIXEL, stride=STRIDE, window=WINDOW, kv=KV, alpha_mrad=ALPHA, aberrations=ab), ab


def test_relativistic_wavelength():
    # lambda = h c / sqrt(E (2 m c^2 + E)): 300 kV 0.019687 A, 200 kV 0.025079 A, 80 kV 0.041757 A
    assert wavelength(300) == pytest.approx(0.0196875, rel=1e-5)
    assert wavelength(200) == pytest.approx(0.0250793, rel=1e-5)
    assert wavelength(80) == pytest.approx(0.0417572, rel=1e-5)
    with pytest.raises(ValueError):
        wavelength(0)


def test_chi_terms_and_gradient():
    lam = wavelength(300)
    k = np.array([0.3, -0.2])
    # C10 alone: pi lambda C10 |k|^2; C30 alone: pi/2 lambda^3 C30 |k|^4
    np.testing.assert_allclose(chi(*k, Aberrations(C10=100.0), lam), math.pi * lam * 100 * 0.13, rtol=1e-12)
    np.testing.assert_allclose(chi(*k, Aberrations(C30=1e7), lam), math.pi / 2 * lam**3 * 1e7 * 0.13**2, rtol=1e-12)
    # C12 polar and cartesian forms agree: a = C cos 2phi, b = C sin 2phi
    polar = Aberrations(C12=(40.0, 0.3))
    cart = Aberrations.from_cartesian(C12=(40 * math.cos(0.6), 40 * math.sin(0.6)))
    assert chi(*k, polar, lam) == pytest.approx(chi(*k, cart, lam), rel=1e-12)
    ab = Aberrations(C10=80.0, C12=(30.0, 0.4), C21=(2e3, 1.0), C23=(1e3, -0.5), C30=5e5)
    gx, gy = chi_gradient(*k, ab, lam)
    h = 1e-6
    assert gx == pytest.approx((chi(k[0] + h, k[1], ab, lam) - chi(k[0] - h, k[1], ab, lam)) / (2 * h), rel=1e-6)
    assert gy == pytest.approx((chi(k[0], k[1] + h, ab, lam) - chi(k[0], k[1] - h, ab, lam)) / (2 * h), rel=1e-6)
    with pytest.raises(ValueError):
        Aberrations(C99=1.0)


def test_detector_fit_finds_an_off_centre_disk_to_a_tenth_of_a_pixel():
    rng = np.random.default_rng(0)
    center, radius = (30.37, 33.81), 11.62
    rows, cols = np.indices((64, 64))
    sub = 8  # the disk integrated over each pixel
    fine_r = (np.arange(64 * sub) + 0.5) / sub - 0.5
    inside = np.hypot(fine_r[:, None] - center[0], fine_r[None, :] - center[1]) <= radius
    pattern = inside.reshape(64, sub, 64, sub).mean((1, 3))
    data = rng.poisson(200 * pattern[None, None] * np.ones((4, 4, 1, 1)) + 0.5).astype(float)
    fit = fit_detector(data, 20.0)
    assert abs(fit.center[0] - center[0]) < 0.1 and abs(fit.center[1] - center[1]) < 0.1
    assert abs(fit.radius - radius) < 0.1
    assert fit.mrad_per_pixel == pytest.approx(20.0 / fit.radius)
    with pytest.raises(ValueError):
        fit_detector(np.zeros((2, 2, 8, 8)), 20.0)


def test_simulator_bright_field_and_dose(defocused):
    scan, _ = defocused
    assert scan.data.shape == (64, 64, WINDOW, WINDOW)
    # a phase object conserves the electrons: every pattern sums to the bright-field pixel count
    sums = scan.data.sum((2, 3))
    np.testing.assert_allclose(sums, sums.mean(), rtol=1e-9)
    noisy = simulate(scan.phase, pixel=PIXEL, stride=STRIDE, window=WINDOW, aberrations=Aberrations(C10=150.0),
                     dose=1e4, seed=3)
    expected = 1e4 * (STRIDE * PIXEL) ** 2
    assert noisy.data.sum((2, 3)).mean() == pytest.approx(expected, rel=0.01)
    assert np.all(noisy.data == np.round(noisy.data))


def test_half_plane_g_equals_the_full_plane_transform(defocused):
    scan, _ = defocused
    s = Session(scan.data, kv=KV, alpha_mrad=ALPHA, scan_step=scan.scan_step, chunk=100)
    flat = scan.data.reshape(64, 64, -1)[..., s.bf_index]
    full = np.fft.fft2(flat / flat.mean(), axes=(0, 1))
    np.testing.assert_allclose(s.G, full[:, :33], rtol=1e-10, atol=1e-9 * np.abs(full).max())
    # the other half is the conjugate mirror: G(-Q, k) = conj G(Q, k) for real data
    np.testing.assert_allclose(full[1:, 40], np.conj(full[:0:-1, 64 - 40]), rtol=1e-9, atol=1e-9)


def _ssb_full_plane(session, aberrations):
    """SSB written independently on the full Q plane, one Q at a time."""
    lam = session.wavelength
    limit = session.alpha_mrad * 1e-3 / lam
    sy, sx = session.scan_shape
    data = session.G  # half plane: rebuild the full plane from conjugate symmetry
    full = np.empty((sy, sx, data.shape[-1]), complex)
    full[:, : sx // 2 + 1] = data
    for j in range(sx // 2 + 1, sx):
        full[:, j] = np.conj(data[(-np.arange(sy)) % sy, sx - j])
    ky, kx = session.k[:, 0], session.k[:, 1]

    def psi(y, x):
        inside = np.hypot(y, x) <= limit
        return inside * np.exp(-1j * chi(x, y, aberrations, lam))

    out = np.zeros((sy, sx), complex)
    for i, qy in enumerate(np.fft.fftfreq(sy, session.scan_step)):
        for j, qx in enumerate(np.fft.fftfreq(sx, session.scan_step)):
            if (i == 0 and j == 0) or 2 * i == sy or 2 * j == sx:  # no DC, no Nyquist (see Session.image)
                continue
            gam = np.conj(psi(ky, kx)) * psi(ky - qy, kx - qx) - psi(ky, kx) * np.conj(psi(ky + qy, kx + qx))
            double = (np.hypot(ky - qy, kx - qx) <= limit) ^ (np.hypot(ky + qy, kx + qx) <= limit)
            use = double & (np.abs(gam) > 1e-12)
            if use.any():
                g = full[i, j, use]
                out[i, j] = np.sum(g * np.conj(gam[use]) / np.abs(gam[use])) / (1j * np.abs(gam[use]).sum())
    return np.fft.ifft2(out).real


def test_ssb_from_the_half_plane_equals_an_independent_full_plane_ssb():
    slices = amorphous_slices((48, 48), PIXEL, seed=2)
    ab = Aberrations(C10=60.0, C12=(20.0, 0.5))
    scan = simulate(slices, pixel=PIXEL, stride=STRIDE, window=32, aberrations=ab, alpha_mrad=15.0)
    s = Session(scan.data, kv=KV, alpha_mrad=15.0, scan_step=scan.scan_step)
    ours = s.image(ab, "ssb")
    ref = _ssb_full_plane(s, ab)
    np.testing.assert_allclose(ours, ref, atol=1e-9 * np.abs(ref).max())


@pytest.mark.parametrize("method, kw", [("ssb", {}), ("thick", {"thickness": 120.0, "tilt": (1e-3, -2e-3)}),
                                        ("obf", {})])
def test_the_host_loops_equal_the_array_code(defocused, method, kw):
    """Session.image's sums on the host (qora.ssb.image_loops, one sincos a term) against the array code they
    replaced (both terms of Gamma made whole), with every order of chi the polynomial holds; OBF's sums take
    both terms where both shifted disks hold a pixel."""
    scan, _ = defocused
    s = Session(scan.data, kv=KV, alpha_mrad=ALPHA, scan_step=scan.scan_step)
    ab = Aberrations(C10=80.0, C12=(30.0, 0.4), C21=(2e3, 1.0), C23=(1e3, -0.5), C30=5e5, C32=(3e4, 0.2),
                     C34=(2e4, -0.7))
    qy, qx = s._q(half=True)
    sums = {}
    for route in (s._sums_arrays, s._sums_loops):
        numerator, norm = np.zeros(qy.shape, complex), np.zeros(qy.shape)
        route(ab, method, qy, qx, kw.get("thickness", 0.0), kw.get("tilt", (0.0, 0.0)), 16, numerator, norm)
        sums[route.__name__] = numerator, norm
    (n_arrays, w_arrays), (n_loops, w_loops) = sums["_sums_arrays"], sums["_sums_loops"]
    assert w_arrays.max() > 0 and np.count_nonzero(w_arrays) > 0.5 * w_arrays.size
    np.testing.assert_allclose(n_loops, n_arrays, rtol=0, atol=1e-12 * np.abs(n_arrays).max())
    np.testing.assert_allclose(w_loops, w_arrays, rtol=0, atol=1e-12 * w_arrays.max())


def test_images_correlate_with_the_projected_phase(defocused):
    scan, ab = defocused
    s = Session(scan.data, kv=KV, alpha_mrad=ALPHA, scan_step=scan.scan_step)
    truth = scan_truth(scan)
    pearson = lambda img: np.corrcoef(img.ravel(), truth.ravel())[0, 1]  # noqa: E731
    ssb = s.image(ab, "ssb")
    assert pearson(ssb) >= 0.9  # measured 0.996
    assert ssb.std() == pytest.approx(truth.std(), rel=0.1)  # radians, not arbitrary units
    assert pearson(s.image(ab, "parallax")) >= 0.8  # measured 0.89
    # the convention is pinned: the opposite defocus sign destroys the image
    assert pearson(s.image(Aberrations(C10=-150.0), "ssb")) < 0.3


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="scan_row"):
        Session(np.ones((4, 4, 8)), kv=300, alpha_mrad=20, scan_step=1.0)
    with pytest.raises(ValueError, match="scan_step"):
        Session(np.ones((4, 4, 8, 8)), kv=300, alpha_mrad=20, scan_step=0.0)
    with pytest.raises(ValueError, match="method"):
        slices = amorphous_slices((32, 32), PIXEL, seed=0)
        scan = simulate(slices, pixel=PIXEL, stride=2, window=32, alpha_mrad=15.0)
        Session(scan.data, kv=KV, alpha_mrad=15.0, scan_step=scan.scan_step).image(method="ptycho")  # not a method


def test_thick_model_tends_to_the_standard_ssb_and_corrects_a_tilted_slab():
    slices = amorphous_slices((96, 96), PIXEL, slices=8, atoms_per_a2=0.02, seed=4)
    ab = Aberrations(C10=50.0)
    tilt = (0.01, -0.005)
    scan = simulate(slices, pixel=PIXEL, stride=2, window=48, alpha_mrad=25.0, aberrations=ab, thickness=200.0,
                    tilt=tilt)
    s = Session(scan.data, kv=KV, alpha_mrad=25.0, scan_step=scan.scan_step)
    standard = s.image(ab, "ssb")
    np.testing.assert_allclose(s.image(ab, "thick", thickness=1e-3), standard, atol=1e-6 * np.abs(standard).max())
    truth = scan_truth(scan)
    pearson = lambda img: np.corrcoef(img.ravel(), truth.ravel())[0, 1]  # noqa: E731
    thick = pearson(s.image(ab, "thick", thickness=200.0, tilt=tilt))
    assert thick > pearson(standard) + 0.15  # the depth weights recover what one defocus cannot
    assert thick > pearson(s.image(ab, "thick", thickness=200.0)) + 0.2  # and the tilt's sign and axes are right
    with pytest.raises(ValueError, match="thick"):
        s.image(ab, "ssb", thickness=10.0)


def test_loss_is_lowest_at_the_true_defocus_and_the_mean_phase_follows_the_specimen():
    scan = simulate(amorphous_slices((96, 96), PIXEL, seed=1), pixel=PIXEL, stride=2, window=48, alpha_mrad=ALPHA,
                    aberrations=Aberrations(C10=150.0))
    s = Session(scan.data, kv=KV, alpha_mrad=ALPHA, scan_step=scan.scan_step)
    image, loss = s.mean_phase(Aberrations(C10=150.0))
    others = [s.mean_phase(Aberrations(C10=c))[1] for c in (100.0, 200.0, -150.0)]
    assert loss < 0.8 * min(others)  # measured 7.1e-6 against 1.2e-5 to 1.3e-5
    truth = scan_truth(scan)
    assert np.corrcoef(image.ravel(), truth.ravel())[0, 1] >= 0.8  # measured 0.89


def test_parallax_upsampled_three_times_beats_interpolating_the_plain_image():
    import dataclasses

    ab = Aberrations(C10=170.0)  # shifts step 0.35 A per detector pixel against a 0.6 A scan: sub-pixel diversity
    scan = simulate(amorphous_slices((192, 192), 0.1, sigma=0.3, seed=1), pixel=0.1, stride=6, window=96,
                    alpha_mrad=25.0, aberrations=ab)
    s = Session(scan.data, kv=KV, alpha_mrad=25.0, scan_step=scan.scan_step)
    fine = dataclasses.replace(scan, data=np.zeros((96, 96, 1, 1)), scan_step=scan.scan_step / 3)
    truth = scan_truth(fine, band_limit=2 * 25e-3 / wavelength(KV))
    up = s.image(ab, "parallax", upsample=3)
    assert up.shape == (96, 96)
    plain = np.fft.fftshift(np.fft.fft2(s.image(ab, "parallax")))
    padded = np.zeros((96, 96), complex)
    padded[32:64, 32:64] = plain
    interpolated = np.fft.ifft2(np.fft.ifftshift(padded)).real
    pearson = lambda img: np.corrcoef(img.ravel(), truth.ravel())[0, 1]  # noqa: E731
    assert pearson(up) >= 0.85  # measured 0.885
    assert pearson(up) > pearson(interpolated) + 0.01  # measured 0.863
    with pytest.raises(ValueError, match="upsample"):
        s.image(ab, "ssb", upsample=3)


@pytest.fixture(scope="module")
def astigmatic():
    ab = Aberrations(C10=-100.0, C12=(20.0, np.deg2rad(25.0)))
    scan = simulate(amorphous_slices((96, 96), PIXEL, atoms_per_a2=0.1, seed=1), pixel=PIXEL, stride=2, window=48,
                    alpha_mrad=ALPHA, aberrations=ab)
    return Session(scan.data, kv=KV, alpha_mrad=ALPHA, scan_step=scan.scan_step), ab


def test_agreement_derivatives_are_exact_and_batches_equal_single_sets(astigmatic):
    from qora.ssb import Band

    s, _ = astigmatic
    names = ("C10", "C12a", "C12b", "thickness", "tilt_y", "tilt_x")
    band = Band(s, names)
    v = {"C10": -90.0, "C12a": 12.0, "C12b": -10.0, "thickness": 30.0, "tilt_y": 0.004, "tilt_x": -0.003}
    f, grad, hess = band.evaluate(v)
    np.testing.assert_allclose(hess, hess.T, rtol=1e-12)
    for i, name in enumerate(names):
        h = 1e-6 if name.startswith("tilt") else 1e-2
        up, down = band.evaluate({**v, name: v[name] + h}, order=1), band.evaluate({**v, name: v[name] - h}, order=1)
        assert grad[i] == pytest.approx((up[0] - down[0]) / (2 * h), rel=1e-4)
        np.testing.assert_allclose(hess[i], (up[1] - down[1]) / (2 * h), rtol=1e-4, atol=1e-4 * np.abs(hess[i]).max())
    sets = [v, {**v, "C10": 0.0}, {**v, "thickness": 0.0, "C12a": 0.0}]
    np.testing.assert_allclose(band.evaluate_batch(sets), [band.evaluate(x, order=0) for x in sets], rtol=1e-12)
    assert 0 < f <= 1


def test_exact_derivatives_in_every_parameter_with_the_rotation(astigmatic):
    """All aberration terms, thickness, tilt and the scan rotation (soft-edged apertures)."""
    from qora.ssb import ABERRATION_PARAMETERS, Band

    s, _ = astigmatic
    names = ABERRATION_PARAMETERS + ("thickness", "tilt_y", "tilt_x", "rotation")
    band = Band(s, names)
    v = {"C10": -90.0, "C12a": 12.0, "C12b": -10.0, "C21a": 200.0, "C21b": 100.0, "C23a": 150.0, "C23b": -60.0,
         "C30": 1e4, "thickness": 30.0, "tilt_y": 0.004, "tilt_x": -0.003, "rotation": 0.05}
    _, grad, hess = band.evaluate(v)
    np.testing.assert_allclose(hess, hess.T, rtol=1e-12)
    for i, name in enumerate(names):
        h = {"tilt_y": 1e-6, "tilt_x": 1e-6, "rotation": 1e-5, "C30": 1.0}.get(name, 1e-2)
        up, down = band.evaluate({**v, name: v[name] + h}, order=1), band.evaluate({**v, name: v[name] - h}, order=1)
        assert grad[i] == pytest.approx((up[0] - down[0]) / (2 * h), rel=1e-4)  # measured <= 1e-7
        np.testing.assert_allclose(hess[i], (up[1] - down[1]) / (2 * h), rtol=1e-4, atol=1e-4 * np.abs(hess[i]).max())
    sets = [v, {**v, "rotation": 0.1}, {**v, "C10": 0.0}]
    np.testing.assert_allclose(band.evaluate_batch(sets), [band.evaluate(x, order=0) for x in sets], rtol=1e-12)


def test_cold_start_fit_finds_defocus_and_astigmatism(astigmatic):
    from qora.ssb import Band, defocus_search, newton, parameters_to_aberrations

    s, truth = astigmatic
    band = Band(s, ("C10", "C12a", "C12b"))
    c10, _ = defocus_search(band)  # from C10 = 0, no astigmatism
    values, _, _ = newton(band, {"C10": c10, "C12a": 0.0, "C12b": 0.0})
    fitted = parameters_to_aberrations(values)
    assert abs(fitted.get("C10") - truth.get("C10")) < 2.0
    mag, angle = fitted.values["C12"]
    assert abs(mag - 20.0) < 1.0
    assert abs(np.rad2deg(angle) - 25.0) < 2.0


def _slab_fit(slices, tilt):
    from qora.ssb import Band, defocus_search, newton

    scan = simulate(slices, pixel=PIXEL, stride=2, window=48, alpha_mrad=25.0, aberrations=Aberrations(C10=-100.0),
                    thickness=120.0, tilt=tilt)
    s = Session(scan.data, kv=KV, alpha_mrad=25.0, scan_step=scan.scan_step)
    standard = Band(s, ("C10",))
    c10, _ = defocus_search(standard)
    std_values, std_agreement, _ = newton(standard, {"C10": c10})
    thick = Band(s, ("C10", "thickness", "tilt_y", "tilt_x"))
    values, agreement, _ = newton(thick, {"C10": std_values["C10"], "thickness": 60.0, "tilt_y": 0.0, "tilt_x": 0.0},
                                  iterations=60)
    return values, agreement, std_agreement


def test_thick_fit_recovers_tilt_and_thickness_of_a_columnar_slab():
    """One layer repeated in 12 slices over 120 A and sheared by the tilt (a crystal near a zone axis)."""
    layer = amorphous_slices((96, 96), PIXEL, atoms_per_a2=0.02, phase_per_atom=0.02, seed=6)[0]
    values, agreement, standard = _slab_fit(np.repeat(layer[None], 12, axis=0), (0.008, -0.005))
    # C10 at the mid-plane: the coherent depth average is this slab's exact weak-phase transfer
    assert abs(values["C10"] + 100.0) < 2.0  # measured -100.7 A (the standard fit: -107.5 A)
    assert abs(values["tilt_y"] - 0.008) < 1.5e-3 and abs(values["tilt_x"] + 0.005) < 1.5e-3  # measured 0.2 mrad
    assert abs(values["thickness"] - 120.0) < 24.0  # measured 123 A
    assert agreement > standard  # measured 0.971 against 0.753


def test_thick_fit_recovers_the_thickness_of_an_amorphous_slab():
    """A tilted random slab is another random slab: only the thickness is observable."""
    values, agreement, standard = _slab_fit(amorphous_slices((96, 96), PIXEL, slices=12, atoms_per_a2=0.02, seed=5),
                                            (0.008, -0.005))
    assert abs(values["thickness"] - 120.0) < 24.0  # measured 115 A
    assert agreement > standard  # measured 0.597 against 0.541


def _fit_with_a_7_degree_rotation(slices):
    """Cold-start fit of a scan of ``slices`` turned by 7 degrees against the detector (C10 = -100 A,
    20 A of C12 at 25 degrees in the scan's frame): (rotation deg, C10, |C12|, C12 azimuth deg in the
    detector's frame, where the truth is 25 + 7 degrees)."""
    from qora.ssb import fit_rotation, parameters_to_aberrations, rotate_detector

    ab = Aberrations(C10=-100.0, C12=(20.0, np.deg2rad(25.0)))
    scan = simulate(slices, pixel=PIXEL, stride=2, window=48, alpha_mrad=ALPHA, aberrations=ab)
    s = Session(rotate_detector(scan.data, np.deg2rad(7.0)), kv=KV, alpha_mrad=ALPHA, scan_step=scan.scan_step)
    rotation, values, _ = fit_rotation(s)
    fitted = parameters_to_aberrations(values)
    mag, angle = fitted.values["C12"]
    return np.rad2deg(rotation), fitted.get("C10"), mag, np.rad2deg(angle)


@pytest.mark.slow
def test_cold_start_fit_with_an_unknown_scan_rotation():
    # measured 7.02 degrees, C10 -98.1 A, C12 19.76 A at 32.01 degrees
    rotation, c10, mag, angle = _fit_with_a_7_degree_rotation(amorphous_slices((96, 96), PIXEL, atoms_per_a2=0.1,
                                                                                seed=1))
    assert abs(rotation - 7.0) < 0.5
    assert abs(c10 + 100.0) < 2.0
    assert abs(mag - 20.0) < 1.0
    assert abs(angle - 32.0) < 2.0


def test_tpe_search_is_seeded_and_lands_in_the_basin(astigmatic):
    from qora.ssb import Band, newton, parameters_to_aberrations, tpe_search

    s, truth = astigmatic
    band = Band(s, ("C10", "C12a", "C12b"))
    start, best, trials, scores = tpe_search(band, seed=3)  # 200 trials, 8 per pass, from nothing
    assert trials.shape == (200, 3) and scores.max() == pytest.approx(best)
    again = tpe_search(band, seed=3)
    assert again[0] == start  # seeded: the same trials
    values, _, _ = newton(band, start)
    fitted = parameters_to_aberrations(values)
    assert abs(fitted.get("C10") - truth.get("C10")) < 2.0
    mag, angle = fitted.values["C12"]
    assert abs(mag - 20.0) < 1.0 and abs(np.rad2deg(angle) - 25.0) < 2.0
    with pytest.raises(ValueError, match="does not fit"):
        tpe_search(band, {"C30": (0.0, 1.0)})


def test_a_pickled_session_leaves_the_band_cache_behind(astigmatic):
    """A session travels to Dask workers by pickle: the band of G the fits cache on it (3 GB at
    full scale) stays behind and is gathered again, to the same agreement, where it is needed."""
    import pickle

    from qora.ssb import Band

    s, _ = astigmatic
    values = {"C10": -95.0, "C12a": 10.0, "C12b": 15.0}
    before = Band(s, ("C10", "C12a", "C12b")).evaluate(values, order=0)
    assert getattr(s, "_band_cache", None) is not None
    copy = pickle.loads(pickle.dumps(s))
    assert getattr(copy, "_band_cache", None) is None
    assert Band(copy, ("C10", "C12a", "C12b")).evaluate(values, order=0) == pytest.approx(before, rel=1e-12)


def test_newton_is_scale_free_and_spends_no_pass_once_converged():
    """The thick fit's curvatures span eight decades (tilt in rad against thickness in A): the
    damped Newton must take each parameter's own scale, so a quadratic agreement with that spread
    is solved in one step, then stops on the predicted gain without another pass."""
    from qora.ssb import newton

    curvature = np.array([2.6e-6, 2.2e-6, 3.2e-6, 2.4e-8, 1.4, 1.3])  # the thick fit's Hessian diagonal
    peak = np.array([118.9, 9.1, 8.0, 65.7, 1.8e-3, 0.9e-3])
    rng = np.random.default_rng(1)
    q, _ = np.linalg.qr(rng.normal(size=(6, 6)))
    scale = np.sqrt(curvature)
    hess = -(scale[:, None] * (0.7 * np.eye(6) + 0.3 * q @ np.diag(rng.random(6)) @ q.T) * scale[None])

    class Quadratic:
        parameters = ("C10", "C12a", "C12b", "thickness", "tilt_y", "tilt_x")
        passes = 0

        def evaluate(self, values, *, order=2):
            self.passes += 1
            d = np.array([values[p] for p in self.parameters]) - peak
            value = 0.9 + 0.5 * d @ hess @ d
            return value if order == 0 else (value, hess @ d, hess)

    band = Quadratic()
    values, value, _ = newton(band, dict(zip(band.parameters, [100.0, 0.0, 0.0, 60.0, 0.0, 0.0])), iterations=60)
    assert np.allclose([values[p] for p in band.parameters], peak, rtol=1e-6, atol=1e-9)
    assert value == pytest.approx(0.9, abs=1e-12)
    assert band.passes <= 5  # start; a step damped by mu = 1e-3 and its derivatives; one more to the peak

    # a peak beyond the tilt bound: the fit stops on the bound, stationary in every free parameter
    from qora.ssb import TILT_LIMIT

    peak[4] = 0.3
    values, _, _ = newton(band, dict(zip(band.parameters, [100.0, 0.0, 0.0, 60.0, 0.0, 0.0])), iterations=60)
    x = np.array([values[p] for p in band.parameters])
    assert x[4] == TILT_LIMIT
    grad = hess @ (x - peak)
    assert grad[4] > 0 and np.all(np.abs(np.delete(grad / np.sqrt(curvature), 4)) < 1e-6)


def test_newton_never_accepts_a_fall_in_the_agreement():
    """Where the Hessian misleads (here: of the wrong sign, so that the quadratic model predicts a
    fall for its own step), a step is still taken only if the agreement rises. A fall of less than
    a tenth of the predicted one was accepted once, and a thick fit of a 24-slice film ran from
    agreement 0.47 to 0.0002."""
    from qora.ssb import newton

    class Misleading:
        parameters = ("C10", "C12a")
        accepted = []

        def evaluate(self, values, *, order=2):
            x = np.array([values["C10"] - 100.0, values["C12a"] - 5.0])
            value = 1.0 - 1e-4 * x @ x
            if order == 0:
                return value
            self.accepted.append(value)
            return value, -2e-4 * x, 2e-4 * np.eye(2)  # the true Hessian is -2e-4 I

    band = Misleading()
    _, value, _ = newton(band, {"C10": 80.0, "C12a": 0.0})
    assert value >= band.accepted[0]
    assert all(b >= a for a, b in zip(band.accepted, band.accepted[1:]))


def test_session_fit_reconstruct_and_preview(astigmatic):
    from qora.ssb import parameters_to_aberrations

    s, truth = astigmatic
    fit = s.fit(rotation=0.0, tilt=False, trials=120)
    std = fit["standard"]
    assert set(std["uncertainty"]) == {"C10", "C12a", "C12b"} and all(0 < v < 1 for v in std["uncertainty"].values())
    assert abs(std["parameters"]["C10"] - truth.get("C10")) < 2.0 and "search_s" in fit["timings_s"]
    params = dict(std["parameters"])
    np.testing.assert_array_equal(s.preview(params), s.image(parameters_to_aberrations(params), "ssb"))
    image, loss = s.preview({**params, "thickness": 20.0}, loss=True)
    assert image.shape == s.scan_shape and 0 <= loss < 1
    assert s.preview(params, upsample=3).shape == (3 * s.scan_shape[0], 3 * s.scan_shape[1])
    # the loss at the fitted parameters is below the loss 50 A away
    assert s.preview(params, loss=True)[1] < s.preview({**params, "C10": params["C10"] + 50.0}, loss=True)[1]


@pytest.mark.slow
def test_session_reconstruct_images_both_branches(astigmatic):
    s, _ = astigmatic
    out = s.reconstruct(rotation=0.0, trials=80)
    assert set(out["images"]) == {"standard", "thick"} and out["better"] in ("standard", "thick")
    assert out["images"]["thick"].shape == s.scan_shape
    assert out["fit"]["thick"]["agreement"] >= out["fit"]["standard"]["agreement"] - 1e-6


@pytest.mark.slow
def test_hessian_uncertainties_match_the_spread_over_noise_realisations():
    """Ten Poisson realisations of one specimen: the spread of the fitted C10 and C12 against the
    standard errors from the Hessian (within a factor of two)."""
    from qora.ssb import Band, newton

    ab = Aberrations(C10=-100.0, C12=(20.0, np.deg2rad(25.0)))
    slices = amorphous_slices((96, 96), PIXEL, atoms_per_a2=0.1, seed=1)
    names = ("C10", "C12a", "C12b")
    start = {"C10": -100.0, "C12a": 20 * np.cos(np.deg2rad(50)), "C12b": 20 * np.sin(np.deg2rad(50))}
    fits, errors = [], []
    for seed in range(10):
        scan = simulate(slices, pixel=PIXEL, stride=2, window=48, alpha_mrad=ALPHA, aberrations=ab, dose=1e5,
                        seed=seed)
        band = Band(Session(scan.data, kv=KV, alpha_mrad=ALPHA, scan_step=scan.scan_step), names)
        values, agreement, hessian = newton(band, start)
        fits.append([values[n] for n in names])
        errors.append([band.uncertainties(agreement, hessian)[n] for n in names])
    spread = np.std(fits, axis=0, ddof=1)
    predicted = np.median(errors, axis=0)
    ratio = predicted / spread
    assert np.all((ratio > 0.5) & (ratio < 2.0)), (spread, predicted)  # measured ratios 0.7-1.5 (dose 1e5 e/A^2)


@pytest.mark.slow
def test_cold_start_on_a_crystal_whose_parallax_exceeds_half_its_period():
    """A 3.2 A square lattice with a two-atom basis: the parallax shifts at the aperture's edge
    (|C10| alpha = 2 A) exceed half the period, where image cross-correlation aligns the wrong
    lattice site; the agreement fit does not correlate images."""
    from qora.ssb import crystal_slices

    period = 3.2
    assert 100.0 * ALPHA * 1e-3 > period / 2
    # measured 7.07 degrees, C10 -98.6 A, C12 19.77 A at 31.86 degrees
    rotation, c10, mag, angle = _fit_with_a_7_degree_rotation(crystal_slices((96, 96), PIXEL, period=period))
    assert abs(rotation - 7.0) < 0.5
    assert abs(c10 + 100.0) < 2.0
    assert abs(mag - 20.0) < 1.0
    assert abs(angle - 32.0) < 2.0


def test_every_batch_launch_names_a_compiled_kernel():
    """The batch dispatcher and the module's instantiations agree: every set count a launch can
    take names a kernel the module compiles, and no more sets than a kernel takes reach one."""
    from qora.ssb.kernels import _MODULES, batch_kernel_name, most_sets

    for standard in (True, False):
        for sets in range(1, most_sets(standard=standard) + 1):
            assert batch_kernel_name(sets, standard=standard) in _MODULES["band.cu"]
        with pytest.raises(ValueError, match="sets"):
            batch_kernel_name(most_sets(standard=standard) + 1, standard=standard)


def test_mean_pattern_on_threads_equals_numpy_mean(tmp_path):
    from qora.backend.host import threads
    from qora.ssb.detector import mean_pattern

    rng = np.random.default_rng(1)
    data = rng.integers(0, 60000, (13, 7, 9, 11)).astype(np.uint16)
    np.save(tmp_path / "d.npy", data)
    mapped = np.load(tmp_path / "d.npy", mmap_mode="r")
    rows = [0, 4, 12]
    with threads(3):  # more threads than one part's rows: every row summed once
        np.testing.assert_array_equal(mean_pattern(mapped), data.mean(axis=(0, 1), dtype=np.float64))
        np.testing.assert_array_equal(mean_pattern(mapped, rows), data[rows].mean(axis=(0, 1), dtype=np.float64))
    nan = data.astype(np.float32)
    nan[5, 3, 2, 2] = np.nan
    with pytest.raises(ValueError, match="non-finite"):
        fit_detector(nan, 20.0)


def test_newton_ends_on_a_last_step_its_model_predicted():
    """Near the maximum (the full step's predicted gain within LAST_STEP_GAIN tolerances, as from a thinned
    band's maximum) a step that realises what its quadratic model predicted ends the fit with no pass
    with derivatives after it, within the tolerance of the maximum; far from it, or where the model errs
    (a quartic hill, whose step realises 1.2 times its prediction and stops short), Newton goes on."""
    from qora.ssb import newton

    class Hill:
        parameters = ("C10", "C12a")

        def __init__(self, quartic):
            self.quartic, self.counts = quartic, {0: 0, 2: 0}

        def evaluate(self, values, *, order=2):
            self.counts[order] += 1
            x = np.array([values["C10"] - 100.0, values["C12a"] - 5.0])
            value = 0.5 - 1e-3 * x @ x - self.quartic * (x @ x) ** 2
            if order == 0:
                return value
            grad = -2e-3 * x - 4 * self.quartic * (x @ x) * x
            hess = -2e-3 * np.eye(2) - self.quartic * (8 * np.outer(x, x) + 4 * (x @ x) * np.eye(2))
            return value, grad, hess

    tolerance = 1e-10  # of the agreement 0.5: 5e-11
    near = {"C10": 100.001, "C12a": 5.0}  # the full step's predicted gain 1e-9: 20 tolerances
    quadratic = Hill(0.0)
    values, value, hess = newton(quadratic, near, tolerance=tolerance)
    assert quadratic.counts == {0: 1, 2: 1}  # one pass with derivatives, one value
    assert 0.5 - value <= tolerance * 0.5 and abs(values["C10"] - 100.0) < 1e-5 and hess.shape == (2, 2)
    far = Hill(0.0)
    values, _, _ = newton(far, {"C10": 101.0, "C12a": 5.0}, tolerance=tolerance)  # 1e-3: 2e7 tolerances
    assert far.counts[2] >= 2 and abs(values["C10"] - 100.0) < 1e-5
    quartic = Hill(1e3)
    values, value, _ = newton(quartic, near, tolerance=tolerance)
    assert quartic.counts[2] >= 2  # the first step left 4.3e-10 (9 tolerances): it went on
    assert 0.5 - value <= tolerance * 0.5


def test_newton_with_a_borrowed_hessian_ends_at_the_maximum_by_gradient_passes():
    """newton_with_hessian (the incoherent fit's whole-band finish: the band's gradient, a thinned band's Hessian):
    with the true Hessian one gradient pass and one value reach the peak; with one 15% off it steps on, the
    gradients' changes correcting it, and ends within the tolerance without any pass of second derivatives; with a
    Hessian of the wrong sign it falls back to Newton, still at the peak."""
    from qora.ssb.optimize import newton_with_hessian

    true = np.array([[-2e-3, 3e-4], [3e-4, -1e-3]])

    class Quadratic:
        parameters = ("C10", "thickness")

        def __init__(self):
            self.counts = {0: 0, 1: 0, 2: 0}

        def evaluate(self, values, *, order=2):
            self.counts[order] += 1
            d = np.array([values["C10"] + 100.0, values["thickness"] - 120.0])
            value = 0.5 + 0.5 * d @ true @ d
            return (value, (true @ d)) if order == 1 else value if order == 0 else (value, true @ d, true)

    start, tolerance = {"C10": -99.0, "thickness": 121.0}, 1e-10
    exact = Quadratic()
    values, value, hess = newton_with_hessian(exact, start, true, tolerance=tolerance)
    assert exact.counts == {0: 1, 1: 1, 2: 0} and np.array_equal(hess, true)
    assert 0.5 - value <= tolerance * 0.5 and abs(values["C10"] + 100.0) < 1e-6
    off = Quadratic()
    borrowed = true * np.array([[1.15, 1.0], [1.0, 0.85]])
    values, value, hess = newton_with_hessian(off, start, borrowed, tolerance=tolerance)
    assert off.counts[2] == 0 and 2 <= off.counts[1] <= 4  # stepped on by gradients alone (measured 3)
    assert 0.5 - value <= tolerance * 0.5 and abs(values["thickness"] - 120.0) < 1e-3
    # the steps' gradients corrected the Hessian toward the band's own (BFGS along the steps)
    assert np.abs(hess - true).max() < 0.2 * np.abs(borrowed - true).max()
    wrong = Quadratic()
    values, value, _ = newton_with_hessian(wrong, start, -true, tolerance=tolerance)
    assert wrong.counts[2] >= 1  # Newton took over
    assert 0.5 - value <= tolerance * 0.5
