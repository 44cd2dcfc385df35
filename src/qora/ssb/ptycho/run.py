"""Iterative ptychography from a scan and its direct fit, in one call (:func:`reconstruct`), and its result.

The chain: the fit's detector orientation, scan rotation and aberrations (its better branch: C10 of the slab's
mid-plane, C12, ...), the thickness of its thick or incoherent branch (0 when it has neither: one slice), the
direct image of that branch (:func:`qora.ssb.fitting.fitted_image`) as the first estimate of the summed phase, the
detector's centre and angle per pixel from the session: nothing set by hand. Memory is estimated before any
array of the solver is made; the batch is sized from the free memory.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from qora.backend.device import free_memory
from qora.io.errors import InputError
from qora.io.validate import memory_needed
from qora.ssb.ptycho.model import Grid
from qora.ssb.ptycho.solver import PtychoOptions, PtychoState, current_grid, iterate
from qora.ssb.ptycho.start import default_slices, depth_of_field, initial_state, measured_problem

__all__ = ["PtychoResult", "reconstruct", "fit_start", "solver_bytes", "scan_to_object"]


@dataclass
class PtychoResult:
    """A reconstruction: ``objects`` (S, H, W) complex transmissions on the object's grid (``grid.pixel`` A a
    pixel, slices ``grid.slice_spacing`` A apart), ``probe`` (K, N, N) its modes (sqrt(counts) units, the window
    centred), ``positions`` (J, 2) the refined windows' first pixels, ``start_positions`` as measured, ``losses``
    the relative misfit of each pass, ``start`` what came from the fit and what the solver refined of it (dict:
    ``scan_scale`` the positions' scale found, ``object_pixel_a`` the object's pixel it implies, the scan step
    being trusted, ``settled_at`` the pass at which the misfit settled), ``scan_map`` (2, 3) the affine map from
    (row, col, 1) of the scan to the probe's centre on the object's grid (px), fitted to the refined positions.
    Host arrays."""

    objects: np.ndarray
    probe: np.ndarray
    positions: np.ndarray
    start_positions: np.ndarray
    losses: list
    grid: Grid
    start: dict = field(default_factory=dict)
    scan_map: np.ndarray = field(default_factory=lambda: np.zeros((2, 3)))

    @property
    def phase(self) -> np.ndarray:
        """The summed phase of the slices (rad), (H, W): the projected potential's image."""
        return np.angle(self.objects).sum(0)

    def phase_on_scan(self, scan_shape) -> np.ndarray:
        """The summed phase sampled at the scan's positions (rad, (rows, cols)), bilinearly: beside a direct image."""
        from scipy.ndimage import map_coordinates

        rows, cols = np.meshgrid(np.arange(scan_shape[0]), np.arange(scan_shape[1]), indexing="ij")
        at = self.scan_map @ np.stack([rows.ravel(), cols.ravel(), np.ones(rows.size)])
        return map_coordinates(self.phase, at, order=1, mode="nearest").reshape(scan_shape)

    def save(self, path) -> Path:
        """HDF5 (``qora_kind`` "ptycho_result"): objects, probe, positions, losses, the grid and the start."""
        import h5py

        from qora.io.atomic import atomic_path

        path = Path(path)
        with atomic_path(path) as tmp, h5py.File(tmp, "w") as f:
            f.attrs["qora_kind"] = "ptycho_result"
            for name in ("objects", "probe", "positions", "start_positions", "scan_map"):
                f.create_dataset(name, data=getattr(self, name), compression="gzip")
            f.create_dataset("phase", data=self.phase.astype(np.float32), compression="gzip")
            f.create_dataset("losses", data=np.asarray(self.losses, float))
            for key in ("window", "pixel", "wavelength", "slice_spacing"):
                f.attrs[f"grid_{key}"] = getattr(self.grid, key)
            f.attrs["grid_band"] = np.nan if self.grid.band is None else self.grid.band
            for key, value in self.start.items():
                f.attrs[f"start_{key}"] = value
        return path

    @classmethod
    def load(cls, path) -> "PtychoResult":
        import h5py

        with h5py.File(path, "r") as f:
            if f.attrs.get("qora_kind") != "ptycho_result":
                raise InputError(f"{path}: not a ptychography result of qora (qora_kind {f.attrs.get('qora_kind')!r})")
            band = float(f.attrs["grid_band"])
            grid = Grid(window=int(f.attrs["grid_window"]), pixel=float(f.attrs["grid_pixel"]),
                        wavelength=float(f.attrs["grid_wavelength"]),
                        slice_spacing=float(f.attrs["grid_slice_spacing"]), band=None if math.isnan(band) else band)
            start = {k[6:]: (v.item() if hasattr(v, "item") else v) for k, v in f.attrs.items()
                     if k.startswith("start_")}
            return cls(objects=f["objects"][()], probe=f["probe"][()], positions=f["positions"][()],
                       start_positions=f["start_positions"][()], losses=list(f["losses"][()]), grid=grid,
                       start=start, scan_map=f["scan_map"][()])


def fit_start(fit) -> dict:
    """What the solver takes from a fit (:class:`qora.ssb.FitResult` or its JSON object): ``branch`` (the better
    one), ``aberrations`` (its parameters), ``rotation`` (rad), ``orientation``, ``thickness`` (A; the better
    branch's, else the chosen depth model's, else the incoherent or thick branch's, 0 without any)."""
    from qora.ssb.model import parameters_to_aberrations

    if "rotation_rad" not in fit or "orientation" not in fit:
        raise InputError("the fit lacks its rotation_rad or orientation: not a result of qora ssb fit")
    branch = fit.get("better") or "standard"
    values = dict(fit[branch]["parameters"])
    # the thickness of the branch whose aberrations are taken, else of the depth model the fit chose (the columnar
    # one is the "thick" branch), else of any branch that has one: C10 (the mid-plane's) and t belong together
    chosen = (fit.get("depth_model") or {}).get("chosen")
    chosen = "thick" if chosen == "columnar" else chosen
    thickness = 0.0
    for name in dict.fromkeys((branch, chosen, "incoherent", "thick")):
        if name in fit and "thickness" in fit[name].get("parameters", {}):
            thickness = float(fit[name]["parameters"]["thickness"])
            break
    aberrations = parameters_to_aberrations({k: v for k, v in values.items() if k not in ("thickness", "tilt_y",
                                                                                          "tilt_x")})
    return {"branch": branch, "aberrations": aberrations, "rotation": float(fit["rotation_rad"]),
            "orientation": fit["orientation"]["orientation"], "thickness": max(0.0, thickness)}


def scan_to_object(problem, positions=None) -> np.ndarray:
    """The affine map (2, 3) from a scan index (row, col, 1) to the probe's centre on the object's grid (px), by
    least squares from ``positions`` (default the problem's start positions, exactly that map's values; refined
    ones give the map the solver ended with, its scale included)."""
    positions = problem.positions if positions is None else positions
    positions = np.asarray(positions.get() if hasattr(positions, "get") else positions)
    rows, cols = problem.scan_shape
    r, c = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    design = np.stack([r.ravel(), c.ravel(), np.ones(r.size)], 1)
    centres = positions + problem.grid.window // 2
    solution, *_ = np.linalg.lstsq(design, centres, rcond=None)
    return solution.T


def solver_bytes(problem, *, slices: int, modes: int, batch: int = 64, itemsize: int = 8) -> int:
    """The bytes the solver holds: the amplitudes, the slices and their illumination and gradient, and a batch's
    waves (S + 3 of K x N x N complex per position, twice for the backward pass)."""
    j, n = len(problem.amplitudes), problem.grid.window
    h, w = problem.object_shape
    return int(problem.amplitudes.nbytes + 4 * slices * h * w * itemsize
               + 2 * (slices + 3) * modes * n * n * itemsize * min(batch, j))


def reconstruct(data, session, fit, *, options: PtychoOptions = PtychoOptions(), modes: int = 1,
                slices: int | None = None, window: int | None = None, first_image=None, aperture: str = "measured",
                mode_spread: float | None = None, progress=None, checkpoint=None,
                resume: PtychoState | None = None) -> PtychoResult:
    """Iterative multislice ptychography of ``data`` (scan_row, scan_col, det_row, det_col counts; NumPy, or any
    array NumPy can read) started from ``fit`` (of ``session``, the :class:`qora.ssb.Session` of the same data),
    on the session's backend. ``modes``: the probe's coherent modes; ``slices``: default from the fit's
    thickness (:func:`qora.ssb.ptycho.start.default_slices`); ``window``: the detector pixels used (even; default
    the largest square about the disk's centre); ``first_image`` (rad, the scan's grid): the first summed phase
    (default the fit's own direct image); ``aperture``: the probe's modulus, "measured" (read from the scan's mean
    pattern: right whatever the detector's calibration) or "model" (the aperture of alpha at the calibrated angle
    per pixel), :func:`qora.ssb.ptycho.start.initial_state`; ``mode_spread`` (A): the focal spread whose modes
    start ``modes`` > 1 (default the probe's depth of field). ``progress``, ``checkpoint``:
    :func:`qora.ssb.ptycho.solver.iterate`'s;
    ``resume``: a saved state to go on from."""
    from qora.ssb.fitting import fitted_image

    start = fit_start(fit)
    slices = default_slices(start["thickness"]) if slices is None else int(slices)
    detector = session.detector
    problem = measured_problem(data, kv=session.kv, scan_step=session.scan_step, rotation=start["rotation"],
                               center=detector.center, mrad_per_pixel=detector.mrad_per_pixel,
                               orientation=start["orientation"], window=window, slices=slices,
                               thickness=start["thickness"], xp=session.xp)
    free = free_memory(session.backend) or (8 << 30)
    memory_needed(solver_bytes(problem, slices=slices, modes=modes), "the ptychography solver's arrays",
                  available=free, hint="fewer slices, modes or a smaller window shrink it")
    scan_map = scan_to_object(problem)
    options = _with_spacing_rule(options, start["thickness"], slices, session)
    if resume is None:
        image = fitted_image(session, fit)[0] if first_image is None else np.asarray(first_image)
        state = initial_state(problem, aberrations=start["aberrations"], alpha_mrad=session.alpha_mrad,
                              thickness=start["thickness"], slices=slices, modes=modes,
                              first_phase=_on_object_grid(image, scan_map, problem.object_shape), aperture=aperture,
                              mode_spread=mode_spread)
    else:
        state = resume
    iterate(problem, state, options, free_bytes=free, progress=progress, checkpoint=checkpoint)
    host = session.backend.to_host
    scale = float(state.adam.get("scale", 1.0))
    return PtychoResult(objects=host(state.objects), probe=host(state.probe), positions=host(state.positions),
                        start_positions=host(state.adam["start_positions"]), losses=list(state.losses),
                        grid=current_grid(problem, state), scan_map=scan_to_object(problem, host(state.positions)),
                        start={"branch": start["branch"], "rotation_rad": start["rotation"], "scan_scale": scale,
                               "object_pixel_a": problem.grid.pixel / scale,
                               "orientation": start["orientation"], "thickness_a": start["thickness"],
                               "slices": slices, "modes": modes, "iterations": state.iteration, "aperture": aperture,
                               "thickness_refined_a": current_grid(problem, state).slice_spacing * slices
                               if slices > 1 else 0.0, "spacing_rate": options.spacing_rate,
                               **({"settled_at": int(state.adam["settled_at"])} if "settled_at" in state.adam else {}),
                               **{f"aberration_{k}": float(v) for k, v in _flat(start["aberrations"]).items()}})


# the slices' spacing refined by the misfit (PtychoOptions.spacing_rate, relative, a step) where the slab is thicker
# than twice the probe's depth of field lambda / alpha^2: there the data tell depth (abTEM's marked 101.5 A SrTiO3,
# fitted 87.2 A: refined to 99.6 A, the exit third told apart); in thinner ones they do not (its 7.8 A set, fitted
# 15.9 A, drifted to 23.7 A and lost 0.003 of r): kept there
SPACING_RATE = 0.002
SPACING_DEPTHS_OF_FIELD = 2.0


def _with_spacing_rule(options: PtychoOptions, thickness: float, slices: int, session) -> PtychoOptions:
    """``options`` with ``spacing_rate`` set by the rule above where it is None."""
    from dataclasses import replace

    if options.spacing_rate is not None:
        return options
    thick = slices > 1 and thickness >= SPACING_DEPTHS_OF_FIELD * depth_of_field(session.wavelength, session.alpha_mrad)
    return replace(options, spacing_rate=SPACING_RATE if thick else 0.0)


def _flat(aberrations) -> dict:
    """C_nm (A) and, for the angular ones, their azimuths (rad), as flat names."""
    out = {}
    for name, (value, angle) in aberrations.values.items():
        out[name] = value
        if angle:
            out[f"{name}_angle"] = angle
    return out


def _on_object_grid(image, scan_map: np.ndarray, shape) -> np.ndarray:
    """A scan-grid image (rows, cols) resampled at every object pixel (bilinear; beyond the scan the edge value)."""
    from scipy.ndimage import map_coordinates

    inverse = np.linalg.inv(np.vstack([scan_map, [0, 0, 1]]))[:2]
    y, x = np.meshgrid(np.arange(shape[0]), np.arange(shape[1]), indexing="ij")
    at = inverse @ np.stack([y.ravel(), x.ravel(), np.ones(y.size)])
    image = np.asarray(image, np.float64)
    return map_coordinates(image - image.mean(), at, order=1, mode="nearest").reshape(shape)

