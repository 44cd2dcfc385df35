"""``qora ssb image``: the phase image of a 4D-STEM dataset by any of Session.image's methods."""

from __future__ import annotations

from pathlib import Path

import click
import numpy as np

from qora.cli.options import ANGLE_DEG, SCAN_STEP_A, SEMIANGLE_MRAD, SSB_IMAGE_CHOICES, VOLTAGE_KV, backend_option
from qora.cli.ssb_data import data_options, load_for_session, read_fit
from qora.cli.ssb_options import aberration_options, aberrations_from, check_outputs, naming


@click.command("image")
@click.argument("data", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--kv", type=VOLTAGE_KV, default=None, help="Accelerating voltage (kV); default from the file.")
@click.option("--semiangle", type=SEMIANGLE_MRAD, default=None, help="Convergence semi-angle (mrad); default from the file.")
@click.option("--scan-step", type=SCAN_STEP_A, default=None, help="Scan step (A); default from the file.")
@click.option("--rotation", type=ANGLE_DEG, default=0.0, show_default=True, help="Scan rotation (degrees).")
@aberration_options
@click.option("--method", type=click.Choice(SSB_IMAGE_CHOICES), default=None,
              help="Imaging method [default: ssb; with --fit, its better branch: ssb, the thick model or the sum of "
              "the incoherent model's depth sections]; obf: optimum bright field; icom: no aberrations; wdd: Wigner "
              "distribution deconvolution (no weak-phase assumption). docs/ssb-methods.md says which when.")
@click.option("--epsilon", type=click.FloatRange(0, 1, min_open=True, max_open=True), default=None,
              help="WDD's regularisation, a fraction of the probe's Wigner maximum [default: 3 / sqrt(dose in e/A^2) "
              "from the data's counts, in 1e-3..0.3; 1e-3 where the data are not counts].")
@click.option("--fit", "fit_file", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="A fit .json of `qora ssb fit` on this DATA: its detector orientation, scan rotation and the "
              "better branch's aberrations (thickness and tilt too) are used, unrounded; the aberration, "
              "rotation and orientation options are then not given.")
@click.option("--detector-orientation", "orientation", default="identity", show_default=True,
              type=click.Choice(["identity", "rot90", "rot180", "rot270", "transpose", "flip-rows", "antitranspose",
                                 "flip-cols"]),
              help="The detector orientation against the scan (the numpy operation on the detector axes), as "
              "`qora ssb fit` reports it.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True, help="Image .h5 file.")
@click.option("--plot", type=click.Path(dir_okay=False, path_type=Path), default=None, help="PNG figure.")
@backend_option(help="Where G is prepared and the image made (auto: the GPU where there is one).")
@data_options
@click.pass_context
def image_cmd(ctx, data, kv, semiangle, scan_step, rotation, c10, c12, c12_angle, c30, method, epsilon, fit_file,
              orientation, out, plot, backend, source) -> None:
    """The phase image of a 4D-STEM dataset for given aberrations, or for a fit's (--fit).

    The data's layout (--axis-order, --transpose-detector, --flip-*) and calibration (--scan-step-y/-x,
    --detector-pixel-mrad, --descan) are applied as the file is read; the values used are printed."""
    from qora.ssb import Session, chi, parameters_to_aberrations, plot_image, write_image
    from qora.progress import tqdm_progress
    from qora.ssb import reorient

    check_outputs(data, {"--out": (out, (".h5", ".hdf5")), "--plot": (plot, (".png",))})
    if method == "icom" and any(c != 0 for c in (c10, c12, c30)):  # refused before G is prepared
        raise click.BadParameter("the integrated centre of mass takes no aberrations", param_hint="--c10/--c12/--c30")
    if epsilon is not None and method != "wdd":
        raise click.BadParameter("it is WDD's regularisation: give it with --method wdd", param_hint="--epsilon")
    fit = read_fit(ctx, fit_file) if fit_file is not None else None
    stack, meta, kv, semiangle, scan_step, detector = load_for_session(data, kv=kv, semiangle=semiangle,
                                                                       scan_step=scan_step, source=source)
    with naming(data):
        session = Session(stack, kv=kv, alpha_mrad=semiangle, scan_step=scan_step, rotation=np.deg2rad(rotation),
                          detector=detector, backend=backend)
    if fit is not None and method in (None, "ssb"):
        from qora.ssb import fitted_image

        phase, method, values = fitted_image(session, fit)
        ab = parameters_to_aberrations(values)
        click.echo(f"from {fit_file}: the {fit.get('better', 'standard')} branch, detector orientation "
                   f"{fit['orientation']['orientation']}, rotation {fit['rotation_deg']:.3f} deg")
    else:
        if fit is not None:
            session.rotation = float(fit["rotation_rad"])
            orientation = fit["orientation"]["orientation"]
            ab = parameters_to_aberrations(fit[fit.get("better", "standard")]["parameters"])
        else:
            ab = aberrations_from(c10, c12, c12_angle, c30)
        method = method or "ssb"
        if method == "wdd":
            epsilon = _wdd_epsilon(session, epsilon)
        with tqdm_progress(delay=2.0) as bar:  # WDD's frequencies, drawn where it takes longer than 2 s
            phase = reorient(session, orientation).image(ab, method, epsilon=epsilon,
                                                         progress=bar if method == "wdd" else None)
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


def _wdd_epsilon(session, epsilon):
    """WDD's epsilon, given or by the dose rule, said with where it came from."""
    from qora.ssb import dose_from_counts, epsilon_for_dose

    if epsilon is not None:
        click.echo(f"WDD: epsilon {epsilon:g} (given)")
        return epsilon
    dose = dose_from_counts(session)
    epsilon = epsilon_for_dose(dose)
    source = (f"the dose rule at {dose:.3g} e/A^2 from the data's counts" if dose is not None
              else "the data are not counts: the rule's floor")
    click.echo(f"WDD: epsilon {epsilon:g} ({source})")
    return epsilon
