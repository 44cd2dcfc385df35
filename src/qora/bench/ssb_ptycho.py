"""``qora bench ssb-ptycho``: iterative multislice ptychography beside WDD on abTEM's SrTiO3, and its time per pass.

Quality (``quality/<set>/<edge>-edge/<method>``): the set's counts (``tests/ssb/fixtures/abtem_srtio3_ptycho_8a.npz``, made by
abTEM in its own environment: 300 kV, 25 mrad, C10 100 A, 20 x 20 steps of 0.195 A over one unit cell, 1e5
e/A^2, a detector reaching 3.0 alpha), the default chain from the counts alone (the detector's disk fitted with
the default ``intensity`` edge, as a user's run does, and with the ``amplitude`` edge, the model of abTEM's
aperture, soft in amplitude: docs/ssb.md; the default fit; then
:func:`qora.ssb.ptycho.reconstruct` with its defaults), and WDD of the same session and fit. Each summed phase is
scored by its Pearson correlation, inside the scanned unit cell on the object's grid, with the projected potential's
phase (sigma V, abTEM's) low-passed to a band, the image low-passed to the same band: 2 alpha / lambda (what the
bright field transfers: all WDD can hold), the object grid's Nyquist 1 / (2 pixel) (the detector's reach, 3.1
alpha here: all this model's grid can hold) and (alpha + the detector's half-angle) / lambda (what the patterns
record; beyond the grid's Nyquist along its axes, so the grid's band is the fair one). WDD's image (scan grid,
the periodic cell) is carried to the object's grid by its Fourier series.

Time (``pass/<positions>x<detector>/<S>s<K>m``): seconds per pass over a synthetic scan of that many positions
and detector pixels, S slices and K probe modes (a random weak object; the work per pass does not depend on it),
the median of ``repeats`` passes after a warm-up, and the backend's peak memory.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from qora.backend import resolve
from qora.bench.common import BenchResult

__all__ = ["run", "score", "depth_scores", "FIXTURE_8A", "FIXTURE_100A_MARKED"]

FIXTURES = Path(__file__).resolve().parents[3] / "tests" / "ssb" / "fixtures"
FIXTURE_8A = FIXTURES / "abtem_srtio3_ptycho_8a.npz"
FIXTURE_100A_MARKED = FIXTURES / "abtem_srtio3_ptycho_100a_marked.npz"


def _series_at(spectrum, frequencies, y, x, chunk: int = 256):
    """sum_f spectrum_f exp(2 pi i (fy y + fx x)) at the points (y, x) (A), real part."""
    out = np.empty(len(y))
    fy, fx = frequencies
    for a in range(0, len(y), chunk):
        phase = np.exp(2j * np.pi * (np.outer(y[a:a + chunk], fy) + np.outer(x[a:a + chunk], fx)))
        out[a:a + chunk] = (phase @ spectrum).real
    return out


def _band_limited(field, extent: float, band: float):
    """The periodic ``field`` (n, n) over ``extent`` (A) as (spectrum, frequencies) within |f| <= band (1/A)."""
    n = field.shape[0]
    f = np.fft.fftfreq(n, extent / n)
    fy, fx = np.meshgrid(f, f, indexing="ij")
    keep = np.hypot(fy, fx) <= band
    return np.fft.fft2(field)[keep] / n**2, (fy[keep], fx[keep])


def score(result, wdd, data, bands: dict) -> dict:
    """{band name: (r of the ptychographic phase, r of WDD)} inside the scanned cell (see the module)."""
    step, origin = float(data["scan_step"]), np.asarray(data["scan_origin"], float)
    rows, cols = data["counts"].shape[:2]
    inverse = np.linalg.inv(np.vstack([result.scan_map, [0, 0, 1]]))[:2]
    h, w = result.phase.shape
    yy, xx = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
    rc = inverse @ np.stack([yy.ravel(), xx.ravel(), np.ones(yy.size)])
    inside = (rc[0] >= 0) & (rc[0] <= rows - 1) & (rc[1] >= 0) & (rc[1] <= cols - 1)
    y, x = origin[0] + rc[0][inside] * step, origin[1] + rc[1][inside] * step
    # the ramp over the scanned cell is the probe's (a degeneracy of the model): out before scoring
    phase = result.phase
    design = np.stack([np.ones(inside.sum()), yy.ravel()[inside], xx.ravel()[inside]], 1)
    coef = np.linalg.lstsq(design, phase.ravel()[inside], rcond=None)[0]
    phase = phase - coef[1] * yy - coef[2] * xx
    ky = np.fft.fftfreq(h, result.grid.pixel)[:, None]
    kx = np.fft.fftfreq(w, result.grid.pixel)[None, :]
    truth_field = np.asarray(data["projected_phase"], np.float64)
    cell = float(data["cell"])
    out = {}
    for name, band in bands.items():
        ours = np.fft.ifft2(np.fft.fft2(phase) * (np.hypot(ky, kx) <= band)).real.ravel()[inside]
        truth = _series_at(*_band_limited(truth_field, cell, band), y, x)
        theirs = _series_at(*_band_limited(wdd, rows * step, band), y - origin[0], x - origin[1])
        out[name] = (float(np.corrcoef(ours, truth)[0, 1]), float(np.corrcoef(theirs, truth)[0, 1]))
    return out


def depth_scores(result, wdd, data, band: float) -> dict:
    """For a set with ``phase_by_depth`` (its groups' summed sigma V, edges ``group_edges_a`` from the entrance):
    {"ptycho": r[i][j], "wdd": r[j]}, r[i][j] the correlation (as :func:`score`, within ``band`` 1/A) of the slices
    of depth group i with the truth of group j, r[j] WDD's single image's with group j. A slice belongs to the group
    holding its centre's share of the depth, (s + 1/2) / S, against the groups' edges over the true thickness (the
    fitted thickness scales the slices, not the order of the depth)."""
    import dataclasses

    edges = np.asarray(data["group_edges_a"], float) / float(data["thickness"])
    slices = result.objects.shape[0]
    centre = (np.arange(slices) + 0.5) / slices
    truths = [dict(data, projected_phase=g) for g in np.asarray(data["phase_by_depth"])]
    ours, theirs = [], []
    for i in range(len(truths)):
        chosen = (centre >= edges[i]) & (centre < edges[i + 1])
        part = dataclasses.replace(result, objects=result.objects[chosen])
        ours.append([score(part, wdd, t, {"b": band})["b"][0] if chosen.any() else float("nan") for t in truths])
    theirs = [score(result, wdd, t, {"b": band})["b"][1] for t in truths]
    return {"ptycho": ours, "wdd": theirs}


def quality(result_table: BenchResult, be, path, *, iterations: int | None, echo, edge: str = "amplitude") -> dict:
    """The quality cases on one abTEM set (module docstring), the detector's disk fitted with ``edge``; returns
    {band: (ptycho r, wdd r)}."""
    from qora.ssb import Session, fit_detector, wavelength
    from qora.ssb import fit as fit_session
    from qora.ssb.ptycho import PtychoOptions, fit_start, reconstruct

    data = np.load(path)
    counts = np.asarray(data["counts"], np.float32)
    kv, alpha, step = float(data["kv"]), float(data["alpha_mrad"]), float(data["scan_step"])
    detector = fit_detector(counts, alpha, edge=edge)
    session = Session(counts, kv=kv, alpha_mrad=alpha, scan_step=step, detector=detector, backend=be)
    t = time.perf_counter()
    fit = fit_session(session)
    t_fit = time.perf_counter() - t
    t = time.perf_counter()
    wdd = session.image(fit_start(fit)["aberrations"], "wdd")
    t_wdd = time.perf_counter() - t
    t = time.perf_counter()
    result = reconstruct(counts, session, fit, options=PtychoOptions(iterations=iterations))
    t_ptycho = time.perf_counter() - t
    lam = wavelength(kv)
    reach = float(data["collection_half_angle_mrad"])
    bands = {"2alpha": 2 * alpha * 1e-3 / lam, "grid": 0.5 / result.grid.pixel,
             "alpha+detector": (alpha + reach) * 1e-3 / lam}
    scores = score(result, wdd, data, bands)
    name = f"{Path(path).stem}/{edge}-edge"
    start = {k: result.start[k] for k in ("slices", "modes", "thickness_a", "aberration_C10")}
    result_table.add(f"quality/{name}/ptycho", s=t_ptycho, fit_s=t_fit, passes=len(result.losses),
                     misfit=result.losses[-1], **{f"r_{b}": v[0] for b, v in scores.items()}, **start,
                     detector_mrad_per_pixel=detector.mrad_per_pixel)
    result_table.add(f"quality/{name}/wdd", s=t_wdd, **{f"r_{b}": v[1] for b, v in scores.items()})
    for band, (ours, theirs) in scores.items():
        echo(f"{name} band {band} ({bands[band]:.2f} 1/A): ptycho r {ours:.4f}, WDD r {theirs:.4f}")
    if "phase_by_depth" in data:
        depth = depth_scores(result, wdd, data, bands["2alpha"])
        for i, row in enumerate(depth["ptycho"]):
            result_table.add(f"quality/{name}/depth-group-{i}", **{f"r_truth_{j}": v for j, v in enumerate(row)},
                             r_wdd=depth["wdd"][i])
            echo(f"{name} depth group {i}: ptycho's slices r with each group's truth "
                 f"{', '.join(f'{v:.3f}' for v in row)}; WDD's image r with this group's truth {depth['wdd'][i]:.3f}")
    echo(f"{name}: ptycho {len(result.losses)} passes in {t_ptycho:.1f} s ({start}); WDD {t_wdd:.2f} s; "
         f"fit {t_fit:.1f} s")
    return scores


def pass_time(result_table: BenchResult, be, *, positions: int, detector: int, slices: int, modes: int,
              repeats: int, echo, batch: int | None = None) -> float:
    """Seconds per pass of the solver on a synthetic scan (module docstring); ``batch``: positions per step (None:
    the solver's default)."""
    from qora.backend.device import PeakMemory
    from qora.ssb.ptycho import Grid, Problem, PtychoOptions, PtychoState, batch_size, iterate

    xp = be.xp
    rng = np.random.default_rng(0)
    side = int(round(positions**0.5))
    grid = Grid(window=detector, pixel=0.1, wavelength=0.0197, slice_spacing=10.0, band=0.5 / 0.1)
    step = 2.0
    corners = np.stack(np.meshgrid(np.arange(side) * step, np.arange(side) * step, indexing="ij"), -1).reshape(-1, 2)
    corners = corners + 2 + rng.random(corners.shape) * 0.5
    shape = (int(corners[:, 0].max()) + detector + 4, int(corners[:, 1].max()) + detector + 4)
    amplitudes = xp.asarray(rng.random((len(corners), detector, detector), np.float32))
    problem = Problem(amplitudes=amplitudes, positions=xp.asarray(corners), object_shape=shape, grid=grid)
    objects = xp.asarray(np.exp(0.1j * rng.standard_normal((slices,) + shape)).astype(np.complex64))
    probe = xp.asarray((rng.standard_normal((modes, detector, detector)) + 0j).astype(np.complex64))
    state = PtychoState(objects=objects, probe=probe, positions=xp.asarray(corners, np.float32))
    options = PtychoOptions(iterations=1, probe_from=0, positions_from=0, batch=batch)
    iterate(problem, state, options, free_bytes=8 << 30)  # warm: plans, kernels
    times = []
    with PeakMemory(be) as peak:
        for k in range(repeats):
            be.synchronize()
            t = time.perf_counter()
            iterate(problem, state, replace(options, iterations=state.iteration + 1), free_bytes=8 << 30)
            be.synchronize()
            times.append(time.perf_counter() - t)
    seconds = float(np.median(times))
    graph = "" if not be.is_cuda else state.adam.get("graph", "the step replayed as a CUDA graph")
    per_step = batch_size(problem, state, options, 8 << 30)
    result_table.add(f"pass/{len(corners)}x{detector}/{slices}s{modes}m" + ("" if batch is None else f"/b{batch}"),
                     s=seconds, positions_per_s=len(corners) / seconds, peak_bytes=peak.peak_bytes, graph=graph,
                     batch=per_step)
    echo(f"one pass, {len(corners)} positions of {detector}^2 pixels, {slices} slices, {modes} modes, batches of "
         f"{per_step}: {seconds:.3f} s "
         f"({len(corners) / seconds:,.0f} positions/s), peak {peak.peak_bytes / 2**30:.2f} GiB" + (f"; {graph}" if graph
                                                                                                   else ""))
    return seconds


def run(*, backend="auto", data=(FIXTURE_8A, FIXTURE_100A_MARKED), iterations: int | None = None,
        positions: int | None = None, detector: int | None = None, slices: int | None = None, modes: int | None = None,
        repeats: int = 3, edges=None, batches=(None,), write: bool = True, echo=print) -> BenchResult:
    """The quality cases on each set in ``data`` with the detector's disk fitted by each of ``edges`` ("intensity":
    the default a user's run takes; "amplitude": the edge model of abTEM's aperture; default both on the 8 A set,
    the default alone on the others: the thick set's solve takes minutes on two cores), and one time-per-pass case
    (default: 128^2 positions of 128^2 pixels, 10 slices, 4 modes on CUDA, the issue's size; 16^2 of 64^2, 4 slices,
    2 modes on the CPU)."""
    be = resolve(backend)
    result = BenchResult(f"ssb-ptycho-{be.name}", be.name, be.device_facts().as_dict(), columns=("s",))
    for path in data:
        for edge in edges or (("intensity", "amplitude") if Path(path) == FIXTURE_8A else ("intensity",)):
            quality(result, be, path, iterations=iterations, echo=echo, edge=edge)
    cuda = be.is_cuda
    for batch in batches:  # None: the solver's default
        pass_time(result, be, positions=positions or (128**2 if cuda else 16**2),
                  detector=detector or (128 if cuda else 64), slices=slices or (10 if cuda else 4),
                  modes=modes or (4 if cuda else 2), repeats=repeats, echo=echo, batch=batch)
    if write:
        echo(f"result written to {result.write()}")
    return result
