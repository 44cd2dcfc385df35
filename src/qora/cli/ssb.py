"""``qora ssb``: simulate 4D-STEM data and make SSB and parallax phase images (units: A, mrad, kV).

Every failure is one ``Error:`` line with exit status 2 (``qora --debug`` shows the traceback): a
value out of its range, a file that is not 4D-STEM data, an output that would replace an input,
too little memory or disk (said before any work). Options given beside a file's own settings win,
with a warning on stderr."""

from __future__ import annotations

from pathlib import Path

import click
import numpy as np

from qora.cli.options import (ANGLE_DEG, NONNEGATIVE, POSITIVE, SCAN_STEP_A,
                              SEMIANGLE_MRAD, SSB_IMAGE_CHOICES, VOLTAGE_KV,
                              backend_option, scale_out_client, scale_out_options)
from qora.cli.ssb_data import data_options, load_for_session
from qora.cli.ssb_image import image_cmd
from qora.cli.ssb_ptycho import ptycho_cmd
from qora.cli.ssb_options import aberration_options, aberrations_from, c12_text, check_outputs, naming


@click.group("ssb")
def ssb() -> None:
    """4D-STEM direct ptychography: single side band (SSB) and parallax (tcBF) images."""


ssb.add_command(image_cmd)
ssb.add_command(ptycho_cmd)


def _pm(report: dict, name: str, scale: float = 1.0, digits: int = 1) -> str:
    """"+- sigma" of a parameter, or "(not determined)". Where model error, not noise, bounds it (the identifiability
    report's ``interval``, the half-width within the agreement gap, more than three times sigma), that interval is
    the error bar printed, with the noise's sigma beside it: a "+- 0.0" before a wider bracket would say the
    opposite of what the fit knows."""
    entry = report["identifiability"]["parameters"].get(name)
    if entry is None:
        sigma = report["uncertainty"].get(name)
        return "(not determined)" if sigma is None else f"+- {sigma * scale:.{digits}f}"
    if not entry["determined"]:
        return "(not determined)"
    w = entry.get("interval")
    if w is not None and w > 3 * entry["sigma"]:
        return f"+- {w * scale:.{digits}f} (within the agreement gap; noise alone +- {entry['sigma'] * scale:.2g})"
    return f"+- {entry['sigma'] * scale:.{max(digits, 2) if entry['sigma'] * scale < 0.1 else digits}f}"


def _thick_line(t: dict, label: str, *, tilt: bool) -> str:
    """A thick-film branch's line: C10 and C12 (with C12a/b's errors, as the standard branch's line: a C12 printed
    bare read as exact), the thickness, the tilt (``tilt`` False: the incoherent model, whose independent sections
    do not determine one) and the agreement."""
    from qora.ssb import parameters_to_aberrations

    p = t["parameters"]
    ab = parameters_to_aberrations(p)
    tilt_text = (f"tilt ({p['tilt_y'] * 1e3:.2f} {_pm(t, 'tilt_y', 1e3, 2)}, {p['tilt_x'] * 1e3:.2f} "
                 f"{_pm(t, 'tilt_x', 1e3, 2)}) mrad" if tilt else "tilt not determined (independent sections)")
    return (f"{label}: C10 {ab.get('C10'):.1f} {_pm(t, 'C10')} A, {c12_text(ab)} (C12a/b {_pm(t, 'C12a')}/"
            f"{_pm(t, 'C12b')} A), thickness {p['thickness']:.0f} {_pm(t, 'thickness', digits=0)} A, {tilt_text}, "
            f"agreement {t['agreement']:.4f}")


def fit_summary(result: dict) -> list:
    """The lines `qora ssb fit` prints of a fit's result: the orientation with its runner-up, the
    branch and its rule's statistic, the rotation, then per branch the parameters with their
    standard errors or "not determined" (C12 as magnitude and azimuth) and the basins compared."""
    from qora.ssb import parameters_to_aberrations

    o, b = result["orientation"], result["branch"]
    line = f"detector orientation {o['orientation']}"
    if o.get("searched"):
        line += (f" (centre-of-mass curl {o['score']:.3f}; runner-up {o['runner_up']} {o['runner_up_score']:.3f})")
    else:
        line += " (given)"
    skew = "" if b["skewness"] is None else f", phase skewness {b['skewness']:+.2f}"
    line += f"; branch {b['choice']}{' (flipped)' if b['flipped'] else ''}{skew}"
    lines = [line]
    std_report = result.get("standard")
    rotation = f"rotation {result['rotation_deg']:.3f} deg"
    if std_report is not None:
        std = parameters_to_aberrations(std_report["parameters"])
        lines.append(f"{rotation}; standard: C10 {std.get('C10'):.1f} {_pm(std_report, 'C10')} A, {c12_text(std)} "
                     f"(C12a/b {_pm(std_report, 'C12a')}/{_pm(std_report, 'C12b')} A), "
                     f"agreement {std_report['agreement']:.4f}")
    else:
        lines.append(rotation)
    if "thick" in result:
        lines.append(_thick_line(result["thick"], "thick", tilt=True))
    if "incoherent" in result:
        t = result["incoherent"]
        lines.append(_thick_line(t, f"incoherent ({t['sections']} depth sections)", tilt=False))
    if "depth_model" in result:
        lines.append(f"depth model: {result['depth_model']['chosen']} ({result['depth_model']['why']})")
    if "better" in result:
        rule = result.get("better_rule")
        lines.append(f"better: {result['better']}" + (f" ({rule})" if rule else ""))
    for name in ("standard", "thick"):
        ident = result.get(name, {}).get("identifiability")
        if ident and ident["runner_up"] is not None:
            lines.append(f"{name}: runner-up basin agreement {ident['runner_up']['agreement']:.4f} (gap "
                         f"{ident['gap']:.2e}, clear above {ident['gap_needed']:.2e})")
    return lines


@ssb.command("simulate")
@click.option("--scan", type=click.IntRange(8, 1024), default=64, show_default=True, help="Scan positions per side.")
@click.option("--step", type=SCAN_STEP_A, default=0.4, show_default=True, help="Scan step (A).")
@click.option("--window", "--detector", "window", type=click.IntRange(16, 1024), default=64, show_default=True,
              help="Probe window and detector size (pixels).")
@click.option("--kv", type=VOLTAGE_KV, default=300.0, show_default=True, help="Accelerating voltage (kV).")
@click.option("--semiangle", type=SEMIANGLE_MRAD, default=20.0, show_default=True, help="Convergence semi-angle (mrad).")
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
    from qora.ssb import check_disk, check_sampling, check_simulation_memory

    check_outputs(None, {"--out": (out, (".h5", ".hdf5"))})
    positions = scan * scan
    check_simulation_memory(positions, window, dose=dose)
    check_disk(out, positions * window**2 * 4, f"the dataset ({scan} x {scan} scan, {window} x {window} detector)",
               "a smaller scan (--scan) or window (--window) shrinks it")
    pixel = step / 2
    check_sampling(pixel, kv, semiangle)  # before the slices: a coarse pixel places atoms by the billion
    ab = aberrations_from(c10, c12, c12_angle, c30)
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


@ssb.command("fit")
@click.argument("data", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--kv", type=VOLTAGE_KV, default=None, help="Accelerating voltage (kV); default from the file.")
@click.option("--semiangle", type=SEMIANGLE_MRAD, default=None, help="Convergence semi-angle (mrad); default from the file.")
@click.option("--scan-step", type=SCAN_STEP_A, default=None, help="Scan step (A); default from the file.")
@click.option("--rotation", type=ANGLE_DEG, default=None, help="Scan rotation (degrees); fitted when not given.")
@click.option("--detector-orientation", "orientation", default="auto", show_default=True,
              type=click.Choice(["auto", "identity", "rot90", "rot180", "rot270", "transpose", "flip-rows",
                                 "antitranspose", "flip-cols"]),
              help="The fit's detector orientation against the scan (the numpy operation on the detector axes "
                   "that brings the patterns into the scan's frame); auto: found by the bright-field "
                   "centre-of-mass curl (docs/ssb.md, Orientation and the 180-degree branch).")
@click.option("--branch", default="auto", show_default=True, type=click.Choice(["auto", "as-fitted", "flipped"]),
              help="Of the two equally good fits (rotation, C) and (rotation + 180 deg, -C): auto takes the one "
                   "whose phase image has positive skewness (atoms positive).")
@click.option("--starts", type=click.IntRange(1, 64), default=4, show_default=True,
              help="Newton's starts from the search's distinct best trials (rotation given), besides the C10 grid's.")
@click.option("--thick-starts", type=click.IntRange(1, 3), default=3, show_default=True,
              help="The thick fit's starts: tilt 0, then (10, 10) and (-10, -10) mrad.")
@click.option("--tilt/--no-tilt", default=True, show_default=True, help="Also fit the thick-sample model with tilt.")
@click.option("--depth-model", type=click.Choice(["auto", "columnar", "incoherent"]), default="auto",
              show_default=True,
              help="The thick model: columnar (every slice the same structure, a crystal), incoherent (depth "
                   "sections with their own objects, an amorphous film), auto: both fitted, the incoherent one "
                   "taken where the sections' objects differ (docs/ssb.md, Thick films: columnar or amorphous).")
@click.option("--sections", type=click.IntRange(1, 8), default=None,
              help="Depth sections of the incoherent model; default one per depth of field lambda/alpha^2.")
@click.option("--sections-out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Image .h5 of the incoherent model's depth sections (section, row, col), entrance first.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True, help="Fit .json file.")
@click.option("--plot", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="PNG of the images of the fitted branches.")
@click.option("--trials", type=click.IntRange(8, 100000), default=200, show_default=True,
              help="Trials of the cold-start search (rotation given), 8 per pass over G.")
@click.option("--seed", type=click.IntRange(0), default=0, show_default=True, help="Seed of the search.")
@click.option("--coarse-rows", type=click.IntRange(1), default=None,
              help="The search and the starts' Newton run on every n-th frequency of the band, n = its "
                   "frequencies // this (default 4096; n = 1 below twice it), the best basins finished on the "
                   "whole band (docs/ssb-performance.md, The full-scale fit's cost and memory).")
@backend_option(help="Where G is held and the fit runs (on a cluster: on each worker).")
@click.option("--quiet", is_flag=True, help="No progress bar (for scripts and logs).")
@scale_out_options
@data_options
def fit_cmd(data, kv, semiangle, scan_step, rotation, orientation, branch, starts, thick_starts, tilt, depth_model,
            sections, sections_out, out, plot, trials, seed, coarse_rows, backend, quiet, scheduler, workers, gpus,
            source) -> None:
    """Fit defocus, astigmatism (and rotation, thickness, tilt) from a cold start.

    The progress bar counts the whole fit: the search's trials (or, with the rotation fitted, its
    angles), then Newton's steps of each branch; --quiet turns it off.

    With --workers, --gpus or --scheduler, G is split by bright-field pixel over a Dask
    cluster's workers, each reading its part of DATA (docs/scale-out.md).

    The data's layout (--axis-order, --transpose-detector, --flip-*) and calibration (--scan-step-y/-x,
    --detector-pixel-mrad, --descan) are applied as the file is read; the values used are printed.
    """
    from qora.progress import tqdm_progress
    from qora.ssb import Session, plot_fit, reorient
    from qora.ssb import fit as fit_session

    cluster = bool(scheduler or workers or gpus)
    if cluster and plot is not None:
        raise click.UsageError("--plot images the whole bright field in one process: fit on the cluster, then "
                               "`qora ssb image` with the fitted parameters")
    if cluster and source.changes_layout:
        raise click.UsageError("each cluster worker reads DATA as the file holds it: the layout options "
                               "(--scan-shape, --axis-order, --transpose-detector, --flip-*, --descan) need a fit "
                               "in one process, or the data written in Qora's layout first")
    if sections_out is not None and (cluster or not tilt or depth_model == "columnar"):
        raise click.UsageError("--sections-out images the incoherent thick model: it needs --tilt, a depth model "
                               "other than columnar, and a fit in one process")
    check_outputs(data, {"--out": (out, (".json",)), "--plot": (plot, (".png",)),
                    "--sections-out": (sections_out, (".h5", ".hdf5"))})
    stack, meta, kv, semiangle, scan_step, detector = load_for_session(data, kv=kv, semiangle=semiangle,
                                                                       scan_step=scan_step, source=source)
    with scale_out_client(scheduler, workers, gpus) as client:
        if client is None:
            with naming(data):
                session = Session(stack, kv=kv, alpha_mrad=semiangle, scan_step=scan_step, detector=detector,
                                  backend=backend)
        else:
            from qora.distributed.ssb import ShardedSession

            del stack  # each worker reads its part of the file
            session = ShardedSession(str(data), client=client, kv=kv, alpha_mrad=semiangle, scan_step=scan_step,
                                     detector=detector, backend=backend)
        with tqdm_progress(disable=quiet) as bar:
            result = fit_session(session, rotation=None if rotation is None else np.deg2rad(rotation),
                                 orientation=orientation, branch=branch, starts=starts, thick_starts=thick_starts,
                                 tilt=tilt, progress=bar, trials=trials, seed=seed, depth_model=depth_model,
                                 sections=sections, **({} if coarse_rows is None else {"coarse_rows": coarse_rows}))
    result.save(out)
    for line in fit_summary(result):
        click.echo(line)
    click.echo(f"wrote {out}")
    if plot is not None:
        with tqdm_progress(disable=quiet, delay=1.0) as bar:  # shown when the plot takes more than a second
            plot_fit(plot, reorient(session, result["orientation"]["orientation"]), result, progress=bar)
        click.echo(f"wrote {plot}")
    if sections_out is not None:
        _write_sections(sections_out, session, result, scan_step=scan_step, kv=kv, alpha_mrad=semiangle)


def _write_sections(path, session, result: dict, **settings) -> None:
    """The incoherent fit's depth sections as an image stack (:func:`qora.ssb.depth.depth_sections`)."""
    from qora.ssb import depth_sections, parameters_to_aberrations, reorient, write_image

    fit = result.get("incoherent")
    if fit is None:
        # a film thinner than the depth of field: one section, where the incoherent model is the columnar one
        # (the fit's depth_model says so), so the single section is imaged with the thick fit's values
        fit = {"parameters": result["thick"]["parameters"], "sections": 1, "section_depths_a": [0.0]}
        click.echo(f"one depth section: {result['depth_model']['why']}")
    stack = depth_sections(reorient(session, result["orientation"]["orientation"]), fit["parameters"],
                           sections=fit["sections"], rotation=result["rotation_rad"])
    write_image(path, stack, method="depth-sections", aberrations=parameters_to_aberrations(fit["parameters"]),
                depths=fit["section_depths_a"], **settings)
    depths = ", ".join(f"{z:.0f}" for z in fit["section_depths_a"])
    click.echo(f"wrote {path}: {len(stack)} depth section{'s' if len(stack) > 1 else ''} at {depths} A "
               "(from the mid-plane, entrance first)")


def _counts(data, path):
    """Detector counts as an unsigned integer array (a simulator sends what a detector sends);
    intensities that are not whole numbers are refused."""
    data = np.asarray(data)
    if data.dtype.kind in "ui":
        return data
    if not np.all(data == np.round(data)) or data.min() < 0:
        raise click.UsageError(f"{path}: holds intensities, not counts; a detector sends counts (simulate with "
                               "--dose for Poisson counts)")
    return data.astype(np.uint16 if data.max() < 65536 else np.uint32)


@ssb.command("serve")
@click.argument("data", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--protocol", type=click.Choice(["merlin", "dectris"]), default="merlin", show_default=True,
              help="Merlin TCP data port, or a DECTRIS ZeroMQ stream (bitshuffle-LZ4 frames).")
@click.option("--port", type=click.IntRange(0, 65535), default=0, show_default=True,
              help="Port on 127.0.0.1 (0: a free one, printed).")
@click.option("--fps", type=POSITIVE, default=1000.0, show_default=True, help="Frames per second.")
@click.option("--timeout", type=POSITIVE, default=60.0, show_default=True,
              help="Seconds to wait for a client before giving up.")
@click.option("--stream", type=click.Choice(["v1", "v2"]), default="v1", show_default=True,
              help="DECTRIS: stream v1 (JSON headers) or v2 (stream2, CBOR messages).")
@click.option("--counter-depth", type=click.Choice(["1", "6", "12", "24"]), default="12", show_default=True,
              help="Merlin: the counter depth of the frames sent.")
@click.option("--raw", is_flag=True, help="Merlin: RAW (R64) frames instead of normal ones.")
@click.option("--assembly", type=click.Choice(["1x1", "2x2"]), default="1x1", show_default=True,
              help="Merlin: a single chip or a quad (RAW frames in the quad's chip layout).")
@click.option("--clients", type=click.IntRange(1, 64), default=1, show_default=True,
              help="DECTRIS: receivers to wait for before the series starts (qora ssb live --receivers N: the "
              "stream is dealt among those connected).")
def serve_cmd(data, protocol, port, fps, timeout, stream, counter_depth, raw, assembly, clients) -> None:
    """Serve a recorded or simulated scan as a detector would, on 127.0.0.1 (to try `qora ssb live`).

    It stops by itself after the last frame, or when no client comes within --timeout."""
    from qora.ssb import load_data
    from qora.ssb.live import DectrisSimulator, MerlinSimulator

    stack, _ = load_data(data)
    counts = _counts(stack, data)
    total = counts.shape[0] * counts.shape[1]
    limit = total / fps + 2 * timeout
    if protocol == "merlin":
        sim = MerlinSimulator(counts, port=port, fps=fps, timeout=timeout, time_limit=limit,
                              counter_depth=int(counter_depth), raw=raw, assembly=assembly)
    else:
        sim = DectrisSimulator(counts, port=port, fps=fps, timeout=timeout, time_limit=limit, stream=stream,
                               clients=clients)
    scheme = "tcp" if protocol == "merlin" else "zmq"
    click.echo(f"serving {total} frames of {counts.shape[2]}x{counts.shape[3]} ({counts.shape[0]}x{counts.shape[1]} "
               f"scan) at {fps:g} frames/s on {scheme}://127.0.0.1:{sim.port}", err=True)
    sim.start()
    try:
        sim.join()
    except (BrokenPipeError, ConnectionResetError) as error:  # the client went away: say so, not the errno
        click.echo(f"Error: the client closed the connection after {sim.sent} of {total} frames ({error.strerror})",
                   err=True)
        raise click.exceptions.Exit(1) from None
    if sim.sent == 0:
        click.echo(f"Error: no client read a frame within --timeout {timeout:g} s: nothing sent", err=True)
        raise click.exceptions.Exit(1)
    click.echo(f"sent {sim.sent} frames", err=True)


@ssb.command("live")
@click.argument("source")
@click.option("--kv", type=VOLTAGE_KV, required=True, help="Accelerating voltage (kV).")
@click.option("--semiangle", type=SEMIANGLE_MRAD, required=True, help="Convergence semi-angle (mrad).")
@click.option("--scan-step", type=SCAN_STEP_A, required=True, help="Scan step (A).")
@click.option("--scan-shape", type=click.IntRange(1), nargs=2, default=None, metavar="ROWS COLS",
              help="The scan's rows and columns; default from the stream's header. Given, they must make the "
              "header's number of frames (there is no crop: a shape that disagrees is an error).")
@click.option("--protocol", type=click.Choice(["merlin", "dectris"]), default=None,
              help="For tcp://HOST:PORT: a Merlin (default) or a DECTRIS stream; zmq://HOST:PORT is DECTRIS.")
@click.option("--follow", is_flag=True, help="SOURCE is a .mib file being written: read it as it grows.")
@click.option("--rotation", type=ANGLE_DEG, default=None, help="Scan rotation (degrees); fitted when not given.")
@aberration_options
@click.option("--method", type=click.Choice(SSB_IMAGE_CHOICES), default="ssb",
              show_default=True, help="The image: each refreshed from the rows so far, but wdd (SSB during the scan, "
              "WDD of the whole scan at the end); icom takes no aberrations.")
@click.option("--refresh", type=NONNEGATIVE, default=1.0, show_default=True,
              help="Seconds between refreshes of the image and fit of the rows so far (0: only at the end).")
@click.option("--fit/--no-fit", default=True, show_default=True, help="Fit C10, C12 (and the rotation) live.")
@click.option("--fit-after", type=click.FloatRange(0.0, 1.0), default=0.25, show_default=True,
              help="Fraction of the rows before the first fit.")
@click.option("--tilt/--no-tilt", default=False, show_default=True, help="Also fit thickness and tilt at the end.")
@click.option("--final-fit", type=click.Choice(["auto", "cold", "warm"]), default="auto", show_default=True,
              help="The fit of the whole scan: the offline fit with its search (cold), Newton from the last "
              "partial-scan fit (warm: 0.08 s against 0.53 s at 512x512 on an H200, but it keeps the partial "
              "fit's basin), or warm when the last partial fit saw at least half the rows and 64 rows (auto).")
@click.option("--buffer", type=click.IntRange(16), default=65536, show_default=True,
              help="Frames the receive buffer holds before processing is declared behind.")
@click.option("--timeout", type=POSITIVE, default=10.0, show_default=True,
              help="Seconds a silent stream is waited for.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None, help="Final image .h5 file.")
@click.option("--fit-out", type=click.Path(dir_okay=False, path_type=Path), default=None, help="Final fit .json.")
@click.option("--view", is_flag=True, help="Also open the viewer's live mode (http://127.0.0.1:PORT/): the image "
              "builds up, the live fit is shown, the sliders work on the rows so far; Ctrl-C ends it.")
@click.option("--port", type=click.IntRange(1, 65535), default=8765, show_default=True, help="The viewer's port.")
@click.option("--decode", type=click.Choice(["auto", "device", "host"]), default="auto", show_default=True,
              help="Where a DECTRIS stream's bitshuffle-LZ4 frames are decoded: on the GPU (the compressed bytes go "
              "to the device), on the host, or auto (the GPU with --backend cuda).")
@click.option("--receivers", type=click.IntRange(1, 64), default=1, show_default=True,
              help="Processes receiving a DECTRIS stream (its PUSH socket deals the frames among them; measured "
              "on a 16-core host: ~4 for 120,000 frames/s, 6-8 for 150,000-230,000); a Merlin's TCP stream is read "
              "by one.")
@backend_option(help="Where G is built and the images and fits are made.")
def live_cmd(source, kv, semiangle, scan_step, scan_shape, protocol, follow, rotation, c10, c12, c12_angle, c30,
             method, refresh, fit, fit_after, tilt, final_fit, buffer, timeout, out, fit_out, view, port, decode,
             receivers, backend) -> None:
    """Reconstruct while the scan runs: SOURCE is tcp://HOST:PORT (Merlin), zmq://HOST:PORT (DECTRIS),
    or a file (with --follow, a .mib being written).

    Each refresh prints the rows so far, the fitted C10 and C12 and the frame rates; the end prints
    the frames dropped or out of order and the time from the last frame to the final image and fit."""
    from qora.ssb.live import LiveOptions, open_source, run_live
    from qora.ssb.live import RECEIVER_BATCH

    check_outputs(None, {"--out": (out, (".h5", ".hdf5")), "--fit-out": (fit_out, (".json",))})
    src = open_source(source, protocol=protocol, scan_shape=scan_shape, timeout=timeout, follow=follow,
                      processes=receivers, batch=RECEIVER_BATCH if receivers > 1 else 256)
    options = LiveOptions(refresh_s=refresh, method=method, fit=fit, fit_after=fit_after, tilt=tilt,
                          queue_frames=buffer, decode=decode, final_fit=final_fit)

    def show(update) -> None:
        s = update.statistics
        text = f"rows {update.rows}: received {s['received_fps']:.0f} frames/s, dropped {s['dropped']}"
        if update.fit is not None:
            p = update.fit["standard"]["parameters"]
            text += (f"; C10 {p['C10']:.1f} A, C12a {p['C12a']:.1f} A, C12b {p['C12b']:.1f} A, rotation "
                     f"{np.rad2deg(update.fit['rotation_rad']):.2f} deg")
        click.echo(text)

    settings = dict(kv=kv, alpha_mrad=semiangle, scan_step=scan_step,
                    rotation=None if rotation is None else np.deg2rad(rotation), backend=backend, options=options)
    click.echo(f"waiting for the scan's header from {source} (on a GPU its kernels are made first: ~15 s the first "
               "time on a machine)")
    if view:
        _live_view(src, settings, port, lambda result: _live_report(result, method, settings, out, fit_out,
                                                                    aberrations_from(c10, c12, c12_angle, c30)))
        return
    result = run_live(src, aberrations=aberrations_from(c10, c12, c12_angle, c30), on_update=show, **settings)
    _live_report(result, method, settings, out, fit_out, aberrations_from(c10, c12, c12_angle, c30))


def _live_view(source, settings: dict, port: int, report) -> None:
    """The live run behind the viewer's live mode, served on 127.0.0.1 until Ctrl-C."""
    from qora.viewer import require_viewer_extra, url_for
    from qora.viewer.app import make_app
    from qora.viewer.views import LiveSsbView

    uvicorn = require_viewer_extra()

    def ended(view) -> None:
        if view.result is not None:
            report(view.result)
        else:
            click.echo(f"Error: {view.live_status().get('error')}", err=True)
        click.echo("the viewer keeps the whole scan's session for the sliders; Ctrl-C ends it")

    live_view = LiveSsbView(source, on_end=ended, **settings)
    click.echo(f"qora view (live): {url_for('127.0.0.1', port)}")
    uvicorn.run(make_app(live_view), host="127.0.0.1", port=port, log_level="warning")


def _live_report(result, method, settings, out, fit_out, aberrations) -> None:
    """The end of a live run on the terminal, and its image and fit written."""
    import json

    from qora.io.atomic import atomic_path
    from qora.ssb import parameters_to_aberrations, write_image

    kv, semiangle, scan_step = settings["kv"], settings["alpha_mrad"], settings["scan_step"]
    s = result.statistics
    ends = s["after_last_frame"]
    click.echo(f"{result.report}; received {s['received']} frames at {s['received_fps']:.0f} frames/s, processed at "
               f"{s['processed_fps']:.0f} frames/s; final image and fit {result.latency_s:.3f} s after the last frame "
               f"({ends['backlog_frames']} frames still queued then, {ends['queue_s']:.3f} s to take them in)")
    if "receivers" in s:
        click.echo(f"frames per receiving process: {s['receivers']['per_process']}")
    if result.fit is not None:
        p = result.fit["standard"]["parameters"]
        click.echo(f"fit: C10 {p['C10']:.1f} A, C12a {p['C12a']:.1f} A, C12b {p['C12b']:.1f} A, rotation "
                   f"{np.rad2deg(result.fit['rotation_rad']):.2f} deg, agreement "
                   f"{result.fit['standard']['agreement']:.4f}")
    if out is not None:
        used = (parameters_to_aberrations(result.fit["standard"]["parameters"]) if result.fit is not None
                else aberrations)
        write_image(out, result.image, method=method, scan_step=scan_step, kv=kv, alpha_mrad=semiangle,
                    aberrations=used)
        click.echo(f"wrote {out}")
    if fit_out is not None:
        record = {"fit": None if result.fit is None else result.fit.to_dict(), "statistics": s, "frames": result.report.as_dict(), "latency_s": result.latency_s}
        with atomic_path(fit_out) as tmp:
            tmp.write_text(json.dumps(record, indent=2, default=float) + "\n")
        click.echo(f"wrote {fit_out}")
