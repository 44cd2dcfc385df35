"""The beam propagation model in the rotation geometry on CUDA against the CPU path (float32 on both sides).

The inputs are identical (the same float32 volume, the same host tables and pose matrices); the
differences are the order of float sums (cuFFT against SciPy's FFT, the atomics of the adjoint turn),
so the tolerances are those of the scanning BPM's parity tests (test_holo_bpm_cuda.py): 1e-4 relative
on fields and gradients, 1e-3 on an inversion of 6 steps.
"""

import numpy as np
import pytest

from qora.holo import bpm_reconstruct  # the api: backend="cpu" by default, "cuda" on the device
from qora.holo import phantoms as P
from qora.holo.bpm import bpm_forward, bpm_gradient, bpm_vjp
from qora.holo.geometry import Geometry, axis_rotation, rotation_axis
from qora.holo.rotate import rotate, rotate_adjoint

pytestmark = pytest.mark.gpu

N, PIXEL = 32, 0.15


def _rel(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


@pytest.fixture(scope="module")
def case():
    angles = np.sort(np.random.default_rng(2).uniform(0, 2 * np.pi, 5))
    g = Geometry(0.532, 1.333, PIXEL, N, 1.2, angles=angles, axis=rotation_axis(0.2), rotation_sense=-1)
    spheres = [P.Sphere((0.3, -0.4, 0.6), 0.9, 1.35), P.Sphere((-0.6, 0.5, -0.4), 0.4, 1.36)]
    x = (P.render_spheres(spheres, N, PIXEL, g.medium_index, supersample=3) - g.medium_index).astype(np.float32)
    return g, x


def test_rotation_kernels_match_the_host_reference():
    from qora.holo.cuda_stages import cupy
    from qora.holo.kernels import rotate as KR

    cp = cupy()
    rng = np.random.default_rng(0)
    v = rng.standard_normal((14, 20, 22)).astype(np.float32)
    for angle in (0.0, 0.7, -2.3):
        r = axis_rotation(rotation_axis(0.2, 0.3), angle)
        out = cp.empty(v.shape, cp.float32)
        KR.rotate(volume=cp.asarray(v), rotation=r, out=out)
        np.testing.assert_allclose(out.get(), rotate(v, r), rtol=0, atol=1e-5 * np.abs(v).max())
        back = cp.zeros(v.shape, cp.float32)
        KR.rotate_adjoint(lab=cp.asarray(v), rotation=r, out=back)
        np.testing.assert_allclose(back.get(), rotate_adjoint(v, r), rtol=0, atol=1e-5 * np.abs(v).max())


def test_forward_and_gradient_match_cpu(case):
    from qora.holo import bpm_cuda

    g, x = case
    assert _rel(bpm_cuda.bpm_forward(x, g) - 1, bpm_forward(x, g) - 1) < 1e-4
    rng = np.random.default_rng(1)
    r = (rng.standard_normal((g.count, N, N)) + 1j * rng.standard_normal((g.count, N, N))).astype(np.complex64)
    assert _rel(bpm_cuda.bpm_vjp(x, r, g), bpm_vjp(x, r, g)) < 1e-4
    data = bpm_forward(np.float32(0.9) * x, g)
    cpu, cpu_loss = bpm_gradient(x, data, g, return_loss=True)
    gpu, gpu_loss = bpm_cuda.bpm_gradient(x, data, g, return_loss=True)
    assert _rel(gpu, cpu) < 1e-4 and gpu_loss == pytest.approx(cpu_loss, rel=1e-4)
    part = bpm_cuda.bpm_gradient(x, data, g, index=slice(1, 4))
    assert _rel(part, bpm_gradient(x, data, g, index=slice(1, 4))) < 1e-4


@pytest.mark.parametrize("options", [dict(), dict(batch=2), dict(tv_weight=1e-4)], ids=["fista", "batches", "tv"])
def test_inversion_matches_cpu(case, options):
    g, x = case
    data = bpm_forward(x, g)
    start = np.zeros_like(x)
    cpu = bpm_reconstruct(data, g, start=start, iterations=6, backend="cpu", **options)
    gpu = bpm_reconstruct(data, g, start=start, iterations=6, backend="cuda", **options)
    assert gpu.info["backend"] == "cuda" and gpu.info["chunk"] == 1
    assert _rel(gpu.index - g.medium_index, cpu.index - g.medium_index) < 1e-3
    np.testing.assert_allclose(gpu.info["loss"], cpu.info["loss"], rtol=1e-3)
