"""The Nsight Compute report parser (qora.bench.counters) on a log in ncu's raw CSV form."""

import pytest

from qora.bench import counters

LOG = """==PROF== Connected to process 1
"ID","Process ID","Kernel Name","gpu__time_duration.sum","dram__bytes_read.sum","dram__bytes_write.sum","lts__t_sector_hit_rate.pct","l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum","l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"
"","","","nsecond","byte","byte","%","",""
"0","1","regular_fft<256>(float2*)","1000","4000","4000","50","10","40"
"1","1","modulus_step","500","2000","1000","20","5","80"
"2","1","update_step","600","3000","1500","30","5","80"
"3","1","regular_fft<256>(float2*)","1000","4000","4000","50","10","40"
==PROF== Disconnected
"""


def test_parse_skips_units_and_profiler_lines():
    ks = counters.parse_csv(LOG)
    assert [k["name"] for k in ks][1:3] == ["modulus_step", "update_step"]
    assert ks[0]["dram__bytes_read.sum"] == 4000.0 and len(ks) == 4


def test_summary_splits_our_kernels_from_cufft_per_iteration_and_element():
    s = counters.summarize(counters.parse_csv(LOG), n_elements=100, iterations=1)
    assert s["ours_bytes_per_element"] == pytest.approx((2000 + 1000 + 3000 + 1500) / 100)
    assert s["cufft_bytes_per_element"] == pytest.approx(160.0)
    assert s["kernels"]["modulus_step"]["load_sectors_per_request"] == pytest.approx(16.0)
    assert s["kernels"]["regular_fft"]["launches_per_iteration"] == 2


def test_the_split_column_pass_is_one_of_ours():
    """fused_fft's middle pass at 4096 rows (strided_split_<points>_<lines>_<ept>[_async]) is our kernel: counted
    with cuFFT's it once left 18.6 of 79.6 B/el out of fused_fft's measured bytes."""
    log = LOG.replace('"2","1","update_step"', '"2","1","strided_split_64_16_8_async"')
    s = counters.summarize(counters.parse_csv(log), n_elements=100, iterations=1)
    assert s["ours_bytes_per_element"] == pytest.approx(75.0) and "strided_split" in s["kernels"]


def test_cupy_helper_kernels_are_neither_ours_nor_cufft():
    log = LOG.replace('"2","1","update_step"', '"2","1","cupy_multiply__complex64"')
    s = counters.summarize(counters.parse_csv(log), n_elements=100, iterations=1)
    assert s["ours_bytes_per_element"] == pytest.approx(30.0) and s["cufft_bytes_per_element"] == pytest.approx(160.0)


def test_holo_counters_name_the_fused_bpm_passes_and_their_bytes():
    import re

    from qora.bench import holo_counters as H
    from qora.holo.bpm_fused import PASS_BYTES

    pattern = re.compile(H.KERNEL_REGEX.removeprefix("regex:"))
    for name in ("bpm_row_forward_256_16_8", "bpm_column_reverse_512_8_16", "fgp_fused"):
        assert pattern.match(name)
    assert not pattern.match("bpm_propagate") and not pattern.match("regular_fft_factor")
    assert H.kernel_name("bpm_row_reverse_256_4_8") == "bpm_row_reverse"
    assert H.kernel_name("vector_fft_256") is None
    # 49 illuminations of 256^2 per launch; the row pass stores w_k only in the gradient's forward
    assert H.model_bytes("bpm_row_forward", 256, "bpm_fused_forward") == PASS_BYTES["row_forward"] * 49 * 256**2
    assert H.model_bytes("bpm_row_forward", 256, "bpm_fused_gradient") == 24 * 49 * 256**2
    assert H.model_bytes("bpm_column_forward", 256) == 48 * 49 * 256**2


def test_fused_fft_byte_model_follows_the_measured_layout():
    """The split column pass (2D, 4096 rows: the measured default there) moves the column work in three passes,
    52 B/el instead of 20; the counters' report must hold it to that model, not the one-pass 53 B/el."""
    from qora.bench.phase import fused_fft_bytes

    assert fused_fft_bytes((2048, 2048)) == 53 and fused_fft_bytes((4096, 4096)) == 85
    assert fused_fft_bytes((4096, 4096), column_split=False) == 53
    assert fused_fft_bytes((256, 256, 256)) == 85 and fused_fft_bytes((512, 512, 512)) == 85
