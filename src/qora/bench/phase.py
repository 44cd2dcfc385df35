"""``qora bench phase``: ms per HIO iteration against the peers, measured in one run.

CPU (``--backend cpu``): our engine on one thread (``qora_loops_1_thread``: since issue 28 the loops and
the transforms follow one setting) and on the setting's threads, a plain NumPy loop, and a
``jax.jit`` loop run by the peers' interpreter (``bench/peers-env.sh``). The
workload is the seed's: HIO on random data with a box support over the central
half of each axis; timing does not depend on the data. Every number is the time
per iteration from the difference of n and 2n iterations, best of five. ``--threads`` sweeps thread counts instead
(:func:`run_cpu_threads`).
"""

from __future__ import annotations

import json
import math
import subprocess
import time
from pathlib import Path

import numpy as np

from qora.backend import resolve
from qora.bench.common import BenchResult, peers_python, time_peer
from qora.bench.registry import shape_label

__all__ = ["run", "CPU_SHAPES", "workload"]

CPU_SHAPES = ((256, 256), (1024, 1024), (2048, 2048), (128, 128, 128))
BETA = 0.9


def workload(shape, seed: int = 0):
    """Random amplitude (FFT layout), a box support over the central half, a random start."""
    rng = np.random.default_rng(seed)
    amp = rng.random(shape).astype(np.float32)
    support = np.zeros(shape, bool)
    support[tuple(slice(s // 4, 3 * s // 4) for s in shape)] = True
    x0 = (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(np.complex64)
    return amp, support, x0


def _iterations_for(one_ms: float, target_s: float = 0.3) -> int:
    return int(max(3, min(2000, math.ceil(target_s * 1e3 / max(one_ms, 1e-3)))))


def _plain_loop(backend, shape):
    """The textbook HIO loop in plain array code (NumPy or CuPy): the peer without our kernels."""
    xp = backend.xp
    amp_h, support_h, x0 = workload(shape)
    amp, support = xp.asarray(amp_h), xp.asarray(support_h)
    state = {"x": xp.asarray(x0)}

    def iterate(k):
        x = state["x"]
        for _ in range(k):
            y = xp.fft.fftn(x, norm="ortho")
            mag = xp.abs(y)
            _ = xp.sum((mag - amp) ** 2)
            y = xp.where(mag > 0, amp * y / xp.where(mag > 0, mag, 1), amp)
            p = xp.fft.ifftn(y, norm="ortho")
            x = xp.where(support, p, x - BETA * p)
        state["x"] = x.astype(np.complex64)
        backend.synchronize()

    return iterate


def _numpy_peer(shape):
    return _plain_loop(resolve("cpu"), shape)


def _jax_peer(shape, n: int, device: str) -> dict:
    py = peers_python()
    if not py.exists():
        raise RuntimeError(f"the JAX peer needs the peers' environment: run bench/peers-env.sh (looked for {py})")
    script = Path(__file__).with_name("peers") / "phase_jax.py"
    proc = subprocess.run([str(py), str(script), shape_label(shape), str(n), "--device", device],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"the JAX peer failed for {shape}: {proc.stderr.strip()[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _ours(shape):
    from qora.phase.cpu import CpuEngine

    amp, support, x0 = workload(shape)
    engine = CpuEngine(amp, support, batch=1)
    engine.set_x(x0[None])

    def iterate(k):
        engine.iterate(k, 1.0, -BETA)

    return iterate


def run_cpu(*, shapes=CPU_SHAPES, write=True, echo=print) -> BenchResult:
    import qora.phase.cpu  # noqa: F401 - sets the OpenMP wait policy before numba starts its threads
    import numba

    from qora.backend.host import num_threads
    from qora.backend.host import threads as host_threads

    be = resolve("cpu")
    facts = be.device_facts(measure=True)
    result = BenchResult("phase-cpu", "cpu", facts.as_dict(), columns=("ms", "vs_numpy", "vs_jax"))
    echo(f"CPU: {facts.name}, {facts.cpu_cores} cores, numba {numba.__version__}, {num_threads()} threads")
    for shape in shapes:
        label = shape_label(shape)
        ours = _ours(shape)
        t0 = time.perf_counter()
        ours(1)
        n = _iterations_for((time.perf_counter() - t0) * 1e3)
        times = {}
        with host_threads(1):  # the loops and (since issue 28) the transforms: one setting
            times["qora_loops_1_thread"] = time_peer(ours, n)
        times["qora_loops_all_threads"] = time_peer(ours, n)
        times["numpy"] = time_peer(_numpy_peer(shape), n)
        jax = _jax_peer(shape, n, "cpu")
        times["jax_jit"] = jax["ms"]
        result.notes.setdefault("jax", jax["jax"])
        for impl, ms in times.items():
            result.add(f"hio/{label}/{impl}", ms=ms, vs_numpy=ms / times["numpy"], vs_jax=ms / times["jax_jit"],
                       iterations=n, shape=list(shape))
        echo(f"  {label:>12}: " + ", ".join(f"{k} {v:.3f} ms" for k, v in times.items()))
    if write:
        path = result.write()
        echo(f"result written to {path}")
    echo(result.table())
    return result


def run_cpu_threads(counts, *, shapes=CPU_SHAPES, write=True, echo=print) -> BenchResult:
    """HIO per iteration at each thread count (``qora bench phase --backend cpu --threads ...``), beside the
    C2C fp32 pair floor and ``jax.jit`` at the same count (:mod:`qora.bench.threads`)."""
    import qora.phase.cpu  # noqa: F401 - sets the OpenMP wait policy before numba starts its threads
    from qora.backend.host import threads
    from qora.bench.threads import add_scaling, new_result, pair_floor, run_peer

    result, counts = new_result("phase-cpu", counts, echo)
    script = Path(__file__).with_name("peers") / "phase_jax.py"
    for shape in shapes:
        label = shape_label(shape)
        ours = _ours(shape)
        rows = {}
        for t in counts:
            with threads(t):
                ours(1)  # FFTW plans per thread count are made here, outside the timings
                t0 = time.perf_counter()
                ours(2)
                # iterations per count, so that one thread does not take 16 times as long as sixteen
                n = _iterations_for((time.perf_counter() - t0) * 1e3 / 2, 0.15)
                row = {"ms": time_peer(ours, n), "floor_ms": pair_floor(shape), "iterations": n}
            jax = run_peer([script, label, n, "--device", "cpu"], t)
            if "ms" in jax:
                row["jax_ms"] = jax["ms"]
                result.notes.setdefault("jax", jax["jax"])
            else:
                result.notes.setdefault("jax_missing", {})[f"{label}/{t}"] = jax["error"]
            rows[t] = row
        add_scaling(result, f"hio/{label}", rows, echo)
    if write:
        path = result.write()
        echo(f"result written to {path}")
    echo(result.table())
    return result


CUDA_SHAPES = ((256, 256), (1024, 1024), (2048, 2048), (4096, 4096), (128, 128, 128), (256, 256, 256),
               (512, 512, 512))
CUDA_VARIANTS = ("naive", "fused", "graph", "half", "mixed", "callback", "fused_fft")
# Modeled device traffic per element and iteration (seed 000's byte model): element-wise
# kernels, and one read and one write per transform (16 bytes per fp16 pair, 32 per fp32)
ELEMENTWISE_BYTES = {"naive": 91, "fused": 45, "graph": 45, "batched": 45, "half": 25, "mixed": 37,
                     "callback": 13}
FFT_PAIR_BYTES = {"half": 16, "mixed": 16}


def fused_fft_bytes(shape, column_split: bool | None = None) -> int:
    """Modeled traffic per element and iteration of ``fused_fft``: the modulus pass 20 B (the line read
    and written, the amplitude read), the x pass 33 B (the spectrum read, the support byte, x read and
    written, the next spectrum written), in 3D the y passes 32 B. With the split column pass (2D; by
    default where ``qora.phase.cuda_fused.measured_layout`` takes it, a height of 4096) the column work is
    three passes, 52 B instead of 20."""
    from qora.phase.cuda_fused import measured_layout

    if column_split is None:
        column_split = measured_layout(shape)["column_split"]
    return 53 + 32 * (len(shape) - 2) + (32 if column_split else 0)


STARTS_SHAPES = ((256, 256), (1024, 1024), (2048, 2048), (128, 128, 128), (256, 256, 256))


def _cuda_engine_runner(variant, shape, batch=1):
    from qora.phase.cuda import make_engine

    amp, support, x0 = workload(shape)
    engine = make_engine(variant, amp, support, batch)
    engine.set_x(np.broadcast_to(x0, (batch,) + x0.shape))

    def iterate(k):
        engine.iterate(k, 1.0, -BETA)

    return engine, iterate


def _cupy_peer(shape):
    return _plain_loop(resolve("cuda"), shape)


def run_cuda(*, shapes=CUDA_SHAPES, write=True, echo=print, peers=True) -> BenchResult:
    from qora.bench.common import copy_floor, fft_pair_floor

    be = resolve("cuda")
    facts = be.device_facts()
    result = BenchResult("phase", "cuda", facts.as_dict(),
                         columns=("ms", "vs_floor", "model_gbs", "vs_jax"))
    copy = copy_floor(be)
    result.device["copy_gbs"] = copy["gbs"]
    result.add("copy", ms=None, gbs=copy["gbs"])
    echo(f"GPU: {facts.name}; copy {copy['gbs']:.0f} GB/s")
    for shape in shapes:
        label = shape_label(shape)
        n_el = int(np.prod(shape))
        pair = fft_pair_floor(be, shape, "fp32")["ms"]
        floor = pair + ELEMENTWISE_BYTES["graph"] * n_el / (copy["gbs"] * 1e9) * 1e3
        result.add(f"floor/{label}/fft_pair", ms=pair)
        result.add(f"floor/{label}/pair_plus_45B", ms=floor)
        times = {}
        for variant in CUDA_VARIANTS:
            engine, it = _cuda_engine_runner(variant, shape)
            t0 = time.perf_counter()
            it(2)
            n = _iterations_for((time.perf_counter() - t0) * 1e3 / 2)
            times[variant] = time_peer(it, n)
            del engine, it
            be.xp.get_default_memory_pool().free_all_blocks()
        if peers:
            times["cupy_loop"] = time_peer(_cupy_peer(shape), max(3, n))
            be.xp.get_default_memory_pool().free_all_blocks()
            jax = _jax_peer(shape, max(3, n), "gpu")
            times["jax_jit"] = jax["ms"]
            result.notes.setdefault("jax", jax["jax"])
        for impl, ms in times.items():
            bytes_el = (fused_fft_bytes(shape) if impl == "fused_fft" else
                        FFT_PAIR_BYTES.get(impl, 32) + ELEMENTWISE_BYTES.get(impl, ELEMENTWISE_BYTES["naive"]))
            result.add(f"hio/{label}/{impl}", ms=ms, vs_floor=ms / floor, vs_pair=ms / pair,
                       model_gbs=n_el * bytes_el / (ms * 1e-3) / 1e9,
                       vs_jax=ms / times["jax_jit"] if "jax_jit" in times else None, shape=list(shape))
        echo(f"  {label:>12}: pair {pair:.4f}, floor {floor:.4f} ms; " +
             ", ".join(f"{k} {v:.4f}" for k, v in times.items()))
    _eight_starts(be, result, echo)
    _progress_cost(be, result, echo)
    if write:
        path = result.write()
        echo(f"result written to {path}")
    echo(result.table())
    return result


def _eight_starts(be, result, echo, starts=8) -> None:
    """ms per iteration per start: looped graph, batched all 8, batched 2 per plan."""
    for shape in STARTS_SHAPES:
        label = shape_label(shape)
        row = {}
        for name, batch in (("looped", 1), ("batched_all", starts), ("batched_2", 2)):
            engine, it = _cuda_engine_runner("graph", shape, batch)
            groups = starts // batch

            def all_starts(k, it=it, groups=groups):
                for _ in range(groups):
                    it(k)

            t0 = time.perf_counter()
            all_starts(1)
            n = _iterations_for((time.perf_counter() - t0) * 1e3)
            row[name] = time_peer(all_starts, n) / starts
            del engine, it
            be.xp.get_default_memory_pool().free_all_blocks()
        for name, ms in row.items():
            result.add(f"starts8/{label}/{name}", ms=ms, vs_looped=ms / row["looped"])
        echo(f"  8 starts {label:>12}: " + ", ".join(f"{k} {v:.4f}" for k, v in row.items()) + " ms per start")


def _progress_cost(be, result, echo, shape=(256, 256), total=600) -> None:
    """ms per iteration of graph at 256^2 with a host read every 1, 10, 100 iterations."""
    for every in (1, 10, 100):
        engine, _ = _cuda_engine_runner("graph", shape)

        def run_total(k, engine=engine, every=every):
            for _ in range(k // every):
                engine.iterate(every, 1.0, -BETA)

        ms = time_peer(run_total, total)
        result.add(f"progress/{shape_label(shape)}/every_{every}", ms=ms)
        echo(f"  progress every {every:>3}: {ms:.4f} ms per iteration")
        del engine


def run(*, backend="auto", shapes=None, write=True, echo=print, threads=None) -> BenchResult:
    """The benchmark of ``backend``; on the CPU with ``threads`` (counts) the thread-scaling sweep instead."""
    be = resolve(backend)
    if threads is not None:
        from qora.bench.threads import check_sweep_backend

        check_sweep_backend(backend)
        return run_cpu_threads(threads, shapes=shapes or CPU_SHAPES, write=write, echo=echo)
    if be.is_cuda:
        return run_cuda(shapes=shapes or CUDA_SHAPES, write=write, echo=echo)
    return run_cpu(shapes=shapes or CPU_SHAPES, write=write, echo=echo)


# The callback probe's builds: (mode, switches of callbacks.cu), from the shipped one down
CALLBACK_BUILDS = {
    "store": ("store", {}),
    "load": ("load", {}),
    "load_warp_error": ("load", {"QORA_CB_ERROR": 2}),
    "load_no_error": ("load", {"QORA_CB_ERROR": 0}),
    "load_no_update": ("load", {"QORA_CB_UPDATE": 0}),
    "load_no_modulus": ("load", {"QORA_CB_MODULUS": 0}),
    "load_copy_only": ("load", {"QORA_CB_MODULUS": 0, "QORA_CB_UPDATE": 0}),
}
PROBE_SHAPES = ((2048, 2048), (128, 128, 128), (256, 256, 256))


def run_callback_probe(*, shapes=PROBE_SHAPES, write=True, echo=print) -> BenchResult:
    """Where the callback variant's time goes: the same iteration with parts of its callbacks
    switched off, timed in one run with graph and the bare cuFFT pair (ms per iteration)."""
    from qora.bench.common import fft_pair_floor
    from qora.phase.cuda import CallbackEngine

    be = resolve("cuda")
    result = BenchResult("phase-callback", "cuda", be.device_facts().as_dict(), columns=("ms", "vs_graph"))
    pool = be.xp.get_default_memory_pool()
    for shape in shapes:
        label = shape_label(shape)
        amp, support, x0 = workload(shape)
        times = {"fft_pair": fft_pair_floor(be, shape, "fp32", repeats=10)["ms"]}
        engines = {"graph": _cuda_engine_runner("graph", shape)[0]}
        for name, (mode, defines) in CALLBACK_BUILDS.items():
            engines[name] = CallbackEngine(amp, support, 1, mode=mode, defines=defines)
            result.add(f"plans/{label}/{name}", ms=engines[name].plan_created_s * 1e3)
        for name, engine in engines.items():
            engine.set_x(x0[None])
            engine.iterate(2, 1.0, -BETA)
            t0 = time.perf_counter()
            engine.iterate(2, 1.0, -BETA)
            n = _iterations_for((time.perf_counter() - t0) * 1e3 / 2, 0.2)
            times[name] = time_peer(lambda k, e=engine: e.iterate(k, 1.0, -BETA), n)
        for name, ms in times.items():
            result.add(f"callback/{label}/{name}", ms=ms, vs_graph=ms / times["graph"],
                       over_pair=ms - times["fft_pair"])
        echo(f"  {label:>12}: " + ", ".join(f"{k} {v:.4f}" for k, v in times.items()))
        del engines
        pool.free_all_blocks()
    if write:
        path = result.write()
        echo(f"result written to {path}")
    echo(result.table())
    return result


def _split_rows(result, be, engine, shape, label: str, iteration_ms: float) -> None:
    """The split of a graph iteration: the two element-wise kernels alone, replayed from a graph, against the FFT
    pair's floor."""
    from qora.backend.graph import StepGraph
    from qora.bench.common import fft_pair_floor
    from qora.phase import kernels as K

    reps = 20

    def kernels_only():
        for _ in range(reps):
            K.modulus_step(y=engine.y, amp=engine.amp, scale=engine.scale, n=engine.n, batch=engine.batch,
                           err_sums=engine.history, counter=engine.counter)
            K.update_step(x=engine.x, p=engine.y, support=engine.support, a=1.0, b=-BETA, constraint=0, n=engine.n,
                          batch=engine.batch, counter=engine.counter)

    engine._ensure_history(1024)
    engine.counter.fill(0)
    g = StepGraph(lambda: (engine.counter.fill(0), kernels_only()))
    samples = []
    for _ in range(10):
        with be.timer() as t:
            g.replay()
        samples.append(t.ms / reps)
    elementwise = float(np.median(samples))
    pair = fft_pair_floor(be, shape, "fp32", repeats=10)["ms"]
    result.add(f"split/{label}/fft_pair", ms=pair)
    result.add(f"split/{label}/elementwise", ms=elementwise, gbs=45 * int(np.prod(shape)) / (elementwise * 1e-3) / 1e9)
    result.add(f"split/{label}/iteration", ms=iteration_ms, ratio=iteration_ms / (pair + elementwise))


def _memory_rows(result, be, echo) -> None:
    """Device memory of one graph start at 512^3: the engine's steady state (graph and mixed) and a whole run."""
    from qora.backend.device import PeakMemory
    from qora.phase import Solver

    pool = be.xp.get_default_memory_pool()
    rng = np.random.default_rng(0)
    big = (512, 512, 512)
    intensity = rng.random(big, dtype=np.float32)
    support = np.zeros(big, bool)
    support[192:320, 192:320, 192:320] = True
    from qora.phase.cuda import make_engine
    from qora.phase import native_amplitude

    amp = native_amplitude(intensity)
    for variant in ("graph", "mixed"):
        be.fft.clear()  # plans and their work areas count
        pool.free_all_blocks()
        with PeakMemory(be) as engine_pm:  # the engine's steady state: buffers, plan, work area
            engine = make_engine(variant, amp, support, 1)
            engine.iterate(10, 1.0, -BETA)
        del engine
        pool.free_all_blocks()
        result.add(f"memory/512x512x512/{variant}/engine", ms=None,
                   bytes_per_voxel=engine_pm.peak_bytes / intensity.size, peak_gib=engine_pm.peak_bytes / 2**30)
        echo(f"  memory at 512^3, {variant} engine: {engine_pm.peak_bytes / intensity.size:.1f} bytes per voxel")
    be.fft.clear()
    pool.free_all_blocks()
    with PeakMemory(be) as pm:  # a whole run: the random start and the final LLK included
        solver = Solver(intensity, backend="cuda", variant="graph")
        solver.run(support=support, recipe="HIO**10", starts=1)
    result.add("memory/512x512x512/graph/run", ms=None, bytes_per_voxel=pm.peak_bytes / intensity.size,
               peak_gib=pm.peak_bytes / 2**30)
    echo(f"  memory at 512^3, whole graph run: {pm.peak_bytes / intensity.size:.1f} bytes per voxel "
         f"({pm.peak_bytes / 2**30:.2f} GiB)")


def run_cuda_extras(*, shapes=CUDA_SHAPES, write=True, echo=print) -> BenchResult:
    """The seed's other GPU tables: callback against graph (with plan creation time), the
    split of an iteration into cuFFT and element-wise time, solver construction, whole
    recipes at 256^3 and device memory per voxel at 512^3."""
    from qora.phase import objects
    from qora.phase import Solver

    be = resolve("cuda")
    xp = be.xp
    result = BenchResult("phase-extras", "cuda", be.device_facts().as_dict(), columns=("ms", "ratio"))
    pool = xp.get_default_memory_pool()
    for shape in shapes:
        label = shape_label(shape)
        row = {}
        for variant in ("graph", "callback"):
            engine, it = _cuda_engine_runner(variant, shape)
            t0 = time.perf_counter()
            it(2)
            n = _iterations_for((time.perf_counter() - t0) * 1e3 / 2, 0.2)
            row[variant] = time_peer(it, n)
            if variant == "callback":
                result.add(f"callback/{label}/plan_creation", ms=engine.plan_created_s * 1e3)
            if variant == "graph":
                _split_rows(result, be, engine, shape, label, row["graph"])
            del engine, it
            pool.free_all_blocks()
        result.add(f"callback/{label}/graph", ms=row["graph"])
        result.add(f"callback/{label}/callback", ms=row["callback"], ratio=row["callback"] / row["graph"])
        echo(f"  {label:>12}: graph {row['graph']:.4f}, callback {row['callback']:.4f} ms")

    # solver construction and whole recipes at 256^3: a prism with its known support, and the
    # default recipe from the autocorrelation support; wall time of the second run
    obj, intensity = objects.simulate("prism", 256)
    support = objects.support_of(obj)
    for variant in ("graph", "half", "mixed", "callback"):
        t0 = time.perf_counter()
        solver = Solver(intensity, backend="cuda", variant=variant)
        solver.run(support=support, recipe="ER**1", starts=1)
        be.synchronize()
        result.add(f"construct/256x256x256/{variant}", ms=(time.perf_counter() - t0) * 1e3)
        recipes = {"known": ("HIO**400 ER**100", support), "default": (None, None)}
        for name, (recipe, sup) in recipes.items():
            for attempt in range(2):
                t0 = time.perf_counter()
                r = solver.run(support=sup, recipe=recipe, starts=1)
                wall = time.perf_counter() - t0
            result.add(f"recipe/256x256x256/{name}/{variant}", ms=wall * 1e3, fourier_error=r.fourier_error)
            echo(f"  recipe {name} {variant}: {wall:.2f} s (Fourier error {r.fourier_error:.1e})")
        del solver
        pool.free_all_blocks()

    _memory_rows(result, be, echo)
    if write:
        path = result.write()
        echo(f"result written to {path}")
    return result
