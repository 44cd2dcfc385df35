"""Many CDI reconstructions over Dask workers: many patterns, or many starts of one.

Each worker keeps one :class:`qora.phase.Solver` per pattern shape (plans and device buffers
made once) and feeds it pattern after pattern (:meth:`Solver.set_intensity`). Starts split over
workers keep their numbers (``first_start``), so the merged result is the one a single run of
all the starts gives.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from collections import OrderedDict
from pathlib import Path

import numpy as np

from qora.distributed.items import ItemReport, run_items
from qora.io import validate
from qora.io.errors import InputError

__all__ = ["reconstruct_many", "PhaseCampaign"]

_SOLVERS: "OrderedDict[tuple, object]" = OrderedDict()  # this worker process's solvers, by shape and options
_SOLVERS_LOCK = threading.RLock()  # a solver is one set of buffers: one run at a time
_MAX_SOLVERS = 4
_PLANNED: set = set()  # (shape, solver options) whose FFT plans this client process has measured


def _worker_solver(intensity, mask, options: dict):
    from qora.phase import Solver

    key = (np.shape(intensity), tuple(sorted(options.items())))
    with _SOLVERS_LOCK:
        solver = _SOLVERS.pop(key, None)
        if solver is None:
            solver = Solver(intensity, mask=mask, **options)
        else:
            solver.set_intensity(intensity, mask=mask)
        _SOLVERS[key] = solver  # the most recently used last
        while len(_SOLVERS) > _MAX_SOLVERS:
            _SOLVERS.popitem(last=False)
    return solver


def _load(source, mask):
    """A pattern (and its mask) from a path or as given."""
    if isinstance(source, (str, Path)):
        from qora.io.patterns import load_pattern

        return load_pattern(source, mask=mask)
    return np.asarray(source), mask


def _run_part(source, mask, first_start: int, count: int, solver_options: dict, run_options: dict):
    """One item on a worker: ``count`` starts from ``first_start`` of one pattern; what the default runs is chosen as
    :func:`qora.phase.reconstruct` chooses it (the real-object search for a centrosymmetric pattern)."""
    from qora.phase import choose_recipe, is_envelope

    intensity, file_mask = _load(source, mask)
    recipe, reason = choose_recipe(intensity, file_mask, recipe=run_options["recipe"], support=run_options["support"],
                                   variant=solver_options["variant"], rank=run_options["rank"])
    if is_envelope(recipe):
        from qora.phase import envelope

        return envelope.reconstruct(intensity, mask=file_mask, starts=count, seed=run_options["seed"],
                                    first_start=first_start, backend=solver_options["backend"],
                                    keep_all=run_options["keep_all"], reason=reason)
    with _SOLVERS_LOCK:
        solver = _worker_solver(intensity, file_mask, solver_options)
        return solver.run(first_start=first_start, starts=count, **run_options)


@dataclass
class PhaseCampaign(ItemReport):
    """The report of :func:`reconstruct_many`: ``done`` maps each finished pattern's name to its
    merged PhaseResult, ``failed`` each failed one's to its error (as in :class:`ItemReport`)."""


def reconstruct_many(datasets, *, client, starts: int = 1, starts_per_task: int | None = None, recipe=None,
                     seed: int = 0, rank: str = "fourier", support=None, backend="auto", variant="auto",
                     batch: int = 1, free_fraction: float | None = None, keep_all: bool = False, out_dir=None,
                     progress=None) -> PhaseCampaign:
    """Reconstruct many patterns (or many starts of one) on the client's workers.

    Parameters
    ----------
    datasets : path, array, list of them, or dict name -> path or array
        Patterns in detector layout (q = 0 at index n//2); files as :func:`qora.io.patterns.load_pattern`
        reads them (read on the worker). A bad file fails alone.
    client : distributed.Client
        See :func:`qora.distributed.connect`.
    starts, seed, recipe, rank, support, backend, variant, batch, free_fraction, keep_all
        As in :func:`qora.phase.reconstruct`, for every pattern.
    starts_per_task : int, optional
        Split each pattern's starts into tasks of this many (default: all starts in one task); the
        merged result equals a single run's (:func:`qora.phase.result.merge_results`).
    out_dir : path, optional
        Write each pattern's merged result to ``out_dir/NAME.cxi`` as soon as its last part is in
        (atomically: a file is complete or absent).
    progress : callable, optional
        ``progress("patterns", done, total, {"failed": n})`` over the tasks.

    Returns
    -------
    PhaseCampaign
        ``done`` holds the merged result of every pattern that finished.
    """
    from qora.phase import merge_results

    if isinstance(datasets, dict):
        named = dict(datasets)
    elif isinstance(datasets, (list, tuple)):
        named = {_name(d, i): d for i, d in enumerate(datasets)}
    else:
        named = {_name(datasets, 0): datasets}
    if len(named) == 0:
        raise InputError("no dataset given")
    starts = validate.integer("starts", starts, low=1)
    per = starts if starts_per_task is None else validate.integer("starts_per_task", starts_per_task, low=1)
    batch = validate.integer("batch", batch, low=1)
    if free_fraction is None:
        free_fraction = 0.05 if rank == "free_llk" else 0.0
    solver_options = dict(backend=backend, variant=variant, batch=min(int(batch), per), free_fraction=free_fraction,
                          seed=seed)
    run_options = dict(seed=seed, recipe=None if recipe is None else str(recipe), rank=rank, support=support,
                       keep_all=keep_all)
    _plan_here(named, solver_options, run_options, client)
    items = {(name, first): (source, None, first, min(per, starts - first), solver_options, run_options)
             for name, source in named.items() for first in range(0, starts, per)}
    parts: dict = {name: [] for name in named}
    expected = {name: len(range(0, starts, per)) for name in named}
    results: dict = {}

    def collect(key, result):
        name = key[0]
        parts[name].append(result)
        if len(parts[name]) == expected[name]:
            results[name] = merge_results(parts.pop(name))
            if out_dir is not None:
                from qora.phase import write_result

                Path(out_dir).mkdir(parents=True, exist_ok=True)
                write_result(Path(out_dir) / f"{name}.cxi", results[name])

    done = run_items(client, _run_part, items, stage="patterns", progress=progress, on_result=collect,
                     keep_results=False)
    campaign = PhaseCampaign(done={name: results[name] for name in named if name in results}, skipped=done.skipped,
                             seconds=done.seconds, workers=done.workers, cancelled=done.cancelled)
    for (name, first), error in done.failed.items():
        campaign.failed.setdefault(name, f"starts from {first}: {error}")
    return campaign


def _plan_here(named: dict, solver_options: dict, run_options: dict, client) -> None:
    """On the CPU, measure the FFT plans of every pattern shape here first and give them to the
    workers: a worker measuring its own can pick other FFTW algorithms, whose rounding an
    iterative reconstruction amplifies (:func:`qora.backend.fft.fftw_wisdom`). One iteration of
    one start per shape; a pattern that cannot be read is left to fail on its worker."""
    from qora.backend import resolve
    from qora.distributed._plugins import share_fft_plans
    from qora.phase import Solver

    if resolve(solver_options["backend"]).is_cuda:
        return
    for source in named.values():
        try:
            intensity, mask = _load(source, None)
            key = (np.shape(intensity), tuple(sorted(solver_options.items())))
            if key in _PLANNED:  # measured in an earlier call: the wisdom holds it already
                continue
            Solver(intensity, mask=mask, **solver_options).run(recipe="ER**1", starts=1, seed=run_options["seed"],
                                                               support=run_options["support"])
            _PLANNED.add(key)
        except (ValueError, OSError, MemoryError):  # a bad pattern (or too large) fails alone, on its worker
            continue
    share_fft_plans(client)


def _name(source, index: int) -> str:
    return Path(source).stem if isinstance(source, (str, Path)) else f"pattern{index:04d}"
