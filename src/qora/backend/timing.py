"""Wall-clock and CUDA-event timers with one interface.

A timer is a context manager; after the block, ``ms`` holds the elapsed time in
milliseconds. The CUDA timer records events on the current stream and waits for
the stop event, so it measures the work, not the launches.
"""

from __future__ import annotations

import time


class HostTimer:
    """Elapsed host time of a block, in milliseconds."""

    def __init__(self) -> None:
        self.ms = float("nan")
        self._t0 = 0.0

    def __enter__(self) -> "HostTimer":
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        self.ms = (time.perf_counter() - self._t0) * 1e3


class CudaEventTimer:
    """Elapsed device time of the work queued on the current stream in a block, in ms."""

    def __init__(self, cupy) -> None:
        self._cupy = cupy
        self.ms = float("nan")
        self._start = cupy.cuda.Event()
        self._stop = cupy.cuda.Event()

    def __enter__(self) -> "CudaEventTimer":
        self._start.record()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.record()
        self._stop.synchronize()
        self.ms = self._cupy.cuda.get_elapsed_time(self._start, self._stop)
