"""Facts and policies of the host: the cores this process may use, how many threads the CPU paths
run on, and how their thread pools wait.

One place for them, so that every engine's CPU path (Numba loops, FFT threads) follows the same rule:

- :func:`cpu_count`: the cores this process may run on (affinity mask and cgroup CPU quota).
- :func:`num_threads`: the threads a CPU stage uses: ``QORA_NUM_THREADS`` if set, else :func:`cpu_count`;
  :func:`threads` sets it for a block (the benchmarks' thread sweeps).
- :func:`numba_threads`: applies the setting to Numba's parallel loops on the calling thread.
- :func:`parallel_and_serial`: one loop compiled twice, on Numba's threads and serially.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
import types

from qora.backend.errors import InputError

__all__ = ["cpu_count", "num_threads", "threads", "numba_threads", "map_parts", "copy_parts", "touched_empty",
           "parallel_and_serial", "openmp_passive", "available_memory", "cgroup_cpu_limit", "address_space_room"]

ENV_THREADS = "QORA_NUM_THREADS"


def cgroup_cpu_limit(root: str = "/sys/fs/cgroup") -> float | None:
    """CPUs' worth of time the process's cgroup may use (quota / period), or None where unlimited or unknown.

    A container started with ``--cpus 4`` on a 64-core host still sees 64 cores in its affinity mask;
    only the CFS quota says that more than 4 busy threads just queue. cgroup v2 keeps it in
    ``cpu.max`` ("quota period" or "max period"), v1 in ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``
    (-1 for none).
    """
    try:
        with open(os.path.join(root, "cpu.max")) as f:
            quota, period = (f.read().split() + ["100000"])[:2]
        if quota != "max" and int(period) > 0:
            return int(quota) / int(period)
        return None
    except (OSError, ValueError):  # no cgroup v2 file (or not a number): try v1 below
        pass
    for sub in ("cpu", "cpu,cpuacct", "cpuacct,cpu"):
        try:
            with open(os.path.join(root, sub, "cpu.cfs_quota_us")) as f:
                quota = int(f.read().strip())
            with open(os.path.join(root, sub, "cpu.cfs_period_us")) as f:
                period = int(f.read().strip())
        except (OSError, ValueError):
            continue
        return quota / period if quota > 0 and period > 0 else None
    return None


def cpu_count() -> int:
    """Cores this process may run on: the affinity mask (not the machine's total), further capped by a
    cgroup CPU quota rounded up (a quota of 2.5 CPUs lets 3 threads make progress)."""
    try:
        cores = max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        cores = max(1, os.cpu_count() or 1)
    limit = cgroup_cpu_limit()
    if limit is not None:
        cores = max(1, min(cores, math.ceil(limit - 1e-9)))
    return cores


_override = threading.local()  # threads(n) blocks, per calling thread (a Dask worker thread sets its own)


def _parse(value, what: str) -> int:
    try:
        n = int(str(value).strip())
    except (TypeError, ValueError):
        raise InputError(f"{what} must be a positive whole number of threads, got {value!r}") from None
    if n < 1:
        raise InputError(f"{what} must be a positive whole number of threads, got {value!r}")
    return n


def num_threads() -> int:
    """The threads each CPU stage (FFTs, Numba loops) uses: the innermost :func:`threads` block of the
    calling thread, else ``QORA_NUM_THREADS``, else :func:`cpu_count` (taken once per process).

    A value above the cores the process may use is honoured (oversubscription is the user's choice;
    the benchmarks skip such counts instead). A value that is not a positive integer raises InputError.
    """
    stack = getattr(_override, "stack", None)
    if stack:
        return stack[-1]
    env = os.environ.get(ENV_THREADS, "").strip()
    if env:
        return _parse(env, ENV_THREADS)
    global _cores
    if _cores is None:  # once per process: every transform and loop asks, and the cgroup files cost a read each
        _cores = cpu_count()
    return _cores


_cores: int | None = None


@contextlib.contextmanager
def threads(n: int):
    """Run the block with :func:`num_threads` = ``n`` on the calling thread (nested blocks stack)."""
    n = _parse(n, "threads")
    stack = getattr(_override, "stack", None)
    if stack is None:
        stack = _override.stack = []
    stack.append(n)
    try:
        yield n
    finally:
        stack.pop()


def map_parts(fn, count: int, *, least: int = 1, pool=None) -> list:
    """``[fn(lo, hi), ...]`` over contiguous parts of ``range(count)``, one part per thread: at most
    :func:`num_threads` parts of at least ``least`` items each, run on a pool of that many threads (NumPy's
    copies, sums, FFTs and ufuncs release the GIL); one part runs on the calling thread. ``pool``: an executor
    the caller keeps (the live path's, made once) instead of one made for the call (a call's own pool cannot
    deadlock when ``fn`` itself splits its work)."""
    parts = max(1, min(num_threads(), count // max(1, least)))
    bounds = [count * k // parts for k in range(parts + 1)]
    if parts == 1:
        return [fn(0, count)]
    if pool is not None:
        return list(pool.map(lambda k: fn(bounds[k], bounds[k + 1]), range(parts)))
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(parts, thread_name_prefix="qora-host") as own:
        return list(own.map(lambda k: fn(bounds[k], bounds[k + 1]), range(parts)))


# a thread's share of a copy below this many bytes costs more in hand-off than it saves
COPY_PART_BYTES = 1 << 20


def copy_parts(dst, src, *, pool=None) -> None:
    """``np.copyto(dst, src, casting="same_kind")`` split along the first axis over :func:`map_parts`'s threads: a
    copy of hundreds of MB runs at the memory's speed, not one core's (a pageable array into a page-locked buffer
    before its upload, a device result out of one). ``src`` broadcasts to ``dst`` as NumPy's."""
    import numpy as np

    src = np.broadcast_to(np.asarray(src), dst.shape)  # a view: each part reads its own rows
    if dst.ndim == 0:
        np.copyto(dst, src, casting="same_kind")
        return
    row = max(1, dst[0].nbytes)
    map_parts(lambda lo, hi: np.copyto(dst[lo:hi], src[lo:hi], casting="same_kind"), len(dst),
              least=max(1, COPY_PART_BYTES // row), pool=pool)


def touched_empty(shape, dtype, *, pool=None):
    """A new host array whose pages are already mapped (zeros written over :func:`map_parts`'s threads). The first
    write to a fresh allocation faults its pages in one at a time, which made copying a 512^3 volume out of a
    page-locked buffer run at a fraction of the memory's speed; made while the device computes, that cost is hidden."""
    import numpy as np

    out = np.empty(shape, dtype)
    copy_parts(out, np.zeros((), dtype), pool=pool)
    return out


def numba_threads() -> int:
    """Make Numba's parallel loops launched from the calling thread use :func:`num_threads` threads
    (capped at the size of Numba's pool, fixed when it starts); returns the count applied.

    Call it before launching a ``parallel=True`` loop: Numba's count is per calling thread and cheap to set.
    """
    import numba

    n = max(1, min(num_threads(), numba.config.NUMBA_NUM_THREADS))
    if numba.get_num_threads() != n:
        numba.set_num_threads(n)
    return n


def parallel_and_serial(loop, **jit):
    """``(parallel, serial)``: the Python function ``loop`` (written with ``numba.prange``) compiled
    with ``parallel=True`` and without, both with the options ``jit`` (``cache=True`` included).

    The serial twin is compiled from a copy of ``loop`` under another qualified name. Numba keys its
    on-disk cache by the function's module, qualified name and line, not by the ``parallel`` flag, so two
    dispatchers of one function share one cache entry: whichever compiled first was loaded by both.
    That made the phase loops serial on every thread count once the serial twin had run first
    (issue 28's probe: the same 3.3 ms at 1 and 16 threads on the 16-core host).
    """
    import numba

    twin = types.FunctionType(loop.__code__, loop.__globals__, loop.__name__ + "_serial",
                              loop.__defaults__, loop.__closure__)
    twin.__qualname__ = loop.__qualname__ + "_serial"
    twin.__module__ = loop.__module__
    return numba.njit(parallel=True, **jit)(loop), numba.njit(parallel=False, **jit)(twin)


def openmp_passive() -> None:
    """Make OpenMP threads sleep, not spin, between parallel loops (unless the user chose).

    Numba's OpenMP threads spin after each parallel loop by default, stealing the cores that the
    FFT's threads need next: on the 2-core development machine that made an HIO iteration at 1024^2
    take 18.4 ms instead of 11.2. Must run before Numba starts its thread pool, so every module with Numba
    loops calls it at import.
    """
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def address_space_room() -> int | None:
    """Bytes of address space left under ``ulimit -v`` (RLIMIT_AS): the limit less the process's virtual size
    (VmSize); None where no limit is set or it cannot be read. Under such a limit an allocation fails long before
    the machine's memory is used (NumPy's "Unable to allocate"), so the memory estimates count it."""
    try:
        import resource

        limit = resource.getrlimit(resource.RLIMIT_AS)[0]
    except (ImportError, OSError, ValueError):
        return None
    if limit == resource.RLIM_INFINITY or limit <= 0:
        return None
    size = 0  # where /proc cannot tell the process's size (not Linux), the limit alone
    with contextlib.suppress(OSError, ValueError), open("/proc/self/status") as f:
        size = next((int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:")), 0)
    return max(0, int(limit) - size)


def available_memory() -> int | None:
    """Bytes of host memory this process can still allocate: the smallest of the kernel's
    MemAvailable, the room left under a cgroup (container) limit and the address space left under
    ``ulimit -v`` (:func:`address_space_room`); None where none is known."""
    found = []
    room = address_space_room()
    if room is not None:
        found.append(room)
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    found.append(int(line.split()[1]) * 1024)
                    break
    except OSError:  # no /proc (not Linux): the cgroup's figure alone, if any
        pass
    for limit_file, usage_file in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                                   ("/sys/fs/cgroup/memory/memory.limit_in_bytes",
                                    "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        try:
            with open(limit_file) as f:
                limit = f.read().strip()
            with open(usage_file) as f:
                usage = int(f.read().strip())
        except (OSError, ValueError):
            continue
        if limit.isdigit() and int(limit) < 2**60:
            found.append(max(0, int(limit) - usage))
        break
    return min(found) if found else None
