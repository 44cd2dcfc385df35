"""Laps of a computation on the device, for the images' ``timings=``."""

from __future__ import annotations

import time

__all__ = ["Clock"]


class Clock:
    """Laps of a computation (ms) into ``timings`` when given, waiting for the device at each."""

    def __init__(self, backend, timings: dict | None) -> None:
        self.backend, self.timings = backend, timings
        if timings is not None:
            backend.synchronize()
            self.t = time.perf_counter()

    def lap(self, name: str) -> None:
        if self.timings is None:
            return
        self.backend.synchronize()
        now = time.perf_counter()
        self.timings[name] = self.timings.get(name, 0.0) + (now - self.t) * 1e3
        self.t = now
