"""Helpers for Qora's tests: backend parity and adjoint (dot) tests.

:func:`assert_parity` runs two implementations of one function (typically a
NumPy reference and a CUDA kernel) on the same host inputs and compares their
outputs on the host with a tolerance that depends on the output dtype.
:func:`dot_test` checks that an operator and its claimed adjoint satisfy
``<A x, y> = <x, A^H y>`` on random complex inputs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["assert_parity", "dot_test", "ParityReport", "default_rtol"]

# Relative tolerances per dtype: a few ulps of accumulated rounding for the
# transforms and reductions our kernels do, not the dtype's epsilon.
_RTOL = {
    np.dtype(np.float16): 2e-2,
    np.dtype(np.float32): 1e-5,
    np.dtype(np.complex64): 1e-5,
    np.dtype(np.float64): 1e-12,
    np.dtype(np.complex128): 1e-12,
}


def default_rtol(dtype) -> float:
    """The default relative tolerance for outputs of ``dtype`` (exact for integers and bools)."""
    dtype = np.dtype(dtype)
    if dtype.kind in "biu":
        return 0.0
    return _RTOL.get(dtype, 1e-5)


def _to_host(a):
    if type(a).__module__.split(".", 1)[0] == "cupy":
        return a.get()
    return np.asarray(a)


def _copy_inputs(inputs):
    return tuple(np.array(a, copy=True) if isinstance(a, np.ndarray) else a for a in inputs)


@dataclass
class ParityReport:
    """How far a candidate is from its reference, per output."""

    max_abs: list
    max_rel: list  # max |c - r| / max |r|
    norm_rel: list  # ||c - r|| / ||r||

    def __str__(self) -> str:
        rows = [f"output {i}: max abs {a:.3e}, max rel {m:.3e}, norm rel {n:.3e}"
                for i, (a, m, n) in enumerate(zip(self.max_abs, self.max_rel, self.norm_rel))]
        return "; ".join(rows)


def assert_parity(reference, candidate, *host_inputs, rtol=None, atol=None) -> ParityReport:
    """Run ``reference`` and ``candidate`` on copies of the same host inputs and compare.

    Parameters
    ----------
    reference, candidate : callable
        Take ``*host_inputs`` (host arrays; a CUDA candidate moves them to the
        device itself) and return an array or a tuple of arrays, host or device.
    rtol : float, optional
        Relative tolerance; by default :func:`default_rtol` of the reference
        output's dtype (1e-5 for float32 and complex64).
    atol : float, optional
        Absolute tolerance; by default ``rtol`` times the largest magnitude of the
        reference output, so that entries near zero are judged on the output's scale.

    Each element must satisfy ``|c - r| <= atol + rtol * |r|``; shapes must match
    and NaNs never pass. Returns a :class:`ParityReport`; raises ``AssertionError``
    naming the worst element otherwise.
    """
    ref = reference(*_copy_inputs(host_inputs))
    cand = candidate(*_copy_inputs(host_inputs))
    refs = ref if isinstance(ref, (tuple, list)) else (ref,)
    cands = cand if isinstance(cand, (tuple, list)) else (cand,)
    if len(refs) != len(cands):
        raise AssertionError(f"reference returned {len(refs)} outputs, candidate {len(cands)}")
    report = ParityReport([], [], [])
    for i, (r, c) in enumerate(zip(refs, cands)):
        r = _to_host(r)
        c = _to_host(c)
        if r.shape != c.shape:
            raise AssertionError(f"output {i}: shape {c.shape} differs from the reference's {r.shape}")
        if not np.all(np.isfinite(c)):
            raise AssertionError(f"output {i}: candidate has {np.count_nonzero(~np.isfinite(c))} non-finite values")
        tol_r = default_rtol(r.dtype) if rtol is None else float(rtol)
        r64 = r.astype(np.complex128 if np.iscomplexobj(r) or np.iscomplexobj(c) else np.float64)
        c64 = c.astype(r64.dtype)
        scale = float(np.max(np.abs(r64))) if r64.size else 0.0
        tol_a = tol_r * scale if atol is None else float(atol)
        err = np.abs(c64 - r64)
        max_abs = float(err.max()) if err.size else 0.0
        report.max_abs.append(max_abs)
        report.max_rel.append(max_abs / scale if scale else max_abs)
        nr = float(np.linalg.norm(r64))
        report.norm_rel.append(float(np.linalg.norm(c64 - r64)) / nr if nr else float(np.linalg.norm(c64)))
        bad = err > tol_a + tol_r * np.abs(r64)
        if np.any(bad):
            worst = np.unravel_index(int(np.argmax(err - tol_r * np.abs(r64))), err.shape)
            raise AssertionError(
                f"output {i}: {int(bad.sum())} of {bad.size} elements differ beyond rtol={tol_r:g}, atol={tol_a:g}; "
                f"worst at {tuple(int(k) for k in worst)}: candidate {c64[worst]}, reference {r64[worst]} ({report})"
            )
    return report


def _random_complex(rng, shape, dtype, xp):
    a = rng.standard_normal(shape) + 1j * rng.standard_normal(shape)
    return xp.asarray(a.astype(dtype))


def dot_test(forward, adjoint, x_shape, y_shape, *, dtype=np.complex128, rtol=None, seed=0, xp=np,
             trials: int = 3) -> float:
    """Check ``<A x, y> == <x, A^H y>`` for random complex ``x`` and ``y``.

    Parameters
    ----------
    forward, adjoint : callable
        ``forward(x)`` has ``y_shape``, ``adjoint(y)`` has ``x_shape``.
    dtype : complex dtype
        Of the random inputs (complex64 to test a float32 implementation).
    rtol : float, optional
        Tolerance on ``|lhs - rhs| / max(|lhs|, |rhs|)``; 1e-10 for complex128,
        1e-5 for complex64 by default.
    xp : module
        ``numpy`` or ``cupy``: where the random inputs are placed.

    Returns the worst relative mismatch over ``trials`` draws; raises
    ``AssertionError`` when it exceeds ``rtol``.
    """
    dtype = np.dtype(dtype)
    if rtol is None:
        rtol = 1e-10 if dtype == np.complex128 else 1e-5
    rng = np.random.default_rng(seed)
    worst = 0.0
    for _ in range(trials):
        x = _random_complex(rng, x_shape, dtype, xp)
        y = _random_complex(rng, y_shape, dtype, xp)
        ax = _to_host(forward(x)).astype(np.complex128)
        ahy = _to_host(adjoint(y)).astype(np.complex128)
        if ax.shape != tuple(y_shape) or ahy.shape != tuple(x_shape):
            raise AssertionError(f"forward gives {ax.shape} (expected {tuple(y_shape)}), "
                                 f"adjoint gives {ahy.shape} (expected {tuple(x_shape)})")
        lhs = np.vdot(ax, _to_host(y).astype(np.complex128))
        rhs = np.vdot(_to_host(x).astype(np.complex128), ahy)
        rel = abs(lhs - rhs) / max(abs(lhs), abs(rhs), np.finfo(float).tiny)
        worst = max(worst, float(rel))
    if worst > rtol:
        raise AssertionError(f"dot test failed: relative mismatch {worst:.3e} > rtol {rtol:g}")
    return worst
