"""The command line's scale-out options, shared by the long commands (``phase run``, ``holo
reconstruct``, ``ssb fit``). Plain click: Dask is imported only when one of them is used."""

from __future__ import annotations

from contextlib import nullcontext

import click

__all__ = ["scale_out_options", "scale_out_client"]


def scale_out_options(command):
    """Add ``--scheduler ADDRESS``, ``--workers N`` and ``--gpus N|all`` to a click command."""
    command = click.option("--gpus", default=None, metavar="N|all",
                           help="Run on a local Dask cluster of one worker per GPU (N GPUs, or all).")(command)
    command = click.option("--workers", type=click.IntRange(1, 4096), default=None,
                           help="Run on a local Dask cluster of N worker processes.")(command)
    command = click.option("--scheduler", default=None, metavar="ADDRESS",
                           help="Run on the Dask cluster of this scheduler (e.g. tcp://host:8786).")(command)
    return command


def scale_out_client(scheduler, workers, gpus):
    """A context giving a Dask client for the options given, or None when none was given."""
    given = [name for name, v in (("--scheduler", scheduler), ("--workers", workers), ("--gpus", gpus)) if v]
    if not given:
        return nullcontext(None)
    if len(given) > 1:
        raise click.UsageError(f"give one of --scheduler, --workers and --gpus, not {' and '.join(given)}")
    if gpus is not None and gpus != "all":
        try:
            gpus = int(gpus)
        except ValueError:
            raise click.BadParameter(f"{gpus!r} is neither 'all' nor a number", param_hint="--gpus") from None
    from qora.distributed.cluster import connect

    return connect(scheduler, workers=workers, gpus=gpus)
