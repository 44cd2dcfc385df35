"""Calibration on CUDA: an anisotropic scan (step_y != step_x) and descan-corrected (lazy) data give
on the device the G, images and fit of the CPU session."""

import numpy as np
import pytest

from qora.ssb import Aberrations, Session, amorphous_slices, fit, simulate
from qora.ssb.descan import correct_descan, fit_descan

pytestmark = pytest.mark.gpu

AB = Aberrations(C10=-90.0, C12=(25.0, 0.5))


@pytest.fixture(scope="module")
def anisotropic(gpu_module):
    sim = simulate(amorphous_slices((48, 48), 0.2, seed=3), pixel=0.2, stride=1, window=48, alpha_mrad=20.0,
                   aberrations=AB)
    kw = dict(kv=300.0, alpha_mrad=20.0, scan_step=(0.4, 0.2), rotation=0.2, chunk=100)
    cpu = Session(sim.data[::2], backend="cpu", **kw)
    gpu = Session(sim.data[::2], backend="cuda", detector=cpu.detector, precision="double", **kw)
    return cpu, gpu


def _rel(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


@pytest.mark.parametrize("method,kw", [("ssb", {}), ("thick", dict(thickness=60.0, tilt=(0.003, -0.002))),
                                       ("parallax", {}), ("parallax", dict(upsample=2)),
                                       ("parallax", dict(upsample=3))],
                         ids=["ssb", "thick", "parallax", "parallax-up2", "parallax-up3"])
def test_anisotropic_images_match_the_cpu(anisotropic, method, kw):
    cpu, gpu = anisotropic
    assert _rel(gpu.host_G(), cpu.G) < 1e-12
    a, b = gpu.image(AB, method, **kw), cpu.image(AB, method, **kw)
    assert a.shape == b.shape
    assert _rel(a, b) < 1e-5


def test_anisotropic_fit_matches_the_cpu(anisotropic):
    cpu, gpu = anisotropic
    fits = [fit(s, rotation=0.2, tilt=False, trials=48, seed=0)["standard"] for s in (cpu, gpu)]
    for name in ("C10", "C12a", "C12b"):
        assert fits[1]["parameters"][name] == pytest.approx(fits[0]["parameters"][name], abs=0.05)
    assert fits[1]["agreement"] == pytest.approx(fits[0]["agreement"], abs=1e-6)


def test_descan_corrected_data_stream_to_the_device(gpu_module):
    pytest.importorskip("dask", reason="correct_descan keeps its output as a dask array: the dask extra")
    sim = simulate(amorphous_slices((64, 64), 0.2, seed=1), pixel=0.2, stride=2, window=48, alpha_mrad=20.0,
                   aberrations=Aberrations(C10=80.0))
    sy, sx = sim.data.shape[:2]
    y, x = np.meshgrid(np.linspace(-1, 1, sy), np.linspace(-1, 1, sx), indexing="ij")
    shifts = np.stack([0.8 * y + 0.3, 1.1 * x], -1)
    ky, kx = np.fft.fftfreq(48)[:, None], np.fft.fftfreq(48)[None, :]
    ramp = np.exp(-2j * np.pi * (shifts[..., 0, None, None] * ky + shifts[..., 1, None, None] * kx))
    drifted = np.fft.ifft2(np.fft.fft2(sim.data, axes=(2, 3)) * ramp, axes=(2, 3)).real
    corrected = correct_descan(drifted, fit_descan(drifted))
    kw = dict(kv=300.0, alpha_mrad=20.0, scan_step=sim.scan_step)
    cpu = Session(corrected, backend="cpu", **kw)
    gpu = Session(corrected, backend="cuda", detector=cpu.detector, precision="double", **kw)
    assert _rel(gpu.host_G(), cpu.G) < 1e-12
    assert _rel(gpu.image(Aberrations(C10=80.0)), cpu.image(Aberrations(C10=80.0))) < 1e-6
