"""The amplitude a stage fits: what it does with the detector's unmeasured pixels (the recipe option ``masked``)
and whether it fits the counts sharpened for a known blur (the option ``sharpen``).

``masked=free`` (the default): the model keeps its own value on unmeasured pixels. ``fill``: they are held at
the modulus interpolated from their measured neighbours (:func:`qora.phase.support.fill_masked`), as if
measured, for the stage. ``sharpen=W`` (pixels, 0 off): the stage fits the counts deconvolved by a Gaussian of
std W (:func:`qora.phase.coherence.sharpen`), for a coherent search on a pattern a partially coherent beam
blurred. The engine's amplitude array is rewritten in place (``set_amplitude``), only when a stage asks for
another amplitude than the engine holds, so plans and captured CUDA graphs stay valid; held-out pixels of the
free LLK are never filled.
"""

from __future__ import annotations

import numpy as np

from qora.phase.physics import native_amplitude
from qora.phase.support import fill_masked

__all__ = ["masked_rule", "stage_amplitude"]


def stage_amplitude(engine, *, masked: str = "free", sharpen: float = 0.0, intensity, mask, free,
                    measured_amp) -> None:
    """Give ``engine`` the amplitude a stage with these options fits; nothing to do if it has it already.

    Parameters
    ----------
    masked : {"free", "fill"}
    sharpen : float
        Std (detector pixels) of the Gaussian blur the counts are deconvolved for; 0: the counts as measured.
    intensity, mask, free : ndarray (shape)
        The pattern (detector layout), True where not measured (or None), True where held out.
    measured_amp : ndarray (shape)
        The solver's amplitude (FFT layout, -1 where not measured or held out), restored for the plain stage.
    """
    key = ("fill" if mask is not None and masked == "fill" else "free", float(sharpen))
    if getattr(engine, "_qora_amplitude_key", ("free", 0.0)) == key:
        return
    if key == ("free", 0.0):
        engine.set_amplitude(measured_amp)
    else:
        counts = intensity if mask is None else fill_masked(np.where(mask, 0.0, intensity), mask)
        if sharpen:
            from qora.phase.coherence import sharpen as deconvolve

            counts = deconvolve(counts, sharpen)
        # unmeasured pixels stay free unless the stage fills them; held-out pixels always stay out
        hidden = free if key[0] == "fill" or mask is None else (mask | free)
        engine.set_amplitude(native_amplitude(counts, hidden if hidden.any() else None))
    engine._qora_amplitude_key = key


def masked_rule(engine, rule: str, *, intensity, mask, free, measured_amp) -> None:
    """:func:`stage_amplitude` for the ``masked`` rule alone ("free" or "fill")."""
    stage_amplitude(engine, masked=rule, intensity=intensity, mask=mask, free=free, measured_amp=measured_amp)
