"""``qora phase``: simulate, run and compare CDI reconstructions."""

from __future__ import annotations

from pathlib import Path

import click

from qora.cli.options import backend_option, exit_on_failures, scale_out_client, scale_out_options


@click.group("phase")
def phase() -> None:
    """CDI phase retrieval (ER, HIO, RAAR, shrinkwrap, multi-start)."""


@phase.command("simulate")
@click.option("--object", "name", type=click.Choice(["triangle", "prism", "cut_prism"]), default="triangle",
              show_default=True)
@click.option("--size", type=click.IntRange(16, 4096), default=64, show_default=True, help="Pixels per axis.")
@click.option("--photons", type=float, default=None, help="Total expected counts (Poisson noise); none = noise-free.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True, help="Output .cxi file.")
def simulate_cmd(name, size, photons, seed, out) -> None:
    """Write a test object's diffraction pattern (and the true object) to a CXI file."""
    from qora.phase import objects
    from qora.phase.files import write_pattern

    obj, intensity = objects.simulate(name, size, photons=photons, seed=seed)
    write_pattern(out, intensity, truth=obj)
    click.echo(f"wrote {out}: {name}, {intensity.shape}, total {intensity.sum():.4g} counts")


@phase.command("run")
@click.argument("data", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--mask", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="Mask file (nonzero = not measured); overrides a mask in DATA.")
@click.option("--support", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="Support file (.npy or the like); default: from the autocorrelation.")
@click.option("--recipe", default=None, help='E.g. "HIO**400 ER**100"; default: the documented default recipe.')
@click.option("--starts", type=click.IntRange(1, 10000), default=4, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--rank", type=click.Choice(["fourier", "free_llk"]), default="fourier", show_default=True)
@backend_option()
@click.option("--variant", type=click.Choice(["auto", "cpu", "naive", "fused", "graph", "batched", "half", "mixed",
                                              "callback"]), default="auto", show_default=True,
              help="Engine (docs/phase.md, 'On the GPU'); auto: cpu on the CPU, graph on the GPU.")
@click.option("--batch", default="auto", show_default=True,
              help="Starts iterated together in one batched transform, or 'auto' (up to 8 on the GPU "
              "for patterns of at most 2^20 pixels).")
@click.option("--keep-all", is_flag=True, help="Keep every start in the result file.")
@click.option("--out", type=click.Path(path_type=Path), required=True,
              help="Result .cxi file; with several DATA files, a directory (one NAME.cxi each).")
@click.option("--plot", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="PNG figure (one DATA file).")
@click.option("--quiet", is_flag=True, help="No progress bar.")
@scale_out_options
def run_cmd(data, mask, support, recipe, starts, seed, rank, backend, variant, batch, keep_all, out, plot,
            quiet, scheduler, workers, gpus) -> None:
    """Reconstruct the object of each pattern in DATA (.cxi, .h5, .npy, .npz, .tif, .edf).

    With --workers, --gpus or --scheduler the patterns (or, for one pattern, its starts) are
    spread over a Dask cluster (docs/scale-out.md); a file that fails is reported and the rest
    finish.
    """
    from qora.io.patterns import load_mask, load_pattern
    from qora.phase import reconstruct
    from qora.phase.files import plot_result, write_result
    from qora.progress import tqdm_progress

    batch = batch if batch == "auto" else _positive_int(batch, "--batch")
    if len(data) > 1 and plot is not None:
        raise click.UsageError("--plot draws one result: give one DATA file (or plot each result afterwards)")
    with scale_out_client(scheduler, workers, gpus) as client:
        if client is not None or len(data) > 1:
            _run_many(client, data, out, quiet=quiet, mask=mask, support=support, recipe=recipe, starts=starts,
                      seed=seed, rank=rank, backend=backend, variant=variant, batch=batch, keep_all=keep_all)
            if plot is not None:
                from qora.phase.files import read_result

                plot_result(plot, read_result(out))
                click.echo(f"wrote {plot}")
            return
    try:
        intensity, file_mask = load_pattern(data[0], mask=mask)
        sup = load_mask(support) if support is not None else None
        with tqdm_progress(disable=quiet) as bar:
            result = reconstruct(intensity, mask=file_mask, support=sup, recipe=recipe, starts=starts, seed=seed,
                                 rank=rank, backend=backend, variant=variant, batch=batch, keep_all=keep_all, progress=bar)
    except (ValueError, FileNotFoundError) as exc:
        raise click.ClickException(str(exc)) from exc
    write_result(out, result)
    click.echo(f"best start {result.best} of {result.starts}: Fourier error {result.fourier_error:.3e}; wrote {out}")
    if plot is not None:
        plot_result(plot, result)
        click.echo(f"wrote {plot}")


def _run_many(client, data, out, *, quiet, mask, support, starts, batch, **options) -> None:
    """Several patterns (or one pattern's starts over the workers): one result file each; a file
    that fails is reported, the others are written; the exit status is 1 if any failed."""
    from qora.io.patterns import load_mask
    from qora.phase.files import write_result
    from qora.progress import tqdm_progress

    if mask is not None:
        raise click.UsageError("--mask applies to one pattern; give each file its own mask inside it")
    sup = load_mask(support) if support is not None else None
    batch = 1 if batch == "auto" else batch
    if client is None:  # several files, no cluster: one after the other in this process
        from qora.distributed.items import ItemReport
        from qora.phase import reconstruct
        from qora.io.patterns import load_pattern

        report = ItemReport()
        for path in data:
            try:
                intensity, file_mask = load_pattern(path)
                with tqdm_progress(disable=quiet, leave=False) as bar:
                    result = reconstruct(intensity, mask=file_mask, support=sup, starts=starts, batch=batch,
                                         progress=bar, **options)
                out.mkdir(parents=True, exist_ok=True)
                write_result(out / f"{path.stem}.cxi", result)
                report.done[path.stem] = result
            except (ValueError, FileNotFoundError, OSError) as exc:
                report.failed[path.stem] = f"{type(exc).__name__}: {exc}"
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
    click.echo(report.summary().split("\n")[0] + f"; results in {out}")
    exit_on_failures(report.failed)


@phase.command("compare")
@click.argument("result", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.argument("reference", type=click.Path(exists=True, dir_okay=False, path_type=Path))
def compare_cmd(result, reference) -> None:
    """Relative object error of RESULT against REFERENCE (after phase, translation and twin)."""
    from qora.phase.analysis import align
    from qora.phase.files import read_result, read_truth

    import numpy as np

    obj = read_result(result).object
    ref = read_truth(reference)
    if obj.shape != ref.shape:
        raise click.ClickException(f"shapes differ: {obj.shape} and {ref.shape}")
    aligned, info = align(obj, ref)
    err = float(np.linalg.norm(aligned - ref) / np.linalg.norm(ref))
    click.echo(f"relative object error {err:.3e} (twin: {info['twin']}, shift: "
               f"{', '.join(f'{s:.2f}' for s in info['shift'])} px, phase {info['phase']:.3f} rad)")


def _positive_int(text: str, name: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise click.BadParameter(f"{text!r} is neither 'auto' nor an integer", param_hint=name) from None
    if value < 1:
        raise click.BadParameter(f"must be at least 1, got {value}", param_hint=name)
    return value
