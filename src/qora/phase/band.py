"""A noise-aware modulus constraint: the model's modulus is free within the counts' noise band.

At a few hundred photons per speckle the exact modulus projection forces ``|F x|`` onto ``sqrt(I)``,
noise included, and the search settles on a fixed point that fits the noise (on ``triangle_256_1e6``
ER from the found objects on the TRUE support still ends at object errors 0.165-0.190). The relaxed
constraint used here leaves the model alone where it agrees with the counts within their noise:

- on a measured pixel the model amplitude ``m = |F x|`` is kept where it lies in the band
  ``[max(0, sqrt(I) - k sigma), sqrt(I) + k sigma]`` and moved to the nearest edge otherwise
  (the phase is kept; phase 0 where ``F x = 0``); unmeasured pixels keep ``F x``;
- ``sigma = 0.5``: the standard deviation of ``sqrt`` of a Poisson count (delta method,
  ``1 / (2 sqrt(lambda)) * sqrt(lambda)``; the Anscombe transform ``2 sqrt(I + 3/8)`` has unit variance,
  which is the same 0.5 on ``sqrt(I)``). It is used on every pixel, zero counts included: a pixel with
  0 counts gets the band ``[0, k / 2]``, i.e. a model intensity up to ``k^2 / 4`` photons, which at
  ``k = 1`` is an expected count whose chance of recording 0 is ``exp(-1/4) = 0.78``, so such a pixel
  is indeed compatible with the 0 it recorded. (A per-pixel ``1 / (2 sqrt(I))`` would give such pixels an
  infinite band.)
- ``k = 0`` is the ordinary modulus projection, exactly.

The band is in units of ``sqrt(counts)``: it is meaningful on photon counts, as the solver holds them
(the amplitude is ``sqrt`` of the counts, unscaled). Runs as array code over ``xp``
(:func:`qora.phase.array_loop.array_iterate`), so CPU and every CUDA variant share it.
"""

from __future__ import annotations

import numpy as np

from qora.phase.array_loop import array_iterate

__all__ = ["SIGMA_SQRT_POISSON", "band_modulus_step", "band_iterate"]

# std of sqrt(N) for a Poisson count N (counts >~ 1), in sqrt(photons)
SIGMA_SQRT_POISSON = 0.5


def band_modulus_step(y, amp, k: float, xp):
    """The band constraint on a unitary transform ``y`` (..., *shape) against ``amp`` (*shape, sqrt counts).

    Returns ``(w, err)``: ``w`` takes on measured pixels (``amp >= 0``) the modulus ``|y|`` clipped to
    ``[max(0, amp - k/2), amp + k/2]`` with ``y``'s phase, ``y`` elsewhere; ``err`` (...,) is the sum
    over measured pixels of ``(|y| - amp)^2`` (the ordinary misfit, so histories compare across ``k``),
    float64, on the device.
    """
    mag = xp.abs(y)
    measured = amp >= 0
    half = k * SIGMA_SQRT_POISSON
    target = xp.clip(mag, xp.maximum(amp - half, 0), amp + half) if k else amp
    unit = xp.where(mag > 0, y / xp.where(mag > 0, mag, 1), 1)
    w = xp.where(measured, target * unit, y)
    d = xp.where(measured, mag - amp, 0)
    nd = len(amp.shape)
    err = xp.sum((d * d).reshape(d.shape[: d.ndim - nd] + (-1,)), axis=-1, dtype=np.float64)
    return w.astype(y.dtype), err


def band_iterate(engine, k: float, iterations: int, a: float, b: float, constraint=None) -> np.ndarray:
    """``iterations`` ER/HIO/RAAR updates of every start of ``engine`` with the band constraint of width
    ``k`` (standard deviations). Returns the ordinary Fourier error per iteration and start
    (iterations, B), read from the device once."""
    amp = engine.amp

    def step(y, xp, _):
        return band_modulus_step(y, amp, k, xp)

    return array_iterate(engine, iterations, a, b, constraint, step, what="the band constraint")
