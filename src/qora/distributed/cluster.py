"""Getting a Dask client: one given, a scheduler's address, a local cluster of processes, or one
worker per visible GPU."""

from __future__ import annotations

import logging
import os
from contextlib import contextmanager

from qora.backend import cpu_count, has_cuda, require_cupy
from qora.io.errors import MissingExtra

__all__ = ["connect", "gpu_count", "dask_distributed"]

# The native thread pools a CPU worker may start: one worker per core, each single-threaded, is
# faster than N workers each spawning N threads (and the numbers it gives do not depend on it).
_SINGLE_THREADED = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS")


# A dashboard on a port the system picks: Dask reads ``None`` as its default 8787, so two runs on
# one machine would collide (the second warns and moves, or fails where the port is taken).
FREE_PORT = ":0"

def dask_distributed():
    """``dask.distributed``, or a :class:`~qora.io.errors.MissingExtra` (an ImportError) saying which
    extra brings it."""
    try:
        import distributed
    except ImportError as exc:
        raise MissingExtra("running on a Dask cluster (--workers, --gpus, --scheduler) needs Dask: "
                           "pip install 'qora[dask]'") from exc
    return distributed


def gpu_count() -> int:
    """CUDA devices this process sees (0 without CuPy or a device)."""
    if not has_cuda():
        return 0
    return int(require_cupy("GPU workers").cuda.runtime.getDeviceCount())


def _gpu_cluster(devices, *, memory_limit):
    """One single-threaded worker per GPU, each seeing only its device (``CUDA_VISIBLE_DEVICES``),
    under a nanny that restarts it if it dies: dask-cuda's ``LocalCUDACluster`` where installed,
    else the same layout from ``distributed.SpecCluster``."""
    distributed = dask_distributed()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    names = visible.split(",") if visible else [str(i) for i in range(gpu_count())]
    chosen = names[:devices]
    if len(chosen) < devices:
        raise ValueError(f"{devices} GPU workers asked for, {len(names)} GPUs visible")
    try:
        from dask_cuda import LocalCUDACluster
    except ImportError:
        workers = {f"gpu-{name}": {"cls": distributed.Nanny,
                                   "options": {"nthreads": 1, "memory_limit": memory_limit,
                                               "env": {"CUDA_VISIBLE_DEVICES": name}}}
                   for name in chosen}
        scheduler = {"cls": distributed.Scheduler, "options": {"dashboard_address": FREE_PORT}}
        return distributed.SpecCluster(workers=workers, scheduler=scheduler, silence_logs=logging.ERROR)
    return LocalCUDACluster(CUDA_VISIBLE_DEVICES=",".join(chosen), memory_limit=memory_limit,
                            dashboard_address=FREE_PORT, silence_logs=logging.ERROR)


@contextmanager
def connect(scheduler=None, *, workers: int | None = None, gpus: int | str | None = None,
            threads_per_worker: int = 1, memory_limit="auto"):
    """A ``distributed.Client`` for the duration of a ``with`` block; closes what it opened.

    Parameters
    ----------
    scheduler : Client or str, optional
        A client to use as it is, or a scheduler's address ("tcp://host:8786") to connect to.
    workers : int, optional
        Without a scheduler: a local cluster of this many worker processes (default: one per
        core), each with ``threads_per_worker`` threads.
    gpus : int or "all", optional
        Without a scheduler: one worker per GPU instead (``"all"``: every visible GPU).
    """
    distributed = dask_distributed()
    if isinstance(scheduler, distributed.Client):
        yield scheduler
        return
    if scheduler is not None:
        client = distributed.Client(scheduler)
        try:
            yield client
        finally:
            client.close()
        return
    if gpus is not None:
        count = gpu_count() if gpus == "all" else int(gpus)
        if count < 1:
            raise ValueError("no GPU to start a worker on" if gpus == "all" else f"gpus must be >= 1, got {gpus}")
        cluster = _gpu_cluster(count, memory_limit=memory_limit)
    else:
        count = cpu_count() if workers is None else int(workers)
        if count < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        env = {name: str(threads_per_worker) for name in _SINGLE_THREADED}
        cluster = distributed.LocalCluster(n_workers=count, threads_per_worker=threads_per_worker, processes=True,
                                           memory_limit=memory_limit, dashboard_address=FREE_PORT, silence_logs=logging.ERROR,
                                           env=env)
    client = distributed.Client(cluster)
    try:
        client.wait_for_workers(count)
        yield client
    finally:
        client.close()
        cluster.close()
