"""The iterative multislice solver: mini-batch gradient steps on the object slices, the probe modes and the scan
positions of :mod:`qora.ssb.ptycho.model`, with the constraints and regularisation stated here.

Steps. The gradient of the amplitude misfit with respect to a slice, g_s = conj(psi_s) F^H((1 - sqrt(D / I)) Psi)
carried back to the slice, is ePIE's update direction (Maiden and Rodenburg 2009) generalised to several slices;
divided by the intensity that lit each object pixel in the batch it is a Gauss-Newton step, so that one rate
(``object_rate``, 1 the full step) serves any dose and any probe. Where the batch lit a pixel weakly the step is
held back by regularising the divisor with a share ``regularization`` of its largest value (rPIE, Maiden, Johnson
and Li 2017):

    O_s <- O_s - (rate / S) g_s / ((1 - r) w_s + r max w_s),   w_s = sum_batch sum_modes |psi_s|^2 on the object's
    grid,

the whole step shared among the S slices (each slice's derivative moves the exit wave alike).

The probe moves the same way against the batch's object (|O| <= 1, so its divisor is the batch size), the
positions (px) by Adam's steps (Kingma and Ba 2015; rate in pixels, each position its own clock) from
``positions_from`` on, their mean shift removed (a common shift of every position is a shift of the object).

Constraints. |O_s| <= 1 (no slice amplifies the wave). The probe's modes are made orthogonal after each pass (a
mixed state's modes are only defined up to a unitary mixing; the SVD's are ordered by power). Along the beam the
slices' phases are low-passed after each pass by the kz filter of Chen et al. (2021, Science 372, 826) with
strength ``kz_filter`` (0: none): in the 3D Fourier transform of the phase, the weight
1 - (2 / pi) atan(gamma kz^2 / (kx^2 + ky^2)) removes what varies along z faster than the lateral band can tell
(the missing cone of depth from defocus), which otherwise piles into the slices as noise. It filters the slices'
angles: a slice holding more than pi of phase wraps, and the filter then mixes wrapped values (keep such slices
thin, or the filter off).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace

import numpy as np

from qora.backend.core import xp_of
from qora.backend.fft import fftn, ifftn
from qora.io.errors import InputError
from qora.io.validate import integer, nonnegative
from qora.progress import report
from qora.ssb.ptycho.model import Grid, loss_and_gradients, propagator

__all__ = ["BATCH", "MAX_PASSES", "planned_passes", "passes_settled", "current_grid", "PtychoOptions", "PtychoState",
           "Problem", "iterate", "orthogonal_modes", "kz_filter", "batch_size",
           "remove_ramp", "lit_region"]


# positions per step: on abTEM's SrTiO3 at 1e5 e/A^2 (docs/ssb-methods.md, "Iterative ptychography") batches of
# 4, 8, 16, 32, 64 and 400 gave r 0.953, 0.957, 0.961, 0.961, 0.945, 0.889 with the projected potential (smaller
# batches fit the counts' noise, larger ones take fewer steps a pass)
BATCH = 16
MAX_PASSES = 400  # the most passes of a run whose length the misfit decides (PtychoOptions.iterations None)


@dataclass(frozen=True)
class PtychoOptions:
    """The solver's settings. ``iterations``: passes over the scan (None: until ``after_settling`` passes after the
    misfit settled, at most :data:`MAX_PASSES`); ``batch``: positions per step (None: from memory, at most
    :data:`BATCH`); ``object_rate`` and ``probe_rate``: the share of the Gauss-Newton step taken (1: whole);
    ``regularization``: rPIE's share of the largest illumination in the divisor; ``position_rate`` (px): Adam's
    step for the positions; ``scale_rate``: Adam's relative step for the scan's scale (the detector's angle per
    pixel is known to ~1% from the disk's fit, and so the positions' scale in the model's pixels; off by default:
    from the right scale it drifted by 1.5% on abTEM's SrTiO3); ``spacing_rate``: Adam's relative step for the
    slices' spacing (the fitted thickness over S; 0 or None: kept; :func:`qora.ssb.ptycho.reconstruct` sets it by
    its rule when None), from pass ``spacing_from``;
    ``probe_from``, ``positions_from``, ``scale_from``: the pass from which the probe, the positions and the scale
    are refined; ``kz_filter``: the strength gamma of the filter along z (0: off); ``settle`` and ``rate_decay``:
    the misfit has settled at the first pass that lowers it by less than the share ``settle`` of the pass before
    (or raises it); from then on the object's and the probe's rates are divided by 1 + rate_decay n, n the passes
    since (steps that shrink average the counts' noise over passes; before, whole steps build the object: a thick
    crystal needs tens of them, a thin one settles in two or three); ``noise``: the misfit, "amplitude"
    (Gaussian in sqrt(counts)) or "poisson" (:func:`qora.ssb.ptycho.model.loss_and_gradients`); ``seed``: the
    order of the positions in each pass."""

    iterations: int | None = None
    after_settling: int = 40
    batch: int | None = None
    object_rate: float = 1.0
    probe_rate: float = 1.0
    # abTEM's SrTiO3, the default chain, 2 alpha band: 0.02, 0.05, 0.1, 0.2 gave r 0.960, 0.964, 0.963, 0.955
    regularization: float = 0.05
    # positions: on our simulator's film with the positions off by 1.36 px RMS (2.71), from pass 20 at 0.02 px a
    # step they ended 0.96 px (2.29) off, from pass 5 at 0.1 px 0.30 px (0.59); abTEM's 8 A set unchanged (0.964)
    position_rate: float = 0.1
    scale_rate: float = 0.0
    scale_from: int = 2
    spacing_rate: float | None = None
    spacing_from: int = 2
    probe_from: int = 2
    positions_from: int = 5
    kz_filter: float = 0.1
    rate_decay: float = 1.0
    settle: float = 1e-3
    noise: str = "amplitude"
    seed: int = 0

    def __post_init__(self) -> None:
        if self.iterations is not None:
            integer("iterations", self.iterations, low=0, high=100_000)
        integer("after_settling", self.after_settling, low=0, high=100_000)
        if self.batch is not None:
            integer("batch", self.batch, low=1)
        for name in ("object_rate", "probe_rate", "regularization", "position_rate", "scale_rate", "kz_filter",
                     "rate_decay", "settle"):
            nonnegative(name, getattr(self, name))
        if self.spacing_rate is not None:
            nonnegative("spacing_rate", self.spacing_rate)
        if self.noise not in ("amplitude", "poisson"):
            raise InputError(f"noise must be 'amplitude' or 'poisson', got {self.noise!r}")
        if not self.regularization <= 1:
            raise InputError(f"regularization must be within [0, 1], got {self.regularization}")
        integer("probe_from", self.probe_from, low=0)
        integer("positions_from", self.positions_from, low=0)
        integer("scale_from", self.scale_from, low=0)
        integer("spacing_from", self.spacing_from, low=0)


@dataclass
class Problem:
    """What is measured and the geometry: ``amplitudes`` sqrt(counts) (J, N, N), FFT order (q = 0 at pixel 0);
    ``positions`` (J, 2) the windows' first pixels on the object's grid (px, float); ``object_shape`` (H, W);
    ``grid`` the model's sampling; ``scan_shape`` the scan's (rows, cols), positions in row-major order."""

    amplitudes: object
    positions: object
    object_shape: tuple
    grid: Grid
    scan_shape: tuple = ()  # (rows, cols) of the scan the positions are in the order of, when it is a grid

    def __post_init__(self) -> None:
        j, n = len(self.amplitudes), self.grid.window
        if self.amplitudes.ndim != 3 or self.amplitudes.shape[1:] != (n, n):
            raise InputError(f"amplitudes must be (positions, {n}, {n}), got {self.amplitudes.shape}")
        if self.positions.shape != (j, 2):
            raise InputError(f"positions must be ({j}, 2), got {self.positions.shape}")
        low = float(self.positions.min())
        rows, cols = (float(v) for v in self.positions.max(0))
        if not (low >= 0 and rows <= self.object_shape[0] - n - 1 and cols <= self.object_shape[1] - n - 1):
            raise InputError(f"every window must lie inside the object's grid {tuple(self.object_shape)}: positions "
                             f"from 0 to (H - {n} - 1, W - {n} - 1) px, got {low:g} to ({rows:g}, {cols:g})")


@dataclass
class PtychoState:
    """The unknowns and the solver's memory: ``objects`` (S, H, W) complex transmissions, ``probe`` (K, N, N),
    ``positions`` (J, 2) px; ``iteration`` passes done; ``losses`` the amplitude misfit of each pass (sum over the
    scan of (sqrt(I) - sqrt(D))^2 over the counts' sum: relative, dimensionless); ``adam`` the positions' moments
    and their start (kept for a resume)."""

    objects: object
    probe: object
    positions: object
    iteration: int = 0
    losses: list = field(default_factory=list)
    adam: dict = field(default_factory=dict)


def orthogonal_modes(probe):
    """The probe's modes made orthogonal (the SVD of the modes as rows), strongest first: the same mixed state."""
    xp = xp_of(probe)
    k, n = probe.shape[0], probe.shape[-1]
    if k == 1:
        return probe
    _, s, vh = xp.linalg.svd(probe.reshape(k, n * n), full_matrices=False)
    return (s[:, None] * vh).reshape(probe.shape).astype(probe.dtype)


def kz_filter(objects, gamma: float, pixel: float, spacing: float):
    """The slices (S, H, W) with their phases low-passed along z: weight 1 - (2 / pi) atan(gamma kz^2 / kr^2) in
    the phases' 3D Fourier transform (kz in 1/A over the slice ``spacing``, kr over the ``pixel``), the moduli kept;
    kz = 0 is kept whole."""
    s = objects.shape[0]
    if s < 2 or gamma == 0:
        return objects
    xp = xp_of(objects)
    kz = xp.asarray(np.fft.fftfreq(s, spacing))[:, None, None]
    ky = xp.asarray(np.fft.fftfreq(objects.shape[1], pixel))[None, :, None]
    kx = xp.asarray(np.fft.fftfreq(objects.shape[2], pixel))[None, None, :]
    weight = 1 - (2 / np.pi) * xp.arctan2(gamma * kz**2, ky**2 + kx**2)
    phase = ifftn(fftn(xp.angle(objects), axes=(0, 1, 2)) * weight, axes=(0, 1, 2)).real
    return (xp.abs(objects) * xp.exp(1j * phase)).astype(objects.dtype)


def lit_region(problem: Problem, positions=None):
    """The object pixels the scan's probe centres cover (their bounding box on the object's grid): (rows, cols)
    slices."""
    positions = problem.positions if positions is None else positions
    xp = xp_of(positions)
    centre = problem.grid.window // 2
    low = xp.floor(positions.min(0)).astype(int) + centre
    high = xp.ceil(positions.max(0)).astype(int) + centre + 1
    return slice(int(low[0]), int(high[0])), slice(int(low[1]), int(high[1]))


def remove_ramp(problem: Problem, state: PtychoState) -> None:
    """Move the linear phase ramp of the summed phase over the scanned region from the first slice into the probe.

    O e^{i q.r} with P e^{-i q.r} gives the same patterns (exactly for one slice; for several, up to the lateral
    shift lambda dz q / 2 pi of a tilted wave between slices): the misfit cannot fix q, and the probe's steps let it
    drift. The ramp is fitted by least squares over the probe centres' region and handed to the probe, whose
    patterns it does not change at any position (the ramp at the window's corner is a phase per position)."""
    xp = xp_of(state.objects)
    rows, cols = lit_region(problem, state.positions)
    phase = xp.angle(state.objects[:, rows, cols]).sum(0)
    y, x = xp.meshgrid(xp.arange(phase.shape[0], dtype=float), xp.arange(phase.shape[1], dtype=float), indexing="ij")
    design = xp.stack([xp.ones(phase.size), y.ravel(), x.ravel()], 1)
    (_, gy, gx) = (float(v) for v in xp.linalg.lstsq(design, phase.ravel().astype(float), rcond=None)[0])
    h, w = state.objects.shape[1:]
    oy, ox = xp.meshgrid(xp.arange(h, dtype=float), xp.arange(w, dtype=float), indexing="ij")
    state.objects[0] *= xp.exp(-1j * (gy * oy + gx * ox)).astype(state.objects.dtype)
    n = problem.grid.window
    py, px = xp.meshgrid(xp.arange(n, dtype=float), xp.arange(n, dtype=float), indexing="ij")
    state.probe *= xp.exp(1j * (gy * py + gx * px)).astype(state.probe.dtype)


def batch_size(problem: Problem, state: PtychoState, options: PtychoOptions, free_bytes: int) -> int:
    """Positions per step: what the forward pass keeps (S + 3 complex waves of K x N x N per position, twice for
    the backward pass's temporaries) within half of ``free_bytes``, at most :data:`BATCH` and at most the
    positions."""
    if options.batch is not None:
        return min(options.batch, len(problem.amplitudes))
    k, n = state.probe.shape[0], problem.grid.window
    per_position = 2 * (state.objects.shape[0] + 3) * k * n * n * np.dtype(state.probe.dtype).itemsize
    return int(max(1, min(BATCH, len(problem.amplitudes), free_bytes // 2 // per_position)))


def _position_step(state: PtychoState, grad, index, rate: float):
    """Adam's step (beta 0.9, 0.999) for the rows ``index`` of the positions, each row its own clock."""
    xp = xp_of(grad)
    s = state.adam.setdefault("positions", {"m": xp.zeros_like(state.positions), "v": xp.zeros_like(state.positions),
                                            "t": xp.zeros(len(state.positions))})
    s["t"][index] += 1
    t = s["t"][index][:, None]
    s["m"][index] = 0.9 * s["m"][index] + 0.1 * grad
    s["v"][index] = 0.999 * s["v"][index] + 0.001 * grad**2
    return rate * (s["m"][index] / (1 - 0.9**t)) / (xp.sqrt(s["v"][index] / (1 - 0.999**t)) + 1e-12)


def _scalar_adam(state: PtychoState, key: str, g: float, rate: float) -> float:
    """Adam's step (beta 0.9, 0.999; ``rate`` the step's size) for one scalar whose moments are kept in
    ``state.adam[key]``; returns the step."""
    s = state.adam.setdefault(key, {"m": 0.0, "v": 0.0, "t": 0})
    s["t"] += 1
    s["m"] = 0.9 * s["m"] + 0.1 * g
    s["v"] = 0.999 * s["v"] + 0.001 * g * g
    return rate * (s["m"] / (1 - 0.9 ** s["t"])) / (math.sqrt(s["v"] / (1 - 0.999 ** s["t"])) + 1e-30)


def _scale_step(state: PtychoState, grad, index, rate: float) -> None:
    """The scan's scale refined: dL/ds = sum_j g_j . (p_j - c) for the positions p scaled about their mean c by s,
    stepped by Adam (``rate`` relative), every position moved; ``state.adam["scale"]`` keeps the product of the
    factors applied."""
    centre = state.positions.mean(0)
    delta = _scalar_adam(state, "scale_moments", float((grad * (state.positions[index] - centre)).sum()), rate)
    state.positions[...] = centre + (1 - delta) * (state.positions - centre)
    state.adam["scale"] = float(state.adam.get("scale", 1.0)) * (1 - delta)


def current_grid(problem: Problem, state: PtychoState) -> Grid:
    """The problem's grid with the slices' spacing the solver has reached (``state.adam["slice_spacing"]``)."""
    spacing = state.adam.get("slice_spacing")
    return problem.grid if spacing is None else replace(problem.grid, slice_spacing=float(spacing))


def _spacing_step(state: PtychoState, derivative: float, spacing: float, rate: float) -> None:
    """The slices' spacing stepped by Adam on its logarithm (dL/d log dz = dz dL/d dz; ``rate`` relative)."""
    state.adam["slice_spacing"] = spacing * math.exp(-_scalar_adam(state, "spacing_moments", derivative * spacing,
                                                                   rate))


def _step(problem: Problem, state: PtychoState, options: PtychoOptions, index, prop, *, probe: bool,
          positions: bool, scale: bool, spacing: bool = False) -> float:
    """One mini-batch step on the positions ``index`` (``probe``, ``positions``, ``scale``, ``spacing``: which of
    them are refined too); returns the batch's misfit (a 0-d array: read once a pass)."""
    xp = xp_of(state.probe)
    lit = xp.zeros(state.objects.shape, state.objects.real.dtype)
    grid = current_grid(problem, state)
    derivatives = {} if spacing else None
    if spacing:
        prop = propagator(grid, xp, state.probe.dtype)
    loss, g_obj, g_probe, g_pos = loss_and_gradients(state.objects, state.probe, state.positions[index],
                                                     problem.amplitudes[index], grid, prop=prop,
                                                     want_positions=positions or scale, illumination=lit,
                                                     noise=options.noise, derivatives=derivatives, host_loss=False)
    if scale:
        _scale_step(state, g_pos, index, options.scale_rate)
    if spacing:
        _spacing_step(state, derivatives["slice_spacing"], grid.slice_spacing, options.spacing_rate)
    # each slice's step is the Gauss-Newton step of the whole stack shared among the S slices: their derivatives
    # move the exit wave alike, so S whole steps would overshoot S times
    decay = 1 + options.rate_decay * passes_settled(state)
    _object_step(state.objects, g_obj, lit, options.object_rate / decay / state.objects.shape[0],
                 options.regularization)
    if probe:
        state.probe -= options.probe_rate / decay * g_probe / len(index)
    if positions:
        step = _position_step(state, g_pos, index, options.position_rate)
        state.positions[index] -= step - step.mean(0)  # a common shift is the object's, not the scan's
        n = problem.grid.window
        moved = xp.maximum(state.positions[index], 0)  # the bounds as numbers: no copy to the device in a step
        moved[:, 0] = xp.minimum(moved[:, 0], problem.object_shape[0] - n - 1)
        moved[:, 1] = xp.minimum(moved[:, 1], problem.object_shape[1] - n - 1)
        state.positions[index] = moved
    return loss


def _object_step(objects, g_obj, lit, rate: float, share: float) -> None:
    """In place: each slice's step, g_obj over the illumination ``lit`` regularised by ``share`` of its peak (rPIE),
    then |O| <= 1 (no slice amplifies the wave). On CuPy's complex arrays one kernel (ptycho.cu)."""
    xp = xp_of(objects)
    peak = lit.reshape(lit.shape[0], -1).max(1)
    if not isinstance(objects, np.ndarray) and objects.dtype in (np.complex64, np.complex128) \
            and g_obj.dtype == objects.dtype \
            and lit.dtype == objects.real.dtype and objects.flags.c_contiguous:
        from qora.ssb.kernels import ptycho_object_step

        ptycho_object_step(objects=objects, g=xp.ascontiguousarray(g_obj), lit=xp.ascontiguousarray(lit), peak=peak,
                           rate=rate, share=share)
        return
    objects -= rate * g_obj / ((1 - share) * lit + share * peak[:, None, None] + 1e-30)
    objects /= xp.maximum(xp.abs(objects), 1)


def passes_settled(state: PtychoState) -> int:
    """Passes done since the misfit settled, the settling pass counted (0 before it has): the pass after one that
    raised the misfit takes half a step, not another whole one."""
    settled = state.adam.get("settled_at")
    return 0 if settled is None else max(0, state.iteration - int(settled) + 1)


def _note_settling(state: PtychoState, settle: float) -> None:
    """Record the pass at which the misfit first fell by less than ``settle`` of the pass before (PtychoOptions)."""
    if "settled_at" not in state.adam and len(state.losses) >= 2 and \
            state.losses[-1] > (1 - settle) * state.losses[-2]:
        state.adam["settled_at"] = state.iteration


def planned_passes(state: PtychoState, options: PtychoOptions) -> int:
    """The run's length as now known: ``options.iterations``, else ``after_settling`` passes after the misfit
    settled (:data:`MAX_PASSES` while it has not), at most :data:`MAX_PASSES`."""
    if options.iterations is not None:
        return options.iterations
    settled = state.adam.get("settled_at")
    return MAX_PASSES if settled is None else min(MAX_PASSES, int(settled) + options.after_settling)


def _pass(problem: Problem, state: PtychoState, options: PtychoOptions, order, prop, batch: int, flags: dict) -> float:
    """One pass's batches in ``order``; returns their summed misfit (read once). On the GPU the whole batches after the
    first replay one CUDA graph of the step (:class:`qora.backend.graph.StepGraph`), the batch's positions copied
    into the graph's index array before each launch: a step is ~150 launches of small work (docs/ssb-methods.md,
    "The pass's launches"), and the graph launches them at once. The first batch runs as it is, so that the plans,
    the kernels and the step's state exist before the capture; a pass refining the scale or the spacing runs every
    batch as it is (their steps read a derivative back), and so does a step the capture refuses (the reason is kept
    in ``state.adam["graph"]`` and no later pass tries)."""
    xp = xp_of(state.probe)
    j = len(order)

    def step(index):
        return _step(problem, state, options, index, prop, **flags)

    whole = j - j % batch
    total = xp.zeros((), np.float64)  # the batches' float32 misfits summed in float64
    if xp is np or flags["scale"] or flags["spacing"] or whole < 2 * batch or "graph" in state.adam:
        for first in range(0, j, batch):
            total += step(order[first:first + batch])
        return float(total)
    from qora.backend.graph import GraphCaptureError, StepGraph

    index, misfit = xp.empty(batch, order.dtype), xp.zeros((), np.float64)
    total += step(order[:batch])

    def captured():
        misfit[...] = step(index)

    try:
        graph = StepGraph(captured)
    except GraphCaptureError as error:
        state.adam["graph"] = str(error)
        graph = None
    for first in range(batch, whole, batch) if graph is not None else ():
        index[...] = order[first:first + batch]
        graph.replay()
        total += misfit
    for first in range(whole if graph is not None else batch, j, batch):  # the rest as it is
        total += step(order[first:first + batch])
    return float(total)


def iterate(problem: Problem, state: PtychoState, options: PtychoOptions, *, free_bytes: int, progress=None,
            checkpoint=None) -> PtychoState:
    """Run passes ``state.iteration`` .. :func:`planned_passes` (a resumed state goes on where it stopped),
    updating ``state`` in place and returning it. ``progress`` (:mod:`qora.progress`) is told each pass with its
    misfit ("ptycho", with "loss", "s" and "max_shift_px"; the total the planned passes); its False stops after
    the current pass. ``checkpoint(state)`` is called after each pass (to save it)."""
    xp = xp_of(state.probe)
    j = len(problem.amplitudes)
    prop = propagator(current_grid(problem, state), xp, state.probe.dtype)  # a resumed state's spacing
    batch = batch_size(problem, state, options, free_bytes)
    total = float(xp.sum(problem.amplitudes.astype(np.float64) ** 2))
    start = state.adam.setdefault("start_positions", state.positions.copy())
    while state.iteration < planned_passes(state, options):
        t0 = time.perf_counter()
        # the pass's order sent once (a copy a batch from pageable memory waited for the device each time)
        order = xp.asarray(np.random.default_rng(options.seed + state.iteration).permutation(j))
        flags = {"probe": state.iteration >= options.probe_from,
                 "positions": state.iteration >= options.positions_from and options.position_rate > 0,
                 "scale": state.iteration >= options.scale_from and options.scale_rate > 0,
                 "spacing": (state.iteration >= options.spacing_from and bool(options.spacing_rate)
                             and state.objects.shape[0] > 1)}
        loss = _pass(problem, state, options, order, prop, batch, flags)
        if "slice_spacing" in state.adam:  # the spacing moved in this pass: the next pass's propagator
            prop = propagator(current_grid(problem, state), xp, state.probe.dtype)
        if state.iteration >= options.probe_from:
            state.probe = orthogonal_modes(state.probe)
            remove_ramp(problem, state)
        state.objects = kz_filter(state.objects, options.kz_filter, problem.grid.pixel,
                                  current_grid(problem, state).slice_spacing)
        state.iteration += 1
        state.losses.append(loss / total)
        _note_settling(state, options.settle)
        if checkpoint is not None:
            checkpoint(state)
        shift = float(xp.abs(state.positions - start).max())
        if not report(progress, "ptycho", state.iteration, planned_passes(state, options),
                      {"loss": loss / total, "s": time.perf_counter() - t0, "max_shift_px": shift}):
            break
    return state
