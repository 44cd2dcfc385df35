"""The field parts of ``qora holo``: filter and refocus options, and field series (complex fields, phase and
amplitude images, rectangular holograms' fields) reconstructed in the rotation geometry."""

from __future__ import annotations

import math

import click
import numpy as np
from click.core import ParameterSource

from qora.cli.options import Finite

__all__ = ["FILTER_CHOICES", "refocus_options", "stack_options"]


def _given(ctx, name: str) -> bool:
    return ctx.get_parameter_source(name) not in (ParameterSource.DEFAULT, ParameterSource.DEFAULT_MAP, None)


def _same(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-12)


FILTER_CHOICES = ("disk", "smooth-disk", "gauss", "square", "smooth-square", "tukey")


def _interval(text: str):
    try:
        lo, hi = (float(v) for v in str(text).split(":"))
    except ValueError:
        raise click.BadParameter(f"{text!r} is not START:STOP (um, e.g. -10:10)", param_hint="--focus-range") from None
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise click.BadParameter(f"{text!r}: need finite START < STOP (um)", param_hint="--focus-range")
    return lo, hi


def refocus_options(f):
    """--refocus / --autofocus / --focus-range, shared by the commands that take fields."""
    f = click.option("--focus-metric", type=click.Choice(["amplitude-variance", "compactness"]),
                     default="amplitude-variance", show_default=True,
                     help="Autofocus metric: amplitude variance for phase objects (cells), compactness for "
                     "absorbing or weak scatterers (docs/holo.md, \"Refocus\").")(f)
    f = click.option("--focus-range", default="-10:10", show_default=True,
                     help="Autofocus search interval START:STOP, um along the light.")(f)
    f = click.option("--autofocus", is_flag=True, help="Refocus by autofocus (one common distance for a "
                     "series). Needs --wavelength and --medium-index.")(f)
    return click.option("--refocus", "distance", type=Finite(), default=None,
                        help="Propagate the fields by this distance, um along the light (angular spectrum).")(f)


def _reconstruct_fields(ctx, holos, backgrounds, *, input_kind, amplitude, wavelength, pixel, medium_index, na_detection,
                        angle_range, angles_file, angle_unit, cluster, **rest) -> None:
    """--input fields / phase-amplitude: a field series (any image shape) in the rotation geometry; the optics
    from the file where it records them (an option that contradicts the file is refused)."""
    from qora import holo as H
    from qora.io.errors import InputError

    if backgrounds is not None:
        raise click.UsageError(f"--input {input_kind} takes no BACKGROUNDS (the fields are ratios to the "
                               "background already)")
    if cluster:
        raise click.UsageError("the cluster options are for hologram time series")
    if _given(ctx, "geometry_kind") and ctx.params.get("geometry_kind") != "rotation":
        raise click.BadParameter("a field series is a rotation series", param_hint="--geometry")
    if amplitude is not None and input_kind != "phase-amplitude":
        raise click.BadParameter("--amplitude goes with --input phase-amplitude", param_hint="--amplitude")
    if input_kind == "phase-amplitude":
        series = H.read_phase_amplitude(holos, amplitude)
    else:
        try:
            series = H.read_field_series(holos, wavelength=wavelength, phase_ok=False)
        except InputError as exc:
            raise click.UsageError(f"{exc} (--input phase-amplitude)") from None
    optics = {}
    for option, name, given in (("--wavelength", "wavelength", wavelength), ("--pixel", "pixel", pixel),
                                ("--medium-index", "medium_index", medium_index)):
        recorded = getattr(series, name)
        if given is not None and recorded is not None and not _same(given, recorded):
            raise click.BadParameter(f"{holos} records {name.replace('_', ' ')} {recorded:g}; {option} {given:g} "
                                     "conflicts", param_hint=option)
        optics[name] = given if given is not None else recorded
    missing = [o for o, k in (("--wavelength", "wavelength"), ("--pixel", "pixel"), ("--medium-index", "medium_index"))
               if optics[k] is None] + (["--na"] if na_detection is None else [])
    if missing:
        raise click.UsageError(f"{holos} does not record it: give {', '.join(missing)}")
    if angles_file is not None:
        angles = H.read_angles(angles_file, unit=angle_unit)
    elif angle_range is not None:
        angles = H.parse_angles(angle_range)
    elif series.angles is not None:
        angles = series.angles
    else:
        raise click.UsageError("give the rotation angles: --angles START:STOP:COUNT or --angles-file")
    if len(angles) != len(series.fields):
        raise click.UsageError(f"{len(angles)} angles for {len(series.fields)} fields")
    if series.detector_distance and rest["distance"] is None and not rest["autofocus"]:
        rest["distance"] = -series.detector_distance  # where the file says the fields were recorded
        click.echo(f"{holos}: fields recorded {series.detector_distance:g} um from the rotation axis; refocusing "
                   "them onto it (give --refocus or --autofocus to choose otherwise)")
    _reconstruct_series(series.fields, angles, na_detection=na_detection, truth=series.phantom, **optics, **rest)


def stack_options(H, method, *, approximation, iterations, tv_weight, oversample, gridding, index_min, index_max,
                  complex_index, batch, bpm_variant, backend):
    """The reconstruction's options from the command's: a ReconstructionOptions, or for --method bpm a BpmOptions
    (its GPU slice step only where the run is on the GPU)."""
    if method != "bpm":
        return H.ReconstructionOptions(method=method, approximation=approximation, iterations=iterations,
                                       tv_weight="auto" if tv_weight is None else tv_weight, oversample=oversample,
                                       gridding=gridding,
                                       index_min=index_min, index_max=index_max, complex_index=complex_index)
    if tv_weight == "auto":
        raise click.BadParameter("bpm takes a numeric --tv-weight ('auto' is for --method tv)", param_hint="--tv-weight")
    variant = {}
    if bpm_variant is not None:
        from qora.backend import resolve

        if not resolve(backend).is_cuda:
            raise click.BadParameter("--bpm-variant chooses the GPU's slice step; this run is on the CPU",
                                     param_hint="--bpm-variant")
        variant["variant"] = bpm_variant
    return H.BpmOptions(iterations=iterations, tv_weight=tv_weight, batch=batch, **variant)


def written_line(out, result, method: str, tv_weight) -> str:
    """The line that says what a reconstruction wrote: shape, index range, and the TV weight (chosen from the data
    where none was given)."""
    msg = f"wrote {out}: {result.index.shape}, index {result.index.min():.4f} to {result.index.max():.4f}"
    if method == "tv" and result.info.get("tv_weight") is not None:
        msg += f"; TV weight {result.info['tv_weight']:.3g}" + (" (chosen from the data)" if tv_weight in (None, "auto")
                                                                  else "")
    return msg


def _reconstruct_series(fields, angles, *, wavelength, medium_index, pixel, na_detection, axis, fit_axis,
                        rotation_sense, method, approximation, iterations, tv_weight, oversample, gridding, index_min,
                        index_max, complex_index, batch,
                        bpm_variant, distance, autofocus, focus_range, focus_metric, backend, out, suffix, plot, quiet,
                        truth) -> None:
    """A rotation series of field ratios (any shape) to one volume about ``axis`` (z, y, x) in ``rotation_sense``:
    the Fourier methods with the options of the hologram path, or the BPM: one call of
    :func:`qora.holo.field_series_volume`."""
    from qora import holo as H
    from qora.io.errors import InputError
    from qora.progress import tqdm_progress

    if suffix == ".zarr":
        raise click.UsageError("a field series gives one volume: write .h5 or .tif")
    options = stack_options(H, method, approximation=approximation, iterations=iterations, tv_weight=tv_weight,
                            oversample=oversample, gridding=gridding, index_min=index_min, index_max=index_max,
                            complex_index=complex_index, batch=batch, bpm_variant=bpm_variant, backend=backend)
    try:
        with tqdm_progress(disable=quiet) as bar:
            result, g, moved = H.field_series_volume(
                fields, angles, wavelength=wavelength, medium_index=medium_index, pixel=pixel,
                na_detection=na_detection, options=options, fit_axis=fit_axis, distance=distance, autofocus=autofocus,
                interval=_interval(focus_range), metric=focus_metric.replace("-", " "), axis=axis,
                rotation_sense=rotation_sense, backend=backend, progress=bar)
    except InputError as exc:
        raise click.UsageError(str(exc)) from None
    if "axis_fit" in result.info:
        click.echo(result.info["axis_fit"])
    if suffix in (".tif", ".tiff"):
        H.write_volume_tiff(out, result.index, g)
    else:
        result.save(out)
    msg = written_line(out, result, method, tv_weight)
    if distance is not None or autofocus:
        msg += f"; fields refocused by {moved:.3f} um"
    if truth is not None and truth.shape == result.index.shape:
        msg += f"; RMSE against the file's phantom {np.sqrt(np.mean((result.index - truth) ** 2)):.2e}"
    click.echo(msg)
    if plot is not None:
        H.plot_volume(plot, result.index, g, title=f"{method.upper()}, {result.approximation}, {g.count} angles")
        click.echo(f"wrote {plot}")
