"""A run's scores for each start: the Fourier error and the Poisson deviance of the model it fitted.

The model is the one the run's last stage fitted: the coherent intensity ``|F x|^2``, or, after a stage with the
psf model (:mod:`qora.phase.coherence`), that intensity blurred by the start's kernel. Scoring a partially
coherent run by its unblurred intensity would charge it with the blur it modelled: the same object, the same
counts, and an error that no longer says how well the run fits them (docs/phase.md, "Partial coherence": "A run
is scored by the model it fitted"). The per-iteration errors of a psf stage are already of the blurred model, as
are cohere's.

Everything runs on the engine's arrays, slab by slab where no blur is needed, so that the device holds only a
slab's temporaries beyond the engine's buffers.
"""

from __future__ import annotations

import numpy as np

__all__ = ["slabs", "unitary_in_place", "poisson_deviance_sum", "final_scores"]


def slabs(length: int, count: int = 8):
    """``count`` slices (or fewer) covering ``range(length)`` in order."""
    step = max(1, -(-length // count))
    return [slice(i, min(length, i + step)) for i in range(0, length, step)]


def unitary_in_place(engine, *, inverse: bool) -> None:
    """Unitary F (or F^-1) of every start in the engine's x, in place: with the engine's own
    unscaled fp32 plan where it has one (no second cuFFT work area on the device), else a
    cached ortho plan start by start."""
    x = engine.x
    plan = getattr(engine, "plan", None)
    if plan is not None:
        (plan.inverse if inverse else plan.forward)(x, out=x)
        x *= np.float32(engine.scale)
        return
    plan = engine.backend.fft.c2c(engine.shape, np.complex64, norm="ortho")
    for k in range(engine.batch):
        (plan.inverse if inverse else plan.forward)(x[k], out=x[k])


def poisson_deviance_sum(calc, obs, xp=np) -> float:
    """Sum over pixels of the Poisson deviance 2 (calc - obs + obs log(obs / calc))."""
    calc = xp.maximum(calc.astype(np.float64), 1e-30)
    safe_obs = xp.where(obs > 0, obs, 1.0)
    term = xp.where(obs > 0, obs * xp.log(safe_obs / calc), 0.0)
    return float(xp.sum(2.0 * (calc - obs + term)))


def _model_intensity(y, start: int, psf, shape, xp):
    """The intensity start ``start`` predicts from its transform ``y``: ``|y|^2``, blurred by its kernel when the
    run ended on a psf stage (``psf``: its :class:`~qora.phase.coherence.Coherence`), else None (taken slab by
    slab by the caller)."""
    if psf is None:
        return None
    from qora.phase.coherence import blur

    return xp.maximum(blur(y.real * y.real + y.imag * y.imag, psf.transfer[start], shape), 0)


def final_scores(engine, count: int, *, intensity, mask, free, psf=None):
    """For the engine's first ``count`` starts: the Fourier error of the final object's model (``sqrt(sum
    (sqrt(I_model) - a)^2 / sum a^2)`` over the measured pixels), and the Poisson deviance per pixel on the used and
    on the held-out pixels (NaN where there are none).

    ``intensity`` (detector layout), ``mask`` (True: unmeasured; None) and ``free`` (True: held out) are the
    solver's. ``psf``: the last stage's :class:`~qora.phase.coherence.Coherence` when it fitted the blurred model.
    The objects are transformed in place in the engine's x (they are on the host by then).
    """
    xp = engine.backend.xp
    shape = tuple(engine.shape)
    measured = ~mask if mask is not None else np.ones(shape, bool)
    used = np.fft.ifftshift(measured & ~free)
    held = np.fft.ifftshift(free)
    obs = np.fft.ifftshift(intensity)
    unitary_in_place(engine, inverse=False)
    x = engine.x
    errors, llk, free_llk = [], [], []
    for k in range(count):
        blurred = _model_intensity(x[k], k, psf, shape, xp)
        sums = np.zeros((2, 2))  # (used, held out) x (deviance sum, pixel count)
        misfit = 0.0
        for sl in slabs(shape[0]):
            if blurred is None:
                modulus = xp.abs(x[k][sl])
                calc = modulus**2
            else:
                calc = blurred[sl]
                modulus = xp.sqrt(calc)
            amp = engine.amp[sl]
            misfit += float(xp.sum(xp.where(amp >= 0, (modulus - amp) ** 2, 0), dtype=np.float64))
            for row, sel in ((0, used[sl]), (1, held[sl])):
                if sel.any():
                    sel_d = xp.asarray(sel)
                    sums[row] += (poisson_deviance_sum(calc[sel_d], xp.asarray(obs[sl])[sel_d], xp), sel.sum())
        errors.append(np.sqrt(misfit / engine.denominator))
        llk.append(sums[0, 0] / sums[0, 1] if sums[0, 1] else float("nan"))
        free_llk.append(sums[1, 0] / sums[1, 1] if sums[1, 1] else float("nan"))
    return np.array(errors), llk, free_llk
