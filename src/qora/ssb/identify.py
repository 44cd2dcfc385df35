"""Multi-start fits and the identifiability report: which fitted parameters the data determine.

A standard error from the Hessian (:func:`qora.ssb.band.uncertainties`) describes the basin the fit
ended in; it says nothing of another basin the data explain as well. So each fit is run from
several starts (:func:`run_starts`), the converged points are grouped into basins
(:func:`distinct_basins`), and a parameter is reported as determined only where

1. the Hessian is well conditioned in its direction: the fraction of its curvature that no
   combination of the other parameters can take over, 1 / (C^-1)_ii of the Hessian C scaled to
   unit diagonal, is at least :data:`CONDITIONING` (a flat or degenerate direction has ~0); and
2. no other basin is nearly as good with a different value of it: the runner-up basin (the best
   one whose parameters differ from the best's) is either worse by a clear gap in agreement
   (:func:`gap_needed`) or agrees with the best within :data:`SIGMAS` standard errors (or the
   basins' own tolerance, :data:`SAME_BASIN`) in this parameter.

3. the data pin it to within a quarter wave: the interval over which the agreement stays within the
   gap needed of its best (others re-optimised, from the Hessian: w_i = sqrt(2 gap (-H^-1)_ii))
   is narrower than the change of the parameter that moves the wave's phase by pi / 2 at the
   aperture's edge (Rayleigh's quarter-wave criterion, :func:`quarter_wave`). Where model error,
   not noise, limits the fit (a thick amorphous slab: 36% of the signal unexplained), the Hessian's
   standard error is tiny while the agreement's hill is broad; this is the test that sees it.

Otherwise it is "not determined" and the report carries the best two basins' agreements and
values. docs/ssb.md, "The identifiability report".
"""

from __future__ import annotations

import math

import numpy as np

from qora.ssb.band import uncertainties
from qora.ssb.optimize import newton

__all__ = ["quarter_wave", "CONDITIONING", "SIGMAS", "SAME_BASIN", "GAP_FRACTION", "POLISH_GAPS", "COARSE_ROWS",
           "run_starts", "multi_start", "coarse_stride", "distinct_basins", "distinct_trials", "gap_needed",
           "degrees_of_freedom", "conditioning", "identifiability"]

CONDITIONING = 1e-4  # the least independent fraction of a parameter's curvature
SIGMAS = 3.0  # two basins differ in a parameter by more than this many standard errors
# two converged points are one basin when every parameter differs by less than this (A, rad)
SAME_BASIN = {"C10": 2.0, "C12a": 2.0, "C12b": 2.0, "thickness": 5.0, "tilt_y": 5e-4, "tilt_x": 5e-4,
              "rotation": math.radians(0.1)}
# a runner-up is clearly worse when it leaves this fraction more of the signal unexplained than
# the best does (relative to what the best leaves): model error, not noise, sets the floor on data
# the weak-phase model does not describe exactly
GAP_FRACTION = 0.05
# multi_start finishes on the full band every basin of the thinned band within this many gaps needed
# of the best: a basin further down stays clearly worse whatever finishing it would add (the move
# from the thinned band's maximum to the full band's is at the noise's scale, its gain second order)
POLISH_GAPS = 2.0
# the searches and the starts' Newton run on a band thinned to at least this many frequencies
# (coarse_stride): at full scale (44,000) every 10th, below 8,192 the whole band. H200, ssb-full's film
# (bench/probes/coarse_rows_probe.py): 8,192 / 4,096 / 2,048 rows gave the default fit 0.855 / 0.753 / 0.698 s,
# the columnar 0.349 / 0.260 / 0.201 s, tilt=False 0.221 / 0.162 / 0.136 s, every fit the same values to 3
# decimals (docs/ssb-performance.md, section 16); 4,096 keeps twice the rows 2,048 showed enough
COARSE_ROWS = 4096


def _tolerance(name: str) -> float:
    return SAME_BASIN.get(name, 1e-3)


def run_starts(band, starts, *, iterations: int, callback=None):
    """Newton (:func:`qora.ssb.optimize.newton`) from each start: a list of ``(values, agreement,
    hessian)``, best agreement first. ``callback(i, state)`` is told start ``i``'s steps."""
    out = []
    for i, start in enumerate(starts):
        cb = None if callback is None else (lambda state, i=i: callback(i, state))
        out.append(newton(band, start, iterations=iterations, callback=cb))
    return sorted(out, key=lambda r: -r[1])


def coarse_stride(band, rows: int = COARSE_ROWS) -> int:
    """The stride that thins ``band`` to at least ``rows`` frequencies (1: not thinned; also for a
    band that cannot be thinned, one split over workers)."""
    if not hasattr(band, "thinned"):
        return 1
    return max(1, int(band.shape[0]) // int(rows))


def degrees_of_freedom(band, parameters: int) -> int:
    """The residual's degrees of freedom of a fit on ``band``: its values less one free object per
    frequency and the fitted parameters."""
    nq, nbf = band.shape
    return max(1, nq * nbf - nq - parameters)


def multi_start(band, starts, names, *, iterations: int, coarse=None, callback=None):
    """Newton from each start, the basins kept (:func:`distinct_basins`, best first, as
    ``(values, agreement, hessian)`` on ``band``).

    With a ``coarse`` band (``band.thinned(stride)``) the starts' Newton runs on it (1 / stride
    of G per pass); the basins it finds are evaluated on ``band`` in one batch, and those within
    :data:`POLISH_GAPS` gaps needed (:func:`gap_needed`) of the best are finished by Newton on
    ``band`` (from a maximum of the thinned band: two or three steps). The others keep their
    thinned-band values with their agreement on ``band`` and no Hessian (None): clearly worse
    basins, which the report only names. ``callback(i, state)`` is told start ``i``'s steps on the
    coarse band (not the finishing ones). docs/ssb-performance.md, "The standard fit's cost".
    """
    if coarse is None or coarse is band:
        return distinct_basins(run_starts(band, starts, iterations=iterations, callback=callback), names)
    found = distinct_basins(run_starts(coarse, starts, iterations=iterations, callback=callback), names)
    full = np.asarray(band.evaluate_batch([v for v, _, _ in found]), float)
    best = float(full.max())
    floor = best - POLISH_GAPS * gap_needed(best, degrees_of_freedom(band, len(names)))
    finish = [found[i][0] for i in range(len(found)) if full[i] >= floor]
    rest = [(found[i][0], float(full[i]), None) for i in range(len(found)) if full[i] < floor]
    finished = run_starts(band, finish, iterations=iterations)
    return distinct_basins(sorted(finished + rest, key=lambda r: -r[1]), names)


def _differs(a: dict, b: dict, names) -> bool:
    return any(abs(a.get(n, 0.0) - b.get(n, 0.0)) > _tolerance(n) for n in names)


def distinct_basins(results, names):
    """The results (best first) with later ones in the same basin as an earlier one left out."""
    kept = []
    for r in results:
        if all(_differs(r[0], k[0], names) for k in kept):
            kept.append(r)
    return kept


def distinct_trials(points, agreements, names, count: int, *, spread: dict) -> list:
    """Up to ``count`` search trials, best first, each at least ``spread[name]`` away from every one
    taken before in some parameter: the starts of a multi-start Newton from one search's trials.
    ``points`` (n, d) in the order of ``names``, ``agreements`` (n,)."""
    width = np.array([spread[n] for n in names], float)
    taken = []
    for i in np.argsort(-np.asarray(agreements)):
        p = np.asarray(points[i], float)
        if all(np.any(np.abs(p - q) > width) for q in taken):
            taken.append(p)
            if len(taken) == count:
                break
    return [dict(zip(names, map(float, p))) for p in taken]


def gap_needed(agreement: float, dof: int) -> float:
    """The least agreement gap by which a runner-up basin is clearly worse: the larger of the
    statistical one (Delta chi^2 = 2 dof gap / (1 - agreement) of 25, five standard deviations, for
    white noise with the residual's variance, :func:`qora.ssb.band.uncertainties`) and
    :data:`GAP_FRACTION` of the unexplained fraction."""
    residual = max(1.0 - agreement, 1e-12)
    return max(12.5 * residual / max(dof, 1), GAP_FRACTION * residual)


def conditioning(hessian) -> np.ndarray:
    """Per parameter, the fraction of the agreement's curvature in its direction that the other
    parameters cannot take over: 1 / (C^-1)_ii with C = -H scaled to unit diagonal (1: independent
    of the others; 0: flat, or a combination of them). 0 where -H is not positive definite."""
    h = -np.asarray(hessian, float)
    d = np.diag(h)
    out = np.zeros(len(d))
    good = d > 0  # a direction of no or negative curvature is not determined at all
    if not good.any():
        return out
    sub = h[np.ix_(good, good)]
    c = sub / np.sqrt(np.outer(d[good], d[good]))
    try:
        if np.linalg.eigvalsh(c).min() <= 0:
            return out
        out[good] = 1.0 / np.maximum(np.diag(np.linalg.inv(c)), 1.0)
    except np.linalg.LinAlgError:  # singular: every direction stays at conditioning 0 (not determined)
        pass
    return out


def quarter_wave(*, wavelength: float, alpha_mrad: float, thickness: float = 0.0) -> dict:
    """Per parameter, the change that moves the wave's phase by pi / 2 at the aperture's edge
    k = alpha / lambda (A, rad): C10 and C12a/b, pi lambda C k^2 = pi / 2, so lambda / (2 alpha^2);
    the thickness, a spread of C10 over +-t/2, twice that; the tilt, the phase 2 pi tau.Q z at the
    band's widest Q = 2 alpha / lambda and the slab's faces z = +-t/2, so lambda / (4 alpha t) (no
    scale when t = 0). The rotation has none (its effect scales with the aberrations)."""
    alpha = alpha_mrad * 1e-3
    c = wavelength / (2 * alpha**2)
    out = {"C10": c, "C12a": c, "C12b": c, "thickness": 2 * c}
    if thickness > 0:
        out["tilt_y"] = out["tilt_x"] = wavelength / (4 * alpha * thickness)
    return out


def identifiability(band, basins, *, dof: int | None = None, scales: dict | None = None) -> dict:
    """The report of a fit with ``basins`` (``(values, agreement, hessian)``, best first, from
    :func:`distinct_basins`) on ``band`` (its parameters and :meth:`uncertainties`), JSON-ready:

    ``{"parameters": {name: {"value", "sigma" (None when not determined), "determined",
    "conditioning", "interval" (w, the half-width within the gap needed), "quarter_wave" (the
    scale w is held to, :func:`quarter_wave`; ``scales``, none when not given), "why"}},
    "agreement", "runner_up": None | {"agreement", "parameters"}, "gap", "gap_needed", "basins"}``.
    """
    scales = dict(scales or {})
    names = list(band.parameters)
    values, agreement, hessian = basins[0]
    cond = conditioning(hessian)
    # the standard errors of the conditioned parameters, from their block of the Hessian: a flat
    # direction would make the whole inverse infinite (it is held, not integrated over)
    keep = [i for i in range(len(names)) if cond[i] >= CONDITIONING]
    sigma, interval = {}, {}
    if dof is None:
        dof = degrees_of_freedom(band, len(names))
    need = gap_needed(agreement, dof)
    if keep:
        sub = np.asarray(hessian, float)[np.ix_(keep, keep)]
        sigma = uncertainties(agreement, sub, total=band.total, shape=band.shape, parameters=[names[i] for i in keep])
        try:
            inv = np.linalg.inv(-sub)
            interval = {names[i]: float(math.sqrt(2 * need * max(inv[j, j], 0.0))) for j, i in enumerate(keep)}
        except np.linalg.LinAlgError:  # singular block: no interval, so the parameters stay not determined
            pass
    runner = next((b for b in basins[1:] if _differs(b[0], values, names)), None)
    gap = None if runner is None else float(agreement - runner[1])
    report = {}
    for i, n in enumerate(names):
        v = float(values[n])
        s = sigma.get(n, math.inf)
        s = s if s == s else math.inf  # NaN from a degenerate block
        w, scale = interval.get(n, math.inf), scales.get(n)
        entry = {"value": v, "sigma": None, "determined": False, "conditioning": float(cond[i]),
                 "interval": w if math.isfinite(w) else None, "quarter_wave": scale, "why": ""}
        if cond[i] < CONDITIONING or not math.isfinite(s):
            entry["why"] = f"the agreement is flat or degenerate in {n} (conditioning {cond[i]:.1e})"
        elif scale is not None and w > scale:
            entry["why"] = (f"values {w:.3g} either side explain the data within the gap needed ({need:.2e}), more "
                            f"than a quarter wave ({scale:.3g}): the agreement's hill is too broad")
        elif runner is not None and gap < need and abs(runner[0][n] - v) > max(SIGMAS * s, _tolerance(n)):
            entry["why"] = (f"another basin with {n} = {runner[0][n]:.6g} explains the data nearly as well "
                            f"(agreement {runner[1]:.6f} against {agreement:.6f}, a gap of {gap:.2e} < {need:.2e})")
        else:
            entry.update(sigma=float(s), determined=True)
        report[n] = entry
    return {"parameters": report, "agreement": float(agreement),
            "runner_up": None if runner is None else {"agreement": float(runner[1]),
                                                      "parameters": {n: float(runner[0][n]) for n in names}},
            "gap": gap, "gap_needed": float(need), "basins": len(basins)}
