"""The one validation layer: physical parameters, arrays, outputs and memory, checked the same way
by the Python API and the command line.

Each check raises :class:`~qora.io.errors.InputError` (a ``ValueError``) with a message that names the
parameter, the value it got and what it needs, and returns the value in the form the computation
uses (a float, an int, a float array). The engines state their policy for non-finite and negative
data here, once: ``"refuse"`` (an error saying how many) or ``"mask"`` (a warning saying how many,
and a mask of them).
"""

from __future__ import annotations

import math
import numbers
import os
import warnings
from pathlib import Path

import numpy as np

from qora.io.errors import InputError, MemoryNeeded, OutputError

__all__ = ["number", "positive", "nonnegative", "integer", "in_range", "real_array", "outputs_apart",
           "memory_needed", "GIB"]

GIB = 2**30


def _unit(unit: str) -> str:
    return f" {unit}" if unit else ""


def _shown(value, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def number(name: str, value, *, unit: str = "") -> float:
    """``value`` as a finite float (a bool, a string, NaN or Inf is refused)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise InputError(f"{name} must be a number{_unit(unit)}, got {_shown(value)}")
    try:
        value = float(value)
    except OverflowError:  # an integer of hundreds of digits
        raise InputError(f"{name} must be finite, got an integer of {len(str(abs(int(value))))} digits") from None
    if not math.isfinite(value):
        raise InputError(f"{name} must be finite, got {value}")
    return value


def positive(name: str, value, *, unit: str = "") -> float:
    """``value`` as a finite float > 0 (a wavelength, a pixel size, a scan step, a voltage)."""
    value = number(name, value, unit=unit)
    if not value > 0:
        raise InputError(f"{name} must be positive{_unit(unit)}, got {value:g}")
    return value


def nonnegative(name: str, value, *, unit: str = "") -> float:
    """``value`` as a finite float >= 0 (a weight, a thickness, a noise level)."""
    value = number(name, value, unit=unit)
    if value < 0:
        raise InputError(f"{name} must not be negative{_unit(unit)}, got {value:g}")
    return value


# physical ranges (low, high, the reason said with a value outside), for the library and the CLI's options alike
VOLTAGE_KV = (1.0, 5000.0, "electron microscopes accelerate from ~1 kV (low-voltage SEM-STEM) to 3,000 kV (the "
                           "highest-voltage TEMs); the value is in kV")
SEMIANGLE_MRAD = (0.1, 500.0, "a convergence semi-angle below 0.1 mrad makes a probe microns wide (no ptychographic "
                              "scan), above 500 mrad beyond any condenser and the paraxial optics used here; the value "
                              "is in mrad")


def physical(name: str, value, unit: str, bounds) -> float:
    """``value`` as a positive float within ``bounds`` (low, high, reason), else InputError with the reason."""
    low, high, why = bounds
    value = positive(name, value, unit=unit)
    if not low <= value <= high:
        raise InputError(f"{name} {value:g} {unit} is outside {low:g}-{high:g} {unit}: {why}")
    return value


def in_range(name: str, value, low: float, high: float, *, unit: str = "", inclusive: bool = True) -> float:
    """``value`` as a finite float within [low, high] (or (low, high) with ``inclusive=False``)."""
    value = number(name, value, unit=unit)
    inside = low <= value <= high if inclusive else low < value < high
    if not inside:
        brackets = "[]" if inclusive else "()"
        raise InputError(f"{name} must be in {brackets[0]}{low:g}, {high:g}{brackets[1]}{_unit(unit)}, got {value:g}")
    return value


def integer(name: str, value, *, low: int | None = None, high: int | None = None) -> int:
    """``value`` as an int within [low, high] (a float with a fraction, or a bool, is refused)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        if isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_)) and float(value).is_integer():
            value = int(value)
        else:
            raise InputError(f"{name} must be an integer, got {value!r}")
    value = int(value)
    if low is not None and value < low:
        raise InputError(f"{name} must be at least {low}, got {value}")
    if high is not None and value > high:
        raise InputError(f"{name} must be at most {high}, got {value}")
    return value


def numbers_only(name: str, a, *, hint: str = "for intensities pass abs(x)**2", error=InputError) -> None:
    """Refuse an empty array, complex values (an InputError, with ``hint``: a complex array of intensities is
    usually a field passed by mistake) and anything that is not numbers or booleans (``error``: a file's
    reader passes FileFormatError), each message naming ``name``."""
    if a.size == 0:
        raise error(f"{name} is empty (shape {a.shape})")
    if np.iscomplexobj(a):
        raise InputError(f"{name} must be real, got complex values ({a.dtype}); {hint}")
    if not (np.issubdtype(a.dtype, np.number) or a.dtype == bool):
        raise error(f"{name} must hold numbers, got dtype {a.dtype}")


def real_array(name: str, a, *, ndim=None, dtype=np.float64, nonfinite: str = "refuse", negative: str = "allow",
               allow_complex: bool = False, mask=None):
    """``a`` as a real array of ``dtype``, with the engine's policy for bad values.

    Parameters
    ----------
    name : str
        What the array is, for the messages ("intensity", "holograms").
    ndim : int or tuple of int, optional
        The allowed numbers of dimensions.
    nonfinite, negative : {"refuse", "mask", "allow"}
        What to do with NaN/Inf and with negative values: an error that says how many, a warning that
        says how many (the values are then set to 0 and reported in the returned mask), or nothing.
    allow_complex : bool
        Complex input is refused unless the caller says it is meaningful (a complex array of
        intensities is usually a mistake: the message says to pass ``abs(a)**2``).
    mask : array of bool, optional
        Pixels already known to be unmeasured (True): they are not counted or checked.

    Returns
    -------
    (array, mask)
        The array, and the mask of unmeasured pixels (None when nothing is masked).
    """
    a = np.asarray(a)
    if ndim is not None:
        allowed = (ndim,) if isinstance(ndim, int) else tuple(ndim)
        if a.ndim not in allowed:
            shapes = " or ".join(f"{d}D" for d in allowed)
            raise InputError(f"{name} must be a {shapes} array, got shape {a.shape}")
    if allow_complex and np.iscomplexobj(a):
        numbers_only(name, a.real)
    else:
        numbers_only(name, a)
    if mask is not None:
        mask = np.asarray(mask)
        if mask.shape != a.shape:
            raise InputError(f"the mask of {name} has shape {mask.shape}, {name} has {a.shape}")
        mask = mask.astype(bool)
    out = a.astype(dtype, copy=True)
    measured = ~mask if mask is not None else np.ones(a.shape, bool)
    for what, bad, policy in (("non-finite (NaN or Inf)", ~np.isfinite(out), nonfinite),
                              ("negative", np.isfinite(out) & (out < 0), negative)):
        bad &= measured
        count = int(bad.sum())
        if not count or policy == "allow":
            continue
        if policy == "refuse":
            raise InputError(f"{name} has {count} {what} values of {a.size}; mask them or correct the data")
        if policy != "mask":
            raise ValueError(f"policy must be 'refuse', 'mask' or 'allow', got {policy!r}")
        warnings.warn(f"{name}: {count} {what} values of {a.size} are masked (left free, set to 0)",
                      stacklevel=2)
        out[bad] = 0
        mask = bad if mask is None else (mask | bad)
        measured &= ~bad
    if not measured.any():
        raise InputError(f"{name}: every value is masked; nothing is left to use")
    return out, mask


def outputs_apart(outputs, inputs, *, folder_ok: bool = False) -> None:
    """Refuse an output that is one of the inputs (writing it would destroy the data it was made
    from) or, unless ``folder_ok``, an existing folder where a file is to be written."""
    resolved = {}
    for p in inputs:
        if p is None:
            continue
        p = Path(p)
        resolved[p.resolve()] = p
    for out in outputs:
        if out is None:
            continue
        out = Path(out)
        target = out.resolve()
        same = resolved.get(target)
        if same is None and out.exists():
            same = next((p for r, p in resolved.items() if r.exists() and os.path.samefile(r, target)), None)
        if same is not None:
            raise OutputError(f"the output {out} is the input {same}: writing it would replace the data; "
                              "choose another output name")
        if out.is_dir() and not folder_ok:
            raise OutputError(f"the output {out} is a folder; give a file name")
        folder_writable(out if out.is_dir() else out.parent, out)


def folder_writable(folder, output) -> None:
    """Refuse, before any work, an output whose folder cannot take a file: a temporary file is made there and
    removed (a permission bit is not enough: root ignores it, a read-only mount or a full quota does not), so a
    run that would end in a write error stops at once instead of after the work (a live scan's result was lost
    that way)."""
    import tempfile

    folder = Path(folder)
    if not folder.exists():
        return  # a folder the command makes itself (a results directory), or one the writer names in its error
    try:
        tempfile.NamedTemporaryFile(dir=folder, prefix=".qora-write-check-").close()  # made, then removed
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise OutputError(f"cannot write {output}: its folder {folder} does not take new files ({reason}); "
                          "choose a writable folder") from None


def disk_needed(path, nbytes: float, what: str, hint: str = "write it elsewhere or free some space") -> None:
    """Refuse (MemoryNeeded, about disk), before any work, an output of up to ``nbytes`` bytes where the folder
    that will hold ``path`` (its nearest existing ancestor) has less free: a full disk found at the end of the work
    costs the work."""
    import shutil

    folder = Path(path).resolve().parent
    while not folder.exists():
        folder = folder.parent
    free = shutil.disk_usage(folder).free
    if nbytes > free:
        raise MemoryNeeded(f"{what} needs up to {byte_size(nbytes)} of disk in {folder}, {byte_size(free)} "
                           f"available; {hint}")


def memory_needed(nbytes: float, what: str, *, available: float | None, where: str = "host",
                  hint: str = "") -> None:
    """Refuse, before allocating, a computation that needs more memory than is available.

    ``available`` is in bytes (``None``: unknown, nothing is checked); ``hint`` names the option that
    makes the computation smaller.
    """
    if available is None or nbytes <= available:
        return
    tail = f"; {hint}" if hint else ""
    raise MemoryNeeded(f"{what} needs {nbytes / GIB:.1f} GiB of {where} memory, {available / GIB:.1f} GiB "
                       f"available{tail}")


def byte_size(nbytes: float) -> str:
    """A byte count for a message, in the unit that shows it: "3.2 GiB", "180 MiB", "12 KiB", "512 bytes" (a disk
    check once said "needs up to 0.0 GiB, 0.0 GiB available")."""
    nbytes = float(nbytes)
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(nbytes) >= size:
            return f"{nbytes / size:.3g} {unit}"
    return f"{nbytes:.0f} bytes"
