"""``qora ssb``: simulate 4D-STEM data and make SSB and parallax phase images (units: A, mrad, kV)."""

from __future__ import annotations

from pathlib import Path

import click
import numpy as np

from qora.cli.options import backend_option, scale_out_client, scale_out_options


@click.group("ssb")
def ssb() -> None:
    """4D-STEM direct ptychography: single side band (SSB) and parallax (tcBF) images."""


def _aberrations(c10, c12, c12_angle, c30):
    from qora.ssb import Aberrations

    values = {"C10": c10}
    if c12:
        values["C12"] = (c12, np.deg2rad(c12_angle))
    if c30:
        values["C30"] = c30
    return Aberrations(values)


_aberration_options = [
    click.option("--c10", type=float, default=0.0, show_default=True, help="C10 (A); the defocus is -C10."),
    click.option("--c12", type=float, default=0.0, show_default=True, help="Twofold astigmatism C12 (A)."),
    click.option("--c12-angle", type=float, default=0.0, show_default=True, help="Its azimuth (degrees)."),
    click.option("--c30", type=float, default=0.0, show_default=True, help="Spherical aberration C30 (A)."),
]


def _load_with_settings(path, kv, semiangle, scan_step):
    """The data and the microscope settings: the options where given, else the file's."""
    from qora.ssb import load_data

    stack, meta = load_data(path)
    kv = kv if kv is not None else meta.get("kv")
    semiangle = semiangle if semiangle is not None else meta.get("alpha_mrad")
    scan_step = scan_step if scan_step is not None else meta.get("scan_step_a")
    missing = [n for n, v in (("--kv", kv), ("--semiangle", semiangle), ("--scan-step", scan_step)) if v is None]
    if missing:
        raise click.UsageError(f"the file has no {', '.join(missing)[2:]}: give {', '.join(missing)}")
    return stack, meta, kv, semiangle, scan_step


def aberration_options(f):
    for option in reversed(_aberration_options):
        f = option(f)
    return f


@ssb.command("simulate")
@click.option("--scan", type=click.IntRange(8, 1024), default=64, show_default=True, help="Scan positions per side.")
@click.option("--step", type=float, default=0.4, show_default=True, help="Scan step (A).")
@click.option("--window", type=click.IntRange(16, 1024), default=64, show_default=True,
              help="Probe window and detector size (pixels).")
@click.option("--kv", type=float, default=300.0, show_default=True)
@click.option("--semiangle", type=float, default=20.0, show_default=True, help="Convergence semi-angle (mrad).")
@aberration_options
@click.option("--slices", type=click.IntRange(1, 1000), default=1, show_default=True)
@click.option("--thickness", type=float, default=0.0, show_default=True, help="Specimen thickness (A).")
@click.option("--dose", type=float, default=None, help="Electrons per A^2 (Poisson counts); default noise-free.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True, help="Dataset .h5 file.")
def simulate_cmd(scan, step, window, kv, semiangle, c10, c12, c12_angle, c30, slices, thickness, dose, seed,
                 out) -> None:
    """An amorphous specimen (random atoms) scanned by an aberrated probe."""
    from qora.ssb import amorphous_slices, scan_truth, simulate, write_dataset

    pixel = step / 2
    ab = _aberrations(c10, c12, c12_angle, c30)
    try:
        phase = amorphous_slices((2 * scan, 2 * scan), pixel, slices=slices, seed=seed)
        data = simulate(phase, pixel=pixel, stride=2, window=window, kv=kv, alpha_mrad=semiangle, aberrations=ab,
                        thickness=thickness, dose=dose, seed=seed)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from exc
    write_dataset(out, data.data, kv=kv, alpha_mrad=semiangle, scan_step=data.scan_step,
                  detector_pixel=data.detector_pixel, aberrations=ab, truth=scan_truth(data))
    click.echo(f"wrote {out}: scan {data.data.shape[:2]}, detector {data.data.shape[2:]}, step {data.scan_step} A, "
               f"{data.mrad_per_pixel:.3f} mrad/px")


@ssb.command("image")
@click.argument("data", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--kv", type=float, default=None, help="Accelerating voltage (kV); default from the file.")
@click.option("--semiangle", type=float, default=None, help="Convergence semi-angle (mrad); default from the file.")
@click.option("--scan-step", type=float, default=None, help="Scan step (A); default from the file.")
@click.option("--rotation", type=float, default=0.0, show_default=True, help="Scan rotation (degrees).")
@aberration_options
@click.option("--method", type=click.Choice(["ssb", "parallax"]), default="ssb", show_default=True)
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True, help="Image .h5 file.")
@click.option("--plot", type=click.Path(dir_okay=False, path_type=Path), default=None, help="PNG figure.")
@backend_option(help="Where G is prepared and the image made (auto: the GPU where there is one).")
def image_cmd(data, kv, semiangle, scan_step, rotation, c10, c12, c12_angle, c30, method, out, plot,
              backend) -> None:
    """The phase image of a 4D-STEM dataset for given aberrations."""
    from qora.ssb import Session, chi, plot_image, write_image

    try:
        stack, meta, kv, semiangle, scan_step = _load_with_settings(data, kv, semiangle, scan_step)
        ab = _aberrations(c10, c12, c12_angle, c30)
        session = Session(stack, kv=kv, alpha_mrad=semiangle, scan_step=scan_step, rotation=np.deg2rad(rotation),
                          backend=backend)
        phase = session.image(ab, method)
    except (ValueError, FileNotFoundError) as exc:
        raise click.ClickException(str(exc)) from exc
    write_image(out, phase, method=method, scan_step=scan_step, kv=kv, alpha_mrad=semiangle, aberrations=ab)
    click.echo(f"{method}: {session.detector.radius:.2f} px bright-field radius, {len(session.bf_index)} pixels; "
               f"phase std {phase.std():.3e} rad; wrote {out}")
    if "truth" in meta:
        r = np.corrcoef(phase.ravel(), np.asarray(meta["truth"]).ravel())[0, 1]
        click.echo(f"correlation with the simulated phase: {r:.3f}")
    if plot is not None:
        a = semiangle
        grid = np.linspace(-a, a, 129)
        kx, ky = np.meshgrid(grid * 1e-3 / session.wavelength, grid * 1e-3 / session.wavelength)
        values = np.where(np.hypot(kx, ky) <= a * 1e-3 / session.wavelength, chi(kx, ky, ab, session.wavelength),
                          np.nan)
        plot_image(plot, phase, scan_step=scan_step, title=f"{method} phase (rad)",
                   chi_map=((-a, a, -a, a), values))
        click.echo(f"wrote {plot}")


@ssb.command("fit")
@click.argument("data", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--kv", type=float, default=None, help="Accelerating voltage (kV); default from the file.")
@click.option("--semiangle", type=float, default=None, help="Convergence semi-angle (mrad); default from the file.")
@click.option("--scan-step", type=float, default=None, help="Scan step (A); default from the file.")
@click.option("--rotation", type=float, default=None, help="Scan rotation (degrees); fitted when not given.")
@click.option("--tilt/--no-tilt", default=True, show_default=True, help="Also fit the thick-sample model with tilt.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True, help="Fit .json file.")
@click.option("--plot", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="PNG of the images of the fitted branches.")
@click.option("--trials", type=click.IntRange(8, 100000), default=200, show_default=True,
              help="Trials of the cold-start search (rotation given), 8 per pass over G.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the search.")
@backend_option(help="Where G is held and the fit runs (on a cluster: on each worker).")
@click.option("--quiet", is_flag=True)
@scale_out_options
def fit_cmd(data, kv, semiangle, scan_step, rotation, tilt, out, plot, trials, seed, backend, quiet, scheduler,
            workers, gpus) -> None:
    """Fit defocus, astigmatism (and rotation, thickness, tilt) from a cold start.

    With --workers, --gpus or --scheduler, G is split by bright-field pixel over a Dask
    cluster's workers, each reading its part of DATA (docs/scale-out.md).
    """
    import json

    from qora.io.atomic import atomic_path
    from qora.progress import tqdm_progress
    from qora.ssb import Session, parameters_to_aberrations, plot_fit
    from qora.ssb import fit as fit_session

    cluster = bool(scheduler or workers or gpus)
    if cluster and plot is not None:
        raise click.UsageError("--plot images the whole bright field in one process: fit on the cluster, then "
                               "`qora ssb image` with the fitted parameters")
    try:
        stack, meta, kv, semiangle, scan_step = _load_with_settings(data, kv, semiangle, scan_step)
        with scale_out_client(scheduler, workers, gpus) as client:
            if client is None:
                session = Session(stack, kv=kv, alpha_mrad=semiangle, scan_step=scan_step, backend=backend)
            else:
                from qora.distributed.ssb import ShardedSession

                del stack  # each worker reads its part of the file
                session = ShardedSession(str(data), client=client, kv=kv, alpha_mrad=semiangle, scan_step=scan_step,
                                         backend=backend)
            with tqdm_progress(disable=quiet) as bar:
                result = fit_session(session, rotation=None if rotation is None else np.deg2rad(rotation),
                                     tilt=tilt, progress=bar, trials=trials, seed=seed)
    except (ValueError, FileNotFoundError) as exc:
        raise click.ClickException(str(exc)) from exc
    with atomic_path(out) as tmp:
        tmp.write_text(json.dumps(result, indent=2) + "\n")
    std = parameters_to_aberrations(result["standard"]["parameters"])
    err = result["standard"]["uncertainty"]
    click.echo(f"rotation {np.rad2deg(result['rotation_rad']):.2f} deg; standard: C10 {std.get('C10'):.1f} "
               f"+- {err['C10']:.1f} A, C12 {std.get('C12'):.1f} A (C12a/b +- {err['C12a']:.1f}/{err['C12b']:.1f}), "
               f"agreement {result['standard']['agreement']:.4f}")
    if "thick" in result:
        p, e = result["thick"]["parameters"], result["thick"]["uncertainty"]
        click.echo(f"thick: thickness {p['thickness']:.0f} +- {e['thickness']:.0f} A, tilt ({p['tilt_y'] * 1e3:.2f}, "
                   f"{p['tilt_x'] * 1e3:.2f}) +- ({e['tilt_y'] * 1e3:.2f}, {e['tilt_x'] * 1e3:.2f}) mrad, agreement "
                   f"{result['thick']['agreement']:.4f}; better: {result['better']}")
    click.echo(f"wrote {out}")
    if plot is not None:
        plot_fit(plot, session, result)
        click.echo(f"wrote {plot}")
