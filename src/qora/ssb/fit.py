"""The fit workflows: the scan rotation from a cold start, and a session's standard and thick-sample
fits with their JSON-ready result.

:func:`fit_session` is the face's ``qora.ssb.fit`` (a function of the same name as this module:
import this module's other names with ``from qora.ssb.fit import ...``).
"""

from __future__ import annotations

import time

import numpy as np

from qora.io.errors import InputError
from qora.io.validate import in_range, integer, nonnegative, number, positive
from qora.progress import report
from qora.ssb.band import make_band
from qora.ssb.optimize import defocus_search, newton, tpe_search

__all__ = ["fit_rotation", "fit_session"]


ROTATION_NEWTON = 60  # Newton's iterations in the rotation fit, and in the thick fit
STANDARD_NEWTON = 20  # ... in the standard fit with the rotation given (newton's default)


def _rotation_grid(coarse_deg: float):
    return np.deg2rad(np.arange(-90.0, 90.0, coarse_deg))


def fit_rotation(session, parameters=("C10", "C12a", "C12b"), *, band=(0.2, 0.9), coarse_deg: float = 6.0,
                 progress=None, offset: int = 0, total: int | None = None):
    """Cold-start fit with the scan rotation unknown: ``(rotation, values, agreement)``.

    The agreement does not change when the scan turns by 180 degrees (G(-Q) = conj G(Q) and
    Gamma(-Q) = -conj Gamma(Q)), so the rotation is found in [-90, 90) degrees. A coarse grid
    of ``coarse_deg`` with the C10 search at each angle picks the basin; a finer C10 search at the
    best angle, then Newton on ``parameters`` and the rotation together, with exact first and
    second derivatives in all of them (the apertures with a soft edge, :class:`Band`), refines it.
    ``progress`` is told each angle searched and each Newton step, counted from ``offset`` of
    ``total`` (default: this fit's own, the angles + 1 + 60).
    """
    coarse_deg = in_range("coarse_deg", coarse_deg, 0.0, 90.0, unit="degrees", inclusive=False)

    def c10_only(theta):
        b = make_band(session, ("C10",), band=band, rotation=theta)
        c10, values = defocus_search(b, step=20.0, low=-400.0, high=400.0)
        return float(values.max()), c10

    grid = _rotation_grid(coarse_deg)
    searched = len(grid) + 1
    total = total or offset + searched + ROTATION_NEWTON
    scores = []
    for i, t in enumerate(grid):
        scores.append(c10_only(t))
        report(progress, "search (rotation)", offset + i + 1, total)
    best = int(np.argmax([a for a, _ in scores]))
    theta0, coarse_c10 = float(grid[best]), scores[best][1]
    b = make_band(session, ("C10",), band=band, rotation=theta0)
    c10, _ = defocus_search(b, step=10.0, low=coarse_c10 - 60.0, high=coarse_c10 + 60.0)
    report(progress, "search (rotation)", offset + searched, total)
    b = make_band(session, tuple(parameters) + ("rotation",), band=band, rotation=theta0)
    start = {p: 0.0 for p in parameters}
    start.update(C10=c10, rotation=theta0)
    values, agreement, _ = newton(b, start, iterations=ROTATION_NEWTON, callback=lambda state: report(
        progress, "newton (standard)", offset + searched + state.step, total))
    report(progress, "newton (standard)", offset + searched + ROTATION_NEWTON, total)
    theta = (values.pop("rotation") + np.pi / 2) % np.pi - np.pi / 2
    return float(theta), values, agreement


def _check_band(band):
    try:
        low, high = band
    except (TypeError, ValueError):
        raise InputError(f"band must be (low, high) in 1/A, got {band!r}") from None
    low, high = nonnegative("band low", low, unit="1/A"), positive("band high", high, unit="1/A")
    if not low < high:
        raise InputError(f"band must be (low, high) with low < high (1/A), got {band!r}")
    return (low, high)


def fit_session(session, *, rotation: float | None = None, tilt: bool = True, band=(0.2, 0.9), progress=None,
                trials: int = 200, batch: int = 8, seed: int = 0, compare_standard: bool = True):
    """The standard fit (C10, C12) and, with ``tilt``, the thick-sample fit beside it.

    ``rotation`` (rad) is given or, when None, fitted (:func:`fit_rotation`). With the rotation
    given the cold start is :func:`tpe_search` over C10 and C12 (``trials`` sets, ``batch`` per
    pass over G, ``seed``), then Newton. The thick fit starts from the standard one with 60 A of
    thickness and no tilt and fits C10, C12, thickness and tilt by Newton. Returns a dict
    (JSON-ready): per branch its parameters (A, rad), agreement, the Hessian of the agreement and
    the parameters' standard errors from it (:meth:`Band.uncertainties`); the rotation; which
    branch fits better; stage timings (s) and passes over G; the conventions.
    ``compare_standard=False`` leaves the standard branch (still the thick fit's start) out of the
    result when ``tilt`` is on. ``progress`` (:mod:`qora.progress`) counts the whole fit: the
    search's trials (or the rotation search's angles), then each Newton step, with the stage
    "search", "newton (standard)", "newton (thick)".
    """
    if rotation is not None:
        rotation = number("rotation", rotation, unit="rad")
    batch = integer("batch", batch, low=1)
    trials = integer("trials", trials, low=batch)
    seed = integer("seed", seed, low=0)
    band = _check_band(band)
    timings, passes = {}, {}
    t0 = time.perf_counter()
    names = ("C10", "C12a", "C12b")
    # one count for the whole fit: the search's trials (or the rotation search's angles), then
    # Newton's steps of each branch at most (a branch that converges early jumps to its end)
    searched = len(_rotation_grid(6.0)) + 1 if rotation is None else trials
    standard = searched + (ROTATION_NEWTON if rotation is None else STANDARD_NEWTON)
    total = standard + (ROTATION_NEWTON if tilt else 0)
    report(progress, "search", 0, total)
    if rotation is None:
        rotation, values, agreement = fit_rotation(session, names, band=band, progress=progress, total=total)
    else:
        b = make_band(session, names, band=band, rotation=rotation)
        start, _, _, _ = tpe_search(b, trials=trials, batch=batch, seed=seed,
                                    callback=lambda done: report(progress, "search", done, total))
        timings["search_s"] = time.perf_counter() - t0
        values, agreement, hessian = newton(b, start, iterations=STANDARD_NEWTON, callback=lambda state: report(
            progress, "newton (standard)", searched + state.step, total))
        report(progress, "newton (standard)", standard, total)
        passes["standard"] = getattr(b, "passes", None)  # a band split over workers does not count
    timings["standard_s"] = time.perf_counter() - t0
    fitted_rotation = "search_s" not in timings
    std_names = names + (("rotation",) if fitted_rotation else ())
    std_band = make_band(session, std_names, band=band, rotation=rotation) if fitted_rotation else b
    if fitted_rotation:
        # the Hessian in the rotation too, from the soft-edged band the rotation was fitted on; the
        # agreement reported is the top-hat one, comparable with the thick branch's
        soft_agreement, _, hessian = std_band.evaluate({**values, "rotation": rotation})
        uncertainty = std_band.uncertainties(soft_agreement, hessian)
        agreement = make_band(session, names, band=band, rotation=rotation).evaluate(values, order=0)
    else:
        uncertainty = std_band.uncertainties(agreement, hessian)
    out = {"rotation_rad": float(rotation),
           "standard": {"parameters": {k: float(v) for k, v in values.items()}, "agreement": float(agreement),
                        "hessian": np.asarray(hessian).tolist(), "parameter_order": list(std_names),
                        "uncertainty": uncertainty},
           "conventions": "Krivanek chi, defocus = -C10, cartesian C_nm,a = C cos(m phi), C_nm,b = C sin(m phi); "
                          "C10 at the mid-plane; tilt (y, x) in rad; docs/ssb.md",
           "band_inv_a": list(band)}
    if tilt:
        report(progress, "newton (thick)", standard, total)
        t1 = time.perf_counter()
        tnames = names + ("thickness", "tilt_y", "tilt_x")
        b = make_band(session, tnames, band=band, rotation=rotation)
        tvalues, tagreement, thessian = newton(b, {**values, "thickness": 60.0, "tilt_y": 0.0, "tilt_x": 0.0},
                                               iterations=ROTATION_NEWTON, callback=lambda state: report(
                                                   progress, "newton (thick)", standard + state.step, total))
        timings["thick_s"] = time.perf_counter() - t1
        passes["thick"] = getattr(b, "passes", None)
        out["thick"] = {"parameters": {k: float(v) for k, v in tvalues.items()}, "agreement": float(tagreement),
                        "hessian": np.asarray(thessian).tolist(), "parameter_order": list(tnames),
                        "uncertainty": b.uncertainties(tagreement, thessian)}
        # the simpler model unless the thick one explains measurably more (0.1% of the signal)
        out["better"] = "thick" if tagreement > agreement + 1e-3 else "standard"
        if not compare_standard:
            out.pop("standard")
    report(progress, "done", total, total)
    timings["total_s"] = time.perf_counter() - t0
    out["timings_s"] = timings
    out["passes"] = {k: dict(v) for k, v in passes.items() if v is not None}  # over G, per branch's band
    return out
