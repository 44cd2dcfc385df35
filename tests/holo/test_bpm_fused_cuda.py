"""The BPM's fused_fft variant on CUDA against the cuFFT variant and the CPU model (float32 everywhere),
at 128^2 and 256^2 with several illuminations per chunk."""

import numpy as np
import pytest

from qora.holo import reference as R
from qora.holo import bpm_reconstruct  # the api: backend="cpu" by default, "cuda" on the device
from qora.holo.bpm import bpm_forward, bpm_gradient, bpm_vjp
from qora.holo.geometry import Geometry, cone_illuminations
from qora.io.errors import InputError

pytestmark = pytest.mark.gpu

NZ = 8


def _geometry(n, per_cone=4):
    df = 1.0 / (n * R.PIXEL)
    ill = np.concatenate([np.zeros((1, 2)), cone_illuminations(0.8, R.WAVELENGTH, per_cone, include_normal=False)])
    return Geometry(R.WAVELENGTH, R.MEDIUM_INDEX, R.PIXEL, n, R.NA_DETECTION, illuminations=np.round(ill / df) * df)


def _contrast(n, nz=NZ):
    """Two smooth blobs of index contrast up to 0.05 (a phase of ~0.06 rad per slice), off centre."""
    z, y, x = np.meshgrid(np.arange(nz) - nz / 2, np.arange(n) - n / 2, np.arange(n) - n / 2, indexing="ij")
    out = 0.05 * np.exp(-((y - 0.1 * n) ** 2 + (x + 0.05 * n) ** 2) / (2 * (0.08 * n) ** 2) - z**2 / (2 * nz**2))
    out += 0.03 * np.exp(-((y + 0.2 * n) ** 2 + (x - 0.15 * n) ** 2) / (2 * (0.04 * n) ** 2))
    return out.astype(np.float32)


def _rel(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


@pytest.fixture(scope="module", params=[128, 256])
def case(request):
    n = request.param
    return _geometry(n), _contrast(n)


# the two on-chip variants: the fused line passes and the slice loop in one cluster per illumination
FUSED_VARIANTS = ["fused_fft", "fused_resident"]


@pytest.mark.parametrize("variant", FUSED_VARIANTS)
def test_forward_matches_cufft_and_cpu(case, variant):
    from qora.holo import bpm_cuda

    g, x = case
    fused = bpm_cuda.bpm_forward(x, g, variant=variant)
    cufft = bpm_cuda.bpm_forward(x, g)
    cpu = bpm_forward(x, g)
    assert fused.dtype == np.complex64 and fused.shape == (g.count, g.n, g.n)
    assert _rel(fused - 1, cufft - 1) < 1e-4  # on the scattered part, not the unit background
    assert _rel(fused - 1, cpu - 1) < 1e-4
    # chunks of 2, 2 and 1 illuminations give the same fields
    np.testing.assert_allclose(bpm_cuda.bpm_forward(x, g, variant=variant, chunk=2), fused, rtol=0, atol=1e-6)


@pytest.mark.parametrize("variant", FUSED_VARIANTS)
def test_adjoint_and_gradient_match_cufft_and_cpu(case, variant):
    from qora.holo import bpm_cuda

    g, x = case
    rng = np.random.default_rng(0)
    r = (rng.standard_normal((g.count, g.n, g.n)) + 1j * rng.standard_normal((g.count, g.n, g.n))).astype(np.complex64)
    fused = bpm_cuda.bpm_vjp(x, r, g, variant=variant)
    assert _rel(fused, bpm_cuda.bpm_vjp(x, r, g)) < 1e-4
    assert _rel(fused, bpm_vjp(x, r, g)) < 1e-4
    data = bpm_forward(np.float32(0.9) * x, g)
    grad, loss = bpm_cuda.bpm_gradient(x, data, g, return_loss=True, variant=variant)
    ref, ref_loss = bpm_cuda.bpm_gradient(x, data, g, return_loss=True)
    cpu, cpu_loss = bpm_gradient(x, data, g, return_loss=True)
    assert _rel(grad, ref) < 1e-4 and _rel(grad, cpu) < 1e-4
    assert loss == pytest.approx(ref_loss, rel=1e-4) and loss == pytest.approx(cpu_loss, rel=1e-4)
    # the gradient's float atomics add in an order that varies from run to run: by roundings only
    again = bpm_cuda.bpm_gradient(x, data, g, variant=variant)
    assert _rel(again, grad) < 1e-6
    part = bpm_cuda.bpm_gradient(x, data, g, index=slice(1, 4), variant=variant)
    assert _rel(part, bpm_gradient(x, data, g, index=slice(1, 4))) < 1e-4
    # chunks of 2, 2, 1: the reverse row pass's groups of 4 illuminations partly empty; grids of 2 and 1
    # clusters for the resident variant
    chunked = bpm_cuda.bpm_gradient(x, data, g, chunk=2, variant=variant)
    np.testing.assert_allclose(chunked, grad, rtol=0, atol=1e-5 * np.abs(grad).max())


@pytest.mark.parametrize("ept", [8, 16])
def test_column_elements_per_thread_agree(ept):
    from qora.holo.bpm_cuda import BpmDevice
    from qora.holo.bpm_fused import FusedSteps
    from qora.holo.cuda_stages import cupy
    from qora.holo.plans import bpm_tables

    cp = cupy()
    g, x = _geometry(256), _contrast(256)
    dev = BpmDevice(g, bpm_tables(g, NZ), variant="fused_fft")
    dev.fused = FusedSteps(dev, column_ept=ept)
    dev.set_contrast(cp.asarray(x))
    out = cp.empty((g.count, g.n, g.n), cp.complex64)
    dev.forward(out)
    assert _rel(out.get() - 1, bpm_forward(x, g) - 1) < 1e-4


@pytest.mark.parametrize("variant", FUSED_VARIANTS)
def test_inversion_with_the_fused_variant_matches_cufft(variant):
    g, x = _geometry(128), _contrast(128)
    data = bpm_forward(x, g)
    start = np.zeros_like(x)
    fused = bpm_reconstruct(data, g, start=start, iterations=4, backend="cuda", variant=variant)
    cufft = bpm_reconstruct(data, g, start=start, iterations=4, backend="cuda", variant="cufft")
    assert fused.info["variant"] == variant and cufft.info["variant"] == "cufft"
    assert _rel(fused.index - R.MEDIUM_INDEX, cufft.index - R.MEDIUM_INDEX) < 1e-3
    np.testing.assert_allclose(fused.info["loss"], cufft.info["loss"], rtol=1e-3)


def test_auto_picks_the_fused_step_where_it_is_built():
    """The default ("auto") is the fused step at a built size on this H200-class card, cuFFT elsewhere."""
    g, x = _geometry(128), _contrast(128)
    data = bpm_forward(x, g)
    assert bpm_reconstruct(data, g, start=np.zeros_like(x), iterations=1, backend="cuda").info["variant"] == "fused_fft"
    g32 = _geometry(32)
    data32 = bpm_forward(np.zeros((4, 32, 32), np.float32), g32)
    assert bpm_reconstruct(data32, g32, start=np.zeros((4, 32, 32), np.float32), iterations=1,
                           backend="cuda").info["variant"] == "cufft"


def test_sizes_and_variants_it_refuses():
    from qora.holo import bpm_cuda

    g = _geometry(32)
    x = np.zeros((4, 32, 32), np.float32)
    with pytest.raises(InputError, match="lateral size"):
        bpm_cuda.bpm_forward(x, g, variant="fused_fft")
    with pytest.raises(InputError, match="variant"):
        bpm_cuda.bpm_forward(x, g, variant="fused")


@pytest.mark.parametrize("fused", FUSED_VARIANTS)
def test_cli_reconstructs_with_the_fused_variant(tmp_path, fused):
    from click.testing import CliRunner

    from qora.cli import cli
    from qora.holo.files import read_volume

    runner = CliRunner()
    path = tmp_path / "b.h5"
    out = runner.invoke(cli, ["holo", "simulate", "--size", "128", "--angles", "4", "--model", "bpm",
                              "--spheres", "0,0,0,1.5,1.36", "--out", str(path)])
    assert out.exit_code == 0, out.output
    volumes = {}
    for variant in ("cufft", fused):
        out = runner.invoke(cli, ["holo", "reconstruct", str(path), "--method", "bpm", "--iterations", "3", "--backend",
                                  "cuda", "--bpm-variant", variant, "--out", str(tmp_path / f"{variant}.h5"), "--quiet"])
        assert out.exit_code == 0, out.output
        volumes[variant] = read_volume(tmp_path / f"{variant}.h5")[0]
    assert _rel(volumes[fused] - R.MEDIUM_INDEX, volumes["cufft"] - R.MEDIUM_INDEX) < 1e-3


# candidates of docs/holo-performance.md, "Fused BPM candidates": each against the cuFFT variant
BPM_CANDIDATES = [(128, {"column_load": "async"}), (128, {"column_load": "stage"}), (128, {"row_load": "pipe"}),
                  (256, {"column_load": "async"}), (256, {"column_load": "stage"}),
                  (256, {"column_load": "stage", "column_lines": 8}), (256, {"column_lines": 8}),
                  (256, {"row_load": "pipe"}), (256, {"row_ept": 16}), (256, {"row_load": "pipe", "row_ept": 16}),
                  (256, {"column_load": "stage", "row_load": "pipe"}), (128, {"reverse_load": "early"}),
                  (256, {"reverse_load": "early"}), (256, {"row_load": "pipe", "reverse_load": "early"})]


def _device_run(g, x, data, candidate=None):
    """Fields and (gradient, loss) of a BpmDevice: cuFFT (candidate None) or fused with the candidate's options."""
    from qora.holo.bpm_cuda import BpmDevice
    from qora.holo.bpm_fused import FusedSteps
    from qora.holo.cuda_stages import cupy
    from qora.holo.plans import bpm_tables

    cp = cupy()
    dev = BpmDevice(g, bpm_tables(g, NZ), chunk=2, variant="cufft" if candidate is None else "fused_fft")
    if candidate is not None:
        dev.fused = FusedSteps(dev, **candidate)
    dev.set_contrast(cp.asarray(x))
    out = cp.empty((g.count, g.n, g.n), cp.complex64)
    dev.forward(out)
    grad, loss = dev.reverse(cp.asarray(data, cp.complex64))
    return out.get(), grad.get(), loss


@pytest.mark.parametrize("n,candidate", BPM_CANDIDATES)
def test_every_candidate_matches_cufft(n, candidate):
    """chunk 2 of 5 illuminations: the persistent grids' last groups and the reverse pass's partly empty
    groups of 4 illuminations are exercised too."""
    g, x = _geometry(n), _contrast(n)
    data = bpm_forward(np.float32(0.9) * x, g)
    ref_out, ref_grad, ref_loss = _device_run(g, x, data)
    out, grad, loss = _device_run(g, x, data, candidate)
    assert _rel(out - 1, ref_out - 1) < 1e-4
    assert _rel(grad, ref_grad) < 1e-4
    assert loss == pytest.approx(ref_loss, rel=1e-4)


def test_candidates_not_built_are_refused():
    from qora.holo.bpm_cuda import BpmDevice
    from qora.holo.bpm_fused import FusedSteps
    from qora.holo.plans import bpm_tables

    g = _geometry(128)
    dev = BpmDevice(g, bpm_tables(g, NZ), variant="fused_fft")
    with pytest.raises(InputError, match="row_load"):
        FusedSteps(dev, row_load="tma")
    with pytest.raises(InputError, match="reverse_load"):
        FusedSteps(dev, reverse_load="stage")
    with pytest.raises(InputError, match="no row pass of 128 points with 16 elements"):
        FusedSteps(dev, row_ept=16)


def test_slice_loops_replayed_as_graphs_equal_host_launches():
    """The third call of each loop replays its CUDA graph: the same fields and gradient as host launches, and
    a new contrast set into the same screens is what the replay computes (no stale capture)."""
    from qora.holo.bpm_cuda import BpmDevice
    from qora.holo.cuda_stages import cupy
    from qora.holo.plans import bpm_tables

    cp = cupy()
    g, x = _geometry(128), _contrast(128)
    data = cp.asarray(bpm_forward(np.float32(0.9) * x, g), cp.complex64)
    results = {}
    for graphs in (False, True):
        dev = BpmDevice(g, bpm_tables(g, NZ), chunk=2, variant="fused_fft")
        dev.fused.graphs = graphs
        out = cp.empty((g.count, g.n, g.n), cp.complex64)
        for contrast in (np.zeros_like(x), x, np.float32(0.5) * x, x):  # calls 3 and 4 replay
            dev.set_contrast(cp.asarray(contrast))
            dev.forward(out)
            grad, loss = dev.reverse(data)
        results[graphs] = (out.get(), grad.get(), loss)
        # chunks (0, 2), (2, 4), (4, 5), each with its forward, forward keeping w_k and reverse loop
        assert len(dev.fused._graphs) == (9 if graphs else 0)
    (o0, g0, l0), (o1, g1, l1) = results[False], results[True]
    assert _rel(o1 - 1, o0 - 1) < 1e-6 and _rel(g1, g0) < 1e-5 and l1 == pytest.approx(l0, rel=1e-6)
    assert _rel(o1 - 1, bpm_forward(x, g) - 1) < 1e-4


@pytest.mark.parametrize("lanes", [2, 3])
def test_lanes_equal_one_lane(lanes):
    """The slice loops as concurrent lanes (groups of illuminations on their own streams; branches of the
    graphs): the fields equal one lane's bit for bit (each illumination's arithmetic is unchanged), the
    gradient to the order of the float atomics; by host launches and by graph replays (calls 3 and 4)."""
    from qora.holo.bpm_cuda import BpmDevice
    from qora.holo.bpm_fused import FusedSteps
    from qora.holo.cuda_stages import cupy
    from qora.holo.plans import bpm_tables

    cp = cupy()
    g, x = _geometry(128, per_cone=8), _contrast(128)  # 9 illuminations in one chunk: lanes of 4 + 5, 4 + 4 + 1
    data = cp.asarray(bpm_forward(np.float32(0.9) * x, g), cp.complex64)
    results = {}
    for key in ((1, False), (lanes, False), (lanes, True)):
        dev = BpmDevice(g, bpm_tables(g, NZ), variant="fused_fft")
        dev.fused = FusedSteps(dev, lanes=key[0], graphs=key[1])
        dev.set_contrast(cp.asarray(x))
        out = cp.empty((g.count, g.n, g.n), cp.complex64)
        for _ in range(4):
            dev.forward(out)
            grad, loss = dev.reverse(data)
        assert dev.chunk == g.count == 9 and len(dev.fused._graphs) == (3 if key[1] else 0)
        results[key] = (out.get(), grad.get(), loss)
    o0, g0, l0 = results[1, False]
    for key in ((lanes, False), (lanes, True)):
        o, gr, lo = results[key]
        assert np.array_equal(o, o0), key
        assert _rel(gr, g0) < 1e-5 and lo == pytest.approx(l0, rel=1e-6), key
