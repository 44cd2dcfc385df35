"""The units of work of a run, for one progress bar over the whole run.

A run (one stack, a time series, a BPM inversion with its start) reports ``done`` of ``total`` units
for the whole run: one unit for the fields, one for the first-order field, one per solver iteration
(Gerchberg-Papoulis or FISTA; none for "plain"), one per BPM step. A part of the run (a stack of a
series, the Rytov start of a BPM inversion) reports through :class:`Span`, which shifts its counts
by what came before and names it in the stage text ("stack 3 of 8: gp").
"""

from __future__ import annotations

__all__ = ["solve_units", "stack_units", "Span", "span", "TV_SEARCH_SOLVES"]

TV_SEARCH_SOLVES = 3  # FISTA solves of the TV weight's search (qora.holo.regularisation: floor, start, predicted)


def solve_units(options) -> int:
    """Units of the solver: its iterations ("gp", "tv"), those of every solve of the TV weight's search
    (``tv_weight="auto"``: :data:`TV_SEARCH_SOLVES` solves), none for "plain"."""
    if options.method == "plain":
        return 0
    solves = TV_SEARCH_SOLVES if options.method == "tv" and options.tv_weight == "auto" else 1
    return solves * int(options.iterations)


def stack_units(options) -> int:
    """Units of one hologram stack: the fields, the first-order field, the solver's iterations."""
    return 2 + solve_units(options)


class Span:
    """The progress of a part of a run: ``(stage, done, total)`` of the part becomes ``(prefix + stage,
    offset + done, run_total)``; what the run's callback returns is passed back."""

    def __init__(self, progress, offset: int, total: int, prefix: str = "") -> None:
        self.progress, self.offset, self.total, self.prefix = progress, int(offset), int(total), prefix

    def __call__(self, stage, done, total, metrics=None):
        return self.progress(self.prefix + stage, self.offset + int(done), self.total, dict(metrics or {}))


def prefixed(progress, prefix: str):
    """``progress`` for a part counted apart: its own ``(stage, done, total)``, the stage named ``prefix + stage``;
    None when there is no progress to report to."""
    if progress is None:
        return None
    return lambda stage, done, total, metrics=None: progress(prefix + stage, done, total, dict(metrics or {}))


def span(progress, offset: int, total: int, prefix: str = ""):
    """A :class:`Span` of ``progress``, or None when there is no progress to report to."""
    return None if progress is None else Span(progress, offset, total, prefix)
