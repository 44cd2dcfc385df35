"""TV for a complex index, and the TV weight chosen from the data (the discrepancy principle).

The TV weight lambda trades the data misfit R(lambda) = ||M (F x_lambda - P)||^2 (M the measured
bins, P the mapped spectrum, F the DFT of the volume) against flatness. A constant weight flattens
a cell whose contrast is small against the weight (docs/holo.md). Morozov's discrepancy principle
picks the largest weight whose misfit stays within what the noise explains. Here the noise is
measured in the data (:meth:`qora.holo.plans.MappingPlan.noise_energy`: the spread of the repeated
estimates of each spectrum bin), and the misfit is counted above the floor R(0) that even the
unregularised, constrained fit leaves (the part of the data no admissible volume can match: the
imaginary part for a real index, what the bounds exclude). The chosen weight is the largest with

    R(lambda) - R(0) <= E_noise / 2  (real index)      or      <= E_noise  (complex index),

since a real volume can only move the Hermitian half of the noise. The search is a bisection in
log lambda between ``LOW`` and ``HIGH`` (dimensionless tv_weight units, lambda = tv_weight k0^2 on
the potential), each candidate warm-started from the last accepted one.
"""

from __future__ import annotations

import math

import numpy as np

from qora.backend import fft as backend_fft
from qora.progress import report

__all__ = ["fista_tv_complex", "misfit", "select_tv_weight", "discrepancy_search", "LOW", "HIGH", "STEPS"]

LOW, HIGH, STEPS = 1e-6, 1.0, 8


def fista_tv_complex(data, measured, iterations: int, lam: float, inner: int, fov, progress=None, *,
                     bounds=(0.0, math.inf), start=None, box: bool = False):
    """FISTA on f(x) = 1/2 ||M (F x - P)||^2 + lam (TV(Re x) + TV(Im x)) for a complex potential x,
    Re x within ``bounds`` and Im x >= 0 (absorption): the C2C twin of :func:`qora.holo.odt.fista_tv`
    (``fov`` a :class:`qora.holo.odt.FieldOfView`).

    The gradient step is the C2C restore step of Gerchberg-Papoulis; the prox splits into the real
    and imaginary parts (TV of each, with its own box), each by FGP warm-started between iterations.
    Returns the complex volume, centre-origin (``box``: the iterate itself, for a warm start).
    """
    from qora.holo.tv_cpu import fgp_prox_fused

    restrict, expand = fov.crop, fov.expand
    x_prev = y = restrict(backend_fft.ifftn(data)) if start is None else start
    t = 1.0
    duals = [None, None]
    boxes = (bounds, (0.0, math.inf))
    for it in range(iterations):
        e = backend_fft.fftn(expand(y))
        e[measured] = data[measured]
        v = restrict(backend_fft.ifftn(e))
        parts = []
        for j, part in enumerate((v.real, v.imag)):
            xp_, duals[j] = fgp_prox_fused(np.ascontiguousarray(part), lam, inner, dual=duals[j], bounds=boxes[j])
            parts.append(xp_)
        x = parts[0] + 1j * parts[1]
        t_new = (1 + math.sqrt(1 + 4 * t * t)) / 2
        y = x + ((t - 1) / t_new) * (x - x_prev)
        x_prev, t = x, t_new
        report(progress, "tv", it + 1, iterations)
    return x_prev if box else np.fft.fftshift(expand(x_prev))


def misfit(x_box, data, measured, fov) -> float:
    """R = sum over measured bins of |F x - P|^2 for the box iterate ``x_box`` (DFT units of P)."""
    e = backend_fft.fftn(fov.expand(x_box))
    return float(np.sum(np.abs(e[measured] - data[measured]) ** 2))


def select_tv_weight(data, measured, geometry, noise_energy: float, *, solver, iterations: int, inner: int, fov,
                     bounds=(0.0, math.inf), complex_index: bool = False, progress=None):
    """The discrepancy principle's TV weight (dimensionless) and the box iterate it gives.

    ``solver`` is :func:`qora.holo.odt.fista_tv` (real index) or :func:`fista_tv_complex`.
    Returns ``(tv_weight, x_box, record)`` with ``record`` a dict: the floor R(0), the noise energy, the
    allowed excess, and every (tv_weight, excess) tried. Each candidate runs ``iterations`` FISTA steps.
    The search itself is :func:`discrepancy_search` (the CUDA solver's too).
    """
    k02 = geometry.k0**2

    def run(weight, start):
        return solver(data, measured, iterations, weight * k02, inner, fov, bounds=bounds, start=start, box=True)

    return discrepancy_search(run, lambda x: misfit(x, data, measured, fov), noise_energy,
                              complex_index=complex_index, progress=progress)


def discrepancy_search(run, misfit_of, noise_energy: float, *, complex_index: bool = False, progress=None):
    """The search of :func:`select_tv_weight` for any solver: ``run(tv_weight, start)`` returns the iterate of
    FISTA-TV at that weight from ``start`` (None: the solver's own start, the plain inversion), ``misfit_of(x)``
    its misfit R (up to a constant: only differences are read). Returns ``(tv_weight, x, record)``."""
    allowed = noise_energy if complex_index else noise_energy / 2
    # the floor: the constrained fit without TV (weight 0 makes the prox the projection alone)
    x0 = run(0.0, None)
    floor = misfit_of(x0)
    tried = []
    lo, hi = math.log(LOW), math.log(HIGH)
    best_w, best_x = LOW, None
    x_hi = run(HIGH, x0)
    excess = misfit_of(x_hi) - floor
    tried.append((HIGH, excess))
    if excess <= allowed:
        best_w, best_x = HIGH, x_hi
    else:
        start = x0
        for step in range(STEPS):
            mid = (lo + hi) / 2
            w = math.exp(mid)
            x = run(w, start)
            excess = misfit_of(x) - floor
            tried.append((w, excess))
            if excess <= allowed:
                lo, best_w, best_x, start = mid, w, x, x
            else:
                hi = mid
            report(progress, "tv weight", step + 1, STEPS)
        if best_x is None:
            best_x = run(best_w, x0)
    record = {"floor": float(floor), "noise_energy": float(noise_energy), "allowed_excess": float(allowed),
              "tried": [(float(w), float(e)) for w, e in tried]}
    return best_w, best_x, record
