"""Options objects with keyword changes, one rule for every engine: the entry points take a frozen options
dataclass (``PhaseOptions``, ``ReconstructionOptions``, ``BpmOptions``, ``FitOptions``) and keywords that override
its fields; a keyword that is no field is an :class:`OptionError`, an :class:`InputError` and a ``TypeError``,
as an unknown keyword argument is."""

from __future__ import annotations

import dataclasses

from qora.io.errors import InputError

__all__ = ["OptionError", "with_changes"]


class OptionError(InputError, TypeError):
    """An option that does not exist, or that the chosen backend does not read (a TypeError too, as
    for an unknown keyword)."""


def with_changes(options, changes: dict, *, kind: type, what: str):
    """``options`` (an instance of the frozen dataclass ``kind``; None: its defaults) with the keyword ``changes``,
    checked again by the type when the copy is made. ``what`` names the options in the error for a name that is
    no field ("unknown BPM options ['iteration']; known: [...]"); options of another type are an InputError."""
    base = kind() if options is None else options
    if not isinstance(base, kind):
        raise InputError(f"options must be a {kind.__name__}, got {type(base).__name__}")
    names = [f.name for f in dataclasses.fields(kind)]
    unknown = sorted(set(changes) - set(names))
    if unknown:
        raise OptionError(f"unknown {what} options {unknown}; known: {names}")
    return dataclasses.replace(base, **changes) if changes else base
