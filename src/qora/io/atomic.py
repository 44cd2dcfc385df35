"""Atomic file writing: write to a temporary name beside the target, then rename.

The temporary is ``.NAME.PID.tmp`` in the target's folder. A process killed mid-write (SIGKILL, a power cut) leaves
its temporary behind; the next write of the same name removes those of processes no longer running, so they do
not pile up (a live process's temporary, or one another user owns, is left alone).

A full disk (or quota) is one :class:`DiskFullError` naming the file, the temporary removed and an existing file of
that name kept. HDF5 files go through :func:`hdf5_output`: HDF5's own failing writes on a full disk printed
tracebacks from its objects' teardown and then crashed the interpreter at exit (exit 139), so a file is built in
memory and written with plain I/O, or, for data too large to hold twice, written in place with HDF5's teardown
made quiet and complete before the error is raised.
"""

from __future__ import annotations

import contextlib
import errno
import gc
import os
import sys
from pathlib import Path

__all__ = ["atomic_path", "remove_stale_temporaries", "hdf5_output", "DiskFullError", "IN_MEMORY_BYTES"]

IN_MEMORY_BYTES = 1 << 30  # hdf5_output builds files up to this size in memory (larger: in place)
_FULL = (errno.ENOSPC, errno.EDQUOT)


class DiskFullError(OSError):
    """The file system (or the user's quota) ran out of space while writing ``filename``: nothing was written."""


def _disk_full(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and (exc.errno in _FULL or "No space left" in str(exc) or "quota" in str(exc))


def _full_error(path: Path) -> DiskFullError:
    from qora.io.validate import byte_size

    try:
        stat = os.statvfs(path.parent)
        left = f" ({byte_size(stat.f_bavail * stat.f_frsize)} free there)"
    except OSError:
        left = ""
    return DiskFullError(errno.ENOSPC, f"the disk is full{left}: nothing written (an existing file of that name is "
                                       "kept); free some space or write elsewhere", str(path))


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
    except OSError as exc:
        if _disk_full(exc) and not isinstance(exc, DiskFullError):
            raise _full_error(path) from None
        raise
    finally:
        if tmp.exists():
            tmp.unlink()


@contextlib.contextmanager
def _quiet_teardown():
    """HDF5 objects of a file whose writes failed report each failed flush as an 'Exception ignored' traceback
    when they are freed: free them here, with those reports silenced (the error raised says what happened)."""
    hook = sys.unraisablehook
    sys.unraisablehook = lambda unraisable: None
    try:
        yield
    finally:
        gc.collect()
        sys.unraisablehook = hook


@contextlib.contextmanager
def hdf5_output(path, *, nbytes: int = 0):
    """Yield an open ``h5py.File`` to fill; on success it becomes ``path`` (atomically), on any failure nothing
    appears there. ``nbytes``: about how large the file will be; up to :data:`IN_MEMORY_BYTES` the file is built in
    memory (HDF5's core driver) and written with plain I/O, beyond it written in place. A full disk is one
    :class:`DiskFullError` either way."""
    import h5py

    path = Path(path)
    if nbytes <= IN_MEMORY_BYTES:
        f = h5py.File(f"{path.name}.in-memory", "w", driver="core", backing_store=False)
        try:
            yield f
            f.flush()
            image = f.id.get_file_image()
        finally:
            f.close()
        with atomic_path(path) as tmp, open(tmp, "wb") as out:
            out.write(image)
        return
    with atomic_path(path) as tmp:
        f = h5py.File(tmp, "w")
        try:
            yield f
            f.close()
        except BaseException as exc:
            with _quiet_teardown():
                with contextlib.suppress(Exception):
                    f.close()
                del f
            if _disk_full(exc):
                raise _full_error(path) from None
            raise
