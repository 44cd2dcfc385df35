"""The errors a user can fix, and naming the file a reader could not read.

Every error Qora raises about its input is a :class:`QoraError`; the command line prints such an
error as one ``Error:`` line and exits with status 2 (a traceback only with ``--debug``). The classes
also derive from the built-in error a caller would expect (``ValueError``, ``MemoryError``,
``ImportError``), so ``except ValueError`` keeps working.
"""

from __future__ import annotations

from contextlib import contextmanager

# defined in the backend (the bottom layer, which raises them too) and the same classes here
from qora.backend.errors import InputError, QoraError

__all__ = ["QoraError", "InputError", "FileFormatError", "OutputError", "MemoryNeeded", "MissingExtra",
           "naming_file", "NamedReads"]


class FileFormatError(QoraError, ValueError):
    """A file that cannot be read as what it should hold (the message names the file and the fault)."""


class OutputError(QoraError, ValueError):
    """An output that must not be written (it is an input, a folder, or the wrong format)."""


class MemoryNeeded(QoraError, MemoryError):
    """A computation that would need more memory than there is (the message says how much, and the
    option that makes it smaller)."""


class MissingExtra(QoraError, ImportError):
    """An optional package a feature needs is not installed (the message names the extra)."""


def _raised_in(exc: BaseException, packages) -> bool:
    """Whether ``exc`` was raised inside one of ``packages`` (its innermost frame is theirs)."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    name = tb.tb_frame.f_globals.get("__name__", "") if tb is not None else ""
    return any(name == p or name.startswith(p + ".") for p in packages)


# Libraries that report a damaged file's structure as a RuntimeError (HDF5's "Object visitation failed (bad local heap
# signature)", "Link iteration failed (...)"); a RuntimeError raised elsewhere stays what it is (a bug of ours).
FILE_LIBRARIES = ("h5py",)


@contextmanager
def naming_file(path):
    """Turn what a reader raises on a damaged or truncated file (OSError, EOFError, a format's
    ValueError, HDF5's RuntimeError) into a :class:`FileFormatError` that names ``path``: in a batch of many files
    (the scale-out report, a CLI loop) the message has to say which one."""
    try:
        yield
    except QoraError:
        raise
    except (OSError, EOFError, ValueError, KeyError, RuntimeError) as exc:
        if isinstance(exc, FileNotFoundError) or (type(exc) is RuntimeError and not _raised_in(exc, FILE_LIBRARIES)):
            raise
        if str(path) in str(exc):
            raise FileFormatError(str(exc)) from exc
        raise FileFormatError(f"{path}: cannot be read ({type(exc).__name__}: {exc})") from exc


class NamedReads:
    """An array (an HDF5 dataset) whose reads name ``path`` when they fail: a lazy array's chunks are read long after
    the file was opened (a damaged data file shows only then), so its errors get the name there. Has ``shape``,
    ``dtype``, ``ndim`` and ``__getitem__``, what ``dask.array.from_array`` reads through."""

    def __init__(self, array, path) -> None:
        self.array, self.path = array, path
        self.shape, self.dtype, self.ndim = array.shape, array.dtype, array.ndim

    def __getitem__(self, key):
        with naming_file(self.path):
            return self.array[key]
