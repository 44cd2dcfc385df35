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
           "naming_file"]


class FileFormatError(QoraError, ValueError):
    """A file that cannot be read as what it should hold (the message names the file and the fault)."""


class OutputError(QoraError, ValueError):
    """An output that must not be written (it is an input, a folder, or the wrong format)."""


class MemoryNeeded(QoraError, MemoryError):
    """A computation that would need more memory than there is (the message says how much, and the
    option that makes it smaller)."""


class MissingExtra(QoraError, ImportError):
    """An optional package a feature needs is not installed (the message names the extra)."""


@contextmanager
def naming_file(path):
    """Turn what a reader raises on a damaged or truncated file (OSError, EOFError, a format's
    ValueError) into a :class:`FileFormatError` that names ``path``: in a batch of many files (the
    scale-out report, a CLI loop) the message has to say which one."""
    try:
        yield
    except QoraError:
        raise
    except (OSError, EOFError, ValueError, KeyError) as exc:
        if isinstance(exc, FileNotFoundError):
            raise
        if str(path) in str(exc):
            raise FileFormatError(str(exc)) from exc
        raise FileFormatError(f"{path}: cannot be read ({type(exc).__name__}: {exc})") from exc
