"""Errors of damaged input files that say which file."""

from __future__ import annotations

from contextlib import contextmanager

__all__ = ["naming_file"]


@contextmanager
def naming_file(path):
    """Turn what a reader raises on a damaged or truncated file (OSError, EOFError, a format's
    ValueError) into a ValueError that names ``path``: in a batch of many files (the scale-out
    report, a CLI loop) the message has to say which one."""
    try:
        yield
    except (OSError, EOFError, ValueError) as exc:
        if isinstance(exc, FileNotFoundError) or str(path) in str(exc):
            raise
        raise ValueError(f"{path}: cannot be read ({type(exc).__name__}: {exc})") from exc
