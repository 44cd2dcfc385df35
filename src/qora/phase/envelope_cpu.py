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

from qora.backend.fft_host import _cpu_c2c, _cpu_c2r, _cpu_r2c, _ducc0, empty  # noqa: E402

__all__ = ["available", "Projections", "update"]


def available() -> bool:
    """Whether the fast path runs: ducc0 installed, as the package requires (its transforms are FFTW's where pyFFTW is
    installed and the arrays are aligned, else ducc0's; :mod:`qora.backend.fft_host`)."""
    return _ducc0() is not None


@numba.njit(parallel=True, fastmath=True, cache=True)
def _fit(spec, amp, meas, damp, unit):
    """In place on an unscaled spectrum ``spec`` (``unit`` times it is the unitary one, ``unit`` = n^-1/2): measured
    bins take the measured modulus (phase kept), the others are scaled by ``damp``, and the whole by ``unit``^2, so
    that the unscaled inverse gives the unitary one's object. Returns the sum of (unit |spec| - amp)^2 over the
    measured bins of the spectrum as given."""
    # Branch-free, with the modulus as sqrt(re^2 + im^2): Numba's complex abs calls hypot, which does not
    # vectorize, and the branch kept the loop scalar; this form ran 8x faster at 512^2 (1.45 -> 0.18 ms,
    # docs/phase-performance.md). The sum stays float64: a 512^2 sum of float32 squares loses digits.
    total = 0.0
    tiny = np.float32(1e-12)
    unit2 = unit * unit
    for i in numba.prange(spec.size):
        v = spec[i]
        re, im = v.real, v.imag
        m = math.sqrt(re * re + im * im) * unit
        a = amp[i]
        d = m - a
        total += d * d if meas[i] else np.float32(0.0)
        s = (a / max(m, tiny) if meas[i] else damp) * unit2
        spec[i] = complex(re * s, im * s)
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
    (:class:`qora.phase.envelope_iterate.Pattern`). Each returns the projection and each start's Fourier error.

    The transforms are the host's fastest (:mod:`qora.backend.fft_host`: FFTW on aligned arrays, else ducc0), unscaled,
    into buffers kept between calls: the projection each returns is overwritten by the next call of the same kind.
    """

    def __init__(self, pattern) -> None:
        self.shape, self.axes = tuple(pattern.shape), tuple(pattern.axes)
        self.norm, self.norm_r = pattern.norm, pattern.norm_r
        self.amp, self.meas = (np.ascontiguousarray(a).reshape(-1) for a in (pattern.amp, pattern.meas))
        self.amp_r, self.meas_r = (np.ascontiguousarray(a).reshape(-1) for a in (pattern.amp_r, pattern.meas_r))
        self.unit = np.float32(1.0 / math.sqrt(float(np.prod(self.shape))))
        self._buffers: dict = {}

    def _buffer(self, name, shape, dtype):
        buf = self._buffers.get(name)
        if buf is None or buf.shape != shape:
            buf = self._buffers[name] = empty(shape, dtype)
        return buf

    def _fit_each(self, spec, amp, meas, damp, norm) -> np.ndarray:
        numba_threads()
        return np.array([math.sqrt(_fit(s.reshape(-1), amp, meas, np.float32(damp), self.unit) / norm)
                         for s in spec])

    def complex(self, x):
        x = np.ascontiguousarray(x, np.complex64)
        spec = self._buffer("complex", x.shape, np.complex64)
        _cpu_c2c(x, spec, self.axes, True)
        err = self._fit_each(spec, self.amp, self.meas, 1.0, self.norm)
        _cpu_c2c(spec, spec, self.axes, False)
        return spec, err

    def real(self, x, damp):
        x = np.ascontiguousarray(x, np.float32)
        spec = self._buffer("half", x.shape[:-1] + (x.shape[-1] // 2 + 1,), np.complex64)
        out = self._buffer("real", x.shape, np.float32)
        _cpu_r2c(x, spec, self.axes)
        err = self._fit_each(spec, self.amp_r, self.meas_r, damp, self.norm_r)
        _cpu_c2r(spec, out, self.axes, self.shape)
        return out, err
