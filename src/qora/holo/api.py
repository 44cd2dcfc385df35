"""The holography api: the backend resolved once, the CPU or CUDA path picked here, and the steps a
script needs between files and volumes (geometry from backgrounds, rotation geometry) as plain functions.

This is the only holo module that reaches the CUDA modules (:mod:`qora.holo.cuda_pipeline`,
:mod:`qora.holo.bpm_cuda`), and only inside the functions that run on the device, so importing it
needs no GPU. The CPU modules below it never import a CUDA module; the CLI (:mod:`qora.cli.holo`)
parses options and calls these functions.

>>> from qora import holo
>>> g, sideband = holo.geometry_from_backgrounds(backgrounds, wavelength=0.532, medium_index=1.333,
...                                               pixel=0.1, na_detection=1.2)  # doctest: +SKIP
>>> pipe = holo.Pipeline(g, sideband=sideband, hologram_pixel=0.05, hologram_n=backgrounds.shape[-1],
...                      options=holo.ReconstructionOptions(method="tv"))  # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial

import numpy as np

from qora.backend import resolve
from qora.backend.device import free_memory
from qora.holo import bpm as _bpm
from qora.holo import fields as _fields
from qora.holo import odt as _odt
from qora.holo.geometry import Geometry, cone_illuminations
from qora.holo.odt import OdtResult
from qora.holo.options import BPM_CUDA_ONLY, CUDA_ONLY, BpmOptions, OptionError, ReconstructionOptions
from qora.holo.pipeline import CpuPipeline
from qora.holo.plans import CropPlan, MappingPlan, mapping_plan, solver_grid
from qora.holo.plans import cuda_pipeline_bytes, intensities
from qora.holo.steps import prefixed, solve_units, span, stack_units
from qora.io.errors import InputError
from qora.io.options import with_changes
from qora.io.validate import integer, memory_needed, number, positive
from qora.progress import report

__all__ = ["phase_image", "field_series_volume", "fitted_axis", "prepare_field_series", "reconstruct", "extract_fields", "bpm_reconstruct", "Pipeline", "pipeline_tables", "reconstruct_holograms",
           "field_size", "geometry_from_backgrounds", "parse_angles", "rotation_geometry", "simulation_geometry",
           "options_with"]


def options_with(options: ReconstructionOptions | None, changes: dict) -> ReconstructionOptions:
    """``options`` (default: the defaults) with the keyword ``changes`` (validated; unknown names: an
    :class:`~qora.holo.options.OptionError`, a TypeError too)."""
    return with_changes(options, changes, kind=ReconstructionOptions, what="reconstruction")


def _geometry(geometry) -> Geometry:
    if not isinstance(geometry, Geometry):
        raise InputError(f"geometry must be a qora.holo.Geometry, got {type(geometry).__name__}")
    return geometry


# -- per-call functions ---------------------------------------------------------------------------------

# The one-shot reconstruct has solved GP on the full complex spectrum (C2C) by default since it was
# written, while the Pipeline defaults to the half-spectrum R2C solver; the two agree to 1e-4 of the
# contrast (tests/holo/test_holo_odt.py) but are not the same arithmetic, so each keeps its default.
ONE_SHOT_DEFAULTS = ReconstructionOptions(r2c=False)


def _backend(backend, *sizes: int, square: bool = True):
    """The backend rule (:data:`qora.backend.DEFAULT_BACKEND`) with holo's one exception: "auto" stays on the
    CPU where the CUDA stages cannot take the case (a size they need even, for the centre-origin signs, is odd;
    images they need square are not), so a GPU machine runs what the CPU would rather than refuse it; "cuda"
    asked for by name is checked (and refused) by the CUDA stages."""
    if backend == "auto" and (not square or any(int(size) % 2 for size in sizes)):
        backend = "cpu"
    return resolve(backend)


def reconstruct(ratio, geometry: Geometry, options: ReconstructionOptions | None = None, *, backend="auto",
                progress=None, **changes) -> OdtResult:
    """Refractive-index volume (dimensionless, (n, n, n)) from field ratios u / u_in (A, n, n) at z = 0.

    The ratios are dimensionless complex fields on the geometry's grid (``geometry.pixel`` um,
    centre-origin); the result's ``index`` is the refractive index n (not the contrast n - n_m).

    ``options``: a :class:`ReconstructionOptions`, default :data:`ONE_SHOT_DEFAULTS` (the defaults
    with ``r2c=False``); keyword ``changes`` override its fields, e.g. ``method="tv"``. ``backend``: "auto"
    (the default: CUDA where there is a GPU and the sizes are even, else the CPU), "cpu" or "cuda". On the
    CPU, CUDA-only fields given as keywords are an OptionError, a TypeError (as a field of ``options`` they are
    ignored there).
    ``progress`` gets done of 1 + the solver's iterations (on CUDA the solve reports once, at its end).
    """
    options = options_with(options if options is not None else ONE_SHOT_DEFAULTS,
                           {k: v for k, v in changes.items() if k not in CUDA_ONLY})
    geometry = _geometry(geometry)
    be = _backend(backend, geometry.n, solver_grid(geometry, options.oversample).n)
    if not be.is_cuda:
        cuda_only = sorted(set(changes) & set(CUDA_ONLY))
        if cuda_only:
            raise OptionError(f"options {cuda_only} apply to the CUDA backend only")
    options = options_with(options, changes)
    if be.is_cuda:
        return _cuda_reconstruct(ratio, geometry, options, progress)
    return _odt.reconstruct(ratio, geometry, options, progress=progress)


def _cuda_reconstruct(ratio, geometry: Geometry, options: ReconstructionOptions, progress, *,
                      on_device: bool = False) -> OdtResult:
    """The CUDA solve with its progress (the solve reports once, at its end); ``on_device`` leaves the
    index on the GPU (the CUDA BPM's start)."""
    from qora.holo import cuda_pipeline

    ratio = _odt.check_ratio("ratio", ratio, geometry)
    total = 1 + solve_units(options)
    report(progress, options.method, 0, total)
    result = cuda_pipeline.reconstruct(ratio, geometry, options, on_device=on_device)
    report(progress, "done", total, total)
    return result


def extract_fields(holograms, sideband, *, hologram_pixel: float, n: int, pupil_frequency: float,
                   filter: str = "disk", backend="auto") -> np.ndarray:
    """Complex fields (A, n, n) from holograms (A, N, N) or (N, N): :func:`qora.holo.fields.extract_fields`,
    or on ``backend="cuda"`` its CUDA twin (complex64 out; even N and n, square). ``sideband`` (nu_y, nu_x)
    and ``pupil_frequency`` (the filter's radius, for the pupil NA / wavelength) in cycles/um,
    ``hologram_pixel`` in um; ``filter`` a shape of :data:`qora.holo.filters.FILTERS`; the fields' pixel
    is ``hologram_pixel`` N / n."""
    hologram_pixel, n, pupil_frequency, sideband = _fields.crop_parameters(hologram_pixel, n, pupil_frequency,
                                                                            sideband)
    kw = dict(hologram_pixel=hologram_pixel, n=n, pupil_frequency=pupil_frequency, filter=filter)
    shape = np.shape(holograms)
    if _backend(backend, n, *shape[-2:], square=len(shape) >= 2 and shape[-1] == shape[-2]).is_cuda:
        from qora.holo import cuda_pipeline

        return cuda_pipeline.extract_fields(holograms, sideband, **kw)
    return _fields.extract_fields(holograms, sideband, **kw)


def bpm_reconstruct(data, geometry: Geometry, options: BpmOptions | None = None, *, start=None, progress=None,
                    backend="auto", **changes) -> OdtResult:
    """The inversion of the beam propagation model: :func:`qora.holo.bpm.bpm_reconstruct`, or where the backend
    is CUDA :func:`qora.holo.bpm_cuda.bpm_reconstruct`.

    ``data``: measured field ratios u / u_in (A, n, n), dimensionless, centre-origin. ``options``: a
    :class:`~qora.holo.options.BpmOptions` (default: its defaults); keyword ``changes`` override its fields
    (``iterations=20, tv_weight=1e-3``); the CUDA-only fields (chunk, fgp, variant) given by name to the CPU
    are an OptionError. ``start``: an index contrast n - n_m (n_z, n, n), dimensionless (default: Rytov with 20
    GP iterations on the same backend, :data:`qora.holo.bpm.START_OPTIONS`). ``progress`` gets ("bpm", step,
    iterations, {"loss": f}); with the default start one count covers both, the start's ("start (Rytov + GP):
    gp", ...) first. The result's ``index`` is the refractive index n; ``info["options"]`` the options it ran
    with.
    """
    options = with_changes(options, changes, kind=BpmOptions, what="BPM")
    cuda = resolve(backend).is_cuda
    if not cuda and set(changes) & set(BPM_CUDA_ONLY):
        raise OptionError(f"options {sorted(set(changes) & set(BPM_CUDA_ONLY))} apply to the CUDA backend only")
    if cuda:  # the slice step's variant checked before the start is spent on it
        from qora.holo.bpm_cuda import check_variant

        check_variant(options.variant)
    if start is None:  # the default start, made here so that one progress count covers it and the steps
        geometry = _geometry(geometry)
        data = _odt.check_ratio("data", data, geometry)
        units = 1 + _bpm.START_OPTIONS.iterations
        total = units + options.iterations
        start_progress = span(progress, 0, total, "start (Rytov + GP): ")
        if cuda and _backend(backend, geometry.n, solver_grid(geometry, _bpm.START_OPTIONS.oversample).n).is_cuda:
            solve_start = partial(_cuda_reconstruct, progress=start_progress, on_device=True)  # the BPM takes it there
        else:
            solve_start = partial(reconstruct, backend=backend, progress=start_progress)
        start = _bpm.rytov_start(data, geometry, int(options.n_z or geometry.n), reconstruct=solve_start)
        progress = span(progress, units, total)
    solve = _bpm.bpm_reconstruct
    if cuda:
        from qora.holo.bpm_cuda import bpm_reconstruct as solve
    result = solve(data, geometry, start, progress=progress, **options.solver_keywords(cuda=cuda))
    result.info["options"] = options.to_dict()
    return result


# -- fields: refocus, background, series of complex fields -----------------------------------------------


def phase_image(ratio, *, pixel: float, distance: float | None = None, autofocus: bool = False,
                wavelength: float | None = None, medium_index: float | None = None, interval=(-10.0, 10.0),
                metric: str = "amplitude variance", background: str | int | None = None, background_border: int | None = None,
                background_threshold: float | None = None) -> dict:
    """A field ratio (M, N) made into a QPI image: refocused (by ``distance`` um, or by autofocus over
    ``interval`` um with ``metric``, :mod:`qora.holo.refocus`; both need ``wavelength`` (vacuum, um) and
    ``medium_index``), its Rytov phase unwrapped,
    and the phase's background (``background``: "offset", "tilt", "poly2" or an order) fitted on a frame of
    ``background_border`` pixels, or outside the object where |phase - median| exceeds
    ``background_threshold`` rad, and removed. ``pixel``: the field's, um.

    Returns ``{"ratio", "phase" (rad), "amplitude", "distance" (um, 0 without refocus)}``."""
    from qora.holo import background as B
    from qora.holo import refocus as RF
    from qora.holo.unwrap import rytov

    ratio = np.asarray(ratio)
    moved = 0.0
    if distance is not None or autofocus:
        if distance is not None and autofocus:
            raise InputError("give a refocus distance or ask for autofocus, not both")
        if wavelength is None or medium_index is None:
            raise InputError("refocusing needs the wavelength (um) and the medium index")
        optics = dict(wavelength=wavelength, medium_index=medium_index, pixel=pixel)
        moved = RF.autofocus(ratio, interval=interval, metric=metric, **optics) if autofocus else float(distance)
        ratio = RF.propagate(ratio, moved, **optics)
    r = rytov(ratio)
    phase = r.imag
    if background is not None:
        mask = None
        if background_threshold is not None:
            if background_border is not None:
                raise InputError("fit the background on a border frame or outside a threshold mask, not both")
            mask = ~B.object_mask(phase, threshold=background_threshold, margin=2)
        phase = B.correct_background(phase, profile=background, mask=mask, border=background_border)
    elif background_border is not None or background_threshold is not None:
        raise InputError("background_border and background_threshold need a background profile")
    return {"ratio": ratio, "phase": phase, "amplitude": np.exp(r.real), "distance": moved}


def prepare_field_series(fields, angles, *, wavelength: float, medium_index: float, pixel: float,
                         na_detection: float, distance=None, autofocus: bool = False, interval=(-10.0, 10.0),
                         metric: str = "amplitude variance", axis=(0.0, 1.0, 0.0), rotation_sense: int = 1):
    """A rotation series of field ratios (A, M, N) of any shape, e.g. phase and amplitude images made complex,
    ready for any solver: refocused (``distance`` um, or one common autofocus distance over ``interval``: the
    sample turns about a fixed axis, so one plane is in focus for every angle), padded with their background
    to a fast square (:func:`qora.holo.fields.square_fields`), with the rotation geometry of ``angles`` (rad)
    about ``axis`` (z, y, x) in ``rotation_sense``. Returns ``(ratio (A, n, n), Geometry, distance um)``."""
    from qora.holo import refocus as RF

    ratio = np.asarray(fields)
    if ratio.ndim == 2:
        ratio = ratio[None]
    if ratio.ndim != 3 or not np.iscomplexobj(ratio):
        raise InputError(f"fields must be complex field ratios (A, M, N), got {ratio.dtype} {ratio.shape}")
    moved = 0.0
    optics = dict(wavelength=wavelength, medium_index=medium_index, pixel=pixel)
    if autofocus:
        if distance is not None:
            raise InputError("give a refocus distance or ask for autofocus, not both")
        moved = RF.autofocus(ratio, interval=interval, metric=metric, common=True, **optics)
    elif distance is not None:
        moved = float(distance)
    if moved:
        ratio = RF.propagate(ratio, moved, **optics)
    ratio = _fields.square_fields(ratio)
    g = rotation_geometry(angles, ratio.shape[0], na_detection=na_detection, n=ratio.shape[-1], axis=axis,
                          rotation_sense=rotation_sense, **optics)
    return ratio, g, moved


def field_series_volume(fields, angles, *, wavelength: float, medium_index: float, pixel: float,
                        na_detection: float, options: ReconstructionOptions | BpmOptions | None = None,
                        fit_axis: bool = False, distance=None, autofocus: bool = False, interval=(-10.0, 10.0),
                        metric: str = "amplitude variance", axis=(0.0, 1.0, 0.0), rotation_sense: int = 1,
                        backend="auto", progress=None) -> tuple[OdtResult, Geometry, float]:
    """The index volume of a rotation series of field ratios (A, M, N) of any shape (what ``qora holo reconstruct
    --input fields`` runs): :func:`prepare_field_series` (same arguments); with ``fit_axis`` the rotation axis
    fitted to the ratios and used where the data determine it (:func:`qora.holo.fit_axis`); then
    :func:`reconstruct` with ``options`` (a :class:`ReconstructionOptions`, the default) or :func:`bpm_reconstruct`
    (a :class:`BpmOptions`). ``progress`` gets the axis fit's own count ("axis: ..."), then the reconstruction's.
    Returns ``(OdtResult, Geometry, distance um)``: the geometry used (the fitted axis in it); the result's ``info`` says the refocus
    distance (``refocus_distance_um``) and, with ``fit_axis``, what the fit found (``axis_fit``)."""
    ratio, g, moved = prepare_field_series(fields, angles, wavelength=wavelength, medium_index=medium_index,
                                           pixel=pixel, na_detection=na_detection, distance=distance,
                                           autofocus=autofocus, interval=interval, metric=metric, axis=axis,
                                           rotation_sense=rotation_sense)
    chosen = {"refocus_distance_um": moved}
    if fit_axis:
        g, chosen["axis_fit"] = fitted_axis(ratio, g, options, progress)
    if isinstance(options, BpmOptions):
        result = bpm_reconstruct(ratio, g, options, backend=backend, progress=progress)
    else:
        result = reconstruct(ratio, g, options, backend=backend, progress=progress)
    result.info.update(chosen)
    return result, g, moved


def fitted_axis(ratio, geometry: Geometry, options: ReconstructionOptions | BpmOptions | None = None,
                progress=None) -> tuple[Geometry, str]:
    """``geometry`` (a rotation geometry) with its rotation axis fitted to the field ratios ``ratio`` (A, n, n)
    where the data determine it, unchanged where they do not (:func:`qora.holo.fit_axis`), and the fit's one-line
    description. The fit models the ratios with the approximation of ``options`` (Rytov for a
    :class:`BpmOptions`, whose start is Rytov); ``progress`` gets the fit's own count, its stages named "axis: ..."."""
    from qora.holo.axis_fit import describe, fit_axis_to_ratio

    approximation = "rytov" if isinstance(options, BpmOptions) else options_with(options, {}).approximation
    fit = fit_axis_to_ratio(ratio, geometry, approximation=approximation, progress=prefixed(progress, "axis: "))
    return (replace(geometry, axis=fit.axis) if fit.determined else geometry), describe(fit)


def pipeline_tables(geometry: Geometry, *, sideband, hologram_pixel: float, hologram_n: int,
                    options: ReconstructionOptions) -> tuple[CropPlan, MappingPlan]:
    """The host tables of a Pipeline, made once: the sideband crop of N x N holograms and the
    Ewald mapping on the solver's grid (both backends take them as they are)."""
    crop = CropPlan(hologram_n, sideband, hologram_pixel=hologram_pixel, n=geometry.n,
                    pupil_frequency=geometry.pupil_frequency)
    return crop, mapping_plan(geometry, options)


class Pipeline:
    """Holograms to index volumes for one geometry, with its backgrounds kept between calls.

    Everything that depends only on the geometry is made once (the crop window and pupil, the
    mapping targets, factors and hit counts: :func:`pipeline_tables`); given the background holograms
    once (:meth:`set_background`), :meth:`process` turns each hologram stack of a time series into a
    refractive-index volume, with the same functions as the per-call chain (``extract_fields`` ->
    ``field_ratio`` -> ``rytov`` -> ``reconstruct``), so the two agree to rounding.

    Parameters
    ----------
    geometry : Geometry
    sideband : (nu_y, nu_x)
        The sideband's centre, cycles/um (``find_sideband`` of a normal-incidence background).
    hologram_pixel : float
        Hologram pixel in object space, um (half the geometry's pixel for a 2n crop).
    hologram_n : int
        Hologram size N (holograms are N x N).
    options : ReconstructionOptions
        The solver's choices (default: the defaults); keyword ``changes`` override its fields.
    backend : {"auto", "cpu", "cuda"}
        "auto" is the GPU where there is one (and both sizes are even). On CUDA the work runs in
        :class:`qora.holo.cuda_pipeline.CudaPipeline` (``self.cuda``): plans, buffers and backgrounds
        on the device, made once.
    """

    def __init__(self, geometry: Geometry, *, sideband, hologram_pixel: float, hologram_n: int,
                 options: ReconstructionOptions | None = None, backend="auto", **changes) -> None:
        options = options_with(options, changes)
        geometry = _geometry(geometry)
        hologram_n = integer("hologram_n", hologram_n, low=1)
        hologram_pixel, _, _, sideband = _fields.crop_parameters(hologram_pixel, geometry.n, geometry.pupil_frequency,
                                                                 sideband)
        n = field_size(hologram_n, hologram_pixel, geometry.pixel)
        if n != geometry.n:
            raise InputError(f"{hologram_n} x {hologram_n} holograms at hologram_pixel {hologram_pixel:g} um give "
                             f"fields of {n} pixels of {geometry.pixel:g} um, the geometry has n = {geometry.n}: "
                             "check hologram_pixel, hologram_n and the geometry's pixel")
        self.backend = _backend(backend, geometry.n, hologram_n)
        self.geometry, self.options, self.approximation = geometry, options, options.approximation
        self.crop, self.mapping = pipeline_tables(geometry, sideband=sideband, hologram_pixel=hologram_pixel,
                                                  hologram_n=hologram_n, options=options)
        self.cuda = None
        if self.backend.is_cuda:
            from qora.holo.cuda_pipeline import CudaPipeline

            memory_needed(cuda_pipeline_bytes(geometry, hologram_n, options), "the CUDA Pipeline",
                          available=free_memory(self.backend), where="device",
                          hint="make it smaller (fewer or smaller holograms, a smaller --oversample) or use "
                               "--backend cpu")
            self.cuda = CudaPipeline(geometry, self.crop, self.mapping, options)
            self._engine = self.cuda
        else:
            self._engine = CpuPipeline(geometry, self.crop, self.mapping, options)
        self.background_fields = None

    def set_background(self, holograms) -> None:
        """Extract and keep the background fields (one hologram per illumination)."""
        if self.cuda is not None:
            self._check_device_input("backgrounds", holograms)
        self._engine.set_background(holograms)
        self.background_fields = True if self.cuda is not None else self._engine.background_fields

    def process(self, holograms=None, *, progress=None, copy: bool = True) -> OdtResult:
        """One stack of sample holograms (A, N, N) -> :class:`OdtResult`.

        On CUDA, ``holograms=None`` processes what was written into ``self.cuda.input()``, and
        ``copy=False`` returns the page-locked output buffer (valid until the next call).
        """
        if self.background_fields is None:
            raise RuntimeError("call set_background(...) before process(...)")
        if self.cuda is not None:
            if holograms is not None:
                self._check_device_input("holograms", holograms)
            return self.cuda.process(holograms, progress=progress, copy=copy)
        return self._engine.process(holograms, progress=progress)

    def _check_device_input(self, name: str, holograms) -> None:
        """What the CUDA upload would cast or reject (non-finite values are counted on the device)."""
        a = np.asarray(holograms)
        if np.iscomplexobj(a) or not np.issubdtype(a.dtype, np.number):
            intensities(name, a[:0] if a.ndim else a)  # the same message as on the CPU
        if a.shape != self.cuda.host_in.shape:
            raise InputError(f"expected holograms of shape {self.cuda.host_in.shape} as the {name} (one per "
                             f"illumination of the geometry), got {a.shape}")

    def process_series(self, stacks, *, progress=None):
        """Yield the volume of each stack of a time series, in order; ``progress`` gets done of the whole
        series (each stack's :func:`qora.holo.steps.stack_units`), the stage "stack i of T: ..."."""
        stacks = list(stacks)
        units = stack_units(self.options)
        for i, holos in enumerate(stacks):
            yield self.process(holos, progress=span(progress, i * units, len(stacks) * units,
                                                    f"stack {i + 1} of {len(stacks)}: "))


def reconstruct_holograms(holograms, backgrounds, geometry: Geometry, *, sideband, hologram_pixel: float,
                          options: ReconstructionOptions | None = None, backend="auto", progress=None) -> OdtResult:
    """Index volume(s) of a hologram stack (A, N, N), or a time series (T, A, N, N) (volumes stacked),
    with its backgrounds (A, N, N), through one :class:`Pipeline`. Holograms are camera intensities
    (counts, or any linear scale); ``sideband`` (nu_y, nu_x) in cycles/um, ``hologram_pixel`` in um, as
    for :class:`Pipeline`; the volumes are refractive index (dimensionless)."""
    holograms, backgrounds = np.asarray(holograms), np.asarray(backgrounds)
    if holograms.ndim not in (3, 4):
        raise InputError(f"holograms must be a stack (A, N, N) or a time series (T, A, N, N), got shape "
                         f"{holograms.shape}")
    if holograms.shape[-3:] != backgrounds.shape:
        raise InputError(f"backgrounds {backgrounds.shape} must have the shape of one hologram stack "
                         f"{holograms.shape[-3:]} (one background per illumination)")
    options = options_with(options, {})
    pipe = Pipeline(geometry, sideband=sideband, hologram_pixel=hologram_pixel, hologram_n=holograms.shape[-1],
                    options=options, backend=backend)
    pipe.set_background(backgrounds)
    if holograms.ndim == 4:
        volumes = [r.index for r in pipe.process_series(holograms, progress=progress)]
        return OdtResult(np.stack(volumes), geometry, options.method, options.approximation, options.iterations)
    return pipe.process(holograms, progress=progress)


def reconstruct_stack(holograms, backgrounds, geometry: Geometry, *, hologram_pixel: float,
                      options: ReconstructionOptions | BpmOptions | None = None, fit_axis: bool = False,
                      sideband=None, backend="auto", progress=None) -> OdtResult:
    """The index volume(s) of a hologram stack (A, N, N), or a time series (T, A, N, N), with the workflow's
    choices made here (what ``qora holo reconstruct`` runs for holograms in one process): the sideband found in
    the first (normal-incidence) background unless given (cycles/um); with ``fit_axis`` a rotation geometry's axis fitted to the
    (first) stack's ratios and used where the data determine it (:func:`qora.holo.fit_axis`); then the Fourier
    methods through one :class:`Pipeline` (``options`` a :class:`ReconstructionOptions`, the default) or the
    BPM inversion of one stack (a :class:`BpmOptions`).

    Holograms and backgrounds are camera intensities (counts, or any linear scale), ``hologram_pixel`` in um.
    The result's ``geometry`` is the one used (the fitted axis in it), ``info["sideband"]`` (cycles/um) and,
    with ``fit_axis``, ``info["axis_fit"]`` say what was chosen. ``progress`` gets the axis fit's own count
    ("axis: ..."), then the reconstruction's."""
    holograms, backgrounds = np.asarray(holograms), np.asarray(backgrounds)
    geometry = _geometry(geometry)
    if sideband is None:
        sideband = _fields.find_sideband(backgrounds[0], hologram_pixel)
    chosen = {"sideband": [float(v) for v in sideband]}
    bpm = isinstance(options, BpmOptions)
    if bpm and holograms.ndim != 3:
        raise InputError(f"the BPM inversion takes one stack (A, N, N), got shape {holograms.shape}")
    ratio = None  # the first stack's ratios, made once for the axis fit and the BPM (they do not depend on the axis)
    if fit_axis:
        first = holograms if holograms.ndim == 3 else holograms[0]  # a series: its first time point
        ratio = _fields.ratio_from_holograms(first, backgrounds, geometry, hologram_pixel, sideband)
        geometry, chosen["axis_fit"] = fitted_axis(ratio, geometry, options, progress)
    if bpm:
        if ratio is None:
            ratio = _fields.ratio_from_holograms(holograms, backgrounds, geometry, hologram_pixel, sideband)
        result = bpm_reconstruct(ratio, geometry, options, progress=progress, backend=backend)
    else:
        result = reconstruct_holograms(holograms, backgrounds, geometry, sideband=sideband,
                                       hologram_pixel=hologram_pixel, options=options, backend=backend,
                                       progress=progress)
    result.info.update(chosen)
    return result


# -- geometry ----------------------------------------------------------------------------------------------


def field_size(hologram_n: int, hologram_pixel: float, pixel: float) -> int:
    """The field and volume size n of N x N holograms at ``hologram_pixel`` cropped to ``pixel`` (um)."""
    hologram_n = integer("hologram_n", hologram_n, low=1)
    hologram_pixel, pixel = positive("hologram_pixel", hologram_pixel, unit="um"), positive("pixel", pixel, unit="um")
    return int(round(hologram_n * hologram_pixel / pixel))


def geometry_from_backgrounds(backgrounds, *, wavelength: float, medium_index: float, pixel: float,
                              na_detection: float, hologram_pixel: float | None = None):
    """The illumination-scanning geometry measured from background holograms (A, N, N), and the sideband.

    The sideband (cycles/um) is found in the first (normal-incidence) background; the background
    fields are extracted on the CPU and each one's plane-wave frequency is the illumination.
    ``wavelength`` (vacuum) and ``pixel`` (the fields' and volume's) in um; ``medium_index`` and
    ``na_detection`` dimensionless; backgrounds are camera intensities (counts, or any linear scale).
    ``hologram_pixel`` defaults to ``pixel / 2`` (um). Returns ``(Geometry, sideband)``.
    """
    bgs = intensities("backgrounds", backgrounds)
    if bgs.ndim != 3 or bgs.shape[-1] != bgs.shape[-2]:
        raise InputError(f"backgrounds must be (A, N, N), got shape {bgs.shape}")
    wavelength, pixel = positive("wavelength", wavelength, unit="um"), positive("pixel", pixel, unit="um")
    medium_index = positive("medium_index", medium_index)
    na_detection = positive("na_detection", na_detection)
    if na_detection > medium_index:
        raise InputError(f"na_detection ({na_detection:g}) cannot exceed the medium index ({medium_index:g}): a "
                         "numerical aperture beyond n_m is unphysical")
    hp = pixel / 2 if hologram_pixel is None else positive("hologram_pixel", hologram_pixel, unit="um")
    n = field_size(bgs.shape[-1], hp, pixel)
    if not 4 <= n <= bgs.shape[-1]:
        raise InputError(f"{bgs.shape[-1]} x {bgs.shape[-1]} holograms at hologram_pixel {hp:g} um give fields of "
                         f"{n} pixels of {pixel:g} um; need 4 to {bgs.shape[-1]} (pixel between hologram_pixel and "
                         f"N x hologram_pixel / 4)")
    sideband = _fields.find_sideband(bgs[0], hp)
    bg_fields = _fields.extract_fields(bgs, sideband, hologram_pixel=hp, n=n, pupil_frequency=na_detection / wavelength)
    g = Geometry(wavelength, medium_index, pixel, n, na_detection,
                 illuminations=_fields.illumination_frequencies(bg_fields, pixel))
    return g, sideband


def parse_angles(text: str) -> np.ndarray:
    """Rotation angles (rad) from "START:STOP:COUNT" in degrees (STOP excluded), e.g. "0:360:180", or a
    comma-separated list of angles in degrees in any order and spacing (non-uniform), e.g. "0,2.5,7,13"."""
    if "," in str(text):
        try:
            values = [float(v) for v in str(text).split(",") if v.strip()]
        except ValueError:
            raise InputError(f"angles {text!r}: a comma-separated list must hold numbers (degrees)") from None
        return np.deg2rad(_finite_angles(values))
    try:
        start, stop, count = (float(v) for v in str(text).split(":"))
    except ValueError:
        raise InputError(f"angles {text!r} are not START:STOP:COUNT (degrees, e.g. 0:360:180)") from None
    start, stop = number("the angles' START", start, unit="degrees"), number("the angles' STOP", stop, unit="degrees")
    count = integer("the angles' COUNT", count, low=1)
    if start == stop:
        raise InputError(f"angles {text!r}: START and STOP are equal, the angles would all be one")
    return np.deg2rad(np.linspace(start, stop, count, endpoint=False))


def _finite_angles(angles) -> np.ndarray:
    try:
        a = np.asarray(angles, float).reshape(-1)
    except (TypeError, ValueError):
        raise InputError(f"angles must be numbers (radians), got {angles!r}") from None
    bad = a.size - int(np.count_nonzero(np.isfinite(a)))
    if bad:
        raise InputError(f"angles: {bad} non-finite (NaN or Inf) values of {a.size}")
    return a


def rotation_geometry(angles, count: int, *, wavelength: float, medium_index: float, pixel: float,
                      na_detection: float, n: int, axis=(0.0, 1.0, 0.0), rotation_sense: int = 1) -> Geometry:
    """The sample-rotation geometry (about y) for ``count`` holograms at ``angles`` (rad, or "START:STOP:COUNT"
    in degrees); a count that differs from the angles' is a ValueError. ``wavelength`` (vacuum) and
    ``pixel`` in um, ``medium_index`` and ``na_detection`` dimensionless, ``n`` the volume's size (pixels)."""
    angles = parse_angles(angles) if isinstance(angles, str) else _finite_angles(angles)
    if len(angles) != count:
        raise InputError(f"angles: {len(angles)} angles for {count} holograms; give one angle per hologram")
    return Geometry(wavelength, medium_index, pixel, n, na_detection, angles=angles, axis=axis,
                    rotation_sense=rotation_sense)


def simulation_geometry(n: int, *, kind: str = "scan", angles: int = 48, na_illumination: float = 0.8) -> Geometry:
    """The reference setup's geometry (:mod:`qora.holo.reference`) for simulations: ``angles`` illuminations
    on a cone of ``na_illumination`` plus normal incidence, rounded to the volume's frequency bins
    ("scan"), or ``angles`` rotations about y over 360 degrees ("rotation"). ``angles`` is a count,
    ``na_illumination`` dimensionless, ``n`` the volume's size (pixels of the reference's 0.1 um)."""
    from qora.holo import reference as R

    n, angles = integer("n (the volume size)", n, low=4), integer("angles", angles, low=1)
    na_illumination = number("na_illumination", na_illumination)
    if not 0 <= na_illumination <= R.NA_DETECTION:
        raise InputError(f"na_illumination must be between 0 and the detection NA {R.NA_DETECTION:g} (an "
                         "illumination beyond it misses the camera; beyond the medium index "
                         f"{R.MEDIUM_INDEX:g} it would not propagate), got {na_illumination:g}")
    if kind == "rotation":
        return Geometry(R.WAVELENGTH, R.MEDIUM_INDEX, R.PIXEL, n, R.NA_DETECTION,
                        angles=np.linspace(0, 2 * np.pi, angles, endpoint=False))
    if kind != "scan":
        raise InputError(f"kind must be 'scan' or 'rotation', got {kind!r}")
    df = 1.0 / (n * R.PIXEL)
    ill = np.round(cone_illuminations(na_illumination, R.WAVELENGTH, angles) / df) * df
    return Geometry(R.WAVELENGTH, R.MEDIUM_INDEX, R.PIXEL, n, R.NA_DETECTION, illuminations=ill)
