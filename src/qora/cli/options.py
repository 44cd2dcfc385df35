"""Options shared by the commands: ``--backend`` on every command that computes, and the scale-out
options of the long commands (``phase run``, ``holo reconstruct``, ``ssb fit``). Plain click: Dask is
imported only when a scale-out option is used."""

from __future__ import annotations

import math
from contextlib import nullcontext

import click

__all__ = ["backend_option", "scale_out_options", "scale_out_client", "exit_on_failures", "Finite", "FINITE", "POSITIVE",
           "NONNEGATIVE"]

BACKENDS = ("auto", "cpu", "cuda")


class Finite(click.FloatRange):
    """A float option that must be finite (click's FloatRange lets NaN and Inf through) and within the
    range given, with messages a user reads at once ("-1 is not > 0")."""

    name = "float"

    def convert(self, value, param, ctx):
        try:
            x = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number", param, ctx)
        if not math.isfinite(x):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        if self.min is not None and (x <= self.min if self.min_open else x < self.min):
            self.fail(f"{x:g} is not {'>' if self.min_open else '>='} {self.min:g} (the range is "
                      f"{self._describe_range()})", param, ctx)
        if self.max is not None and (x >= self.max if self.max_open else x > self.max):
            self.fail(f"{x:g} is not {'<' if self.max_open else '<='} {self.max:g} (the range is "
                      f"{self._describe_range()})", param, ctx)
        return x

    def _describe_range(self) -> str:
        # click's own text for a range without bounds is "x<=None", shown in every such option's help
        if self.min is None and self.max is None:
            return "finite"
        return super()._describe_range()


FINITE = Finite()
POSITIVE = Finite(min=0, min_open=True)
NONNEGATIVE = Finite(min=0)


def backend_option(default: str = "auto", help: str | None = None):
    """``--backend auto|cpu|cuda``, the one definition every command uses."""
    return click.option("--backend", type=click.Choice(BACKENDS), default=default, show_default=True,
                        help=help or "Where to compute: auto is CUDA when CuPy sees a GPU, else the CPU.")


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


def exit_on_failures(failed: dict, what: str = "") -> None:
    """Name each failed item of a scale-out report on stderr, then exit with status 1 if any failed."""
    for name, error in failed.items():
        click.echo(f"FAILED {what}{name}: {error}", err=True)
    if failed:
        raise SystemExit(1)
