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

All engines hold their arrays on the device between calls; ``set_x``/``get_x`` move
host arrays. Every engine is compared with the CPU reference in
``tests/phase/test_phase_cuda.py``.
"""

from __future__ import annotations

import math

import numpy as np

from qora.backend import resolve
from qora.backend.kernels import load_module
from qora.phase.physics import fourier_error, shrinkwrap

__all__ = ["CudaEngine", "NaiveCudaEngine", "CUDA_VARIANTS", "make_engine"]

CUDA_VARIANTS = ("naive", "fused", "graph", "batched")
THREADS = 256
CONSTRAINT_CODES = {None: 0, "real": 1, "positive": 2}


class _DeviceState:
    """Arrays on the device shared by the engines: x, amplitude, support; host I/O."""

    def __init__(self, amp, support, batch: int) -> None:
        self.backend = resolve("cuda")
        self.xp = self.backend.xp
        self.shape = tuple(amp.shape)
        self.batch = int(batch)
        self.n = int(np.prod(self.shape))
        self.scale = 1.0 / math.sqrt(self.n)
        xp = self.xp
        self.amp = xp.asarray(np.ascontiguousarray(amp, np.float32))
        self.denominator = float(np.sum(np.where(amp >= 0, np.asarray(amp, np.float64) ** 2, 0.0)))
        self.full = (self.batch,) + self.shape
        self.x = xp.zeros(self.full, np.complex64)
        self.support = xp.zeros(self.full, np.uint8)
        self.set_support(support)

    def set_support(self, support) -> None:
        s = np.broadcast_to(np.asarray(support, bool), self.full).astype(np.uint8)
        self.support[...] = self.xp.asarray(s)

    def set_x(self, x) -> None:
        self.x[...] = self.xp.asarray(np.ascontiguousarray(x, np.complex64))

    def get_x(self) -> np.ndarray:
        return self.x.get()

    def get_support(self) -> np.ndarray:
        return self.support.get().astype(bool)

    def fourier_errors(self) -> np.ndarray:
        """Fourier error of each start's current iterate (no update)."""
        return np.array([fourier_error(self.x[s], self.amp) for s in range(self.batch)])

    def shrinkwrap(self, sigma: float, threshold: float, min_fraction: float = 0.2) -> np.ndarray:
        changed = np.zeros(self.batch, bool)
        for s in range(self.batch):
            old = self.support[s].astype(bool)
            new, ok = shrinkwrap(self.x[s], old, sigma=sigma, threshold=threshold, min_fraction=min_fraction)
            if ok:
                changed[s] = bool((new != old).any())
                self.support[s] = new.astype(np.uint8)
        return changed


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
            y = xp.fft.fftn(self.x, axes=axes, norm="ortho")
            mag = xp.abs(y)
            d = mag - amp
            errors[k] = (xp.sum(xp.where(measured, d * d, 0), axis=axes)).get()  # host round trip
            safe = xp.where(mag > 0, mag, 1)
            y = xp.where(measured, xp.where(mag > 0, amp * (y / safe), amp), y)
            p = xp.fft.ifftn(y, axes=axes, norm="ortho").astype(np.complex64)
            ins = inside
            val = p
            if constraint is not None:
                val = p.real.astype(np.complex64)
                if constraint == "positive":
                    ins = inside & (p.real >= 0)
            self.x = xp.where(ins, val, a * self.x + b * p).astype(np.complex64)
        return np.sqrt(errors / self.denominator)


class CudaEngine(_DeviceState):
    """Fused kernels (``graph=False``: the host reads the error every iteration) or CUDA graphs."""

    def __init__(self, amp, support, batch: int = 1, *, graph: bool = True) -> None:
        super().__init__(amp, support, batch)
        self.name = ("batched" if batch > 1 else "graph") if graph else "fused"
        self.use_graph = graph
        xp = self.xp
        axes = tuple(range(1, len(self.full)))
        self.plan = self.backend.fft.c2c(self.full, np.complex64, axes=axes, norm=None)
        self.y = xp.empty(self.full, np.complex64)
        module = load_module("qora.phase", "phase.cu")
        self._modulus = module.get_function("modulus_step")
        self._update = module.get_function("update_step")
        work = self.n // 2 if self.n % 2 == 0 else self.n
        sms = self.backend.device_facts().sm_count
        self.grid = (max(1, min(-(-work // THREADS), max(1, 8 * sms // self.batch))), self.batch)
        self.counter = xp.zeros(1, np.int32)
        self.history = xp.zeros(0, np.float64)
        self._graphs: dict = {}
        self.plan.forward(self.x, out=self.y)  # cuFFT kernels resident before any capture
        xp.cuda.get_current_stream().synchronize()

    def _step(self, a, b, code) -> None:
        self.plan.forward(self.x, out=self.y)
        self._modulus(self.grid, (THREADS,), (self.y, self.amp, np.float32(self.scale), np.int64(self.n),
                                              self.history, self.counter))
        self.plan.inverse(self.y, out=self.y)
        self._update(self.grid, (THREADS,), (self.x, self.y, self.support, np.float32(a), np.float32(b),
                                             np.int32(code), np.int64(self.n), self.counter))

    def _ensure_history(self, iterations: int) -> None:
        if self.history.size < iterations * self.batch:
            # room for at least 1024 iterations, doubling: captured graphs point at the
            # history, so a reallocation costs a recapture of every cached graph
            size = max(1024, 2 * self.history.size // max(1, self.batch), iterations)
            while size < iterations:
                size *= 2
            self.history = self.xp.zeros(size * self.batch, np.float64)
            self._graphs.clear()

    def _reset(self) -> None:
        self.history.fill(0)
        self.counter.fill(0)

    def iterate(self, iterations: int, a: float, b: float, constraint=None) -> np.ndarray:
        code = CONSTRAINT_CODES[constraint]
        self._ensure_history(iterations)
        if not self.use_graph:
            self._reset()
            errors = np.empty((iterations, self.batch))
            for k in range(iterations):
                self._step(a, b, code)
                errors[k] = self.history[k * self.batch:(k + 1) * self.batch].get()  # host round trip
            return np.sqrt(errors / self.denominator)
        key = (iterations, float(a), float(b), code)
        graph = self._graphs.get(key)
        if graph is None:
            from qora.backend.graph import StepGraph

            def captured():
                self._reset()
                for _ in range(iterations):
                    self._step(a, b, code)

            graph = self._graphs[key] = StepGraph(captured)
        graph.replay()  # ordered with the current stream, so the read below waits for it
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
    raise ValueError(f"variant must be one of {CUDA_VARIANTS} on the GPU, got {variant!r}")
