"""What a stage does with the detector's unmeasured pixels (the recipe option ``masked``).

``free`` (the default): the model keeps its own value there. ``fill``: they are held at the modulus
interpolated from their measured neighbours (:func:`qora.phase.support.fill_masked`), as if measured, for
the stage. The engine's amplitude array is rewritten in place (``set_amplitude``), so plans and captured
CUDA graphs stay valid; held-out pixels of the free LLK are never filled.
"""

from __future__ import annotations

import numpy as np

from qora.phase.physics import native_amplitude
from qora.phase.support import fill_masked

__all__ = ["masked_rule"]


def masked_rule(engine, rule: str, *, intensity, mask, free, measured_amp) -> None:
    """Give ``engine`` the amplitude of ``rule`` ("free" or "fill"); nothing to do if it has it already.

    Parameters
    ----------
    intensity, mask, free : ndarray (shape)
        The pattern (detector layout), True where not measured, True where held out.
    measured_amp : ndarray (shape)
        The solver's amplitude (FFT layout, -1 where not measured or held out), restored for ``free``.
    """
    filled = getattr(engine, "_qora_masked_filled", False)
    if (rule == "fill") == filled or mask is None:
        return
    if rule == "fill":
        counts = fill_masked(np.where(mask, 0.0, intensity), mask)
        engine.set_amplitude(native_amplitude(counts, free if free.any() else None))
    else:
        engine.set_amplitude(measured_amp)
    engine._qora_masked_filled = rule == "fill"
