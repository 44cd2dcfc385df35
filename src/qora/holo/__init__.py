"""Optical diffraction tomography from off-axis holograms (units: um, cycles/um): the public face.

>>> from qora import holo
>>> g = holo.reference.geometry(64)
>>> holos, bgs, hp = holo.simulate_holograms([holo.Sphere(radius=1.5, index=1.36)], g)  # doctest: +SKIP
>>> pipe = holo.Pipeline(g, sideband=holo.find_sideband(bgs[0], hp), hologram_pixel=hp,
...                      hologram_n=holos.shape[-1], options=holo.ReconstructionOptions(method="tv"))  # doctest: +SKIP
>>> pipe.set_background(bgs); volume = pipe.process(holos).index  # doctest: +SKIP

Layers: this face and :mod:`qora.holo.api` (the backend resolved once, geometry inference) over
the CPU modules (:mod:`~qora.holo.fields`, :mod:`~qora.holo.odt`, :mod:`~qora.holo.bpm`,
:mod:`~qora.holo.pipeline`) and the host tables both backends share (:mod:`qora.holo.plans`); the
CUDA modules (``cuda_stages``, ``cuda_solver``, ``cuda_pipeline``, ``bpm_cuda``, ``kernels``) are
leaves that only the api reaches, so importing this package needs no GPU.
"""

from qora.holo import display, phantoms, reference
from qora.holo.api import (Pipeline, bpm_reconstruct, extract_fields, field_series_volume, field_size, fitted_axis,
                           geometry_from_backgrounds, parse_angles, phase_image, prepare_field_series, reconstruct,
                           reconstruct_holograms, reconstruct_stack, rotation_geometry, simulation_geometry)
from qora.holo.axis_fit import AxisFit, describe as describe_axis_fit, fit_axis_to_ratio as fit_axis
from qora.holo.background import correct_background, object_mask
from qora.holo.filters import FILTERS
from qora.holo.refocus import autofocus, propagate, refocused
from qora.holo.series_files import (FieldSeries, read_angles, read_field_series, read_odtbrain_archive,
                                    read_phase_amplitude, read_qpimage_series)
from qora.holo.bpm import bpm_forward, bpm_gradient, simulate_bpm_holograms
from qora.holo.fields import (BACKGROUND_BORDER, border_on_field, field_ratio, find_sideband, illumination_frequencies,
                              quantitative_phase, ratio_from_holograms, ratio_from_rectangular, square_fields)
from qora.holo.files import (backgrounds_for, load_stack, plot_phase, plot_volume, read_holograms, read_volume,
                             write_holograms, write_volume, write_volume_tiff)
from qora.holo.display import plane_png, volume_plane, volume_widget
from qora.holo.geometry import Geometry, cone_illuminations, odtbrain_axis, rotation_axis
from qora.holo.mie import vector_mie_ratio
from qora.holo.odt import OdtResult, index_from_potential, potential_from_index
from qora.holo.options import FGP_VARIANTS, BpmOptions, ReconstructionOptions
from qora.holo.phantoms import Sphere, born_ratio, check_simulation_memory, holograms_from_fields, render_spheres, simulate_holograms
from qora.holo.plans import MappingPlan, bpm_tables, intensities, mapping_plan, solver_grid
from qora.holo.steps import span
from qora.holo.unwrap import rytov

__all__ = [
    # reconstruction
    "reconstruct", "Pipeline", "ReconstructionOptions", "BpmOptions", "OdtResult", "reconstruct_holograms", "reconstruct_stack", "bpm_reconstruct",
    "bpm_forward", "bpm_gradient", "index_from_potential", "potential_from_index",
    # geometry
    "Geometry", "cone_illuminations", "rotation_axis", "odtbrain_axis", "geometry_from_backgrounds", "rotation_geometry", "parse_angles", "field_size",
    "simulation_geometry", "fit_axis", "AxisFit",
    # holograms to fields
    "extract_fields", "find_sideband", "field_ratio", "illumination_frequencies", "quantitative_phase",
    "BACKGROUND_BORDER",
    "ratio_from_holograms", "ratio_from_rectangular", "rytov", "FILTERS", "square_fields",
    # fields: refocus, background, series of complex fields
    "propagate", "autofocus", "refocused", "correct_background", "object_mask", "phase_image", "field_series_volume", "fitted_axis", "prepare_field_series",
    # phantoms and Mie
    "Sphere", "render_spheres", "born_ratio", "holograms_from_fields", "simulate_holograms",
    "simulate_bpm_holograms", "vector_mie_ratio", "phantoms", "reference",
    # files
    "read_holograms", "write_holograms", "FieldSeries", "read_field_series", "read_qpimage_series",
    "read_phase_amplitude", "read_odtbrain_archive", "read_angles", "read_volume", "write_volume", "write_volume_tiff", "load_stack", "backgrounds_for",
    "plot_volume", "plot_phase", "volume_widget", "display", "describe_axis_fit", "border_on_field", "intensities",
    "span", "plane_png", "volume_plane", "check_simulation_memory", "MappingPlan", "mapping_plan",
    "bpm_tables", "solver_grid",
    "FGP_VARIANTS",
]
