import numpy as np
import pytest

from qora.backend.fft import trailing_axes

SHAPES = [((16, 16), None), ((15, 17), None), ((6, 9, 10), None), ((4, 8, 6), (1, 2)), ((3, 5, 7, 8), (2, 3))]


def _random(rng, shape, dtype=np.complex64):
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)


@pytest.mark.parametrize("shape,axes", SHAPES)
@pytest.mark.parametrize("norm", ["backward", "ortho", "forward", None])
def test_c2c_matches_numpy_float64(be, rng, shape, axes, norm):
    x = _random(rng, shape)
    plan = be.fft.c2c(shape, np.complex64, axes=axes, norm=norm)
    ax = trailing_axes(len(shape), axes)
    np_norm = norm if norm is not None else "backward"
    ref_f = np.fft.fftn(x.astype(np.complex128), axes=ax, norm=np_norm)
    ref_i = np.fft.ifftn(x.astype(np.complex128), axes=ax, norm=np_norm)
    if norm is None:  # unscaled both ways
        ref_i = ref_i * plan.n
    y = be.to_host(plan.forward(be.asarray(x)))
    z = be.to_host(plan.inverse(be.asarray(x)))
    assert y.dtype == np.complex64
    np.testing.assert_allclose(y, ref_f, rtol=0, atol=2e-6 * np.abs(ref_f).max())
    np.testing.assert_allclose(z, ref_i, rtol=0, atol=2e-6 * np.abs(ref_i).max())


def test_c2c_in_place_round_trip(be, rng):
    x = _random(rng, (3, 32, 32))
    d = be.asarray(x)
    plan = be.fft.c2c(x.shape, axes=(1, 2))
    out = plan.forward(d, out=d)
    assert out is d
    plan.inverse(d, out=d)
    np.testing.assert_allclose(be.to_host(d), x, atol=1e-5)


def test_complex128_plan(be, rng):
    x = _random(rng, (8, 12), np.complex128)
    y = be.to_host(be.fft.c2c(x.shape, np.complex128).forward(be.asarray(x)))
    np.testing.assert_allclose(y, np.fft.fft2(x), atol=1e-12 * np.abs(y).max())


@pytest.mark.parametrize("shape", [(16, 16), (15, 18), (5, 8, 9)])
def test_r2c_matches_numpy(be, rng, shape):
    x = rng.standard_normal(shape).astype(np.float32)
    plan = be.fft.r2c(shape)
    assert plan.spectrum_shape == shape[:-1] + (shape[-1] // 2 + 1,)
    spec = plan.forward(be.asarray(x))
    ref = np.fft.rfftn(x.astype(np.float64))
    np.testing.assert_allclose(be.to_host(spec), ref, atol=2e-6 * np.abs(ref).max())
    back = be.to_host(plan.inverse(spec.copy()))
    np.testing.assert_allclose(back, x, atol=1e-5)


def test_plan_cache_reuses_plans(be):
    cache = be.fft
    cache.clear()
    made, hits = cache.made, cache.hits
    p1 = cache.c2c((32, 32))
    p2 = cache.c2c((32, 32))
    p3 = cache.c2c((32, 32), norm="ortho")
    p4 = cache.c2c((2, 32, 32), axes=(1, 2))
    assert p1 is p2 and p1 is not p3 and p4 is not p1
    assert p4.batch == 2 and p1.batch == 1
    assert cache.made == made + 3 and cache.hits == hits + 1
    assert len(cache) == 3


def test_plan_rejects_bad_input(be):
    plan = be.fft.c2c((8, 8))
    with pytest.raises(ValueError, match="expected shape"):
        plan.forward(be.asarray(np.zeros((8, 9), np.complex64)))
    with pytest.raises(ValueError, match="expected shape"):
        plan.forward(be.asarray(np.zeros((8, 8), np.complex128)))
    with pytest.raises(ValueError, match="C-contiguous"):
        plan.forward(be.asarray(np.zeros((8, 16), np.complex64))[:, ::2])
    with pytest.raises(ValueError, match="trailing axes"):
        be.fft.c2c((4, 8, 8), axes=(0, 1))
    with pytest.raises(ValueError, match="complex64 or complex128"):
        be.fft.c2c((8, 8), np.float32)
    with pytest.raises(ValueError, match="norm must be"):
        be.fft.c2c((8, 8), norm="unitary")


def test_half_plan_needs_cuda_on_cpu():
    from qora.backend import resolve

    with pytest.raises(ValueError, match="CUDA"):
        resolve("cpu").fft.half_c2c((16, 16))
    with pytest.raises(ValueError, match="CUDA"):
        resolve("cpu").fft.callback_c2c((16, 16), store=("", "f"))


@pytest.mark.gpu
@pytest.mark.parametrize("shape,axes", [((64, 64), None), ((32, 32, 32), None), ((4, 128, 64), (1, 2))])
def test_half_plan_matches_fp64_reference(rng, shape, axes):
    from qora.backend import resolve

    be = resolve("cuda")
    plan = be.fft.half_c2c(shape, axes=axes)
    x = _random(rng, shape) * np.float32(2.0**-6)
    storage = np.stack([x.real, x.imag], axis=-1).astype(np.float16)
    y = be.to_host(plan.forward(be.asarray(storage)))
    y = y[..., 0].astype(np.float64) + 1j * y[..., 1]
    ref = np.fft.fftn(storage[..., 0].astype(np.float64) + 1j * storage[..., 1], axes=plan.axes)
    rel = np.linalg.norm(y - ref) / np.linalg.norm(ref)
    assert rel < 3e-3  # fp16 storage: about 11 bits per value
    assert be.fft.half_c2c(shape, axes=axes) is plan


@pytest.mark.gpu
def test_half_plan_rejects_non_power_of_two():
    from qora.backend import resolve

    with pytest.raises(ValueError, match="power-of-two"):
        resolve("cuda").fft.half_c2c((48, 64))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
@pytest.mark.parametrize("wide", [False, True])
def test_strided_raw_plan_transforms_the_slow_axis_in_place(rng, dtype, wide):
    """A transform down the columns (stride = batch = the columns, idist 1), in place, against NumPy's
    float64 transform along axis 0; the 64-bit plan gives the same numbers as the 32-bit one."""
    from qora.backend import resolve
    from qora.backend.fft import C2C, FORWARD, Z2Z, RawPlan, WorkArea

    xp = resolve("cuda").xp
    x = _random(rng, (48, 6, 35)).astype(dtype)
    columns = x.size // x.shape[0]
    work = WorkArea()
    plan = work.add(RawPlan(C2C if dtype == np.complex64 else Z2Z, (48,), batch=columns, inembed=(48,),
                            onembed=(48,), idist=1, odist=1, stride=columns, wide=wide))
    work.allocate()
    assert plan.wide is wide
    y = xp.asarray(x)
    plan.execute(y.data.ptr, y.data.ptr, FORWARD)
    ref = np.fft.fft(x.astype(np.complex128), axis=0)
    tol = 2e-6 if dtype == np.complex64 else 1e-13
    assert np.linalg.norm(xp.asnumpy(y) - ref) / np.linalg.norm(ref) < tol


def test_a_strided_raw_plan_needs_its_embeds():
    from qora.backend.fft import C2C, RawPlan

    with pytest.raises(ValueError, match="needs inembed and onembed"):
        RawPlan(C2C, (48,), batch=4, idist=1, odist=1, stride=4)


STORE_SCALE = r"""
#include <cufftXt.h>
__device__ void qora_store_scaled(void* out, unsigned long long offset, cufftComplex v,
                                  void* info, void* shared) {
    const float s = *static_cast<const float*>(info);
    static_cast<cufftComplex*>(out)[offset] = make_cuComplex(s * v.x, s * v.y);
}
"""


@pytest.mark.gpu
def test_callback_plan_applies_store_callback(rng):
    from qora.backend import resolve

    be = resolve("cuda")
    xp = be.xp
    factor = xp.asarray(np.array([2.5], np.float32))
    plan = be.fft.callback_c2c((64, 64), store=(STORE_SCALE, "qora_store_scaled"), data=factor)
    assert plan.created_s > 0
    x = _random(rng, (64, 64))
    ref = np.fft.fft2(x.astype(np.complex128))
    y = be.to_host(plan.forward(be.asarray(x)))
    np.testing.assert_allclose(y, 2.5 * ref, atol=1e-5 * np.abs(2.5 * ref).max())
    # The coefficient lives in device memory: changing it needs no new plan.
    factor[...] = -1.0
    y = be.to_host(plan.forward(be.asarray(x)))
    np.testing.assert_allclose(y, -ref, atol=1e-5 * np.abs(ref).max())


@pytest.mark.parametrize("fftw", ["1", "0"])
@pytest.mark.parametrize("shape", [(32, 48), (3, 16, 16), (9, 10, 11)])
def test_cpu_fft_paths_agree_with_numpy(monkeypatch, rng, fftw, shape):
    """FFTW (aligned arrays) and the ducc0 fallback (QORA_DISABLE_FFTW=1) give the same transform."""
    from qora.backend import resolve
    from qora.backend.fft import C2CPlan, empty

    monkeypatch.setenv("QORA_DISABLE_FFTW", "0" if fftw == "1" else "1")
    plan = C2CPlan(resolve("cpu"), shape, np.complex64, axes=(-2, -1), norm=None)
    x = empty(shape)
    x[...] = _random(rng, shape)
    ref = np.fft.fftn(x.astype(np.complex128), axes=(-2, -1))
    y = plan.forward(x.copy())  # an unaligned copy may take either path
    z = plan.forward(x, out=empty(shape))
    for out in (y, z):
        np.testing.assert_allclose(out, ref, atol=2e-6 * np.abs(ref).max())
    w = x.copy()
    plan.inverse(plan.forward(x, out=x), out=x)
    np.testing.assert_allclose(x, w * plan.n, atol=2e-6 * np.abs(w * plan.n).max())


@pytest.mark.parametrize("fftw", ["1", "0"])
@pytest.mark.parametrize("shape", [(32, 48), (3, 16, 18), (9, 10, 11)])
def test_cpu_real_transforms_agree_with_numpy(monkeypatch, rng, fftw, shape):
    """The R2C and its C2R on aligned arrays, through FFTW (which must take them where installed) and through the
    ducc0 fallback, equal NumPy's float64 transforms, unscaled."""
    from qora.backend import fft_host

    monkeypatch.setenv("QORA_DISABLE_FFTW", "0" if fftw == "1" else "1")
    axes = (-2, -1)
    x = fft_host.empty(shape, np.float32)
    x[...] = rng.standard_normal(shape)
    half = shape[:-1] + (shape[-1] // 2 + 1,)
    spec, back = fft_host.empty(half, np.complex64), fft_host.empty(shape, np.float32)
    if fftw == "1" and fft_host._pyfftw() is not None:
        assert fft_host._fftw.run(x, spec, axes, True)  # FFTW took the aligned pair
    fft_host._cpu_r2c(x, spec, axes)
    ref = np.fft.rfftn(x.astype(np.float64), axes=axes)
    np.testing.assert_allclose(spec, ref, atol=2e-6 * np.abs(ref).max())
    n = shape[-2] * shape[-1]
    fft_host._cpu_c2r(spec, back, axes, shape[-2:])  # may overwrite spec
    np.testing.assert_allclose(back, x * n, atol=2e-6 * n * np.abs(x).max())


def test_aligned_returns_the_array_where_fftw_can_take_it():
    from qora.backend import fft_host

    a = fft_host.empty((4, 6), np.float32)
    a[...] = np.arange(24).reshape(4, 6)  # empty's memory is uninitialised: a NaN there is never equal to itself
    assert fft_host.aligned(a, np.float32) is a
    for other in (a[:, ::2], a.astype(np.float64), np.arange(24, dtype=np.float32).reshape(4, 6)[1:]):
        b = fft_host.aligned(other, np.float32)
        assert b.dtype == np.float32 and b.flags.c_contiguous and np.array_equal(b, other)
        pyfftw = fft_host._pyfftw()
        assert pyfftw is None or b.ctypes.data % pyfftw.simd_alignment == 0


_PLAN_AND_HASH = """
import hashlib, numpy as np
from qora.backend.fft_host import _cpu_c2c, empty, fftw_wisdom
x = empty((48, 40, 36), np.complex64)
x[...] = np.random.default_rng(0).standard_normal(x.shape) + 1j * np.random.default_rng(1).standard_normal(x.shape)
out = empty(x.shape, np.complex64)
_cpu_c2c(x, out, (0, 1, 2), True)
print(hashlib.sha256(out.tobytes()).hexdigest())
"""


def test_measured_plans_are_kept_for_the_next_process(tmp_path):
    """FFTW's measured plans go to the wisdom file (QORA_FFTW_WISDOM), the next process plans from it: the two
    give the same transform bit for bit (measuring afresh may pick another algorithm, rounding otherwise: the
    Bragg scan's phasing differed from run to run); "off" writes nothing."""
    import os
    import subprocess
    import sys

    pytest.importorskip("pyfftw")
    wisdom = tmp_path / "w.npz"
    env = {**os.environ, "QORA_FFTW_WISDOM": str(wisdom), "QORA_DISABLE_FFTW": "0", "QORA_NUM_THREADS": "1"}
    first = subprocess.run([sys.executable, "-c", _PLAN_AND_HASH], env=env, capture_output=True, text=True, check=True)
    assert wisdom.is_file() and wisdom.stat().st_size > 0
    stamp = wisdom.stat().st_mtime_ns
    second = subprocess.run([sys.executable, "-c", _PLAN_AND_HASH], env=env, capture_output=True, text=True,
                            check=True)
    assert first.stdout == second.stdout and len(first.stdout.strip()) == 64
    assert wisdom.stat().st_mtime_ns == stamp  # nothing new measured: the file is as the first process left it
    assert not list(tmp_path.glob(".*.tmp"))  # the atomic write's temporary is gone
    unset = {k: v for k, v in env.items() if k != "QORA_FFTW_WISDOM"}
    subprocess.run([sys.executable, "-c", _PLAN_AND_HASH], env={**unset, "XDG_CACHE_HOME": str(tmp_path / "cache")},
                   check=True, capture_output=True)
    assert list((tmp_path / "cache" / "qora").glob("fftw-wisdom-*.npz"))  # the default place
    subprocess.run([sys.executable, "-c", _PLAN_AND_HASH], check=True, capture_output=True,
                   env={**env, "QORA_FFTW_WISDOM": "off", "XDG_CACHE_HOME": str(tmp_path / "off")})
    assert not (tmp_path / "off").exists()


def test_an_unwritable_wisdom_file_is_said_once(tmp_path, monkeypatch):
    """Where the wisdom file cannot be written the transform still runs and a warning names the setting, once."""
    import warnings

    from qora.backend import fft_host

    pytest.importorskip("pyfftw")
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    monkeypatch.setattr(fft_host, "_WISDOM_WARNED", [])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fft_host._write_wisdom(blocked / "w.npz", (b"a", b"b", b"c"))
        fft_host._write_wisdom(blocked / "w.npz", (b"a", b"b", b"c"))
    said = [w for w in caught if "QORA_FFTW_WISDOM" in str(w.message)]
    assert len(said) == 1 and issubclass(said[0].category, RuntimeWarning)
