"""What qora.phase checks before it computes: the pattern, its mask and support, the parameters,
and the memory a run needs (host, and the GPU's on the CUDA backend).

Policy for the pattern (docs/phase.md, "Errors and safety"): NaN, Inf and negative values where a
pixel was measured are refused (mask them: a masked pixel's modulus is left free); complex values
are refused (a pattern is measured intensities: pass ``abs(x)**2``); a mask that hides every pixel,
a pattern that is zero everywhere it was measured, and an empty support are refused.
"""

from __future__ import annotations

import numpy as np

from qora.backend.device import free_memory
from qora.backend.host import available_memory
from qora.io import validate
from qora.io.errors import InputError

__all__ = ["check_intensity", "check_bool_array", "check_choice", "run_bytes", "check_run_memory", "check_starts_memory",
           "BYTES_PER_START", "SHARED_BYTES", "AUTOCORRELATION_BYTES"]

# Memory per pixel (voxel) of a run, from the measurements in docs/phase-performance.md ("Device
# memory at 512^3"): the graph engine takes 23 B/voxel for one start (x 8, support 1, cuFFT work
# area 8, amplitude 4, the error history) and a whole run 29.5 (the slabs of the start and of the
# final scores); mixed takes 35. The naive engine's CuPy expressions hold about 48 per start.
BYTES_PER_START = {"graph": 17, "batched": 17, "fused": 17, "callback": 19, "half": 29, "mixed": 29, "naive": 48,
                   "cpu": 17}
SHARED_BYTES = 12.5
# The measured peak a pattern may have: its square root, the amplitude, must stay well inside float32 (1e-38 to
# 3e38) through transforms that sum over the array (a 1e-300 scale underflowed to 0 and divided by zero).
PEAK_RANGE = (1e-30, 1e30)
# The default support (the autocorrelation) is computed in float64/complex128 before the engine is made.
AUTOCORRELATION_BYTES = 48


def check_choice(name: str, value, choices) -> str:
    if not isinstance(value, str) or value not in choices:
        raise InputError(f"{name} must be one of {', '.join(map(repr, choices))}, got {value!r}")
    return value


def check_bool_array(name: str, a, shape, *, what: str) -> np.ndarray:
    """A mask or support as a bool array of ``shape``: booleans, integers (nonzero = True), or floats
    holding only 0 and 1; anything else (complex, other floats, strings) is refused."""
    a = np.asarray(a)
    if a.shape != tuple(shape):
        raise InputError(f"{name} shape {a.shape} differs from the pattern's {tuple(shape)}")
    if a.dtype == bool or np.issubdtype(a.dtype, np.integer):
        return a.astype(bool)
    if np.issubdtype(a.dtype, np.floating) and np.isin(a, (0.0, 1.0)).all():
        return a.astype(bool)
    raise InputError(f"{name} must be boolean ({what}), got dtype {a.dtype}"
                     + (" with values other than 0 and 1" if np.issubdtype(a.dtype, np.floating) else ""))


def check_intensity(intensity, mask=None):
    """Validate a pattern and its mask; returns ``(intensity float64, mask bool or None)``."""
    intensity = np.asarray(intensity)
    if intensity.dtype == bool:
        raise InputError("intensity is boolean (a mask or a support?): give the measured intensities (counts)")
    if intensity.ndim not in (2, 3):
        raise InputError(f"intensity must be a 2D or 3D array, got {intensity.ndim} dimensions "
                         f"(shape {intensity.shape})")
    if mask is not None:
        mask = check_bool_array("mask", mask, intensity.shape, what="True where a pixel was not measured")
        if mask.all():
            raise InputError("the mask hides every pixel: nothing was measured")
    intensity, _ = validate.real_array("intensity", intensity, ndim=(2, 3), nonfinite="refuse", negative="refuse",
                                       mask=mask)
    measured = ~mask if mask is not None else np.ones(intensity.shape, bool)
    if not (intensity[measured] > 0).any():
        raise InputError("intensity is zero everywhere it was measured")
    peak = float(intensity[measured].max())
    if not PEAK_RANGE[0] <= peak <= PEAK_RANGE[1]:
        raise InputError(f"intensity peaks at {peak:.3g}, outside {PEAK_RANGE[0]:g} to {PEAK_RANGE[1]:g}: the float32 "
                         "transforms would lose it; multiply the pattern by a constant (any scale is accepted: the "
                         "object's amplitude scales with its square root)")
    if mask is not None:
        intensity = np.where(mask, 0.0, intensity)
    return intensity, mask


def run_bytes(variant: str, shape, batch: int, *, default_support: bool) -> float:
    """About how many bytes a run needs on its device (the GPU's, or the host's for ``cpu``)."""
    n = float(np.prod(shape))
    engine = n * (batch * BYTES_PER_START.get(variant, 29) + SHARED_BYTES)
    if variant == "cpu":
        engine += n * 16  # the pattern (float64) and the amplitude, masks and free pixels on the host
    return max(engine, n * AUTOCORRELATION_BYTES if default_support else 0.0)


def check_run_memory(backend, variant: str, shape, batch: int, *, default_support: bool, available=None) -> None:
    """Refuse, before allocating, a run that cannot fit: the GPU's free memory on the CUDA backend,
    the host's on the CPU. The message says which option makes it smaller."""
    nbytes = run_bytes(variant, shape, batch, default_support=default_support)
    where = "device" if backend.is_cuda else "host"
    if available is None:
        available = free_memory(backend)
    dims = "x".join(map(str, shape))
    if batch > 1:
        one = run_bytes(variant, shape, 1, default_support=default_support) / validate.GIB
        hint = (f"fewer starts iterated together shrink it (--batch, or batch=, now {batch}; or fewer --starts); "
                f"one at a time needs about {one:.1f} GiB")
    else:
        hint = "the pattern alone is too large for it: crop or bin the pattern" + (
            ", or use --backend cpu" if backend.is_cuda else "")
    validate.memory_needed(nbytes, f"the {variant} reconstruction of a {dims} pattern ({batch} start"
                           f"{'s' if batch != 1 else ''} at a time)", available=available, where=where, hint=hint)


KEPT_BYTES_PER_PIXEL = 9  # a start kept whole: its object (complex64) and its support (bool)
# The real-object search's arrays per start and pixel: the iterate and its projection (complex64), the spectrum, the
# support with its labels (int32) and blur (float32), the host's copy of the result: about this many bytes
ENVELOPE_BYTES_PER_PIXEL = 48


def check_starts_memory(backend, shape, starts: int, *, keep_all: bool, iterations: int, envelope: bool = False,
                        available=None) -> None:
    """Refuse, before any work, what the starts keep: every start's object and support (``keep_all``, or the
    real-object search, which hands every start to the host; on ``backend`` it needs one start's arrays at least)
    and every start's error per iteration. A campaign of 10,000 kept 256^2 starts (6 GB) otherwise ran until an allocation
    deep in FFTW aborted the process."""
    pixels = float(np.prod(shape))
    host = starts * (iterations * 8.0 + (KEPT_BYTES_PER_PIXEL * pixels if keep_all or envelope else 0.0))
    if envelope and not backend.is_cuda:  # and beside them, on the host, at least one start's search
        host += ENVELOPE_BYTES_PER_PIXEL * pixels
    what = f"{starts} starts of a {'x'.join(map(str, shape))} pattern"
    hint = "fewer starts (--starts)" + ("" if envelope or not keep_all else
                                        ", or no --keep-all (the best start alone is kept)")
    validate.memory_needed(host, f"keeping {what}", available=available_memory() if available is None else available,
                           where="host", hint=hint)
    if envelope:  # it iterates as many starts together as fit (envelope.group_size): one must
        where = "device" if backend.is_cuda else "host"
        validate.memory_needed(ENVELOPE_BYTES_PER_PIXEL * pixels, f"one start of the real-object search of a "
                               f"{'x'.join(map(str, shape))} pattern", available=free_memory(backend)
                               if available is None else available, where=where, hint="a smaller (cropped or binned) "
                               "pattern" + (", or --backend cpu" if backend.is_cuda else ""))

