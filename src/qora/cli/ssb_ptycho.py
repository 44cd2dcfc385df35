"""``qora ssb ptycho``: iterative multislice ptychography of a 4D-STEM file, started from the direct fit."""

from __future__ import annotations

from pathlib import Path

import click
import numpy as np

from qora.cli.options import SCAN_STEP_A, SEMIANGLE_MRAD, VOLTAGE_KV, backend_option
from qora.cli.ssb_data import data_options, load_for_session, read_fit
from qora.cli.ssb_options import check_outputs, naming


@click.command("ptycho")
@click.argument("data", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--kv", type=VOLTAGE_KV, default=None, help="Accelerating voltage (kV); default from the file.")
@click.option("--semiangle", type=SEMIANGLE_MRAD, default=None, help="Convergence semi-angle (mrad); default from the file.")
@click.option("--scan-step", type=SCAN_STEP_A, default=None, help="Scan step (A); default from the file.")
@click.option("--fit", "fit_file", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="A fit .json of `qora ssb fit` on this DATA (default: the default fit is run first).")
@click.option("--iterations", type=click.IntRange(1, 100_000), default=None,
              help="Passes over the scan [default: 40 after the misfit settles, at most 400].")
@click.option("--modes", type=click.IntRange(1, 16), default=1, show_default=True,
              help="The probe's coherent modes (partial coherence: 2-4).")
@click.option("--slices", type=click.IntRange(1, 256), default=None,
              help="Object slices [default: the fit's thickness over 10 A].")
@click.option("--window", type=click.IntRange(8, 4096), default=None,
              help="Detector pixels used about the disk's centre (even) [default: the largest square].")
@click.option("--mode-spread", type=click.FloatRange(min=0, min_open=True), default=None,
              help="With --modes > 1: the focal spread (A, half-width) whose modes start the probe's "
                   "[default: the probe's depth of field, lambda / alpha^2].")
@click.option("--probe-aperture", type=click.Choice(["measured", "model"]), default="measured", show_default=True,
              help="The probe's modulus: read from the scan's mean pattern (right whatever the detector's "
                   "calibration), or the aperture of the semi-angle at the calibrated angle per pixel.")
@click.option("--checkpoint", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the solver's state here (.npz) after each pass.")
@click.option("--resume", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="Go on from a checkpoint (.npz) of the same DATA and options.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="The result (.h5): slices, probe modes, positions, misfit, what came from the fit.")
@click.option("--plot", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="A PNG of the summed phase, the probe, the slices and the misfit.")
@click.option("--quiet", is_flag=True, help="No progress bar.")
@backend_option(help="Where to reconstruct (auto: the GPU where there is one).")
@data_options
def ptycho_cmd(data, kv, semiangle, scan_step, fit_file, iterations, modes, slices, window, mode_spread, probe_aperture,
               checkpoint, resume, out, plot, quiet, backend, source) -> None:
    """Iterative multislice ptychography started from the direct fit: the fit's aberrations, scan rotation,
    detector orientation and thickness (and its direct image as the first summed phase), nothing set by hand.

    docs/ssb-methods.md ("Iterative ptychography") says what it does and when to use it."""
    from qora.progress import tqdm_progress
    from qora.ssb import Session
    from qora.ssb import fit as fit_session
    from qora.ssb.ptycho import PtychoOptions, reconstruct
    from qora.ssb.ptycho import load_state, plot_result, save_state

    check_outputs(data, {"--out": (out, (".h5", ".hdf5")), "--plot": (plot, (".png",)),
                         "--checkpoint": (checkpoint, (".npz",))})
    ctx = click.get_current_context()
    fit = read_fit(ctx, fit_file) if fit_file is not None else None
    stack, meta, kv, semiangle, scan_step, detector = load_for_session(data, kv=kv, semiangle=semiangle,
                                                                       scan_step=scan_step, source=source)
    with naming(data):
        session = Session(stack, kv=kv, alpha_mrad=semiangle, scan_step=scan_step, detector=detector,
                          backend=backend)
    if fit is None:
        with tqdm_progress(disable=quiet) as bar:
            fit = fit_session(session, progress=bar)
        click.echo("the default fit: " + _fit_line(fit))
    else:
        click.echo(f"from {fit_file}: " + _fit_line(fit))
    state = load_state(resume, session.xp) if resume is not None else None
    with tqdm_progress(disable=quiet) as bar:
        result = reconstruct(stack, session, fit, options=PtychoOptions(iterations=iterations),
                             modes=modes, slices=slices, window=window, aperture=probe_aperture,
                             mode_spread=mode_spread, progress=bar, resume=state,
                             checkpoint=None if checkpoint is None else (lambda s: save_state(checkpoint, s)))
    result.save(out)
    start = result.start
    click.echo(f"ptycho: {start['slices']} slice(s) of {result.grid.slice_spacing:.1f} A, {start['modes']} mode(s), "
               f"{result.grid.window} px window of {result.grid.pixel:.4f} A; misfit {result.losses[0]:.4g} -> "
               f"{result.losses[-1]:.4g} in {start['iterations']} passes; wrote {out}")
    if plot is not None:
        plot_result(plot, result)
        click.echo(f"wrote {plot}")


def _fit_line(fit) -> str:
    branch = fit.get("better") or "standard"
    values = fit[branch]["parameters"]
    thickness = next((fit[b]["parameters"]["thickness"] for b in ("incoherent", "thick")
                      if b in fit and "thickness" in fit[b].get("parameters", {})), None)
    return (f"{branch} branch, C10 {values['C10']:.1f} A, detector orientation {fit['orientation']['orientation']}, "
            f"rotation {np.rad2deg(fit['rotation_rad']):.2f} deg"
            + (f", thickness {thickness:.1f} A" if thickness is not None else ""))
