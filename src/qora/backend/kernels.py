"""Lazy loading of the CUDA sources kept as ``.cu`` files inside the package.

Each engine keeps its kernels in ``<engine>/kernels/*.cu`` (package data). A
module is compiled by :class:`cupy.RawModule` on first use and memoized per
(device, package, file, name expressions, options), so importing Qora compiles
nothing and a second solver on the same device reuses the compiled module.
"""

from __future__ import annotations

import functools
import importlib.resources
import re
import threading

from qora.backend import _cupy

__all__ = ["kernel_source", "load_module", "load_cubin", "get_kernel", "resident_blocks", "multiprocessors",
           "DEFAULT_OPTIONS"]

DEFAULT_OPTIONS = ("--std=c++17",)

_LOCAL_INCLUDE = re.compile(r'^#include "([\w.]+)"\s*$', re.MULTILINE)
_lock = threading.Lock()
_modules: dict = {}
_functions: dict = {}  # (device, package, file, name, name expressions, options) -> kernel
_cuda: list = []  # the cupy module, once a kernel has been fetched (the fast path skips the probe)


@functools.lru_cache(maxsize=None)
def kernel_source(package: str, filename: str) -> str:
    """The text of ``<package>/kernels/<filename>`` (or, for a header the package does not have, of
    ``qora/backend/kernels/<filename>``: the device helpers shared by the engines, ``qora_device.cuh``), its
    local includes written in place.

    Raises
    ------
    FileNotFoundError
        The file is not installed with the package (a packaging error).
    """
    path = importlib.resources.files(package).joinpath("kernels", filename)
    if not path.is_file() and package != "qora.backend":  # a shared header (qora_device.cuh): the backend's
        shared = importlib.resources.files("qora.backend").joinpath("kernels", filename)
        path = shared if shared.is_file() else path
    if not path.is_file():
        raise FileNotFoundError(f"CUDA source {filename!r} not found in {package}/kernels (is it package data?)")
    # a header beside the file (#include "x.cuh") is written in place: NVRTC is given source text, not a
    # folder, and package data need not be a folder on disk
    return _LOCAL_INCLUDE.sub(lambda m: kernel_source(package, m.group(1)), path.read_text())


def load_module(package: str, filename: str, *, name_expressions=(), options=DEFAULT_OPTIONS):
    """Compile (once per device) and return the :class:`cupy.RawModule` of a ``.cu`` file.

    Parameters
    ----------
    package : str
        Dotted package holding a ``kernels`` folder, e.g. ``"qora.phase"``.
    filename : str
        The ``.cu`` file in that folder.
    name_expressions : sequence of str
        Template instantiations to compile, e.g. ``("scale_inplace<float>",)``.
    options : sequence of str
        NVRTC options.
    """
    cupy = _cupy.require("CUDA kernels")
    device = cupy.cuda.runtime.getDevice()
    key = (device, package, filename, tuple(name_expressions), tuple(options))
    with _lock:
        module = _modules.get(key)
        if module is None:
            source = kernel_source(package, filename)
            module = cupy.RawModule(code=source, options=tuple(options),
                                    name_expressions=tuple(name_expressions) or None)
            module.compile()  # compile now, so errors point here and not at the first launch
            _modules[key] = module
        return module


def load_cubin(package: str, filename: str):
    """The :class:`cupy.RawModule` of a prebuilt ``<package>/kernels/<filename>`` (a cubin), once per device.

    For kernels compiled offline against headers a user's machine lacks (cuFFTDx). Raises
    FileNotFoundError when the file is not installed, so that a caller can say which build step makes it.
    """
    cupy = _cupy.require("CUDA kernels")
    device = cupy.cuda.runtime.getDevice()
    key = (device, package, filename, "cubin")
    with _lock:
        module = _modules.get(key)
        if module is None:
            path = importlib.resources.files(package).joinpath("kernels", filename)
            if not path.is_file():
                raise FileNotFoundError(f"prebuilt CUDA module {filename!r} not found in {package}/kernels")
            with importlib.resources.as_file(path) as real:
                module = cupy.RawModule(path=str(real))
            _modules[key] = module
        return module


def resident_blocks(kernel, threads: int, shared_bytes: int) -> int:
    """Blocks of ``kernel`` (a CuPy kernel of a RawModule) with ``threads`` threads and ``shared_bytes`` of
    dynamic shared memory that fit on one SM at once: the driver's occupancy, else an H100/H200 estimate
    from the kernel's registers (64 K registers, 228 KB of shared memory, 2048 threads per SM). Sizes the
    persistent grids of the prebuilt modules' pipelined candidates."""
    cupy = _cupy.require("CUDA kernels")
    try:
        return max(1, int(cupy.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(kernel.ptr, threads,
                                                                                      shared_bytes)))
    except Exception:  # noqa: BLE001 - a CuPy without the call: estimate
        try:
            regs = int(cupy.cuda.driver.funcGetAttribute(cupy.cuda.driver.CU_FUNC_ATTRIBUTE_NUM_REGS, kernel.ptr))
        except Exception:  # noqa: BLE001 - nor that one: the most registers two blocks of 512 threads may use
            regs = 64
        by_regs = 65536 // (threads * -(-regs // 8) * 8)
        return max(1, min(by_regs, 233472 // (shared_bytes + 1024), 2048 // threads))


def get_kernel(package: str, filename: str, name: str, *, name_expressions=(), options=DEFAULT_OPTIONS):
    """One kernel of a module (``name`` may be a template expression listed in ``name_expressions``).

    The kernel object is kept per device after its first lookup, so that a launcher may call this on
    every launch: a launch-bound loop (the BPM's two kernels per slice at 128^3, ~10 us each) pays a
    dictionary lookup here, not the module lookup and CuPy's ``get_function``.
    """
    cupy = _cuda[0] if _cuda else _cupy.require("CUDA kernels")
    key = (cupy.cuda.runtime.getDevice(), package, filename, name,
           name_expressions if type(name_expressions) is tuple else tuple(name_expressions),
           options if type(options) is tuple else tuple(options))
    function = _functions.get(key)
    if function is None:
        module = load_module(package, filename, name_expressions=name_expressions, options=options)
        function = _functions[key] = module.get_function(name)
        _cuda[:] = [cupy]
    return function


@functools.lru_cache(maxsize=None)
def _multiprocessors(device: int) -> int:
    return int(_cupy.require("CUDA kernels").cuda.Device(device).attributes["MultiProcessorCount"])


def multiprocessors() -> int:
    """The current device's multiprocessor count, read once per device (132 on an H200, 108 on an A100): what the
    engines' grid-stride launchers size their grids by."""
    return _multiprocessors(int(_cupy.require("CUDA kernels").cuda.runtime.getDevice()))
