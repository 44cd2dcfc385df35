"""The one CPU thread setting (qora.backend.host) and the stages that follow it (issue 28)."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from qora.backend import fft as F
from qora.backend import fft_host
from qora.backend import host
from qora.io.errors import InputError


def test_cpu_count_is_the_affinity_mask(monkeypatch):
    monkeypatch.setattr(host, "cgroup_cpu_limit", lambda root="/sys/fs/cgroup": None)
    assert host.cpu_count() == len(os.sched_getaffinity(0))


@pytest.mark.parametrize("quota, expected", [(0.5, 1), (1.0, 1), (1.5, 2), (1000.0, None)])
def test_cpu_count_honours_a_cgroup_quota(monkeypatch, quota, expected):
    monkeypatch.setattr(host, "cgroup_cpu_limit", lambda root="/sys/fs/cgroup": quota)
    mask = len(os.sched_getaffinity(0))
    assert host.cpu_count() == (mask if expected is None else min(mask, expected))


def test_cgroup_v2_and_v1_files(tmp_path):
    (tmp_path / "cpu.max").write_text("250000 100000\n")
    assert host.cgroup_cpu_limit(str(tmp_path)) == 2.5
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert host.cgroup_cpu_limit(str(tmp_path)) is None
    v1 = tmp_path / "v1"
    (v1 / "cpu,cpuacct").mkdir(parents=True)
    (v1 / "cpu,cpuacct" / "cpu.cfs_quota_us").write_text("300000\n")
    (v1 / "cpu,cpuacct" / "cpu.cfs_period_us").write_text("100000\n")
    assert host.cgroup_cpu_limit(str(v1)) == 3.0
    (v1 / "cpu,cpuacct" / "cpu.cfs_quota_us").write_text("-1\n")
    assert host.cgroup_cpu_limit(str(v1)) is None
    assert host.cgroup_cpu_limit(str(tmp_path / "absent")) is None


def test_num_threads_default_env_and_block(monkeypatch):
    monkeypatch.delenv(host.ENV_THREADS, raising=False)
    assert host.num_threads() == host.cpu_count()
    monkeypatch.setenv(host.ENV_THREADS, " 3 ")
    assert host.num_threads() == 3
    with host.threads(5):
        assert host.num_threads() == 5
        with host.threads(1):
            assert host.num_threads() == 1
        assert host.num_threads() == 5
    assert host.num_threads() == 3


@pytest.mark.parametrize("bad", ["0", "-2", "two", "1.5"])
def test_a_bad_setting_is_an_input_error(monkeypatch, bad):
    monkeypatch.setenv(host.ENV_THREADS, bad)
    with pytest.raises(InputError, match="QORA_NUM_THREADS"):
        host.num_threads()
    with pytest.raises(InputError, match="threads"):
        with host.threads(bad):
            pass


def test_a_block_is_per_calling_thread():
    import threading

    seen = {}
    with host.threads(7):
        t = threading.Thread(target=lambda: seen.setdefault("other", host.num_threads()))
        t.start()
        t.join()
        assert host.num_threads() == 7
    assert seen["other"] != 7 or host.cpu_count() == 7


def test_numba_follows_the_setting():
    import numba

    with host.threads(1):
        assert host.numba_threads() == 1
        assert numba.get_num_threads() == 1
    with host.threads(10**6):  # capped at Numba's pool
        assert host.numba_threads() == numba.config.NUMBA_NUM_THREADS


def test_fft_threads_follow_the_setting(monkeypatch):
    assert F.cpu_threads(F.CPU_THREADS_FROM - 1) == 1  # small transforms stay on one thread
    with host.threads(3):
        assert F.cpu_threads(F.CPU_THREADS_FROM) == 3
        assert F.cpu_threads(10, workers=2) == 2
    with pytest.raises(ValueError):
        F.cpu_threads(10, workers=0)
    calls = []
    import ducc0

    real = ducc0.fft.c2c
    monkeypatch.setattr(ducc0.fft, "c2c", lambda *a, **k: (calls.append(k["nthreads"]), real(*a, **k))[1])
    monkeypatch.setenv("QORA_DISABLE_FFTW", "1")
    from qora.backend import resolve

    x = (np.random.default_rng(0).standard_normal((512, 512)) + 0j).astype(np.complex64)
    plan = resolve("cpu").fft.c2c(x.shape, np.complex64, norm=None)
    for n in (1, 2):
        with host.threads(n):
            y = plan.forward(x)
        np.testing.assert_allclose(y, np.fft.fft2(x), rtol=1e-4, atol=1e-2 * np.abs(y).max() * 1e-3)
    assert calls == [1, 2]


@pytest.mark.parametrize("threads", [1, 2])
def test_transforms_agree_across_thread_counts(threads):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((64, 48, 40))
    from qora.backend import resolve

    plan = resolve("cpu").fft.r2c(x.shape, np.float64, norm="backward")
    with host.threads(threads):
        spec = plan.forward(x)
        back = plan.inverse(spec.copy())
        one = F.fftn(x + 0j, workers=threads)
    np.testing.assert_allclose(spec, np.fft.rfftn(x), rtol=1e-12, atol=1e-9)
    np.testing.assert_allclose(back, x, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(one, np.fft.fftn(x), rtol=1e-12, atol=1e-9)


def test_cpu_libraries_names_what_is_missing(monkeypatch):
    libs = F.cpu_libraries()
    assert set(libs) >= {"ducc0", "pyfftw", "scipy", "used"}
    monkeypatch.setattr(fft_host, "_ducc0", lambda: None)
    monkeypatch.setenv("QORA_DISABLE_FFTW", "1")
    libs = F.cpu_libraries()
    assert libs["ducc0"] is None and libs["used"] == "scipy"


def test_phase_loops_agree_across_thread_counts():
    """The fused HIO loops: the same iterate on 1 and 2 threads, batched small starts one per thread."""
    from qora.phase.cpu import modulus_step, modulus_steps

    rng = np.random.default_rng(2)
    amp = rng.random((128, 128)).astype(np.float32)
    amp[:3] = -1
    y = (rng.standard_normal((8, 128, 128)) + 1j * rng.standard_normal((8, 128, 128))).astype(np.complex64)
    expected = y.copy()
    want = np.array([modulus_step(expected[s], amp, 0.01) for s in range(8)])
    for n in (1, 2):
        got, errors = y.copy(), np.empty(8)
        with host.threads(n):
            modulus_steps(got, amp, 0.01, errors)
        np.testing.assert_array_equal(got, expected)
        np.testing.assert_allclose(errors, want, rtol=1e-5)


@pytest.mark.parametrize("r2c", [True, False])
@pytest.mark.parametrize("threads", [1, 2])
def test_threaded_gp_matches_the_numpy_reference(r2c, threads):
    """holo.gp_cpu (ducc0 plans, fused Numba passes) against the NumPy loops of holo.odt, at a size
    where both the transforms and the loops go multi-threaded (2^18 voxels)."""
    from qora.holo import odt

    rng = np.random.default_rng(3)
    shape = (64, 64, 64)
    data = np.fft.fftn(np.maximum(rng.standard_normal(shape), 0)) * (1 + 0.2j)
    measured = rng.random(shape) < 0.3
    reference = (odt.gerchberg_papoulis_r2c if r2c else odt.gerchberg_papoulis)(data, measured, 4)
    with host.threads(threads):
        got = odt._gp_threaded(data, measured, 4, r2c)
    np.testing.assert_allclose(got, reference, rtol=0, atol=1e-12 * np.abs(reference).max())


def test_rytov_split_by_images_is_the_same():
    from qora.holo import unwrap

    rng = np.random.default_rng(4)
    n = 96
    yy, xx = np.mgrid[:n, :n] / n
    ratio = np.exp(1j * 12 * np.pi * ((yy - 0.5) ** 2 + (xx - 0.5) ** 2))[None] * np.exp(
        0.05 * (rng.standard_normal((30, n, n)) + 1j * rng.standard_normal((30, n, n))))
    assert ratio.size >= unwrap._THREADED_FROM
    whole = unwrap._rytov(ratio)
    for threads in (1, 2, 7):
        with host.threads(threads):
            np.testing.assert_array_equal(unwrap.rytov(ratio), whole)
    ratio[5, 3, 3] = 0
    with host.threads(2), pytest.raises(ValueError, match="zero"):
        unwrap.rytov(ratio)


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_bpm_passes_match_numpy(dtype):
    from qora.holo.bpm_cpu import propagate, screened

    rng = np.random.default_rng(5)

    def c(*shape):
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)

    p, w = c(96, 96), c(16, 96, 96)  # 2^17 values: the parallel loop
    tq, tr, a, s = c(16, 96, 96), c(16, 96, 96), c(16, 96, 96), c(16, 96, 96)
    want_s = tq * a + tr * s
    for threads in (1, 2):
        with host.threads(threads):
            np.testing.assert_allclose(screened(p, w), p * w, rtol=1e-6 if dtype == np.complex64 else 1e-14)
            got = s.copy()
            propagate(tq, tr, a, got)
            np.testing.assert_allclose(got, want_s, rtol=1e-5 if dtype == np.complex64 else 1e-13,
                                       atol=1e-6 if dtype == np.complex64 else 1e-14)


_CACHE_PROBE = """
import numba, numpy as np
from qora.phase import cpu
from qora.holo import bpm_cpu
y = np.ones(4096, np.complex64); a = np.ones(4096, np.float32)
cpu._modulus_serial(y, a, np.float32(1.0))      # the serial twin first: it fills the cache first
try:
    numba.threading_layer()
    print("layer before")
except ValueError:
    pass
cpu._modulus_parallel(y, a, np.float32(1.0))
print("modulus", numba.threading_layer())
print("twins", [f.py_func.__qualname__ for f in bpm_cpu._screen])
"""


def test_parallel_loop_is_not_its_serial_twin_from_numbas_cache(tmp_path):
    # One function jitted twice used to share a cache entry: the parallel loop loaded the serial one.
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path), NUMBA_NUM_THREADS="2",
               PYTHONPATH=os.pathsep.join(sys.path))
    for cache in ("empty", "filled by the first run"):
        out = subprocess.run([sys.executable, "-c", _CACHE_PROBE], env=env, capture_output=True, text=True,
                             timeout=300)
        assert out.returncode == 0, (cache, out.stderr)
        assert "layer before" not in out.stdout, cache
        assert "modulus " in out.stdout, cache  # threading_layer() raises if no loop ever started threads
        assert "_screen_loop_serial" in out.stdout and "'_screen_loop'" in out.stdout


def test_no_function_is_jitted_twice_by_hand():
    """Two cached dispatchers of one function share Numba's cache entry (see the test above): every
    parallel/serial pair goes through host.parallel_and_serial, which renames the twin."""
    import re
    from pathlib import Path

    import qora

    jitted = {}
    for path in Path(qora.__file__).parent.rglob("*.py"):
        for name in re.findall(r"njit\([^()]*\)\((\w+)\)", path.read_text()):
            jitted.setdefault((path.name, name), 0)
            jitted[(path.name, name)] += 1
    assert jitted and not [k for k, n in jitted.items() if n > 1]


def test_copy_parts_is_numpys_copy_over_threads():
    """copy_parts (the Pipeline's copies in and out of its page-locked buffers) is np.copyto with same-kind casting,
    split along the first axis on several threads: the same values for a cast, a broadcast value, a strided source
    and a 0-d array; an unsafe cast refused as NumPy refuses it. touched_empty is a zeroed array of the asked shape."""
    from concurrent.futures import ThreadPoolExecutor

    from qora.backend.host import copy_parts, threads, touched_empty

    rng = np.random.default_rng(0)
    src = rng.standard_normal((37, 256, 260))  # a row of 266 KB of float32: four parts of at least 1 MB
    with threads(4), ThreadPoolExecutor(4) as pool:
        for source in (src, src[:, ::2, 1::3], np.float64(2.5)):
            shape = np.broadcast_shapes(np.shape(source), (37,) + np.shape(source)[1:]) if np.ndim(source) else src.shape
            dst, ref = np.empty(shape, np.float32), np.empty(shape, np.float32)
            copy_parts(dst, source, pool=pool)
            np.copyto(ref, source, casting="same_kind")
            assert np.array_equal(dst, ref)
        zero_d = np.empty((), np.float64)
        copy_parts(zero_d, 3.0)
        assert zero_d == 3.0
        with pytest.raises(TypeError):
            copy_parts(np.empty((37, 4), np.int32), np.ones((37, 4)), pool=pool)
        out = touched_empty((9, 300, 301), np.complex64, pool=pool)
        assert out.shape == (9, 300, 301) and out.dtype == np.complex64 and not out.any()


def test_map_parts_covers_the_range_once_in_order_on_as_many_threads():
    import threading

    from qora.backend.host import map_parts, threads

    seen = []
    with threads(3):
        parts = map_parts(lambda lo, hi: seen.append(threading.get_ident()) or (lo, hi), 10)
        assert parts == [(0, 3), (3, 6), (6, 10)]
        assert map_parts(lambda lo, hi: (lo, hi), 10, least=4) == [(0, 5), (5, 10)]  # parts of at least 4
        assert map_parts(lambda lo, hi: threading.get_ident(), 2, least=4) == [threading.get_ident()]  # inline
    with threads(1):
        assert map_parts(lambda lo, hi: (lo, hi), 10) == [(0, 10)]
