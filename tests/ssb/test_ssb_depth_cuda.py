"""The depth-incoherent thick model (qora.ssb.depth) on CUDA: the band's array code on CuPy against
the CPU's, the optical sections and the fit."""

import numpy as np
import pytest

from qora.ssb import Aberrations, Session, amorphous_slices, simulate
from qora.ssb.depth import IncoherentBand, depth_sections, fit_incoherent

pytestmark = pytest.mark.gpu

PIXEL, KV, ALPHA = 0.25, 300.0, 25.0
NAMES = ("C10", "C12a", "C12b", "thickness")
VALUES = {"C10": -95.0, "C12a": 4.0, "C12b": -3.0, "thickness": 100.0}


@pytest.fixture(scope="module")
def sessions(gpu_module):
    sim = simulate(amorphous_slices((64, 64), PIXEL, slices=12, atoms_per_a2=0.02, seed=5), pixel=PIXEL, stride=2,
                   window=32, alpha_mrad=ALPHA, aberrations=Aberrations(C10=-100.0), thickness=120.0)
    kw = dict(kv=KV, alpha_mrad=ALPHA, scan_step=sim.scan_step)
    cpu = Session(sim.data, **kw)
    gpu = Session(sim.data, backend="cuda", detector=cpu.detector, precision="double", **kw)
    return cpu, gpu


def test_incoherent_band_on_the_device_equals_the_host(sessions):
    cpu, gpu = sessions
    host, device = IncoherentBand(cpu, NAMES, sections=4), IncoherentBand(gpu, NAMES, sections=4, block_bytes=1 << 22)
    assert device.xp is not np  # the band where G is: on the device
    f0, g0, h0 = host.evaluate(VALUES)
    f1, g1, h1 = device.evaluate(VALUES)
    assert f1 == pytest.approx(f0, rel=1e-10)
    np.testing.assert_allclose(g1, g0, rtol=1e-8, atol=1e-10 * np.abs(g0).max())
    np.testing.assert_allclose(h1, h0, rtol=1e-8, atol=1e-10 * np.abs(h0).max())
    sets = [VALUES, {**VALUES, "thickness": 40.0}]
    np.testing.assert_allclose(device.evaluate_batch(sets), host.evaluate_batch(sets), rtol=1e-10)
    x0, x1 = host.section_objects(VALUES), device.section_objects(VALUES).get()
    np.testing.assert_allclose(x1, x0, rtol=1e-8, atol=1e-10 * np.abs(x0).max())


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
    from qora.ssb.depth import bytes_per_row

    _, gpu = sessions
    whole = IncoherentBand(gpu, NAMES, sections=4, block_bytes=1 << 40)
    tiny = IncoherentBand(gpu, NAMES, sections=4, block_bytes=1)
    assert tiny.block == 1 and tiny._whole_geometry is None and whole._whole_geometry is not None
    f0, g0, h0 = whole.evaluate(VALUES)
    f1, g1, h1 = tiny.evaluate(VALUES)
    assert f1 == pytest.approx(f0, rel=1e-10)
    np.testing.assert_allclose(g1, g0, rtol=1e-10, atol=1e-10 * np.abs(g0).max())
    np.testing.assert_allclose(h1, h0, rtol=1e-10, atol=1e-10 * np.abs(h0).max())
    np.testing.assert_allclose(tiny.section_objects(VALUES).get(), whole.section_objects(VALUES).get(), rtol=1e-10,
                               atol=1e-14)
    budget = 8 * bytes_per_row(whole.shape[1], 4, len(NAMES), 3)
    band = IncoherentBand(gpu, NAMES, sections=4, block_bytes=budget)
    assert band.block == 8 and band._whole_geometry is None
    band.evaluate(VALUES)
    be = resolve("cuda")
    with PeakPoolUse(be) as peak:
        start = peak.peak_bytes
        band.evaluate(VALUES)
    # the host measures 0.8 of the budget; CuPy adds contiguous copies of strided matmul operands (M rows each)
    assert peak.peak_bytes - start <= 1.25 * budget, (peak.peak_bytes - start, budget)
