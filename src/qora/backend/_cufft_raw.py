"""cuFFT plans with explicit layouts and one shared work area (the holography Pipeline; G's transform along
the scan rows in :mod:`qora.ssb.stream`, in place with a strided layout).

CuPy's plans allocate a work area each and cannot express the padded in-place R2C layout
(rows of 2 (n/2 + 1) floats). The holography solver needs both: its real volume lives in
the buffer of the complex mapped spectrum, and a Pipeline runs every stage on one stream,
so all its plans can share the work area of the largest. This module calls the cuFFT
library that CuPy has already loaded, through ctypes: ``cufftMakePlanMany`` with
auto-allocation off, then ``cufftSetWorkArea`` with a buffer from :class:`WorkArea`.

Transforms are unscaled; pointers are raw device addresses (``array.data.ptr``).
"""

from __future__ import annotations

import ctypes
import threading

from qora.backend import _cupy

__all__ = ["RawPlan", "WorkArea", "R2C", "C2R", "C2C", "Z2Z", "FORWARD", "INVERSE"]

R2C, C2R, C2C, Z2Z = 0x2A, 0x2C, 0x29, 0x69
FORWARD, INVERSE = -1, 1

_lock = threading.Lock()
_lib = None


def _device_cupy():
    return _cupy.require("cuFFT plans")


def _library():
    """The libcufft CuPy uses (found in this process's mappings after CuPy loaded it)."""
    global _lib
    with _lock:
        if _lib is not None:
            return _lib
        cupy = _device_cupy()
        cupy.fft.fft(cupy.ones(4, cupy.complex64))  # make sure CuPy has loaded libcufft
        path = None
        with open("/proc/self/maps") as maps:
            for line in maps:
                if "libcufft.so" in line and "libcufftw" not in line:
                    path = line.split()[-1]
                    break
        lib = ctypes.CDLL(path or "libcufft.so")
        c_int, c_void, c_size, c_long = ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_longlong
        ip, lp = ctypes.POINTER(c_int), ctypes.POINTER(c_long)
        sig = {
            "cufftCreate": [ctypes.POINTER(ctypes.c_int)],
            "cufftDestroy": [c_int],
            "cufftSetAutoAllocation": [c_int, c_int],
            "cufftMakePlanMany": [c_int, c_int, ip, ip, c_int, c_int, ip, c_int, c_int, c_int, c_int,
                                  ctypes.POINTER(c_size)],
            "cufftMakePlanMany64": [c_int, c_int, lp, lp, c_long, c_long, lp, c_long, c_long, c_int, c_long,
                                    ctypes.POINTER(c_size)],
            "cufftSetWorkArea": [c_int, c_void],
            "cufftSetStream": [c_int, c_void],
            "cufftExecC2C": [c_int, c_void, c_void, c_int],
            "cufftExecZ2Z": [c_int, c_void, c_void, c_int],
            "cufftExecR2C": [c_int, c_void, c_void],
            "cufftExecC2R": [c_int, c_void, c_void],
        }
        for name, args in sig.items():
            fn = getattr(lib, name)
            fn.argtypes = args
            fn.restype = c_int
        _lib = lib
        return lib


def _check(status: int, what: str) -> None:
    if status != 0:
        raise RuntimeError(f"cuFFT {what} failed with status {status}")


def _dims(values, kind=ctypes.c_int):
    return None if values is None else (kind * len(values))(*values)


class RawPlan:
    """One cuFFT plan (``cufftPlanMany`` layout) without a work area of its own.

    Parameters
    ----------
    kind : R2C, C2R, C2C or Z2Z (complex128)
    shape : tuple of int
        The transform's extents (1 to 3 axes, slowest first).
    batch : int
        Transforms per execution, ``idist`` / ``odist`` elements apart.
    inembed, onembed : tuple of int or None
        Storage extents of input and output (None: tight, as cuFFT's basic layout).
    idist, odist : int or None
        Elements between batches (None: the product of the embed or of the tight layout).
    stride : int
        Elements between neighbouring points of one transform, input and output alike (a transform
        along a slow axis with the batch along the fast ones: ``stride`` = the batch, ``idist`` = 1).
        Needs the embeds.
    wide : bool or None
        cuFFT's 64-bit plan (``cufftMakePlanMany64``, the same transforms with 64-bit indices); None:
        where the layout's last index passes int32.
    """

    def __init__(self, kind: int, shape, *, batch: int = 1, inembed=None, onembed=None, idist=None, odist=None,
                 stride: int = 1, wide: bool | None = None):
        if stride != 1 and (inembed is None or onembed is None):
            raise ValueError("a strided layout needs inembed and onembed (cuFFT ignores strides without them)")
        self.lib = _library()
        self.kind = kind
        self.shape = tuple(int(s) for s in shape)
        half = self.shape[:-1] + (self.shape[-1] // 2 + 1,)
        tight_in = half if kind == C2R else self.shape
        tight_out = half if kind == R2C else self.shape

        def count(dims):
            out = 1
            for d in dims:
                out *= int(d)
            return out

        self.idist = idist if idist is not None else count(inembed or tight_in)
        self.odist = odist if odist is not None else count(onembed or tight_out)
        handle = ctypes.c_int()
        _check(self.lib.cufftCreate(ctypes.byref(handle)), "cufftCreate")
        self.handle = handle.value
        _check(self.lib.cufftSetAutoAllocation(self.handle, 0), "cufftSetAutoAllocation")
        size = ctypes.c_size_t()
        # the last element's index: where it passes int32, cuFFT's 64-bit plan (the same transforms)
        span = (max(count(inembed or tight_in), count(onembed or tight_out)) * int(stride)
                + max(self.idist, self.odist) * int(batch))
        self.wide = span >= 2**31 if wide is None else bool(wide)
        make, c = ((self.lib.cufftMakePlanMany64, ctypes.c_longlong) if self.wide
                   else (self.lib.cufftMakePlanMany, ctypes.c_int))
        status = make(self.handle, len(self.shape), _dims(self.shape, c), _dims(inembed, c), int(stride), self.idist,
                      _dims(onembed, c), int(stride), self.odist, kind, int(batch), ctypes.byref(size))
        _check(status, f"plan {self.shape} x {batch} (type {kind:#x})")
        self.work_size = int(size.value)
        self.batch = int(batch)

    def execute(self, src: int, dst: int, direction: int = FORWARD, stream=None) -> None:
        """Run the transform from device address ``src`` to ``dst`` (equal for in-place) on ``stream``."""
        s = stream if stream is not None else _device_cupy().cuda.get_current_stream()
        _check(self.lib.cufftSetStream(self.handle, s.ptr), "cufftSetStream")
        if self.kind == C2C:
            _check(self.lib.cufftExecC2C(self.handle, src, dst, direction), "cufftExecC2C")
        elif self.kind == Z2Z:
            _check(self.lib.cufftExecZ2Z(self.handle, src, dst, direction), "cufftExecZ2Z")
        elif self.kind == R2C:
            _check(self.lib.cufftExecR2C(self.handle, src, dst), "cufftExecR2C")
        else:
            _check(self.lib.cufftExecC2R(self.handle, src, dst), "cufftExecC2R")

    def __del__(self):
        lib = getattr(self, "lib", None)
        if lib is not None and getattr(self, "handle", None) is not None:
            lib.cufftDestroy(self.handle)
            self.handle = None


class WorkArea:
    """One device buffer shared by plans that never run at the same time (one stream)."""

    def __init__(self) -> None:
        self.plans: list[RawPlan] = []
        self.buffer = None

    def add(self, plan: RawPlan) -> RawPlan:
        self.plans.append(plan)
        return plan

    @property
    def nbytes(self) -> int:
        return max((p.work_size for p in self.plans), default=0)

    def allocate(self) -> None:
        """Allocate the largest work area once and give it to every plan (call after the last add)."""
        cupy = _device_cupy()
        self.buffer = cupy.empty(max(self.nbytes, 1), dtype=cupy.uint8)
        for plan in self.plans:
            _check(plan.lib.cufftSetWorkArea(plan.handle, ctypes.c_void_p(self.buffer.data.ptr)), "cufftSetWorkArea")
