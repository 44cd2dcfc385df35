"""How one chunk of a recipe stage's iterations runs, by the stage's kind: one table (:data:`STAGE_KINDS`) that
the solver's stage loop reads, so a new kind of stage is a function here and a value of
:attr:`qora.phase.recipe.Stage.kind`."""

from __future__ import annotations

__all__ = ["STAGE_KINDS"]


def _projection(_run, engine, stage, chunk: int, a: float, b: float):
    return engine.iterate(chunk, a, b, stage.constraint)


def _likelihood(_run, engine, _stage, chunk: int, _a: float, _b: float):
    from qora.phase.ml import ml_iterate

    return ml_iterate(engine, chunk)


def _partial_coherence(run, engine, stage, chunk: int, a: float, b: float):
    from qora.phase.coherence import coherence_iterate

    return coherence_iterate(engine, run._coherence_for(engine, stage), chunk, a, b, stage.constraint)


def _band(_run, engine, stage, chunk: int, a: float, b: float):
    from qora.phase.band import band_iterate

    return band_iterate(engine, stage.band, chunk, a, b, stage.constraint)


#: ``(solver, engine, stage, iterations, a, b) -> errors (iterations, starts)`` by :attr:`Stage.kind`; ``solver``
#: is the :class:`qora.phase.solver.Solver` running the recipe (the partial-coherence kernel is kept there).
STAGE_KINDS = {"projection": _projection, "ml": _likelihood, "partial-coherence": _partial_coherence, "band": _band}
