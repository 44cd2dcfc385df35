"""The one module that imports CuPy.

Everything else in Qora asks :func:`cupy_module` for CuPy, so that a machine
without CuPy (or with ``QORA_DISABLE_CUDA=1``) never touches it, and so that the
probe for a usable device runs once per process.
"""

from __future__ import annotations

import functools
import os

__all__ = ["cupy_module", "require", "cuda_disabled", "probe_error", "submodule", "pinned_empty", "host_register",
           "host_unregister"]

_probe_error: str | None = None


def cuda_disabled() -> bool:
    """True when the user forces the CPU path with ``QORA_DISABLE_CUDA=1``."""
    return os.environ.get("QORA_DISABLE_CUDA", "").strip() not in ("", "0", "false", "False")


@functools.lru_cache(maxsize=1)
def _probe():
    global _probe_error
    try:
        import cupy  # noqa: PLC0415 - the single guarded import of CuPy
    except Exception as exc:  # ImportError, or a broken CUDA install raising at import
        _probe_error = f"CuPy could not be imported ({type(exc).__name__}: {exc})"
        return None
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # no driver, no device
        _probe_error = f"CuPy sees no CUDA device ({type(exc).__name__}: {exc})"
        return None
    if count < 1:
        _probe_error = "CuPy sees no CUDA device"
        return None
    return cupy


def cupy_module():
    """Return the ``cupy`` module if a CUDA device is usable, else ``None``."""
    if cuda_disabled():
        return None
    return _probe()


def require(what: str):
    """The ``cupy`` module, or a RuntimeError saying that ``what`` needs CuPy and a GPU and why."""
    cupy = cupy_module()
    if cupy is None:
        raise RuntimeError(f"{what} need CuPy and a GPU: {probe_error()}")
    return cupy


def probe_error() -> str:
    """Why CUDA is not available, in words (empty when it is)."""
    if cuda_disabled():
        return "CUDA is disabled by QORA_DISABLE_CUDA"
    if _probe() is not None:
        return ""
    return _probe_error or "CUDA is not available"


def submodule(name: str):
    """A CuPy submodule such as ``"cupyx.scipy.fftpack"`` or ``"cupy.cuda.cufft"``.

    Only for code that already holds a CUDA backend (so CuPy is importable).
    """
    require(name)
    import importlib

    return importlib.import_module(name)


def pinned_empty(shape, dtype):
    """A NumPy array in page-locked host memory (CuPy's pinned pool): copies between it and the
    device run at the bus's full rate (pageable memory is staged by the driver, about half)."""
    import numpy as np

    cupy = require("page-locked host memory")
    dtype = np.dtype(dtype)
    count = int(np.prod(shape))
    memory = cupy.cuda.alloc_pinned_memory(max(1, count * dtype.itemsize))
    return np.frombuffer(memory, dtype, count).reshape(shape)


def host_register(array) -> bool:
    """Page-lock the memory of the host array ``array`` where it lies (cudaHostRegister; e.g. a
    shared-memory block other processes write): copies from it to the device then run at the bus's
    rate, asynchronously, with no copy into a pinned buffer first. False where the driver refuses
    (the caller copies through a pinned buffer as before). Undo with :func:`host_unregister`
    before the memory is unmapped."""
    cupy = require("page-locked host memory")
    if array.nbytes == 0:
        return False
    try:
        cupy.cuda.runtime.hostRegister(array.ctypes.data, array.nbytes, 0)
    except cupy.cuda.runtime.CUDARuntimeError:
        return False
    return True


def host_unregister(array) -> None:
    """Undo :func:`host_register`, once the device has finished every copy from ``array`` (the
    device is synchronised first: an asynchronous copy must not read unmapped memory)."""
    cupy = require("page-locked host memory")
    cupy.cuda.runtime.deviceSynchronize()
    cupy.cuda.runtime.hostUnregister(array.ctypes.data)
