"""The free log-likelihood during the iterations, and the switch it drives.

Some measured pixels (``Solver(free_fraction=...)``) are held out of the modulus constraint. The Poisson
deviance of the object's model on them, 2 sum (I_c - I + I log(I / I_c)) per pixel, measures how well
the object predicts counts it was not fitted to: it falls while the iterate finds the object and rises
once it starts fitting noise, which in HIO and RAAR happens at few photons (their feedback keeps moving
the object after the data stop constraining it). A stage with ``switch=N`` computes it every N
iterations and ends once no start of the batch has improved on its lowest value for :data:`PATIENCE`
checks in a row, so the recipe moves on (to ER, which settles the object where it is) instead of
running on in the noise. (HIO's free LLK fluctuates from check to check: a single rise is not a trend.)

Everything runs on the engine's device; one read of B numbers per check, never per iteration.
"""

from __future__ import annotations

import numpy as np

from qora.backend import fft

__all__ = ["PATIENCE", "free_deviance", "FreeLikelihood"]

PATIENCE = 3


def free_deviance(x, support, counts, free, xp):
    """Poisson deviance per held-out pixel of each start's object (x on its support), on the device.

    Parameters
    ----------
    x : complex (B, *shape), centre-origin objects
    support : (B, *shape), bool or uint8
    counts : float (*shape), FFT layout, the counts on the held-out pixels
    free : bool (*shape), FFT layout, the held-out pixels
    """
    axes = tuple(range(1, x.ndim))
    y = fft.fftn(xp.where(support.astype(bool), x, 0), axes=axes, norm="ortho")
    calc = xp.maximum((y.real * y.real + y.imag * y.imag).astype(np.float64), 1e-30)
    obs = counts.astype(np.float64)
    term = xp.where(obs > 0, obs * xp.log(xp.where(obs > 0, obs, 1.0) / calc), 0.0)
    dev = xp.where(free, 2.0 * (calc - obs + term), 0.0)
    return xp.sum(dev.reshape(dev.shape[0], -1), axis=1) / max(1, int(free.sum()))


class FreeLikelihood:
    """The held-out pixels of a solver, on the engine's device, and the rule that ends a stage.

    ``check(engine, count)`` returns True when the stage should end: for :data:`PATIENCE` checks in a row
    no start's free deviance went below its lowest so far in the stage (``reset()`` at each stage's start).
    """

    def __init__(self, intensity, free, xp) -> None:
        self.free = xp.asarray(np.fft.ifftshift(free))
        self.counts = xp.asarray(np.fft.ifftshift(np.where(free, intensity, 0.0)).astype(np.float32))
        self.xp = xp
        self.best = None
        self.stale = 0
        self.values = []

    def reset(self) -> None:
        self.best, self.stale = None, 0

    def check(self, engine, count: int) -> bool:
        sync = getattr(engine, "_sync_x", None)
        if sync is not None:
            sync()
        dev = np.asarray(engine.backend.to_host(free_deviance(engine.x, engine.support, self.counts, self.free,
                                                              self.xp)))[:count]
        self.values.append(dev)
        if self.best is None or bool(np.any(dev < self.best)):
            self.stale = 0
        else:
            self.stale += 1
        self.best = dev if self.best is None else np.minimum(self.best, dev)
        return self.stale >= PATIENCE
