"""Exact gridding on the device (qora.holo.gridding_cuda) against the host's (ducc0): the mapper's data, and
the reconstructions of each method on a Born cell whose nucleus only the exact gridding keeps."""

import numpy as np
import pytest

from qora import holo
from qora.holo.geometry import Geometry
from qora.holo.phantoms import Sphere, born_ratio
from qora.holo.plans import MappingPlan

pytestmark = pytest.mark.gpu

MEDIUM = 1.333
CELL = [Sphere((0.3, 0.0, 0.2), 2.6, 1.365), Sphere((0.0, 0.2, 0.0), 1.3, float(np.sqrt(MEDIUM**2 + 1.360**2
                                                                                          - 1.365**2)))]


@pytest.fixture(scope="module")
def cell():
    angles = np.linspace(0, 2 * np.pi, 90, endpoint=False)
    g = Geometry(wavelength=0.65, medium_index=MEDIUM, pixel=0.2, n=40, na_detection=1.2, angles=angles)
    return g, 1 + born_ratio(CELL, g)


def test_the_device_spreads_what_the_host_transforms():
    cp = pytest.importorskip("cupy")
    from qora.holo.gridding_cuda import ExactMapper

    n = 24
    g = Geometry(wavelength=0.65, medium_index=MEDIUM, pixel=0.2, n=n, na_detection=1.2,
                 angles=np.linspace(0, 2 * np.pi, 20, endpoint=False), axis=(0.2, 0.98, 0.0))
    plan = MappingPlan(g, "exact")
    rng = np.random.default_rng(3)
    phi = rng.standard_normal((g.count, n, n)) + 1j * rng.standard_normal((g.count, n, n))
    spectra = cp.fft.fft2(cp.asarray(phi.astype(np.complex64)))  # the device's: of the centre-origin fields
    sums, hits = cp.empty(n**3, cp.complex64), cp.empty(n**3, cp.int32)
    ExactMapper(plan)(spectra, sums, hits)
    k = np.arange(n) % 2
    sign = 1 - 2 * ((k[:, None, None] + k[None, :, None] + k[None, None, :]) % 2)  # the device's centre origin
    want = (plan(phi) * sign).reshape(-1)
    assert np.array_equal(hits.get(), plan.hits)
    assert np.abs(sums.get() - want).max() < 2e-5 * np.abs(want).max()


CASES = [dict(method="plain"), dict(method="gp", iterations=15, r2c=True), dict(method="gp", iterations=15, r2c=False),
         dict(method="tv", iterations=8, tv_inner=5, tv_weight=3e-3)]


@pytest.mark.parametrize("options", CASES, ids=lambda o: "-".join(f"{k}={v}" for k, v in o.items()))
def test_exact_gridding_matches_cpu(cell, options):
    g, ratio = cell
    cpu = holo.reconstruct(ratio, g, backend="cpu", approximation="born", gridding="exact", **options).index
    gpu = holo.reconstruct(ratio, g, backend="cuda", approximation="born", gridding="exact", **options)
    assert gpu.info["backend"] == "cuda" and gpu.info["gridding"] == "exact"
    assert np.linalg.norm(gpu.index - cpu) < 1e-4 * np.linalg.norm(cpu - MEDIUM)


def test_the_default_tv_on_the_device_keeps_the_nucleus(cell):
    g, ratio = cell
    z = (np.arange(g.n) - g.n // 2) * g.pixel
    zz, yy, xx = np.meshgrid(z, z, z, indexing="ij")
    r_nucleus = np.sqrt(zz**2 + (yy - 0.2) ** 2 + xx**2)
    cytoplasm = (np.sqrt((zz - 0.3) ** 2 + yy**2 + (xx - 0.2) ** 2) < 2.0) & (r_nucleus > 1.9)
    result = holo.reconstruct(ratio, g, backend="cuda", method="tv", tv_weight="auto", approximation="born")
    index = result.index
    assert result.info["gridding"] == "exact"
    assert index[cytoplasm].mean() - index[r_nucleus < 0.7].mean() == pytest.approx(0.005, rel=0.2)
