"""The device state and the iteration loop (eager or CUDA graph) shared by the CUDA variants of
:mod:`qora.phase.cuda` and :mod:`qora.phase.cuda_fused`."""

from __future__ import annotations

import math

import numpy as np

from qora.backend import is_device_array, resolve
from qora.phase import kernels as K
from qora.phase.physics import CONSTRAINT_CODES
from qora.phase.support import shrinkwrap_starts



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

    def set_amplitude(self, amp) -> None:
        """A new pattern of the same shape, written in place (plans and captured graphs stay valid)."""
        amp = np.ascontiguousarray(amp, np.float32)
        if amp.shape != self.shape:
            raise ValueError(f"amplitude shape {amp.shape} differs from the engine's {self.shape}")
        self.amp.set(amp)
        self.denominator = float(np.sum(np.where(amp >= 0, np.asarray(amp, np.float64) ** 2, 0.0)))
        self.amplitude_written()

    def amplitude_written(self) -> None:
        """Hook: the amplitude was replaced (engines with a scaled copy refresh it)."""

    def set_support(self, support) -> None:
        xp = self.xp
        s = support if is_device_array(support) else np.asarray(support, bool)
        self.support[...] = xp.broadcast_to(xp.asarray(s).astype(np.uint8), self.full)

    def set_x(self, x) -> None:
        self.x[...] = x if is_device_array(x) else self.xp.asarray(np.ascontiguousarray(x, np.complex64))
        self.x_written()

    def x_written(self) -> None:
        """Hook: x was written in place (engines with an fp16 copy refresh it)."""

    def get_x(self) -> np.ndarray:
        return self.x.get()

    def get_support(self) -> np.ndarray:
        return self.support.get().astype(bool)

    def shrinkwrap(self, sigma: float, threshold: float, min_fraction: float = 0.2, **options) -> list[str]:
        """The CPU engine's support update on the device (blur by cuFFT, the statistic and the size
        guard as device reductions); the host reads the support's size once per update."""
        return shrinkwrap_starts(self.x, self.support, sigma=sigma, threshold=threshold, min_fraction=min_fraction,
                                 xp=self.xp, **options)


class _GraphLoop:
    """Iterations of a ``_step(a, b, code)`` (queued on the current stream, allocation-free), either read back
    every iteration or captured as CUDA graphs, with the Fourier error of each start and iteration in a device
    history indexed by a device-side counter. Users set ``batch``, ``denominator`` and call :meth:`_init_loop`."""

    def _init_loop(self, graph: bool) -> None:
        self.use_graph = graph
        self.counter = self.xp.zeros(1, np.int32)
        self.history = self.xp.zeros(0, np.float64)
        self._graphs: dict = {}

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

    def _before(self, a: float, b: float) -> None:
        """Work outside the graph before a run of iterations (e.g. refreshing a copy)."""

    def iterate(self, iterations: int, a: float, b: float, constraint=None, *, chunk: int | None = None) -> np.ndarray:
        """``iterations`` steps; each start's Fourier error per step (iterations, batch). With ``chunk`` dividing
        ``iterations``, one graph of ``chunk`` steps is captured (once per coefficients) and replayed, instead of a
        graph of every run length (the envelope search's logo run in a fresh process: 2.25 s with graphs of up to
        1,000 steps, 1.76 s with one 5-step graph replayed and, in the same change, the report's alignments at 1e-3 px;
        docs/phase-performance.md)."""
        code = CONSTRAINT_CODES[constraint]
        self._ensure_history(iterations)
        self._before(a, b)
        if self.use_graph and chunk and iterations > chunk and iterations % chunk == 0:
            return self._replayed(iterations, a, b, code, chunk)
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
                self._steps(iterations, a, b, code)

            graph = self._graphs[key] = StepGraph(captured)
        graph.replay()  # ordered with the current stream, so the read below waits for it
        errors = self.history[: iterations * self.batch].get().reshape(iterations, self.batch)
        return np.sqrt(errors / self.denominator)

    def _replayed(self, iterations: int, a: float, b: float, code: int, chunk: int) -> np.ndarray:
        key = ("chunk", chunk, float(a), float(b), code)
        graph = self._graphs.get(key)
        if graph is None:
            from qora.backend.graph import StepGraph

            graph = self._graphs[key] = StepGraph(lambda: self._steps(chunk, a, b, code))
        self._reset()  # on the current stream: the replays wait for it, and the counter runs on through them
        graph.replay(iterations // chunk)
        errors = self.history[: iterations * self.batch].get().reshape(iterations, self.batch)
        return np.sqrt(errors / self.denominator)

    def _steps(self, iterations: int, a: float, b: float, code: int) -> None:
        """A run of iterations, queued (captured into the graph)."""
        for _ in range(iterations):
            self._step(a, b, code)


class _KernelEngine(_GraphLoop, _DeviceState):
    """Iterations of hand-written kernels, either read back every iteration or as CUDA graphs.

    Subclasses provide ``_step(a, b, code)`` (one iteration, queued on the current
    stream, allocation-free) and may convert ``x`` on the way in and out.
    """

    def __init__(self, amp, support, batch: int, *, graph: bool) -> None:
        super().__init__(amp, support, batch)
        self._init_loop(graph)

    def _launch_fp32(self, y, plan, a, b, code) -> None:
        plan.forward(self.x, out=y)
        K.modulus_step(y=y, amp=self.amp, scale=self.scale, n=self.n, batch=self.batch, err_sums=self.history,
                       counter=self.counter)
        plan.inverse(y, out=y)
        K.update_step(x=self.x, p=y, support=self.support, a=a, b=b, constraint=code, n=self.n, batch=self.batch,
                      counter=self.counter)
