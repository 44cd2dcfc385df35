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
    from qora.holo.phantoms import Sphere

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
    from qora.holo.phantoms import Sphere, simulate_holograms
    from qora.holo.plans import MappingPlan
    from qora.holo.unwrap import rytov

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
    from qora.holo.phantoms import render_spheres, simulate_holograms

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


def run(*, backend="auto", write=True, echo=print, quick: bool = False) -> BenchResult:
    be = resolve(backend)
    if be.is_cuda:
        from qora.bench import holo_cuda

        return holo_cuda.run(be, write=write, echo=echo, quick=quick)
    result = BenchResult("holo-cpu", "cpu", be.device_facts().as_dict(), columns=("ms", "rmse"))
    echo(f"CPU: {result.device['name']}, {result.device['cpu_cores']} cores")
    _stages(result, 64 if quick else 128, echo, tv=True)
    if not quick:
        _stages(result, 256, echo, tv=False)
    for n, count in (((48, 36),) if quick else ((128, 120), (188, 180))):
        _against_odtbrain(result, n, count, echo)
    if write:
        path = result.write()
        echo(f"result written to {path}")
    echo(result.table())
    return result
