"""qora.ssb.ptycho: the multislice model against our simulator and its gradient against finite differences and its
adjoint (dot test), the start's frames, the solver on a simulated scan, the result file, the one-call chain."""

from __future__ import annotations

import numpy as np
import pytest

from qora.io.errors import InputError
from qora.ssb.optics import Aberrations, wavelength
from qora.ssb.ptycho import (Grid, Problem, PtychoOptions, PtychoResult, forward, initial_state, iterate,
                             measured_problem)
from qora.ssb.ptycho.model import backward, exit_waves, loss_and_gradients
from qora.ssb.ptycho.run import fit_start, reconstruct
from qora.ssb.ptycho.start import default_slices, oriented_fft_order
from qora.ssb.simulation import amorphous_slices, simulate

KV, ALPHA, PIXEL, WINDOW = 300.0, 25.0, 0.15, 32


def _random_case(rng, slices=3, modes=2, batch=5, n=16, shape=(40, 44)):
    grid = Grid(window=n, pixel=0.2, wavelength=0.0197, slice_spacing=5.0, band=2.0)
    objects = np.exp(1j * 0.3 * rng.standard_normal((slices,) + shape) - 0.05 * rng.random((slices,) + shape))
    probe = rng.standard_normal((modes, n, n)) + 1j * rng.standard_normal((modes, n, n))
    positions = rng.random((batch, 2)) * np.array([shape[0] - n - 1, shape[1] - n - 1])
    return grid, objects, probe, positions


def test_the_gradients_equal_finite_differences():
    """Every Wirtinger gradient (slices, probe modes) and the positions' derivative against central differences of
    the misfit, float64, along random directions."""
    rng = np.random.default_rng(0)
    grid, objects, probe, positions = _random_case(rng)
    amplitudes = np.sqrt(forward(objects, probe * 1.1, positions + 0.3, grid).intensity)
    loss, g_obj, g_probe, g_pos = loss_and_gradients(objects, probe, positions, amplitudes, grid,
                                                     want_positions=True)
    misfit = lambda o, p, x: loss_and_gradients(o, p, x, amplitudes, grid)[0]  # noqa: E731
    eps = 1e-6
    for _ in range(2):
        d = rng.standard_normal(objects.shape) + 1j * rng.standard_normal(objects.shape)
        fd = (misfit(objects + eps * d, probe, positions) - misfit(objects - eps * d, probe, positions)) / (2 * eps)
        assert fd == pytest.approx(2 * np.real(np.vdot(g_obj, d)), rel=1e-7)
        d = rng.standard_normal(probe.shape) + 1j * rng.standard_normal(probe.shape)
        fd = (misfit(objects, probe + eps * d, positions) - misfit(objects, probe - eps * d, positions)) / (2 * eps)
        assert fd == pytest.approx(2 * np.real(np.vdot(g_probe, d)), rel=1e-7)
    d = 0.1 * rng.standard_normal(positions.shape)
    fd = (misfit(objects, probe, positions + eps * d) - misfit(objects, probe, positions - eps * d)) / (2 * eps)
    assert fd == pytest.approx(float((g_pos * d).sum()), rel=1e-6)
    assert loss > 0


def test_the_spacing_derivative_equals_finite_differences():
    """dL/d dz, the misfit's derivative with respect to the slices' spacing, against a central difference (float64,
    three slices, the band's cut included)."""
    import dataclasses

    rng = np.random.default_rng(4)
    grid, objects, probe, positions = _random_case(rng)
    amplitudes = np.abs(rng.standard_normal((len(positions), grid.window, grid.window))) * 3
    derivatives = {}
    loss_and_gradients(objects, probe, positions, amplitudes, grid, derivatives=derivatives)
    h = 1e-4
    up, down = (loss_and_gradients(objects, probe, positions, amplitudes,
                                   dataclasses.replace(grid, slice_spacing=grid.slice_spacing + d))[0] for d in (h, -h))
    assert derivatives["slice_spacing"] == pytest.approx((up - down) / (2 * h), rel=1e-6)


def test_the_backward_pass_is_the_adjoint_of_the_linearised_model():
    """Dot test: the exit wave is holomorphic in each slice and in the probe, so its derivative along dO is the
    central difference of a complex step, and <J dO, y> = <dO, J^H y> with J^H the backward pass."""
    rng = np.random.default_rng(1)
    grid, objects, probe, positions = _random_case(rng)
    b = forward(objects, probe, positions, grid)
    y = rng.standard_normal(b.far.shape) + 1j * rng.standard_normal(b.far.shape)
    g_obj, g_probe, _ = backward(b, y, objects, grid)
    t = 1e-4
    d_obj = rng.standard_normal(objects.shape) + 1j * rng.standard_normal(objects.shape)
    j_obj = (exit_waves(objects + t * d_obj, probe, positions, grid)
             - exit_waves(objects - t * d_obj, probe, positions, grid)) / (2 * t)
    # three slices: the exit wave is cubic in t along dO, so the central difference errs by t^2 (1e-8 relative)
    assert np.vdot(j_obj, y) == pytest.approx(np.vdot(d_obj, g_obj), rel=1e-6)
    d_probe = rng.standard_normal(probe.shape) + 1j * rng.standard_normal(probe.shape)
    j_probe = exit_waves(objects, probe + d_probe, positions, grid) - exit_waves(objects, probe, positions, grid)
    assert np.vdot(j_probe, y) == pytest.approx(np.vdot(d_probe, g_probe), rel=1e-10)  # linear in the probe


@pytest.fixture(scope="module")
def film():
    """Our simulator's four-slice film, 40 A thick, noise-free."""
    slices = amorphous_slices((64, 64), PIXEL, slices=4, atoms_per_a2=0.1, seed=3)
    ab = Aberrations(C10=80.0)
    sim = simulate(slices, pixel=PIXEL, stride=4, window=WINDOW, kv=KV, alpha_mrad=ALPHA, aberrations=ab,
                   thickness=40.0)
    return sim, slices, ab


def _truth_on_object_grid(slices, problem, field):
    """The simulator's periodic slices on the problem's object grid: its first window's corner is the field's
    pixel -WINDOW // 2 (the probe centred on the field's pixel 0)."""
    shape, (first_row, first_col) = problem.object_shape, np.asarray(problem.positions).min(0).astype(int)
    y = (np.arange(shape[0]) - first_row - WINDOW // 2) % field
    x = (np.arange(shape[1]) - first_col - WINDOW // 2) % field
    return np.exp(1j * slices[:, y[:, None], x[None, :]])


def test_the_model_equals_our_simulator(film):
    """The forward model with the true slices and the start's probe gives the simulator's patterns (the start's
    frames: the window about the disk's centre in FFT order, the positions, C10 moved to the first slice)."""
    sim, slices, ab = film
    mrad = 1e3 * wavelength(KV) / (WINDOW * PIXEL)
    problem = measured_problem(sim.data, kv=KV, scan_step=sim.scan_step, rotation=0.0, center=(16, 16),
                               mrad_per_pixel=mrad, slices=4, thickness=40.0, band=np.inf, dtype=np.float64)
    assert problem.grid.pixel == pytest.approx(PIXEL) and problem.grid.slice_spacing == 10.0
    state = initial_state(problem, aberrations=ab, alpha_mrad=ALPHA, thickness=40.0, slices=4, aperture="model",
                          dtype=np.complex128)
    objects = _truth_on_object_grid(slices, problem, 64)
    ours = forward(objects, state.probe, problem.positions, problem.grid).intensity
    measured = problem.amplitudes**2
    np.testing.assert_allclose(ours, measured, rtol=0, atol=1e-10 * measured.max())
    assert ours.sum() == pytest.approx(measured.sum(), rel=1e-12)


def test_the_orientation_is_applied_as_the_fits_frame():
    """A pattern lit at the recorded k = (3, 5) pixels from the centre lands at M k in FFT order, M of the named
    orientation; identity is the plain ifftshift."""
    pattern = np.zeros((16, 16))
    pattern[8 + 3, 8 + 5] = 1.0
    for name, m in (("identity", ((1, 0), (0, 1))), ("transpose", ((0, 1), (1, 0))), ("rot90", ((0, -1), (1, 0))),
                    ("flip-rows", ((-1, 0), (0, 1)))):
        out = oriented_fft_order(pattern, name)
        ky, kx = np.array(m) @ np.array([3, 5])
        assert out[ky % 16, kx % 16] == 1.0 and out.sum() == 1.0, name


def test_the_solver_recovers_a_film_from_the_true_probe(film):
    """From the true probe and a flat start, a few passes bring the summed phase to the film's projected phase."""
    sim, slices, ab = film
    mrad = 1e3 * wavelength(KV) / (WINDOW * PIXEL)
    problem = measured_problem(sim.data, kv=KV, scan_step=sim.scan_step, rotation=0.0, center=(16, 16),
                               mrad_per_pixel=mrad, slices=1)
    state = initial_state(problem, aberrations=Aberrations(C10=80.0), alpha_mrad=ALPHA, slices=1)
    seen = []
    iterate(problem, state, PtychoOptions(iterations=6, probe_from=100, positions_from=100, scale_from=100),
            free_bytes=1 << 30, progress=lambda stage, done, total, m: seen.append(m["loss"]))
    truth = np.angle(_truth_on_object_grid(slices, problem, 64)).sum(0)
    first = int(np.asarray(problem.positions).min()) + WINDOW // 2
    inner = (slice(first, first + 56),) * 2
    r = np.corrcoef(np.angle(state.objects).sum(0)[inner].ravel(), truth[inner].ravel())[0, 1]
    assert r > 0.9, r
    assert seen[-1] < 0.5 * seen[0] and len(seen) == 6


def test_the_run_ends_a_set_number_of_passes_after_the_misfit_settles(film):
    """Without ``iterations`` the rates stay whole until a pass lowers the misfit by less than ``settle`` of the
    one before; the run then ends ``after_settling`` passes later, its rates divided by 1 + rate_decay n meanwhile."""
    from qora.ssb.ptycho.solver import MAX_PASSES, PtychoState, passes_settled, planned_passes

    state = PtychoState(objects=None, probe=None, positions=None, iteration=3, losses=[1.0, 0.5, 0.4999])
    options = PtychoOptions(after_settling=5)
    assert planned_passes(state, options) == MAX_PASSES and passes_settled(state) == 0
    sim, _, _ = film
    mrad = 1e3 * wavelength(KV) / (WINDOW * PIXEL)
    problem = measured_problem(sim.data, kv=KV, scan_step=sim.scan_step, rotation=0.0, center=(16, 16),
                               mrad_per_pixel=mrad, slices=1)
    state = initial_state(problem, aberrations=Aberrations(C10=80.0), alpha_mrad=ALPHA, slices=1)
    iterate(problem, state, PtychoOptions(after_settling=2, settle=0.5), free_bytes=1 << 30)
    # a pass lowering the misfit by less than half settles it: the second at the latest, whatever the data
    settled = state.adam["settled_at"]
    assert settled >= 2 and state.iteration == settled + 2 == len(state.losses)
    assert state.losses[settled - 1] > 0.5 * state.losses[settled - 2]
    assert passes_settled(state) == 3 and planned_passes(state, PtychoOptions()) == settled + 40


def test_the_focal_spread_modes_are_the_spread_probes_principal_modes():
    """focal_spread_modes: orthogonal, strongest first, powers summing to 1; from a vanishing spread the first
    mode is the coherent probe (all the power); from a real one the K modes hold all but the discarded share of
    the averaged probes' density (its trace against the 2K + 1 probes')."""
    from qora.ssb.ptycho.start import _probe_mode, focal_spread_modes

    grid = Grid(window=32, pixel=PIXEL, wavelength=wavelength(KV), slice_spacing=0.0)
    ab = Aberrations(C10=80.0)
    coherent = _probe_mode(grid, ab, ALPHA, np)
    tiny = focal_spread_modes(grid, ab, ALPHA, 2, 1e-4)
    assert np.sum(np.abs(tiny[0]) ** 2) > 1 - 1e-9 and abs(np.vdot(tiny[0], coherent)) ** 2 > 1 - 1e-9
    modes = focal_spread_modes(grid, ab, ALPHA, 3, 30.0)
    gram = np.einsum("kij,lij->kl", modes.conj(), modes)
    np.testing.assert_allclose(gram, np.diag(np.diag(gram)).real, atol=1e-12)
    powers = np.diag(gram).real
    assert powers.sum() == pytest.approx(1.0) and np.all(np.diff(powers) < 0) and powers[1] > 0.1
    probes = np.asarray([_probe_mode(grid, Aberrations(C10=80.0 + d), ALPHA, np) for d in np.linspace(-30, 30, 7)])
    flat = probes.reshape(7, -1)
    basis = (modes / np.sqrt(powers)[:, None, None]).reshape(3, -1)
    kept = np.sum(np.abs(flat.conj() @ basis.T) ** 2) / 7  # the averaged density's trace within the modes' span
    assert kept > 0.99, kept


def test_focal_spread_modes_gain_on_a_partly_coherent_film():
    """Our simulator's film scanned by a probe whose focus spreads (the patterns at C10 50, 80, 110 A averaged,
    Poisson counts): two modes started from the default spread image it better than one, where modes started as
    the first times x and y (before 2026-12-05) scored 0.57 against one mode's 0.90."""
    slices = amorphous_slices((96, 96), PIXEL, slices=1, atoms_per_a2=0.1, seed=3)
    data = np.mean([simulate(slices, pixel=PIXEL, stride=3, window=WINDOW, kv=KV, alpha_mrad=ALPHA,
                             aberrations=Aberrations(C10=c)).data for c in (50.0, 80.0, 110.0)], axis=0)
    counts = np.random.default_rng(1).poisson(data / data.mean() * 2e5 / WINDOW**2).astype(np.float32)
    mrad = 1e3 * wavelength(KV) / (WINDOW * PIXEL)
    problem = measured_problem(counts, kv=KV, scan_step=3 * PIXEL, rotation=0.0, center=(16, 16),
                               mrad_per_pixel=mrad, slices=1)
    first = int(np.asarray(problem.positions).min()) + WINDOW // 2
    inner = (slice(first, first + 3 * (counts.shape[0] - 1)),) * 2
    truth = _truth_on_object_grid(slices[None] if slices.ndim == 2 else slices, problem, 96)
    scores = []
    for modes in (1, 2):
        state = initial_state(problem, aberrations=Aberrations(C10=80.0), alpha_mrad=ALPHA, slices=1, modes=modes)
        iterate(problem, state, PtychoOptions(), free_bytes=1 << 30)
        scores.append(np.corrcoef(np.angle(state.objects).sum(0)[inner].ravel(),
                                  np.angle(truth).sum(0)[inner].ravel())[0, 1])
    assert scores[1] > scores[0] + 0.01 and scores[1] > 0.91, scores


def test_the_positions_are_corrected(film):
    """The film's scan given with positions off by 1 px RMS (random, 0.15 A): the solver's defaults bring them to
    within a third of that (measured 1.36 -> 0.30 px; the old start at pass 20 and 0.02 px a step: 0.96), the
    common shift left out (it is the object's); windows beyond the object's grid are refused."""
    sim, _, _ = film
    mrad = 1e3 * wavelength(KV) / (WINDOW * PIXEL)
    problem = measured_problem(sim.data, kv=KV, scan_step=sim.scan_step, rotation=0.0, center=(16, 16),
                               mrad_per_pixel=mrad, slices=1)
    truth = np.asarray(problem.positions).copy()
    high = np.array(problem.object_shape) - WINDOW - 1
    problem.positions = np.clip(truth + np.random.default_rng(5).normal(0, 1.0, truth.shape), 0, high)

    def rms(positions):
        error = np.asarray(positions) - truth
        return float(np.sqrt(((error - error.mean(0)) ** 2).sum(1).mean()))

    state = initial_state(problem, aberrations=Aberrations(C10=80.0), alpha_mrad=ALPHA, slices=1)
    iterate(problem, state, PtychoOptions(), free_bytes=1 << 30)
    assert rms(state.positions) < rms(problem.positions) / 3, (rms(problem.positions), rms(state.positions))
    with pytest.raises(InputError, match="inside the object's grid"):
        Problem(amplitudes=problem.amplitudes, positions=problem.positions - 5.0, object_shape=problem.object_shape,
                grid=problem.grid)


@pytest.mark.parametrize("refused", [False, True])
def test_a_pass_replayed_as_a_graph_is_the_pass_run_as_it_is(film, monkeypatch, refused):
    """The GPU's pass (the first batch as it is, the whole batches after it as replays of one captured step, the
    positions copied into its index array, the partial batch last) takes the same steps as the plain pass. Here on
    the host: the arrays' module stands in for CuPy and the graph calls the captured step at each replay; a capture
    the graph refuses runs the rest of the pass as it is and is remembered."""
    import types

    from qora.backend import graph as graphs
    from qora.ssb.ptycho import solver

    sim, _, _ = film
    mrad = 1e3 * wavelength(KV) / (WINDOW * PIXEL)
    problem = measured_problem(sim.data[:, :15], kv=KV, scan_step=sim.scan_step, rotation=0.0, center=(16, 16),
                               mrad_per_pixel=mrad, slices=2, thickness=20.0)  # 240 positions: a partial batch
    options = PtychoOptions(iterations=6, batch=16, probe_from=1, positions_from=2)
    states = []
    for replayed in (False, True):
        if replayed:
            host = types.SimpleNamespace(**{name: getattr(np, name) for name in dir(np) if not name.startswith("__")})
            monkeypatch.setattr(solver, "xp_of", lambda *a: host)

            class Graph:
                def __init__(self, step):
                    if refused:
                        raise graphs.GraphCaptureError("refused")
                    self.step, self.replays = step, 0

                def replay(self):
                    self.step()

            monkeypatch.setattr(graphs, "StepGraph", Graph)
        state = initial_state(problem, aberrations=Aberrations(C10=80.0), alpha_mrad=ALPHA, thickness=20.0, slices=2)
        iterate(problem, state, options, free_bytes=1 << 30)
        states.append(state)
    plain, graphed = states
    np.testing.assert_array_equal(graphed.objects, plain.objects)
    np.testing.assert_array_equal(graphed.positions, plain.positions)
    np.testing.assert_allclose(graphed.losses, plain.losses, rtol=1e-12)
    assert ("graph" in graphed.adam) == refused and "graph" not in plain.adam


def test_the_result_file_round_trips(tmp_path, film):
    sim, slices, ab = film
    rng = np.random.default_rng(2)
    grid = Grid(window=8, pixel=0.1, wavelength=0.02, slice_spacing=5.0, band=3.0)
    result = PtychoResult(objects=np.exp(1j * rng.random((2, 20, 20))), probe=rng.random((2, 8, 8)) + 0j,
                          positions=rng.random((4, 2)), start_positions=rng.random((4, 2)), losses=[0.2, 0.1],
                          grid=grid, start={"slices": 2, "branch": "incoherent"}, scan_map=np.eye(2, 3))
    back = PtychoResult.load(result.save(tmp_path / "r.h5"))
    np.testing.assert_array_equal(back.objects, result.objects)
    assert back.grid == grid and back.start == result.start and back.losses == result.losses
    np.testing.assert_allclose(back.phase, np.angle(result.objects).sum(0))


def test_the_chain_takes_everything_from_the_fit(film):
    """reconstruct() from a fit's JSON object: slices from its thickness, the rotation, the orientation, the
    aberrations of its better branch (C10 the mid-plane's); the result says what it took."""
    from qora.ssb import Session

    sim, slices, ab = film
    session = Session(sim.data, kv=KV, alpha_mrad=ALPHA, scan_step=sim.scan_step)
    fit = {"rotation_rad": 0.0, "orientation": {"orientation": "identity"}, "better": "standard",
           "standard": {"parameters": {"C10": 80.0, "C12a": 0.0, "C12b": 0.0}},
           "incoherent": {"parameters": {"C10": 80.0, "thickness": 40.0}}}
    start = fit_start(fit)
    assert start["thickness"] == 40.0 and default_slices(40.0) == 4
    result = reconstruct(sim.data, session, fit, options=PtychoOptions(iterations=2), modes=2)
    assert result.objects.shape[0] == 4 and result.probe.shape == (2, WINDOW, WINDOW)
    assert result.start["slices"] == 4 and result.start["aberration_C10"] == 80.0 and len(result.losses) == 2
    assert result.phase_on_scan(sim.data.shape[:2]).shape == sim.data.shape[:2]


def test_bad_inputs_are_refused(film):
    sim, _, _ = film
    with pytest.raises(InputError, match="window must be even"):
        measured_problem(sim.data, kv=KV, scan_step=1.0, rotation=0.0, center=(16, 16), mrad_per_pixel=1.0, window=31)
    bad = sim.data.copy()
    bad[0, 0, 3, 3] = np.nan
    with pytest.raises(InputError, match="finite"):
        measured_problem(bad, kv=KV, scan_step=1.0, rotation=0.0, center=(16, 16), mrad_per_pixel=1.0)
    with pytest.raises(InputError, match="not a result of qora ssb fit"):
        fit_start({"standard": {}})
    with pytest.raises(InputError):
        PtychoOptions(regularization=2.0)


def test_the_aperture_is_read_from_the_scan():
    """A vacuum scan of an aperture soft in amplitude (abTEM's: a one-pixel ramp about 9.3 px), counts scaled,
    with a specimen's dark-field ring at 3% of the level 4 px beyond the disk: the measured modulus is the ramp
    (the ring left out), where the aperture drawn at an angle per pixel 1.2% off (the intensity edge's reading of
    such a ramp) misses the edge's pixels."""
    from qora.ssb.ptycho.start import measured_aperture

    n, radius = 32, 9.3
    f = np.fft.fftfreq(n, 1.0 / n)
    r = np.hypot(f[:, None], f[None, :])
    ramp = np.clip(radius + 0.5 - r, 0.0, 1.0)
    ring = 0.03 * (np.abs(r - radius - 4) < 0.5)
    counts = 250.0 * np.tile(ramp**2 + ring, (6, 1, 1))
    measured = measured_aperture(np.sqrt(counts), radius)
    np.testing.assert_allclose(measured, ramp, atol=1e-12)
    drawn = (r <= radius / 1.012).astype(float)  # the model's aperture, hard, at the wrong calibration
    assert np.abs(drawn - ramp).max() > 0.5
    with pytest.raises(InputError, match="dark within the bright-field disk"):
        measured_aperture(np.zeros((2, n, n)), radius)


def _default_chain_start(path):
    """An abTEM set's counts through a user's default path up to the solver: the disk's default edge, the session,
    the default fit and WDD's image of it; (data, counts, session, fit, wdd, the 2 alpha band in 1/A)."""
    from qora.ssb import Session, fit, fit_detector

    data = np.load(path)
    counts = np.asarray(data["counts"], np.float32)
    alpha = float(data["alpha_mrad"])
    session = Session(counts, kv=float(data["kv"]), alpha_mrad=alpha, scan_step=float(data["scan_step"]),
                      detector=fit_detector(counts, alpha))
    result = fit(session)
    wdd = session.image(fit_start(result)["aberrations"], "wdd")
    return data, counts, session, result, wdd, 2 * alpha * 1e-3 / float(data["wavelength"])


def test_the_default_chain_beats_wdd_on_abtems_crystal():
    """abTEM's SrTiO3 [001], 7.8 A, 1e5 e/A^2 (tests/ssb/fixtures/abtem_srtio3_ptycho_8a.npz) through the chain a
    user's run takes: the disk's default (intensity) edge, the default fit, then 20 passes. Its summed phase
    correlates with the projected potential in the 2 alpha band at 0.95 or more and above WDD's image of the same
    fit; with the aperture drawn from the calibration instead (1.2% off there) it does not: the measured aperture
    is what makes the default right."""
    from qora.bench.ssb_ptycho import FIXTURE_8A, score

    data, counts, session, result, wdd, two_alpha = _default_chain_start(FIXTURE_8A)
    band = {"2alpha": two_alpha}
    scores = {}
    for aperture in ("measured", "model"):
        ptycho = reconstruct(counts, session, result, options=PtychoOptions(iterations=20), aperture=aperture)
        scores[aperture] = score(ptycho, wdd, data, band)["2alpha"]
    ours, theirs = scores["measured"]
    assert ours >= 0.95 and ours > theirs, scores
    assert scores["model"][0] < theirs, scores


def test_the_default_chain_resolves_a_marked_crystals_depth():
    """abTEM's 101.5 A SrTiO3 with a Sr column emptied over the entrance third and a Ti over the exit third
    (tests/ssb/fixtures/abtem_srtio3_ptycho_100a_marked.npz) through the default chain, 30 passes: the summed phase
    correlates at 0.95 or more with the projected potential (2 alpha band), far above WDD's image; the entrance
    and middle thirds' slices each match their own third's truth best, and every third's slices match their own
    truth better than WDD's single image does."""
    from qora.bench.ssb_ptycho import FIXTURE_100A_MARKED, depth_scores, score

    data, counts, session, result, wdd, band = _default_chain_start(FIXTURE_100A_MARKED)
    ptycho = reconstruct(counts, session, result, options=PtychoOptions(iterations=30))
    ours, theirs = score(ptycho, wdd, data, {"b": band})["b"]
    assert ours >= 0.95 and theirs < 0.8, (ours, theirs)
    depth = depth_scores(ptycho, wdd, data, band)
    for group in (0, 1):
        assert int(np.argmax(depth["ptycho"][group])) == group, depth
    for group in range(3):
        assert depth["ptycho"][group][group] > depth["wdd"][group] + 0.2, depth


def test_the_model_equals_abtems_multislice():
    """abTEM 1.0.11's own probe, transmission functions and exit intensities (tests/ssb/fixtures/
    make_abtem_ptycho.py, 'forward': 4 slices of SrTiO3, probes at 4 positions, three between pixels), through our
    forward model with abTEM's band-limited propagator: abTEM propagates after the last slice too, which multiplies
    the far field by its aperture B, so ours times B^2 is compared."""
    from pathlib import Path

    ref = np.load(Path(__file__).parent / "fixtures" / "abtem_ptycho_forward_reference.npz")
    n, dx, lam = int(ref["wave_gpts"]), float(ref["wave_sampling"]), float(ref["wavelength"])
    dz = float(ref["slice_thicknesses"][0])
    assert np.allclose(ref["slice_thicknesses"], dz)
    grid = Grid(window=n, pixel=dx, wavelength=lam, slice_spacing=dz)
    ky, kx = grid.frequencies()
    k = np.hypot(ky, kx)
    kc, w = float(ref["antialias_cutoff_per_a"]), float(ref["antialias_taper_per_a"])
    aperture = np.where(k <= kc - w, 1.0, np.where(k < kc, 0.5 * (1 + np.cos(np.pi * (k - kc + w) / w)), 0.0))
    prop = np.exp(-1j * np.pi * lam * dz * k**2) * aperture
    probe = np.fft.ifft2(ref["probe_fft"])[None]
    objects = np.tile(np.fft.ifft2(ref["transmission_fft"]), (1, 2, 2))  # the periodic cell, twice each way
    positions = ref["positions_yx"] / dx
    assert np.any(positions % 1 > 0.01)  # sub-pixel shifts are checked too
    ours = forward(objects, probe, positions, grid, prop=prop).intensity * n**2 * aperture**2
    theirs = np.fft.ifftshift(ref["intensities"], axes=(-2, -1))
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-10 * theirs.max())


def test_the_command_runs_the_chain_with_checkpoints(tmp_path, film):
    """`qora ssb ptycho FILE --fit FIT --out --plot --checkpoint`, then `--resume` from the checkpoint: the passes
    go on where they stopped (the misfit list grows) and the result says what came from the fit."""
    import json

    from click.testing import CliRunner

    from qora.cli import cli
    from qora.ssb import write_dataset

    sim, _, _ = film
    data = tmp_path / "film.h5"
    write_dataset(data, sim.data, kv=KV, alpha_mrad=ALPHA, scan_step=sim.scan_step)
    fit = tmp_path / "fit.json"
    fit.write_text(json.dumps({"rotation_rad": 0.0, "rotation_deg": 0.0, "orientation": {"orientation": "identity"},
                               "better": "standard", "standard": {"parameters": {"C10": 80.0}},
                               "incoherent": {"parameters": {"C10": 80.0, "thickness": 20.0}}}))
    out, plot, state = tmp_path / "r.h5", tmp_path / "r.png", tmp_path / "state.npz"
    run = CliRunner().invoke(cli, ["ssb", "ptycho", str(data), "--fit", str(fit), "--iterations", "2", "--out",
                                   str(out), "--plot", str(plot), "--checkpoint", str(state), "--quiet",
                                   "--backend", "cpu", "--probe-aperture", "model"])
    assert run.exit_code == 0, run.output
    assert "2 slice(s) of 10.0 A" in run.output and "in 2 passes" in run.output
    first = PtychoResult.load(out)
    assert plot.read_bytes()[:4] == b"\x89PNG" and first.start["thickness_a"] == 20.0
    assert first.start["aperture"] == "model"
    run = CliRunner().invoke(cli, ["ssb", "ptycho", str(data), "--fit", str(fit), "--iterations", "3", "--resume",
                                   str(state), "--out", str(out), "--quiet", "--backend", "cpu"])
    assert run.exit_code == 0, run.output
    result = PtychoResult.load(out)
    assert len(result.losses) == 3 and result.start["iterations"] == 3
    bad = tmp_path / "bad.npz"
    np.savez(bad, x=np.zeros(2))
    run = CliRunner().invoke(cli, ["ssb", "ptycho", str(data), "--fit", str(fit), "--resume", str(bad), "--out",
                                   str(out), "--quiet", "--backend", "cpu"])
    assert run.exit_code != 0 and "not a ptychography checkpoint" in run.output


def test_a_checkpoint_round_trips_the_solver_state(tmp_path, film):
    """save_state / load_state keep the unknowns, the pass count, the misfits and Adam's memory (the positions'
    moments as arrays, the scale's as numbers), so a resumed run goes on as the uninterrupted one would."""
    from qora.ssb.ptycho import load_state, save_state

    sim, _, ab = film
    mrad = 1e3 * wavelength(KV) / (WINDOW * PIXEL)
    problem = measured_problem(sim.data, kv=KV, scan_step=sim.scan_step, rotation=0.0, center=(16, 16),
                               mrad_per_pixel=mrad, slices=1)
    options = PtychoOptions(iterations=2, positions_from=1, scale_from=1, scale_rate=1e-4)
    state = initial_state(problem, aberrations=ab, alpha_mrad=ALPHA, slices=1)
    iterate(problem, state, options, free_bytes=1 << 30)
    back = load_state(save_state(tmp_path / "s.npz", state))
    np.testing.assert_array_equal(back.objects, state.objects)
    np.testing.assert_array_equal(back.positions, state.positions)
    assert back.iteration == 2 and back.losses == state.losses
    assert back.adam["scale_moments"] == state.adam["scale_moments"] and back.adam["scale"] == state.adam["scale"]
    np.testing.assert_array_equal(back.adam["positions"]["m"], state.adam["positions"]["m"])
    more = PtychoOptions(iterations=3, positions_from=1, scale_from=1, scale_rate=1e-4)
    iterate(problem, state, more, free_bytes=1 << 30)
    iterate(problem, back, more, free_bytes=1 << 30)
    np.testing.assert_array_equal(back.objects, state.objects)  # the resumed run is the uninterrupted one
