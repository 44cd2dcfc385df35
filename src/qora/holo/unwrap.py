"""Least-squares phase unwrapping by a DCT Poisson solve, and the Rytov phase.

The unwrapped phase phi minimises sum |grad phi - wrap(grad psi)|^2 for the wrapped
phase psi (Ghiglia and Romero, J. Opt. Soc. Am. A 11, 107 (1994),
doi:10.1364/JOSAA.11.000107): a Poisson equation with Neumann boundaries, which
the DCT-II diagonalises with eigenvalues 2 cos(pi k / M) + 2 cos(pi l / N) - 4. The
DCT here is computed by an FFT (Makhoul's reordering), with its exact inverse, so
the solve needs no other scaling. The least-squares solution is then made congruent
with the wrapped phase: phi = psi + 2 pi round((phi_LS + c - psi) / 2 pi), with the
constant c that best aligns the two.
"""

from __future__ import annotations

import math

import numpy as np

from qora.backend import xp_of
from qora.backend.host import map_parts

__all__ = ["dct2", "idct2", "dct", "idct", "unwrap", "rytov", "wrap"]


def wrap(p):
    """Phase wrapped into [-pi, pi)."""
    return (p + math.pi) % (2 * math.pi) - math.pi


def dct(x, axis: int = -1):
    """Unnormalised DCT-II along ``axis`` (scipy's ``dct(x, type=2)``): 2 sum x_n cos(pi k (2n+1) / 2N).

    Makhoul's algorithm: even samples in order, then odd samples reversed, one FFT,
    and a twiddle exp(-i pi k / 2N).
    """
    xp = xp_of(x)
    x = xp.moveaxis(xp.asarray(x), axis, -1)
    n = x.shape[-1]
    v = xp.concatenate([x[..., ::2], x[..., 1::2][..., ::-1]], axis=-1)
    V = xp.fft.fft(v, axis=-1)
    k = xp.arange(n)
    out = 2 * (xp.exp(-1j * math.pi * k / (2 * n)) * V).real
    return xp.moveaxis(out, -1, axis)


def idct(X, axis: int = -1):
    """The exact inverse of :func:`dct` along ``axis``.

    V_k = exp(i pi k / 2N) (X_k - i X_{N-k}) / 2 (X_N = 0), an inverse FFT, and the
    reordering undone.
    """
    xp = xp_of(X)
    X = xp.moveaxis(xp.asarray(X), axis, -1)
    n = X.shape[-1]
    k = xp.arange(n)
    Xr = xp.concatenate([xp.zeros_like(X[..., :1]), X[..., 1:][..., ::-1]], axis=-1)  # X_{N-k}, X_N = 0
    V = xp.exp(1j * math.pi * k / (2 * n)) * (X - 1j * Xr) / 2
    v = xp.fft.ifft(V, axis=-1).real
    x = xp.empty_like(v)
    half = (n + 1) // 2
    x[..., ::2] = v[..., :half]
    x[..., 1::2] = v[..., half:][..., ::-1]
    return xp.moveaxis(x, -1, axis)


def dct2(x):
    """DCT-II over the last two axes."""
    return dct(dct(x, -1), -2)


def idct2(X):
    """Inverse of :func:`dct2`."""
    return idct(idct(X, -2), -1)


def unwrap(psi):
    """Unwrap phase images (..., M, N) by least squares, congruent with the wrapped input.

    Returns the unwrapped phase; each image is determined up to one multiple of
    2 pi (see :func:`rytov` for the border rule that fixes it).
    """
    xp = xp_of(psi)
    psi = xp.asarray(psi, dtype=np.float64)
    m, n = psi.shape[-2:]
    dx = wrap(xp.diff(psi, axis=-1))
    dy = wrap(xp.diff(psi, axis=-2))
    rho = xp.zeros_like(psi)
    # divergence of the wrapped gradient with Neumann boundaries (no flux through the edges)
    rho[..., :, :-1] += dx
    rho[..., :, 1:] -= dx
    rho[..., :-1, :] += dy
    rho[..., 1:, :] -= dy
    ky = xp.arange(m)[:, None]
    kx = xp.arange(n)[None, :]
    eig = 2 * xp.cos(math.pi * ky / m) + 2 * xp.cos(math.pi * kx / n) - 4
    eig[0, 0] = 1.0
    spec = dct2(rho) / eig
    spec[..., 0, 0] = 0.0
    phi = idct2(spec)
    # congruence: the constant that best aligns phi with psi, then psi + 2 pi round(...)
    c = xp.angle(xp.mean(xp.exp(1j * (psi - phi)), axis=(-2, -1), keepdims=True))
    return psi + 2 * math.pi * xp.round((phi + c - psi) / (2 * math.pi))


def _border_mean(p):
    xp = xp_of(p)
    border = xp.concatenate([p[..., 0, :], p[..., -1, :], p[..., 1:-1, 0], p[..., 1:-1, -1]], axis=-1)
    return border.mean(axis=-1)


# Below this many values in a stack the images are unwrapped in one call (a thread pool's start costs more)
_THREADED_FROM = 2**18


def _by_images(fn, stack):
    """``fn`` of a NumPy stack (A, ...), its images split into :func:`num_threads` contiguous parts run on
    as many threads: NumPy's FFTs and ufuncs release the GIL, and each image is independent."""
    pieces = map_parts(lambda lo, hi: fn(stack[lo:hi]), stack.shape[0])
    return pieces[0] if len(pieces) == 1 else np.concatenate(pieces, axis=0)


def rytov(ratio):
    """The Rytov phase log(u / u_in) = log|r| + i unwrap(arg r) of field ratios (..., M, N).

    The ratios are dimensionless; the result is complex, its real part the log-amplitude (nepers)
    and its imaginary part the unwrapped phase (rad).

    Border rule: each unwrapped phase image is shifted by the multiple of 2 pi that
    brings its border mean closest to zero (the sample sits in the middle, and the
    border sees the medium).

    A host stack (A, M, N) is split over :func:`qora.backend.host.num_threads` threads by images.
    """
    xp = xp_of(ratio)
    ratio = xp.asarray(ratio)
    if xp is np and ratio.ndim >= 3 and ratio.shape[0] > 1 and ratio.size >= _THREADED_FROM:
        if xp.any(xp.abs(ratio) <= 0):
            raise ValueError("a field ratio is zero: its logarithm is undefined")
        return _by_images(_rytov, ratio)
    return _rytov(ratio)


def _rytov(ratio):
    xp = xp_of(ratio)
    mag = xp.abs(ratio)
    if xp.any(mag <= 0):
        raise ValueError("a field ratio is zero: its logarithm is undefined")
    phase = unwrap(xp.angle(ratio))
    shift = xp.round(_border_mean(phase) / (2 * math.pi))
    phase = phase - 2 * math.pi * shift[..., None, None]
    return xp.log(mag) + 1j * phase
