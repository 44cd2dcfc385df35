"""Facts and policies of the host: the cores this process may use, and how its thread pools wait.

One place for them, so that every engine's CPU path (Numba loops, FFT threads) follows the same rule.
"""

from __future__ import annotations

import os

__all__ = ["cpu_count", "num_threads", "openmp_passive", "available_memory"]


def cpu_count() -> int:
    """Cores this process may run on (the affinity mask, not the machine's total)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def num_threads() -> int:
    """Threads a CPU stage may use: ``QORA_NUM_THREADS`` when set (a positive integer), else every
    core of the affinity mask (:func:`cpu_count`)."""
    value = os.environ.get("QORA_NUM_THREADS", "").strip()
    if value:
        try:
            n = int(value)
        except ValueError:
            raise ValueError(f"QORA_NUM_THREADS must be a positive integer, got {value!r}") from None
        if n < 1:
            raise ValueError(f"QORA_NUM_THREADS must be a positive integer, got {value!r}")
        return n
    return cpu_count()


def openmp_passive() -> None:
    """Make OpenMP threads sleep, not spin, between parallel loops (unless the user chose).

    Numba's OpenMP threads spin after each parallel loop by default, stealing the cores that the
    FFT's threads need next: on the 2-core development machine that made an HIO iteration at 1024^2
    take 18.4 ms instead of 11.2. Must run before Numba starts its thread pool, so every module with Numba
    loops calls it at import.
    """
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def available_memory() -> int | None:
    """Bytes of host memory this process can still allocate: the smaller of the kernel's
    MemAvailable and the room left under a cgroup (container) limit; None where neither is known."""
    found = []
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
