"""Launchers of the kernels in ``phase.cu``, ``envelope.cu`` and ``support.cu``: one per kernel, keyword arguments, the launch
configuration inside (as in ``qora.holo.kernels`` and ``qora.ssb.kernels``).

Each launcher loads its kernel through :func:`qora.backend.kernels.get_kernel` (compiled once per device) and
launches it on the current CuPy stream; scalars are cast here to the kernel's C types (``float`` -> float32, ``int``
-> int32, ``long long`` -> int64); an optional device pointer left out is a null pointer. Arrays hold ``batch``
starts of ``n`` values each, start b at offset b * n; the per-start kernels take the start from the grid's y
index. Each docstring names the array code it reproduces (``tests/phase/test_phase_cuda.py`` and
``tests/phase/test_phase_envelope_cuda.py`` compare them). Nothing here allocates or synchronises: the engines of
:mod:`qora.phase.cuda`, :mod:`qora.phase.cuda_base` and :mod:`qora.phase.envelope_cuda` own the buffers.
"""

from __future__ import annotations

import numpy as np

from qora.backend.kernels import get_kernel, multiprocessors

THREADS = 256
PER_SM = 8  # per-start kernels: at most this many blocks per multiprocessor over all starts, each grid-stride
FLAT_PER_SM = 16  # kernels over all starts as one flat array
_NULL = np.uint64(0)
_FILES = {"modulus_damped": "envelope.cu", "update_positive": "envelope.cu", "gaussian_axis": "support.cu",
          "dilate_cross": "support.cu"}


def kernel(name: str):
    """The compiled kernel ``name`` (of the file :data:`_FILES` names, else ``phase.cu``)."""
    return get_kernel("qora.phase", _FILES.get(name, "phase.cu"), name)


def per_start_grid(work: int, batch: int) -> tuple[int, int]:
    """Blocks over ``work`` items of each of ``batch`` starts: at most :data:`PER_SM` per multiprocessor over all
    starts (the device's own count), the start on the grid's y index."""
    return (max(1, min(-(-int(work) // THREADS), max(1, PER_SM * multiprocessors() // int(batch)))), int(batch))


def flat_grid(total: int) -> tuple[int]:
    """Blocks over ``total`` items of one flat array: at most :data:`FLAT_PER_SM` per multiprocessor."""
    return (max(1, min(-(-int(total) // THREADS), FLAT_PER_SM * multiprocessors())),)


def _pairs(n: int) -> int:
    return n // 2 if n % 2 == 0 else n  # the fp32 kernels move two values per step where n is even


def _or_null(a):
    return _NULL if a is None else a


# -- fp32 (fused, graph, batched, mixed's ER) ---------------------------------------------------------------------


def modulus_step(*, y, amp, scale, n, batch, err_sums, counter=None) -> None:
    """``y`` (the unscaled forward transform) <- the modulus projection ready for the unscaled inverse; each
    start's sum of (|F x| - a)^2 over the measured bins added to ``err_sums[slot * batch + b]`` (slot = *counter,
    or 0 without one). Reference: :func:`qora.phase.physics.modulus_project`."""
    kernel("modulus_step")(per_start_grid(_pairs(n), batch), (THREADS,),
                           (y, amp, np.float32(scale), np.int64(n), err_sums, _or_null(counter)))


def update_step(*, x, p, support, a, b, constraint, n, batch, counter=None) -> None:
    """``x`` <- ``p`` inside the support (and the constraint code), ``a x + b p`` outside; advances ``counter``.
    Reference: :func:`qora.phase.physics.support_update`."""
    kernel("update_step")(per_start_grid(_pairs(n), batch), (THREADS,),
                          (x, p, support, np.float32(a), np.float32(b), np.int32(constraint), np.int64(n),
                           _or_null(counter)))


# -- fp16 storage (half, mixed) -----------------------------------------------------------------------------------


def modulus_half(*, y, amp_unit, scale, n, batch, err_sums, counter=None) -> None:
    """The modulus step of :func:`modulus_step` on an fp16 spectrum at unit scale (``amp_unit`` = a / max a).
    Reference: :func:`qora.phase.physics.modulus_project` (scaled)."""
    kernel("modulus_half")(per_start_grid(_pairs(n), batch), (THREADS,),
                           (y, amp_unit, np.float32(scale), np.int64(n), err_sums, _or_null(counter)))


def update_half(*, x, p, support, a, b, constraint, pscale, n, batch, counter=None) -> None:
    """fp16 ``x`` <- the update of :func:`update_step` with p = ``pscale`` times the fp16 inverse transform.
    Reference: :func:`qora.phase.physics.support_update`."""
    kernel("update_half")(per_start_grid(_pairs(n), batch), (THREADS,),
                          (x, p, support, np.float32(a), np.float32(b), np.int32(constraint), np.float32(pscale),
                           np.int64(n), _or_null(counter)))


def update_mixed(*, x, xh, p, support, a, b, constraint, pscale, xh_scale, n, batch, counter=None) -> None:
    """fp32 ``x`` <- the update with the fp16 projection times ``pscale``, and its fp16 copy ``xh`` = x
    ``xh_scale`` for the next transform. Reference: :func:`qora.phase.physics.support_update`."""
    kernel("update_mixed")(per_start_grid(_pairs(n), batch), (THREADS,),
                           (x, xh, p, support, np.float32(a), np.float32(b), np.int32(constraint), np.float32(pscale),
                            np.float32(xh_scale), np.int64(n), _or_null(counter)))


def to_half(*, x, xh, scale, total) -> None:
    """``xh`` = ``x`` times ``scale`` in fp16 (all starts as one array of ``total`` values). Reference: NumPy's
    ``(x * scale).astype(complex32)`` as (re, im) float16 pairs."""
    kernel("to_half")(flat_grid(total), (THREADS,), (x, xh, np.float32(scale), np.int64(total)))


def from_half(*, xh, x, scale, total) -> None:
    """``x`` = ``xh`` times ``scale`` in fp32. Reference: the inverse of :func:`to_half`."""
    kernel("from_half")(flat_grid(total), (THREADS,), (xh, x, np.float32(scale), np.int64(total)))


def reduce_slots(*, slots, batch, err_sums, state) -> None:
    """The callback variant's per-start error slots summed into ``err_sums`` at the iteration ``state[0]``, which it
    then advances (one block). Reference: the sums :func:`modulus_step` adds."""
    kernel("reduce_slots")((1,), (1024,), (slots, np.int32(batch), err_sums, state))


# -- the envelope search's positivity passes (envelope.cu) --------------------------------------------------------


def modulus_damped(*, y, amp, scale, n, batch, damp, err_sums, counter=None) -> None:
    """The modulus step on ``batch`` half spectra of ``n`` bins: measured bins as :func:`modulus_step`, unmeasured
    ones (``amp`` < 0) the model's value times ``*damp`` (a device scalar). Reference:
    :meth:`qora.phase.envelope_iterate.ArrayIterations.project_real`."""
    kernel("modulus_damped")(per_start_grid(n, batch), (THREADS,),
                             (y, amp, np.float32(scale), np.int64(n), damp, err_sums, _or_null(counter)))


def update_positive(*, x, p, support, a, b, n, batch, counter=None) -> None:
    """Real ``x`` <- ``p`` where the support holds and p >= 0, else ``a x + b p``; advances ``counter``. Reference:
    :meth:`qora.phase.envelope_iterate.ArrayIterations.update` with ``positive``."""
    kernel("update_positive")(per_start_grid(n, batch), (THREADS,),
                              (x, p, support, np.float32(a), np.float32(b), np.int64(n), _or_null(counter)))


# -- the envelope search's support steps (support.cu) -------------------------------------------------------------


def gaussian_axis(*, x, out, weights, radius, outer, n, inner) -> None:
    """float32 ``out`` = ``x`` (viewed as (outer, n, inner)) correlated along its middle axis with the 2 radius + 1
    float32 ``weights``, "reflect" boundary. Reference: :func:`scipy.ndimage.correlate1d`."""
    total = int(outer) * int(n) * int(inner)
    kernel("gaussian_axis")(flat_grid(total), (THREADS,), (x, out, weights, np.int32(radius), np.int64(outer),
                                                          np.int64(n), np.int64(inner)))


def dilate_cross(*, src, out, batch, d1, d2, d3=1) -> None:
    """bool ``out`` = ``src`` (batch, d1, d2, d3) dilated once by the nearest-neighbour cross of the spatial axes,
    nothing outside the array. Reference: :func:`scipy.ndimage.binary_dilation` (border value 0)."""
    total = int(batch) * int(d1) * int(d2) * int(d3)
    kernel("dilate_cross")(flat_grid(total), (THREADS,), (src, out, np.int64(batch), np.int64(d1), np.int64(d2),
                                                         np.int64(d3)))
