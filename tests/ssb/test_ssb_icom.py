"""The integrated centre of mass (qora.ssb.com, ``Session.image(method="icom")``) against a float64 NumPy
integration of the centre of mass measured on the raw 4D data, and against the simulated phase."""

import math

import numpy as np
import pytest
from click.testing import CliRunner

from qora.ssb import Aberrations, Session, amorphous_slices, rotate_detector, scan_truth, simulate

PIXEL, KV, ALPHA = 0.2, 300.0, 20.0


@pytest.fixture(scope="module")
def focused():
    """An in-focus scan of a weak amorphous film (iCoM needs no defocus)."""
    return simulate(amorphous_slices((128, 128), PIXEL, seed=1), pixel=PIXEL, stride=2, window=64, kv=KV,
                    alpha_mrad=ALPHA)


def _reference_icom(data, bf_index, k, scan_step, rotation):
    """Float64 NumPy, from the 4D data: <k>(R) over the bright-field pixels (their k in the detector's axes),
    then the least-squares integral (Q . C) / (i |Q|^2) on the full FFT grid, the scan's frequencies turned into
    the detector's axes by ``rotation``; Q = 0 and even sides' Nyquist bins out."""
    sy, sx = data.shape[:2]
    bright = data.reshape(sy, sx, -1)[..., bf_index].astype(np.float64)
    total = bright.sum(-1)
    com = [(bright * k[:, axis]).sum(-1) / total for axis in (0, 1)]
    fy = np.fft.fftfreq(sy, scan_step)[:, None] * np.ones((1, sx))
    fx = np.fft.fftfreq(sx, scan_step)[None, :] * np.ones((sy, 1))
    c, s = math.cos(rotation), math.sin(rotation)
    qy, qx = c * fy + s * fx, -s * fy + c * fx
    dot = qy * np.fft.fft2(com[0]) + qx * np.fft.fft2(com[1])
    q2 = qy**2 + qx**2
    spectrum = np.where(q2 > 0, dot / (1j * np.where(q2 > 0, q2, 1.0)), 0)
    if sy % 2 == 0:
        spectrum[sy // 2] = 0
    if sx % 2 == 0:
        spectrum[:, sx // 2] = 0
    return np.fft.ifft2(spectrum).real


def test_icom_equals_a_float64_integration_of_the_measured_centre_of_mass(focused):
    rotation = 0.3  # the frames differ: the scan's frequencies are turned into the detector's axes
    data = rotate_detector(focused.data, rotation)
    s = Session(data, kv=KV, alpha_mrad=ALPHA, scan_step=focused.scan_step, rotation=rotation, backend="cpu")
    image = s.image(method="icom")
    reference = _reference_icom(data, s.bf_index, s.k, focused.scan_step, rotation)
    assert image.shape == focused.data.shape[:2]
    np.testing.assert_allclose(image, reference, rtol=0, atol=1e-10 * np.abs(reference).max())


def test_icom_sees_the_phase_through_the_probe_and_the_rotation_scales_it(focused):
    truth = scan_truth(focused)
    s = Session(focused.data, kv=KV, alpha_mrad=ALPHA, scan_step=focused.scan_step, backend="cpu")
    right = s.image(method="icom")
    assert np.corrcoef(right.ravel(), truth.ravel())[0, 1] >= 0.98  # measured 0.994
    # the phase blurred by the probe's intensity: weaker than the band-limited phase, never stronger
    assert 0.5 * truth.std() < right.std() < truth.std()  # measured 0.75
    # a detector turned by theta, imaged with the rotation given and with it left at 0: <k> keeps cos(theta) of
    # its part along Q (the integral drops the rest), so the second image is cos(theta) times the first; at 90
    # degrees nothing is left
    for degrees in (40.0, 90.0):
        theta = math.radians(degrees)
        turned = rotate_detector(focused.data, theta)
        given, left = (Session(turned, kv=KV, alpha_mrad=ALPHA, scan_step=focused.scan_step, rotation=r,
                               backend="cpu").image(method="icom") for r in (theta, 0.0))
        assert np.corrcoef(given.ravel(), truth.ravel())[0, 1] >= 0.98
        projection = float((left * given).sum() / (given * given).sum())
        assert projection == pytest.approx(math.cos(theta), abs=0.01)  # measured 0.764 (cos 40 = 0.766), 0.001
    with pytest.raises(ValueError, match="'icom'"):
        s.image(method="ptycho")
    with pytest.raises(ValueError, match="upsample"):
        s.image(method="icom", upsample=2)
    with pytest.raises(ValueError, match="no aberrations"):
        s.image(Aberrations(C10=50.0), "icom")


def test_icom_through_the_cli(tmp_path, focused):
    import h5py

    from qora.cli import cli
    from qora.ssb import read_dataset, write_dataset

    path = tmp_path / "scan.h5"
    write_dataset(path, focused.data, kv=KV, alpha_mrad=ALPHA, scan_step=focused.scan_step,
                  truth=scan_truth(focused))
    out = CliRunner().invoke(cli, ["ssb", "image", str(path), "--method", "icom", "--backend", "cpu", "--out",
                                   str(tmp_path / "i.h5")])
    assert out.exit_code == 0, out.output
    assert "icom:" in out.output and "correlation with the simulated phase" in out.output
    data, _ = read_dataset(path)
    s = Session(data, kv=KV, alpha_mrad=ALPHA, scan_step=focused.scan_step, backend="cpu")
    with h5py.File(tmp_path / "i.h5") as f:
        assert f.attrs["method"] == "icom"
        np.testing.assert_allclose(f["phase"][...], s.image(method="icom"), rtol=0, atol=1e-6)
    out = CliRunner().invoke(cli, ["ssb", "image", str(path), "--method", "icom", "--c10", "50", "--out",
                                   str(tmp_path / "j.h5")])
    assert out.exit_code == 2 and "takes no aberrations" in out.output
