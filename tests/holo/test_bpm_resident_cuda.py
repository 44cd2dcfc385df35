"""The BPM's fused_resident variant (the slice loop in one thread-block cluster per illumination, the
field on chip) on the GPU: the device API at 256^2, its bench rows and what it refuses. Its fields,
adjoint and gradient against the cuFFT variant and the CPU at 128^2 and 256^2, the inversion and the
command line are the parametrized tests of test_bpm_fused_cuda.py."""

import numpy as np
import pytest

from qora.holo.bpm import bpm_forward, bpm_gradient
from qora.io.errors import InputError

from test_bpm_fused_cuda import NZ, _contrast, _geometry, _rel

pytestmark = pytest.mark.gpu


def test_device_forward_and_gradient_at_256():
    from qora.holo.bpm_cuda import BpmDevice
    from qora.holo.bpm_resident import ResidentSteps
    from qora.holo.cuda_stages import cupy
    from qora.holo.plans import bpm_tables

    cp = cupy()
    g, x = _geometry(256), _contrast(256)
    dev = BpmDevice(g, bpm_tables(g, NZ), variant="fused_resident")
    assert isinstance(dev.fused, ResidentSteps) and dev.fused.cluster == 8
    dev.set_contrast(cp.asarray(x))
    out = cp.empty((g.count, g.n, g.n), cp.complex64)
    dev.forward(out)
    assert _rel(out.get() - 1, bpm_forward(x, g) - 1) < 1e-4
    data = cp.asarray(bpm_forward(np.float32(0.9) * x, g), cp.complex64)
    grad, loss = dev.reverse(data)  # the sums over the illuminations; bpm_gradient takes the mean
    cpu, cpu_loss = bpm_gradient(x, data.get(), g, return_loss=True)
    assert _rel(grad.get() / g.count, cpu) < 1e-4 and loss / (2 * g.count) == pytest.approx(cpu_loss, rel=1e-4)


def test_sizes_it_refuses():
    from qora.holo import bpm_cuda
    from qora.holo.bpm_cuda import BpmDevice
    from qora.holo.bpm_resident import ResidentSteps
    from qora.holo.plans import bpm_tables

    g = _geometry(32)
    with pytest.raises(InputError, match="lateral size"):
        bpm_cuda.bpm_forward(np.zeros((4, 32, 32), np.float32), g, variant="fused_resident")
    g128 = _geometry(128)
    dev = BpmDevice(g128, bpm_tables(g128, NZ), variant="fused_resident")
    with pytest.raises(InputError, match="ctas_per_sm"):
        ResidentSteps(dev, ctas_per_sm=1)


def test_bench_holo_rows_for_both_fused_variants():
    """`qora bench holo`'s fused rows at 128^3: fused_fft and fused_resident beside cuFFT, each with its
    byte model's GB/s."""
    from qora.backend import resolve
    from qora.bench.common import BenchResult
    from qora.bench.holo_cuda import _bpm_fused
    from qora.holo.cuda_stages import cupy

    cp = cupy()
    be = resolve("cuda")
    g = _geometry(128)
    x = cp.asarray(_contrast(128, nz=128))
    d = cp.ones((g.count, 128, 128), cp.complex64)  # any data: only the times are read
    result = BenchResult("holo", "cuda", {})
    assert _bpm_fused(result, be, g, 128, g.count, x, d, 4000.0, (1.0, 1.0), lambda *_: None)
    for variant in ("fused_fft", "fused_resident"):
        for direction in ("forward", "gradient"):
            row = result.cases[f"bpm/128x128x128/{direction}_{variant}"]
            assert row["ms"] > 0 and row["gbs"] > 0 and row["ratio"] == pytest.approx(1.0 / row["ms"])
