"""The CPU fast path of the envelope search's projections (:mod:`qora.phase.envelope`): ducc0's transforms in
place and the modulus step with its error sum as one Numba loop over each start's spectrum, where the array code
of :class:`qora.phase.envelope_iterate.ArrayIterations` (the reference) makes five NumPy passes and pocketfft's
copies. ``tests/phase/test_phase_envelope.py`` compares the two; docs/phase-performance.md has the times.
"""

from __future__ import annotations

import math

from qora.backend.host import numba_threads, openmp_passive

openmp_passive()  # before Numba loads its OpenMP runtime

import numba  # noqa: E402
import numpy as np  # noqa: E402

from qora.backend.fft_host import _ducc0, cpu_threads  # noqa: E402

__all__ = ["available", "Projections", "update"]


def available() -> bool:
    """Whether the fast path can run (ducc0 installed)."""
    return _ducc0() is not None


@numba.njit(parallel=True, fastmath=True, cache=True)
def _fit(spec, amp, meas, damp):
    """In place: measured bins take the measured modulus (phase kept), the others are scaled by ``damp``.
    Returns the sum of (|spec| - amp)^2 over the measured bins of the spectrum as given."""
    total = 0.0
    for i in numba.prange(spec.size):
        v = spec[i]
        m = abs(v)
        if meas[i]:
            d = m - amp[i]
            total += d * d
            spec[i] = v * (amp[i] / max(m, 1e-12))
        else:
            spec[i] = v * damp
    return total


@numba.njit(parallel=True, fastmath=True, cache=True)
def _update_real(x, p, support, beta, hio, positive):
    for i in numba.prange(x.size):
        if support[i] and (p[i] >= 0 or not positive):
            x[i] = p[i]
        elif hio:
            x[i] = x[i] - beta * p[i]
        else:
            x[i] = 0


@numba.njit(parallel=True, fastmath=True, cache=True)
def _update_complex(x, p, support, beta, hio):
    for i in numba.prange(x.size):
        if support[i]:
            x[i] = p[i]
        elif hio:
            x[i] = x[i] - beta * p[i]
        else:
            x[i] = 0


def update(x, p, support, beta: float, *, hio: bool, positive: bool):
    """In place on ``x`` (C-contiguous): ``p`` inside the support (and, with ``positive``, where p > 0), else HIO's
    x - beta p or ER's 0; the array code's ``where`` in one pass. Returns ``x``."""
    numba_threads()
    flat = (x.reshape(-1), p.reshape(-1), support.reshape(-1))
    if np.iscomplexobj(x):
        _update_complex(*flat, np.float32(beta), hio)
    else:
        _update_real(*flat, np.float32(beta), hio, positive)
    return x


class Projections:
    """The complex and the real projection of a batch of starts (arrays (starts, *shape)) of one pattern
    (:class:`qora.phase.envelope_iterate.Pattern`). Each returns the projection and each start's Fourier error."""

    def __init__(self, pattern) -> None:
        self.ducc0 = _ducc0()
        self.shape, self.axes = pattern.shape, pattern.axes
        self.norm, self.norm_r = pattern.norm, pattern.norm_r
        self.amp, self.meas = (np.ascontiguousarray(a).reshape(-1) for a in (pattern.amp, pattern.meas))
        self.amp_r, self.meas_r = (np.ascontiguousarray(a).reshape(-1) for a in (pattern.amp_r, pattern.meas_r))
        self.threads = cpu_threads(int(np.prod(self.shape)))

    @staticmethod
    def _fit_each(spec, amp, meas, damp, norm) -> np.ndarray:
        return np.array([math.sqrt(_fit(s.reshape(-1), amp, meas, np.float32(damp)) / norm) for s in spec])

    def complex(self, x):
        fft = self.ducc0.fft
        numba_threads()
        spec = fft.c2c(np.asarray(x, np.complex64), axes=self.axes, forward=True, inorm=1, nthreads=self.threads)
        err = self._fit_each(spec, self.amp, self.meas, 1.0, self.norm)
        fft.c2c(spec, axes=self.axes, forward=False, inorm=1, out=spec, nthreads=self.threads)
        return spec, err

    def real(self, x, damp):
        fft = self.ducc0.fft
        numba_threads()
        spec = fft.r2c(np.asarray(x, np.float32), axes=self.axes, forward=True, inorm=1, nthreads=self.threads)
        err = self._fit_each(spec, self.amp_r, self.meas_r, damp, self.norm_r)
        out = fft.c2r(spec, axes=self.axes, lastsize=self.shape[-1], forward=False, inorm=1, nthreads=self.threads)
        return out, err
