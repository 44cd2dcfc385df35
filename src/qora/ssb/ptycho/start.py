"""The solver's start from a 4D-STEM scan and the direct fit: the measured amplitudes on the model's grid, the
positions, the probe modes from the fitted aberrations and the first slices from a direct image.

Frames. The detector window is cut about the bright-field disk's centre pixel (N x N, N even) and put in FFT order
(q = 0 at pixel 0); the detector pixel dtheta (mrad) sets the model's real-space pixel lambda / (N dtheta). The
fit's orientation (:data:`qora.ssb.orientation.ORIENTATIONS`, the operation that brings the recorded patterns into
the fits' frame) is applied to the patterns, exactly, as a permutation of FFT-order indices. A scan position
(row, col) x step is turned into the detector's axes by the scan rotation, as the SSB engine turns its
frequencies (:func:`qora.ssb.detector.scan_frequencies`).

Aperture. The probe's modulus in the detector plane is read from the data: the square root of the scan's mean
pattern over its bright-field level, within the disk (:func:`measured_aperture`). The model's pixels are the
detector's, so this reads the disk's size and edge where they are recorded, whatever the angle per pixel:
an aperture drawn from alpha at the calibrated angle per pixel is only as right as the calibration, and on
abTEM's SrTiO3 a 1.2% error there (the disk's intensity edge read against abTEM's amplitude ramp) took the
reconstruction from r 0.967 to 0.796 while the misfit stayed as low (docs/ssb-methods.md). The aberrations
give the phase.

Band. The propagator between slices passes the detector's reach, the circle of the grid's Nyquist (what the
patterns record of a slice's scattering), not the 2/3 of it that simulators keep against aliasing: the cut
removed frequencies the detector measures from every slice but the last. On abTEM's SrTiO3 (8 A, default chain)
the reach scored r 0.966 / 0.948 / 0.952 where 2/3 scored 0.964 / 0.945 / 0.949 on the three bands of
``qora bench ssb-ptycho`` (no band at all: the same as the reach).

Depth. A slab of thickness t in S slices of t / S: slice s sits at z_s = (s + 1/2) t / S - t / 2 from the mid-plane,
and the fitted C10 is the mid-plane's (the thick model's convention), so the probe entering the first slice has
C10 + z_0. S defaults to ceil(t / 10 A) (at most 64): the lateral band of the data (alpha plus the detector's
reach) resolves depth to about lambda / (alpha (alpha + theta_max)) (a few nm at 300 kV and 25 mrad), so thinner
slices add cost, not information.
"""

from __future__ import annotations

import math

import numpy as np

from qora.backend.core import xp_of
from qora.io.errors import InputError
from qora.io.validate import integer, nonnegative, positive
from qora.ssb.optics import Aberrations, chi, probe_spectrum, wavelength
from qora.ssb.orientation import ORIENTATIONS, check_orientation
from qora.ssb.ptycho.model import Grid
from qora.ssb.ptycho.solver import Problem, PtychoState, orthogonal_modes

__all__ = ["SLICE_MAX_A", "APERTURES", "depth_of_field", "default_slices", "measured_problem", "measured_aperture",
           "initial_state",
           "focal_spread_modes", "oriented_fft_order"]

SLICE_MAX_A = 10.0  # the default slices' largest spacing (A): the module's docstring says why
MARGIN = 2  # object pixels beyond the outermost windows: room for the positions' refinement,
SCALE_ROOM = 0.02  # and for the scan's scale refined by up to 2% (the detector's calibration)
APERTURES = ("measured", "model")  # the probe's modulus: read from the data, or drawn from alpha
DARK_LEVEL = 0.01  # below this share of the bright-field level a pixel is dark field (as fit_detector's edge)
EDGE_ROOM = 2.0  # px beyond the disk's fitted radius still read as its edge (blur, a descan's spread)


def depth_of_field(wavelength_a: float, alpha_mrad: float) -> float:
    """The probe's depth of field lambda / alpha^2 (A): the depth over which its focus changes little, the scale of
    depth the data resolve (the focal spread of the modes' start, the spacing's refinement rule)."""
    return wavelength_a / (alpha_mrad * 1e-3) ** 2


def default_slices(thickness: float) -> int:
    """ceil(thickness / SLICE_MAX_A), 1 to 64."""
    return int(min(64, max(1, math.ceil(nonnegative("thickness", thickness, unit="A") / SLICE_MAX_A - 1e-9))))


def oriented_fft_order(patterns, orientation: str):
    """Patterns (..., N, N) centred at pixel N // 2, put in FFT order and brought into the fits' frame by
    ``orientation`` (the recorded pixel at k goes to M k, M of ORIENTATIONS; exact on the integer frequencies)."""
    check_orientation(orientation, auto=False)
    xp = xp_of(patterns)
    n = patterns.shape[-1]
    shifted = xp.fft.ifftshift(patterns, axes=(-2, -1))
    if orientation == "identity":
        return shifted
    m = np.array(ORIENTATIONS[orientation], int)
    f = np.fft.fftfreq(n, 1.0 / n).astype(int)
    fy, fx = np.meshgrid(f, f, indexing="ij")
    # target k_fit = M k_rec, so the source of a target is M^T k_fit
    src_y = (m[0, 0] * fy + m[1, 0] * fx) % n
    src_x = (m[0, 1] * fy + m[1, 1] * fx) % n
    return shifted[..., xp.asarray(src_y), xp.asarray(src_x)]


def measured_aperture(amplitudes, radius: float):
    """The probe's modulus A(k) (N, N, FFT order, 1 on the bright-field level) read from the scan's amplitudes
    (J, N, N, FFT order): sqrt(mean pattern / level), the level the median within 0.8 ``radius`` (px, the disk's
    fitted radius), clipped to 1; 0 beyond ``radius`` + :data:`EDGE_ROOM` px and where the mean is below
    :data:`DARK_LEVEL` of the level (dark field, which the specimen scatters there, not the probe)."""
    xp = xp_of(amplitudes)
    n = amplitudes.shape[-1]
    mean = np.asarray(_host(xp.mean(amplitudes.astype(np.float64) ** 2, axis=0)))
    f = np.fft.fftfreq(n, 1.0 / n)
    r = np.hypot(f[:, None], f[None, :])
    inner = mean[r <= 0.8 * radius]
    level = float(np.median(inner)) if inner.size else 0.0
    if not level > 0:
        raise InputError(f"the scan's mean pattern is dark within the bright-field disk (radius {radius:.1f} px): "
                         "no probe to read there (is the disk's centre right?)")
    disk = (r <= radius + EDGE_ROOM) & (mean >= DARK_LEVEL * level)
    return np.sqrt(np.clip(mean / level, 0.0, 1.0)) * disk


def _host(a):
    return a.get() if hasattr(a, "get") else a


def measured_problem(data, *, kv: float, scan_step, rotation: float, center, mrad_per_pixel: float,
                     orientation: str = "identity", window: int | None = None, slices: int = 1,
                     thickness: float = 0.0, band: float | None = None, xp=np, dtype=np.float32) -> Problem:
    """The :class:`Problem` of a scan ``data`` (scan_row, scan_col, det_row, det_col) of counts: the detector cut
    to ``window`` pixels (even; default the largest square about ``center`` (row, col) px that fits the detector),
    ``scan_step`` (A; one or (y, x)), ``rotation`` (rad), ``mrad_per_pixel`` the detector's angle per pixel,
    ``slices`` over ``thickness`` (A). ``band`` (1/A): the propagator's band (default the detector's reach, the
    grid's Nyquist 1 / (2 pixel) as a circle; inf: none; the module says why)."""
    if data.ndim != 4:
        raise InputError(f"data must be (scan_row, scan_col, det_row, det_col), got shape {data.shape}")
    lam = wavelength(kv)
    cy, cx = (int(round(c)) for c in center)
    reach = min(cy, cx, data.shape[2] - cy, data.shape[3] - cx)
    window = 2 * reach if window is None else integer("window", window, low=8)
    if window % 2 or window > 2 * reach:
        raise InputError(f"the window must be even and fit the detector about its centre ({cy}, {cx}): at most "
                         f"{2 * reach} pixels, got {window}")
    h = window // 2
    cut = np.asarray(data[:, :, cy - h:cy + h, cx - h:cx + h], dtype)  # counts: exact in float32 below 2^24
    if not np.all(np.isfinite(cut)) or cut.min() < 0:
        raise InputError("the counts must be finite and non-negative")
    counts = xp.asarray(cut.reshape(-1, window, window))
    amplitudes = xp.sqrt(oriented_fft_order(counts, orientation)).astype(dtype)
    pixel = lam / (window * positive("mrad_per_pixel", mrad_per_pixel, unit="mrad") * 1e-3)
    step_y, step_x = (float(scan_step), float(scan_step)) if np.ndim(scan_step) == 0 else map(float, scan_step)
    rows, cols = np.meshgrid(np.arange(data.shape[0]) * step_y, np.arange(data.shape[1]) * step_x, indexing="ij")
    c, s = math.cos(rotation), math.sin(rotation)
    centres = np.stack([c * rows + s * cols, -s * rows + c * cols], -1).reshape(-1, 2) / pixel
    corners = centres - window // 2
    margin = MARGIN + int(np.ceil(SCALE_ROOM * np.ptp(corners, axis=0).max() / 2))
    corners -= corners.min(0) - margin
    shape = tuple(int(v) for v in np.ceil(corners.max(0)) + window + margin + 1)
    spacing = thickness / slices if slices > 1 else 0.0
    grid = Grid(window=window, pixel=pixel, wavelength=lam, slice_spacing=spacing,
                band=0.5 / pixel if band is None else (None if np.isinf(band) else float(band)))
    return Problem(amplitudes=amplitudes, positions=xp.asarray(corners), object_shape=shape, grid=grid,
                   scan_shape=tuple(data.shape[:2]))


def _probe_mode(grid: Grid, aberrations: Aberrations, alpha_mrad: float, xp, modulus=None):
    """The coherent probe psi = A e^{-i chi} centred in the window (pixel N // 2), unit norm; A the ``modulus``
    (N, N, FFT order) when given, else the aperture of ``alpha_mrad``."""
    ky, kx = grid.frequencies(np)
    if modulus is None:
        spectrum = probe_spectrum(kx, ky, aberrations, alpha_mrad, grid.wavelength)
    else:
        spectrum = modulus * np.exp(-1j * chi(kx, ky, aberrations, grid.wavelength))
    spectrum = spectrum * np.exp(-2j * np.pi * (ky + kx) * (grid.window // 2) * grid.pixel)
    mode = np.fft.ifft2(spectrum)
    return xp.asarray(mode / np.linalg.norm(mode))


def focal_spread_modes(grid: Grid, aberrations: Aberrations, alpha_mrad: float, modes: int, spread: float,
                       modulus=None) -> np.ndarray:
    """The ``modes`` strongest coherent modes (K, N, N) of the probe averaged over a focal spread: the probes at
    C10 + d for 2K + 1 values of d evenly over [-spread, spread] (A), equally weighted, decomposed by their SVD; each
    mode carries its share of the power (the whole unit norm). A spread of focus (the source's energy spread
    through the chromatic aberration) is the leading partial coherence of a probe; these modes start the solver
    inside its subspace, where the steps of weak modes (proportional to the modes) would not bring them."""
    offsets = np.linspace(-spread, spread, 2 * modes + 1)
    stack = np.asarray([_probe_mode(grid, Aberrations({**aberrations.values,
                                                       "C10": (aberrations.get("C10") + d, 0.0)}),
                                    alpha_mrad, np, modulus) for d in offsets])
    _, values, rows = np.linalg.svd(stack.reshape(len(offsets), -1), full_matrices=False)
    share = values[:modes] ** 2 / np.sum(values[:modes] ** 2)
    n = grid.window
    return np.sqrt(share)[:, None, None] * rows[:modes].reshape(modes, n, n)


def initial_state(problem: Problem, *, aberrations: Aberrations, alpha_mrad: float, thickness: float = 0.0,
                  slices: int = 1, modes: int = 1, first_phase=None, aperture: str = "measured",
                  mode_spread: float | None = None, dtype=np.complex64) -> PtychoState:
    """The start: the probe's first mode from ``aberrations`` (the mid-plane's C10, moved to the first slice) and
    ``aperture`` ("measured": its modulus read from the data, :func:`measured_aperture`, the disk's radius
    ``alpha_mrad`` at the grid's angle per pixel; "model": the aperture of ``alpha_mrad``); with ``modes`` > 1, the
    modes of a focal spread instead (:func:`focal_spread_modes`, half-width ``mode_spread`` A, default the depth
    of field lambda / alpha^2); the whole scaled to the mean counts; each slice's phase ``first_phase`` / S (the
    object's grid, rad; None: 0); no absorption."""
    integer("modes", modes, low=1, high=16)
    integer("slices", slices, low=1, high=256)
    xp = xp_of(problem.amplitudes)
    grid = problem.grid
    first_depth = (0.5 * thickness / slices - thickness / 2) if slices > 1 else 0.0
    entrance = Aberrations({**aberrations.values, "C10": (aberrations.get("C10") + first_depth, 0.0)})
    if aperture not in APERTURES:
        raise InputError(f"aperture must be one of {APERTURES}, got {aperture!r}")
    modulus = None
    if aperture == "measured":
        radius = alpha_mrad * 1e-3 / grid.wavelength * grid.window * grid.pixel  # alpha / lambda in frequency bins
        modulus = measured_aperture(problem.amplitudes, radius)
    if modes == 1:
        probe = _probe_mode(grid, entrance, alpha_mrad, np, modulus)[None]
    else:
        spread = depth_of_field(grid.wavelength, alpha_mrad) if mode_spread is None else \
            positive("mode_spread", mode_spread, unit="A")
        probe = focal_spread_modes(grid, entrance, alpha_mrad, modes, spread, modulus)
    power = float(xp.mean(xp.sum(problem.amplitudes.astype(np.float64) ** 2, axis=(1, 2))))
    probe *= math.sqrt(power / np.sum(np.abs(probe) ** 2))
    probe = orthogonal_modes(xp.asarray(probe.astype(dtype)))
    real = np.dtype(dtype).type(0).real.dtype
    phase = xp.zeros((slices,) + tuple(problem.object_shape), real)
    if first_phase is not None:
        phase += xp.asarray(first_phase, real)[None] / slices
    return PtychoState(objects=xp.exp(1j * phase).astype(dtype), probe=probe,
                       positions=problem.positions.astype(real).copy())
