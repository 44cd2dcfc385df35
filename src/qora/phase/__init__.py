"""CDI phase retrieval: ER, HIO and RAAR with shrinkwrap, recipes and multi-start.

>>> from qora.phase import objects, reconstruct
>>> obj, intensity = objects.simulate("triangle", 64)
>>> result = reconstruct(intensity, recipe="HIO**400 ER**100", starts=4, backend="cpu")  # doctest: +SKIP
"""

from qora.phase import analysis, objects
from qora.phase.recipe import Recipe, RecipeError, Stage, default_recipe
from qora.phase.solver import PhaseResult, Solver, reconstruct

__all__ = ["reconstruct", "Solver", "PhaseResult", "Recipe", "RecipeError", "Stage", "default_recipe",
           "objects", "analysis"]
