"""``qora ssb``: simulate 4D-STEM data and make SSB and parallax phase images (units: A, mrad, kV).

Every failure is one ``Error:`` line with exit status 2 (``qora --debug`` shows the traceback): a
value out of its range, a file that is not 4D-STEM data, an output that would replace an input,
too little memory or disk (said before any work). Options given beside a file's own settings win,
with a warning on stderr."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import click
import numpy as np

from qora.cli.options import FINITE, NONNEGATIVE, POSITIVE, backend_option, scale_out_client, scale_out_options
from qora.cli.ssb_data import data_options, load_for_session


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


def c12_text(aberrations) -> str:
    """C12 as magnitude and angle: "C12 20.0 A at 25.0 deg"."""
    mag, angle = aberrations.values.get("C12", (0.0, 0.0))
    return f"C12 {mag:.1f} A at {np.rad2deg(angle):.1f} deg"


_aberration_options = [
    click.option("--c10", type=FINITE, default=0.0, show_default=True, help="C10 (A); the defocus is -C10."),
    click.option("--c12", type=NONNEGATIVE, default=0.0, show_default=True, help="Twofold astigmatism C12 (A)."),
    click.option("--c12-angle", type=FINITE, default=0.0, show_default=True, help="Its azimuth (degrees)."),
    click.option("--c30", type=FINITE, default=0.0, show_default=True, help="Spherical aberration C30 (A)."),
]


def _outputs(data, named: dict) -> None:
    """Refuse, before any work, an output that is an input (or a folder, or another output), or
    that names a format it would not be written in."""
    from qora.io.errors import OutputError
    from qora.io.validate import outputs_apart

    given = {option: path for option, (path, _) in named.items() if path is not None}
    outputs_apart(list(given.values()), [data] if data is not None else [])
    seen = {}
    for option, path in given.items():
        other = seen.get(Path(path).resolve())
        if other:
            raise OutputError(f"{option} and {other} are the same file {path}: give each its own name")
        seen[Path(path).resolve()] = option
        suffixes = named[option][1]
        if Path(path).suffix.lower() not in suffixes:
            raise OutputError(f"{option} {path}: this output is written as {suffixes[0]} "
                              f"(give a name ending in {' or '.join(suffixes)})")


@contextmanager
def _naming(path):
    """An InputError about the data (NaN, all zero, no bright field) names the file it came from."""
    from qora.io.errors import InputError

    try:
        yield
    except InputError as exc:
        raise InputError(f"{path}: {exc}") from exc


def aberration_options(f):
    for option in reversed(_aberration_options):
        f = option(f)
    return f


@ssb.command("simulate")
@click.option("--scan", type=click.IntRange(8, 1024), default=64, show_default=True, help="Scan positions per side.")
@click.option("--step", type=POSITIVE, default=0.4, show_default=True, help="Scan step (A).")
@click.option("--window", "--detector", "window", type=click.IntRange(16, 1024), default=64, show_default=True,
              help="Probe window and detector size (pixels).")
@click.option("--kv", type=POSITIVE, default=300.0, show_default=True, help="Accelerating voltage (kV).")
@click.option("--semiangle", type=POSITIVE, default=20.0, show_default=True, help="Convergence semi-angle (mrad).")
@aberration_options
@click.option("--slices", type=click.IntRange(1, 1000), default=1, show_default=True)
@click.option("--thickness", type=NONNEGATIVE, default=0.0, show_default=True, help="Specimen thickness (A).")
@click.option("--dose", type=POSITIVE, default=None, help="Electrons per A^2 (Poisson counts); default noise-free.")
@click.option("--seed", type=click.IntRange(0), default=0, show_default=True)
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True, help="Dataset .h5 file.")
@click.option("--quiet", is_flag=True, help="No progress bar (for scripts and logs).")
def simulate_cmd(scan, step, window, kv, semiangle, c10, c12, c12_angle, c30, slices, thickness, dose, seed,
                 out, quiet) -> None:
    """An amorphous specimen (random atoms) scanned by an aberrated probe.

    The memory (the patterns, float64) and the disk (the file, float32 before compression) it needs
    are checked first; Ctrl-C stops it, removes the partial file and exits with status 130."""
    from qora.progress import tqdm_progress
    from qora.ssb import amorphous_slices, scan_truth, simulate, write_dataset
    from qora.ssb.simulate import check_disk, check_simulation_memory

    _outputs(None, {"--out": (out, (".h5", ".hdf5"))})
    positions = scan * scan
    check_simulation_memory(positions, window, dose=dose)
    check_disk(out, positions * window**2 * 4, f"the dataset ({scan} x {scan} scan, {window} x {window} detector)",
               "a smaller scan (--scan) or window (--window) shrinks it")
    pixel = step / 2
    ab = _aberrations(c10, c12, c12_angle, c30)
    try:
        with tqdm_progress(disable=quiet, unit="position") as bar:
            phase = amorphous_slices((2 * scan, 2 * scan), pixel, slices=slices, seed=seed)
            data = simulate(phase, pixel=pixel, stride=2, window=window, kv=kv, alpha_mrad=semiangle,
                            aberrations=ab, thickness=thickness, dose=dose, seed=seed,
                            progress=lambda stage, done, total, m: bar(stage, done, 2 * total, m))
            write_dataset(out, data.data, kv=kv, alpha_mrad=semiangle, scan_step=data.scan_step,
                          detector_pixel=data.detector_pixel, aberrations=ab, truth=scan_truth(data),
                          progress=lambda stage, done, total, m: bar(stage, total + done, 2 * total, m))
    except KeyboardInterrupt:
        click.echo(f"Interrupted: nothing written to {out} (the partial file was removed)", err=True)
        raise click.exceptions.Exit(130) from None
    click.echo(f"wrote {out}: scan {data.data.shape[:2]}, detector {data.data.shape[2:]}, step {data.scan_step} A, "
               f"{data.mrad_per_pixel:.3f} mrad/px")


@ssb.command("image")
@click.argument("data", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--kv", type=POSITIVE, default=None, help="Accelerating voltage (kV); default from the file.")
@click.option("--semiangle", type=POSITIVE, default=None, help="Convergence semi-angle (mrad); default from the file.")
@click.option("--scan-step", type=POSITIVE, default=None, help="Scan step (A); default from the file.")
@click.option("--rotation", type=FINITE, default=0.0, show_default=True, help="Scan rotation (degrees).")
@aberration_options
@click.option("--method", type=click.Choice(["ssb", "parallax"]), default="ssb", show_default=True)
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True, help="Image .h5 file.")
@click.option("--plot", type=click.Path(dir_okay=False, path_type=Path), default=None, help="PNG figure.")
@backend_option(help="Where G is prepared and the image made (auto: the GPU where there is one).")
@data_options
def image_cmd(data, kv, semiangle, scan_step, rotation, c10, c12, c12_angle, c30, method, out, plot,
              backend, source) -> None:
    """The phase image of a 4D-STEM dataset for given aberrations.

    The data's layout (--axis-order, --transpose-detector, --flip-*) and calibration (--scan-step-y/-x,
    --detector-pixel-mrad, --descan) are applied as the file is read; the values used are printed."""
    from qora.ssb import Session, chi, plot_image, write_image

    _outputs(data, {"--out": (out, (".h5", ".hdf5")), "--plot": (plot, (".png",))})
    stack, meta, kv, semiangle, scan_step, detector = load_for_session(data, kv=kv, semiangle=semiangle,
                                                                       scan_step=scan_step, source=source)
    ab = _aberrations(c10, c12, c12_angle, c30)
    with _naming(data):
        session = Session(stack, kv=kv, alpha_mrad=semiangle, scan_step=scan_step, rotation=np.deg2rad(rotation),
                          detector=detector, backend=backend)
    phase = session.image(ab, method)
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
@click.option("--kv", type=POSITIVE, default=None, help="Accelerating voltage (kV); default from the file.")
@click.option("--semiangle", type=POSITIVE, default=None, help="Convergence semi-angle (mrad); default from the file.")
@click.option("--scan-step", type=POSITIVE, default=None, help="Scan step (A); default from the file.")
@click.option("--rotation", type=FINITE, default=None, help="Scan rotation (degrees); fitted when not given.")
@click.option("--tilt/--no-tilt", default=True, show_default=True, help="Also fit the thick-sample model with tilt.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True, help="Fit .json file.")
@click.option("--plot", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="PNG of the images of the fitted branches.")
@click.option("--trials", type=click.IntRange(8, 100000), default=200, show_default=True,
              help="Trials of the cold-start search (rotation given), 8 per pass over G.")
@click.option("--seed", type=click.IntRange(0), default=0, show_default=True, help="Seed of the search.")
@backend_option(help="Where G is held and the fit runs (on a cluster: on each worker).")
@click.option("--quiet", is_flag=True, help="No progress bar (for scripts and logs).")
@scale_out_options
@data_options
def fit_cmd(data, kv, semiangle, scan_step, rotation, tilt, out, plot, trials, seed, backend, quiet, scheduler,
            workers, gpus, source) -> None:
    """Fit defocus, astigmatism (and rotation, thickness, tilt) from a cold start.

    The progress bar counts the whole fit: the search's trials (or, with the rotation fitted, its
    angles), then Newton's steps of each branch; --quiet turns it off.

    With --workers, --gpus or --scheduler, G is split by bright-field pixel over a Dask
    cluster's workers, each reading its part of DATA (docs/scale-out.md).

    The data's layout (--axis-order, --transpose-detector, --flip-*) and calibration (--scan-step-y/-x,
    --detector-pixel-mrad, --descan) are applied as the file is read; the values used are printed.
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
    if cluster and source.changes_layout:
        raise click.UsageError("each cluster worker reads DATA as the file holds it: the layout options "
                               "(--scan-shape, --axis-order, --transpose-detector, --flip-*, --descan) need a fit "
                               "in one process, or the data written in Qora's layout first")
    _outputs(data, {"--out": (out, (".json",)), "--plot": (plot, (".png",))})
    stack, meta, kv, semiangle, scan_step, detector = load_for_session(data, kv=kv, semiangle=semiangle,
                                                                       scan_step=scan_step, source=source)
    with scale_out_client(scheduler, workers, gpus) as client:
        if client is None:
            with _naming(data):
                session = Session(stack, kv=kv, alpha_mrad=semiangle, scan_step=scan_step, detector=detector,
                                  backend=backend)
        else:
            from qora.distributed.ssb import ShardedSession

            del stack  # each worker reads its part of the file
            session = ShardedSession(str(data), client=client, kv=kv, alpha_mrad=semiangle, scan_step=scan_step,
                                     detector=detector, backend=backend)
        with tqdm_progress(disable=quiet) as bar:
            result = fit_session(session, rotation=None if rotation is None else np.deg2rad(rotation),
                                 tilt=tilt, progress=bar, trials=trials, seed=seed)
    with atomic_path(out) as tmp:
        tmp.write_text(json.dumps(result, indent=2) + "\n")
    std = parameters_to_aberrations(result["standard"]["parameters"])
    err = result["standard"]["uncertainty"]
    click.echo(f"rotation {np.rad2deg(result['rotation_rad']):.2f} deg; standard: C10 {std.get('C10'):.1f} "
               f"+- {err['C10']:.1f} A, {c12_text(std)} (C12a/b +- {err['C12a']:.1f}/{err['C12b']:.1f} A), "
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
