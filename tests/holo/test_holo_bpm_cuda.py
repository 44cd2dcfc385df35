"""The beam propagation model on CUDA against the CPU (float32 on both sides)."""

import numpy as np
import pytest

from qora.holo import phantoms as P
from qora.holo import reference as R
from qora.holo import bpm_reconstruct  # the api: backend="cpu" by default, "cuda" on the device
from qora.holo.bpm import bpm_forward, bpm_gradient, bpm_vjp
from qora.holo.geometry import Geometry, cone_illuminations

pytestmark = pytest.mark.gpu


def _geometry(n=32, per_cone=6):
    df = 1.0 / (n * R.PIXEL)
    ill = np.concatenate([np.zeros((1, 2)), cone_illuminations(0.8, R.WAVELENGTH, per_cone, include_normal=False)])
    return Geometry(R.WAVELENGTH, R.MEDIUM_INDEX, R.PIXEL, n, R.NA_DETECTION, illuminations=np.round(ill / df) * df)


def _rel(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


@pytest.fixture(scope="module")
def case():
    g = _geometry()
    spheres = [P.Sphere((0.0, 0.2, -0.3), 0.8, 1.38), P.Sphere((0.5, -0.6, 0.4), 0.4, 1.36)]
    x = (P.render_spheres(spheres, g.n, g.pixel, g.medium_index, supersample=3) - g.medium_index).astype(np.float32)
    return g, x


def test_forward_matches_cpu(case):
    from qora.holo import bpm_cuda

    g, x = case
    cpu = bpm_forward(x, g)
    gpu = bpm_cuda.bpm_forward(x, g)
    assert gpu.dtype == np.complex64 and gpu.shape == cpu.shape
    assert _rel(gpu - 1, cpu - 1) < 1e-4  # on the scattered part, not the unit background
    # a thicker grid of slices than the lateral size
    x2 = np.concatenate([np.zeros((8, g.n, g.n), np.float32), x], axis=0)
    assert _rel(bpm_cuda.bpm_forward(x2, g) - 1, bpm_forward(x2, g) - 1) < 1e-4


def test_adjoint_and_gradient_match_cpu(case):
    from qora.holo import bpm_cuda

    g, x = case
    rng = np.random.default_rng(0)
    r = (rng.standard_normal((g.count, g.n, g.n)) + 1j * rng.standard_normal((g.count, g.n, g.n))).astype(np.complex64)
    assert _rel(bpm_cuda.bpm_vjp(x, r, g), bpm_vjp(x, r, g)) < 1e-4
    data = bpm_forward(np.float32(0.9) * x, g)
    cpu, cpu_loss = bpm_gradient(x, data, g, return_loss=True)
    gpu, gpu_loss = bpm_cuda.bpm_gradient(x, data, g, return_loss=True)
    assert _rel(gpu, cpu) < 1e-4 and gpu_loss == pytest.approx(cpu_loss, rel=1e-4)
    part = bpm_cuda.bpm_gradient(x, data, g, index=slice(2, 5))
    assert _rel(part, bpm_gradient(x, data, g, index=slice(2, 5))) < 1e-4


def test_chunked_gradient_equals_the_unchunked_one(case):
    from qora.holo import bpm_cuda

    g, x = case
    data = bpm_forward(np.float32(0.9) * x, g)
    whole = bpm_cuda.bpm_gradient(x, data, g, chunk=g.count)
    for chunk in (1, 2, 3):
        np.testing.assert_allclose(bpm_cuda.bpm_gradient(x, data, g, chunk=chunk), whole, rtol=0,
                                   atol=1e-6 * np.abs(whole).max())


@pytest.mark.parametrize("options", [dict(), dict(batch=3), dict(tv_weight=1e-4)], ids=["fista", "batches", "tv"])
def test_inversion_matches_cpu(case, options):
    g, x = case
    data = bpm_forward(x, g)
    start = np.zeros_like(x)
    cpu = bpm_reconstruct(data, g, start=start, iterations=6, backend="cpu", **options)
    gpu = bpm_reconstruct(data, g, start=start, iterations=6, backend="cuda", **options)
    assert gpu.info["backend"] == "cuda"
    assert _rel(gpu.index - R.MEDIUM_INDEX, cpu.index - R.MEDIUM_INDEX) < 1e-3
    np.testing.assert_allclose(gpu.info["loss"], cpu.info["loss"], rtol=1e-3)


def test_default_start_and_errors(case):
    g, x = case
    data = bpm_forward(x, g)
    res = bpm_reconstruct(data, g, iterations=3, backend="cuda", chunk=4)
    assert res.index.shape == (g.n,) * 3 and res.info["chunk"] == 4
    assert res.info["loss"][-1] < res.info["loss"][0]
    with pytest.raises(TypeError, match="CUDA backend only"):
        bpm_reconstruct(data, g, iterations=1, start=np.zeros_like(x), chunk=2, backend="cpu")
    with pytest.raises(ValueError, match="contrast"):
        from qora.holo import bpm_cuda

        bpm_cuda.bpm_forward(x[:, :5], g)


@pytest.mark.parametrize("entry", ["api", "bpm_cuda"])
def test_default_start_stays_on_the_device(case, monkeypatch, entry):
    """The default start (Rytov + GP on CUDA) reaches the CUDA BPM as a device array, and the inversion from it
    is the one from the same start passed through the host."""
    from qora.holo import bpm as B
    from qora.holo import bpm_cuda, cuda_pipeline, reconstruct

    g, x = case
    data = bpm_forward(x, g)
    host_start = B.rytov_start(data, g, g.n, reconstruct=lambda d, gg, o: reconstruct(d, gg, o, backend="cuda"))
    assert isinstance(host_start, np.ndarray)
    explicit = bpm_reconstruct(data, g, start=host_start, iterations=3, backend="cuda")
    seen, solve = [], cuda_pipeline.reconstruct

    def spy(*args, **kw):
        result = solve(*args, **kw)
        seen.append(type(result.index).__module__.split(".")[0])
        return result

    monkeypatch.setattr(cuda_pipeline, "reconstruct", spy)
    monkeypatch.setattr(bpm_cuda, "cuda_reconstruct", spy)
    if entry == "api":
        default = bpm_reconstruct(data, g, iterations=3, backend="cuda")
    else:
        default = bpm_cuda.bpm_reconstruct(data, g, iterations=3)
    assert seen == ["cupy"]
    assert _rel(default.index - g.medium_index, explicit.index - g.medium_index) < 1e-6
