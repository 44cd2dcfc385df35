"""The isotropic total-variation proximal step by fast gradient projection (FGP).

prox(v) = argmin_x 1/2 ||x - v||^2 + lam TV(x) subject to x >= 0, with
TV(x) = sum over voxels of |D x| and D the forward differences along (z, y, x) (zero
across the last plane of each axis: Neumann boundaries). FGP (Beck and Teboulle,
IEEE Trans. Image Process. 18, 2419 (2009), doi:10.1109/TIP.2009.2028250) works on
the dual p (three components per voxel):

    x = max(v - lam D^T r, 0)
    p' = proj_unit_ball(r + D x / (12 lam))        (||D||^2 <= 12 in 3D)
    t' = (1 + sqrt(1 + 4 t^2)) / 2,  r = p' + (t - 1) / t' (p' - p)

The dual can be passed back in to warm-start the next call (FISTA's outer loop does).
"""

from __future__ import annotations

import numpy as np

from qora.holo.fista import momenta

__all__ = ["gradient", "gradient_adjoint", "fgp_prox", "tv"]


def gradient(x):
    """Forward differences of a volume (z, y, x) -> (3, z, y, x), zero across the last plane."""
    out = np.zeros((3,) + x.shape, x.dtype)
    out[0, :-1] = x[1:] - x[:-1]
    out[1, :, :-1] = x[:, 1:] - x[:, :-1]
    out[2, :, :, :-1] = x[:, :, 1:] - x[:, :, :-1]
    return out


def gradient_adjoint(p):
    """D^T p (minus the divergence), the adjoint of :func:`gradient`."""
    out = np.zeros(p.shape[1:], p.dtype)
    out[:-1] -= p[0, :-1]
    out[1:] += p[0, :-1]
    out[:, :-1] -= p[1, :, :-1]
    out[:, 1:] += p[1, :, :-1]
    out[:, :, :-1] -= p[2, :, :, :-1]
    out[:, :, 1:] += p[2, :, :, :-1]
    return out


def tv(x) -> float:
    """Isotropic total variation sum |D x|."""
    return float(np.sqrt((gradient(x) ** 2).sum(axis=0)).sum())


def fgp_prox(v, lam: float, iterations: int, *, dual=None, nonnegative: bool = True, bounds=None):
    """prox of lam TV (+ x >= 0) at ``v`` by ``iterations`` FGP steps; returns ``(x, dual)``.

    ``dual`` (3, *v.shape) warm-starts the dual variable; the returned one can be passed
    to the next call. ``bounds`` (lower, upper) replaces x >= 0 by lower <= x <= upper (FGP
    projects the primal point onto any box: Beck and Teboulle's constrained TV).
    """
    lower, upper = bounds if bounds is not None else ((0.0 if nonnegative else -np.inf), np.inf)
    if lam <= 0:
        return np.clip(v, lower, upper), dual
    p = np.zeros((3,) + v.shape, v.dtype) if dual is None else dual
    r = p.copy()
    weights = momenta()
    step = 1.0 / (12.0 * lam)

    def primal(q):
        return np.clip(v - lam * gradient_adjoint(q), lower, upper)

    for _ in range(iterations):
        x = primal(r)
        q = r + step * gradient(x)
        norm = np.sqrt((q**2).sum(axis=0))
        p_new = q / np.maximum(norm, 1.0)
        r = p_new + next(weights) * (p_new - p)
        p = p_new
    return primal(p), p
