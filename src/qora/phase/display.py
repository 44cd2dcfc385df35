"""What a phase result looks like on a screen: its amplitude, phase (inside the support) and support
as 8-bit PNG planes with their colour maps and ranges. The browser viewer and the notebook widget
(:meth:`qora.phase.PhaseResult.widget`) both draw them from here."""

from __future__ import annotations

import numpy as np

from qora.io import validate
from qora.io.errors import InputError

__all__ = ["PLANES", "result_plane", "result_png", "result_widget"]

PLANES = ("amplitude", "phase", "support")
_CMAPS = {"amplitude": "gray", "phase": "twilight", "support": "gray"}


def result_plane(result, what: str, plane: int | None = None) -> np.ndarray:
    """The 2D image ``what`` ("amplitude", "phase" (rad, 0 outside the support), "support") of the
    best start; for a 3D object the slice ``plane`` along the first axis (default the central one)."""
    if what not in PLANES:
        raise InputError(f"image must be one of {list(PLANES)}, got {what!r}")
    obj, sup = np.asarray(result.object), np.asarray(result.support)
    if obj.ndim == 3:
        plane = obj.shape[0] // 2 if plane is None else validate.integer("plane", plane, low=0,
                                                                           high=obj.shape[0] - 1)
        obj, sup = obj[plane], sup[plane]
    if what == "amplitude":
        return np.abs(obj)
    if what == "phase":
        return np.where(sup, np.angle(obj), 0.0)
    return sup.astype(float)


def result_png(result, what: str, plane: int | None = None) -> tuple[bytes, float, float]:
    """PNG bytes of :func:`result_plane` and the (lo, hi) it was scaled to (the phase on [-pi, pi])."""
    from qora.plot import png

    lo, hi = (-np.pi, np.pi) if what == "phase" else (None, None)
    return png(result_plane(result, what, plane), lo=lo, hi=hi, cmap=_CMAPS.get(what, "gray"))


def result_widget(result):
    """A notebook widget of a result: a choice of image and, for a 3D object, the plane."""
    from qora.widgets import slider_image

    sliders = {"image": {"label": "image", "options": list(PLANES)}}
    start = {"image": "amplitude"}
    depth = np.asarray(result.object).shape[0] if np.ndim(result.object) == 3 else 0
    if depth:
        sliders["plane"] = {"label": "plane", "unit": "pixel", "min": 0, "max": depth - 1, "step": 1}
        start["plane"] = depth // 2

    def render(values):
        plane = int(values["plane"]) if depth else None
        data, lo, hi = result_png(result, values.get("image", "amplitude"), plane)
        return data, f"{values.get('image')} {lo:.3g} to {hi:.3g}" + (f", plane {plane}" if depth else "")

    return slider_image(sliders, start, render)
