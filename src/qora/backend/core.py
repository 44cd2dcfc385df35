"""Backend selection: the array module, transfers, synchronisation and timers."""

from __future__ import annotations

import sys
import threading
from typing import Any

import numpy as np

from qora.backend import _cupy
from qora.backend.device import device_facts
from qora.backend.fft import PlanCache
from qora.backend.host import cpu_count  # noqa: F401 - re-exported: qora.backend.core.cpu_count
from qora.backend.timing import CudaEventTimer, HostTimer

__all__ = ["Backend", "BackendUnavailable", "has_cuda", "resolve", "xp_of", "is_device_array"]

BACKEND_NAMES = ("auto", "cpu", "cuda")
#: Every ``backend=`` in Qora defaults to this (or has no default): CUDA where CuPy sees a GPU, else the CPU
#: (docs/architecture.md, "One backend rule"; tests/test_backend_rule.py checks the source).
DEFAULT_BACKEND = "auto"


class BackendUnavailable(RuntimeError):
    """The requested backend cannot run on this machine (the message says why)."""


def has_cuda() -> bool:
    """True when CuPy imports, sees a CUDA device, and ``QORA_DISABLE_CUDA`` is not set."""
    return _cupy.cupy_module() is not None


class Backend:
    """A small handle on one array backend.

    Attributes
    ----------
    name : {"cpu", "cuda"}
    xp : module
        ``numpy`` or ``cupy``.
    fft : qora.backend.fft.PlanCache
        FFT plans made once per (shape, dtype, axes, batch) and reused.

    Host arrays go in with :meth:`asarray` and come out with :meth:`to_host`;
    :meth:`timer` gives a context manager whose ``ms`` is the elapsed time of the
    block (CUDA events on the GPU, ``perf_counter`` on the CPU).
    """

    def __init__(self, name: str, xp: Any) -> None:
        self.name = name
        self.xp = xp
        self._fft = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"Backend({self.name!r})"

    @property
    def is_cuda(self) -> bool:
        return self.name == "cuda"

    @property
    def fft(self):
        """The FFT plan cache of this backend (created on first use)."""
        if self._fft is None:
            with self._lock:
                if self._fft is None:
                    self._fft = PlanCache(self)
        return self._fft

    def asarray(self, a, dtype=None):
        """``a`` as an array of this backend (a copy to the device for CUDA)."""
        return self.xp.asarray(a, dtype=dtype)

    def to_host(self, a) -> np.ndarray:
        """``a`` as a NumPy array (a device-to-host copy for CUDA arrays)."""
        if is_device_array(a):
            return a.get()
        return np.asarray(a)

    def host_empty(self, shape, dtype) -> np.ndarray:
        """A host array to stage data for this backend: page-locked for CUDA (full-rate copies to
        the device), ordinary memory on the CPU."""
        if self.is_cuda:
            return _cupy.pinned_empty(shape, dtype)
        return np.empty(shape, dtype)

    def host_register(self, array: np.ndarray) -> bool:
        """Page-lock ``array``'s memory where it lies (CUDA; see :func:`qora.backend._cupy.host_register`):
        True if done; False on the CPU or where the driver refuses."""
        return bool(self.is_cuda and _cupy.host_register(array))

    def host_unregister(self, array: np.ndarray) -> None:
        """Undo :meth:`host_register` (after the device's work on it is done)."""
        if self.is_cuda:
            _cupy.host_unregister(array)

    def synchronize(self) -> None:
        """Wait for all queued device work (no-op on the CPU)."""
        if self.is_cuda:
            self.xp.cuda.get_current_stream().synchronize()

    def timer(self):
        """A context manager timing its block in milliseconds (``.ms``)."""
        if self.is_cuda:
            return CudaEventTimer(self.xp)
        return HostTimer()

    def device_facts(self, *, measure: bool = False):
        """Facts about the device: see :func:`qora.backend.device.device_facts`."""
        return device_facts(self, measure=measure)


_backends: dict[str, Backend] = {}


def resolve(backend: "str | Backend" = DEFAULT_BACKEND) -> Backend:
    """Turn a backend name into a :class:`Backend`.

    Parameters
    ----------
    backend : {"auto", "cpu", "cuda"} or Backend
        ``"auto"`` is CUDA when CuPy sees a GPU (and ``QORA_DISABLE_CUDA`` is not
        set), else the CPU. A :class:`Backend` is returned as it is.

    Raises
    ------
    BackendUnavailable
        ``"cuda"`` was asked for and cannot be had; the message says why.
    ValueError
        An unknown name.
    """
    if isinstance(backend, Backend):
        return backend
    if not isinstance(backend, str) or backend not in BACKEND_NAMES:
        raise ValueError(f"backend must be one of {BACKEND_NAMES} or a Backend, got {backend!r}")
    if backend == "auto":
        backend = "cuda" if has_cuda() else "cpu"
    if backend == "cuda":
        cupy = _cupy.cupy_module()
        if cupy is None:
            raise BackendUnavailable(f"backend='cuda' was requested but {_cupy.probe_error()}")
        key = f"cuda:{cupy.cuda.runtime.getDevice()}"
        if key not in _backends:
            _backends[key] = Backend("cuda", cupy)
        return _backends[key]
    if "cpu" not in _backends:
        _backends["cpu"] = Backend("cpu", np)
    return _backends["cpu"]


def is_device_array(a) -> bool:
    """True for a CuPy array, decided without importing CuPy."""
    return type(a).__module__.split(".", 1)[0] == "cupy"


def xp_of(*arrays):
    """The array module of the given arrays: ``cupy`` if any of them lives on the GPU."""
    for a in arrays:
        if is_device_array(a):
            return sys.modules["cupy"]  # already imported, or a CuPy array could not exist
    return np
