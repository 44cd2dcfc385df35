"""The agreement and its derivatives from a band's moments, and the fitted parameters' standard
errors: arithmetic on the per-frequency sums of :meth:`qora.ssb.band.Band.moments` (summed over
shards where G is split, :mod:`qora.distributed.ssb`), the same for every route that made them."""

from __future__ import annotations

import math

import numpy as np

from qora.backend.core import xp_of

__all__ = ["combine_moments", "combine_batch_moments", "agreement_from_sums", "uncertainties"]


def _to_host(a):
    return a.get() if hasattr(a, "get") else a


def combine_moments(m: dict, total: float, order: int = 2):
    """The agreement sum_Q |S|^2 / N / total from the moments of :meth:`Band.moments` (summed over
    shards where G is split), with its gradient and Hessian for ``order`` 1 and 2."""
    xp = xp_of(m["S"])
    S, N = m["S"], xp.maximum(m["N"], 1e-300)
    P = xp.abs(S) ** 2
    value = float(xp.sum(P / N)) / total
    if order == 0:
        return value
    Sp, Np = m["Sp"], m["Np"]
    Pp = 2 * xp.real(xp.conj(S)[None] * Sp)
    grad = _to_host(xp.sum(Pp / N - P * Np / N**2, -1)) / total
    if order == 1:
        return value, grad
    # all pairs at once, (nparam, nparam, nq): a few launches however many parameters
    Pij = 2 * xp.real(xp.conj(Sp)[None] * Sp[:, None] + xp.conj(S) * m["Sij"])
    outer_p = Pp[:, None] * Np[None] + Pp[None] * Np[:, None]
    h = Pij / N - outer_p / N**2 - P * m["Nij"] / N**2 + 2 * P * Np[:, None] * Np[None] / N**3
    hessian = np.asarray(_to_host(xp.sum(h, -1)), float) / total
    return value, grad, (hessian + hessian.T) / 2


def agreement_from_sums(sums, names, parameters, total: float, order: int = 2):
    """:func:`combine_moments`' result from the sums over Q that
    :func:`qora.ssb.kernels.derivative_sums` makes on the device (value, the first derivatives in
    ``names``, the second of the pairs i <= j), taken in the order of ``parameters``."""
    sums = np.asarray(_to_host(sums), float) / total
    n = len(names)
    value = float(sums[0])
    idx = np.array([names.index(p) for p in parameters])
    grad = sums[1:1 + n][idx]
    if order == 0:
        return value
    if order == 1:
        return value, grad
    hessian = np.empty((n, n))
    i, j = np.triu_indices(n)
    hessian[i, j] = hessian[j, i] = sums[1 + n:]
    return value, grad, hessian[np.ix_(idx, idx)]


def combine_batch_moments(m: dict, total: float) -> np.ndarray:
    """The agreement of each set from :meth:`Band.batch_moments` (summed over shards)."""
    xp = xp_of(m["S"])
    return np.asarray(_to_host(xp.sum(xp.abs(m["S"]) ** 2 / xp.maximum(m["N"], 1e-300), -1))) / total



def uncertainties(agreement: float, hessian, *, total: float, shape, parameters) -> dict:
    """Standard errors of the fitted ``parameters`` from the Hessian of the agreement at its maximum,
    for a band of ``shape`` (frequencies, bright-field pixels) holding the signal ``total`` = sum |G|^2
    (:class:`Band`'s, or a band split over workers, :class:`qora.distributed.ssb.ShardedBand`).

    With white complex noise of variance sigma^2 on G (Poisson counts give nearly that over
    the bright field), -log L = E / sigma^2 with E = T (1 - agreement) the energy the model
    leaves (T = sum |G|^2, Phi(Q) profiled out), so cov = sigma^2 (d2 E)^-1 =
    sigma^2 / T (-H)^-1, and sigma^2 = E / (elements - frequencies - parameters): the
    residual estimates the noise (model error counts as noise, so the errors are upper
    estimates on a sample the weak-phase model does not describe). Units: A, rad.
    """
    h = -np.asarray(hessian, float)
    nq, nbf = shape
    dof = max(1, nq * nbf - nq - len(parameters))
    sigma2 = total * max(1.0 - agreement, 0.0) / dof
    try:
        cov = sigma2 / total * np.linalg.inv(h)
    except np.linalg.LinAlgError:
        return {name: float("inf") for name in parameters}
    return {name: float(math.sqrt(max(cov[i, i], 0.0))) for i, name in enumerate(parameters)}
