"""The accelerated proximal-gradient loop (FISTA), written once for the engine, and its extrapolation weights.

Beck and Teboulle's schedule (SIAM J. Imaging Sci. 2, 183 (2009), doi:10.1137/080716542): t_1 = 1,
t_{k+1} = (1 + sqrt(1 + 4 t_k^2)) / 2, and the k-th extrapolation y = x_k + (t_k - 1) / t_{k+1} (x_k - x_{k-1}).
:func:`proximal_gradient` is the loop over callables on array code: the FISTA-TV solves of a real and a complex
index (:mod:`qora.holo.odt`, :mod:`qora.holo.regularisation`) and the BPM inversion on both backends run it. The
CUDA spectrum solver's fused step kernel and the FGP dual iterations of the TV prox (:mod:`qora.holo.tv`, its
Numba and CUDA versions) make the same update inside a kernel or a loop of their own and draw their weights from
:func:`momenta`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

__all__ = ["momenta", "proximal_gradient"]


def momenta() -> Iterator[float]:
    """The weights (t_k - 1) / t_{k+1} for k = 1, 2, ...: 0, 0.2818, 0.4340, ... tending to 1."""
    t = 1.0
    while True:
        t_next = (1 + math.sqrt(1 + 4 * t * t)) / 2
        yield (t - 1) / t_next
        t = t_next


def _extrapolate(x, x_prev, weight: float):
    return x + weight * (x - x_prev)


def proximal_gradient(start, gradient_step, prox, iterations: int, *, momentum: bool = True, extrapolate=None,
                      after_step=None):
    """Proximal gradient from ``start``: x_k = prox(gradient_step(y_k, k)), then with ``momentum`` (FISTA)
    y_{k+1} = x_k + w_k (x_k - x_{k-1}) with w_k from :func:`momenta`, else y_{k+1} = x_k.

    ``gradient_step(y, k)``: y minus the step times the gradient of the smooth term at y (k from 0; a loop that
    cycles through batches of data picks its batch by k). ``prox(v)``: the proximal map of the other term, a
    new array. ``extrapolate(x, x_prev, w)``: the extrapolation in the backend's own arithmetic (default the
    formula above; a float32 device array passes the weight as float32). ``after_step(k, x)``: called after step
    k (from 1); returning False ends the loop there. Returns ``(x, steps)``: the last iterate and the steps made.
    """
    extrapolate = extrapolate or _extrapolate
    x_prev = y = start
    weights = momenta()
    steps = 0
    for k in range(iterations):
        x = prox(gradient_step(y, k))
        weight = next(weights)
        y = extrapolate(x, x_prev, weight) if momentum else x
        x_prev, steps = x, k + 1
        if after_step is not None and after_step(steps, x) is False:
            break
    return x_prev, steps
