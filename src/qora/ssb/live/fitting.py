"""The aberration fit while the scan runs: a cold start on the first partial scan
(:func:`qora.ssb.fit_session`), then Newton warm-started from the last result on each larger
partial scan and on the whole one (the optimum moves little as rows are added, so a few Newton
steps replace the search). The result has :func:`qora.ssb.fit_session`'s JSON shape.
"""

from __future__ import annotations

import time

import numpy as np

from qora.ssb.band import make_band
from qora.ssb.fit_types import FitResult
from qora.ssb.fitting import BETTER_MARGIN, ROTATION_NEWTON, STANDARD_NEWTON, better_rule, fit_session
from qora.ssb.optimize import newton

__all__ = ["cold_fit", "warm_fit"]

NAMES = ("C10", "C12a", "C12b")


def cold_fit(session, *, rotation: float | None, tilt: bool, band, trials: int) -> dict:
    """:func:`qora.ssb.fit_session` (the rotation fitted when ``rotation`` is None)."""
    return fit_session(session, rotation=rotation, tilt=tilt, band=band, trials=trials, batch=8)


def warm_fit(session, previous, *, fit_rotation: bool, tilt: bool, band) -> FitResult:
    """Newton from ``previous`` (a fit result) on ``session``: C10, C12 (and the scan rotation with
    ``fit_rotation``), then with ``tilt`` the thick-sample branch from it, as :func:`fit_session`
    does after its search."""
    t0 = time.perf_counter()
    rotation = float(previous["rotation_rad"])
    start = {k: previous["standard"]["parameters"][k] for k in NAMES}
    names = NAMES + (("rotation",) if fit_rotation else ())
    b = make_band(session, names, band=band, rotation=rotation)
    values, agreement, hessian = newton(b, {**start, "rotation": rotation} if fit_rotation else start,
                                        iterations=ROTATION_NEWTON if fit_rotation else STANDARD_NEWTON)
    values = dict(values)
    uncertainty = b.uncertainties(agreement, hessian)
    if fit_rotation:  # the agreement reported is the top-hat one, as fit_session's
        rotation = float(values.pop("rotation"))
        agreement = make_band(session, NAMES, band=band, rotation=rotation).evaluate(values, order=0)
    out = {"rotation_rad": rotation,
           "standard": {"parameters": {k: float(v) for k, v in values.items()}, "agreement": float(agreement),
                        "hessian": np.asarray(hessian).tolist(), "parameter_order": list(names),
                        "uncertainty": uncertainty},
           "band_inv_a": list(band), "warm_start": True}
    if tilt:
        thick_names = NAMES + ("thickness", "tilt_y", "tilt_x")
        tb = make_band(session, thick_names, band=band, rotation=rotation)
        previous_thick = previous.get("thick", {}).get("parameters")
        begin = previous_thick or {**values, "thickness": 60.0, "tilt_y": 0.0, "tilt_x": 0.0}
        tv, ta, th = newton(tb, begin, iterations=ROTATION_NEWTON)
        out["thick"] = {"parameters": {k: float(v) for k, v in tv.items()}, "agreement": float(ta),
                        "hessian": np.asarray(th).tolist(), "parameter_order": list(thick_names),
                        "uncertainty": tb.uncertainties(ta, th)}
        out["better"] = "thick" if ta > agreement + BETTER_MARGIN else "standard"
        out["better_rule"] = better_rule("thick", float(ta), float(agreement))
    out["timings_s"] = {"total_s": time.perf_counter() - t0}
    return FitResult.from_dict(out)

