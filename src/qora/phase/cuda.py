"""CUDA engines of qora.phase: the variant ladder behind the CPU engine's interface.

- ``naive``: plain CuPy array code, one operation per launch, the error summed on the
  host every iteration: the honest baseline.
- ``fused``: unscaled cuFFT plans and two hand-written kernels per iteration
  (``kernels/phase.cu``: the modulus step with the error's block sums, the support
  update), the error read by the host every iteration.
- ``graph``: the same kernels; the error goes into a device history indexed by a
  device-side counter, so ``n`` iterations (cuFFT included) are captured once into a
  CUDA graph, cached per (n, coefficients, constraint), and replayed; the host reads
  the history once per call, i.e. once per progress report.
- ``batched``: ``graph`` over several starts at once: one batched cuFFT plan and the
  start index from the launch grid (the Solver's ``batch``).
- ``half``: fp16 storage and fp16 cuFFT (power-of-two extents), fp32 arithmetic; the
  amplitude is scaled by its maximum so nothing overflows. Stalls near 1e-3 (fp16's
  three digits): a precision floor, never chosen by ``variant="auto"``.
- ``mixed``: HIO and RAAR iterations use the fp16 wave and transforms of ``half`` while
  ``x`` stays in fp32 (with an fp16 copy for the next transform); ER iterations, how a
  recipe ends, run the fp32 path of ``graph`` on the same ``x``.
- ``callback``: the modulus step and the update inside cuFFT's own passes as LTO store
  callbacks (:class:`CallbackEngine`).
- ``fused_fft``: the transforms as cuFFTDx line passes of our own that carry the modulus step
  and the update (:class:`FusedFFTEngine`): three (2D) or four (3D) passes over memory per
  iteration, none for the element-wise work alone (:mod:`qora.phase.cuda_fused`).

All engines hold their arrays on the device between calls; ``set_x``/``get_x`` move
host arrays. Every engine is compared with the CPU reference in
``tests/phase/test_phase_cuda.py``.
"""

from __future__ import annotations

import numpy as np

from qora.backend import fft
from qora.phase import kernels as K
from qora.phase.cuda_base import CONSTRAINT_CODES, _DeviceState, _KernelEngine
from qora.phase.cuda_fused import FusedFFTEngine

__all__ = ["CudaEngine", "NaiveCudaEngine", "CUDA_VARIANTS", "make_engine"]

CUDA_VARIANTS = ("naive", "fused", "graph", "batched", "half", "mixed", "callback", "fused_fft")


class NaiveCudaEngine(_DeviceState):
    """Plain CuPy array code; the host sums the error every iteration."""

    name = "naive"

    def iterate(self, iterations: int, a: float, b: float, constraint=None) -> np.ndarray:
        xp = self.xp
        axes = tuple(range(1, len(self.full)))
        amp = self.amp
        measured = amp >= 0
        inside = self.support.astype(bool)
        errors = np.empty((iterations, self.batch))
        for k in range(iterations):
            y = fft.fftn(self.x, axes=axes, norm="ortho")
            mag = xp.abs(y)
            d = mag - amp
            errors[k] = (xp.sum(xp.where(measured, d * d, 0), axis=axes)).get()  # host round trip
            safe = xp.where(mag > 0, mag, 1)
            y = xp.where(measured, xp.where(mag > 0, amp * (y / safe), amp), y)
            p = fft.ifftn(y, axes=axes, norm="ortho").astype(np.complex64)
            ins = inside
            val = p
            if constraint is not None:
                val = p.real.astype(np.complex64)
                if constraint == "positive":
                    ins = inside & (p.real >= 0)
            self.x = xp.where(ins, val, a * self.x + b * p).astype(np.complex64)
        return np.sqrt(errors / self.denominator)


class CudaEngine(_KernelEngine):
    """fp32 kernels: ``fused`` (``graph=False``: the host reads the error every iteration),
    ``graph`` and ``batched`` (CUDA graphs)."""

    def __init__(self, amp, support, batch: int = 1, *, graph: bool = True) -> None:
        super().__init__(amp, support, batch, graph=graph)
        self.name = ("batched" if batch > 1 else "graph") if graph else "fused"
        axes = tuple(range(1, len(self.full)))
        self.plan = self.backend.fft.c2c(self.full, np.complex64, axes=axes, norm=None)
        self.y = self.xp.empty(self.full, np.complex64)
        self.plan.forward(self.x, out=self.y)  # cuFFT kernels resident before any capture
        self.xp.cuda.get_current_stream().synchronize()

    def _step(self, a, b, code) -> None:
        self._launch_fp32(self.y, self.plan, a, b, code)


def _check_power_of_two(shape, variant):
    bad = [s for s in shape if s & (s - 1)]
    if bad:
        raise ValueError(f"variant {variant!r} needs power-of-two extents (fp16 cuFFT), got shape {tuple(shape)}; "
                         "use variant='graph'")


class _HalfBuffers:
    """The fp16 side shared by half and mixed: scaled amplitude, fp16 wave and plan."""

    def _init_half(self) -> None:
        xp = self.xp
        self.amp_unit = xp.empty(self.shape, np.float32)
        self.amplitude_written()
        axes = tuple(range(1, len(self.full)))
        self.plan16 = self.backend.fft.half_c2c(self.full, axes=axes)
        self.yh = xp.zeros(self.full + (2,), np.float16)
        self.plan16.forward(self.yh, out=self.yh)
        xp.cuda.get_current_stream().synchronize()

    def amplitude_written(self) -> None:
        xp, amp = self.xp, self.amp
        self.amax = float(amp.max())
        if not self.amax > 0:
            raise ValueError("the amplitude is zero everywhere: nothing to scale for fp16")
        self.amp_unit[...] = xp.where(amp >= 0, amp / np.float32(self.amax), np.float32(-1))

    def _to_half(self, x, xh, scale) -> None:
        K.to_half(x=x, xh=xh, scale=scale, total=self.n * self.batch)

    def _modulus_half(self, yh) -> None:
        K.modulus_half(y=yh, amp_unit=self.amp_unit, scale=self.scale, n=self.n, batch=self.batch,
                       err_sums=self.history, counter=self.counter)


class HalfEngine(_HalfBuffers, _KernelEngine):
    """fp16 storage and fp16 cuFFT with fp32 arithmetic; ``x`` is kept as x / max(a) in fp16."""

    name = "half"

    def __init__(self, amp, support, batch: int = 1) -> None:
        super().__init__(amp, support, batch, graph=True)
        _check_power_of_two(self.shape, "half")
        self._init_half()
        self.xh = self.xp.zeros(self.full + (2,), np.float16)

    def x_written(self) -> None:
        self._to_half(self.x, self.xh, 1.0 / self.amax)

    def _sync_x(self) -> None:
        K.from_half(xh=self.xh, x=self.x, scale=self.amax, total=self.n * self.batch)

    def get_x(self) -> np.ndarray:
        self._sync_x()
        return super().get_x()

    def shrinkwrap(self, sigma, threshold, min_fraction=0.2, **options):
        self._sync_x()
        return super().shrinkwrap(sigma, threshold, min_fraction, **options)

    def _step(self, a, b, code) -> None:
        self.plan16.forward(self.xh, out=self.yh)
        self._modulus_half(self.yh)
        self.plan16.inverse(self.yh, out=self.yh)
        K.update_half(x=self.xh, p=self.yh, support=self.support, a=a, b=b, constraint=code, pscale=self.scale,
                      n=self.n, batch=self.batch, counter=self.counter)

    def iterate(self, iterations, a, b, constraint=None):
        # the fp16 kernels sum (|F x| - a)^2 / max(a)^2: scale back to the measured amplitude
        return super().iterate(iterations, a, b, constraint) * self.amax


class MixedEngine(_HalfBuffers, CudaEngine):
    """HIO and RAAR in fp16 transforms with ``x`` kept in fp32 (plus its fp16 copy); ER in fp32."""

    def __init__(self, amp, support, batch: int = 1) -> None:
        super().__init__(amp, support, batch, graph=True)
        _check_power_of_two(self.shape, "mixed")
        self.name = "mixed"
        self._init_half()
        self.xh = self.xp.zeros(self.full + (2,), np.float16)
        self._xh_fresh = False

    @staticmethod
    def _is_fp32(a, b) -> bool:
        return a == 0.0 and b == 0.0  # ER, how recipes end

    def x_written(self) -> None:
        self._xh_fresh = False

    def _before(self, a, b) -> None:
        if self._is_fp32(a, b):
            self._xh_fresh = False  # fp32 iterations change x without the copy
        elif not self._xh_fresh:
            self._to_half(self.x, self.xh, 1.0 / self.amax)
            self._xh_fresh = True

    def _step(self, a, b, code) -> None:
        if self._is_fp32(a, b):
            self._launch_fp32(self.y, self.plan, a, b, code)
            return
        self.plan16.forward(self.xh, out=self.yh)
        self._modulus_half(self.yh)
        self.plan16.inverse(self.yh, out=self.yh)
        K.update_mixed(x=self.x, xh=self.xh, p=self.yh, support=self.support, a=a, b=b, constraint=code,
                       pscale=self.scale * self.amax, xh_scale=1.0 / self.amax, n=self.n, batch=self.batch,
                       counter=self.counter)

    def iterate(self, iterations, a, b, constraint=None):
        errors = super().iterate(iterations, a, b, constraint)
        return errors if self._is_fp32(a, b) else errors * self.amax


class CallbackEngine(_KernelEngine):
    """The element-wise work inside cuFFT's passes, as LTO callbacks (``kernels/callbacks.cu``).

    ``mode="store"`` (the default, the seed's form): the forward transform's store
    callback applies the modulus projection (its error terms added to 4096 slots per
    start), the inverse's the support update, into the other half of a double-buffered x.
    ``mode="load"``: the inverse transform loads the spectrum through the modulus
    projection, and the forward transform of the next iteration loads P_M x through the
    support update, writing the new x as it goes; a chunk starts with a plain forward
    transform of x and ends with the ``update_step`` kernel. Measured on the H200 the load
    form is 3x slower in 2D and 4% faster at 256^3 (docs/phase-performance.md). Either way a one-block kernel reduces the slots
    into the history after each modulus step. The coefficients live in device memory, so
    ER, HIO and RAAR share the plans; graphs are cached per (length, coefficients[, half]).
    """

    name = "callback"
    SLOTS = 4096
    MODES = ("load", "store")

    def __init__(self, amp, support, batch: int = 1, *, mode: str = "store", defines: dict | None = None) -> None:
        """``defines``: preprocessor switches of ``callbacks.cu`` (the probe's cut-down builds)."""
        if mode not in self.MODES:
            raise ValueError(f"mode must be one of {self.MODES}, got {mode!r}")
        super().__init__(amp, support, batch, graph=True)
        from qora.backend.kernels import kernel_source

        xp = self.xp
        self.mode = mode
        self.y = xp.empty(self.full, np.complex64)
        self.slots = xp.zeros(self.batch * self.SLOTS, np.float32)
        self.state = xp.zeros(2, np.int32)
        self.coef = xp.zeros(3, np.float32)
        modulus = np.zeros(1, dtype=[("amp", "u8"), ("slots", "u8"), ("n", "i8"), ("scale", "f4"), ("pad", "f4")])
        modulus[0] = (self.amp.data.ptr, self.slots.data.ptr, self.n, self.scale, 0.0)
        self._modulus_info = xp.asarray(modulus.view(np.uint8))
        source = "".join(f"#define {k} {v}\n" for k, v in (defines or {}).items())
        source += kernel_source("qora.phase", "callbacks.cu")
        axes = tuple(range(1, len(self.full)))
        plans = self.backend.fft
        if mode == "store":
            self.bufs = [self.x, xp.zeros_like(self.x)]
            self.half = 0
            inv = np.zeros(1, dtype=[("support", "u8"), ("buf0", "u8"), ("buf1", "u8"), ("state", "u8"),
                                     ("coef", "u8"), ("n", "i8")])
            inv[0] = (self.support.data.ptr, self.bufs[0].data.ptr, self.bufs[1].data.ptr, self.state.data.ptr,
                      self.coef.data.ptr, self.n * self.batch)
            self._update_info = xp.asarray(inv.view(np.uint8))
            self.plan_forward = plans.callback_c2c(self.full, axes=axes, store=(source, "qora_forward_store"),
                                                 data=self._modulus_info)
            self.plan_inverse = plans.callback_c2c(self.full, axes=axes, store=(source, "qora_inverse_store"),
                                                 data=self._update_info)
            created = [self.plan_forward, self.plan_inverse]
        else:
            upd = np.zeros(1, dtype=[("support", "u8"), ("x", "u8"), ("coef", "u8"), ("n", "i8")])
            upd[0] = (self.support.data.ptr, self.x.data.ptr, self.coef.data.ptr, self.n * self.batch)
            self._update_info = xp.asarray(upd.view(np.uint8))
            self.plan_plain = plans.c2c(self.full, np.complex64, axes=axes)
            self.plan_forward = plans.callback_c2c(self.full, axes=axes, load=(source, "qora_update_load"),
                                                 data=self._update_info)
            self.plan_inverse = plans.callback_c2c(self.full, axes=axes, load=(source, "qora_modulus_load"),
                                                 data=self._modulus_info)
            created = [self.plan_forward, self.plan_inverse]
        self.plan_created_s = sum(p.created_s for p in created)

    # store mode: the current half of the double buffer is the object
    @property
    def x(self):
        return self.bufs[self.half] if "bufs" in self.__dict__ else self.__dict__["x"]

    @x.setter
    def x(self, value):
        if "bufs" in self.__dict__:
            self.bufs[self.half][...] = value
        else:
            self.__dict__["x"] = value

    def _reduce(self) -> None:
        K.reduce_slots(slots=self.slots, batch=self.batch, err_sums=self.history, state=self.state)

    def _capture_store(self, iterations: int) -> None:
        half = self.half
        self.state[1:2].fill(half)
        for k in range(iterations):
            self.plan_forward.forward(self.bufs[(half + k) % 2], out=self.y)
            self._reduce()
            self.plan_inverse.inverse(self.y, out=self.y)

    def _capture_load(self, iterations: int, a: float, b: float, code: int) -> None:
        for k in range(iterations):
            if k == 0:
                self.plan_plain.forward(self.x, out=self.y)
            else:
                self.plan_forward.forward(self.y, out=self.y)  # the update of iteration k - 1, then F
            self.plan_inverse.inverse(self.y, out=self.y)  # the modulus step, then F^-1: y = P_M x
            self._reduce()
        K.update_step(x=self.x, p=self.y, support=self.support, a=a, b=b, constraint=code, n=self.n,
                      batch=self.batch, counter=self.counter)

    def iterate(self, iterations: int, a: float, b: float, constraint=None) -> np.ndarray:
        code = CONSTRAINT_CODES[constraint]
        self._ensure_history(iterations)
        key = (iterations, float(a), float(b), code, getattr(self, "half", 0))
        graph = self._graphs.get(key)
        if graph is None:
            from qora.backend.graph import StepGraph

            def captured():
                self.history.fill(0)
                self.state[0:1].fill(0)
                self.coef[0:1].fill(a)
                self.coef[1:2].fill(b)
                self.coef[2:3].fill(code)
                if self.mode == "store":
                    self._capture_store(iterations)
                else:
                    self._capture_load(iterations, a, b, code)

            graph = self._graphs[key] = StepGraph(captured)
        graph.replay()
        if self.mode == "store":
            self.half = (self.half + iterations) % 2
        errors = self.history[: iterations * self.batch].get().reshape(iterations, self.batch)
        return np.sqrt(errors / self.denominator)


def make_engine(variant: str, amp, support, batch: int):
    """The CUDA engine of ``variant`` for B = ``batch`` starts."""
    if variant == "naive":
        return NaiveCudaEngine(amp, support, batch)
    if variant == "fused":
        return CudaEngine(amp, support, batch, graph=False)
    if variant in ("graph", "batched"):
        return CudaEngine(amp, support, batch, graph=True)
    if variant == "half":
        return HalfEngine(amp, support, batch)
    if variant == "mixed":
        return MixedEngine(amp, support, batch)
    if variant == "callback":
        return CallbackEngine(amp, support, batch)
    if variant == "fused_fft":
        return FusedFFTEngine(amp, support, batch)
    raise ValueError(f"variant must be one of {CUDA_VARIANTS} on the GPU, got {variant!r}")
