"""Helpers for Qora's tests: backend parity and adjoint (dot) tests.

:func:`assert_parity` runs two implementations of one function (typically a
NumPy reference and a CUDA kernel) on the same host inputs and compares their
outputs on the host with a tolerance that depends on the output dtype.
:func:`dot_test` checks that an operator and its claimed adjoint satisfy
``<A x, y> = <x, A^H y>`` on random complex inputs.
:class:`DeviceArray` and :class:`DeviceXp` emulate a CuPy array and module on the CPU, for array code
meant for both: NumPy behind CuPy's rules, so that a NumPy-only call on a device array fails here too.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["assert_parity", "dot_test", "ParityReport", "default_rtol", "DeviceArray", "DeviceXp"]

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


# -- an emulated device: NumPy behind CuPy's rules -------------------------------------------------------


class DeviceArray:
    """A NumPy array that behaves as a CuPy array does towards NumPy: ufuncs (operators included) and
    :class:`DeviceXp`'s functions work on it and give device arrays; a NumPy function called on it directly
    (``np.linalg.solve``, ``np.where``, ...), an implicit conversion (``np.asarray``) or a NumPy array mixed into
    an operation raises TypeError, as with CuPy; ``.get()`` copies it to the host. Methods (``astype``,
    ``reshape``, ``sum``, ...) stay on the device. For testing array code without a GPU."""

    __array_priority__ = 1000

    def __init__(self, a) -> None:
        self.a = np.asarray(a)

    def __array__(self, *args, **kwargs):
        raise TypeError("implicit conversion of a device array to a NumPy array (use .get())")

    def __array_function__(self, func, types, args, kwargs):
        raise TypeError(f"the NumPy function {func.__name__} called on a device array")

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        _refuse_host_arrays(inputs)
        if "out" in kwargs:
            kwargs["out"] = tuple(_unwrap(o) for o in kwargs["out"])
        return _wrap(getattr(ufunc, method)(*(_unwrap(x) for x in inputs), **kwargs))

    def get(self) -> np.ndarray:
        return self.a.copy()

    def set(self, arr, stream=None) -> None:
        """A host array copied in, with CuPy's checks: a NumPy array of this dtype and shape, into a
        contiguous array (``stream``: CuPy's, accepted and not used)."""
        if not isinstance(arr, np.ndarray):
            raise TypeError("Only numpy.ndarray can be set to cupy.ndarray")
        if arr.dtype != self.a.dtype:
            raise TypeError(f"{arr.dtype} array cannot be set to {self.a.dtype} array")
        if arr.shape != self.a.shape:
            raise ValueError(f"Shape mismatch. Old shape: {self.a.shape}, new shape: {arr.shape}")
        if not self.a.flags.c_contiguous:
            raise RuntimeError("Cannot set to non-contiguous array")
        self.a[...] = arr

    shape = property(lambda self: self.a.shape)
    dtype = property(lambda self: self.a.dtype)
    ndim = property(lambda self: self.a.ndim)
    size = property(lambda self: self.a.size)
    nbytes = property(lambda self: self.a.nbytes)
    T = property(lambda self: DeviceArray(self.a.T))
    real = property(lambda self: DeviceArray(self.a.real))
    imag = property(lambda self: DeviceArray(self.a.imag))

    def __getattr__(self, name):
        if name.startswith("__"):  # NumPy's protocols (__array_interface__, ...): a device array has none
            raise AttributeError(name)
        method = getattr(self.a, name)
        return lambda *args, **kwargs: _wrap(method(*(_unwrap(x) for x in args), **kwargs))

    def __getitem__(self, key):
        return DeviceArray(self.a[_unwrap(key)])

    def __setitem__(self, key, value) -> None:
        self.a[_unwrap(key)] = _unwrap(value)

    def __float__(self) -> float:
        return float(self.a)

    def __int__(self) -> int:
        return int(self.a)

    def __bool__(self) -> bool:
        return bool(self.a)

    def __len__(self) -> int:
        return len(self.a)


def _binary(ufunc, reflected: bool = False):
    return (lambda self, other: ufunc(other, self)) if reflected else (lambda self, other: ufunc(self, other))


for _name, _ufunc in (("add", np.add), ("sub", np.subtract), ("mul", np.multiply), ("truediv", np.true_divide),
                      ("floordiv", np.floor_divide), ("mod", np.remainder), ("pow", np.power), ("matmul", np.matmul),
                      ("and", np.bitwise_and), ("or", np.bitwise_or), ("xor", np.bitwise_xor)):
    setattr(DeviceArray, f"__{_name}__", _binary(_ufunc))
    setattr(DeviceArray, f"__r{_name}__", _binary(_ufunc, reflected=True))
for _name, _ufunc in (("lt", np.less), ("le", np.less_equal), ("gt", np.greater), ("ge", np.greater_equal),
                      ("eq", np.equal), ("ne", np.not_equal)):
    setattr(DeviceArray, f"__{_name}__", _binary(_ufunc))
DeviceArray.__hash__ = None
DeviceArray.__neg__ = lambda self: np.negative(self)
DeviceArray.__abs__ = lambda self: np.absolute(self)
DeviceArray.__invert__ = lambda self: np.invert(self)


def _refuse_host_arrays(args) -> None:
    for x in args:
        if isinstance(x, np.ndarray):
            raise TypeError(f"a NumPy array {x.shape} mixed with device arrays")
        if isinstance(x, (list, tuple)):
            _refuse_host_arrays(x)


def _unwrap(x):
    if isinstance(x, DeviceArray):
        return x.a
    if isinstance(x, (tuple, list)):
        return type(x)(_unwrap(v) for v in x)
    return x


def _wrap(r):
    if isinstance(r, np.ndarray) or (isinstance(r, np.generic) and not isinstance(r, np.bool_)):
        return DeviceArray(r)  # a reduction gives a 0-d device array, as CuPy's
    if isinstance(r, tuple):
        return tuple(_wrap(v) for v in r)
    return r


class DeviceXp:
    """The array module of :class:`DeviceArray` (the role of ``cupy``, or of ``cupyx.scipy.ndimage`` with
    ``module=scipy.ndimage``): ``module``'s functions taking and giving device arrays. Host arrays enter only
    through ``asarray``, ``array`` and ``ascontiguousarray``; anywhere else they raise TypeError."""

    _ENTRIES = ("asarray", "array", "ascontiguousarray")

    def __init__(self, module=np) -> None:
        self._module = module

    def __getattr__(self, name):
        attr = getattr(self._module, name)
        if name in ("linalg", "fft") and self._module is np:
            return DeviceXp(getattr(np, name))
        if isinstance(attr, type) or not callable(attr):
            return attr
        strict = name not in self._ENTRIES

        def call(*args, **kwargs):
            if strict:
                _refuse_host_arrays(args + tuple(kwargs.values()))
            return _wrap(attr(*_unwrap(args), **{k: _unwrap(v) for k, v in kwargs.items()}))

        return call


def error_line(result) -> str:
    """The one ``Error:`` line of a refused command-line run (a click ``Result``), after checking the refusal's
    shape: exit status 2, exactly one such line, no traceback. Tests match its text themselves."""
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(lines) == 1, result.output
    assert "Traceback" not in result.output
    return lines[0]
