"""CUDA graphs of step functions, by stream capture.

A *step* is a callable that only queues device work on the current stream:
kernels, cuFFT plan executions, device-to-device copies, into buffers that
outlive the graph. :class:`StepGraph` captures ``repeat`` calls of it once and
replays them with a single launch. A step that waits on the host (``.get()``,
``float(x)``, a stream synchronisation, a data-dependent shape) cannot be
captured; the capture then fails with :class:`GraphCaptureError` naming the step,
and the stream is left usable.

Temporaries a step allocates during capture come from a private memory pool that
the graph keeps alive, so a replay never writes into memory handed out since.
Make plans and compile kernels before capture (run the step once, or build its
plans explicitly): creating them inside a capture is not supported by cuFFT.
"""

from __future__ import annotations

from qora.backend import _cupy

__all__ = ["StepGraph", "GraphCaptureError"]


class GraphCaptureError(RuntimeError):
    """A step could not be captured into a CUDA graph (it talked to the host, most often)."""


def _is_capture_violation(exc: BaseException) -> bool:
    """Errors that stream capture causes: CUDA runtime errors and CuPy's capture guards."""
    text = f"{type(exc).__name__} {exc}"
    return ("CUDARuntimeError" in text or "Capture" in text or "capturing" in text
            or "cuBLAS" in text or "cuSOLVER" in text or "cuRAND" in text or "cuSPARSE" in text)


class StepGraph:
    """``repeat`` calls of ``step`` captured into one CUDA graph.

    Parameters
    ----------
    step : callable
        Called with no arguments; queues device work only.
    repeat : int
        Calls of ``step`` per replay.
    stream : cupy.cuda.Stream, optional
        The stream to capture on and replay on (a new non-blocking stream by default).

    Examples
    --------
    >>> g = StepGraph(lambda: plan.forward(x, out=x), repeat=10)  # doctest: +SKIP
    >>> g.replay()          # ten transforms, one launch             # doctest: +SKIP
    """

    def __init__(self, step, *, repeat: int = 1, stream=None) -> None:
        cupy = _cupy.require("CUDA graphs")
        if repeat < 1:
            raise ValueError(f"repeat must be at least 1, got {repeat}")
        self._cupy = cupy
        self.step = step
        self.repeat = int(repeat)
        self.stream = stream if stream is not None else cupy.cuda.Stream(non_blocking=True)
        self.pool = cupy.cuda.MemoryPool()  # owns the temporaries of the captured work
        self.graph = self._capture()
        self.replays = 0

    def _capture(self):
        cupy = self._cupy
        stream = self.stream
        name = getattr(self.step, "__qualname__", repr(self.step))
        # Work queued before the capture on other streams must not race with the graph.
        cupy.cuda.get_current_stream().synchronize()
        with stream, cupy.cuda.using_allocator(self.pool.malloc):
            stream.begin_capture()
            try:
                for _ in range(self.repeat):
                    self.step()
            except Exception as exc:
                self._abort(stream)
                if not _is_capture_violation(exc):
                    raise  # a plain bug in the step, not a capture problem
                raise GraphCaptureError(
                    f"step {name!r} cannot be captured into a CUDA graph: it synchronises with the host or "
                    f"does something else that stream capture forbids ({type(exc).__name__}: {exc})"
                ) from exc
            try:
                graph = stream.end_capture()
            except Exception as exc:
                raise GraphCaptureError(
                    f"capture of step {name!r} was invalidated: it synchronised with the host or used "
                    f"another stream without joining it ({type(exc).__name__}: {exc})"
                ) from exc
        try:
            graph.upload(stream)
        except TypeError:  # older CuPy: upload() takes no stream
            graph.upload()
        return graph

    @staticmethod
    def _abort(stream) -> None:
        try:
            if stream.is_capturing():
                stream.end_capture()
        except Exception:  # an invalidated capture raises on end; the stream leaves capture mode anyway
            pass

    def replay(self, times: int = 1) -> None:
        """Launch the graph ``times`` times on its stream (asynchronous).

        The replay is ordered with the caller's current stream: it starts after the
        work queued there before, and work queued there afterwards waits for it, so
        a graph can be mixed with ordinary calls without explicit synchronisation.
        """
        cupy = self._cupy
        current = cupy.cuda.get_current_stream()
        if current.ptr != self.stream.ptr:
            before = cupy.cuda.Event(disable_timing=True)
            before.record(current)
            self.stream.wait_event(before)
        for _ in range(times):
            self.graph.launch(self.stream)
        if current.ptr != self.stream.ptr:
            after = cupy.cuda.Event(disable_timing=True)
            after.record(self.stream)
            current.wait_event(after)
        self.replays += times

    def synchronize(self) -> None:
        self.stream.synchronize()
