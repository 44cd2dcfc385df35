"""``qora phase``: simulate, run and compare CDI reconstructions."""

from __future__ import annotations

import math
from pathlib import Path

import click

from qora.cli.options import backend_option, exit_on_failures, scale_out_client, scale_out_options
from qora.cli.phase_bragg import bragg_cmd
from qora.phase import DEFAULT_RECIPE


@click.group("phase")
def phase() -> None:
    """CDI phase retrieval (ER, HIO, RAAR, shrinkwrap, multi-start)."""


phase.add_command(bragg_cmd)


RESULT_SUFFIXES = (".cxi", ".h5", ".hdf5", ".nxs")
QUIET_HELP = "No progress bar (for scripts and logs); errors and the summary are still printed."


@phase.command("simulate")
@click.option("--object", "name", type=click.Choice(["triangle", "prism", "cut_prism"]), default="triangle",
              show_default=True)
@click.option("--size", type=click.IntRange(16, 4096), default=64, show_default=True,
              help="Pixels per axis (prism and cut_prism are 3D: size^3 voxels; the memory needed is checked "
              "first).")
@click.option("--photons", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Total expected counts (Poisson noise); none = noise-free.")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="Output .cxi file (CXI/HDF5).")
def simulate_cmd(name, size, photons, seed, out) -> None:
    """Write a test object's diffraction pattern (and the true object) to a CXI file."""
    from qora.io.validate import disk_needed, outputs_apart
    from qora.phase import objects
    from qora.phase import write_pattern

    _result_name(out, "--out")
    outputs_apart([out], [])
    objects.check_memory(name, size)
    disk_needed(out, PATTERN_BYTES_PER_PIXEL * size ** objects.NDIM[name], f"the {name} pattern at {size} pixels "
                "per axis", "write it elsewhere, free some space, or a smaller size (--size)")
    obj, intensity = objects.simulate(name, size, photons=photons, seed=seed)
    write_pattern(out, intensity, truth=obj)
    click.echo(f"wrote {out}: {name}, {intensity.shape}, total {intensity.sum():.4g} counts")


@phase.command("run")
@click.argument("data", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--mask", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="Mask file (nonzero = not measured); overrides a mask in DATA.")
@click.option("--support", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="Support file (.npy or the like; boolean, or 0 and 1 alone); default: from the autocorrelation.")
@click.option("--recipe", default=None, help='E.g. "HIO**400 ER**100", or a name: default, pynx-rule (PyNX\'s '
              'support rule as a recipe of ours), few-photons, partial-coherence (psf model on the ER stages), '
              'real-envelope (the support of a real, non-negative object found from the pattern alone: a complex '
              'envelope, then positivity; docs/phase.md); '
              'stage options as in docs/phase.md, e.g. ER(band=1)**300 for the noise-aware modulus; '
              'default: real-envelope where the pattern is centrosymmetric (a real object: the choice is printed), '
              'else the documented stage recipe ' + DEFAULT_RECIPE + ' (few-photons for counts below '
              '1000 per speckle; run again with the psf model when the counts prove blurred by a partially '
              'coherent beam).')
@click.option("--starts", type=click.IntRange(1, 10000), default=4, show_default=True)
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--rank", type=click.Choice(["fourier", "free_llk"]), default="fourier", show_default=True)
@backend_option()
@click.option("--variant", type=click.Choice(["auto", "cpu", "naive", "fused", "graph", "batched", "half", "mixed",
                                              "callback"]), default="auto", show_default=True,
              help="Engine (docs/phase.md, 'On the GPU'); auto: cpu on the CPU, graph on the GPU.")
@click.option("--batch", default="auto", show_default=True,
              help="Starts iterated together in one batched transform, or 'auto' (up to 8 on the GPU "
              "for patterns of at most 2^20 pixels); a smaller batch needs less memory.")
@click.option("--keep-all", is_flag=True, help="Keep every start in the result file.")
@click.option("--out", type=click.Path(path_type=Path), required=True,
              help="Result .cxi file; with several DATA files, a directory (one NAME.cxi each). Never one of "
              "the inputs.")
@click.option("--plot", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="PNG figure (one DATA file).")
@click.option("--quiet", is_flag=True, help=QUIET_HELP)
@click.option("--dark", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="Dark frame(s) file: subtracted (a stack is averaged) before anything else (docs/phase.md, "
              "'Measurements in').")
@click.option("--flat", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="Flat-field file: DATA is divided by it (normalised to mean 1); pixels where it is <= 0 are masked.")
@click.option("--saturation", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Counts at or above which a pixel is saturated and masked.")
@click.option("--sum-frames", is_flag=True, help="DATA is a stack of 2D frames (F, H, W) of one pattern: sum them.")
@click.option("--bin", "binning", type=click.IntRange(1, 64), default=1, show_default=True,
              help="Bin the pattern by this factor per axis.")
@click.option("--centre", is_flag=True, help="Centre on the pattern's centre of mass and crop to a fast FFT size "
              "(implied by --dark, --flat, --saturation, --sum-frames and --bin).")
@click.option("--wavelength", type=click.FloatRange(min=0, min_open=True), default=None, help="Wavelength, m.")
@click.option("--distance", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Sample-detector distance, m.")
@click.option("--pixel-size", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Detector pixel pitch, m; with --wavelength and --distance the object's pixel size goes into "
              "the result file and the plot's axes.")
@click.option("--consensus", type=click.IntRange(2, 100), default=None,
              help="Align the best K starts pairwise and print their object errors (do the runs agree?); "
              "keeps every start in memory.")
@scale_out_options
def run_cmd(data, mask, support, recipe, starts, seed, rank, backend, variant, batch, keep_all, out, plot,
            quiet, dark, flat, saturation, sum_frames, binning, centre, wavelength, distance, pixel_size, consensus,
            scheduler, workers, gpus) -> None:
    """Reconstruct the object of each pattern in DATA (.cxi, .h5, .npy, .npz, .tif, .edf).

    The memory a run needs is estimated first (the GPU's free memory on the CUDA backend): a run
    that cannot fit stops at once, naming the option that shrinks it (--batch, --starts). One
    progress bar follows the whole run (all starts and stages; --quiet for none).

    With several DATA files, or with --workers, --gpus or --scheduler (the patterns or, for one
    pattern, its starts spread over a Dask cluster, docs/scale-out.md), a file that fails is
    reported and the rest finish; the exit status is then 1.
    """
    from qora.io.patterns import load_pattern, load_support
    from qora.phase import reconstruct
    from qora.phase import plot_result, write_result
    from qora.progress import tqdm_progress

    batch = batch if batch == "auto" else _positive_int(batch, "--batch")
    preprocessing = any(v is not None for v in (dark, flat, saturation)) or sum_frames or binning > 1 or centre
    geometry = [v is not None for v in (wavelength, distance, pixel_size)]
    if any(geometry) and not all(geometry):
        raise click.UsageError("the object's pixel size needs all of --wavelength, --distance and --pixel-size")
    if (preprocessing or any(geometry) or consensus) and (len(data) > 1 or scheduler or workers or gpus):
        raise click.UsageError("preprocessing, geometry and --consensus apply to one DATA file run in this process")
    if len(data) > 1 and plot is not None:
        raise click.UsageError("--plot draws one result: give one DATA file (or plot each result afterwards)")
    total = _iterations(recipe) * starts
    inputs = [*data, mask, support]
    with scale_out_client(scheduler, workers, gpus) as client:
        if client is not None or len(data) > 1:
            _outputs_checked(data, out, plot, inputs, many=len(data) > 1)
            _run_many(client, data, out, quiet=quiet, mask=mask, support=support, recipe=recipe, starts=starts,
                      seed=seed, rank=rank, backend=backend, variant=variant, batch=batch, keep_all=keep_all,
                      total=total)
            if plot is not None:
                from qora.phase import read_result

                plot_result(plot, read_result(out))
                click.echo(f"wrote {plot}")
            return
    _outputs_checked(data, out, plot, inputs, many=False)
    intensity, file_mask = load_pattern(data[0], mask=mask)
    steps = None
    if preprocessing:
        from qora.phase import preprocess

        prepared = preprocess(intensity, mask=file_mask, dark=load_pattern(dark)[0] if dark else None,
                              flat=load_pattern(flat)[0] if flat else None, saturation=saturation,
                              sum_frames=sum_frames, bin=binning, crop=True)
        intensity, file_mask, steps = prepared.intensity, prepared.mask, prepared.steps
        click.echo(f"preprocessed: {steps['frames']} frame(s), {steps['saturated']} saturated and {steps['dead']} "
                   f"dead pixels masked, bin {binning}, centred on {[round(c, 1) for c in steps['centre']]}, "
                   f"cropped to {tuple(steps['crop']['size'])}")
    sup = load_support(support) if support is not None else None
    _room_for_result(out, intensity.shape, starts if keep_all else 1)
    with tqdm_progress(disable=quiet) as bar:
        bar("preparing", 0, total, {})  # the bar (and its average rate) starts with the run
        result = reconstruct(intensity, mask=file_mask, support=sup, recipe=recipe, starts=starts, seed=seed,
                             rank=rank, backend=backend, variant=variant, batch=batch,
                             keep_all=keep_all or consensus is not None, progress=bar)
    from qora.phase import FEW_PHOTONS_RECIPE, Recipe, is_default

    if result.choice:  # the default chose the recipe by the pattern (e.g. a real object's search)
        click.echo(result.choice)
    if is_default(recipe) and result.recipe == str(Recipe.parse(FEW_PHOTONS_RECIPE)):
        click.echo("few counts (below 1000 photons per speckle): ran the few-photons recipe")
    if result.coherence_width is not None:
        kept = "kept the coherent run" in result.choice  # its rerun fitted worse (the choice line above says so)
        click.echo(f"coherence check: a blur of {result.coherence_width:.2f} px fits the coherent run best"
                   + (" -> partially coherent beam: ran the partial-coherence recipe" if result.psf is not None
                      else " -> the rerun fitted worse" if kept else " (coherent)"))
    if result.psf is not None:
        click.echo(f"partial coherence: the kernel found has a peak of {float(result.psf.max()):.3g} (sum 1)")
    if consensus is not None:
        from qora.phase import consensus as agreement

        scores = result.final_errors if rank == "fourier" else result.free_llk
        c = agreement(result.objects, scores, keep=consensus)
        click.echo(f"consensus of starts {c['starts']}: aligned object error median {c['median']:.3g}, "
                   f"max {c['max']:.3g}")
        if not keep_all:
            result.objects = result.supports = None
    if all(geometry):
        from qora.phase import object_pixel_size

        result.pixel_size = object_pixel_size(wavelength=wavelength, distance=distance, pixel_size=pixel_size,
                                              shape=intensity.shape, bin=binning)
        click.echo("object pixel size: " + " x ".join(f"{d * 1e9:.3g}" for d in result.pixel_size) + " nm")
    if steps is not None:
        result.preprocessing = steps
    write_result(out, result)
    of_model = " (of its intensity blurred by the fitted psf)" if result.blurred_model else ""
    click.echo(f"best start {result.best} of {result.starts}: Fourier error {result.fourier_error:.3e}{of_model}; "
               f"wrote {out}")
    _echo_trust(result)
    if plot is not None:
        plot_result(plot, result)
        click.echo(f"wrote {plot}")


# what the files hold per pixel, as written (gzip only shrinks them): a pattern (float32) with its true object
# (complex64); a result's object (complex64) and support (uint8) per start kept
PATTERN_BYTES_PER_PIXEL = 12
RESULT_BYTES_PER_PIXEL = 9


def _room_for_result(out, shape, kept: int) -> None:
    """Refuse, before the run, a result file its folder has no disk for (it used to be found after the run)."""
    from qora.io.validate import disk_needed

    disk_needed(out, RESULT_BYTES_PER_PIXEL * math.prod(shape) * kept + 2**20,
                f"the result ({kept} start{'s' if kept > 1 else ''} of a {'x'.join(map(str, shape))} pattern)",
                "write it elsewhere or free some space" + (", or no --keep-all" if kept > 1 else ""))


def _echo_trust(result) -> None:
    """The lines that say whether to trust the result: do the starts agree, did the best one converge."""
    if result.agreement is not None:
        line = result.agreement["message"]
        click.echo(("warning: " if result.agreement["reproducible"] is False else "") + line)
        if result.agreement.get("resolution_px"):
            click.echo(f"PRTF of the agreeing starts falls below 1/e at a period of {result.agreement['resolution_px']:.3g} px")
    if result.convergence is not None and not result.convergence["converged"]:
        click.echo("warning: best start " + result.convergence["message"])


def _iterations(recipe) -> int:
    from qora.phase import is_envelope, named_recipe

    if is_envelope(recipe):
        from qora.phase import ENVELOPE_ITERATIONS as ITERATIONS

        return ITERATIONS
    return named_recipe(recipe).iterations


def _result_name(path: Path, option: str, suffixes=RESULT_SUFFIXES, what="a CXI/HDF5 file") -> None:
    from qora.io.errors import OutputError

    if path.suffix.lower() not in suffixes:
        raise OutputError(f"{option} {path}: is written as {what}; give a name ending in {', '.join(suffixes)}")


def _outputs_checked(data, out: Path, plot, inputs, *, many: bool) -> None:
    """Refuse, before any work, an output that would replace an input, a file where a folder is
    needed (and the reverse), two results of one name, or a format the result is not written in."""
    from qora.io.errors import OutputError
    from qora.io.validate import outputs_apart

    if plot is not None:
        _result_name(plot, "--plot", (".png",), "a PNG image")
    if not many:
        if out.is_dir():
            raise OutputError(f"the output {out} is a folder; with one DATA file --out is the result file "
                              f"(e.g. {out / (data[0].stem + '.cxi')})")
        _result_name(out, "--out")
        outputs_apart([out, plot], inputs)
        if plot is not None and out.resolve() == plot.resolve():
            raise OutputError(f"--out and --plot are the same file {out}")
        return
    if out.exists() and not out.is_dir():
        raise OutputError(f"the output {out} is a file; with several DATA files --out is a folder "
                          "(one NAME.cxi each)")
    stems: dict = {}
    for path in data:
        if path.stem in stems:
            raise OutputError(f"{stems[path.stem]} and {path} would both be written to {out / (path.stem + '.cxi')}; "
                              "rename one")
        stems[path.stem] = path
    outputs_apart([out / f"{stem}.cxi" for stem in stems], inputs)


def _run_many(client, data, out, *, quiet, mask, support, starts, batch, total, **options) -> None:
    """Several patterns (or one pattern's starts over the workers): one result file each; a file
    that fails is reported, the others are written; the exit status is 1 if any failed."""
    import time

    from qora.io.patterns import load_support
    from qora.phase import write_result
    from qora.progress import tqdm_progress

    if mask is not None:
        raise click.UsageError("--mask applies to one pattern; give each file its own mask inside it")
    sup = load_support(support) if support is not None else None
    batch = 1 if batch == "auto" else batch
    if client is None:  # several files, no cluster: one after the other in this process
        from qora.cli.errors import USER_ERRORS, one_line
        from qora.distributed.items import ItemReport
        from qora.io.patterns import load_pattern
        from qora.phase import reconstruct

        report = ItemReport(where="in this process, one file after another")
        t0 = time.perf_counter()
        with tqdm_progress(disable=quiet) as bar:
            bar("preparing", 0, total * len(data), {})
            for i, path in enumerate(data):
                def progress(stage, done, _total, metrics, i=i, path=path):  # one bar over every file
                    return bar(f"{path.name} ({i + 1} of {len(data)}), {stage}", i * total + done, total * len(data),
                               metrics)

                try:
                    intensity, file_mask = load_pattern(path)
                    result = reconstruct(intensity, mask=file_mask, support=sup, starts=starts, batch=batch,
                                         progress=progress, **options)
                    write_result(out / f"{path.stem}.cxi", result)
                    report.done[path.stem] = result
                except Exception as exc:  # noqa: BLE001 - a file fails alone, named; the others go on
                    kind = "" if isinstance(exc, USER_ERRORS) else "internal error, "
                    report.failed[path.stem] = f"{kind}{type(exc).__name__}: {one_line(exc)}"
        report.seconds = time.perf_counter() - t0
    else:
        from qora.distributed.phase import reconstruct_many

        one = len(data) == 1
        workers = len(client.scheduler_info(n_workers=-1)["workers"])
        per = -(-starts // workers) if one else None  # one pattern: its starts split over the workers
        with tqdm_progress(disable=quiet) as bar:
            report = reconstruct_many(list(data), client=client, starts=starts, starts_per_task=per, support=sup,
                                      batch=batch, out_dir=None if one else out, progress=bar, **options)
        if one and report.done:
            write_result(out, next(iter(report.done.values())))
    for name, result in report.done.items():
        click.echo(f"{name}: best start {result.best} of {result.starts}, Fourier error {result.fourier_error:.3e}")
        _echo_trust(result)
    click.echo(report.summary().split("\n")[0] + f"; results in {out}")
    exit_on_failures(report.failed)


@phase.command("compare")
@click.argument("result", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.argument("reference", type=click.Path(exists=True, dir_okay=False, path_type=Path))
def compare_cmd(result, reference) -> None:
    """Relative object error of RESULT against REFERENCE after phase, translation, twin and the global scale.

    The scale is removed because a reconstruction's amplitude is in sqrt(counts) of its pattern while the
    reference may be in any unit (a simulated object before its photon scaling); the factor is printed.
    """
    from qora.phase import read_result, read_truth, scaled_error

    obj = read_result(result).object
    ref = read_truth(reference)
    if obj.shape != ref.shape:
        raise click.ClickException(f"shapes differ: {obj.shape} and {ref.shape}")
    err, info = scaled_error(obj, ref)
    click.echo(f"relative object error {err:.3e} after removing the global scale (x {info['scale']:.4g}), the phase "
               f"({info['phase']:.3f} rad), the translation ({', '.join(f'{s:.2f}' for s in info['shift'])} px) "
               f"and the twin ({'taken' if info['twin'] else 'not taken'})")


def _positive_int(text: str, name: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise click.BadParameter(f"{text!r} is neither 'auto' nor an integer", param_hint=name) from None
    if value < 1:
        raise click.BadParameter(f"must be at least 1, got {value}", param_hint=name)
    return value
