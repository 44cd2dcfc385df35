"""The optimisers of the fits: damped Newton with the exact Hessian, the defocus grid and a batched
TPE-style search, and the bounds they keep to.

They need little of a band: :class:`Objective` (``parameters`` and ``evaluate``) for
:func:`newton`, :class:`BatchObjective` (``parameters`` and ``evaluate_batch``) for the searches;
:class:`qora.ssb.band.Band` and :class:`qora.distributed.ssb.ShardedBand` are both, and so is any
toy with those methods. Progress is the caller's: :func:`newton` calls ``callback(state)`` (a
:class:`NewtonState`) after each accepted step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Protocol, runtime_checkable

import numpy as np

__all__ = ["Objective", "BatchObjective", "NewtonState", "newton", "newton_with_hessian", "defocus_search",
           "tpe_search", "BOUNDS", "SEARCH_BOUNDS", "TILT_LIMIT", "RHO"]


@runtime_checkable
class Objective(Protocol):
    """What :func:`newton` needs: the parameters' names (the order of the gradient and Hessian) and
    the agreement of a dict of values, with its gradient for ``order`` 1 (``(agreement, gradient)``:
    :func:`newton_with_hessian`) and its gradient and Hessian for ``order`` 2."""

    parameters: tuple

    def evaluate(self, values: dict, *, order: int = 2): ...


@runtime_checkable
class BatchObjective(Protocol):
    """What the searches need: the parameters' names and the agreements of a list of sets at once."""

    parameters: tuple

    def evaluate_batch(self, sets) -> np.ndarray: ...


@dataclass(frozen=True)
class NewtonState:
    """:func:`newton` after an accepted step: the step's number (1, 2, ...), the values, the
    agreement and its gradient and Hessian there, and the damping the next step starts from."""

    step: int
    values: dict
    agreement: float
    gradient: np.ndarray
    hessian: np.ndarray
    mu: float


RHO = 0.1  # the least fraction of the quadratic model's predicted gain a Newton step must realise
# The last step near the maximum needs no pass of its own: where the full Newton step's predicted gain P
# is within LAST_STEP_GAIN times the tolerance and the accepted step realised its model's gain to within
# LAST_STEP_MATCH of it, the fit ends there. The model's error over the step (a cubic term) leaves a
# gradient of about 3 (realised - P) / step, so a gain of about 9 (realised - P)^2 / 4 P is left: at
# most 0.6% of P, 0.6 tolerances. The Hessian of the point a step back serves (the step is a small
# fraction of the hill's width). A fit finishing from a thinned band's maximum then takes one pass with
# derivatives and one value, not two and one (issue 38: 0.74 s a pass of the incoherent model).
LAST_STEP_GAIN = 100.0
LAST_STEP_MATCH = 0.05
# The largest specimen tilt (rad) a fit may reach. The depth phases are paraxial, and as the thickness
# goes to zero the tilt stops acting on the agreement at all: without a bound Newton then wanders
# along that flat direction to radians (seen on a film whose unmodelled C30 drove the thickness to
# 0.2 A). 0.1 rad is far beyond the mrad tilts the model is for (docs/ssb.md).
# TILT_LIMIT: the largest sample tilt |tau| fitted (rad). BOUNDS: the fit's box, name -> (low, high):
# thickness in A, tilt_y and tilt_x in rad (the other parameters are unbounded).
TILT_LIMIT = 0.1
BOUNDS = {"thickness": (0.0, math.inf), "tilt_y": (-TILT_LIMIT, TILT_LIMIT), "tilt_x": (-TILT_LIMIT, TILT_LIMIT)}


def newton(band: Objective, start: dict, *, iterations: int = 20, tolerance: float = 1e-10,
           callback: Callable[[NewtonState], None] | None = None):
    """Maximise the agreement from ``start`` by damped Newton steps with the exact Hessian.

    Returns ``(values, agreement, hessian)``. Each step solves (-H + mu D) delta = grad with D the
    magnitudes of the Hessian's diagonal (Marquardt's scaling), raising mu until the step raises
    the agreement by at least a tenth of the gain its quadratic model predicts. The scaling matters: the parameters span eight
    decades of curvature (tilt in rad against C10 and thickness in A), and a damping of mu times
    the identity, sized by the stiffest parameter, would hold the soft ones to tiny steps for many
    passes over G. Thickness and tilt keep to :data:`BOUNDS`; one held at a bound that the gradient
    pushes against leaves the step (a projected Newton step). The fit stops when the full Newton
    step predicts a gain below ``tolerance`` (relative), so converged fits spend no pass on a step
    whose change is rounding, or after a last step near the maximum that realised what its model
    predicted (:data:`LAST_STEP_GAIN`): the Hessian returned is then the one a step back, and the
    callback's gradient the quadratic model's.

    ``start`` may hold values the band does not fit (they are passed along to ``evaluate``).
    ``callback(state)``, when given, is called once after each accepted step with a
    :class:`NewtonState` (the step's values and the agreement, gradient and Hessian there): the
    caller's progress, this function keeps none.
    """
    values = dict(start)
    names = band.parameters
    lower, upper = _box(names)
    current, grad, hess = band.evaluate(values)
    mu = 1e-3
    accepted = 0
    for _ in range(iterations):
        x = np.array([values.get(n, 0.0) for n in names], float)
        free = _free(x, grad, lower, upper)
        g, h = grad[free], hess[np.ix_(free, free)]
        gain = _newton_gain(g, h) if len(free) else 0.0
        if gain <= tolerance * max(abs(current), 1e-30):
            break
        scale = np.maximum(np.abs(np.diag(h)), 1e-12 * max(np.abs(np.diag(h)).max(), 1e-300))
        improved = False
        for _ in range(30):
            step = np.zeros(len(names))
            try:
                step[free] = np.linalg.solve(-h + mu * np.diag(scale), g)
            except np.linalg.LinAlgError:  # mu D just cancels an indefinite -H: damp more
                mu *= 10
                continue
            step = np.clip(x + step, lower, upper) - x
            trial = {**values, **{n: float(v) for n, v in zip(names, x + step)}}
            value = band.evaluate(trial, order=0)
            # a step must raise the agreement, and by a tenth of what its quadratic model predicts
            # (where -H is indefinite, or a bound clipped the step, the model may predict a fall)
            predicted = float(grad @ step + 0.5 * step @ hess @ step)
            if value > current and value - current >= RHO * predicted:
                values, improved = trial, True
                mu = max(mu / 10, 1e-9)
                break
            mu *= 10
        if not improved:
            break
        if gain <= LAST_STEP_GAIN * tolerance * max(abs(current), 1e-30) and \
                abs(value - current - predicted) <= LAST_STEP_MATCH * predicted:
            current, grad = value, grad + hess @ step  # the model's gradient there
            accepted += 1
            if callback is not None:
                callback(NewtonState(accepted, dict(values), current, grad, hess, mu))
            break
        previous = current
        current, grad, hess = band.evaluate(values)
        accepted += 1
        if callback is not None:
            callback(NewtonState(accepted, dict(values), current, grad, hess, mu))
        if abs(current - previous) < tolerance * max(abs(current), 1e-30):
            break
    return values, current, hess


def newton_with_hessian(band: Objective, start: dict, hessian, *, tolerance: float = 1e-10, iterations: int = 20,
                        callback: Callable[[NewtonState], None] | None = None):
    """Newton steps on ``band`` with its gradient (``evaluate(order=1)``: a pass without second derivatives) and
    ``hessian`` taken from elsewhere: the same agreement's, estimated where it is cheaper (a thinned band's, at or
    near ``start``). Returns ``(values, agreement, hessian)`` as :func:`newton` does.

    Each step's agreement is measured (a pass without derivatives). For a quadratic hill a borrowed Hessian with a
    relative error e makes the step realise its predicted gain P to within about e P and leaves about e^2 P to
    gain; the fit ends where that estimate, (realised - P)^2 / P, or the next gradient's predicted gain is below
    ``tolerance`` (relative). Where it goes on, the change of the gradient over the step corrects the Hessian along
    it (a BFGS update of -H, kept positive definite), so a rough borrowed Hessian costs a few gradient passes, and
    the Hessian returned is the corrected one. The fit goes on by :func:`newton` from the last point where a step
    fails to raise the agreement by a tenth of its prediction or ``iterations`` steps did not end it: a poor
    borrowed Hessian costs time, not accuracy. Bounds as :func:`newton`'s."""
    values = dict(start)
    names = band.parameters
    hess = np.array(hessian, float)
    lower, upper = _box(names)
    last = None  # the previous step and the gradient it started from
    for step_number in range(1, iterations + 1):
        current, grad = band.evaluate(values, order=1)
        if last is not None:
            hess = _secant(hess, *last, grad)
        floor = tolerance * max(abs(current), 1e-30)
        x = np.array([values.get(n, 0.0) for n in names], float)
        free = _free(x, grad, lower, upper)
        g, h = grad[free], hess[np.ix_(free, free)]
        gain = _newton_gain(g, h) if len(free) else 0.0
        if gain <= floor:
            return values, current, hess
        if not math.isfinite(gain):
            break
        step = np.zeros(len(names))
        step[free] = np.linalg.solve(-h, g)
        step = np.clip(x + step, lower, upper) - x
        predicted = float(grad @ step + 0.5 * step @ hess @ step)
        trial = {**values, **{n: float(v) for n, v in zip(names, x + step)}}
        value = band.evaluate(trial, order=0)
        if not (value > current and value - current >= RHO * predicted):
            break
        values, last = trial, (step, grad)
        if callback is not None:
            callback(NewtonState(step_number, dict(values), value, grad + hess @ step, hess, 0.0))
        if (value - current - predicted) ** 2 <= floor * predicted:  # what is left to gain, estimated
            return values, value, hess
    return newton(band, values, iterations=iterations, tolerance=tolerance, callback=callback)


def _secant(hess, step, before, after):
    """The Hessian corrected along ``step`` by the gradient's change over it (``before`` -> ``after``): BFGS on
    B = -H, skipped where the change does not show a positive curvature (B stays positive definite)."""
    b = -hess
    y = before - after  # = B step for a quadratic
    ys = float(y @ step)
    bs = b @ step
    sbs = float(step @ bs)
    if not (ys > 0 and sbs > 0):
        return hess
    return -(b + np.outer(y, y) / ys - np.outer(bs, bs) / sbs)


def _box(names):
    """The lower and upper bounds (:data:`BOUNDS`) of the parameters ``names``."""
    return (np.array([BOUNDS.get(n, (-math.inf, math.inf))[0] for n in names]),
            np.array([BOUNDS.get(n, (-math.inf, math.inf))[1] for n in names]))


def _free(x, grad, lower, upper):
    """The parameters a step may move: all but those at a bound the gradient pushes against."""
    return np.flatnonzero(~(((x <= lower) & (grad < 0)) | ((x >= upper) & (grad > 0))))


def _newton_gain(grad, hess) -> float:
    """The agreement's increase that the full Newton step predicts, grad (-H)^-1 grad / 2 (inf where
    -H is not positive definite: no prediction, keep stepping)."""
    try:
        step = np.linalg.solve(-hess, grad)
    except np.linalg.LinAlgError:
        return math.inf
    gain = 0.5 * float(grad @ step)
    return gain if gain > 0 else math.inf


def defocus_search(band: BatchObjective, *, low: float = -500.0, high: float = 500.0, step: float = 10.0,
                   batch: int | None = None, fixed: dict | None = None):
    """The C10 (A) of best agreement on a grid, evaluated ``batch`` sets per pass over G (default
    the band's ``sets_per_pass``, else 8).

    The cold-start stage before :func:`newton`: the agreement's basin around the true C10 is a
    few tens of A wide, so a grid of ``step`` lands inside it. Returns ``(c10, agreements)``.
    """
    if "C10" not in band.parameters:
        raise ValueError("the band does not fit C10")
    batch = batch or getattr(band, "sets_per_pass", 8)
    grid = np.arange(low, high + step / 2, step)
    fixed = dict(fixed or {})
    values = np.concatenate([band.evaluate_batch([{**fixed, "C10": float(c)} for c in grid[i:i + batch]])
                             for i in range(0, len(grid), batch)])
    return float(grid[int(np.argmax(values))]), values


# the default box of the cold-start search, name -> (low, high) in A (C10 defocus, C12a/C12b astigmatism)
SEARCH_BOUNDS = {"C10": (-500.0, 500.0), "C12a": (-60.0, 60.0), "C12b": (-60.0, 60.0)}


def tpe_search(band: BatchObjective, bounds: dict | None = None, *, trials: int = 200, batch: int = 8, seed: int = 0,
               fixed: dict | None = None, startup: int | None = None, gamma: float = 0.2, candidates: int = 96,
               callback: Callable[[int], None] | None = None):
    """A batched search in the style of the tree-structured Parzen estimator (TPE), seeded.

    ``startup`` trials (default a fifth, in whole batches) are uniform in ``bounds`` (name ->
    (low, high), default :data:`SEARCH_BOUNDS` for the band's parameters); then each pass splits
    the trials so far into the best ``gamma`` and the rest, draws ``candidates`` points from
    Gaussian kernels around the best ones, and evaluates the ``batch`` candidates with the largest
    ratio of the two kernel densities (good over rest) in one pass over G. Returns
    ``(values, agreement, trials (n, d), agreements (n,))`` with values the best trial.
    ``callback(n)``, when given, is called after each pass with the number of trials so far.
    """
    if bounds is None:
        bounds = {p: SEARCH_BOUNDS[p] for p in band.parameters if p in SEARCH_BOUNDS}
    names = list(bounds)
    if not names:
        raise ValueError("nothing to search: give bounds for at least one parameter")
    unknown = [n for n in names if n not in band.parameters]
    if unknown:
        raise ValueError(f"the band does not fit {unknown}")
    if trials < batch or batch < 1:
        raise ValueError(f"need trials >= batch >= 1, got {trials} and {batch}")
    rng = np.random.default_rng(seed)
    lo = np.array([bounds[n][0] for n in names], float)
    hi = np.array([bounds[n][1] for n in names], float)
    span = hi - lo
    fixed = dict(fixed or {})
    startup = startup or max(batch, batch * round(trials / 5 / batch))
    xs, ys = [], []

    def run(points):
        ys.extend(band.evaluate_batch([{**fixed, **dict(zip(names, map(float, p)))} for p in points]))
        xs.extend(points)
        if callback is not None:
            callback(len(xs))

    while len(xs) < min(startup, trials):
        run(lo + span * rng.random((batch, len(names))))

    def density(points, centres, width):
        # the squared distances as |a|^2 + |b|^2 - 2 a.b: one small matrix product, where the
        # (candidates, trials, d) differences took most of the search's host time per pass
        a, b = points / width, centres / width
        z2 = np.maximum((a * a).sum(1)[:, None] + (b * b).sum(1)[None] - 2.0 * (a @ b.T), 0.0)
        return np.exp(-0.5 * z2).sum(-1) / len(centres) / np.prod(width)

    while len(xs) < trials:
        x, y = np.array(xs), np.array(ys)
        order = np.argsort(-y)
        n_good = max(2, int(math.ceil(gamma * len(y))))
        good, rest = x[order[:n_good]], x[order[n_good:]]
        scale = len(names) + 4
        w_good = np.maximum(good.std(0) * n_good ** (-1 / scale), 0.01 * span)
        w_rest = np.maximum(rest.std(0) * max(len(rest), 1) ** (-1 / scale), 0.05 * span)
        pick = good[rng.integers(n_good, size=candidates)]
        cand = np.clip(pick + rng.normal(size=pick.shape) * w_good, lo, hi)
        ratio = density(cand, good, w_good) / (density(cand, rest, w_rest) + 1e-300)
        take = min(batch, trials - len(xs))
        run(cand[np.argsort(-ratio)[:take]])
    x, y = np.array(xs), np.array(ys)
    best = int(np.argmax(y))
    return {**fixed, **dict(zip(names, map(float, x[best])))}, float(y[best]), x, y
