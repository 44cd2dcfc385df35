"""4D-STEM direct ptychography: single side band (SSB), its thick-sample variant, tilt-corrected
bright field, and the fits of the aberrations, scan rotation, thickness and tilt from the data.

>>> from qora import ssb
>>> sim = ssb.simulate(ssb.amorphous_slices((96, 96), 0.1), pixel=0.1, stride=2, window=64)  # doctest: +SKIP
>>> session = ssb.Session(sim.data, kv=300.0, alpha_mrad=20.0, scan_step=sim.scan_step)  # doctest: +SKIP
>>> result = ssb.fit(session, rotation=0.0)  # doctest: +SKIP

The modules, by layer (each imports only those below it; docs/ssb.md):

- :mod:`~qora.ssb.session`: :class:`Session`, G(Q, k) prepared once and its images (SSB, thick, parallax, iCoM,
  OBF, WDD: :mod:`~qora.ssb.com`, :mod:`~qora.ssb.obf`, :mod:`~qora.ssb.wdd`); its ``fit``/``reconstruct`` methods
  call the fit workflow.
- :mod:`qora.ssb.fitting`: the workflows (:func:`fit`, :func:`fit_rotation`) and their JSON result.
- :mod:`~qora.ssb.orientation`: the detector's orientation against the scan (centre-of-mass
  curl), the 180-degree branch rule.
- :mod:`~qora.ssb.identify`: multi-start fits and the identifiability report.
- :mod:`~qora.ssb.optimize`: :func:`newton` (with ``callback=``), the searches, the bounds.
- :mod:`~qora.ssb.band`: :class:`Band`, the agreement and its moments, :func:`uncertainties`.
- :mod:`~qora.ssb.stream`, :mod:`~qora.ssb.detector`, :mod:`~qora.ssb.model`,
  :mod:`~qora.ssb.optics`: G made on the device, the detector and scan geometry, the fits'
  parametrisation, the electron optics.
- :mod:`~qora.ssb.kernels`: the CUDA sources and one launcher per kernel.

Files (:mod:`~qora.ssb.files`) and simulated data (:mod:`qora.ssb.simulation`) beside them.
``qora.ssb.fit`` and ``qora.ssb.simulate`` are the functions here; their modules are :mod:`qora.ssb.fitting` and
:mod:`qora.ssb.simulation` (no module shares a function's name).
"""

from qora.ssb.band import Band, combine_batch_moments, combine_moments, make_band, uncertainties
from qora.ssb.descan import Descan, correct_descan, disk_centers, fit_descan
from qora.ssb.detector import (DetectorFit, array_like, bright_field_pixels, check_data, check_settings, fit_detector,
                               fit_detector_from_mean, scan_frequencies, scan_steps, virtual_bright_field)
from qora.ssb.files import load_data, plot_fit, plot_image, read_dataset, write_dataset, write_image
from qora.ssb.readers import Layout, decode_raw
from qora.ssb.depth import depth_sections
from qora.ssb.fit_types import FitImages, FitOptions, FitResult
from qora.ssb.fitting import fit_rotation, fit_session, fitted_image
from qora.ssb.orientation import reorient
from qora.ssb.sliders import SSB_SLIDERS, slider_parameters, slider_start
from qora.ssb.model import ABERRATION_PARAMETERS, QUADRATIC_PARAMETERS, THICK_PARAMETERS, parameters_to_aberrations
from qora.ssb.optics import KNOWN_ABERRATIONS, Aberrations, aperture, chi, chi_gradient, probe_spectrum, wavelength
from qora.ssb.optimize import (BOUNDS, SEARCH_BOUNDS, TILT_LIMIT, BatchObjective, NewtonState, Objective,
                               defocus_search, newton, tpe_search)
from qora.ssb.session import IMAGE_METHODS, PREVIEW_METHODS, Session
from qora.ssb.wdd import dose_from_counts, epsilon_for_dose
from qora.ssb.simulation import (Scan4D, amorphous_slices, atoms_slice, check_disk, check_sampling,
                                check_simulation_memory, crystal_slices, rotate_detector, scan_truth,
                               simulate_to_npy)
from qora.ssb.simulation import film_counts, simulate

fit = fit_session  # the session fit workflow (qora.ssb.fitting.fit_session)

__all__ = ["decode_raw", "film_counts", "Session", "IMAGE_METHODS", "PREVIEW_METHODS", "dose_from_counts", "epsilon_for_dose", "fit", "fit_session", "FitOptions", "FitResult", "FitImages", "fit_rotation", "Band", "make_band", "combine_moments",
           "combine_batch_moments", "uncertainties", "newton", "NewtonState", "Objective", "BatchObjective",
           "defocus_search", "tpe_search", "BOUNDS", "SEARCH_BOUNDS", "TILT_LIMIT", "ABERRATION_PARAMETERS",
           "THICK_PARAMETERS", "QUADRATIC_PARAMETERS", "parameters_to_aberrations", "Aberrations",
           "KNOWN_ABERRATIONS", "chi", "chi_gradient", "aperture", "probe_spectrum", "wavelength", "DetectorFit",
           "fit_detector", "fit_detector_from_mean", "bright_field_pixels", "scan_frequencies", "simulate",
           "simulate_to_npy", "Scan4D", "amorphous_slices", "atoms_slice", "crystal_slices", "rotate_detector",
           "scan_truth", "read_dataset", "write_dataset", "load_data", "write_image", "plot_image", "plot_fit",
           "Layout", "Descan", "fit_descan", "correct_descan", "disk_centers", "scan_steps", "virtual_bright_field",
           "depth_sections", "fitted_image", "reorient", "SSB_SLIDERS", "slider_parameters", "slider_start",
           "array_like", "check_data", "check_settings", "check_disk", "check_sampling", "check_simulation_memory"]
