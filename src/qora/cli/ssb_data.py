"""How ``qora ssb image`` and ``qora ssb fit`` read their data: the file's layout (scan shape, axis
order, transpose, flips: :class:`qora.ssb.readers.Layout`, applied at load time), the microscope
settings and the calibration (scan steps, detector scale, descan), each from the options where given,
else from the file's metadata, else fitted; the values used are printed (docs/ssb.md, "Detector
files")."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import click
import numpy as np

from qora.cli.options import POSITIVE, SCAN_STEP_A

__all__ = ["data_options", "DataOptions", "load_for_session", "read_fit"]


def _scan_shape(ctx, param, value):
    if value is None:
        return None
    text = value.lower().replace(",", "x").replace(" ", "")
    try:
        rows, cols = (int(v) for v in text.split("x"))
    except ValueError:
        raise click.BadParameter(f"{value!r}: give ROWSxCOLS, e.g. 64x64") from None
    if rows < 1 or cols < 1:
        raise click.BadParameter(f"{value!r}: rows and columns must be at least 1")
    return rows, cols


@dataclass(frozen=True)
class DataOptions:
    """The data-layout and calibration options of one command."""

    scan_shape: tuple | None = None
    axis_order: str = "scan-scan-det-det"
    transpose_detector: bool = False
    flip_detector_rows: bool = False
    flip_detector_cols: bool = False
    flip_scan_rows: bool = False
    flip_scan_cols: bool = False
    scan_step_y: float | None = None
    scan_step_x: float | None = None
    detector_pixel_mrad: float | None = None
    disk_edge: str = "intensity"
    descan: str = "none"

    def layout(self):
        from qora.io.errors import InputError
        from qora.ssb import Layout

        try:
            return Layout(axis_order=self.axis_order, transpose_detector=self.transpose_detector,
                          flip_detector_rows=self.flip_detector_rows, flip_detector_cols=self.flip_detector_cols,
                          flip_scan_rows=self.flip_scan_rows, flip_scan_cols=self.flip_scan_cols)
        except InputError as exc:
            raise click.BadParameter(str(exc), param_hint="--axis-order") from None

    @property
    def changes_layout(self) -> bool:
        return self.scan_shape is not None or not self.layout().identity or self.descan != "none"


_OPTIONS = [
    click.option("--scan-shape", callback=_scan_shape, default=None, metavar="ROWSxCOLS",
                 help="Scan shape of a file of frames that does not record it (Merlin series, DECTRIS master)."),
    click.option("--axis-order", default="scan-scan-det-det", show_default=True,
                 help="The file's axes: scan-scan-det-det, det-det-scan-scan, x,y (abTEM's x-first "
                      "(scan_x, scan_y, k_x, k_y)), or four names, e.g. scan_x,scan_y,det_x,det_y."),
    click.option("--transpose-detector", is_flag=True, help="Swap the detector's rows and columns."),
    click.option("--flip-detector-rows", is_flag=True, help="Reverse the detector's rows."),
    click.option("--flip-detector-cols", is_flag=True, help="Reverse the detector's columns."),
    click.option("--flip-scan-rows", is_flag=True, help="Reverse the scan's rows."),
    click.option("--flip-scan-cols", is_flag=True, help="Reverse the scan's columns."),
    click.option("--scan-step-y", type=SCAN_STEP_A, default=None,
                 help="Scan step along the scan's rows (A); default --scan-step, else the file's."),
    click.option("--scan-step-x", type=SCAN_STEP_A, default=None,
                 help="Scan step along the scan's columns (A); default --scan-step, else the file's."),
    click.option("--detector-pixel-mrad", type=POSITIVE, default=None,
                 help="Scattering angle per detector pixel (mrad); default the file's calibration, else "
                      "the bright-field disk against --semiangle."),
    click.option("--disk-edge", type=click.Choice(["intensity", "amplitude"]), default="intensity",
                 show_default=True, help="How the fitted scale reads the disk's edge: intensity (a detector's "
                                         "blur), amplitude (a soft aperture, as abTEM's)."),
    click.option("--descan", type=click.Choice(["none", "plane", "parabola"]), default="none", show_default=True,
                 help="Fit the disk's drift over the scan and take it out before G."),
]


def data_options(command):
    """Add the layout and calibration options to a command; it receives them as ``source`` (a
    :class:`DataOptions`)."""
    keys = [f.name for f in DataOptions.__dataclass_fields__.values()]

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        return command(*args, source=DataOptions(**{k: kwargs.pop(k) for k in keys}), **kwargs)

    for option in reversed(_OPTIONS):
        wrapper = option(wrapper)
    return wrapper


def _recorded_steps(meta):
    step = meta.get("scan_step_a")
    if step is None:
        return None, None
    values = np.ravel(np.asarray(step, dtype=float))
    return (float(values[0]), float(values[-1]))


def _warn(option, given, unit, recorded, name):
    if recorded is not None and not np.isclose(float(recorded), given, rtol=1e-9, atol=0):
        click.echo(f"warning: {option} {given:g} {unit} replaces the {recorded:g} {unit} that {name} records", err=True)


def load_for_session(path: Path, *, kv, semiangle, scan_step, source: DataOptions):
    """``(data, meta, kv, semiangle, scan_step, detector)`` for a Session: the data read with the
    layout (and the descan taken out), the settings from the options where given (a warning where
    the file records another value), else from the file; the detector's scale from
    ``--detector-pixel-mrad``, else the file's calibration, else the disk fitted against the
    semi-angle. Prints what it used."""
    from qora.io.errors import InputError
    from qora.io.validate import positive
    from qora.ssb import load_data, wavelength
    from qora.ssb import fit_detector

    stack, meta = load_data(path, scan_shape=source.scan_shape, layout=source.layout())
    name = path.name
    settings = {}
    for option, key, given, unit in (("--kv", "kv", kv, "kV"), ("--semiangle", "alpha_mrad", semiangle, "mrad")):
        recorded = meta.get(key)
        if given is not None:
            _warn(option, given, unit, recorded, name)
            settings[option] = given
        elif recorded is not None:
            settings[option] = positive(f"{key} recorded in {path}", recorded, unit=unit)
        else:
            settings[option] = None
    recorded_y, recorded_x = _recorded_steps(meta)
    step_y = source.scan_step_y or scan_step
    step_x = source.scan_step_x or scan_step
    for option, given, recorded in (("--scan-step-y" if source.scan_step_y else "--scan-step", step_y, recorded_y),
                                    ("--scan-step-x" if source.scan_step_x else "--scan-step", step_x, recorded_x)):
        if given is not None:
            _warn(option, given, "A", recorded, name)
    step_y = step_y if step_y is not None else recorded_y
    step_x = step_x if step_x is not None else recorded_x
    if step_y is not None:
        step_y = positive(f"scan_step_a recorded in {path}", step_y, unit="A")
    if step_x is not None:
        step_x = positive(f"scan_step_a recorded in {path}", step_x, unit="A")
    missing = [n for n, v in settings.items() if v is None]
    if step_y is None or step_x is None:
        missing.append("--scan-step")
    if missing:
        raise click.UsageError(f"the file has no {', '.join(m[2:] for m in missing)}: give {', '.join(missing)}")
    kv, semiangle = settings["--kv"], settings["--semiangle"]
    steps = step_y if step_y == step_x else (step_y, step_x)

    if source.descan != "none":
        from qora.ssb import correct_descan, fit_descan

        try:
            descan = fit_descan(stack, model=source.descan)
        except InputError as exc:
            raise InputError(f"{path}: {exc}") from exc
        stack = correct_descan(stack, descan)  # into memory where it fits, else lazy
        click.echo(f"descan ({source.descan}): up to {descan.span:.3f} px over the scan, taken out before G "
                   f"(centres {descan.residual:.3f} px rms about the fit)")

    # the detector's scale: the option, else the file's calibration, else the fitted disk
    mrad, origin = source.detector_pixel_mrad, "--detector-pixel-mrad"
    if mrad is None and meta.get("detector_pixel_mrad"):
        mrad, origin = float(meta["detector_pixel_mrad"]), f"{name}'s calibration"
    elif mrad is None and meta.get("detector_pixel_inv_a"):
        mrad = float(meta["detector_pixel_inv_a"]) * wavelength(kv) * 1e3
        origin = f"{name}'s calibration ({float(meta['detector_pixel_inv_a']):.5g} 1/A per pixel)"
    try:
        detector = fit_detector(stack, semiangle, edge=source.disk_edge, mrad_per_pixel=mrad, rows=64)
    except InputError as exc:
        raise InputError(f"{path}: {exc}") from exc
    fitted = semiangle / detector.radius
    if mrad is None:
        origin = f"fitted: the disk's radius {detector.radius:.2f} px ({source.disk_edge} edge) against {semiangle:g} mrad"
    elif abs(mrad / fitted - 1) > 0.05:
        click.echo(f"warning: {mrad:.4g} mrad per pixel ({origin}) makes the bright-field disk {semiangle / mrad:.2f} "
                   f"px across its radius, the data's is {detector.radius:.2f} px: check the calibration and "
                   "--semiangle", err=True)
    layout = source.layout()
    sy, sx, dy, dx = stack.shape
    step_text = f"{steps:g} A" if not isinstance(steps, tuple) else f"({steps[0]:g}, {steps[1]:g}) A (y, x)"
    click.echo(f"data: scan {sy} x {sx}, detector {dy} x {dx}"
               + ("" if layout.identity else f" ({layout.describe()})")
               + f"; {kv:g} kV, {semiangle:g} mrad, scan step {step_text}; detector {detector.mrad_per_pixel:.4g} "
                 f"mrad per pixel ({origin}), disk centre ({detector.center[0]:.2f}, {detector.center[1]:.2f}) px")
    if path.suffix.lower() in UNLABELLED_AXES and source.axis_order == DataOptions.axis_order:
        click.echo(AXIS_ORDER_NOTE.format(name=name), err=True)
    return stack, meta, kv, semiangle, steps, detector


# Files that do not record which axis is which. Their axes are read as Qora's (scan_y, scan_x, k_y, k_x); the
# data cannot check it: an array in the order (scan_x, scan_y, k_x, k_y) (abTEM's) is the data's mirror image,
# which the fit explains as well (tests/ssb/test_ssb_abtem.py: agreement 0.98939 against 0.98892, C12's angle
# 90 deg - phi, the image transposed), so the command says what it assumed.
UNLABELLED_AXES = (".npy",)
AXIS_ORDER_NOTE = ("note: {name} does not record its axes: read as (scan_y, scan_x, k_y, k_x). An array in the order "
                   "(scan_x, scan_y, k_x, k_y), abTEM's, fits as well as its mirror image (C12's angle 90 deg - phi, "
                   "the image transposed): the data cannot tell the two apart. Give --axis-order x,y for such a file "
                   "(--axis-order scan_y,scan_x,det_y,det_x states this one).")


def read_fit(ctx, path):
    """A fit JSON for `image --fit`, refusing options that would contradict it (they come from the fit)."""
    clash = [f"--{name.replace('_', '-')}" for name in ("rotation", "c10", "c12", "c12_angle", "c30", "orientation")
             if ctx.get_parameter_source(name) not in (None, click.core.ParameterSource.DEFAULT)]
    if clash:
        raise click.UsageError(f"{', '.join(clash).replace('--orientation', '--detector-orientation')} "
                               f"{'comes' if len(clash) == 1 else 'come'} from --fit: give one or the other")
    from qora.io.errors import InputError
    from qora.ssb import FitResult

    try:
        fit = FitResult.load(path)
    except (OSError, InputError) as exc:
        raise click.UsageError(f"--fit {path}: not a readable fit JSON ({exc})") from None
    if "orientation" not in fit:
        raise click.UsageError(f"--fit {path}: not a result of `qora ssb fit` (no rotation_rad or orientation)")
    return fit
