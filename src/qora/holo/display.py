"""What an index volume looks like on a screen: a plane through it along any axis as an 8-bit PNG
with a fixed colour scale. The browser viewer and the notebook widget (:func:`volume_widget`) both
draw it from here."""

from __future__ import annotations

import numpy as np

from qora.io import validate
from qora.io.errors import InputError

__all__ = ["AXES", "volume_plane", "plane_png", "volume_widget"]

AXES = ("z", "y", "x")  # the volume's axes, (plane, row, column)


def volume_plane(volume, axis: int, index: int) -> np.ndarray:
    """The plane ``index`` of a 3D ``volume`` across ``axis`` (0: z, 1: y, 2: x)."""
    volume = np.asarray(volume)
    if volume.ndim != 3:
        raise InputError(f"the volume must be 3D, got shape {volume.shape}")
    axis = validate.integer("axis", axis, low=0, high=2)
    index = validate.integer("index", index, low=0, high=volume.shape[axis] - 1)
    return np.take(volume, index, axis=axis)


def plane_png(plane, lo: float, hi: float) -> tuple[bytes, float, float]:
    """PNG bytes of an index plane on the fixed scale [lo, hi] (viridis) and that range."""
    from qora.plot import png

    if not lo < hi:
        raise InputError(f"lo must be below hi, got lo={lo:g}, hi={hi:g}")
    return png(plane, lo=lo, hi=hi, cmap="viridis")


def volume_widget(index, geometry=None):
    """A notebook widget of an index volume (n, n, n): the axis, the plane, and the colour scale's
    ends (refractive index), as the viewer shows it. ``geometry`` adds the plane's position in um."""
    from qora.widgets import slider_image

    volume = np.asarray(index, np.float32)
    if volume.ndim != 3:
        raise InputError(f"the volume must be 3D, got shape {volume.shape}")
    low, high = float(volume.min()), float(volume.max())
    span = max(high - low, 1e-6)
    n = max(volume.shape)
    sliders = {"axis": {"label": "slice across", "options": list(AXES)},
               "index": {"label": "plane", "unit": "voxel", "min": 0, "max": n - 1, "step": 1},
               "lo": {"label": "scale low", "unit": "index", "min": low - span, "max": high, "step": span / 200},
               "hi": {"label": "scale high", "unit": "index", "min": low, "max": high + span, "step": span / 200}}
    start = {"axis": "z", "index": volume.shape[0] // 2, "lo": low, "hi": high}
    pixel = getattr(geometry, "pixel", None)

    def render(values):
        axis = AXES.index(values.get("axis", "z")) if values.get("axis", "z") in AXES else -1
        if axis < 0:
            raise InputError(f"axis must be one of {list(AXES)}, got {values.get('axis')!r}")
        index = int(round(float(values["index"])))
        data, lo, hi = plane_png(volume_plane(volume, axis, index), float(values["lo"]), float(values["hi"]))
        where = f"{AXES[axis]} = {(index - volume.shape[axis] // 2) * pixel:+.2f} um" if pixel else f"plane {index}"
        return data, f"{where}; index {lo:.4f} to {hi:.4f}"

    return slider_image(sliders, start, render)
