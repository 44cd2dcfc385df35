"""Optical diffraction tomography by the Fourier diffraction theorem.

Each illumination's scattered-field spectrum lies on a cap of the Ewald sphere in
the object's 3D spectrum. With phi the first-order field ratio (the Rytov phase
log(u / u_in), or u / u_in - 1 for Born), bin kappa of phi's 2D spectrum belongs to

    q = (kappa, nu_z(kappa + nu_in) - nu_z,in),   V^(q) = -4 pi i nu_z(kappa + nu_in) Phi(kappa)

(cycles per um; V = k0^2 (n^2 - n_m^2) the scattering potential). Mapping: each
(illumination, lateral bin) adds its value to the *nearest* axial bin, and every
volume bin is divided by its number of hits. Linear-interpolation gridding was tried
in the seed and failed its voxel-level check; nearest-bin mapping passes it.

The missing cone (and the gaps between caps) is then filled by Gerchberg-Papoulis
with non-negativity of the potential (samples denser than their medium), in C2C or
on half spectra (R2C), or by FISTA with an isotropic TV proximal step (FGP).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from qora.backend import fft as backend_fft
from qora.holo.fista import proximal_gradient
from qora.holo.geometry import Geometry
from qora.holo.options import CUDA_ONLY, ReconstructionOptions
from qora.holo.plans import MappingPlan, mapping_plan
from qora.holo.steps import solve_units, span
from qora.holo.unwrap import rytov
from qora.io.errors import InputError
from qora.progress import report

__all__ = ["map_spectrum", "reconstruct", "index_from_potential", "potential_from_index", "OdtResult",
           "gerchberg_papoulis", "gerchberg_papoulis_r2c", "restore_coefficients", "solve", "invert", "first_order",
           "pad_fields",
           "crop_volume", "FieldOfView", "fista_tv", "check_ratio", "potential_bounds", "constrain", "result_of"]


class _fft:  # noqa: N801 - a namespace: the one-shot transforms of qora.backend.fft (SciPy's, threads by size)
    @staticmethod
    def fftn(x):
        return backend_fft.fftn(x)

    @staticmethod
    def ifftn(x):
        return backend_fft.ifftn(x)

    @staticmethod
    def rfftn(x, axes):
        return backend_fft.rfftn(x, axes=axes)

    @staticmethod
    def irfftn(x, s, axes):
        return backend_fft.irfftn(x, s=s, axes=axes)


def index_from_potential(v, geometry: Geometry, *, complex_index: bool = False):
    """n = Re sqrt(n_m^2 + V / k0^2) for a (possibly complex) potential V in rad^2/um^2; with
    ``complex_index`` the complex n + i kappa (complex64; kappa > 0 absorbs)."""
    n = np.sqrt(geometry.medium_index**2 + np.asarray(v) / geometry.k0**2 + 0j)
    return n.astype(np.complex64) if complex_index else n.real.astype(np.float32)


def potential_bounds(geometry: Geometry, index_min: float | None = None, index_max: float | None = None) -> tuple:
    """The bounds (lower, upper) on the real potential (rad^2/um^2) of bounds on the real index.

    ``index_min`` None is the medium index (lower bound 0: GP's classic non-negativity), -inf none;
    ``index_max`` None is none.
    """
    def v(index):
        return geometry.k0**2 * (index**2 - geometry.medium_index**2)

    lower = 0.0 if index_min is None else (-math.inf if index_min == -math.inf else v(index_min))
    upper = math.inf if index_max is None or index_max == math.inf else v(index_max)
    return float(lower), float(upper)


def constrain(v, bounds=(0.0, math.inf), complex_index: bool = False):
    """The projection of a potential volume onto the constraints: the real part into ``bounds``, and
    with ``complex_index`` the imaginary part kept non-negative (absorption), else dropped."""
    real = np.clip(v.real, bounds[0], bounds[1])
    return real + 1j * np.maximum(v.imag, 0.0) if complex_index else real


def potential_from_index(index, geometry: Geometry):
    """V = k0^2 (n^2 - n_m^2) in rad^2/um^2, from a refractive index n (dimensionless; k0 = 2 pi / wavelength)."""
    return geometry.k0**2 * (np.asarray(index, np.float64) ** 2 - geometry.medium_index**2)


def map_spectrum(phi, geometry: Geometry):
    """Volume spectrum (n, n, n) (FFT order, origin at index 0 on every axis) and its hit counts.

    ``phi`` (A, n, n) is the first-order field ratio at z = 0, centre-origin, on the
    geometry's grid. Frequencies outside the detection pupil, or evanescent, are skipped.
    """
    plan = MappingPlan(geometry)
    return plan(phi), plan.hits.reshape((geometry.n,) * 3)


def _to_volume(spectrum):
    return np.fft.fftshift(_fft.ifftn(spectrum))


class FieldOfView:
    """The central n^3 box of a grid of edge ``big`` (FFT layout, origin at index 0).

    When the solver's grid is larger than the recorded field of view (``solver_grid``),
    the object is known to lie inside the central n^3: the potential is zero outside. The
    box per axis, in FFT layout, is [big - n//2, big) followed by [0, n - n//2).
    """

    def __init__(self, big: int, n: int) -> None:
        if not 0 < n <= big:
            raise InputError(f"field of view {n} must fit the grid {big}")
        self.big, self.n = big, n
        self.index = np.concatenate([np.arange(big - n // 2, big), np.arange(0, n - n // 2)])  # centre-origin order

    def _blocks(self):
        """(grid slice, box slice) per axis: the box's two runs in FFT layout."""
        lo = self.n // 2
        return ((slice(0, self.n - lo), slice(lo, self.n)), (slice(self.big - lo, self.big), slice(0, lo)))

    def crop(self, v):
        """The box of a big FFT-layout volume, as a centre-origin n^3 array."""
        out = np.empty((self.n,) * 3, v.dtype)
        for gz, bz in self._blocks():  # eight block copies: fancy indexing by np.ix_ was 10x slower
            for gy, by in self._blocks():
                for gx, bx in self._blocks():
                    out[bz, by, bx] = v[gz, gy, gx]
        return out

    def expand(self, c):
        """A centre-origin n^3 array placed in a zero big^3 volume in FFT layout."""
        out = np.zeros((self.big,) * 3, c.dtype)
        for gz, bz in self._blocks():
            for gy, by in self._blocks():
                for gx, bx in self._blocks():
                    out[gz, gy, gx] = c[bz, by, bx]
        return out


def gerchberg_papoulis(data, measured, iterations: int, progress=None, *, bounds=(0.0, math.inf),
                       complex_index: bool = False):
    """C2C Gerchberg-Papoulis: inverse FFT, project (:func:`constrain`: by default keep max(Re, 0)),
    FFT, restore the measured bins.

    Returns the final complex potential (centre-origin) after one more inverse FFT.
    """
    estimate = data.copy()
    for it in range(iterations):
        v = constrain(_fft.ifftn(estimate), bounds, complex_index)
        estimate = _fft.fftn(v)
        estimate[measured] = data[measured]
        report(progress, "gp", it + 1, iterations)
    return _to_volume(estimate)


def _mirror(a):
    """a(-k) on the FFT grid (origin at index 0) of every axis."""
    out = a
    for ax in range(a.ndim):
        out = np.roll(np.flip(out, axis=ax), 1, axis=ax)
    return out


def restore_coefficients(data, measured):
    """(a, b) of the half-spectrum restore step H(Y) = a + b E (see :func:`gerchberg_papoulis_r2c`)."""
    half = data.shape[-1] // 2 + 1
    m = measured.astype(np.float64)
    a_full = (data * measured + np.conj(_mirror(data * measured))) / 2
    b_full = 1 - (m + _mirror(m)) / 2
    return a_full[..., :half], b_full[..., :half]


def gerchberg_papoulis_r2c(data, measured, iterations: int, progress=None, *, bounds=(0.0, math.inf)):
    """The same iterates as :func:`gerchberg_papoulis` on half spectra (R2C), returning the real volume.

    After the constraint the estimate E is the spectrum of a real volume, and the
    restore step followed by taking the real part equals H(Y) = a + b E with
    a = (P(k) + conj P(-k)) / 2 and b = 1 - (M(k) + M(-k)) / 2 (see docs/holo.md).
    """
    n = data.shape
    axes = tuple(range(len(n)))
    a, b = restore_coefficients(data, measured)
    estimate = a.copy()
    for it in range(iterations):
        v = np.clip(_fft.irfftn(estimate, s=n, axes=axes), bounds[0], bounds[1])
        estimate = a + b * _fft.rfftn(v, axes=axes)
        report(progress, "gp", it + 1, iterations)
    return np.fft.fftshift(_fft.irfftn(estimate, s=n, axes=axes))


def _gp_threaded(data, measured, iterations: int, r2c: bool, progress=None, *, bounds=(0.0, math.inf),
                 complex_index: bool = False):
    """GP on the host's threads (:mod:`qora.holo.gp_cpu`): the iterates of :func:`gerchberg_papoulis_r2c`
    (``r2c``) or :func:`gerchberg_papoulis`, the NumPy references, to rounding. A complex index (the
    imaginary part kept as well) runs the NumPy reference."""
    if complex_index:
        return gerchberg_papoulis(data, measured, iterations, progress, bounds=bounds, complex_index=True)
    from qora.holo import gp_cpu  # numba, loaded on first use

    low, high = float(bounds[0]), float(bounds[1])
    if r2c:
        a, b = restore_coefficients(data, measured)
        return np.fft.fftshift(gp_cpu.gp_r2c(a, b, data.shape, iterations, progress, low=low, high=high))
    return np.fft.fftshift(gp_cpu.gp_c2c(data, measured, iterations, progress, low=low, high=high))


def fista_tv(data, measured, iterations: int, lam: float, inner: int, fov: FieldOfView | None = None,
             progress=None, *, bounds=(0.0, math.inf), start=None, box: bool = False, restore=None):
    """FISTA with step 1 on f(x) = 1/2 ||M (F x - P)||^2 plus lam TV(x), x >= 0 (real potential).

    The gradient step y - grad f(y) is the half-spectrum restore step of
    :func:`gerchberg_papoulis_r2c` (the Lipschitz constant of grad f is 1); the prox is
    FGP with ``inner`` iterations, its dual warm-started between outer iterations.
    With ``fov`` the unknown x is the box alone (zero outside): the iterates and the prox
    live on n^3, centre-origin, and only the transforms see the big grid. ``bounds`` replaces
    x >= 0 by a box; ``start`` (a previous call's ``box=True`` answer) warm-starts x.
    ``restore``: :func:`restore_coefficients` of the data, when a caller solving several times made them.
    Returns the real volume, centre-origin; with ``box`` the iterate itself (the box, or the grid in FFT layout).
    """
    from qora.holo.box_fft import BoxSpectrum
    from qora.holo.tv_cpu import fgp_prox_fused  # numba, loaded on first use; tv.fgp_prox is the reference

    n = data.shape
    axes = tuple(range(len(n)))
    a, b = restore_coefficients(data, measured) if restore is None else restore
    if fov is None:
        forward = lambda v: _fft.rfftn(v, axes=axes)  # noqa: E731
        inverse = lambda s: _fft.irfftn(s, s=n, axes=axes)  # noqa: E731
    else:  # the box's pruned transforms: 58% of the work at oversampling 2, no padded copy (box_fft)
        pruned = BoxSpectrum(fov.big, fov.n)
        forward, inverse = pruned.forward, pruned.inverse
    dual = None

    def prox(v):
        nonlocal dual  # the FGP dual, warm-started between outer iterations
        x, dual = fgp_prox_fused(np.ascontiguousarray(v), lam, inner, dual=dual, bounds=bounds)
        return x

    shown = lambda k, _x: report(progress, "tv", k, iterations) or None  # noqa: E731 (shown, never stopped)
    x_prev, _ = proximal_gradient(inverse(a) if start is None else start, lambda y, _k: inverse(a + b * forward(y)),
                                  prox, iterations, after_step=shown)
    if box:
        return x_prev
    return np.fft.fftshift(x_prev if fov is None else fov.expand(x_prev))


def solve(spectrum, measured, geometry: Geometry, *, method: str = "gp", iterations: int = 50, r2c: bool = False,
          tv_weight: float | str = 1e-3, tv_inner: int = 20, field_of_view: int | None = None, progress=None,
          index_min: float | None = None, index_max: float | None = None, complex_index: bool = False,
          noise_energy: float | None = None, info: dict | None = None):
    """From a mapped spectrum to the index volume by ``method`` ("plain", "gp" or "tv").

    ``field_of_view``: edge (voxels) of the central box outside which the potential is known
    to be zero (the recorded field of view inside a larger solver grid); None: no such box.
    TV uses it (its iterates and prox then live on the box alone: faster, and measured 5% lower
    RMSE on a 64^3 cell phantom at oversampling 1.5); GP does not (measured: the box changed its RMSE by +1%).
    ``progress`` gets (method, iteration, iterations) after each iteration (its answer is not read:
    the solver always runs its iterations). ``index_min`` / ``index_max``: the bounds GP and TV enforce
    (:func:`potential_bounds`); ``complex_index``: the complex index (complex64) is returned, GP runs
    C2C and TV on both parts. ``tv_weight="auto"`` needs ``noise_energy``
    (:meth:`~qora.holo.plans.MappingPlan.noise_energy`); the weight used goes to ``info["tv_weight"]``
    and the search to ``info["tv_selection"]`` when ``info`` is a dict.
    """
    bounds = potential_bounds(geometry, index_min, index_max)
    # TV always works on the centre-origin box (the whole grid when there is no smaller field of
    # view): in the FFT layout the object straddles the corners and the Neumann boundary of the
    # differences would cut through its middle (no penalty across it).
    fov = FieldOfView(geometry.n, field_of_view or geometry.n)
    if method == "plain":
        potential = _to_volume(spectrum)
    elif method in ("gp", "tv"):
        if iterations < 1:
            raise InputError(f"iterations must be at least 1, got {iterations}")
        if method == "gp":
            potential = _gp_threaded(spectrum, measured, iterations, r2c, progress, bounds=bounds,
                                     complex_index=complex_index)
        else:
            potential = _tv(spectrum, measured, geometry, fov, iterations=iterations, tv_weight=tv_weight,
                            tv_inner=tv_inner, bounds=bounds, complex_index=complex_index,
                            noise_energy=noise_energy, info=info, progress=progress)
    else:
        raise InputError(f"method must be 'plain', 'gp' or 'tv', got {method!r}")
    return index_from_potential(potential, geometry, complex_index=complex_index)


def _tv(spectrum, measured, geometry, fov, *, iterations, tv_weight, tv_inner, bounds, complex_index, noise_energy,
        info, progress):
    """FISTA-TV at a given weight or the discrepancy principle's (:mod:`qora.holo.regularisation`)."""
    from qora.holo import regularisation as reg

    if tv_inner < 1 or not (tv_weight == "auto" or tv_weight > 0):
        raise InputError("tv needs tv_weight > 0 (or 'auto') and tv_inner >= 1")
    record = None
    if tv_weight == "auto":
        if noise_energy is None:
            raise InputError("tv_weight='auto' needs the noise energy of the mapped spectrum (noise_energy)")
        solver = reg.fista_tv_complex if complex_index else fista_tv
        shared = {} if complex_index else {"restore": restore_coefficients(spectrum, measured)}  # once, not per solve
        tv_weight, x, record = reg.select_tv_weight(spectrum, measured, geometry, noise_energy, solver=solver,
                                                    iterations=iterations, inner=tv_inner, fov=fov, bounds=bounds,
                                                    complex_index=complex_index, progress=progress,
                                                    solver_options=shared)
        potential = np.fft.fftshift(fov.expand(x))
    elif complex_index:
        potential = reg.fista_tv_complex(spectrum, measured, iterations, tv_weight * geometry.k0**2, tv_inner, fov,
                                         progress, bounds=bounds)
    else:
        potential = fista_tv(spectrum, measured, iterations, tv_weight * geometry.k0**2, tv_inner, fov, progress,
                             bounds=bounds)
    if info is not None:
        info["tv_weight"] = float(tv_weight)
        if record is not None:
            info["tv_selection"] = record
    return potential


def check_ratio(name: str, ratio, geometry: Geometry, *, shape: bool = True) -> np.ndarray:
    """Field ratios u / u_in as a complex array (A, n, n) of the geometry, finite (InputError naming
    ``name`` otherwise: a real array, the wrong shape, how many values are NaN or Inf)."""
    ratio = np.asarray(ratio)
    if not np.iscomplexobj(ratio):
        raise InputError(f"{name} must be complex field ratios u / u_in, got dtype {ratio.dtype}")
    want = (geometry.count, geometry.n, geometry.n)
    if shape and ratio.shape != want:
        raise InputError(f"{name} must have shape {want} (illuminations of the geometry, n, n), got {ratio.shape}")
    bad = ratio.size - int(np.count_nonzero(np.isfinite(ratio)))
    if bad:
        raise InputError(f"{name}: {bad} non-finite (NaN or Inf) values of {ratio.size}")
    return ratio


def first_order(ratio, approximation: str):
    """The first-order field: Rytov phase log(r) or Born r - 1."""
    if approximation == "rytov":
        return rytov(ratio)
    if approximation == "born":
        return ratio - 1
    raise InputError(f"approximation must be 'rytov' or 'born', got {approximation!r}")


@dataclass
class OdtResult:
    """A reconstructed refractive-index volume (z, y, x), float32, centre-origin, and how it was made.

    ``absorption`` is the imaginary index kappa (n + i kappa, float32, same shape) when the complex
    index was asked for (``complex_index``), else None."""

    index: np.ndarray
    geometry: Geometry
    method: str
    approximation: str
    iterations: int
    info: dict = field(default_factory=dict)
    absorption: np.ndarray | None = None

    def save(self, path):
        """Write the volume file (HDF5: the index, its geometry, method and info, the absorption beside it)."""
        from qora.holo.files import save_result

        return save_result(path, self)

    @classmethod
    def load(cls, path) -> "OdtResult":
        """The result a volume file holds (:meth:`save`, ``qora holo reconstruct --out F.h5``)."""
        from qora.holo.files import result_fields

        return cls(**result_fields(path))


def invert(phi, geometry: Geometry, plan: "MappingPlan", progress=None, **options) -> np.ndarray:
    """Index volume (n^3 of ``geometry``) from first-order fields (A, n, n): padded onto the
    plan's grid, mapped, solved (``solve`` options) and cropped back (complex64 with ``complex_index``)."""
    big = plan.geometry.n
    if big != geometry.n:
        phi = pad_fields(phi, big)
    if options.get("method") == "tv" and options.get("tv_weight") == "auto":
        options = dict(options, noise_energy=plan.noise_energy(phi))
    index = solve(plan(phi), plan.measured, plan.geometry, field_of_view=geometry.n, progress=progress, **options)
    if big != geometry.n:
        index = np.ascontiguousarray(crop_volume(index, geometry.n))
    return index


def pad_fields(phi, big: int):
    """Centre-origin first-order fields (A, n, n) zero-padded to (A, big, big) (phi = 0 outside)."""
    count, n = phi.shape[0], phi.shape[-1]
    out = np.zeros((count, big, big), phi.dtype)
    lo = big // 2 - n // 2
    out[:, lo:lo + n, lo:lo + n] = phi
    return out


def crop_volume(volume, n: int):
    """The central n^3 of a centre-origin volume."""
    lo = volume.shape[0] // 2 - n // 2
    return volume[lo:lo + n, lo:lo + n, lo:lo + n]


def reconstruct(ratio, geometry: Geometry, options: ReconstructionOptions | None = None, *,
                progress=None) -> OdtResult:
    """Refractive-index volume from field ratios u / u_in (A, n, n) at z = 0, on the CPU.

    ``ratio``: complex field ratios, centre-origin, one per illumination of ``geometry``.
    ``options``: a :class:`~qora.holo.options.ReconstructionOptions` (default: its defaults); the
    CUDA-only fields (mapping, fgp, upload_parts) are not read here. The solver's grid is the smallest
    fast FFT length of at least n * oversample (``info["grid"]``), also for oversample 1 (188 runs
    on 192: a 188^3 transform, 4 x 47, is 6x slower). :func:`qora.holo.reconstruct` picks the backend.
    ``progress`` gets ("rytov" or "born", 1, total) and then (method, 1 + iteration, total) with
    total = 1 + the solver's iterations.
    """
    o = options if options is not None else ReconstructionOptions()
    ratio = check_ratio("ratio", ratio, geometry)  # before padding onto the solver grid, which takes any size
    total = 1 + solve_units(o)
    phi = first_order(ratio, o.approximation)
    report(progress, o.approximation, 1, total)
    plan = mapping_plan(geometry, o, span(progress, 1, total))  # exact gridding: its weights' steps named on the bar
    info = {"measured_fraction": float(plan.measured.mean()), "r2c": bool(o.r2c), "oversample": o.oversample,
            "grid": plan.geometry.n, "gridding": plan.gridding, "tv_weight": o.tv_weight if o.method == "tv" else None}
    index = invert(phi, geometry, plan, span(progress, 1, total), info=info, **solve_options(o))
    return result_of(index, geometry, o, info)


def result_of(index, geometry: Geometry, options: ReconstructionOptions, info: dict) -> OdtResult:
    """The :class:`OdtResult` of a solved index (real, or complex with ``options.complex_index``)."""
    o = options
    absorption = None
    if np.iscomplexobj(index):
        index, absorption = np.ascontiguousarray(index.real), np.ascontiguousarray(index.imag)
    return OdtResult(index, geometry, o.method, o.approximation, 0 if o.method == "plain" else o.iterations,
                     info=info, absorption=absorption)


def solve_options(options: ReconstructionOptions) -> dict:
    """The keywords of :func:`solve` / :func:`invert` from the options (the CPU solver's choices)."""
    skip = CUDA_ONLY + ("approximation", "oversample", "gridding")
    return {k: v for k, v in options.to_dict().items() if k not in skip}
