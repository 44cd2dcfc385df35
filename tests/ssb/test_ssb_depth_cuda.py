"""The depth-incoherent thick model (qora.ssb.depth) on CUDA: the band's array code on CuPy against
the CPU's, the optical sections and the fit."""

import numpy as np
import pytest

from qora.ssb import Aberrations, Session, amorphous_slices, simulate
from qora.ssb.depth import IncoherentBand, depth_sections, fit_incoherent, sums_bytes

pytestmark = pytest.mark.gpu

PIXEL, KV, ALPHA = 0.25, 300.0, 25.0
NAMES = ("C10", "C12a", "C12b", "thickness")
VALUES = {"C10": -95.0, "C12a": 4.0, "C12b": -3.0, "thickness": 100.0}


@pytest.fixture(scope="module")
def sessions(gpu_module):
    sim = simulate(amorphous_slices((64, 64), PIXEL, slices=12, atoms_per_a2=0.02, seed=5), pixel=PIXEL, stride=2,
                   window=32, alpha_mrad=ALPHA, aberrations=Aberrations(C10=-100.0), thickness=120.0)
    kw = dict(kv=KV, alpha_mrad=ALPHA, scan_step=sim.scan_step)
    cpu = Session(sim.data, backend="cpu", **kw)
    gpu = Session(sim.data, backend="cuda", detector=cpu.detector, precision="double", **kw)
    return cpu, gpu


# the kernel's transfers against the host's array code: in float64 to rounding; stored in complex64 (the
# default) the sums over k carry float32 rounding (~1e-7 relative a term)
TOLERANCE = {("arrays", "double"): 1e-8, ("kernel", "double"): 1e-8, ("kernel", "single"): 5e-4,
             ("fused", "double"): 1e-8}


@pytest.mark.parametrize("transfers, precision", list(TOLERANCE))
def test_incoherent_band_on_the_device_equals_the_host(sessions, transfers, precision):
    cpu, gpu = sessions
    host = IncoherentBand(cpu, NAMES, sections=4)
    device = IncoherentBand(gpu, NAMES, sections=4, block_bytes=1 << 22, transfers=transfers, precision=precision)
    assert device.xp is not np  # the band where G is: on the device
    np.testing.assert_allclose(device.eps.get(), host.eps, rtol=0, atol=0)  # the same pixels counted
    rtol = TOLERANCE[transfers, precision]
    f0, g0, h0 = host.evaluate(VALUES)
    f1, g1, h1 = device.evaluate(VALUES)
    assert f1 == pytest.approx(f0, rel=rtol / 100)
    np.testing.assert_allclose(g1, g0, rtol=rtol, atol=rtol * np.abs(g0).max())
    np.testing.assert_allclose(h1, h0, rtol=rtol, atol=rtol * np.abs(h0).max())
    f2, g2 = device.evaluate(VALUES, order=1)  # the pass without second derivatives
    assert f2 == pytest.approx(f0, rel=rtol / 100)
    np.testing.assert_allclose(g2, g0, rtol=rtol, atol=rtol * np.abs(g0).max())
    sets = [VALUES, {**VALUES, "thickness": 40.0}]
    np.testing.assert_allclose(device.evaluate_batch(sets), host.evaluate_batch(sets), rtol=rtol / 100)
    x0, x1 = host.section_objects(VALUES), device.section_objects(VALUES).get()
    np.testing.assert_allclose(x1, x0, rtol=rtol, atol=rtol * np.abs(x0).max())


@pytest.mark.parametrize("sections", [1, 3, 8])
def test_the_fused_sums_equal_the_products_of_the_array_codes_transfers(sessions, sections):
    """incoherent_sums (transfers made and summed in shared memory) against _products of the array code's
    transfers, every sum (sX, AX, B) for one to eight sections and subsets of the parameters; and the pool's
    rise over a fused evaluation is the band's per-Q sums only (no (Q, k) array)."""
    from qora.backend import resolve
    from qora.backend.device import PeakPoolUse

    _, gpu = sessions
    for names in (NAMES, ("C10", "thickness"), ("C12b",)):
        arrays = IncoherentBand(gpu, names, sections=sections, transfers="arrays")
        fused = IncoherentBand(gpu, names, sections=sections, transfers="fused")
        for order in (0, 2):
            want = arrays._products(arrays._transfers(VALUES, slice(None), order), slice(None), order)
            got = fused._sums(VALUES, order)
            for a, b in zip(want, got):
                if a is None:
                    assert b is None
                    continue
                np.testing.assert_allclose(b.get(), a.get(), rtol=1e-9, atol=1e-9 * float(abs(a).max()))
    with PeakPoolUse(resolve("cuda")) as peak:
        start = peak.peak_bytes
        fused.evaluate(VALUES)
    # the per-Q sums, and the task table and small arguments (CuPy's pool rounds each to 512 B; measured 112 kB
    # for 321 Q and one section)
    assert peak.peak_bytes - start <= fused.shape[0] * sums_bytes(sections, 1) + (256 << 10), (peak.peak_bytes - start)


def test_the_kernels_transfers_equal_the_array_code(sessions):
    """X (Q, L, M, k) of depth.cu against the array code on the same device frequencies, every column (the
    transfers, the first derivatives, the second of each pair) and a subset of the parameters."""
    _, gpu = sessions
    for names in (NAMES, ("C10", "thickness"), ("C12b",)):
        arrays = IncoherentBand(gpu, names, sections=3, transfers="arrays")
        kernel = IncoherentBand(gpu, names, sections=3, transfers="kernel", precision="double")
        rows = slice(3, 40)
        for order in (0, 1, 2):
            a = arrays._transfers(VALUES, rows, order).get()
            b = kernel._transfers(VALUES, rows, order).get()
            assert b.shape == a.shape
            np.testing.assert_allclose(b, a, rtol=1e-9, atol=1e-9 * np.abs(a).max())


def test_depth_sections_and_the_fit_on_the_device(sessions):
    cpu, gpu = sessions
    a = depth_sections(cpu, VALUES, sections=4)
    b = depth_sections(gpu, VALUES, sections=4)
    np.testing.assert_allclose(b, a, atol=1e-9 * np.abs(a).max())
    start = {"C10": -110.0, "thickness": 100.0}
    v0, a0, _, _, c0 = fit_incoherent(cpu, start)
    v1, a1, _, _, c1 = fit_incoherent(gpu, start)
    assert abs(v1["C10"] - v0["C10"]) < 1e-3 and abs(v1["thickness"] - v0["thickness"]) < 1e-2
    assert a1 == pytest.approx(a0, rel=1e-9) and c1 == pytest.approx(c0, abs=1e-6)
    assert abs(v1["C10"] + 100.0) < 2.0  # the film's mid-plane C10 (CPU: test_ssb_depth.py)


def test_blocked_evaluation_on_the_device_equals_the_unblocked_one_and_keeps_to_its_budget(sessions):
    """One Q per block (the geometry made per block) against one block holding the band's geometry, on
    CUDA in float64; the pool's peak over an evaluation with derivatives within the memory model's
    budget (bytes_per_row times the block) above what was in use before."""
    from qora.backend import resolve
    from qora.backend.device import PeakPoolUse
    from qora.ssb.depth import bytes_per_row, sums_bytes

    _, gpu = sessions
    whole = IncoherentBand(gpu, NAMES, sections=4, block_bytes=1 << 40, transfers="arrays")
    tiny = IncoherentBand(gpu, NAMES, sections=4, block_bytes=1, transfers="arrays")
    assert tiny.block == 1 and tiny._whole_geometry is None and whole._whole_geometry is not None
    f0, g0, h0 = whole.evaluate(VALUES)
    f1, g1, h1 = tiny.evaluate(VALUES)
    assert f1 == pytest.approx(f0, rel=1e-10)
    np.testing.assert_allclose(g1, g0, rtol=1e-10, atol=1e-10 * np.abs(g0).max())
    np.testing.assert_allclose(h1, h0, rtol=1e-10, atol=1e-10 * np.abs(h0).max())
    np.testing.assert_allclose(tiny.section_objects(VALUES).get(), whole.section_objects(VALUES).get(), rtol=1e-10,
                               atol=1e-14)
    budget = 8 * bytes_per_row(whole.shape[1], 4, len(NAMES), 3)
    band = IncoherentBand(gpu, NAMES, sections=4, block_bytes=budget, transfers="arrays")
    assert band.block == 8 and band._whole_geometry is None
    band.evaluate(VALUES)
    be = resolve("cuda")
    with PeakPoolUse(be) as peak:
        start = peak.peak_bytes
        band.evaluate(VALUES)
    # the host measures 0.8 of the budget; CuPy adds contiguous copies of strided matmul operands (M rows each)
    assert peak.peak_bytes - start <= 1.25 * budget + band.shape[0] * sums_bytes(4, len(NAMES)), (
        peak.peak_bytes - start, budget)


def test_the_kernel_blocks_keep_to_their_budget(sessions):
    """The kernel's transfers in blocks of 8 Q (kernel_bytes_per_row) against one block, and the pool's rise over
    an evaluation with derivatives within the block's budget and the band's per-Q sums."""
    from qora.backend import resolve
    from qora.backend.device import PeakPoolUse
    from qora.ssb.depth import kernel_bytes_per_row

    _, gpu = sessions
    whole = IncoherentBand(gpu, NAMES, sections=4, block_bytes=1 << 40, transfers="kernel")
    nbf = whole.shape[1]
    budget = 8 * kernel_bytes_per_row(nbf, 4, len(NAMES), 16)
    band = IncoherentBand(gpu, NAMES, sections=4, block_bytes=budget, transfers="kernel")
    assert band.block == 8 and whole.block == whole.shape[0]
    f0, g0, h0 = whole.evaluate(VALUES)
    f1, g1, h1 = band.evaluate(VALUES)
    assert f1 == pytest.approx(f0, rel=1e-10)
    np.testing.assert_allclose(h1, h0, rtol=1e-10, atol=1e-10 * np.abs(h0).max())
    be = resolve("cuda")
    with PeakPoolUse(be) as peak:
        start = peak.peak_bytes
        band.evaluate(VALUES)
    assert peak.peak_bytes - start <= budget + band.shape[0] * sums_bytes(4, len(NAMES)), (
        peak.peak_bytes - start, budget)
