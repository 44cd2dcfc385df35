"""Thread scaling on the CPU (``qora bench phase|holo|ssb --backend cpu --threads 1,2,4,...``).

Each engine's case is timed once per thread count under :func:`qora.backend.host.threads`, beside

- the FFT-pair floor at the same count: a forward and an inverse transform of the case's shape through
  the FFT entry point (what the iteration cannot beat while it keeps its transforms), and
- ``jax.jit`` on the CPU, run by the peers' interpreter pinned to as many cores by its affinity mask
  (XLA sizes its thread pool from the mask), where the engine has a JAX peer.

Counts above the cores this process may use are skipped with a note (oversubscribed timings measure
the scheduler). The host FFT libraries (:func:`qora.backend.fft.cpu_libraries`) go into the JSON, so a
machine that lacks ducc0 or pyFFTW says so. Results: ``<benchmark>-threads`` under ``bench/results``.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np

from qora.backend.fft import cpu_libraries
from qora.backend.host import cpu_count
from qora.bench.common import BenchResult, peers_python, time_device
from qora.io.errors import InputError

__all__ = ["parse_counts", "split_counts", "new_result", "pair_floor", "run_peer", "add_scaling", "DEFAULT_COUNTS"]

DEFAULT_COUNTS = (1, 2, 4, 8, 16)


def check_sweep_backend(backend) -> None:
    """A thread sweep measures the host's threads: it runs on the CPU for "cpu" and for the default "auto" (a GPU
    machine's CPU included); "cuda" asked for by name is refused."""
    if getattr(backend, "name", backend) == "cuda":
        raise InputError("--threads sweeps the CPU path: leave --backend at auto or give cpu")


def parse_counts(text) -> list[int]:
    """``"1,2,4"`` (or an iterable of ints) -> ``[1, 2, 4]``, sorted, distinct; InputError otherwise."""
    items = text.split(",") if isinstance(text, str) else list(text)
    counts = []
    for item in items:
        try:
            n = int(str(item).strip())
        except ValueError:
            raise InputError(f"--threads takes thread counts separated by commas (like 1,2,4,8,16), got {text!r}") \
                from None
        if n < 1:
            raise InputError(f"--threads: a thread count must be at least 1, got {n}")
        counts.append(n)
    if not counts:
        raise InputError("--threads: give at least one thread count")
    return sorted(set(counts))


def split_counts(counts) -> tuple[list[int], list[int]]:
    """(counts to run, counts skipped because they exceed :func:`qora.backend.host.cpu_count`)."""
    cores = cpu_count()
    return [n for n in counts if n <= cores], [n for n in counts if n > cores]


def new_result(benchmark: str, counts, echo) -> tuple[BenchResult, list[int]]:
    """A result for ``<benchmark>-threads`` with the device, the FFT libraries and the skipped counts noted;
    returns it with the counts to run."""
    from qora.backend import resolve

    import numba

    be = resolve("cpu")
    result = BenchResult(f"{benchmark}-threads", "cpu", be.device_facts().as_dict(),
                         columns=("ms", "speedup", "vs_floor", "vs_jax"))
    run, skipped = split_counts(counts)
    libs = cpu_libraries()
    result.notes["fft_libraries"] = libs
    result.notes["numba"] = {"version": numba.__version__, "pool": numba.config.NUMBA_NUM_THREADS,
                             "threading_layer": numba.config.THREADING_LAYER}
    result.notes["cores_available"] = cpu_count()
    result.notes["omp_wait_policy"] = os.environ.get("OMP_WAIT_POLICY")
    if skipped:
        result.notes["skipped_thread_counts"] = {"counts": skipped,
                                                 "why": f"more threads than the {cpu_count()} cores this process "
                                                        "may use (affinity mask and cgroup quota)"}
    missing = [k for k in ("ducc0", "pyfftw") if libs.get(k) is None]
    echo(f"CPU: {result.device['name']}, {cpu_count()} cores available; FFT on {libs['used']}"
         + (f" ({', '.join(missing)} not installed)" if missing else "")
         + f"; thread counts {run}" + (f", skipped {skipped} (> cores)" if skipped else ""))
    return result, run


def pair_floor(shape, *, real: bool = False, dtype=np.complex64, repeats: int = 5) -> float:
    """ms of one forward and one inverse transform of ``shape`` through the FFT entry point's plans at the
    current thread setting: C2C ``dtype`` (the phase iteration's), or R2C/C2R float64 with ``real`` (GP's)."""
    from qora.backend import resolve

    be = resolve("cpu")
    rng = np.random.default_rng(0)
    if not real:
        from qora.bench.common import fft_pair_floor

        if np.dtype(dtype) == np.complex64:
            return fft_pair_floor(be, shape, "fp32", repeats=4 * repeats)["ms"]
    plan = be.fft.r2c(shape, np.float64, norm=None)
    x = rng.standard_normal(shape)
    spec = np.empty(plan.spectrum_shape, np.complex128)

    def pair():
        plan.forward(x, out=spec)
        plan.inverse(spec, out=x)
        np.multiply(x, 1.0 / plan.n, out=x)

    return time_device(be, pair, warmup=1, repeats=repeats).median_ms


def run_peer(args, cores: int, *, python: Path | None = None) -> dict:
    """Run a peer script (``args`` after the interpreter) pinned to ``cores`` cores; its last JSON line,
    or ``{"error": why}`` when the peers' environment is missing or the peer fails (recorded, not raised:
    the scaling table is still worth having)."""
    py = python or peers_python()
    if not Path(py).exists():
        return {"error": f"no peers' interpreter at {py} (bench/peers-env.sh, or QORA_PEERS_PYTHON)"}
    allowed = sorted(os.sched_getaffinity(0))[:cores]
    env = dict(os.environ, OMP_NUM_THREADS=str(cores))
    try:
        proc = subprocess.run([str(py)] + [str(a) for a in args], capture_output=True, text=True, env=env,
                              preexec_fn=lambda: os.sched_setaffinity(0, allowed))
    except OSError as exc:
        return {"error": f"{py}: {exc}"}
    if proc.returncode != 0:
        return {"error": proc.stderr.strip()[-1000:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def add_scaling(result: BenchResult, case: str, rows: dict, echo) -> None:
    """Rows ``{threads: {"ms": ..., "floor_ms": ..., "jax_ms": ...}}`` as cases ``<case>/<t>_threads``, with
    the speedup over the fewest threads run, and the ratios to the floor and to JAX at the same count."""
    import numba

    try:  # the layer Numba actually started (known once a parallel loop ran): omp, tbb or workqueue
        result.notes["numba"]["threading_layer"] = numba.threading_layer()
    except ValueError:  # no parallel loop ran in this process: nothing to record
        pass
    base = rows[min(rows)]["ms"]
    parts = []
    for t, row in sorted(rows.items()):
        ms, floor, jax = row["ms"], row.get("floor_ms"), row.get("jax_ms")
        result.add(f"{case}/{t}_threads", ms=ms, speedup=base / ms, vs_floor=ms / floor if floor else None,
                   vs_jax=ms / jax if jax else None, threads=t, **{k: v for k, v in row.items() if k != "ms"})
        parts.append(f"{t}: {ms:.3f} ms (x{base / ms:.2f}" + (f", floor {floor:.3f}" if floor else "")
                     + (f", jax {jax:.3f}" if jax else "") + ")")
    echo(f"  {case}: " + "; ".join(parts))

