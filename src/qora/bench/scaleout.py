"""``qora bench scale-out``: the three Dask patterns' throughput on 1, 2, ... workers.

With ``--gpus`` (the default where there is a GPU) each step adds a worker on one more GPU; on
the CPU each step adds a worker process. Per worker count, warm (the workers have made their
plans on one untimed round of the same work), the median of ``repeats`` rounds:

- phase: ``patterns`` patterns of 256^2 (files read on the workers), 4 starts of HIO**400 ER**100
  each: patterns per second; beside it the same patterns in this process with one Solver (no
  Dask), the floor the 1-worker run is compared with.
- holo: a time series of ``stacks`` stacks of 49 holograms of 256^2 (128^3 volumes, GP 50),
  each read from a .npy file on the worker and its volume written to a Zarr store: stacks per
  second; beside it the same Pipeline in this process (no files, no store).
- ssb: the agreement of a batch of 8 parameter sets over G split across the workers (a 128^2
  scan with a 64^2 detector, read from an HDF5 file by each worker): ms per pass, and the Newton
  pass (order 2, five parameters).

Scaling efficiency = throughput(k) / (k throughput(1)); the issue's goal is 1.8x for phase and
holo at 2 GPUs.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

from qora.bench.common import BenchResult, median_wall

__all__ = ["run"]

PHASE_RECIPE = "HIO**400 ER**100"


def _phase_files(directory: Path, count: int) -> list:
    from qora.phase import objects
    from qora.phase import write_pattern

    paths = []
    for i in range(count):  # the same object under independent Poisson noise
        _, intensity = objects.simulate("triangle", 256, photons=1e9, seed=i)
        paths.append(directory / f"p{i:03d}.cxi")
        write_pattern(paths[-1], intensity)
    return paths


def _holo_case(directory: Path):
    from qora.holo import ReconstructionOptions
    from qora.holo import fields as F
    from qora.holo import phantoms as P
    from qora.holo import reference as R

    g = R.geometry(128)
    hp = g.pixel / 2
    big = 2 * g.n
    carrier = R.carrier(big, hp)
    phi = P.born_ratio([P.Sphere(radius=3.0, index=1.37)], g, n=big, pixel=hp)
    stack = P.holograms(np.exp(phi), g, carrier, hologram_pixel=hp).astype(np.float32)
    bg = P.holograms(np.ones((g.count, big, big)), g, carrier, hologram_pixel=hp).astype(np.float32)
    path = directory / "stack.npy"
    np.save(path, stack)
    options = dict(sideband=F.find_sideband(bg[0], hp), hologram_pixel=hp,
                   options=ReconstructionOptions(iterations=50))
    return g, stack, bg, path, options


def _ssb_file(directory: Path) -> tuple:
    from qora.ssb import Aberrations, amorphous_slices, simulate, write_dataset

    sim = simulate(amorphous_slices((256, 256), 0.2, atoms_per_a2=0.1, seed=0), pixel=0.2, stride=2, window=64,
                   aberrations=Aberrations(C10=150.0))
    path = directory / "scan.h5"
    write_dataset(path, sim.data, kv=sim.kv, alpha_mrad=sim.alpha_mrad, scan_step=sim.scan_step)
    return path, sim


def run(*, gpus: bool | None = None, max_workers: int | None = None, patterns: int = 24, stacks: int = 24,
        repeats: int = 3, write: bool = True, echo=print) -> BenchResult:
    from qora.backend import has_cuda, resolve
    from qora.backend.core import cpu_count
    from qora.distributed import (SeriesStore, ShardedSession, connect, gpu_count, reconstruct_many,
                                  reconstruct_series)
    from qora.holo import Pipeline
    from qora.io.patterns import load_pattern
    from qora.phase import Solver

    gpus = has_cuda() if gpus is None else gpus
    backend = "cuda" if gpus else "cpu"
    be = resolve(backend)
    available = gpu_count() if gpus else cpu_count()
    counts = list(range(1, min(available, max_workers or available) + 1))
    result = BenchResult("scale-out" + ("" if gpus else "-cpu"), be.name, be.device_facts().as_dict(),
                         columns=("per_s", "ms", "efficiency"))
    result.notes.update(workers=counts, per_worker="one GPU" if gpus else "one process, one thread",
                        phase={"patterns": patterns, "shape": [256, 256], "starts": 4, "recipe": PHASE_RECIPE},
                        holo={"stacks": stacks, "volume": [128] * 3, "illuminations": 49, "method": "gp50"},
                        ssb={"scan": [128, 128], "detector": [64, 64], "batch": 8})
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        paths = _phase_files(tmp, patterns)
        g, stack, bg, stack_path, holo_options = _holo_case(tmp)
        ssb_path, sim = _ssb_file(tmp)

        # the floors: the same work in this process, no Dask
        solver = Solver(load_pattern(paths[0])[0], backend=backend)

        def phase_here():
            for p in paths:
                solver.set_intensity(load_pattern(p)[0])
                solver.run(recipe=PHASE_RECIPE, starts=4)

        phase_here()
        t = median_wall(phase_here, repeats)[1]
        result.add("phase/in_process", per_s=patterns / t, ms=t * 1e3 / patterns)
        pipe = Pipeline(g, hologram_n=stack.shape[-1], backend=backend, **holo_options)
        pipe.set_background(bg)

        def holo_here():
            for _ in range(stacks):
                pipe.process(stack)

        holo_here()
        t = median_wall(holo_here, repeats)[1]
        result.add("holo/in_process", per_s=stacks / t, ms=t * 1e3 / stacks)
        del pipe, solver
        base = {}
        for k in counts:
            with connect(gpus=k) if gpus else connect(workers=k) as client:
                def phase_round():
                    report = reconstruct_many(paths, client=client, starts=4, recipe=PHASE_RECIPE, backend=backend,
                                              batch=1)
                    assert not report.failed, report.failed

                phase_round()
                t = median_wall(phase_round, repeats)[1]
                rounds = iter(range(1000))

                def holo_round():
                    store = tmp / f"series-{k}-{next(rounds)}.zarr"
                    report = reconstruct_series([str(stack_path)] * stacks, bg, g, store=store, client=client,
                                                backend=backend, **holo_options)
                    assert not report.failed and len(SeriesStore(store).index()) == stacks, report.summary()

                holo_round()
                th = median_wall(holo_round, repeats)[1]
                sharded = ShardedSession(str(ssb_path), client=client, kv=sim.kv, alpha_mrad=sim.alpha_mrad,
                                         scan_step=sim.scan_step, backend=backend)
                band = sharded.make_band(("C10", "C12a", "C12b"))
                sets = [{"C10": 100.0 + 10 * i} for i in range(8)]
                band.evaluate_batch(sets)
                tb = median_wall(lambda: band.evaluate_batch(sets), 5)[1]
                newton = sharded.make_band(("C10", "C12a", "C12b", "thickness", "tilt_y"))
                point = {"C10": 150.0, "thickness": 50.0}
                newton.evaluate(point)
                tn = median_wall(lambda: newton.evaluate(point), 5)[1]
                sharded.close()
            for name, seconds, items in (("phase", t, patterns), ("holo", th, stacks)):
                rate = items / seconds
                base.setdefault(name, rate)
                result.add(f"{name}/{k}_workers", per_s=rate, ms=seconds * 1e3 / items,
                           efficiency=rate / (k * base[name]))
            result.add(f"ssb/{k}_workers/batch8", ms=tb * 1e3)
            result.add(f"ssb/{k}_workers/newton5", ms=tn * 1e3)
            echo(f"{k} worker(s): phase {patterns / t:.2f} patterns/s, holo {stacks / th:.2f} stacks/s, "
                 f"ssb batch of 8 {tb * 1e3:.1f} ms, Newton pass {tn * 1e3:.1f} ms")
    echo(result.table())
    if write:
        echo(f"result written to {result.write()}")
    return result
