"""``qora holo``: simulate holograms, reconstruct index volumes, and quantitative phase images."""

from __future__ import annotations

from pathlib import Path

import click
import numpy as np

from qora.cli.options import backend_option, exit_on_failures, scale_out_client, scale_out_options


@click.group("holo")
def holo() -> None:
    """Optical diffraction tomography from off-axis holograms (units: um)."""


def _parse_spheres(text: str):
    from qora.holo.phantoms import Sphere

    spheres = []
    for item in text.split(";"):
        if not item.strip():
            continue
        parts = [float(v) for v in item.split(",")]
        if len(parts) != 5:
            raise click.BadParameter(f"sphere {item!r}: expected z,y,x,radius,index (um, um, um, um, index)")
        z, y, x, r, n = parts
        if r <= 0:
            raise click.BadParameter(f"sphere {item!r}: the radius must be positive")
        spheres.append(Sphere((z, y, x), r, n))
    if not spheres:
        raise click.BadParameter("no sphere given")
    return spheres


@holo.command("simulate")
@click.option("--size", "n", type=click.IntRange(16, 1024), default=128, show_default=True,
              help="Volume and field size n (holograms are 2n x 2n).")
@click.option("--spheres", default=None,
              help='"z,y,x,radius,index;..." in um; default: the reference bead (3 um, n = 1.36).')
@click.option("--angles", type=click.IntRange(1, 1000), default=48, show_default=True,
              help="Illuminations on the cone (plus normal incidence).")
@click.option("--na-illumination", type=float, default=0.8, show_default=True)
@click.option("--noise", type=float, default=0.0, show_default=True,
              help="Gaussian noise, fraction of the mean hologram intensity (the reference uses 0.02).")
@click.option("--geometry", "geometry_kind", type=click.Choice(["scan", "rotation"]), default="scan",
              show_default=True, help="Illumination scanning on a cone, or sample rotation about y over 360 degrees.")
@click.option("--model", type=click.Choice(["born", "exact", "bpm"]), default="born", show_default=True,
              help="First-order fields (Rytov-consistent), the exact partial-wave solution (one sphere), or the "
              "beam propagation model with obliquity (multiple forward scattering; scanning geometry).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True, help="Output .h5 file.")
def simulate_cmd(n, spheres, angles, na_illumination, noise, geometry_kind, model, seed, out) -> None:
    """Holograms and backgrounds of spheres (analytic first-order fields) in the reference geometry."""
    from qora import holo as H

    R = H.reference
    spheres = _parse_spheres(spheres) if spheres else [H.Sphere(radius=R.SPHERE_DIAMETER / 2, index=R.SPHERE_INDEX)]
    g = H.simulation_geometry(n, kind=geometry_kind, angles=angles, na_illumination=na_illumination)
    try:
        if model == "bpm":
            holos, bgs, hp = H.simulate_bpm_holograms(spheres, g, noise=noise, seed=seed)
        else:
            holos, bgs, hp = H.simulate_holograms(spheres, g, model=model, noise=noise, seed=seed)
    except (ValueError, NotImplementedError) as exc:
        raise click.BadParameter(str(exc), param_hint="--model") from exc
    truth = H.render_spheres(spheres, n, g.pixel, g.medium_index, supersample=3)
    H.write_holograms(out, holos, bgs, g, hologram_pixel=hp, truth=truth)
    click.echo(f"wrote {out}: {g.count} holograms of {2 * n}^2 ({geometry_kind}, {model}), {len(spheres)} sphere(s), "
               f"noise {noise}")


@holo.command("reconstruct")
@click.argument("holos", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.argument("backgrounds", type=click.Path(exists=True, dir_okay=False, path_type=Path), required=False)
@click.option("--wavelength", type=float, help="Vacuum wavelength, um (stacks without metadata).")
@click.option("--pixel", type=float, help="Object-space pixel of the fields and volume, um.")
@click.option("--hologram-pixel", type=float, help="Object-space pixel of the holograms, um (default pixel / 2).")
@click.option("--medium-index", type=float, help="Refractive index of the medium.")
@click.option("--na", "na_detection", type=float, help="Detection NA.")
@click.option("--geometry", "geometry_kind", type=click.Choice(["scan", "rotation"]), default="scan",
              show_default=True, help="Illumination scanning (illuminations measured from the backgrounds) or "
              "sample rotation about y (give --angles).")
@click.option("--angles", "angle_range", default=None,
              help="Rotation angles in degrees as START:STOP:COUNT (STOP excluded), e.g. 0:360:180.")
@click.option("--method", type=click.Choice(["plain", "gp", "tv", "bpm"]), default="gp", show_default=True,
              help="Fourier diffraction (plain, gp, tv), or the inversion of the beam propagation model from a "
              "Rytov + 20 GP start (scanning geometry; --iterations are its gradient steps).")
@click.option("--approximation", type=click.Choice(["rytov", "born"]), default="rytov", show_default=True)
@click.option("--iterations", type=click.IntRange(1, 100000), default=50, show_default=True)
@click.option("--tv-weight", type=float, default=None,
              help="TV weight on n^2 - n_m^2 [default: 1e-3 for tv; none (x >= 0 only) for bpm].")
@click.option("--batch", type=click.IntRange(1, 100000), default=None,
              help="bpm: illuminations per gradient step, cycled without momentum (default: all, with FISTA).")
@click.option("--oversample", type=click.FloatRange(1.0, 4.0), default=1.0, show_default=True,
              help="Map onto a grid this many times finer in k (costs oversample^3; docs/holo.md).")
@backend_option(help="Where the Pipeline runs (auto: the GPU where there is one).")
@click.option("--out", type=click.Path(path_type=Path), required=True,
              help="Volume .h5 (or .tif); a series on a Dask cluster goes to a .zarr store.")
@click.option("--plot", type=click.Path(dir_okay=False, path_type=Path), default=None, help="PNG of slices.")
@click.option("--quiet", is_flag=True)
@scale_out_options
def reconstruct_cmd(holos, backgrounds, wavelength, pixel, hologram_pixel, medium_index, na_detection,
                    geometry_kind, angle_range, method, approximation, iterations, tv_weight, batch, oversample,
                    backend, out, plot, quiet, scheduler, workers, gpus) -> None:
    """Refractive-index volume from a hologram stack (and its backgrounds).

    A time series (T, A, N, N) of stacks with one set of backgrounds (A, N, N) streams through
    one Pipeline (plans and backgrounds made once) and gives volumes (T, n, n, n). With
    --workers, --gpus or --scheduler the series is spread over a Dask cluster, one Pipeline per
    worker, each volume written to the Zarr store --out as it finishes; running the command
    again on the same store does only the time points still missing (docs/scale-out.md).
    """
    from qora import holo as H
    from qora.progress import tqdm_progress

    truth = None
    try:
        if holos.suffix.lower() in (".h5", ".hdf5") and backgrounds is None:
            stack, bgs, g, hp, truth = H.read_holograms(holos)
        else:
            if backgrounds is None:
                raise click.UsageError("BACKGROUNDS is required unless HOLOS is a qora hologram file")
            missing = [k for k, v in (("--wavelength", wavelength), ("--pixel", pixel),
                                      ("--medium-index", medium_index), ("--na", na_detection)) if v is None]
            if missing:
                raise click.UsageError(f"stacks without metadata need {', '.join(missing)}")
            stack, bgs = H.load_stack(holos), H.load_stack(backgrounds)
            if stack.shape[-3:] != bgs.shape or stack.ndim not in (3, 4):
                raise click.UsageError(f"holograms {stack.shape} must be (A, N, N), or a series (T, A, N, N), of "
                                       f"the backgrounds' shape {bgs.shape}")
            hp = hologram_pixel or pixel / 2
            optics = dict(wavelength=wavelength, medium_index=medium_index, pixel=pixel, na_detection=na_detection)
            if geometry_kind == "rotation":
                if angle_range is None:
                    raise click.UsageError("the rotation geometry needs --angles START:STOP:COUNT")
                try:
                    angles = H.parse_angles(angle_range)
                except ValueError:
                    raise click.UsageError(f"--angles {angle_range!r} is not START:STOP:COUNT") from None
                if len(angles) != stack.shape[0]:
                    raise click.UsageError(f"{len(angles)} angles for {stack.shape[0]} holograms")
                g = H.rotation_geometry(angles, stack.shape[0], n=H.field_size(stack.shape[-1], hp, pixel), **optics)
            else:
                g, _ = H.geometry_from_backgrounds(bgs, hologram_pixel=hp, **optics)
        sideband = H.find_sideband(bgs[0], hp)
        if method == "bpm":
            if g.geometry == "rotation":
                raise click.UsageError("--method bpm needs the illumination-scanning geometry, not rotation")
            if stack.ndim != 3:
                raise click.UsageError("--method bpm takes one stack (A, N, N), not a series")
            approximation = "bpm"
            ratio = H.ratio_from_holograms(stack, bgs, g, hp)
            with tqdm_progress(disable=quiet) as bar:
                result = H.bpm_reconstruct(ratio, g, iterations=iterations, tv_weight=tv_weight, batch=batch,
                                           progress=bar, backend=backend)
        else:
            options = H.ReconstructionOptions(method=method, approximation=approximation, iterations=iterations,
                                              tv_weight=1e-3 if tv_weight is None else tv_weight,
                                              oversample=oversample)
            if scheduler or workers or gpus:
                if stack.ndim != 4 or out.suffix.lower() != ".zarr":
                    raise click.UsageError("on a Dask cluster, give a time series (T, A, N, N) and a .zarr store as "
                                           "--out")
                _series_on_cluster(stack, bgs, g, out, (scheduler, workers, gpus), quiet=quiet, sideband=sideband,
                                   hologram_pixel=hp, options=options, backend=backend)
                return
            with tqdm_progress(disable=quiet) as bar:
                result = H.reconstruct_holograms(stack, bgs, g, sideband=sideband, hologram_pixel=hp, options=options,
                                                 backend=backend, progress=bar)
    except (ValueError, FileNotFoundError, NotImplementedError) as exc:
        raise click.ClickException(str(exc)) from exc
    if out.suffix.lower() in (".tif", ".tiff"):
        if result.index.ndim != 3:
            raise click.UsageError("a series of volumes goes to .h5, not .tif")
        H.write_volume_tiff(out, result.index, g)
    else:
        H.write_volume(out, result.index, g, method=method, approximation=approximation, iterations=iterations)
    msg = f"wrote {out}: {result.index.shape}, index {result.index.min():.4f} to {result.index.max():.4f}"
    if truth is not None:
        msg += f"; RMSE against the simulated truth {np.sqrt(np.mean((result.index - truth) ** 2)):.2e}"
    click.echo(msg)
    if plot is not None:
        H.plot_volume(plot, result.index if result.index.ndim == 3 else result.index[-1], g, truth=truth, title=f"{method.upper()}, {approximation}, {g.count} angles")
        click.echo(f"wrote {plot}")


def _series_on_cluster(stack, backgrounds, geometry, out, cluster, *, quiet, **options) -> None:
    from qora.distributed.holo import SeriesStore, reconstruct_series
    from qora.progress import tqdm_progress

    with scale_out_client(*cluster) as client, tqdm_progress(disable=quiet) as bar:
        report = reconstruct_series(stack, backgrounds, geometry, store=out, client=client, progress=bar, **options)
    click.echo(report.summary().split("\n")[0])
    click.echo(f"{len(SeriesStore(out).index())} of {len(stack)} time points in {out}")
    exit_on_failures(report.failed, "time point ")


@holo.command("phase")
@click.argument("hologram", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.argument("background", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--pixel", type=float, default=1.0, show_default=True, help="Hologram pixel (um, or 1 for pixels).")
@click.option("--na", "na_detection", type=float, default=None, help="Detection NA (needs --wavelength).")
@click.option("--wavelength", type=float, default=None, help="Vacuum wavelength, um.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True, help="Output .h5.")
@click.option("--plot", type=click.Path(dir_okay=False, path_type=Path), default=None)
def phase_cmd(hologram, background, pixel, na_detection, wavelength, out, plot) -> None:
    """Quantitative phase of one hologram: field, unwrapped phase and amplitude (sideband found automatically)."""
    import h5py

    from qora import holo as H
    from qora.io.atomic import atomic_path

    try:
        h, b = H.load_stack(hologram), H.load_stack(background)
        if h.ndim == 3:
            h, b = h[0], b[0]
        pupil = na_detection / wavelength if (na_detection and wavelength) else None
        res = H.quantitative_phase(h, b, hologram_pixel=pixel, pupil_frequency=pupil)
    except (ValueError, FileNotFoundError) as exc:
        raise click.ClickException(str(exc)) from exc
    with atomic_path(out) as tmp, h5py.File(tmp, "w") as f:
        f.attrs["qora_kind"] = "holo_phase"
        f.attrs["units"] = "phase in rad; pixel in the unit of --pixel"
        f.attrs["pixel"] = res["pixel"]
        f.attrs["sideband"] = res["sideband"]
        f.create_dataset("phase", data=res["phase"].astype(np.float32))
        f.create_dataset("amplitude", data=res["amplitude"].astype(np.float32))
        f.create_dataset("field_ratio", data=res["ratio"].astype(np.complex64))
    click.echo(f"wrote {out}: phase {res['phase'].min():.3f} to {res['phase'].max():.3f} rad; "
               f"sideband at {res['sideband'][0]:.4f}, {res['sideband'][1]:.4f} cycles per unit")
    if plot is not None:
        H.plot_phase(plot, res["phase"], res["amplitude"], pixel=res["pixel"])
        click.echo(f"wrote {plot}")
