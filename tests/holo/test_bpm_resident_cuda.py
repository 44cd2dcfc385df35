"""The BPM's fused_resident variant (the slice loop in one thread-block cluster per illumination, the
field on chip) against the cuFFT variant and the CPU model, at 128^2 and 256^2."""

import numpy as np
import pytest

from qora.holo.bpm import bpm_forward, bpm_gradient, bpm_vjp
from qora.io.errors import InputError

from test_bpm_fused_cuda import NZ, _contrast, _geometry, _rel

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module", params=[128, 256])
def case(request):
    n = request.param
    return _geometry(n), _contrast(n)


def test_forward_matches_cufft_and_cpu(case):
    from qora.holo import bpm_cuda

    g, x = case
    resident = bpm_cuda.bpm_forward(x, g, variant="fused_resident")
    assert resident.dtype == np.complex64 and resident.shape == (g.count, g.n, g.n)
    assert _rel(resident - 1, bpm_cuda.bpm_forward(x, g) - 1) < 1e-4  # the scattered part
    assert _rel(resident - 1, bpm_forward(x, g) - 1) < 1e-4
    # chunks of 2, 2 and 1 illuminations (grids of 2 and 1 clusters) give the same fields
    np.testing.assert_allclose(bpm_cuda.bpm_forward(x, g, variant="fused_resident", chunk=2), resident, rtol=0,
                               atol=1e-6)


def test_adjoint_and_gradient_match_cufft_and_cpu(case):
    from qora.holo import bpm_cuda

    g, x = case
    rng = np.random.default_rng(0)
    r = (rng.standard_normal((g.count, g.n, g.n)) + 1j * rng.standard_normal((g.count, g.n, g.n))).astype(np.complex64)
    resident = bpm_cuda.bpm_vjp(x, r, g, variant="fused_resident")
    assert _rel(resident, bpm_cuda.bpm_vjp(x, r, g)) < 1e-4
    assert _rel(resident, bpm_vjp(x, r, g)) < 1e-4
    data = bpm_forward(np.float32(0.9) * x, g)
    grad, loss = bpm_cuda.bpm_gradient(x, data, g, return_loss=True, variant="fused_resident")
    ref, ref_loss = bpm_cuda.bpm_gradient(x, data, g, return_loss=True)
    cpu, cpu_loss = bpm_gradient(x, data, g, return_loss=True)
    assert _rel(grad, ref) < 1e-4 and _rel(grad, cpu) < 1e-4
    assert loss == pytest.approx(ref_loss, rel=1e-4) and loss == pytest.approx(cpu_loss, rel=1e-4)
    part = bpm_cuda.bpm_gradient(x, data, g, index=slice(1, 4), variant="fused_resident")
    assert _rel(part, bpm_gradient(x, data, g, index=slice(1, 4))) < 1e-4
    chunked = bpm_cuda.bpm_gradient(x, data, g, chunk=2, variant="fused_resident")
    np.testing.assert_allclose(chunked, grad, rtol=0, atol=1e-5 * np.abs(grad).max())


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


def test_inversion_and_cli_with_the_resident_variant(tmp_path):
    from click.testing import CliRunner

    from qora.cli import cli
    from qora.holo import bpm_reconstruct
    from qora.holo import reference as R
    from qora.holo.files import read_volume

    g, x = _geometry(128), _contrast(128)
    data = bpm_forward(x, g)
    start = np.zeros_like(x)
    resident = bpm_reconstruct(data, g, start=start, iterations=4, backend="cuda", variant="fused_resident")
    cufft = bpm_reconstruct(data, g, start=start, iterations=4, backend="cuda", variant="cufft")
    assert resident.info["variant"] == "fused_resident"
    assert _rel(resident.index - R.MEDIUM_INDEX, cufft.index - R.MEDIUM_INDEX) < 1e-3
    np.testing.assert_allclose(resident.info["loss"], cufft.info["loss"], rtol=1e-3)
    runner = CliRunner()
    path = tmp_path / "b.h5"
    out = runner.invoke(cli, ["holo", "simulate", "--size", "128", "--angles", "4", "--model", "bpm",
                              "--spheres", "0,0,0,1.5,1.36", "--out", str(path)])
    assert out.exit_code == 0, out.output
    volumes = {}
    for variant in ("cufft", "fused_resident"):
        out = runner.invoke(cli, ["holo", "reconstruct", str(path), "--method", "bpm", "--iterations", "3", "--backend",
                                  "cuda", "--bpm-variant", variant, "--out", str(tmp_path / f"{variant}.h5"), "--quiet"])
        assert out.exit_code == 0, out.output
        volumes[variant] = read_volume(tmp_path / f"{variant}.h5")[0]
    assert _rel(volumes["fused_resident"] - R.MEDIUM_INDEX, volumes["cufft"] - R.MEDIUM_INDEX) < 1e-3


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
