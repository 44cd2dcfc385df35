"""The aberration sliders of the browser viewer and the notebook widget: what each slider is (its
label, unit, range and step), the sliders' start from recorded aberrations, and slider values turned
into the parameters of :meth:`qora.ssb.Session.preview`. One definition for both front ends."""

from __future__ import annotations

import math

from qora.io import validate
from qora.io.errors import InputError
from qora.ssb.optics import Aberrations

__all__ = ["SSB_SLIDERS", "slider_parameters", "slider_start", "session_widget"]

# name -> (label, unit, low, high, step). Magnitudes with their angles for the non-round aberrations
# (the angle phi of C_nm cos(m (phi_k - phi))), rotation and tilt in the units a microscopist reads.
SSB_SLIDERS = {
    "C10": ("C10 (defocus = -C10)", "A", -1000.0, 1000.0, 1.0),
    "C12": ("C12 (2-fold astigmatism)", "A", 0.0, 500.0, 0.5),
    "C12_angle": ("C12 angle", "deg", -90.0, 90.0, 0.5),
    "C21": ("C21 (coma)", "A", 0.0, 20000.0, 10.0),
    "C21_angle": ("C21 angle", "deg", -180.0, 180.0, 1.0),
    "C23": ("C23 (3-fold astigmatism)", "A", 0.0, 20000.0, 10.0),
    "C23_angle": ("C23 angle", "deg", -60.0, 60.0, 0.5),
    "C30": ("C30 (spherical)", "A", -2e6, 2e6, 1000.0),
    "rotation": ("scan rotation", "deg", -180.0, 180.0, 0.1),
    "thickness": ("thickness", "A", 0.0, 1000.0, 1.0),
    "tilt_y": ("tilt y", "mrad", -30.0, 30.0, 0.1),
    "tilt_x": ("tilt x", "mrad", -30.0, 30.0, 0.1),
}


def _in_range(value, name: str, low: float, high: float) -> float:
    return validate.in_range(name, value, low, high, unit=SSB_SLIDERS[name][1])


def slider_parameters(values: dict, *, number=_in_range) -> dict:
    """Slider values (the sliders' units, each checked against its range; absent ones are 0) -> the
    parameters of :meth:`~qora.ssb.Session.preview` (cartesian aberrations in A, rotation and tilt in
    rad, thickness in A). A value out of range or not a number is an InputError naming the slider;
    ``number(value, name, low, high)`` is the check (the viewer's answers a page in its own words)."""
    if not isinstance(values, dict):
        raise InputError("the slider values must be a mapping of slider names to numbers")
    unknown = sorted(set(values) - set(SSB_SLIDERS))
    if unknown:
        raise InputError(f"unknown parameters {unknown}; known: {sorted(SSB_SLIDERS)}")
    v = {name: number(values.get(name, 0.0), name, spec[2], spec[3]) for name, spec in SSB_SLIDERS.items()}
    ab = Aberrations(C10=v["C10"], C12=(v["C12"], math.radians(v["C12_angle"])),
                     C21=(v["C21"], math.radians(v["C21_angle"])), C23=(v["C23"], math.radians(v["C23_angle"])),
                     C30=v["C30"])
    out = {}
    for name, value in ab.cartesian().items():
        if isinstance(value, tuple):
            out[name + "a"], out[name + "b"] = value
        else:
            out[name] = value
    out["rotation"] = math.radians(v["rotation"])
    if v["thickness"] > 0 or v["tilt_y"] or v["tilt_x"]:
        out.update(thickness=v["thickness"], tilt_y=v["tilt_y"] * 1e-3, tilt_x=v["tilt_x"] * 1e-3)
    return out


def slider_start(aberrations) -> dict:
    """The sliders' start (their units) from recorded :class:`Aberrations` (None: all 0): magnitudes,
    angles in degrees folded into the slider's range (C_nm repeats every 360/m degrees), each clipped
    to its slider."""
    start = {name: 0.0 for name in SSB_SLIDERS}
    for name, (mag, angle) in (getattr(aberrations, "values", None) or {}).items():
        if name not in start:
            continue
        start[name] = mag
        if name + "_angle" in start:
            low, high = SSB_SLIDERS[name + "_angle"][2:4]
            start[name + "_angle"] = (math.degrees(angle) - low) % (high - low) + low
    return {name: float(min(max(v, SSB_SLIDERS[name][2]), SSB_SLIDERS[name][3])) for name, v in start.items()}


def session_widget(session, aberrations=None, *, upsample: int = 1):
    """The notebook widget of a :class:`~qora.ssb.Session`: the sliders above, starting at
    ``aberrations``, and the preview image (``upsample`` 1: SSB, tilt-corrected with a thickness or
    tilt; 3: parallax on the finer grid) redrawn for each change, as the browser viewer does."""
    from qora.plot import png
    from qora.widgets import slider_image

    upsample = validate.integer("upsample", upsample, low=1, high=3)

    def render(values):
        image = session.preview(slider_parameters(values), upsample=upsample)
        data, lo, hi = png(image)
        return data, f"phase {lo:.3g} to {hi:.3g} rad"

    sliders = {k: {"label": s[0], "unit": s[1], "min": s[2], "max": s[3], "step": s[4]} for k, s in SSB_SLIDERS.items()}
    return slider_image(sliders, slider_start(aberrations), render)
