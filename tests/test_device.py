import numpy as np
import pytest

from qora.backend import resolve
from qora.backend.device import PeakMemory, device_facts, pool_stats


def test_cpu_facts():
    f = device_facts(resolve("cpu"))
    assert f.backend == "cpu" and f.name and f.cpu_cores >= 1
    assert f.as_dict()["copy_gbs"] is None


def test_peak_memory_counts_an_allocation(be):
    n = 4 * 2**20
    with PeakMemory(be) as pm:
        a = be.xp.ones(n, dtype=be.xp.float32)
        be.synchronize()
        del a
    assert 16 * 2**20 <= pm.peak_bytes < 64 * 2**20


@pytest.mark.gpu
def test_gpu_facts_and_copy_bandwidth():
    f = device_facts(resolve("cuda"), measure=True)
    assert f.backend == "cuda" and f.name
    assert f.sm_count > 0 and f.l2_bytes > 0 and f.clock_mhz > 0
    assert f.bus_width_bits > 0 and f.memory_clock_mhz > 0
    # the definition: double data rate x bus width
    assert f.peak_dram_gbs == pytest.approx(2 * f.memory_clock_mhz * 1e6 * f.bus_width_bits / 8 / 1e9)
    assert f.copy_gbs is not None and np.isfinite(f.copy_gbs) and f.copy_gbs > 0
    assert set(f.copy_detail) >= {"memcpy", "kernel_float4", "bytes"}
    stats = pool_stats(__import__("qora.backend", fromlist=["resolve"]).resolve("cuda"))
    assert stats["total_bytes"] >= stats["used_bytes"] >= 0
