"""The one progress signature shared by every engine.

Long work calls ``progress(stage, done, total, metrics) -> bool``: ``stage`` names
the phase of the work ("HIO", "reconstruct", "fit"), ``done`` of ``total`` units
are finished, ``metrics`` is a small dict of numbers worth showing (an error, a
loss). Returning ``False`` asks the work to stop at the next safe point; any
other return value (``None`` included) continues. :func:`tqdm_progress` turns
this into a progress bar for the command line.
"""

from __future__ import annotations

import time

from typing import Callable, Mapping, Optional

__all__ = ["Progress", "report", "tqdm_progress"]

Progress = Callable[[str, int, int, Mapping[str, float]], Optional[bool]]


def report(progress: Progress | None, stage: str, done: int, total: int, metrics=None) -> bool:
    """Call ``progress`` if given; True to continue, False when it asked to stop."""
    if progress is None:
        return True
    return progress(stage, int(done), int(total), dict(metrics or {})) is not False


class tqdm_progress:
    """A progress callback drawing one tqdm bar for a whole run; use as a context manager.

    The bar's description is the current stage ("HIO", "ER", "search", "newton", "start 3 of 8: HIO");
    a new stage with the same ``total`` continues the bar (the engines report ``done`` of the whole
    run), a new ``total`` starts the count again on the same line. The rate is the average over the
    run (``smoothing=0``), so a stage that reports many iterations at once (a replayed CUDA graph)
    does not show a burst of millions per second, and the ETA follows from it.

    Parameters
    ----------
    disable : bool
        No bar at all (for scripts and logs; the commands' ``--quiet``).
    **tqdm_kwargs
        Passed to tqdm; ``delay=s`` draws the bar only once the work has run ``s`` seconds.
    """

    def __init__(self, *, disable: bool = False, **tqdm_kwargs) -> None:
        self.disable = disable
        self.kwargs = {"smoothing": 0, "dynamic_ncols": True, **tqdm_kwargs}
        self._bar = None
        self._stage = None

    def __call__(self, stage: str, done: int, total: int, metrics: Mapping[str, float]) -> bool:
        from tqdm.auto import tqdm

        if self._bar is None:
            self._bar = tqdm(total=total, desc=stage, disable=self.disable, **self.kwargs)
            self._start = time.monotonic()
        elif total != self._bar.total:
            self._bar.reset(total=total)
        if stage != self._stage:
            self._bar.set_description_str(stage, refresh=False)
            self._stage = stage
        self._bar.update(max(0, done - self._bar.n))
        if done < self._bar.n:  # a stage that counts again from zero on the same total
            self._bar.n = done
        if metrics:
            self._bar.set_postfix({k: f"{v:.3g}" for k, v in metrics.items()}, refresh=False)
        # with tqdm's delay (a bar shown only for work longer than that) nothing is drawn before it has passed
        delay = self.kwargs.get("delay", 0.0)
        if not delay or time.monotonic() - self._start >= delay:
            self._bar.refresh()
        return True

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
            self._stage = None

    def __enter__(self) -> "tqdm_progress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
