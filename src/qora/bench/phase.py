"""``qora bench phase``: ms per HIO iteration against the peers, measured in one run.

CPU (``--backend cpu``): our engine with its element-wise loops on one thread and
on all threads (the transforms always use all cores), a plain NumPy loop, and a
``jax.jit`` loop run by the peers' interpreter (``bench/peers-env.sh``). The
workload is the seed's: HIO on random data with a box support over the central
half of each axis; timing does not depend on the data. Every number is the time
per iteration from the difference of n and 2n iterations, best of five.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from qora.backend import resolve
from qora.bench.common import BenchResult, time_peer
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


def _numpy_peer(shape):
    amp, support, x0 = workload(shape)
    state = {"x": x0.copy()}

    def iterate(k):
        x = state["x"]
        for _ in range(k):
            y = np.fft.fftn(x, norm="ortho")
            mag = np.abs(y)
            _ = np.sum((mag - amp) ** 2)
            y = np.where(mag > 0, amp * y / np.where(mag > 0, mag, 1), amp)
            p = np.fft.ifftn(y, norm="ortho")
            x = np.where(support, p, x - BETA * p)
        state["x"] = x.astype(np.complex64)

    return iterate


def peers_python() -> Path:
    """The peers' interpreter (``QORA_PEERS_PYTHON`` or ``.peers/bin/python`` of the checkout)."""
    env = os.environ.get("QORA_PEERS_PYTHON")
    if env:
        import shutil

        return Path(shutil.which(env) or env)
    return Path(__file__).resolve().parents[3] / ".peers" / "bin" / "python"


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

    be = resolve("cpu")
    facts = be.device_facts(measure=True)
    result = BenchResult("phase-cpu", "cpu", facts.as_dict(), columns=("ms", "vs_numpy", "vs_jax"))
    echo(f"CPU: {facts.name}, {facts.cpu_cores} cores, numba {numba.__version__}, {numba.get_num_threads()} threads")
    threads = numba.get_num_threads()
    for shape in shapes:
        label = shape_label(shape)
        ours = _ours(shape)
        t0 = time.perf_counter()
        ours(1)
        n = _iterations_for((time.perf_counter() - t0) * 1e3)
        times = {}
        numba.set_num_threads(1)
        try:
            times["qora_loops_1_thread"] = time_peer(ours, n)
        finally:
            numba.set_num_threads(threads)
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


CUDA_SHAPES = ((256, 256), (1024, 1024), (2048, 2048), (4096, 4096), (128, 128, 128), (256, 256, 256),
               (512, 512, 512))
CUDA_VARIANTS = ("naive", "fused", "graph", "half", "mixed")
# Modeled device traffic per element and iteration (seed 000's byte model): element-wise
# kernels, and one read and one write per transform (16 bytes per fp16 pair, 32 per fp32)
ELEMENTWISE_BYTES = {"naive": 91, "fused": 45, "graph": 45, "batched": 45, "half": 25, "mixed": 37}
FFT_PAIR_BYTES = {"half": 16, "mixed": 16}
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
    be = resolve("cuda")
    xp = be.xp
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
        state["x"] = x
        be.synchronize()

    return iterate


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
            bytes_el = FFT_PAIR_BYTES.get(impl, 32) + ELEMENTWISE_BYTES.get(impl, ELEMENTWISE_BYTES["naive"])
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


def run(*, backend="auto", shapes=None, write=True, echo=print) -> BenchResult:
    be = resolve(backend)
    if be.is_cuda:
        return run_cuda(shapes=shapes or CUDA_SHAPES, write=write, echo=echo)
    return run_cpu(shapes=shapes or CPU_SHAPES, write=write, echo=echo)
