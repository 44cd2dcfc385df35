"""``qora bench holo``: holography stage times, and ODTbrain on the same rotation data.

CPU (``--backend cpu``):

- stage times of the reference case (scanning, 49 illuminations, the 3 um bead) at
  128^3 and 256^3: field extraction (samples and backgrounds), ratio, Rytov,
  Ewald mapping, Gerchberg-Papoulis (50 iterations, R2C and C2C), FISTA-TV (128^3);
- against ODTbrain's ``backpropagate_3d`` (Rytov, its non-negativity fill; run by the
  peers' interpreter) on the same noisy rotation-geometry field ratios of a cell-like
  phantom (a cell, its nucleus and three organelles) at 128^3 with 120 angles and
  188^3 with 180 angles: wall time and index RMSE against the rendered phantom.
  ODTbrain's axes are oriented to ours by the flip that minimises its own error.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from qora.backend import resolve
from qora.bench.common import BenchResult
from qora.bench.phase import peers_python
from qora.bench.registry import shape_label

__all__ = ["run", "cell_phantom"]


def cell_phantom(n: int, pixel: float):
    """A cell-like phantom scaled to the field of view: cell, nucleus, three organelles (um, index)."""
    from qora.holo import Sphere

    s = n * pixel / 12.8  # 1 at 128 x 0.1 um
    return [Sphere((0.0, 0.0, 0.0), 4.0 * s, 1.345), Sphere((0.5 * s, -0.8 * s, 0.6 * s), 2.0 * s, 1.355),
            Sphere((-2.0 * s, 1.5 * s, -1.0 * s), 0.6 * s, 1.375), Sphere((1.8 * s, 1.8 * s, -1.5 * s), 0.5 * s, 1.37),
            Sphere((-0.5 * s, -2.2 * s, 2.0 * s), 0.7 * s, 1.38)]


def _timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, (time.perf_counter() - t0) * 1e3


def _stages(result, n: int, echo, *, tv: bool) -> None:
    from qora.holo import fields as F
    from qora.holo import odt
    from qora.holo import reference as R
    from qora.holo import Sphere, simulate_holograms
    from qora.holo import MappingPlan
    from qora.holo import rytov

    g = R.geometry(n)
    holos, bgs, hp = simulate_holograms([Sphere(radius=1.5, index=1.36)], g)
    label = shape_label((n, n, n))
    sideband = F.find_sideband(bgs[0], hp)
    kw = dict(hologram_pixel=hp, n=g.n, pupil_frequency=g.pupil_frequency)
    times = {}
    (f, b), times["fields"] = _timed(lambda: (F.extract_fields(holos, sideband, **kw),
                                              F.extract_fields(bgs, sideband, **kw)))
    ratio, times["ratio"] = _timed(lambda: F.field_ratio(f, b))
    phi, times["rytov"] = _timed(lambda: rytov(ratio))
    plan, times["mapping_plan"] = _timed(lambda: MappingPlan(g))
    spec, times["mapping"] = _timed(lambda: plan(phi))
    _, times["gp50_r2c"] = _timed(lambda: odt.solve(spec, plan.measured, g, method="gp", iterations=50, r2c=True))
    _, times["gp50_c2c"] = _timed(lambda: odt.solve(spec, plan.measured, g, method="gp", iterations=50))
    if tv:
        _, times["tv30x5"] = _timed(lambda: odt.solve(spec, plan.measured, g, method="tv", iterations=30,
                                                      tv_inner=5))
    for stage, ms in times.items():
        result.add(f"stage/{label}/{stage}", ms=ms)
    echo(f"  stages {label}: " + ", ".join(f"{k} {v:.0f} ms" for k, v in times.items()))


def _readme_tv(result, n: int, echo) -> None:
    """The README's line ``qora holo simulate && qora holo reconstruct holos.h5 --method tv`` as a user runs it:
    the simulated bead's holograms, the default options of --method tv (the TV weight from the data, oversample
    2), timed end to end, its RMSE against the truth beside the time (issue 39: at most 2 minutes on two cores)."""
    from qora import holo
    from qora.holo import simulation_geometry
    from qora.holo import Sphere, render_spheres, simulate_holograms

    g = simulation_geometry(n)
    holos, bgs, hp = simulate_holograms([Sphere()], g)
    sideband = holo.find_sideband(bgs[0], hp)
    options = holo.ReconstructionOptions(method="tv", tv_weight="auto")
    res, ms = _timed(lambda: holo.reconstruct_holograms(holos, bgs, g, sideband=sideband, hologram_pixel=hp,
                                                        options=options))
    truth = render_spheres([Sphere()], n, g.pixel, g.medium_index, supersample=3)  # as qora holo simulate writes it
    rmse = float(np.sqrt(np.mean((res.index - truth) ** 2)))
    label = shape_label((n, n, n))
    result.add(f"readme/{label}/tv_auto", ms=ms, rmse=rmse, tv_weight=res.info.get("tv_weight"))
    echo(f"  README's TV line {label}: {ms / 1e3:.1f} s, weight {res.info.get('tv_weight'):.3g}, RMSE {rmse:.2e}")


def _odtbrain(ratio, angles, g) -> tuple[np.ndarray, dict]:
    py = peers_python()
    if not py.exists():
        raise RuntimeError(f"the ODTbrain peer needs the peers' environment: run bench/peers-env.sh (looked for {py})")
    script = Path(__file__).with_name("peers") / "holo_odtbrain.py"
    with tempfile.TemporaryDirectory() as d:
        np.save(f"{d}/r.npy", ratio)
        np.save(f"{d}/a.npy", angles)
        proc = subprocess.run([str(py), str(script), f"{d}/r.npy", f"{d}/a.npy", f"{d}/o.npy",
                               str(g.wavelength / g.pixel), str(g.medium_index)], capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"the ODTbrain peer failed: {proc.stderr.strip()[-2000:]}")
        return np.load(f"{d}/o.npy"), json.loads(proc.stdout.strip().splitlines()[-1])


def _oriented(volume, truth):
    """``volume`` with the axis permutation and flips that minimise its RMSE against ``truth``."""
    best = None
    for perm in itertools.permutations(range(3)):
        for flips in itertools.product((False, True), repeat=3):
            v = np.transpose(volume, perm)
            for ax, flip in enumerate(flips):
                if flip:
                    v = np.flip(v, ax)
            e = float(np.sqrt(np.mean((v - truth) ** 2)))
            if best is None or e < best[0]:
                best = (e, v, {"perm": perm, "flips": flips})
    return best


# Our rows of the ODTbrain comparison. The TV weight and inner iterations were chosen on the
# 128^3, 120-angle case (docs/holo-performance.md, the sweep) and are applied unchanged at 188^3.
_TV = dict(method="tv", iterations=30, tv_inner=20, tv_weight=8e-2)
PEER_CASES = (
    ("qora_gp50", dict(method="gp", iterations=50, r2c=True)),
    ("qora_gp50_os1.5", dict(method="gp", iterations=50, r2c=True, oversample=1.5)),
    ("qora_gp50_os2", dict(method="gp", iterations=50, r2c=True, oversample=2)),
    ("qora_tv30x20_w8e-2", _TV),
    ("qora_tv30x20_os1.5_w8e-2", dict(_TV, oversample=1.5)),
    ("qora_tv30x20_os2_w8e-2", dict(_TV, oversample=2)),
)


def _against_odtbrain(result, n: int, count: int, echo) -> None:
    from qora.holo import Geometry, reconstruct
    from qora.holo import fields as F
    from qora.holo import reference as R
    from qora.holo import render_spheres, simulate_holograms

    g = Geometry(R.WAVELENGTH, R.MEDIUM_INDEX, R.PIXEL, n, R.NA_DETECTION,
                 angles=np.linspace(0, 2 * np.pi, count, endpoint=False))
    spheres = cell_phantom(n, g.pixel)
    holos, bgs, hp = simulate_holograms(spheres, g, noise=0.02, seed=3)
    ratio = F.ratio_from_holograms(holos, bgs, g, hp)
    truth = render_spheres(spheres, n, g.pixel, g.medium_index, supersample=3)
    label = f"{shape_label((n, n, n))}x{count}"
    rmse = lambda v: float(np.sqrt(np.mean((v - truth) ** 2)))  # noqa: E731
    row = {}
    for name, kwargs in PEER_CASES:
        vol, ms = _timed(lambda kwargs=kwargs: reconstruct(ratio, g, **kwargs).index)
        row[name] = (ms, rmse(vol))
    ob, info = _odtbrain(ratio, g.angles, g)
    err, _, orient = _oriented(ob, truth)
    row["odtbrain"] = (info["seconds"] * 1e3, err)
    for name, (ms, e) in row.items():
        result.add(f"odtbrain/{label}/{name}", ms=ms, rmse=e, rmse_vs_odtbrain=e / row["odtbrain"][1],
                   time_vs_odtbrain=ms / row["odtbrain"][0])
    result.notes.setdefault("odtbrain", info["odtbrain"])
    result.notes[f"odtbrain_orientation_{label}"] = {k: list(v) for k, v in orient.items()}
    echo(f"  rotation {label}: " + ", ".join(f"{k} {ms / 1e3:.1f} s RMSE {e:.2e}" for k, (ms, e) in row.items()))


def rotation_case(n: int, count: int, seed: int = 0):
    """Field ratios (count, n, n) of the rotation geometry for timing: weak random fields
    exp(0.05 (x + i y)) (every stage's time is independent of the values) and the geometry."""
    from qora.holo import Geometry
    from qora.holo import reference as R

    g = Geometry(R.WAVELENGTH, R.MEDIUM_INDEX, R.PIXEL, n, R.NA_DETECTION,
                 angles=np.linspace(0, 2 * np.pi, count, endpoint=False))
    rng = np.random.default_rng(seed)
    ratio = np.exp(0.05 * (rng.standard_normal((count, n, n)) + 1j * rng.standard_normal((count, n, n))))
    return ratio, g


def _rotation_gp_stages(ratio, g, iterations: int) -> dict:
    """ms of each CPU stage of ``reconstruct(ratio, g, method="gp", r2c=True)``, in its order."""
    from qora.holo import odt
    from qora.holo import MappingPlan, solver_grid

    times = {}
    phi, times["rytov"] = _timed(lambda: odt.first_order(ratio, "rytov"))
    plan, times["mapping_plan"] = _timed(lambda: MappingPlan(solver_grid(g)))
    spectrum, times["mapping"] = _timed(lambda: plan(odt.pad_fields(phi, plan.geometry.n)
                                                    if plan.geometry.n != g.n else phi))
    _, times["gp"] = _timed(lambda: odt.solve(spectrum, plan.measured, plan.geometry, method="gp",
                                              iterations=iterations, r2c=True))
    times["total"] = sum(times.values())
    return times


def run_cpu_threads(counts, *, size: int = 188, angles: int = 180, iterations: int = 50, rounds: int = 2,
                    write=True, echo=print) -> BenchResult:
    """The rotation case with GP (``size``^3, ``angles`` illuminations, R2C GP of ``iterations``) at each
    thread count: each stage's time, the whole, the GP's transforms alone (iterations + 1 R2C/C2R float64
    pairs on the solver's grid) and a ``jax.jit`` GP loop of the same size at the same count. The counts
    are run ``rounds`` times, interleaved, and the fastest time of each stage kept (a shared machine's
    other load only ever adds time)."""
    from qora.backend.host import threads
    from qora.bench.threads import add_scaling, new_result, pair_floor, run_peer
    from qora.holo import solver_grid

    result, counts = new_result("holo-cpu", counts, echo)
    ratio, g = rotation_case(size, angles)
    grid = solver_grid(g).n
    label = f"{shape_label((size,) * 3)}x{angles}"
    result.notes["case"] = {"size": size, "angles": angles, "grid": grid, "method": "gp", "r2c": True,
                            "iterations": iterations}
    small_ratio, small = rotation_case(24, 6)
    _rotation_gp_stages(small_ratio, small, 2)  # compile (or load) the Numba loops outside the timings
    script = Path(__file__).with_name("peers") / "holo_gp_jax.py"
    best = {t: {} for t in counts}
    for r in range(rounds):  # interleaved, the order reversed each round; the fastest of each kept
        for t in counts if r % 2 == 0 else counts[::-1]:
            with threads(t):
                stages = _rotation_gp_stages(ratio, g, iterations)
                stages["floor"] = pair_floor((grid,) * 3, real=True, repeats=3) * (iterations + 1)
            for k, v in stages.items():
                best[t][k] = min(v, best[t].get(k, v))
    rows, gp_rows = {}, {}
    for t in counts:
        jax = run_peer([script, grid, iterations], t)
        jax_ms = jax.get("ms")
        if jax_ms is None:
            result.notes.setdefault("jax_missing", {})[str(t)] = jax["error"]
        else:
            result.notes.setdefault("jax", jax["jax"])
        stages = best[t]
        rows[t] = {"ms": stages["total"], **{f"{k}_ms": v for k, v in stages.items() if k not in ("total", "floor")}}
        gp_rows[t] = {"ms": stages["gp"], "floor_ms": stages["floor"], "jax_ms": jax_ms}
    add_scaling(result, f"rotation/{label}/gp{iterations}_total", rows, echo)
    add_scaling(result, f"rotation/{label}/gp{iterations}_solver", gp_rows, echo)
    if write:
        path = result.write()
        echo(f"result written to {path}")
    echo(result.table())
    return result


def run(*, backend="auto", write=True, echo=print, quick: bool = False, threads=None, size: int = 188,
        angles: int = 180, rounds: int = 2, parts=None) -> BenchResult:
    """The benchmark of ``backend``; on the CPU with ``threads`` (counts) the thread-scaling sweep of the
    ``size``^3, ``angles``-illumination rotation case with GP instead. ``parts``: on CUDA, the parts to run
    (``qora.bench.holo_cuda.PARTS``; default all)."""
    be = resolve(backend)
    if parts is not None and not be.is_cuda:
        from qora.io.errors import InputError

        raise InputError("--parts selects parts of the CUDA benchmark: use it with --backend cuda")
    if threads is not None:
        from qora.bench.threads import check_sweep_backend

        check_sweep_backend(backend)
        return run_cpu_threads(threads, size=size, angles=angles, rounds=rounds, write=write, echo=echo)
    if be.is_cuda:
        from qora.bench import holo_cuda

        return holo_cuda.run(be, write=write, echo=echo, quick=quick,
                             parts=holo_cuda.PARTS if parts is None else tuple(parts))
    result = BenchResult("holo-cpu", "cpu", be.device_facts().as_dict(), columns=("ms", "rmse"))
    echo(f"CPU: {result.device['name']}, {result.device['cpu_cores']} cores")
    _stages(result, 64 if quick else 128, echo, tv=True)
    _readme_tv(result, 64 if quick else 128, echo)
    if not quick:
        _stages(result, 256, echo, tv=False)
    for n, count in (((48, 36),) if quick else ((128, 120), (188, 180))):
        _against_odtbrain(result, n, count, echo)
    if write:
        path = result.write()
        echo(f"result written to {path}")
    echo(result.table())
    return result
