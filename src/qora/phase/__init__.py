"""CDI phase retrieval: ER, HIO and RAAR with shrinkwrap, recipes and multi-start.

>>> from qora.phase import objects, reconstruct
>>> obj, intensity = objects.simulate("triangle", 64)
>>> result = reconstruct(intensity, recipe="HIO**400 ER**100", starts=4, backend="cpu")  # doctest: +SKIP
"""

from qora.phase import analysis, detector, display, envelope, objects
from qora.phase.analysis import consensus, prtf, scaled_error
from qora.phase.display import PLANES, result_png
from qora.phase.envelope import ITERATIONS as ENVELOPE_ITERATIONS
from qora.phase.files import plot_result, read_truth, write_pattern, write_result
from qora.phase.raw_frames import object_pixel_size, preprocess
from qora.phase.recipe import (DEFAULT_RECIPE, FEW_PHOTONS_RECIPE, NAMED_RECIPES, Recipe, RecipeError, Stage,
                               default_recipe, is_default, is_envelope, named_recipe)
from qora.phase.result import merge_results, read_result
from qora.phase.options import PhaseOptions
from qora.phase.physics import native_amplitude
from qora.phase.solver import PhaseResult, Solver, reconstruct
from qora.phase.symmetry import choose_recipe
from qora.phase.bragg_geometry import CIRCLES_34IDC, CIRCLES_ID01, BraggGeometry, Circles
from qora.phase.bragg_readers import geometry_34idc, read_34idc, read_id01, read_tiff_frames
from qora.phase.bragg_scan import (BraggResult, bragg_strain, plot_bragg, prepare_scan, reciprocal_metric,
                                   reflection_frame, write_vti)
from qora.phase.spec import read_spec_scan

# the face the top layers (cli, viewer, distributed) import from (tests/test_layers.py)
__all__ = ["reconstruct", "PhaseOptions", "Solver", "PhaseResult", "Recipe", "RecipeError", "Stage", "default_recipe",
           "objects", "analysis", "detector", "display", "envelope", "native_amplitude", "read_result", "write_result", "plot_result", "read_truth",
           "write_pattern", "preprocess", "object_pixel_size", "DEFAULT_RECIPE", "FEW_PHOTONS_RECIPE",
           "NAMED_RECIPES", "is_default", "is_envelope", "named_recipe", "merge_results", "choose_recipe", "consensus",
           "prtf", "scaled_error", "PLANES", "result_png", "ENVELOPE_ITERATIONS", "CIRCLES_34IDC", "CIRCLES_ID01", "BraggGeometry",
           "Circles", "geometry_34idc", "read_34idc", "read_id01", "read_tiff_frames", "BraggResult", "bragg_strain", "plot_bragg", "prepare_scan",
           "write_vti", "read_spec_scan", "reciprocal_metric", "reflection_frame"]
