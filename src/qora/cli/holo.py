"""``qora holo``: simulate holograms, reconstruct index volumes, and quantitative phase images.

Every value is checked before any work: a non-finite or out-of-range number is refused by its option's
type, an output that is an input (or an existing folder) is refused before anything is read, and a
Qora hologram file's recorded geometry is never silently replaced (docs/holo.md, "Errors and safety").
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import click
import numpy as np
from click.core import ParameterSource

from qora.cli.holo_fields import (FILTER_CHOICES, _interval, _reconstruct_fields, _reconstruct_series,
                                 refocus_options, stack_options)
from qora.cli.holo_output import before_work, recorded_options, report, series_on_cluster, write_result
from qora.cli.options import NONNEGATIVE, POSITIVE, Finite, backend_option, scale_out_options

VOLUME_SUFFIXES = (".h5", ".hdf5", ".tif", ".tiff", ".zarr")


class TvWeight(click.ParamType):
    """A non-negative TV weight, or "auto"."""

    name = "weight|auto"

    def convert(self, value, param, ctx):
        if isinstance(value, str) and value.strip().lower() == "auto":
            return "auto"
        return NONNEGATIVE.convert(value, param, ctx)


QUIET_HELP = "No progress bar (the result lines are still printed)."


@click.group("holo")
def holo() -> None:
    """Optical diffraction tomography from off-axis holograms (units: um)."""


def _parse_spheres(text: str):
    from qora.holo import Sphere
    from qora.io.errors import InputError

    spheres = []
    for item in text.split(";"):
        if not item.strip():
            continue
        hint = f"sphere {item.strip()!r}: expected z,y,x,radius,index (um, um, um, um, index)"
        try:
            parts = [float(v) for v in item.split(",")]
        except ValueError:
            raise click.BadParameter(f"{hint}; every value a number", param_hint="--spheres") from None
        if len(parts) != 5:
            raise click.BadParameter(hint, param_hint="--spheres")
        z, y, x, r, n = parts
        try:
            spheres.append(Sphere((z, y, x), r, n))
        except InputError as exc:
            raise click.BadParameter(f"{hint}: {exc}", param_hint="--spheres") from None
    if not spheres:
        raise click.BadParameter("no sphere given", param_hint="--spheres")
    return spheres


def _suffix(path: Path, allowed, option: str) -> str:
    suffix = path.suffix.lower()
    if suffix not in allowed:
        raise click.BadParameter(f"{path}: give a file ending in {', '.join(allowed)}", param_hint=option)
    return suffix


def _apart(outputs, inputs, *, folder_ok=False) -> None:
    from qora.io.validate import outputs_apart

    given = [p for p in outputs if p is not None]
    if len({Path(p).resolve() for p in given}) != len(given):
        raise click.BadParameter(f"two outputs are the same file ({', '.join(map(str, given))})", param_hint="--plot")
    outputs_apart(outputs, inputs, folder_ok=folder_ok)


@holo.command("simulate")
@click.option("--size", "n", type=click.IntRange(16, 1024), default=128, show_default=True,
              help="Volume and field size n (holograms are 2n x 2n); memory grows as n^3 (checked before any work).")
@click.option("--spheres", default=None,
              help='"z,y,x,radius,index;..." in um; default: the reference bead (3 um, n = 1.36).')
@click.option("--angles", type=click.IntRange(1, 1000), default=48, show_default=True,
              help="Illuminations on the cone (plus normal incidence).")
@click.option("--na-illumination", type=Finite(min=0, max=1.2), default=0.8, show_default=True,
              help="NA of the illumination cone, at most the detection NA 1.2 of the reference setup.")
@click.option("--noise", type=NONNEGATIVE, default=0.0, show_default=True,
              help="Gaussian noise, fraction of the mean hologram intensity (the reference uses 0.02).")
@click.option("--geometry", "geometry_kind", type=click.Choice(["scan", "rotation"]), default="scan",
              show_default=True, help="Illumination scanning on a cone, or sample rotation about y over 360 degrees.")
@click.option("--model", type=click.Choice(["born", "exact", "bpm"]), default="born", show_default=True,
              help="First-order fields (Rytov-consistent), the exact partial-wave solution (one sphere), or the "
              "beam propagation model with obliquity (multiple forward scattering; either geometry).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True, help="Output .h5 file.")
def simulate_cmd(n, spheres, angles, na_illumination, noise, geometry_kind, model, seed, out) -> None:
    """Holograms and backgrounds of spheres (analytic first-order fields) in the reference geometry."""
    from qora import holo as H
    from qora.holo import check_simulation_memory

    _suffix(out, (".h5", ".hdf5"), "--out")
    _apart([out], [])
    R = H.reference
    spheres = _parse_spheres(spheres) if spheres else [H.Sphere(radius=R.SPHERE_DIAMETER / 2, index=R.SPHERE_INDEX)]
    g = H.simulation_geometry(n, kind=geometry_kind, angles=angles, na_illumination=na_illumination)
    check_simulation_memory(g, model, truth=True, hint="use a smaller --size")
    if model == "exact" and len(spheres) != 1:
        raise click.BadParameter("the exact partial-wave model is for one sphere", param_hint="--model")
    if model == "bpm":
        holos, bgs, hp = H.simulate_bpm_holograms(spheres, g, noise=noise, seed=seed)
    else:
        holos, bgs, hp = H.simulate_holograms(spheres, g, model=model, noise=noise, seed=seed)
    truth = H.render_spheres(spheres, n, g.pixel, g.medium_index, supersample=3)
    H.write_holograms(out, holos, bgs, g, hologram_pixel=hp, truth=truth)
    click.echo(f"wrote {out}: {g.count} holograms of {2 * n}^2 ({geometry_kind}, {model}), {len(spheres)} sphere(s), "
               f"noise {noise}")


def _given(ctx, name: str) -> bool:
    return ctx.get_parameter_source(name) not in (ParameterSource.DEFAULT, ParameterSource.DEFAULT_MAP, None)


def _same(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-12)


def _file_geometry(ctx, path, g, hp, *, wavelength, pixel, hologram_pixel, medium_index, na_detection,
                   geometry_kind, angle_range):
    """The file's geometry with the options given: --wavelength, --pixel and --hologram-pixel (what the data
    were recorded with) must agree with it; --medium-index and --na (the model's choices) override it with a
    warning; --geometry and --angles must agree."""
    from qora import holo as H
    from qora.io.errors import InputError

    for option, given, recorded, what in (("--wavelength", wavelength, g.wavelength, "wavelength {} um"),
                                          ("--pixel", pixel, g.pixel, "pixel {} um"),
                                          ("--hologram-pixel", hologram_pixel, hp, "hologram pixel {} um")):
        if given is not None and not _same(given, recorded):
            raise click.BadParameter(f"the file {path} records {what.format(f'{recorded:g}')}; {option} {given:g} "
                                     "conflicts (the recorded illuminations and sampling belong to it); leave it out",
                                     param_hint=option)
    if _given(ctx, "geometry_kind") and geometry_kind != g.geometry:
        raise click.BadParameter(f"the file {path} records the {g.geometry} geometry; --geometry {geometry_kind} "
                                 "conflicts", param_hint="--geometry")
    if angle_range is not None:
        angles = H.parse_angles(angle_range) if isinstance(angle_range, str) else angle_range
        if g.angles is None or len(angles) != len(g.angles) or not np.allclose(angles, g.angles, atol=1e-9):
            given = f"--angles {angle_range}" if isinstance(angle_range, str) else "the angles of --angles-file"
            raise click.BadParameter(f"the file {path} records its {'angles' if g.angles is not None else 'illuminations'}"
                                     f"; {given} conflicts", param_hint="--angles")
    changes = {}
    for option, name, given, recorded in (("--medium-index", "medium_index", medium_index, g.medium_index),
                                          ("--na", "na_detection", na_detection, g.na_detection)):
        if given is not None and not _same(given, recorded):
            click.echo(f"Warning: {option} {given:g} overrides the file's {name.replace('_', ' ')} {recorded:g}",
                       err=True)
            changes[name] = given
    if not changes:
        return g
    try:
        return replace(g, **changes)
    except InputError as exc:
        raise click.BadParameter(str(exc), param_hint="--medium-index/--na") from None


@holo.command("reconstruct")
@click.argument("holos", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.argument("backgrounds", type=click.Path(exists=True, dir_okay=False, path_type=Path), required=False)
@click.option("--wavelength", type=POSITIVE, help="Vacuum wavelength, um (stacks without metadata; a Qora "
              "hologram file's own must not be contradicted).")
@click.option("--pixel", type=POSITIVE, help="Object-space pixel of the fields and volume, um (as --wavelength).")
@click.option("--hologram-pixel", type=POSITIVE,
              help="Object-space pixel of the holograms, um (default pixel / 2; as --wavelength).")
@click.option("--medium-index", type=POSITIVE, help="Refractive index of the medium (overrides a Qora hologram "
              "file's, with a warning).")
@click.option("--na", "na_detection", type=POSITIVE, help="Detection NA, at most the medium index (overrides a "
              "Qora hologram file's, with a warning).")
@click.option("--geometry", "geometry_kind", type=click.Choice(["scan", "rotation"]), default="scan",
              show_default=True, help="Illumination scanning (illuminations measured from the backgrounds) or "
              "sample rotation about y (give --angles).")
@click.option("--angles", "angle_range", default=None,
              help="Rotation angles in degrees as START:STOP:COUNT (STOP excluded), e.g. 0:360:180, or a "
              "comma-separated list (non-uniform), e.g. 0,2.5,7.")
@click.option("--axis-tilt", type=Finite(), default=0.0, show_default=True,
              help="Rotation geometry: the axis tilted out of the detector plane toward the optical axis, degrees.")
@click.option("--axis-angle", type=Finite(), default=0.0, show_default=True,
              help="Rotation geometry: the axis turned in the detector plane from y toward x, degrees.")
@click.option("--fit-axis", is_flag=True, help="Rotation geometry: fit the axis's tilt and in-plane angle to the "
              "data (the agreement of the angles' mapped spectra; docs/holo.md) and use them where the data "
              "determine them (printed either way); not with --axis-tilt/--axis-angle.")
@click.option("--rotation-sense", type=click.Choice(["qora", "odtbrain"]), default="qora", show_default=True,
              help="Rotation geometry: qora (+x turns toward +z for positive angles) or odtbrain (the opposite; "
              "docs/holo.md).")
@click.option("--method", type=click.Choice(["plain", "gp", "tv", "bpm"]), default="gp", show_default=True,
              help="Fourier diffraction (plain, gp, tv), or the inversion of the beam propagation model from a "
              "Rytov + 20 GP start (either geometry, a tilted axis too; --iterations are its gradient steps).")
@click.option("--approximation", type=click.Choice(["rytov", "born"]), default="rytov", show_default=True,
              help="First-order field of the Fourier methods (not bpm).")
@click.option("--iterations", type=click.IntRange(1, 100000), default=50, show_default=True,
              help="GP or FISTA iterations, or BPM steps (plain has none).")
@click.option("--tv-weight", type=TvWeight(), default=None,
              help="TV weight on n^2 - n_m^2, or 'auto' (tv: chosen from the data by the discrepancy principle, "
              "docs/holo.md) [default: auto for tv; none (x >= 0 only) for bpm]; tv and bpm only.")
@click.option("--index-min", type=float, default=None,
              help="gp, tv: lower bound of the index [default: the medium index, i.e. non-negativity]; below it "
              "admits objects below the medium; -inf for none.")
@click.option("--index-max", type=float, default=None,
              help="gp, tv: upper bound of the index (e.g. the medium index for objects below it) [default: none].")
@click.option("--complex-index", is_flag=True,
              help="Reconstruct absorption too (n + i kappa; written beside the index as 'absorption').")
@click.option("--batch", type=click.IntRange(1, 100000), default=None,
              help="bpm: illuminations (or angles) per gradient step, cycled without momentum (default: all, with FISTA).")
@click.option("--bpm-variant", type=click.Choice(["auto", "cufft", "fused_fft", "fused_resident"]), default=None,
              help="bpm on the GPU: the slice step as cuFFT transforms and element-wise kernels, as fused "
              "cuFFTDx line passes (n of 128, 256 or 512 on an H100/H200), or the whole slice loop with the "
              "field on chip (fused_resident: n of 128 or 256; docs/holo-performance.md) "
              "[default: auto, the variant measured fastest].")
@click.option("--oversample", type=click.FloatRange(1.0, 4.0), default=2.0, show_default=True,
              help="Map onto a grid this many times finer in k (costs oversample^3; docs/holo.md); not bpm.")
@click.option("--gridding", type=click.Choice(["auto", "nearest", "exact"]), default="auto", show_default=True,
              help="How the Ewald caps' samples meet the volume's bins: each at its nearest bin, or each at its own "
              "frequency (density-compensated; keeps low-contrast structure such as a nucleus); auto: exact for tv, "
              "nearest for plain and gp (docs/holo.md, 'Exact gridding'); not bpm.")
@click.option("--input", "input_kind", type=click.Choice(["holograms", "fields", "phase-amplitude"]),
              default="holograms", show_default=True,
              help="HOLOS holds holograms (with BACKGROUNDS), complex field ratios (a qpimage HDF5 series, an "
              "ODTbrain example archive, a complex .npy/.npz) or phase images in rad (TIFF, a folder of TIFFs, "
              ".npy; with --amplitude); fields go through the rotation geometry.")
@click.option("--amplitude", type=click.Path(exists=True, path_type=Path), default=None,
              help="--input phase-amplitude: the amplitude images (ratio to the background) [default: 1].")
@click.option("--angles-file", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="Rotation angles from a text file (one number per angle; non-uniform angles welcome).")
@click.option("--angle-unit", type=click.Choice(["rad", "deg"]), default="rad", show_default=True,
              help="Unit of the numbers in --angles-file.")
@refocus_options
@backend_option(help="Where the Pipeline runs (auto: the GPU where there is one).")
@click.option("--out", type=click.Path(path_type=Path), required=True,
              help="Volume .h5 (or .tif for one volume), or a .zarr series store (a cluster writes each volume "
              "as it finishes; without one the volumes are written there at the end).")
@click.option("--plot", type=click.Path(dir_okay=False, path_type=Path), default=None, help="PNG of slices.")
@click.option("--quiet", is_flag=True, help=QUIET_HELP)
@scale_out_options
def reconstruct_cmd(holos, backgrounds, wavelength, pixel, hologram_pixel, medium_index, na_detection,
                    geometry_kind, angle_range, axis_tilt, axis_angle, fit_axis, rotation_sense, method, approximation,
                    iterations, tv_weight, index_min, index_max, complex_index, batch, bpm_variant, oversample,
                    gridding,
                    input_kind, amplitude, angles_file, angle_unit, distance, autofocus, focus_range, focus_metric,
                    backend, out, plot, quiet, scheduler, workers, gpus) -> None:
    """Refractive-index volume from a hologram stack (and its backgrounds).

    A time series (T, A, N, N) of stacks with one set of backgrounds (A, N, N) streams through
    one Pipeline (plans and backgrounds made once) and gives volumes (T, n, n, n). With
    --workers, --gpus or --scheduler the series is spread over a Dask cluster, one Pipeline per
    worker, each volume written to the Zarr store --out as it finishes; running the command
    again on the same store does only the time points still missing (docs/scale-out.md).
    """
    from qora import holo as H

    ctx = click.get_current_context()
    cluster = bool(scheduler or workers or gpus)
    suffix = _checked_reconstruct_options(ctx, holos, backgrounds, out, plot, cluster=cluster)
    # what every rotation path reads: the pose of the axis and the solver's options
    solver = dict(axis=H.rotation_axis(math.radians(axis_tilt), math.radians(axis_angle)), fit_axis=fit_axis,
                  rotation_sense=1 if rotation_sense == "qora" else -1, method=method, approximation=approximation,
                  iterations=iterations, tv_weight=tv_weight, oversample=oversample, gridding=gridding,
                  index_min=index_min,
                  index_max=index_max, complex_index=complex_index, batch=batch)
    if input_kind != "holograms":
        _reconstruct_fields(ctx, holos, backgrounds, input_kind=input_kind, amplitude=amplitude, wavelength=wavelength,
                            pixel=pixel, medium_index=medium_index, na_detection=na_detection,
                            angle_range=angle_range, angles_file=angles_file, angle_unit=angle_unit, cluster=cluster,
                            **solver, bpm_variant=bpm_variant, distance=distance, autofocus=autofocus,
                            focus_range=focus_range, focus_metric=focus_metric, backend=backend, out=out, suffix=suffix,
                            plot=plot, quiet=quiet)
        return
    if distance is not None or autofocus:
        raise click.BadParameter("holograms are refocused as fields: use qora holo phase, or --input fields",
                                 param_hint="--refocus/--autofocus")
    if amplitude is not None:
        raise click.BadParameter("--amplitude goes with --input phase-amplitude", param_hint="--amplitude")
    if angles_file is not None:
        from qora.holo import read_angles

        angle_range = read_angles(angles_file, unit=angle_unit)
    truth = None
    if holos.suffix.lower() in (".h5", ".hdf5") and backgrounds is None:
        stack, bgs, g, hp, truth = H.read_holograms(holos)
        g = _file_geometry(ctx, holos, g, hp, wavelength=wavelength, pixel=pixel, hologram_pixel=hologram_pixel,
                           medium_index=medium_index, na_detection=na_detection, geometry_kind=geometry_kind,
                           angle_range=angle_range)
    else:
        def rectangular(fields, angles):  # rotation holograms that are not square: fields on their grid, a series
            _reconstruct_series(fields, angles, wavelength=wavelength, medium_index=medium_index, pixel=pixel,
                                na_detection=na_detection, **solver, bpm_variant=bpm_variant, distance=None,
                                autofocus=False,
                                focus_range=focus_range, focus_metric=focus_metric, backend=backend, out=out,
                                suffix=suffix, plot=plot, quiet=quiet, truth=None)

        read = _plain_stacks(H, holos, backgrounds, wavelength=wavelength, pixel=pixel, hologram_pixel=hologram_pixel,
                             medium_index=medium_index, na_detection=na_detection, geometry_kind=geometry_kind,
                             angle_range=angle_range, angles_file=angles_file, rectangular=rectangular)
        if read is None:
            return
        stack, bgs, g, hp = read
    g = _posed(ctx, g, solver, from_file=backgrounds is None, fit_axis=fit_axis)
    options = stack_options(H, method, approximation=approximation, iterations=iterations, tv_weight=tv_weight,
                            oversample=oversample, gridding=gridding, index_min=index_min, index_max=index_max,
                            complex_index=complex_index, batch=batch, bpm_variant=bpm_variant, backend=backend)
    sideband = H.find_sideband(bgs[0], hp)  # recorded before the work, and given to the reconstruction
    fourier = None if method == "bpm" else options
    recorded = recorded_options(sideband, hp, bgs.shape[-1], fourier, iterations=iterations, tv_weight=tv_weight,
                                batch=batch)
    before_work(out, suffix, g, stack, recorded, pose_known=not fit_axis)
    if cluster:
        if method == "bpm" or stack.ndim != 4 or suffix != ".zarr":
            raise click.UsageError("on a Dask cluster, give a time series (T, A, N, N) and a .zarr store as --out")
        series_on_cluster(stack, bgs, g, out, (scheduler, workers, gpus), quiet=quiet, sideband=sideband,
                           hologram_pixel=hp, options=options, fit_axis=fit_axis, backend=backend)
        return
    if method == "bpm" and stack.ndim != 3:
        raise click.UsageError("--method bpm takes one stack (A, N, N), not a series")
    from qora.progress import tqdm_progress

    with tqdm_progress(disable=quiet) as bar:
        result = H.reconstruct_stack(stack, bgs, g, hologram_pixel=hp, options=options, fit_axis=fit_axis,
                                     sideband=sideband, backend=backend, progress=bar)
    if fit_axis:
        click.echo(result.info["axis_fit"])
    g = result.geometry
    write_result(H, out, suffix, result, g, recorded=recorded)
    report(H, out, result, g, method=method, tv_weight=tv_weight, truth=truth, plot=plot)


def _checked_reconstruct_options(ctx, holos, backgrounds, out, plot, *, cluster: bool) -> str:
    """``reconstruct_cmd``'s options that contradict each other or the outputs, refused before any work (one
    BadParameter naming the option); returns the output's suffix."""
    p = ctx.params
    _apart([out, plot], [holos, backgrounds], folder_ok=out.suffix.lower() == ".zarr")
    suffix = _suffix(out, VOLUME_SUFFIXES, "--out")
    if p["complex_index"] and suffix not in (".h5", ".hdf5"):
        raise click.BadParameter("--complex-index writes the absorption beside the index: give a .h5 --out",
                                 param_hint="--complex-index")
    _check_method_options(ctx, p["method"], cluster)
    if (p["angle_range"] is not None and p["geometry_kind"] != "rotation" and backgrounds is not None
            and p["input_kind"] == "holograms"):
        raise click.BadParameter("--angles gives the rotation geometry's angles: add --geometry rotation",
                                 param_hint="--angles")
    if p["angles_file"] is not None and p["angle_range"] is not None:
        raise click.BadParameter("give the angles as --angles or --angles-file, not both", param_hint="--angles-file")
    if p["fit_axis"] and (_given(ctx, "axis_tilt") or _given(ctx, "axis_angle")):
        raise click.BadParameter("--fit-axis finds the axis: give it or --axis-tilt/--axis-angle, not both",
                                 param_hint="--fit-axis")
    return suffix


def _plain_stacks(H, holos, backgrounds, *, wavelength, pixel, hologram_pixel, medium_index, na_detection,
                  geometry_kind, angle_range, angles_file, rectangular):
    """Hologram and background stacks without metadata: ``(stack, backgrounds, geometry, hologram pixel)`` from the
    options, or None after ``rectangular(fields, angles)`` reconstructed non-square rotation holograms itself."""
    if backgrounds is None:
        raise click.UsageError("BACKGROUNDS is required unless HOLOS is a qora hologram file")
    named = (("--wavelength", wavelength), ("--pixel", pixel), ("--medium-index", medium_index), ("--na", na_detection))
    if missing := [k for k, v in named if v is None]:
        raise click.UsageError(f"stacks without metadata need {', '.join(missing)}")
    if na_detection > medium_index:
        raise click.BadParameter(f"the detection NA {na_detection:g} exceeds --medium-index {medium_index:g} "
                                 "(unphysical)", param_hint="--na")
    rotation, stack = geometry_kind == "rotation" or angles_file is not None, H.load_stack(holos)
    bgs = H.backgrounds_for(stack, H.load_stack(backgrounds), rotation=rotation)  # one may serve every angle
    if bgs.ndim != 3 or stack.shape[-3:] != bgs.shape or stack.ndim not in (3, 4):
        raise click.UsageError(f"holograms {stack.shape} must be (A, N, N), or a series (T, A, N, N), of "
                               f"the backgrounds' shape {bgs.shape}")
    hp = pixel / 2 if hologram_pixel is None else hologram_pixel
    optics = dict(wavelength=wavelength, medium_index=medium_index, pixel=pixel, na_detection=na_detection)
    if rotation:
        if angle_range is None:
            raise click.UsageError("the rotation geometry needs --angles START:STOP:COUNT or --angles-file")
        angles = H.parse_angles(angle_range) if isinstance(angle_range, str) else angle_range
        if len(angles) != stack.shape[-3]:
            raise click.UsageError(f"{len(angles)} angles for {stack.shape[-3]} holograms")
        if stack.shape[-1] != stack.shape[-2]:  # rectangular holograms: fields on their grid, padded square
            rectangular(H.ratio_from_rectangular(stack, bgs, hologram_pixel=hp, pixel=pixel,
                                                 pupil_frequency=na_detection / wavelength), angles)
            return None
        g = H.rotation_geometry(angles, stack.shape[-3], n=H.field_size(stack.shape[-1], hp, pixel), **optics)
    else:
        if stack.shape[-1] != stack.shape[-2]:
            raise click.UsageError(f"holograms {stack.shape[-2:]} are not square: the scanning geometry measures "
                                   "its illuminations from square backgrounds (crop them square), while the "
                                   "rotation geometry (--geometry rotation) takes any shape")
        g, _ = H.geometry_from_backgrounds(bgs, hologram_pixel=hp, **optics)
    return stack, bgs, g, hp


def _posed(ctx, g, solver, *, from_file: bool, fit_axis: bool):
    """``g`` with the rotation axis and sense the options give (over a hologram file's own, with a warning when
    they differ); the pose options and --fit-axis are refused for the scanning geometry."""
    pose_given = any(_given(ctx, k) for k in ("axis_tilt", "axis_angle", "rotation_sense"))
    if g.angles is not None and (pose_given or not from_file):
        pose = dict(axis=solver["axis"], rotation_sense=solver["rotation_sense"])
        differs = not np.allclose(g.axis, pose["axis"], atol=1e-9) or g.rotation_sense != pose["rotation_sense"]
        if from_file and differs:
            # files written before the pose was recorded read as the y axis, sense +1: the options may correct them
            click.echo(f"Warning: --axis-tilt/--axis-angle/--rotation-sense override the file's rotation axis "
                       f"{tuple(round(v, 6) for v in g.axis)} (z, y, x), sense {g.rotation_sense:+d}", err=True)
        return replace(g, **pose)
    if g.angles is None and (pose_given or fit_axis):
        raise click.BadParameter("--axis-tilt, --axis-angle, --fit-axis and --rotation-sense are for --geometry "
                                 "rotation", param_hint="--fit-axis" if fit_axis else "--axis-tilt")
    return g


def _check_method_options(ctx, method: str, cluster: bool) -> None:
    """Refuse an option the chosen method would not read (never silently ignored)."""
    unread = {"bpm": ("approximation", "oversample", "gridding", "index_min", "index_max", "complex_index"),
              "plain": ("iterations", "tv_weight", "batch", "bpm_variant", "index_min", "index_max"),
              "gp": ("tv_weight", "batch", "bpm_variant"), "tv": ("batch", "bpm_variant")}[method]
    for name in unread:
        if _given(ctx, name):
            option = "--" + name.replace("_", "-")
            raise click.BadParameter(f"--method {method} does not use {option}", param_hint=option)
    if cluster and method == "bpm":
        raise click.UsageError("--method bpm takes one stack here; the cluster options are for a time series of "
                               "the Fourier methods")


@holo.command("phase")
@click.argument("hologram", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.argument("background", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--pixel", type=POSITIVE, default=1.0, show_default=True, help="Hologram pixel (um, or 1 for pixels).")
@click.option("--na", "na_detection", type=POSITIVE, default=None,
              help="Detection NA: the filter radius NA / wavelength (needs --wavelength).")
@click.option("--wavelength", type=POSITIVE, default=None, help="Vacuum wavelength, um.")
@click.option("--medium-index", type=POSITIVE, default=None, help="Medium index (for --refocus / --autofocus).")
@click.option("--filter", "filter_name", type=click.Choice(FILTER_CHOICES), default="disk", show_default=True,
              help="Sideband filter shape (docs/holo.md, \"Sideband filters\").")
@click.option("--filter-radius", type=POSITIVE, default=None,
              help="Filter radius in cycles per unit of --pixel (cycles/um with --pixel in um).")
@click.option("--filter-fraction", type=Finite(min=0, max=1, min_open=True, max_open=True), default=None,
              help="Filter radius as a fraction of the sideband's distance from zero frequency [default 1/3].")
@click.option("--full-sampling/--half-sampling", default=True, show_default=True,
              help="The image at the hologram's sampling, or at half of it (fields at twice the pixel).")
@refocus_options
@click.option("--background", "background_profile", type=click.Choice(["offset", "tilt", "poly2", "none"]),
              default="tilt", show_default=True,
              help="Fit this phase background where there is no object and remove it (qpimage's pipeline: tilt).")
@click.option("--background-border", type=click.IntRange(1, 100000), default=None,
              help="Fit on a frame this many hologram pixels wide [default: 5, qpimage's].")
@click.option("--background-threshold", type=POSITIVE, default=None,
              help="Fit outside the object: where |phase - median| stays below this, rad.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True, help="Output .h5.")
@click.option("--plot", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="PNG of the phase and amplitude images.")
def phase_cmd(hologram, background, pixel, na_detection, wavelength, medium_index, filter_name, filter_radius,
              filter_fraction, full_sampling, distance, autofocus, focus_range, focus_metric, background_profile,
              background_border, background_threshold, out, plot) -> None:
    """Quantitative phase of one hologram (any shape): field, unwrapped phase and amplitude.

    The sideband is found automatically; the filter's shape and radius, a refocus and a phase
    background correction are options (docs/holo.md, "Quantitative phase").
    """
    from qora import holo as H
    from qora.io.atomic import hdf5_output
    from qora.io.errors import InputError

    _apart([out, plot], [hologram, background])
    _suffix(out, (".h5", ".hdf5"), "--out")
    if na_detection is not None and wavelength is None:
        raise click.BadParameter("the pupil is NA / wavelength: --na needs --wavelength", param_hint="--na")
    radii = [k for k, v in (("--na", na_detection), ("--filter-radius", filter_radius),
                            ("--filter-fraction", filter_fraction)) if v is not None]
    if len(radii) > 1:
        raise click.BadParameter(f"give one filter radius, not {' and '.join(radii)}", param_hint=radii[1])
    if (distance is not None or autofocus) and (wavelength is None or medium_index is None):
        raise click.UsageError("--refocus and --autofocus need --wavelength and --medium-index")
    background_profile = None if background_profile == "none" else background_profile
    if (background_border is not None or background_threshold is not None) and background_profile is None:
        raise click.BadParameter("--background none fits nothing: give a profile", param_hint="--background")
    h, b = H.load_stack(hologram), H.load_stack(background)
    for name, image in (("HOLOGRAM", h), ("BACKGROUND", b)):
        if image.ndim not in (2, 3) or (image.ndim == 3 and image.shape[0] != 1):
            raise click.UsageError(f"{name} must be one hologram (M, N), got an array of shape {image.shape}")
    h, b = h.reshape(h.shape[-2:]), b.reshape(b.shape[-2:])
    pupil = na_detection / wavelength if na_detection is not None else filter_radius
    try:
        from qora.backend.fft import fast_length
        from qora.holo import border_on_field

        big = fast_length(max(h.shape))
        n = big if full_sampling else big // 2
        # the background is fitted after the refocus (phase_image), on the border in the field's pixels
        res = H.quantitative_phase(h, b, hologram_pixel=pixel, pupil_frequency=pupil, filter=filter_name,
                                   filter_fraction=filter_fraction, n=n, background_profile=None)
        border = None
        if background_profile is not None and background_threshold is None:
            border = border_on_field(background_border or H.BACKGROUND_BORDER, n, big)
        done = H.phase_image(res["ratio"], pixel=res["pixel"], distance=distance, autofocus=autofocus,
                             wavelength=wavelength, medium_index=medium_index, interval=_interval(focus_range),
                             metric=focus_metric.replace("-", " "), background=background_profile,
                             background_border=border, background_threshold=background_threshold)
    except InputError as exc:
        raise click.UsageError(str(exc)) from None
    res.update(done)
    with hdf5_output(out) as f:
        f.attrs["qora_kind"] = "holo_phase"
        f.attrs["units"] = "phase in rad; pixel in the unit of --pixel"
        f.attrs["pixel"] = res["pixel"]
        f.attrs["sideband"] = res["sideband"]
        f.attrs["filter"] = filter_name.replace("-", " ")
        f.attrs["filter_radius"] = res["filter_radius"]
        f.attrs["refocus_distance"] = res["distance"]
        f.attrs["background"] = background_profile or "none"
        f.attrs["offset"] = np.asarray(res["offset"])  # the hologram's first pixel in the padded square
        f.create_dataset("phase", data=res["phase"].astype(np.float32))
        f.create_dataset("amplitude", data=res["amplitude"].astype(np.float32))
        f.create_dataset("field_ratio", data=res["ratio"].astype(np.complex64))
    msg = (f"wrote {out}: phase {res['phase'].min():.3f} to {res['phase'].max():.3f} rad; "
           f"sideband at {res['sideband'][0]:.4f}, {res['sideband'][1]:.4f} cycles per unit; "
           f"{filter_name} filter of radius {res['filter_radius']:.4f}")
    if distance is not None or autofocus:
        msg += f"; refocused by {res['distance']:.3f} um"
    click.echo(msg)
    if plot is not None:
        H.plot_phase(plot, res["phase"], res["amplitude"], pixel=res["pixel"])
        click.echo(f"wrote {plot}")
