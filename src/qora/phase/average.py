"""The mean of a stage's last iterates (the recipe option ``average=N``).

At few counts error reduction stops at the fixed point nearest its start, and the found objects sit at
different such points around the truth, each carrying its own high-q noise (docs/phase.md, "Few photons: what
the counts allow"). HIO on a fixed support keeps moving between them; the mean of its in-support iterates
averages that noise down, and ER from the mean ends nearer the truth. Each iterate's global phase (which the
data do not fix, and which HIO lets drift) is matched to the first one averaged before it is added.

The loop is array code over ``xp`` (:func:`qora.phase.array_loop.array_iterate`, with the exact modulus
projection of :func:`qora.phase.band.band_modulus_step` at k = 0), so every engine shares it and a GPU run
keeps the sums and the error history on the device until the chunk ends.
"""

from __future__ import annotations

import numpy as np

from qora.phase.array_loop import array_iterate
from qora.phase.band import band_modulus_step

__all__ = ["IterateMean", "average_iterate"]


class IterateMean:
    """Running sum of the in-support iterates of every start of an engine, phase-matched per start."""

    def __init__(self, engine) -> None:
        xp = engine.backend.xp
        self.support = engine.support
        self.sum = xp.zeros(engine.x.shape, np.complex64)
        self.first = None
        self.count = 0
        self.axes = tuple(range(engine.x.ndim - len(engine.shape), engine.x.ndim))

    def add(self, x, xp) -> None:
        inside = xp.where(self.support, x, 0)
        if self.first is None:
            self.first = inside.copy()
        overlap = xp.sum(xp.conj(self.first) * inside, axis=self.axes, keepdims=True)
        size = xp.abs(overlap)
        # exp(-i angle(overlap)); an iterate orthogonal to the first (size 0) is added as it is
        factor = xp.where(size > 0, xp.conj(overlap) / xp.where(size > 0, size, 1), 1).astype(np.complex64)
        self.sum += inside * factor
        self.count += 1

    def write_mean(self, engine) -> None:
        """Replace every start's iterate by its mean (zero outside the support)."""
        if self.count:
            engine.x[...] = self.sum / np.float32(self.count)
            engine.x_written()


def average_iterate(engine, mean: IterateMean, iterations: int, a: float, b: float, constraint=None) -> np.ndarray:
    """``iterations`` ER/HIO/RAAR updates of every start of ``engine`` with the exact modulus projection, each
    updated iterate added to ``mean``. Returns the Fourier error per iteration and start (iterations, B)."""
    amp = engine.amp

    def step(y, xp, _):
        return band_modulus_step(y, amp, 0.0, xp)

    return array_iterate(engine, iterations, a, b, constraint, step, what="averaging", after=mean.add)
