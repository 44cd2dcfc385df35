"""Maximum-likelihood refinement on photon counts: gradient steps on the Poisson log-likelihood.

For a centre-origin object ``x`` on its support S, unitary transform ``y = F x`` and counts ``I`` on
the measured pixels, the negative Poisson log-likelihood (up to terms free of x) is

    L(x) = sum_q ( |y_q|^2 - I_q log |y_q|^2 ),

a different fit from the amplitude distance the projections minimise: it weights each pixel by its
own counting noise, which matters where the counts are few (high q). Its gradient with respect to
conj(x) is ``g = F^-1[(1 - I / |y|^2) y]`` on measured pixels (0 on masked ones), restricted to S.
A step ``x <- x - mu g`` with ``mu = 1/2`` moves each measured Fourier value half-way to
``(I / |y|) y/|y|``, the point where the pixel's likelihood is stationary (``|y|^2 = I``); the
support projection then keeps the object on S. Runs on the engine's own arrays and device (NumPy or
CuPy); the step's error history stays on the device until the stage ends.
"""

from __future__ import annotations

import numpy as np

from qora.backend import fft, xp_of
from qora.io.errors import InputError

__all__ = ["poisson_nll", "poisson_gradient", "ml_step", "ml_iterate"]

# |y|^2 floor for the ratio I / |y|^2: a pixel the model puts at zero would give an infinite step
_FLOOR = 1e-12


def _axes(x, amp):
    return tuple(range(x.ndim - amp.ndim, x.ndim))


def poisson_nll(x, amp, *, xp=None) -> float:
    """L(x) = sum over measured (|F x|^2 - I log |F x|^2), F unitary; ``amp`` = sqrt(I) in FFT layout,
    negative where masked; ``x`` in FFT-origin layout of the engine (any translation gives the same L)."""
    xp = xp or xp_of(x)
    y = fft.fftn(x.astype(np.complex128), axes=_axes(x, amp), norm="ortho")
    power = xp.maximum(xp.abs(y) ** 2, _FLOOR)
    counts = xp.where(amp >= 0, amp.astype(np.float64) ** 2, 0.0)
    return float(xp.sum(xp.where(amp >= 0, power - counts * xp.log(power), 0.0)))


def poisson_gradient(x, amp, *, xp=None):
    """dL/d conj(x) = F^-1[(1 - I/|y|^2) y] on measured pixels (no support restriction)."""
    xp = xp or xp_of(x)
    axes = _axes(x, amp)
    y = fft.fftn(x, axes=axes, norm="ortho")
    power = xp.maximum(xp.abs(y) ** 2, _FLOOR)
    counts = xp.where(amp >= 0, amp * amp, 0).astype(power.dtype)
    factor = xp.where(amp >= 0, 1 - counts / power, 0)
    return fft.ifftn(factor * y, axes=axes, norm="ortho").astype(x.dtype)


def ml_step(x, amp, support, *, step: float = 0.5, xp=None):
    """One step ``x - step * g`` on the support (0 outside); returns the new x."""
    xp = xp or xp_of(x)
    g = poisson_gradient(x, amp, xp=xp)
    return xp.where(xp.asarray(support).astype(bool), x - np.float32(step) * g, 0).astype(x.dtype)


def ml_iterate(engine, iterations: int, *, step: float = 0.5) -> np.ndarray:
    """``iterations`` ML steps on every start of ``engine`` (its x, amplitude and support, in place).

    Returns the Fourier error of each iterate (iterations, B), read from the device once at the end.
    The object is centre-origin in the engine while the amplitude is in FFT layout: as for the
    projections, a translation only multiplies the transform by a phase ramp, which the likelihood
    (a function of |F x|) does not see.
    """
    sync = getattr(engine, "_sync_x", None)
    if sync is not None:
        sync()  # engines that iterate an fp16 copy: bring x up to date first (x_written() below pushes it back)
    x = engine.x
    if x.dtype != np.complex64:
        raise InputError(f"the ML stage needs an fp32 engine; the {engine.name} engine holds x as {x.dtype}")
    xp = engine.backend.xp
    measured = engine.amp >= 0
    history = []
    for _ in range(iterations):
        for s in range(engine.batch):
            x[s] = ml_step(x[s], engine.amp, engine.support[s], step=step, xp=xp)
        y = fft.fftn(x, axes=tuple(range(1, x.ndim)), norm="ortho")
        d = xp.where(measured, xp.abs(y) - engine.amp, 0)
        history.append(xp.sum((d * d).reshape(engine.batch, -1), axis=1, dtype=np.float64))
    engine.x_written()
    errors = np.asarray(engine.backend.to_host(xp.stack(history)))
    return np.sqrt(errors / engine.denominator)
