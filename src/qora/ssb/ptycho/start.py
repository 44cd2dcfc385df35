"""The solver's start from a 4D-STEM scan and the direct fit: the measured amplitudes on the model's grid, the
positions, the probe modes from the fitted aberrations and the first slices from a direct image.

Frames. The detector window is cut about the bright-field disk's centre pixel (N x N, N even) and put in FFT order
(q = 0 at pixel 0); the detector pixel dtheta (mrad) sets the model's real-space pixel lambda / (N dtheta). The
fit's orientation (:data:`qora.ssb.orientation.ORIENTATIONS`, the operation that brings the recorded patterns into
the fits' frame) is applied to the patterns, exactly, as a permutation of FFT-order indices. A scan position
(row, col) x step is turned into the detector's axes by the scan rotation, as the SSB engine turns its
frequencies (:func:`qora.ssb.detector.scan_frequencies`).

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
from qora.ssb.optics import Aberrations, probe_spectrum, wavelength
from qora.ssb.orientation import ORIENTATIONS, check_orientation
from qora.ssb.ptycho.model import Grid
from qora.ssb.ptycho.solver import Problem, PtychoState, orthogonal_modes

__all__ = ["SLICE_MAX_A", "default_slices", "measured_problem", "initial_state", "oriented_fft_order"]

SLICE_MAX_A = 10.0  # the default slices' largest spacing (A): the module's docstring says why
MARGIN = 2  # object pixels beyond the outermost windows: room for the positions' refinement,
SCALE_ROOM = 0.02  # and for the scan's scale refined by up to 2% (the detector's calibration)


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


def measured_problem(data, *, kv: float, scan_step, rotation: float, center, mrad_per_pixel: float,
                     orientation: str = "identity", window: int | None = None, slices: int = 1,
                     thickness: float = 0.0, band: float | None = None, xp=np, dtype=np.float32) -> Problem:
    """The :class:`Problem` of a scan ``data`` (scan_row, scan_col, det_row, det_col) of counts: the detector cut
    to ``window`` pixels (even; default the largest square about ``center`` (row, col) px that fits the detector),
    ``scan_step`` (A; one or (y, x)), ``rotation`` (rad), ``mrad_per_pixel`` the detector's angle per pixel,
    ``slices`` over ``thickness`` (A). ``band`` (1/A): the propagator's band (default 2/3 of the grid's Nyquist,
    against aliasing; inf: none)."""
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
                band=(2 / 3) * 0.5 / pixel if band is None else (None if np.isinf(band) else float(band)))
    return Problem(amplitudes=amplitudes, positions=xp.asarray(corners), object_shape=shape, grid=grid,
                   scan_shape=tuple(data.shape[:2]))


def _probe_mode(grid: Grid, aberrations: Aberrations, alpha_mrad: float, xp):
    """The coherent probe psi = A e^{-i chi} centred in the window (pixel N // 2), unit norm."""
    ky, kx = grid.frequencies(np)
    spectrum = probe_spectrum(kx, ky, aberrations, alpha_mrad, grid.wavelength)
    spectrum = spectrum * np.exp(-2j * np.pi * (ky + kx) * (grid.window // 2) * grid.pixel)
    mode = np.fft.ifft2(spectrum)
    return xp.asarray(mode / np.linalg.norm(mode))


def initial_state(problem: Problem, *, aberrations: Aberrations, alpha_mrad: float, thickness: float = 0.0,
                  slices: int = 1, modes: int = 1, first_phase=None, dtype=np.complex64) -> PtychoState:
    """The start: the probe's first mode from ``aberrations`` (the mid-plane's C10, moved to the first slice),
    ``modes - 1`` more as the first times x, y, xy, ... about the window's centre with 5% of the power each (then
    made orthogonal), the whole scaled to the mean counts; each slice's phase ``first_phase`` / S (the object's grid,
    rad; None: 0); no absorption."""
    integer("modes", modes, low=1, high=16)
    integer("slices", slices, low=1, high=256)
    xp = xp_of(problem.amplitudes)
    grid = problem.grid
    first_depth = (0.5 * thickness / slices - thickness / 2) if slices > 1 else 0.0
    entrance = Aberrations({**aberrations.values, "C10": (aberrations.get("C10") + first_depth, 0.0)})
    mode = _probe_mode(grid, entrance, alpha_mrad, np)
    n = grid.window
    y, x = np.meshgrid(np.arange(n) - n // 2, np.arange(n) - n // 2, indexing="ij")
    width = max(1.0, float(np.sqrt(np.sum(np.abs(mode) ** 2 * (y**2 + x**2)))))
    shapes = [np.ones_like(y, float), y / width, x / width, y * x / width**2, (y**2 - x**2) / width**2]
    probe = []
    for m in range(modes):
        extra = shapes[m] if m < len(shapes) else np.cos(m * np.arctan2(y, x))
        p = mode * extra
        probe.append(p / np.linalg.norm(p) * (1.0 if m == 0 else math.sqrt(0.05)))
    probe = np.asarray(probe)
    power = float(xp.mean(xp.sum(problem.amplitudes.astype(np.float64) ** 2, axis=(1, 2))))
    probe *= math.sqrt(power / np.sum(np.abs(probe) ** 2))
    probe = orthogonal_modes(xp.asarray(probe.astype(dtype)))
    real = np.dtype(dtype).type(0).real.dtype
    phase = xp.zeros((slices,) + tuple(problem.object_shape), real)
    if first_phase is not None:
        phase += xp.asarray(first_phase, real)[None] / slices
    return PtychoState(objects=xp.exp(1j * phase).astype(dtype), probe=probe,
                       positions=problem.positions.astype(real).copy())
