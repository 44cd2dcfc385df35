"""Every FFT in Qora goes through this module.

- One-shot transforms (:func:`fftn`, :func:`rfftn`, ... with :mod:`scipy.fft`'s signature) follow
  their input: CuPy arrays go to cuFFT, NumPy arrays to ducc0 (else pocketfft through
  :mod:`scipy.fft`) on ``workers`` threads.
- Host threads: ``workers=None`` means :func:`qora.backend.host.num_threads` (``QORA_NUM_THREADS``,
  default the cores the process may use) for transforms of at least :data:`CPU_THREADS_FROM` points,
  one thread below; :func:`cpu_libraries` says which host FFT libraries are installed.
- :class:`PlanCache` (``Backend.fft``): plans made once per geometry and reused (below).
- :class:`RawPlan` and :class:`WorkArea`: cuFFT plans with explicit layouts sharing one work area
  (the holography pipeline's padded in-place layouts), from :mod:`qora.backend._cufft_raw`.

Plans made once per geometry and reused:

A plan transforms the trailing ``len(axes)`` axes of C-contiguous arrays of one
shape and dtype; any leading axes are a batch. On the CPU a plan is a thin
wrapper of ducc0 (or FFTW, or :mod:`scipy.fft`) on the setting's threads; on the GPU it owns a
cuFFT plan and its work area, and executes into caller-given buffers, so a step
built from plans allocates nothing and can be captured into a CUDA graph.

Normalisation follows NumPy: ``"backward"`` (inverse scaled by 1/n), ``"ortho"``,
``"forward"``, or ``None`` for unscaled transforms both ways (the engines fold
the scale into their own kernels).
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
import warnings

import numpy as np

from qora.backend import _cupy
from qora.backend._cufft_raw import C2C, C2R, FORWARD, INVERSE, R2C, Z2Z, RawPlan, WorkArea
from qora.backend.fft_host import (  # the host side (qora.backend.fft_host), re-exported: the one entry point
    CPU_THREADS_FROM, _cpu_c2c, _cpu_c2r, _cpu_r2c, cpu_libraries, cpu_threads, empty, fftw_wisdom, load_fftw_wisdom)

__all__ = ["cpu_threads", "cpu_libraries", "CPU_THREADS_FROM", "fftw_wisdom", "load_fftw_wisdom", "empty",
           "PlanCache", "C2CPlan", "R2CPlan", "HalfC2CPlan", "CallbackC2CPlan", "trailing_axes", "fast_length",
           "fft", "ifft", "rfft", "irfft", "fftn", "ifftn", "rfftn", "irfftn",
           "RawPlan", "WorkArea", "C2C", "R2C", "C2R", "Z2Z", "FORWARD", "INVERSE"]

NORMS = ("backward", "ortho", "forward", None)


def trailing_axes(ndim: int, axes) -> tuple[int, ...]:
    """Normalise ``axes`` to positive indices and check they are the trailing axes."""
    if axes is None:
        return tuple(range(ndim))
    if isinstance(axes, int):
        axes = (axes,)
    axes = tuple(sorted(a % ndim for a in axes))
    if len(set(axes)) != len(axes) or not axes:
        raise ValueError(f"axes must be distinct and non-empty, got {axes}")
    if axes != tuple(range(ndim - len(axes), ndim)):
        raise ValueError(
            f"FFT plans transform the trailing axes (leading axes are a batch); got axes {axes} for ndim {ndim}"
        )
    if len(axes) > 3:
        raise ValueError(f"at most 3 transformed axes are supported, got {len(axes)}")
    return axes


def _one_shot(name: str):
    """A transform of :mod:`scipy.fft`'s signature that follows its input: cuFFT (CuPy's plan
    cache) for a device array, else on the host on :func:`cpu_threads` threads (``workers=``)."""
    import scipy.fft

    reference = getattr(scipy.fft, name)

    def transform(x, *args, workers=None, **kwargs):
        if type(x).__module__.split(".", 1)[0] == "cupy":
            return getattr(_cupy.require("device FFTs").fft, name)(x, *args, **kwargs)
        threads = cpu_threads(np.size(x), workers)
        return reference(x, *args, workers=threads, **kwargs)

    transform.__name__ = transform.__qualname__ = name
    transform.__doc__ = (f"``{name}`` of a NumPy or CuPy array, arguments as :func:`scipy.fft.{name}` (``workers``: "
                         "host threads, default :func:`cpu_threads`): the one entry point for a transform made once "
                         "(plans that are reused: :class:`PlanCache`).")
    return transform


fft, ifft, rfft, irfft = (_one_shot(n) for n in ("fft", "ifft", "rfft", "irfft"))
fftn, ifftn, rfftn, irfftn = (_one_shot(n) for n in ("fftn", "ifftn", "rfftn", "irfftn"))


def fast_length(minimum: int) -> int:
    """The smallest even length >= ``minimum`` with no prime factor above 5.

    A length with a larger prime factor can be several times slower: on our CPU machine a
    376^3 transform (8 x 47) takes 5.2x longer than 384^3 and even 378^3 (2 x 27 x 7) 1.6x
    longer (docs/holo-performance.md).
    """
    m = max(2, int(minimum))
    while True:
        k = m
        for p in (2, 3, 5):
            while k % p == 0:
                k //= p
        if k == 1 and m % 2 == 0:
            return m
        m += 1


def _scales(norm, n: int) -> tuple[float, float]:
    """(forward scale, inverse scale) for a transform of n points."""
    if norm not in NORMS:
        raise ValueError(f"norm must be one of {NORMS}, got {norm!r}")
    if norm == "backward":
        return 1.0, 1.0 / n
    if norm == "forward":
        return 1.0 / n, 1.0
    if norm == "ortho":
        return 1.0 / math.sqrt(n), 1.0 / math.sqrt(n)
    return 1.0, 1.0


class _Plan:
    kind = ""

    def __init__(self, backend, shape, dtype, axes, norm):
        self.backend = backend
        self.xp = backend.xp
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)
        self.axes = trailing_axes(len(self.shape), axes)
        self.transform_shape = tuple(self.shape[a] for a in self.axes)
        self.batch = int(np.prod(self.shape[: len(self.shape) - len(self.axes)], dtype=np.int64))
        self.n = int(np.prod(self.transform_shape, dtype=np.int64))
        self.norm = norm
        self.forward_scale, self.inverse_scale = _scales(norm, self.n)
        self.created_s = 0.0  # time to create the plan, seconds

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(shape={self.shape}, dtype={self.dtype}, axes={self.axes}, "
            f"batch={self.batch}, norm={self.norm!r}, backend={self.backend.name!r})"
        )

    def _check(self, x, shape, dtype, what):
        if tuple(x.shape) != tuple(shape) or x.dtype != dtype:
            raise ValueError(f"{what}: expected shape {tuple(shape)} and dtype {dtype}, got {x.shape} and {x.dtype}")
        if not x.flags.c_contiguous:
            raise ValueError(f"{what}: the array must be C-contiguous")

    def _scale(self, y, s):
        if s != 1.0:
            y *= y.real.dtype.type(s)
        return y


class C2CPlan(_Plan):
    """Complex-to-complex transform of the trailing axes.

    ``forward(x, out=None)`` and ``inverse(x, out=None)`` return ``out`` (a new
    array when ``out`` is None; ``out`` may be ``x`` for an in-place transform).
    """

    kind = "c2c"

    def __init__(self, backend, shape, dtype=np.complex64, axes=None, norm="backward", fftw: bool = True):
        super().__init__(backend, shape, dtype, axes, norm)
        self.fftw = bool(fftw)
        if self.dtype not in (np.complex64, np.complex128):
            raise ValueError(f"C2C plans take complex64 or complex128, got {self.dtype}")
        t0 = time.perf_counter()
        self._cufft = None
        if backend.is_cuda:
            fftpack = _cupy.submodule("cupyx.scipy.fftpack")
            template = self.xp.empty(self.shape, self.dtype)
            self._cufft = fftpack.get_fft_plan(template, axes=self.axes, value_type="C2C")
            del template
        self.created_s = time.perf_counter() - t0

    def _run(self, x, out, direction: int):
        self._check(x, self.shape, self.dtype, "input")
        if out is None:
            out = self.empty()
        else:
            self._check(out, self.shape, self.dtype, "out")
        scale = self.forward_scale if direction < 0 else self.inverse_scale
        if self._cufft is not None:
            self._cufft.fft(x, out, direction)
            return self._scale(out, scale)
        _cpu_c2c(x, out, self.axes, direction < 0, self.fftw)
        return self._scale(out, scale)

    def empty(self):
        """An array of this plan's shape and dtype that its transforms run fastest on."""
        if self.backend.is_cuda:
            return self.xp.empty(self.shape, self.dtype)
        return empty(self.shape, self.dtype)

    def forward(self, x, out=None):
        """Forward transform, exp(-2 pi i k.r / n)."""
        return self._run(x, out, -1)

    def inverse(self, x, out=None):
        """Inverse transform, exp(+2 pi i k.r / n)."""
        return self._run(x, out, +1)


class R2CPlan(_Plan):
    """Real-to-complex transform of the trailing axes and its complex-to-real inverse.

    ``shape`` is the real array's shape; the spectrum has ``shape[-1] // 2 + 1``
    bins on the last axis (``spectrum_shape``). The C2R (``inverse``) may overwrite
    its input on either backend (cuFFT's, FFTW's and ducc0's fastest C2R do); pass a copy if the
    half spectrum is still needed. On the host the arrays it allocates are aligned for FFTW, which runs the
    transforms where installed and ``fftw`` (else ducc0).
    """

    kind = "r2c"

    def __init__(self, backend, shape, dtype=np.float32, axes=None, norm="backward", fftw: bool = True):
        super().__init__(backend, shape, dtype, axes, norm)
        self.fftw = bool(fftw)
        if self.dtype not in (np.float32, np.float64):
            raise ValueError(f"R2C plans take float32 or float64, got {self.dtype}")
        self.complex_dtype = np.result_type(self.dtype, np.complex64)
        self.spectrum_shape = self.shape[:-1] + (self.shape[-1] // 2 + 1,)
        t0 = time.perf_counter()
        self._fwd = self._inv = None
        if backend.is_cuda:
            fftpack = _cupy.submodule("cupyx.scipy.fftpack")
            real = self.xp.empty(self.shape, self.dtype)
            self._fwd = fftpack.get_fft_plan(real, axes=self.axes, value_type="R2C")
            del real
            half = self.xp.empty(self.spectrum_shape, self.complex_dtype)
            self._inv = fftpack.get_fft_plan(half, shape=self.transform_shape, axes=self.axes, value_type="C2R")
            del half
        self.created_s = time.perf_counter() - t0

    def _empty(self, shape, dtype):
        return self.xp.empty(shape, dtype) if self.backend.is_cuda else empty(shape, dtype)  # aligned for FFTW

    def forward(self, x, out=None):
        """Real ``shape`` -> complex ``spectrum_shape``."""
        self._check(x, self.shape, self.dtype, "input")
        if out is None:
            out = self._empty(self.spectrum_shape, self.complex_dtype)
        else:
            self._check(out, self.spectrum_shape, self.complex_dtype, "out")
        if self._fwd is not None:
            self._fwd.fft(x, out, -1)
        else:
            _cpu_r2c(x, out, self.axes, self.fftw)
        return self._scale(out, self.forward_scale)

    def inverse(self, x, out=None):
        """Complex ``spectrum_shape`` -> real ``shape``."""
        self._check(x, self.spectrum_shape, self.complex_dtype, "input")
        if out is None:
            out = self._empty(self.shape, self.dtype)
        else:
            self._check(out, self.shape, self.dtype, "out")
        if self._inv is not None:
            self._inv.fft(x, out, +1)
        else:
            _cpu_c2r(x, out, self.axes, self.transform_shape, self.fftw)
        return self._scale(out, self.inverse_scale)


@contextlib.contextmanager
def _quiet_experimental():
    """Silence CuPy's "experimental API" FutureWarning for the fp16 and callback plans we rely on.

    The tests turn warnings into errors; these APIs are the documented route to
    fp16 and LTO-callback cuFFT plans, and the GPU tests pin their behaviour.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*experimental.*", category=FutureWarning)
        yield


def _is_power_of_two(n: int) -> bool:
    return n > 0 and (n & (n - 1)) == 0


class HalfC2CPlan(_Plan):
    """fp16 complex-to-complex transform on the GPU (cuFFT ``XtPlanNd``, type 'E').

    CuPy has no complex32 dtype, so a half-precision complex array is a
    ``float16`` array with one more trailing axis of length 2 (real, imaginary):
    ``storage_shape = shape + (2,)``. cuFFT computes fp16 transforms only for
    power-of-two extents. The transform is unscaled whatever ``norm`` says about
    fp32 plans: in fp16 the caller picks the scale that keeps values in range.
    """

    kind = "c2c16"

    def __init__(self, backend, shape, axes=None):
        super().__init__(backend, shape, np.complex64, axes, None)
        if not backend.is_cuda:
            raise ValueError("fp16 FFT plans need the CUDA backend")
        bad = [s for s in self.transform_shape if not _is_power_of_two(s)]
        if bad:
            raise ValueError(f"fp16 cuFFT needs power-of-two extents on the transformed axes, got {self.transform_shape}")
        self.storage_shape = self.shape + (2,)
        self.dtype = np.dtype(np.float16)
        cufft = _cupy.submodule("cupy.cuda.cufft")
        t0 = time.perf_counter()
        ts = self.transform_shape
        with _quiet_experimental():
            self._plan = cufft.XtPlanNd(ts, ts, 1, self.n, "E", ts, 1, self.n, "E", self.batch, "E",
                                        order="C", last_axis=-1, last_size=None)
        self.created_s = time.perf_counter() - t0

    def _run(self, x, out, direction):
        self._check(x, self.storage_shape, np.float16, "input")
        if out is None:
            out = self.xp.empty_like(x)
        else:
            self._check(out, self.storage_shape, np.float16, "out")
        self._plan.fft(x, out, direction)
        return out

    def forward(self, x, out=None):
        return self._run(x, out, -1)

    def inverse(self, x, out=None):
        return self._run(x, out, +1)


class CallbackC2CPlan(_Plan):
    """A cuFFT C2C plan with LTO (JIT) load and/or store callbacks.

    ``store`` and ``load`` are ``(source, function_name)`` pairs of CUDA C++
    device functions with cuFFT's LTO callback signatures, for example::

        __device__ void name(void* out, unsigned long long offset, cufftComplex v,
                             void* info, void* shared)

    ``data`` is a device array whose pointer reaches the callbacks as
    ``info``: coefficients kept there can change between executions without a
    new plan. The plan is made (and its callbacks compiled and linked by cuFFT's
    NVRTC and nvJitLink) on construction; ``created_s`` reports how long it took.
    Transforms are unscaled.
    """

    kind = "callback"

    def __init__(self, backend, shape, *, axes=None, store=None, load=None, data=None):
        super().__init__(backend, shape, np.complex64, axes, None)
        if not backend.is_cuda:
            raise ValueError("cuFFT callback plans need the CUDA backend")
        if store is None and load is None:
            raise ValueError("a callback plan needs a load or a store callback")
        self.load, self.store, self.data = load, store, data
        t0 = time.perf_counter()
        with _quiet_experimental(), self._context():
            fftpack = _cupy.submodule("cupyx.scipy.fftpack")
            template = self.xp.empty(self.shape, self.dtype)
            self._cufft = fftpack.get_fft_plan(template, axes=self.axes, value_type="C2C")
            del template
        self.xp.cuda.get_current_stream().synchronize()
        self.created_s = time.perf_counter() - t0

    def _context(self):
        kw = {"cb_ver": "jit"}
        if self.load is not None:
            kw.update(cb_load=self.load[0], cb_load_name=self.load[1])
            if self.data is not None:
                kw["cb_load_data"] = self.data.data
        if self.store is not None:
            kw.update(cb_store=self.store[0], cb_store_name=self.store[1])
            if self.data is not None:
                kw["cb_store_data"] = self.data.data
        return self.xp.fft.config.set_cufft_callbacks(**kw)

    def _run(self, x, out, direction):
        self._check(x, self.shape, self.dtype, "input")
        if out is None:
            out = self.xp.empty_like(x)
        else:
            self._check(out, self.shape, self.dtype, "out")
        self._cufft.fft(x, out, direction)
        return out

    def forward(self, x, out=None):
        return self._run(x, out, -1)

    def inverse(self, x, out=None):
        return self._run(x, out, +1)


class PlanCache:
    """Plans of one backend, made once per (kind, shape, dtype, axes, batch, norm).

    ``made`` counts plans created, ``hits`` lookups served from the cache, so a
    test can show that a second run makes no plan. Callback plans are not cached
    here: their identity is their callback code and data, which the caller owns.
    """

    def __init__(self, backend):
        self.backend = backend
        self._plans: dict = {}
        self._lock = threading.Lock()
        self.made = 0
        self.hits = 0

    def __len__(self) -> int:
        return len(self._plans)

    def _get(self, key, factory):
        with self._lock:
            plan = self._plans.get(key)
            if plan is not None:
                self.hits += 1
                return plan
            plan = factory()
            self._plans[key] = plan
            self.made += 1
            return plan

    @staticmethod
    def _key(kind, shape, dtype, axes, norm):
        shape = tuple(int(s) for s in shape)
        axes = trailing_axes(len(shape), axes)
        batch = int(np.prod(shape[: len(shape) - len(axes)], dtype=np.int64))
        return (kind, shape, np.dtype(dtype).str, axes, batch, norm)

    def c2c(self, shape, dtype=np.complex64, *, axes=None, norm="backward", fftw: bool = True) -> C2CPlan:
        """A complex-to-complex plan for arrays of ``shape`` (trailing ``axes`` transformed).

        ``fftw=False``: never FFTW on the host, even where installed: FFTW_MEASURE plans once per shape
        and thread count (up to 20 s each way), which only a loop of thousands of transforms repays.
        """
        key = self._key("c2c", shape, dtype, axes, norm) + (bool(fftw),)
        return self._get(key, lambda: C2CPlan(self.backend, shape, dtype, axes, norm, fftw))

    def r2c(self, shape, dtype=np.float32, *, axes=None, norm="backward", fftw: bool = True) -> R2CPlan:
        """A real-to-complex plan (and its inverse) for real arrays of ``shape``; ``fftw`` as for :meth:`c2c`."""
        key = self._key("r2c", shape, dtype, axes, norm) + (bool(fftw),)
        return self._get(key, lambda: R2CPlan(self.backend, shape, dtype, axes, norm, fftw))

    def half_c2c(self, shape, *, axes=None) -> HalfC2CPlan:
        """An fp16 complex plan on the GPU (power-of-two extents; see :class:`HalfC2CPlan`)."""
        key = self._key("c2c16", shape, np.float16, axes, None)
        return self._get(key, lambda: HalfC2CPlan(self.backend, shape, axes))

    def callback_c2c(self, shape, *, axes=None, store=None, load=None, data=None) -> CallbackC2CPlan:
        """A new (uncached) C2C plan with LTO callbacks; see :class:`CallbackC2CPlan`."""
        return CallbackC2CPlan(self.backend, shape, axes=axes, store=store, load=load, data=data)

    def clear(self) -> None:
        with self._lock:
            self._plans.clear()
