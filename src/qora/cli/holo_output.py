"""Where ``qora holo reconstruct``'s volumes go: the room checked before any work, the writers by suffix (HDF5,
TIFF, a Zarr series store, a Dask cluster's series) and the lines printed after."""

from __future__ import annotations

import click
import numpy as np

from qora.cli.holo_fields import written_line
from qora.cli.options import exit_on_failures, scale_out_client

# an index volume's bytes per voxel as written (float32; the absorption beside it where the index is complex,
# gzip only shrinks them): the disk checked before the work is this much per volume
VOLUME_BYTES_PER_VOXEL = 8


def before_work(out, suffix: str, geometry, stack, recorded: dict, *, pose_known: bool = True) -> None:
    """Refuse, before any work, an output that cannot take the volumes: a series store made another way, or a
    folder without the disk for them (the volumes were computed, then lost to a full disk). Without
    ``pose_known`` (the axis is still to be fitted) the store is checked when it is written, with the fitted pose."""
    from qora.io.validate import disk_needed

    if suffix == ".zarr" and pose_known:
        from qora.distributed.holo import SeriesStore

        SeriesStore(out).check(geometry, recorded)
    volumes = stack.shape[0] if stack.ndim == 4 else 1
    n = geometry.n
    disk_needed(out, volumes * VOLUME_BYTES_PER_VOXEL * n**3, f"{volumes} index volume{'s' if volumes > 1 else ''} "
                f"of {n}^3 voxels")


def recorded_options(sideband, hp, hologram_n, options, *, iterations, tv_weight, batch) -> dict:
    """How the volumes are made, as a series store records it (the cluster's record for the Fourier methods)."""
    from qora.distributed.holo import series_options

    if options is not None:
        made = options.to_dict()
    else:
        made = {"method": "bpm", "iterations": int(iterations), "tv_weight": tv_weight, "batch": batch}
    return series_options(sideband, hp, hologram_n, made)


def write_result(H, out, suffix, result, g, *, recorded) -> None:
    """The volume(s) into ``out`` by its suffix: a TIFF stack, a series store, or the result's own HDF5 file."""
    if suffix in (".tif", ".tiff"):
        if result.index.ndim != 3:
            raise click.UsageError("a series of volumes goes to .h5 or .zarr, not .tif")
        H.write_volume_tiff(out, result.index, g)
    elif suffix == ".zarr":
        from qora.distributed.holo import write_series

        volumes = result.index if result.index.ndim == 4 else result.index[None]
        write_series(out, volumes, g, recorded)
    else:
        result.save(out)  # the index, its geometry, method and info, the absorption beside it


def series_on_cluster(stack, backgrounds, geometry, out, cluster, *, quiet, **options) -> None:
    from qora.distributed.holo import SeriesStore, reconstruct_series
    from qora.progress import tqdm_progress

    with scale_out_client(*cluster) as client, tqdm_progress(disable=quiet) as bar:
        report = reconstruct_series(stack, backgrounds, geometry, store=out, client=client, progress=bar, **options)
    if "axis_fit" in report.info:
        click.echo(report.info["axis_fit"])
    click.echo(report.summary().split("\n")[0])
    click.echo(f"{len(SeriesStore(out).index())} of {len(stack)} time points in {out}")
    exit_on_failures(report.failed, "time point ")


def report(H, out, result, g, *, method, tv_weight, truth, plot) -> None:
    """The written line (with the RMSE against a simulated truth) and the slices' PNG."""
    msg = written_line(out, result, method, tv_weight)
    if truth is not None and truth.shape == result.index.shape[-3:]:
        msg += f"; RMSE against the simulated truth {np.sqrt(np.mean((result.index - truth) ** 2)):.2e}"
    click.echo(msg)
    if plot is not None:
        H.plot_volume(plot, result.index if result.index.ndim == 3 else result.index[-1], g, truth=truth,
                      title=f"{method.upper()}, {result.approximation}, {g.count} angles")
        click.echo(f"wrote {plot}")
