"""Wigner distribution deconvolution (qora.ssb.wdd, ``Session.image(method="wdd")``): against a float64 transcription
of the textbook route (the detector's transform of G, the Wiener division, the inverse transform read at u = 0 and
u = Q), on independent abTEM data of SrTiO3 [001] against the projected potential, and under Poisson noise against
SSB and OBF with the dose rule for epsilon."""

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from qora.io.errors import InputError
from qora.ssb import Aberrations, Session, amorphous_slices, simulate
from qora.ssb.detector import DetectorFit
from qora.ssb.optics import aperture, chi, wavelength
from qora.ssb.wdd import Lattice, dose_from_counts, epsilon_for_dose, wdd_image

FIXTURE = Path(__file__).parent / "fixtures" / "abtem_srtio3_wdd.npz"
PIXEL, KV, ALPHA = 0.2, 300.0, 20.0
AB = Aberrations(C10=100.0, C12=(20.0, 0.5))


def _textbook_wdd(data, bf_index, k, level, scan_step, dk, aberrations, epsilon):
    """Float64 NumPy on the full Q plane: G from the raw patterns; per Q, G placed on an L x L lattice grid of the
    detector, transformed over k to H(rho); the Wiener division by the probe's a~_Q; the inverse transform read at
    u = 0 (a plain inverse FFT) and at u = Q (the sum over rho with the phase of Q); the same done to the two
    unscattered-wave terms a_Q(k), a_Q(k - Q) gives the 2 x 2 response, solved with Tikhonov epsilon / 10;
    O(Q) from each Q's own u = Q read, where both Q and -Q give one (Qx = 0) their mean, as the module does."""
    sy, sx = data.shape[:2]
    lam = wavelength(KV)
    g_all = np.fft.fft2(data.reshape(sy, sx, -1)[..., bf_index].astype(np.float64) / level, axes=(0, 1))
    k0 = k[np.argmin(np.hypot(k[:, 0], k[:, 1]))]
    n = np.rint((k - k0) / dk).astype(int)
    size = 2 * int((n.max(0) - n.min(0)).max() + 1) + 2
    while size % 2 or max(_factors(size)) > 5:  # the module's rule: even, no prime factor above 5
        size += 1
    m = np.fft.fftfreq(size, 1.0 / size)
    grid_y = k0[0] + dk * m[:, None] + 0 * m[None, :]
    grid_x = k0[1] + dk * m[None, :] + 0 * m[:, None]

    def psi(y, x):
        return aperture(x, y, ALPHA, lam) * np.exp(-1j * chi(x, y, aberrations, lam))

    eps = epsilon * (np.abs(psi(grid_y, grid_x)) ** 2).sum() ** 2
    where = (n[:, 0] % size, n[:, 1] % size)

    def on_grid(values):
        out = np.zeros((size, size), complex)
        out[where] = values
        return out

    fy, fx = np.fft.fftfreq(sy, scan_step), np.fft.fftfreq(sx, scan_step)
    total = np.zeros((sy, sx), complex)
    count = np.zeros((sy, sx))
    for iy in range(sy):
        for ix in range(sx // 2 + 1):  # the half plane; each Q gives O at Q and at -Q
            qy, qx = fy[iy], fx[ix]
            if (sy % 2 == 0 and iy == sy // 2) or (sx % 2 == 0 and ix == sx // 2):
                c = np.zeros(2)  # the unresolved Nyquist bins: zero, still counted where they fall
            else:
                a_tilde = np.fft.fft2(psi(grid_y, grid_x) * np.conj(psi(grid_y + qy, grid_x + qx)))
                wiener = np.conj(a_tilde) / (np.abs(a_tilde) ** 2 + eps)
                ramp = np.exp(2j * np.pi * (qy * m[:, None] + qx * m[None, :]) / (size * dk))

                def reads(values):
                    b = np.fft.fft2(on_grid(values)) * wiener
                    return np.array([np.fft.ifft2(b)[0, 0], (b * ramp).sum() / size**2])

                near = psi(k[:, 0], k[:, 1]) * np.conj(psi(k[:, 0] + qy, k[:, 1] + qx))
                far = psi(k[:, 0] - qy, k[:, 1] - qx) * np.conj(psi(k[:, 0], k[:, 1]))
                r = reads(g_all[iy, ix])
                if iy == 0 and ix == 0:  # one term: |O(0)|^2
                    c = np.full(2, r[0] / reads(near)[0])
                else:
                    response = np.stack([reads(near), reads(far)], 1)
                    c = np.linalg.solve(response.conj().T @ response + epsilon / 10 * np.eye(2),
                                        response.conj().T @ r)
            total[iy, ix] += c[1]
            count[iy, ix] += 1
            total[-iy % sy, -ix % sx] += np.conj(c[0])
            count[-iy % sy, -ix % sx] += 1
    estimate = total / np.maximum(count, 1)
    obj = np.fft.ifft2(estimate)
    phase = np.angle(obj * np.conj(obj.mean()))
    return phase - phase.mean()


def _factors(n):
    out, p = [1], 2
    while n > 1:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    return out


def _fixture_session(data=None):
    with np.load(FIXTURE) as npz:
        f = dict(npz)
    det = DetectorFit(center=tuple(f["detector_center"]), radius=float(f["alpha_mrad"] / f["detector_mrad_per_pixel"]),
                      mrad_per_pixel=float(f["detector_mrad_per_pixel"]))
    data = f["data"].astype(np.float64) if data is None else data
    s = Session(data, kv=float(f["kv"]), alpha_mrad=float(f["alpha_mrad"]), scan_step=float(f["scan_step"]),
                detector=det, backend="cpu")
    return s, f


def _scores(image, f, session):
    """(r with the projected potential low-passed to 2 alpha / lambda, r with the phase of the band-limited
    exp(i sigma V))."""
    freq = np.fft.fftfreq(image.shape[0], float(f["scan_step"]))
    band = np.hypot(freq[:, None], freq[None, :]) <= 2 * float(f["alpha_mrad"]) * 1e-3 / session.wavelength
    low = np.fft.ifft2(np.fft.fft2(f["truth_phase"]) * band).real
    return (np.corrcoef(image.ravel(), low.ravel())[0, 1],
            np.corrcoef(image.ravel(), f["band_limited_phase"].ravel())[0, 1])


def test_wdd_equals_the_textbook_route_in_float64():
    scan = simulate(amorphous_slices((48, 48), PIXEL, seed=3) * 8, pixel=PIXEL, stride=2, window=32, kv=KV,
                    alpha_mrad=ALPHA, aberrations=AB, dose=None, seed=1)
    s = Session(scan.data, kv=KV, alpha_mrad=ALPHA, scan_step=scan.scan_step, backend="cpu")
    image = s.image(AB, "wdd", epsilon=3e-3)
    dk = s.detector.mrad_per_pixel * 1e-3 / s.wavelength
    reference = _textbook_wdd(scan.data, s.bf_index, s.k, s.level, scan.scan_step, dk, AB, 3e-3)
    np.testing.assert_allclose(image, reference, rtol=0, atol=1e-9 * np.abs(reference).max())
    # in blocks of a few frequencies (the memory bound's path) the same image
    np.testing.assert_allclose(wdd_image(s, AB, epsilon=3e-3, block=7), image, rtol=0, atol=1e-12)


def test_wdd_on_abtem_srtio3_matches_the_projected_potential_and_beats_ssb():
    s, f = _fixture_session()
    ab = Aberrations(C10=float(f["C10"]))
    assert dose_from_counts(s) is None  # abTEM's intensities are not counts: the rule's floor, 1e-3
    wdd_low, wdd_band = _scores(s.image(ab, "wdd"), f, s)
    ssb_low, _ = _scores(s.image(ab, "ssb"), f, s)
    # measured 0.998 and 0.999; SSB 0.989; the band-limited object's own phase scores 0.997 on the first
    assert wdd_low >= 0.99 and wdd_band >= 0.995
    assert wdd_low > ssb_low + 0.005


@pytest.mark.parametrize("dose", [1e3, 1e5])
def test_wdd_with_its_dose_rule_under_poisson_noise(dose):
    clean, f = _fixture_session()
    step = float(f["scan_step"])
    counts = np.random.default_rng(7).poisson(f["data"].astype(np.float64) * dose * step**2).astype(np.float64)
    s, _ = _fixture_session(counts)
    assert dose_from_counts(s) == pytest.approx(dose, rel=0.05)  # the bright field holds ~98% of the electrons
    ab = Aberrations(C10=float(f["C10"]))
    ssb, _ = _scores(s.image(ab, "ssb"), f, s)
    obf, _ = _scores(s.image(ab, "obf"), f, s)
    wdd, _ = _scores(s.image(ab, "wdd"), f, s)
    # measured over three seeds: 1e3: SSB 0.30, OBF 0.69, WDD 0.76; 1e5: SSB 0.95, OBF 0.91, WDD 0.98
    assert wdd > ssb + (0.2 if dose < 1e4 else 0.01)
    if dose <= 1e3:
        assert obf > ssb + 0.2


def test_the_dose_rule():
    assert epsilon_for_dose(None) == 1e-3
    assert epsilon_for_dose(1e6) == pytest.approx(3e-3)
    assert epsilon_for_dose(1e3) == pytest.approx(3 / np.sqrt(1e3))
    assert epsilon_for_dose(1.0) == 0.3 and epsilon_for_dose(1e12) == 1e-3
    with pytest.raises(InputError, match="dose"):
        epsilon_for_dose(-5)


def test_wdd_refuses_what_it_cannot_do():
    s, f = _fixture_session()
    ab = Aberrations(C10=float(f["C10"]))
    with pytest.raises(ValueError, match="epsilon"):
        s.image(ab, "wdd", epsilon=2.0)
    with pytest.raises(ValueError, match="epsilon belongs to method='wdd'"):
        s.image(ab, "ssb", epsilon=1e-2)
    calls = []
    s.image(ab, "wdd", progress=lambda stage, done, total, m: calls.append((stage, done, total)))
    assert calls and calls[-1] == ("WDD", 40 * 21, 40 * 21) and all(c[0] == "WDD" for c in calls)
    with pytest.raises(InterruptedError, match="stopped by its progress callback"):
        wdd_image(s, ab, block=100, progress=lambda *a: False)
    k = np.array([[0.0, 0.0], [0.1, 0.0], [0.0, 0.137]])  # not on one lattice of step 0.1
    with pytest.raises(InputError, match="lattice"):
        Lattice(k, 0.1, 1.0)


def test_cli_ssb_image_method_wdd(tmp_path):
    import h5py

    from qora.cli import cli

    s, f = _fixture_session()
    path = tmp_path / "sto.npy"
    np.save(path, f["data"])
    common = ["ssb", "image", str(path), "--kv", "300", "--semiangle", "25", "--scan-step", str(float(f["scan_step"])),
              "--c10", str(float(f["C10"])), "--backend", "cpu"]
    result = CliRunner().invoke(cli, common + ["--method", "wdd", "--epsilon", "0.001", "--out", str(tmp_path / "w.h5")])
    assert result.exit_code == 0, result.output
    assert "WDD: epsilon 0.001 (given)" in result.output
    with h5py.File(tmp_path / "w.h5") as h:
        assert h.attrs["method"] == "wdd"
        low, _ = _scores(h["phase"][...], f, s)
    assert low > 0.98  # the detector fitted from the data here, not given
    result = CliRunner().invoke(cli, common + ["--method", "wdd", "--out", str(tmp_path / "d.h5")])
    assert "the data are not counts: the rule's floor" in result.output and "epsilon 0.001" in result.output
    result = CliRunner().invoke(cli, common + ["--epsilon", "0.01", "--out", str(tmp_path / "e.h5")])
    assert result.exit_code == 2 and "give it with --method wdd" in result.output
