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

since a real volume can only move the Hermitian half of the noise. The search costs three FISTA
solves (:func:`discrepancy_search`): the floor (weight 0); ``W_START``; and the weight the excess at
``W_START`` predicts, R(lambda) - R(0) growing as lambda^p (p measured 0.72 on the FDTD cell, 0.86-0.88
on the simulated bead and cell; the prediction uses the end of that range that errs toward the smaller
weight, docs/holo.md). The largest weight whose excess is within ``ACCEPT`` times the
allowed one is chosen (the noise energy is itself an estimate); each solve is warm-started from the last.
Weights are dimensionless (tv_weight units, lambda = tv_weight k0^2 on the potential), kept in [LOW, HIGH].
"""

from __future__ import annotations

import math

import numpy as np

from qora.backend import fft as backend_fft
from qora.holo.fista import proximal_gradient
from qora.holo.steps import TV_SEARCH_SOLVES as SOLVES  # the floor, the start weight, the predicted weight
from qora.holo.steps import span
from qora.progress import report

__all__ = ["fista_tv_complex", "misfit", "select_tv_weight", "discrepancy_search", "LOW", "HIGH", "SOLVES",
           "W_START", "EXPONENT_UP", "EXPONENT_DOWN", "ACCEPT"]

LOW, HIGH = 1e-6, 1.0
W_START = 1e-4  # between the weights the former bisection chose (1.3e-5 bead, 2.6e-4 FDTD cell at half sampling)
# excess ~ weight^p with p measured 0.72 (FDTD cell) to 0.88 (bead, cell phantom) between 3e-5 and 1e-2: the
# prediction takes the end of that range that errs toward a smaller weight (p = 1 going up, 0.7 going down)
EXPONENT_UP, EXPONENT_DOWN = 1.0, 0.7
ACCEPT = 1.25  # an excess within 1.25 x the allowed one meets the rule: the noise energy is an estimate
STEP_UP = 10.0  # the start weight's excess at or below the floor (the floor not yet converged): try 10x


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
    duals = [None, None]  # each part's FGP dual, warm-started between outer iterations
    boxes = (bounds, (0.0, math.inf))

    def restore(y, _k):
        e = backend_fft.fftn(expand(y))
        e[measured] = data[measured]
        return restrict(backend_fft.ifftn(e))

    def prox(v):
        parts = []
        for j, part in enumerate((v.real, v.imag)):
            x_part, duals[j] = fgp_prox_fused(np.ascontiguousarray(part), lam, inner, dual=duals[j], bounds=boxes[j])
            parts.append(x_part)
        return parts[0] + 1j * parts[1]

    start = restrict(backend_fft.ifftn(data)) if start is None else start
    shown = lambda k, _x: report(progress, "tv", k, iterations) or None  # noqa: E731 (shown, never stopped)
    x_prev, _ = proximal_gradient(start, restore, prox, iterations, after_step=shown)
    return x_prev if box else np.fft.fftshift(expand(x_prev))


def misfit(x_box, data, measured, fov) -> float:
    """R = sum over measured bins of |F x - P|^2 for the box iterate ``x_box`` (DFT units of P)."""
    e = backend_fft.fftn(fov.expand(x_box))
    return float(np.sum(np.abs(e[measured] - data[measured]) ** 2))


def select_tv_weight(data, measured, geometry, noise_energy: float, *, solver, iterations: int, inner: int, fov,
                     bounds=(0.0, math.inf), complex_index: bool = False, progress=None, solver_options=None):
    """The discrepancy principle's TV weight (dimensionless) and the box iterate it gives.

    ``solver`` is :func:`qora.holo.odt.fista_tv` (real index) or :func:`fista_tv_complex`.
    Returns ``(tv_weight, x_box, record)`` with ``record`` a dict: the floor R(0), the noise energy, the
    allowed excess, every (tv_weight, excess) tried, whether the rule was met and how. Each of the
    :data:`SOLVES` solves runs ``iterations`` FISTA steps, each reported to ``progress`` (one bar over
    the whole search). The search itself is :func:`discrepancy_search` (the CUDA solver's too).
    ``solver_options``: keywords every solve passes on (the real solver's ``restore`` coefficients, made once).
    """
    k02 = geometry.k0**2
    shared = dict(solver_options or {})

    def run(weight, start, part):
        return solver(data, measured, iterations, weight * k02, inner, fov, part, bounds=bounds, start=start,
                      box=True, **shared)

    return discrepancy_search(run, lambda x: misfit(x, data, measured, fov), noise_energy,
                              complex_index=complex_index, progress=progress, units=iterations)


def discrepancy_search(run, misfit_of, noise_energy: float, *, complex_index: bool = False, progress=None,
                       units: int = 1):
    """The search of :func:`select_tv_weight` for any solver, in at most :data:`SOLVES` solves.

    ``run(tv_weight, start, progress)`` returns the iterate of FISTA-TV at that weight from ``start`` (None:
    the solver's own start, the plain inversion), reporting its ``units`` iterations to ``progress`` (it may
    ignore it); ``misfit_of(x)`` its misfit R (up to a constant: only differences are read).
    Returns ``(tv_weight, x, record)``; ``record["met"]`` says whether the chosen weight's excess is within
    ``ACCEPT`` x the allowed one (False: the smallest weight tried, the data fit best), ``record["rule"]`` how.
    """
    allowed = noise_energy if complex_index else noise_energy / 2

    def solve(k, weight, start):
        return run(weight, start, span(progress, k * units, SOLVES * units, f"tv weight {k + 1} of {SOLVES}: "))

    x0 = solve(0, 0.0, None)  # the floor: weight 0 makes the prox the projection alone
    floor = misfit_of(x0)
    record = {"floor": float(floor), "noise_energy": float(noise_energy), "allowed_excess": float(allowed),
              "tried": [], "met": False, "rule": ""}
    if allowed <= 0:  # no bin hit twice, or identical hits: nothing measures the noise, nothing licenses TV
        record["rule"] = "no noise measured in the data: no TV (weight 0)"
        report(progress, "tv weight", SOLVES * units, SOLVES * units)
        return 0.0, x0, record
    x1 = solve(1, W_START, x0)
    e1 = misfit_of(x1) - floor
    if e1 <= 0:
        w2 = W_START * STEP_UP
    else:
        w2 = W_START * (allowed / e1) ** (1 / (EXPONENT_UP if e1 < allowed else EXPONENT_DOWN))
    w2 = min(max(w2, LOW), HIGH)
    x2 = solve(2, w2, x1)
    e2 = misfit_of(x2) - floor
    record["tried"] = [(float(W_START), float(e1)), (float(w2), float(e2))]
    met = [(w, x) for w, x, e in ((W_START, x1, e1), (w2, x2, e2)) if e <= ACCEPT * allowed]
    if met:
        weight, x = max(met, key=lambda c: c[0])
        record["met"] = True
        record["rule"] = f"the largest weight tried with excess <= {ACCEPT:g} x allowed"
    else:
        weight, x = min(((W_START, x1), (w2, x2)), key=lambda c: c[0])
        record["rule"] = "no weight tried met the discrepancy rule: the smallest, the data fit best"
    return weight, x, record
