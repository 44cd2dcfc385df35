"""The CPU engine: the FFT entry point's plans and one Numba loop per element-wise pass, all on
:func:`qora.backend.host.num_threads` threads (``QORA_NUM_THREADS``).

Per iteration: an unscaled forward transform, the fused modulus step (projection
and the error's sum in one pass), an unscaled inverse transform, and the fused
support update. The loops restate :func:`qora.phase.physics.modulus_project`
and :func:`qora.phase.physics.support_update`; ``tests/phase/test_cpu.py``
compares them over every branch.

The loops are compiled with ``fastmath``: it lets LLVM vectorise the square
root and division and reassociate the error's sum (2.4x faster at 1024^2 on
the development machine). The loops test only finite values against zero, so
the no-NaN/no-Inf assumptions it adds do not change their results; the error
sum differs from the serial order by rounding only (checked to 1e-5).
"""

from __future__ import annotations

import math

from qora.backend.host import numba_threads, openmp_passive, parallel_and_serial

openmp_passive()  # before Numba loads its OpenMP runtime

import numba  # noqa: E402
import numpy as np

from qora.backend import resolve
from qora.backend.fft import cpu_threads
from qora.phase.physics import CONSTRAINT_CODES
from qora.phase.support import shrinkwrap_starts

__all__ = ["CpuEngine", "modulus_step", "modulus_steps", "update_step", "CONSTRAINT_CODES"]



def _modulus_loop(y, amp, scale):
    n = y.size
    err = 0.0
    s2 = scale * scale
    for i in numba.prange(n):
        v = y[i]
        a = amp[i]
        re = v.real
        im = v.imag
        mag = math.sqrt(re * re + im * im)
        if a >= 0.0:
            d = scale * mag - a
            err += d * d
            if mag > 0.0:
                f = scale * a / mag
                y[i] = complex(re * f, im * f)
            else:
                y[i] = complex(scale * a, 0.0)
        else:
            y[i] = complex(re * s2, im * s2)
    return err


def _update_loop(x, p, support, a, b, constraint):
    n = x.size
    for i in numba.prange(n):
        v = p[i]
        inside = support[i] != 0
        if constraint != 0:
            if constraint == 2 and v.real < 0.0:
                inside = False
            else:
                v = complex(v.real, 0.0)
        if inside:
            x[i] = v
        else:
            x[i] = a * x[i] + b * p[i]


# Each loop exists twice: on Numba's threads, and serial. Waking the sleeping OpenMP
# threads costs about 0.1 ms per loop on the development machine, more than a loop
# over 2^16 values takes, so below the size where the FFTs go multi-threaded the
# loops run serially too (qora.backend.fft.cpu_threads decides for both).
_jit = dict(fastmath=True, cache=True)
_modulus_parallel, _modulus_serial = parallel_and_serial(_modulus_loop, **_jit)
_update_parallel, _update_serial = parallel_and_serial(_update_loop, **_jit)


@numba.njit(parallel=True, **_jit)
def _modulus_starts(y, amp, scale, err):
    """Small batched starts: one start per thread (each start's loop serial), errors into ``err``."""
    for s in numba.prange(y.shape[0]):
        err[s] = _modulus_serial(y[s], amp, scale)


def _parallel(n: int) -> bool:
    """Whether a loop over ``n`` values runs on Numba's threads (set to the setting's count)."""
    if cpu_threads(n) == 1:
        return False
    return numba_threads() > 1


def modulus_step(y, amp, scale: float) -> float:
    """In place: ``y`` (unscaled transform, complex64) becomes ``w`` of the modulus projection.

    Returns the sum over measured pixels of (|F x| - a)^2. ``y`` and ``amp`` are
    C-contiguous with the same number of elements.
    """
    f = _modulus_parallel if _parallel(y.size) else _modulus_serial
    return float(f(y.reshape(-1), amp.reshape(-1), np.float32(scale)))


def modulus_steps(y, amp, scale: float, errors) -> None:
    """:func:`modulus_step` of each start ``y[s]`` (B, *shape), sums into ``errors`` (B,): starts too small
    to split over threads each get a thread of their own, larger ones each use all threads in turn."""
    flat = y.reshape(y.shape[0], -1)
    if y.shape[0] > 1 and not _parallel(flat.shape[1]) and _parallel(y.size):
        err = np.empty(y.shape[0], np.float64)
        _modulus_starts(flat, amp.reshape(-1), np.float32(scale), err)
        errors[...] = err
        return
    for s in range(y.shape[0]):
        errors[s] = modulus_step(y[s], amp, scale)


def update_step(x, p, support, a: float, b: float, constraint=None) -> None:
    """In place: ``x`` becomes ``p`` inside the support (and constraint), ``a x + b p`` outside."""
    f = _update_parallel if _parallel(x.size) else _update_serial
    f(x.reshape(-1), p.reshape(-1), support.reshape(-1).view(np.uint8), np.float32(a), np.float32(b),
      CONSTRAINT_CODES[constraint])


class CpuEngine:
    """B starts of one pattern on the CPU, iterated in place.

    Parameters
    ----------
    amp : ndarray (shape)
        Signed amplitude in FFT layout (-1 where masked), float32.
    support : ndarray (B, *shape) or (shape)
        Initial support(s), bool.
    batch : int
        Number of starts iterated together (one batched transform).
    """

    name = "cpu"

    def __init__(self, amp, support, batch: int = 1) -> None:
        self.backend = resolve("cpu")
        self.shape = tuple(amp.shape)
        self.batch = int(batch)
        self.amp = np.array(amp, dtype=np.float32, order="C")  # a copy: set_amplitude writes it in place
        self.n = int(np.prod(self.shape))
        self.scale = 1.0 / math.sqrt(self.n)
        self.denominator = float(np.sum(np.where(self.amp >= 0, self.amp.astype(np.float64) ** 2, 0.0)))
        full = (self.batch,) + self.shape
        self.plan = self.backend.fft.c2c(full, np.complex64, axes=tuple(range(1, len(full))), norm=None)
        self.x = self.plan.empty()
        self.x[...] = 0
        self.y = self.plan.empty()
        self.support = np.empty(full, np.bool_)
        self.set_support(support)

    def set_amplitude(self, amp) -> None:
        """A new pattern of the same shape (plans and buffers kept)."""
        amp = np.asarray(amp, np.float32)
        if amp.shape != self.shape:
            raise ValueError(f"amplitude shape {amp.shape} differs from the engine's {self.shape}")
        self.amp[...] = amp
        self.denominator = float(np.sum(np.where(self.amp >= 0, self.amp.astype(np.float64) ** 2, 0.0)))

    def set_support(self, support) -> None:
        self.support[...] = np.broadcast_to(np.asarray(support, bool), self.support.shape)

    def set_x(self, x) -> None:
        self.x[...] = x

    def x_written(self) -> None:
        """Hook: x was written in place (nothing to refresh on the CPU)."""

    def get_x(self) -> np.ndarray:
        return self.x.copy()

    def get_support(self) -> np.ndarray:
        return self.support.copy()

    def iterate(self, iterations: int, a: float, b: float, constraint=None) -> np.ndarray:
        """Run ``iterations`` updates; returns the Fourier error of each iterate, shape (iterations, B)."""
        errors = np.empty((iterations, self.batch))
        for k in range(iterations):
            self.plan.forward(self.x, out=self.y)
            modulus_steps(self.y, self.amp, self.scale, errors[k])
            self.plan.inverse(self.y, out=self.y)
            update_step(self.x, self.y, self.support, a, b, constraint)
        return np.sqrt(errors / self.denominator)

    def shrinkwrap(self, sigma: float, threshold: float, min_fraction: float = 0.2, **options) -> list[str]:
        """Update each start's support from its blurred modulus (:func:`qora.phase.support.shrinkwrap_update`);
        returns each start's status."""
        return shrinkwrap_starts(self.x, self.support, sigma=sigma, threshold=threshold, min_fraction=min_fraction,
                                 xp=np, **options)
