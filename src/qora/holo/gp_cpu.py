"""Gerchberg-Papoulis on the host's threads: in-place transforms from the FFT entry point's plans and
one fused Numba pass per element-wise step.

Per iteration of :func:`qora.holo.odt.gerchberg_papoulis_r2c`: an unscaled C2R into a real volume,
one pass that scales it and clips it to the bounds (max(v, 0) by default), an unscaled R2C back, and one pass for the restore step
a + b E. NumPy's version made four temporaries per iteration and ran each on one core. Both
transforms and both passes follow :func:`qora.backend.host.num_threads`. The NumPy loops of
:mod:`qora.holo.odt` stay as the reference that ``tests/holo`` compares these with.
"""

from __future__ import annotations

from qora.backend.host import numba_threads, openmp_passive

openmp_passive()  # before Numba loads its OpenMP runtime

import numba  # noqa: E402
import numpy as np  # noqa: E402

from qora.backend import resolve  # noqa: E402
from qora.progress import report  # noqa: E402

__all__ = ["gp_r2c", "gp_c2c"]

_jit = dict(parallel=True, fastmath=True, cache=True)


@numba.njit(**_jit)
def _clip_scaled(v, scale, low, high):
    """v = clip(scale v, low, high) in place (v flat, real)."""
    for i in numba.prange(v.size):
        x = v[i] * scale
        v[i] = low if x < low else (high if x > high else x)


@numba.njit(**_jit)
def _restore_half(est, a, b):
    """est = a + b est in place (flat half spectra; b real)."""
    for i in numba.prange(est.size):
        est[i] = a[i] + b[i] * est[i]


@numba.njit(**_jit)
def _clip_scaled_complex(w, scale, low, high):
    """w = clip(scale Re w, low, high) + 0i in place (flat, complex)."""
    for i in numba.prange(w.size):
        x = w[i].real * scale
        w[i] = complex(low if x < low else (high if x > high else x), 0.0)


@numba.njit(**_jit)
def _restore_measured(est, data, measured):
    """est = data where measured (flat; measured as uint8)."""
    for i in numba.prange(est.size):
        if measured[i] != 0:
            est[i] = data[i]


def gp_r2c(a, b, shape, iterations: int, progress=None, *, low: float = 0.0, high: float = np.inf) -> np.ndarray:
    """``iterations`` GP steps on half spectra from the restore coefficients ``a`` (complex) and ``b``
    (real), both of the half-spectrum shape of real volumes ``shape``, the volume kept in [``low``,
    ``high``]; returns the final real volume (the inverse of the last estimate) in FFT layout (the caller
    shifts it)."""
    plan = resolve("cpu").fft.r2c(shape, np.float64, norm=None, fftw=False)  # as gp_c2c's plan: no FFTW planning
    a = np.ascontiguousarray(a, np.complex128).reshape(-1)
    b = np.ascontiguousarray(b, np.float64).reshape(-1)
    estimate = np.empty(plan.spectrum_shape, np.complex128)
    estimate.reshape(-1)[...] = a
    volume = np.empty(shape, np.float64)
    scale = 1.0 / plan.n
    return _gp_loop(plan, estimate, volume, lambda v: _clip_scaled(v, scale, low, high),
                    lambda e: _restore_half(e, a, b), iterations, progress)


def gp_c2c(data, measured, iterations: int, progress=None, *, low: float = 0.0, high: float = np.inf) -> np.ndarray:
    """``iterations`` C2C GP steps from the mapped spectrum ``data`` (complex, FFT layout) and the mask of
    ``measured`` bins, the real part kept in [``low``, ``high``]; returns the final complex volume in FFT
    layout (the caller shifts it)."""
    shape = data.shape
    # 50 transforms do not repay FFTW_MEASURE's planning at each new shape and thread count (36 s at 64^3
    # complex128 on 2 threads, against 0.2 s for the whole loop on ducc0)
    plan = resolve("cpu").fft.c2c(shape, np.complex128, norm=None, fftw=False)
    data_flat = np.ascontiguousarray(data, np.complex128).reshape(-1)
    mask = np.ascontiguousarray(measured, np.bool_).reshape(-1).view(np.uint8)
    estimate = plan.empty()
    estimate.reshape(-1)[...] = data_flat
    work = plan.empty()
    scale = 1.0 / plan.n
    return _gp_loop(plan, estimate, work, lambda w: _clip_scaled_complex(w, scale, low, high),
                    lambda e: _restore_measured(e, data_flat, mask), iterations, progress)


def _gp_loop(plan, estimate, volume, constrain, restore, iterations: int, progress):
    """Gerchberg-Papoulis, written once for the half (R2C) and full (C2C) spectra: ``iterations`` times the
    volume from the estimate (unnormalised inverse), ``constrain`` on its flat view (scaled and clipped), the
    estimate from it, ``restore`` on the estimate's flat view (the measured bins put back); returns the
    final volume, normalised."""
    flat_e, flat_v = estimate.reshape(-1), volume.reshape(-1)
    for it in range(iterations):
        numba_threads()
        plan.inverse(estimate, out=volume)
        constrain(flat_v)
        plan.forward(volume, out=estimate)
        restore(flat_e)
        report(progress, "gp", it + 1, iterations)
    plan.inverse(estimate, out=volume)
    volume *= 1.0 / plan.n
    return volume
