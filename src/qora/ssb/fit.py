"""The fit workflows: the scan rotation from a cold start, and a session's standard and thick-sample
fits with their JSON-ready result.

:func:`fit_session` is the face's ``qora.ssb.fit`` (a function of the same name as this module:
import this module's other names with ``from qora.ssb.fit import ...``).
"""

from __future__ import annotations

import time

import numpy as np

from qora.progress import report
from qora.ssb.band import make_band
from qora.ssb.optimize import defocus_search, newton, tpe_search

__all__ = ["fit_rotation", "fit_session"]


def fit_rotation(session, parameters=("C10", "C12a", "C12b"), *, band=(0.2, 0.9), coarse_deg: float = 6.0):
    """Cold-start fit with the scan rotation unknown: ``(rotation, values, agreement)``.

    The agreement does not change when the scan turns by 180 degrees (G(-Q) = conj G(Q) and
    Gamma(-Q) = -conj Gamma(Q)), so the rotation is found in [-90, 90) degrees. A coarse grid
    of ``coarse_deg`` with the C10 search at each angle picks the basin; a finer C10 search at the
    best angle, then Newton on ``parameters`` and the rotation together, with exact first and
    second derivatives in all of them (the apertures with a soft edge, :class:`Band`), refines it.
    """
    def c10_only(theta):
        b = make_band(session, ("C10",), band=band, rotation=theta)
        c10, values = defocus_search(b, step=20.0, low=-400.0, high=400.0)
        return float(values.max()), c10

    grid = np.deg2rad(np.arange(-90.0, 90.0, coarse_deg))
    scores = [c10_only(t) for t in grid]
    best = int(np.argmax([a for a, _ in scores]))
    theta0, coarse_c10 = float(grid[best]), scores[best][1]
    b = make_band(session, ("C10",), band=band, rotation=theta0)
    c10, _ = defocus_search(b, step=10.0, low=coarse_c10 - 60.0, high=coarse_c10 + 60.0)
    b = make_band(session, tuple(parameters) + ("rotation",), band=band, rotation=theta0)
    start = {p: 0.0 for p in parameters}
    start.update(C10=c10, rotation=theta0)
    values, agreement, _ = newton(b, start, iterations=60)
    theta = (values.pop("rotation") + np.pi / 2) % np.pi - np.pi / 2
    return float(theta), values, agreement


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
    result when ``tilt`` is on.
    """
    timings, passes = {}, {}
    t0 = time.perf_counter()
    names = ("C10", "C12a", "C12b")
    report(progress, "standard", 0, 2)
    if rotation is None:
        rotation, values, agreement = fit_rotation(session, names, band=band)
    else:
        b = make_band(session, names, band=band, rotation=rotation)
        start, _, _, _ = tpe_search(b, trials=trials, batch=batch, seed=seed)
        timings["search_s"] = time.perf_counter() - t0
        values, agreement, hessian = newton(b, start)
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
        report(progress, "thick", 1, 2)
        t1 = time.perf_counter()
        tnames = names + ("thickness", "tilt_y", "tilt_x")
        b = make_band(session, tnames, band=band, rotation=rotation)
        tvalues, tagreement, thessian = newton(b, {**values, "thickness": 60.0, "tilt_y": 0.0, "tilt_x": 0.0},
                                               iterations=60)
        timings["thick_s"] = time.perf_counter() - t1
        passes["thick"] = getattr(b, "passes", None)
        out["thick"] = {"parameters": {k: float(v) for k, v in tvalues.items()}, "agreement": float(tagreement),
                        "hessian": np.asarray(thessian).tolist(), "parameter_order": list(tnames),
                        "uncertainty": b.uncertainties(tagreement, thessian)}
        # the simpler model unless the thick one explains measurably more (0.1% of the signal)
        out["better"] = "thick" if tagreement > agreement + 1e-3 else "standard"
        if not compare_standard:
            out.pop("standard")
    report(progress, "done", 2, 2)
    timings["total_s"] = time.perf_counter() - t0
    out["timings_s"] = timings
    out["passes"] = {k: dict(v) for k, v in passes.items() if v is not None}  # over G, per branch's band
    return out
