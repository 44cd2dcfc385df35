"""The field stages of issue 24 on CUDA against the CPU: every filter shape in the device crop, the
angular-spectrum refocus and autofocus, and the phase background fit (CuPy arrays in, CuPy out)."""

import numpy as np
import pytest

from qora import holo
from qora.backend import resolve
from qora.holo import background as B
from qora.holo import fields as F
from qora.holo import phantoms as P
from qora.holo import reference as R
from qora.holo import refocus as RF
from qora.holo.filters import FILTERS

pytestmark = pytest.mark.gpu

OPTICS = dict(wavelength=R.WAVELENGTH, medium_index=R.MEDIUM_INDEX, pixel=R.PIXEL)


@pytest.fixture(scope="module")
def cp(gpu_module):
    return resolve("cuda").xp


@pytest.mark.parametrize("name", FILTERS)
def test_every_filter_in_the_device_crop_matches_cpu(name):
    g = R.geometry(64)
    big, hp = 2 * g.n, g.pixel / 2
    phi = P.born_ratio([P.Sphere(radius=1.0, index=1.34)], g, n=big, pixel=hp)
    holos = P.holograms(1 + phi, g, R.carrier(big, hp), hologram_pixel=hp)
    sideband = F.find_sideband(holos[0], hp)
    kw = dict(hologram_pixel=hp, n=g.n, pupil_frequency=g.pupil_frequency, filter=name)
    cpu = holo.extract_fields(holos, sideband, backend="cpu", **kw)
    gpu = holo.extract_fields(holos, sideband, backend="cuda", **kw)
    assert gpu.shape == cpu.shape
    assert np.abs(gpu - cpu).max() < 1e-4 * np.abs(cpu).max()  # complex64 on the device, as for the disk


def _fields():
    x = (np.arange(96) - 48) * R.PIXEL
    y, x = np.meshgrid(x, x, indexing="ij")
    base = 1 + (0.3 + 0.2j) * np.exp(-(x**2 + y**2) / 1.0)
    return np.stack([RF.propagate(base, d, **OPTICS) for d in (1.5, -2.0)])


def test_propagation_matches_cpu(cp):
    u = _fields()
    d = np.array([0.7, -1.3])
    cpu = RF.propagate(u, d, **OPTICS)
    gpu = RF.propagate(cp.asarray(u), cp.asarray(d), **OPTICS)
    assert isinstance(gpu, cp.ndarray)
    np.testing.assert_allclose(gpu.get(), cpu, atol=1e-10)


def test_autofocus_matches_cpu(cp):
    u = _fields()
    cpu = RF.autofocus(u, interval=(-4, 4), metric="compactness", **OPTICS)
    gpu = RF.autofocus(cp.asarray(u), interval=(-4, 4), metric="compactness", **OPTICS)
    phase = np.exp(1j * np.angle(u))  # the default metric too (the values differ, the search is the same)
    np.testing.assert_allclose(RF.autofocus(cp.asarray(phase), interval=(-4, 4), **OPTICS),
                               RF.autofocus(phase, interval=(-4, 4), **OPTICS), atol=1e-3)
    np.testing.assert_allclose(gpu, cpu, atol=1e-3)
    np.testing.assert_allclose(cpu, [-1.5, 2.0], atol=0.037)


@pytest.mark.parametrize("profile", ["offset", "tilt", "poly2"])
def test_background_fit_matches_cpu(cp, profile):
    y, x = np.meshgrid(np.linspace(-1, 1, 50), np.linspace(-1, 1, 70), indexing="ij")
    phase = 2.0 * np.exp(-(x**2 + y**2) / 0.05) + 0.3 + 0.4 * x - 0.2 * y + 0.1 * x * y
    mask = ~B.object_mask(phase - 0.3 - 0.4 * x + 0.2 * y - 0.1 * x * y, threshold=1e-3)
    gmask = ~B.object_mask(cp.asarray(phase - 0.3 - 0.4 * x + 0.2 * y - 0.1 * x * y), threshold=1e-3)
    np.testing.assert_array_equal(gmask.get(), mask)
    cpu = B.correct_background(phase, profile=profile, mask=mask)
    gpu = B.correct_background(cp.asarray(phase), profile=profile, mask=gmask)
    assert isinstance(gpu, cp.ndarray)
    np.testing.assert_allclose(gpu.get(), cpu, atol=1e-9)
