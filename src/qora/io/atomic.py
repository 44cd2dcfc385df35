"""Atomic file writing: write to a temporary name beside the target, then rename.

The temporary is ``.NAME.PID.tmp`` in the target's folder. A process killed mid-write (SIGKILL, a power cut) leaves
its temporary behind; the next write of the same name removes those of processes no longer running, so they do
not pile up (a live process's temporary, or one another user owns, is left alone).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

__all__ = ["atomic_path", "remove_stale_temporaries"]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True  # another user's process (or a number no process has): not ours to judge
    return True


def remove_stale_temporaries(path) -> list[Path]:
    """Remove ``.NAME.PID.tmp`` beside ``path`` left by processes that are no longer running; returns them."""
    path = Path(path)
    removed = []
    for tmp in path.parent.glob(f".{path.name}.*.tmp"):
        pid = tmp.name[len(path.name) + 2:-len(".tmp")]
        if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            with contextlib.suppress(OSError):
                tmp.unlink()
                removed.append(tmp)
    return removed


@contextlib.contextmanager
def atomic_path(path):
    """Yield a temporary path; on success it replaces ``path``, on failure it is removed.

    A crash while writing never leaves a half-written file under the final name; temporaries that dead
    processes left for the same name are removed first (:func:`remove_stale_temporaries`).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
