"""The base of the errors a user can fix, defined at the bottom layer so that :mod:`qora.backend`
(which may import nothing above it) raises the same :class:`InputError` as every other layer;
:mod:`qora.io.errors` re-exports both and defines the rest."""

from __future__ import annotations

__all__ = ["QoraError", "InputError"]


class QoraError(Exception):
    """An error in what the user gave (a value, an array, a file, an option), not in Qora."""


class InputError(QoraError, ValueError):
    """A parameter or array that is not what the computation needs (the message names it)."""
