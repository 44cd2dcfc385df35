"""Optimum bright field (qora.ssb.obf, ``Session.image(method="obf")``) against a float64 NumPy transcription of
the filter on the raw 4D data, and its claimed advantage over SSB under Poisson noise."""

import math

import numpy as np
import pytest
from click.testing import CliRunner

from qora.ssb import Aberrations, Session, amorphous_slices, scan_truth, simulate
from qora.ssb.optics import aperture, chi, wavelength

PIXEL, KV, ALPHA = 0.2, 300.0, 20.0
AB = Aberrations(C10=150.0, C12=(20.0, 0.5))


def _reference_obf(data, bf_index, k, level, scan_step, rotation, aberrations):
    """Float64 NumPy, on the full FFT plane: each bright-field pixel's spectrum G(Q, k) of I / level, Gamma from
    the documented formula, the matched filter conj(Gamma), its noise normalised by T = sqrt(sum |Gamma|^2), the
    image scaled by 1 / max T."""
    sy, sx = data.shape[:2]
    lam = wavelength(KV)
    bright = data.reshape(sy, sx, -1)[..., bf_index].astype(np.float64) / level
    g = np.fft.fft2(bright, axes=(0, 1))
    fy = np.fft.fftfreq(sy, scan_step)[:, None, None] * np.ones((1, sx, 1))
    fx = np.fft.fftfreq(sx, scan_step)[None, :, None] * np.ones((sy, 1, 1))
    c, s = math.cos(rotation), math.sin(rotation)
    qy, qx = c * fy + s * fx, -s * fy + c * fx
    ky, kx = k[:, 0], k[:, 1]

    def psi(y, x):
        return aperture(x, y, ALPHA, lam) * np.exp(-1j * chi(x, y, aberrations, lam))

    gamma = np.conj(psi(ky, kx)) * psi(ky - qy, kx - qx) - psi(ky, kx) * np.conj(psi(ky + qy, kx + qx))
    transfer = np.sqrt((np.abs(gamma) ** 2).sum(-1))
    spectrum = np.where(transfer > 0, (np.conj(gamma) * g).sum(-1) / (1j * np.where(transfer > 0, transfer, 1)),
                        0)
    spectrum[0, 0] = 0
    spectrum[sy // 2] = 0  # even sides: the Nyquist bins out
    spectrum[:, sx // 2] = 0
    return np.fft.ifft2(spectrum / transfer.max()).real


def test_obf_equals_a_float64_transcription_of_the_filter():
    scan = simulate(amorphous_slices((64, 64), PIXEL, seed=2), pixel=PIXEL, stride=2, window=32, kv=KV,
                    alpha_mrad=ALPHA, aberrations=AB, dose=2e5, seed=1)
    s = Session(scan.data, kv=KV, alpha_mrad=ALPHA, scan_step=scan.scan_step, rotation=0.2, backend="cpu")
    image = s.image(AB, "obf")
    reference = _reference_obf(scan.data, s.bf_index, s.k, s.level, scan.scan_step, 0.2, AB)
    np.testing.assert_allclose(image, reference, rtol=0, atol=1e-10 * np.abs(reference).max())
    # a dead bright-field pixel takes its share of the signal away, and nothing more (the weights are the model's)
    dead = scan.data.copy()
    row, col = np.unravel_index(s.bf_index[len(s.bf_index) // 2], dead.shape[2:])
    dead[..., row, col] = 0
    s_dead = Session(dead, kv=KV, alpha_mrad=ALPHA, scan_step=scan.scan_step, rotation=0.2, detector=s.detector,
                     backend="cpu")
    assert np.corrcoef(s_dead.image(AB, "obf").ravel(), image.ravel())[0, 1] > 0.99
    assert 0.9 < s_dead.image(AB, "obf").std() / image.std() < 1.1


@pytest.fixture(scope="module")
def film():
    slices = amorphous_slices((128, 128), PIXEL, seed=1)
    clean = simulate(slices, pixel=PIXEL, stride=2, window=64, kv=KV, alpha_mrad=ALPHA, aberrations=AB)
    noisy = simulate(slices, pixel=PIXEL, stride=2, window=64, kv=KV, alpha_mrad=ALPHA, aberrations=AB, dose=1e4,
                     seed=3)
    return clean, noisy, scan_truth(clean)


def test_obf_beats_ssb_under_noise_and_ssb_wins_without(film):
    """OBF keeps weak frequencies weak (its noise is white); SSB equalises every frequency's transfer (an
    unbiased phase whose noise grows where the transfer is weak). Noise-free SSB is the closer image; at 1e4
    e/A^2 on this weak film (phase std 0.008 rad) OBF is."""
    clean, noisy, truth = film
    pearson = {}
    for name, scan in (("clean", clean), ("noisy", noisy)):
        s = Session(scan.data, kv=KV, alpha_mrad=ALPHA, scan_step=scan.scan_step, backend="cpu")
        for method in ("ssb", "obf"):
            pearson[name, method] = np.corrcoef(s.image(AB, method).ravel(), truth.ravel())[0, 1]
    assert pearson["clean", "ssb"] > pearson["clean", "obf"] > 0.85
    assert pearson["noisy", "obf"] > pearson["noisy", "ssb"] + 0.05


def test_obf_through_the_cli(tmp_path, film):
    import h5py

    from qora.cli import cli
    from qora.ssb import read_dataset, write_dataset

    clean, _, truth = film
    path = tmp_path / "scan.h5"
    write_dataset(path, clean.data, kv=KV, alpha_mrad=ALPHA, scan_step=clean.scan_step, truth=truth)
    out = CliRunner().invoke(cli, ["ssb", "image", str(path), "--method", "obf", "--c10", "150", "--c12", "20",
                                   "--c12-angle", str(math.degrees(0.5)), "--backend", "cpu", "--out",
                                   str(tmp_path / "o.h5")])
    assert out.exit_code == 0, out.output
    data, _ = read_dataset(path)
    s = Session(data, kv=KV, alpha_mrad=ALPHA, scan_step=clean.scan_step, backend="cpu")
    with h5py.File(tmp_path / "o.h5") as f:
        assert f.attrs["method"] == "obf"
        np.testing.assert_allclose(f["phase"][...], s.image(AB, "obf"), rtol=0, atol=1e-6)
