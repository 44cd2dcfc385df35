"""Options shared by the commands: ``--backend`` on every command that computes, and the scale-out
options of the long commands (``phase run``, ``holo reconstruct``, ``ssb fit``). Plain click: Dask is
imported only when a scale-out option is used."""

from __future__ import annotations

import math
from contextlib import nullcontext

import click

from qora.io import validate

__all__ = ["SSB_IMAGE_CHOICES", "backend_option", "scale_out_options", "scale_out_client", "exit_on_failures", "Finite", "FINITE", "POSITIVE",
           "NONNEGATIVE", "ANGLE_DEG", "ABERRATION_A", "NONNEGATIVE_ABERRATION_A", "SCAN_STEP_A"]

BACKENDS = ("auto", "cpu", "cuda")
# qora.ssb.PREVIEW_METHODS written out, so that the CLI need not import the engine to show its options (a test holds
# the two equal)
SSB_IMAGE_CHOICES = ("ssb", "parallax", "obf", "icom", "wdd")


class Finite(click.FloatRange):
    """A float option that must be finite (click's FloatRange lets NaN and Inf through) and within the
    range given, with messages a user reads at once ("-1 is not > 0"). ``why``: the reason for the
    range (from the physics), said after a value outside it."""

    name = "float"

    def __init__(self, min=None, max=None, min_open: bool = False, max_open: bool = False, clamp: bool = False,
                 why: str | None = None) -> None:
        super().__init__(min, max, min_open=min_open, max_open=max_open, clamp=clamp)
        self.why = why

    def convert(self, value, param, ctx):
        try:
            x = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number", param, ctx)
        if not math.isfinite(x):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        why = f": {self.why}" if self.why else ""
        if self.min is not None and (x <= self.min if self.min_open else x < self.min):
            self.fail(f"{x:g} is not {'>' if self.min_open else '>='} {self.min:g} (the range is "
                      f"{self._describe_range()}){why}", param, ctx)
        if self.max is not None and (x >= self.max if self.max_open else x > self.max):
            self.fail(f"{x:g} is not {'<' if self.max_open else '<='} {self.max:g} (the range is "
                      f"{self._describe_range()}){why}", param, ctx)
        return x

    def _describe_range(self) -> str:
        # click's own text for a range without bounds is "x<=None", shown in every such option's help
        if self.min is None and self.max is None:
            return "finite"
        if self.why and self.min is not None and self.max is not None:  # the physical ranges: 1e+10, not 10000000000.0
            return f"{self.min:g}{'<' if self.min_open else '<='}x{'<' if self.max_open else '<='}{self.max:g}"
        return super()._describe_range()


FINITE = Finite()
POSITIVE = Finite(min=0, min_open=True)
NONNEGATIVE = Finite(min=0)
# physical ranges (the reason is said with a value outside them)
ANGLE_DEG = Finite(min=-1e6, max=1e6, why="an angle counts modulo 360 deg; beyond 1e6 deg it is no angle anyone "
                   "means, and far beyond a float keeps none of it (at 1e308 deg the nearest floats are 2e292 deg "
                   "apart); give the angle reduced to -360..360 deg")
_LENS = ("an aberration beyond 1e10 A (1 m) is no electron lens's (an uncorrected objective's C30 is about 1 mm, "
         "1e7 A); the values are in A")
ABERRATION_A = Finite(min=-1e10, max=1e10, why=_LENS)
NONNEGATIVE_ABERRATION_A = Finite(min=0, max=1e10, why=_LENS)
VOLTAGE_KV, SEMIANGLE_MRAD = (Finite(min=low, max=high, why=why) for low, high, why in (validate.VOLTAGE_KV,
                                                                                       validate.SEMIANGLE_MRAD))
SCAN_STEP_A = Finite(min=0.01, max=1e7, why="a scan step below 0.01 A is far below any probe's size (the smallest "
                     "are ~0.5 A), above 1e7 A (1 mm) beyond any STEM scan; the step is in A")


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
