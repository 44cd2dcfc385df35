"""The ER/HIO/RAAR loop written once over ``xp``, for stages whose modulus step is array code.

Stages with a modulus constraint other than the engines' own fused projection (the partial-coherence
model of :mod:`qora.phase.coherence`, the noise band of :mod:`qora.phase.band`) run here on the
engine's arrays (NumPy or CuPy), so every engine variant shares one implementation. The per-iteration
Fourier error stays on the device until the chunk ends: a GPU run reads the host once per chunk.
"""

from __future__ import annotations

import numpy as np

from qora.backend import fft
from qora.io.errors import InputError
from qora.phase.physics import support_update

__all__ = ["array_iterate"]


def array_iterate(engine, iterations: int, a: float, b: float, constraint, step, *, what: str,
                  after=None) -> np.ndarray:
    """``iterations`` updates of every start of ``engine`` with the modulus step ``step``.

    ``step(y, xp, i)`` takes the unitary transform ``y`` (B, *shape) of the iterate at the chunk's
    ``i``-th iteration and returns ``(w, err)``: the constrained transform and the per-start squared
    Fourier misfit (B,) on the device. Returns ``sqrt(err / sum a^2)`` per iteration and start
    (iterations, B). ``what`` names the option in the error an fp64 engine gets. ``after(x, xp)``, if given,
    sees every updated iterate (B, *shape) on the device (:mod:`qora.phase.average`).
    """
    sync = getattr(engine, "_sync_x", None)
    if sync is not None:
        sync()
    x = engine.x
    if x.dtype != np.complex64:
        raise InputError(f"{what} needs an fp32 engine; the {engine.name} engine holds x as {x.dtype}")
    xp = engine.backend.xp
    axes = tuple(range(x.ndim - len(engine.shape), x.ndim))
    history = []
    for i in range(iterations):
        y = fft.fftn(x, axes=axes, norm="ortho")
        w, err = step(y, xp, i)
        history.append(err)
        p = fft.ifftn(w, axes=axes, norm="ortho").astype(np.complex64)
        x[...] = support_update(x, p, engine.support, a, b, constraint)
        if after is not None:
            after(x, xp)
    engine.x_written()
    errors = np.asarray(engine.backend.to_host(xp.stack(history)))
    return np.sqrt(errors / engine.denominator)
