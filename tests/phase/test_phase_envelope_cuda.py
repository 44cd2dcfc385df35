"""The envelope search on the GPU: the same lines on CuPy arrays (qora.phase.envelope), checked against the CPU."""

import numpy as np
import pytest

from qora.phase import analysis, reconstruct
from qora.phase.detector import BEAMLINE_BOXES, Detector, lithograph, record

pytestmark = pytest.mark.gpu


def _case():
    truth = lithograph(256)
    counts, mask = record(truth, Detector(photons=2.5e8, beamstop=0, gap=0, boxes=BEAMLINE_BOXES))
    return truth, counts, mask


def test_every_projection_matches_the_cpu():
    import cupy as cp

    from qora.phase.envelope_iterate import ArrayIterations, Pattern

    _, counts, mask = _case()
    cpu = ArrayIterations(Pattern(counts, mask, np), 2)
    gpu = ArrayIterations(Pattern(cp.asarray(counts), cp.asarray(mask), cp), 2)
    rng = np.random.default_rng(0)
    z = (rng.random((2, 256, 256)) * np.exp(2j * np.pi * rng.random((2, 256, 256)))).astype(np.complex64)
    r = rng.random((2, 256, 256)).astype(np.float32)
    for (a, ea), (b, eb) in ((cpu.project_complex(z), gpu.project_complex(cp.asarray(z))),
                             (cpu.project_real(r, 0.99), gpu.project_real(cp.asarray(r), 0.99))):
        assert np.linalg.norm(cp.asnumpy(b) - a) < 1e-5 * np.linalg.norm(a)
        np.testing.assert_allclose(cp.asnumpy(eb), ea, rtol=1e-5)
    np.testing.assert_array_equal(cp.asnumpy(gpu.p.meas), cpu.p.meas)


@pytest.mark.parametrize("hio", [True, False])
def test_the_kernels_iterate_as_the_array_code(hio):
    """Blocks of iterations through the CUDA graphs (envelope_cuda) against the array code on CuPy (three: HIO on
    random data amplifies rounding about tenfold per iteration)."""
    import cupy as cp

    from qora.phase.envelope_cuda import CudaIterations
    from qora.phase.envelope_iterate import ArrayIterations, Pattern

    _, counts, mask = _case()
    pattern = Pattern(cp.asarray(counts), cp.asarray(mask), cp)
    ref, fast = ArrayIterations(pattern, 3), CudaIterations(pattern, 3)
    rng = np.random.default_rng(1)
    support = cp.asarray(rng.random((3, 256, 256)) > 0.6)
    z = cp.asarray((rng.random((3, 256, 256)) * np.exp(2j * np.pi * rng.random((3, 256, 256)))).astype(np.complex64))
    r = cp.asarray(rng.random((3, 256, 256)).astype(np.float32))
    for x, run in ((z, lambda it, x: it.complex(x, support, 3, hio=hio)),
                   (r, lambda it, x: it.positive(x, support, 3, hio=hio, damp=0.9))):
        want, got = run(ref, x.copy()), run(fast, x.copy())
        assert got.dtype == want.dtype and got.shape == want.shape
        assert float(cp.linalg.norm(got - want)) < 1e-4 * float(cp.linalg.norm(want))
    np.testing.assert_allclose(fast.history(), ref.history(), rtol=1e-4)
    assert fast.history().shape == (6, 3)


def test_the_search_finds_the_lithograph_on_the_gpu():
    truth, counts, mask = _case()
    result = reconstruct(counts, mask=mask, recipe="real-envelope", starts=2, backend="cuda", keep_all=True)
    assert result.backend == "cuda"
    for obj in result.objects:
        error, _ = analysis.scaled_error(obj, truth.astype(np.complex64))
        assert error < 0.05, error  # the CPU: 0.0049 from both seeds


def test_a_chunked_graph_replayed_equals_one_graph_of_the_whole_run():
    """_GraphLoop.iterate(chunk=5): one 5-step graph replayed four times is the 20-step graph, errors included."""
    import cupy as cp

    from qora.phase.cuda import CudaEngine
    from qora.phase.envelope_iterate import Pattern

    _, counts, mask = _case()
    pattern = Pattern(counts, mask, np)
    rng = np.random.default_rng(2)
    x0 = (rng.random((2, 256, 256)) * np.exp(2j * np.pi * rng.random((2, 256, 256)))).astype(np.complex64)
    support = rng.random((256, 256)) > 0.5
    runs = []
    for chunk in (None, 5):
        engine = CudaEngine(pattern.native(half=False), support, batch=2, graph=True)
        engine.set_x(x0)
        errors = engine.iterate(20, 1.0, -0.9, None, chunk=chunk)
        runs.append((cp.asnumpy(engine.x), errors))
    np.testing.assert_array_equal(runs[1][0], runs[0][0])
    np.testing.assert_array_equal(runs[1][1], runs[0][1])
    assert runs[1][1].shape == (20, 2) and np.all(runs[1][1] > 0)


@pytest.mark.parametrize("shape", [(3, 40, 33), (2, 12, 10, 9)])
def test_the_support_steps_kernels_equal_scipy(shape):
    """support.cu's Gaussian filter (every width of the search's schedules, each axis, "reflect") and cross
    dilation (1 and 4 steps, nothing across starts) against scipy.ndimage in float64 and on the host."""
    import cupy as cp
    import scipy.ndimage as ndi

    from qora.phase.envelope import POSITIVE, ENVELOPE, _sigmas
    from qora.phase.envelope_cuda import SupportNdimage

    device = SupportNdimage()
    rng = np.random.default_rng(3)
    x = rng.random(shape).astype(np.float32)
    sigmas = sorted(set(_sigmas(2.0, 0.5, ENVELOPE[1]) + _sigmas(1.0, 0.5, POSITIVE[1])))
    for sigma in sigmas[:: max(1, len(sigmas) // 6)] + [3.0]:
        for axis in range(1, len(shape)):
            want = ndi.gaussian_filter1d(x.astype(np.float64), sigma, axis=axis)
            got = cp.asnumpy(device.gaussian_filter1d(cp.asarray(x), sigma, axis=axis))
            np.testing.assert_allclose(got, want, rtol=0, atol=2e-6)
    mask = rng.random(shape) > 0.93
    cross = np.zeros((3,) * len(shape), bool)
    cross[1] = ndi.generate_binary_structure(len(shape) - 1, 1)
    for steps in (1, 4):
        want = ndi.binary_dilation(mask, structure=cross, iterations=steps)
        got = cp.asnumpy(device.binary_dilation(cp.asarray(mask), structure=cp.asarray(cross), iterations=steps,
                                                brute_force=True))
        np.testing.assert_array_equal(got, want)
    assert want.sum() > 3 * mask.sum()  # the steps did grow it
    assert device.label is not None  # the rest is cupyx's


def test_the_agreement_report_on_the_device_equals_the_hosts():
    """analysis.agreement on CuPy objects (what the GPU search hands it) against the same on NumPy: the same
    alignments (twin, shift to the sub-pixel tolerance), errors and support overlaps, in float64 both."""
    import cupy as cp

    truth, counts, _ = _case()
    rng = np.random.default_rng(3)
    objects = []
    for k in range(5):
        o = truth * (1 + 0.05 * rng.standard_normal(truth.shape)) + 0.01 * rng.standard_normal(truth.shape)
        o = np.roll(o, tuple(rng.integers(-9, 9, 2)), (0, 1)).astype(np.complex64)
        objects.append(analysis.twin(o) if k % 2 else o)
    objects.append(rng.standard_normal(truth.shape).astype(np.complex64))  # one start that found something else
    objects = np.stack(objects)
    supports = np.abs(objects) > 0.5
    scores = np.arange(len(objects), dtype=float)
    host = analysis.agreement(objects, supports, scores, intensity=counts)
    device = analysis.agreement(cp.asarray(objects), supports, scores, intensity=counts)
    assert host["agree"] == device["agree"] == 5 and host["message"] == device["message"]
    np.testing.assert_allclose(device["object_error"], host["object_error"], rtol=1e-4, atol=1e-9)
    np.testing.assert_array_equal(device["support_overlap"], host["support_overlap"])
    np.testing.assert_allclose(np.array(device["prtf"], float), np.array(host["prtf"], float), rtol=1e-4)


def test_the_rfactor_on_the_device_equals_the_hosts():
    import cupy as cp

    truth, counts, mask = _case()
    obj = (np.sqrt(counts.sum() / truth.size) * truth * (1 + 0.1 * np.random.default_rng(0).random(truth.shape)))
    host = analysis.amplitude_rfactor(obj, counts, mask)
    device = analysis.amplitude_rfactor(cp.asarray(obj.astype(np.complex64)), cp.asarray(counts), cp.asarray(mask))
    assert 0.01 < host < 2 and device == pytest.approx(host, rel=1e-6)


def test_the_agreement_report_coarsens_device_objects_on_the_host(monkeypatch):
    """Objects over the report's size limit are compared at a coarser sampling on the host: CuPy objects there give
    the host's report."""
    import cupy as cp

    monkeypatch.setattr(analysis, "AGREE_MOST_VOXELS", 2**12)  # 128^2 objects: coarsened 2x
    truth = lithograph(128)
    rng = np.random.default_rng(5)
    objects = np.stack([np.roll(truth * (1 + 0.05 * rng.standard_normal(truth.shape)), (k, -k), (0, 1))
                        for k in range(3)]).astype(np.complex64)
    supports = np.abs(objects) > 0.5
    host = analysis.agreement(objects, supports, np.arange(3.0))
    device = analysis.agreement(cp.asarray(objects), supports, np.arange(3.0))
    assert host["coarsened"] == device["coarsened"] == 2 and host["agree"] == device["agree"] == 3
    np.testing.assert_allclose(device["object_error"], host["object_error"], rtol=1e-6)
