"""Independent items mapped over Dask workers, with the failure rules of every pattern.

An item that raises fails alone: its error is kept in the report and the rest finish. A worker
that dies takes no item with it: Dask reschedules the tasks it held on the others (and its
nanny starts a new worker), up to ``distributed.scheduler.allowed-failures`` deaths per task,
after which the item is reported as failed with ``KilledWorker``.
"""

from __future__ import annotations

import time
import uuid
import warnings
from dataclasses import dataclass, field

from qora.distributed.cluster import dask_distributed
from qora.progress import report

__all__ = ["ItemReport", "run_items"]


@dataclass
class ItemReport:
    """What became of each item: ``done`` (key -> result), ``failed`` (key -> "Type: message"),
    ``skipped`` (keys already done before the run), the wall time (s) and the workers used, or
    ``where`` the items ran when not on a cluster's workers (e.g. "in this process")."""

    done: dict = field(default_factory=dict)
    failed: dict = field(default_factory=dict)
    skipped: list = field(default_factory=list)
    seconds: float = 0.0
    workers: int = 0
    cancelled: bool = False
    where: str = ""
    info: dict = field(default_factory=dict)  # what the run chose before the items (e.g. a fitted axis)

    def summary(self) -> str:
        text = f"{len(self.done)} done, {len(self.failed)} failed"
        if self.skipped:
            text += f", {len(self.skipped)} already done"
        if self.where:
            text += f" in {self.seconds:.1f} s {self.where}"
        else:
            text += f" in {self.seconds:.1f} s on {self.workers} worker{'s' if self.workers != 1 else ''}"
        for key, error in self.failed.items():
            text += f"\n  {key}: {error}"
        return text


def run_items(client, fn, items: dict, *, stage: str = "items", progress=None, on_result=None,
              keep_results: bool = True, **kwargs) -> ItemReport:
    """Run ``fn(*args, **kwargs)`` for every ``key: args`` of ``items`` on the client's workers.

    ``on_result(key, result)`` runs on the client as each item finishes (to write it, or index
    it); ``progress(stage, done, total, {"failed": n})`` follows the items and may return False
    to cancel the ones not started. Results are kept in the report unless ``keep_results`` is
    False (then ``done`` maps each key to None).
    """
    distributed = dask_distributed()
    out = ItemReport(workers=len(client.scheduler_info(n_workers=-1)["workers"]))
    t0 = time.perf_counter()
    run = uuid.uuid4().hex[:8]
    with warnings.catch_warnings():
        # arrays given in memory travel inside their tasks, so that a task lost with its worker can
        # be run again anywhere (Dask warns about large graphs; files scale better: docs/scale-out.md)
        warnings.filterwarnings("ignore", "Sending large graph", UserWarning)
        futures = {client.submit(fn, *args, key=f"qora-{stage}-{run}-{i}", pure=False, **kwargs): key
                   for i, (key, args) in enumerate(items.items())}
    total = len(futures)
    report(progress, stage, 0, total, {"failed": 0})
    for future in distributed.as_completed(list(futures)):
        key = futures[future]
        if future.status == "error":
            exc = future.exception()
            out.failed[key] = f"{type(exc).__name__}: {exc}"
        elif future.status == "finished":
            result = future.result()
            if on_result is not None:
                on_result(key, result)
            out.done[key] = result if keep_results else None
        else:  # cancelled from elsewhere (a lost dependency, a closing cluster): reported, not dropped
            out.failed[key] = f"{future.status}"
        future.release()
        finished = len(out.done) + len(out.failed)
        if not report(progress, stage, finished, total, {"failed": len(out.failed)}):
            out.cancelled = True
            for other in futures:
                if other.status == "pending":
                    other.cancel()
            break
    out.seconds = time.perf_counter() - t0
    return out
