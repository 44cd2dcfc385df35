"""The element-wise steps of the beam propagation model's slice loop as parallel Numba passes (CPU).

Per slice the NumPy loop made a temporary for the screened envelope p_k w and two more for the
propagation s = t_q A + t_r s; here each is one pass over memory on
:func:`qora.backend.host.num_threads` threads, the propagation in place. Same arithmetic, same order
per element: the results equal NumPy's (``tests/test_threads.py``).
"""

from __future__ import annotations

from qora.backend.host import numba_threads, openmp_passive, parallel_and_serial

openmp_passive()  # before Numba loads its OpenMP runtime

import numba  # noqa: E402
import numpy as np  # noqa: E402

__all__ = ["screened", "propagate"]

# below this many values per call the loops run serially (waking threads costs more than they save)
_PARALLEL_FROM = 2**17


def _screen_loop(p, w, out):
    b, n, m = w.shape
    for r in numba.prange(b * n):
        i, j = r // n, r % n
        for k in range(m):
            out[i, j, k] = p[j, k] * w[i, j, k]


def _propagate_loop(tq, tr, a, s):
    b, n, m = s.shape
    for r in numba.prange(b * n):
        i, j = r // n, r % n
        for k in range(m):
            s[i, j, k] = tq[i, j, k] * a[i, j, k] + tr[i, j, k] * s[i, j, k]


_jit = dict(cache=True)  # no fastmath: the products must round as NumPy's do
_screen = parallel_and_serial(_screen_loop, **_jit)
_propagate = parallel_and_serial(_propagate_loop, **_jit)


def _pick(pair, size: int):
    if size >= _PARALLEL_FROM and numba_threads() > 1:
        return pair[0]
    return pair[1]


def screened(p, w):
    """p w for the screen p (n, n) and envelopes w (B, n, n), as a new array (NumPy's ``p * w``)."""
    out = np.empty(w.shape, np.result_type(p, w))
    _pick(_screen, w.size)(np.ascontiguousarray(p, out.dtype), np.ascontiguousarray(w, out.dtype), out)
    return out


def propagate(tq, tr, a, s) -> None:
    """In place: s = tq a + tr s (all (B, n, n), C-contiguous, of one complex dtype)."""
    _pick(_propagate, s.size)(tq, tr, a, s)
