"""The harness every benchmark uses.

- :func:`time_device`: warm-up, then one timing per repeat (CUDA events on the
  GPU, ``perf_counter`` on the CPU), summarised by the median.
- :func:`time_peer`: for a peer (a JAX ``jit`` loop, a plain CuPy loop), the time
  per iteration from the difference of ``n`` and ``2n`` iterations, best of five,
  so that compilation, dispatch and transfers drop out.
- :func:`fft_pair_floor` and :func:`copy_floor`: the floors measured in the same
  run (a forward+inverse C2C pair replayed from a CUDA graph; the copy bandwidth).
- :class:`BenchResult`: cases, device facts, versions, commit and clean-tree
  flag, written as JSON to :func:`results_dir` (``--out DIR`` of ``qora bench``, else
  ``QORA_RESULTS_DIR``, else ``./qora-bench-results/``) and printed as a table. The results kept
  with the project are the ones git tracks in the checkout's ``bench/results/``
  (:func:`committed_results_dir`, :func:`tracked_files`).
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from qora.io.atomic import atomic_path
from qora.provenance import git_state, versions

__all__ = [
    "Timing", "time_device", "time_queued", "time_peer", "fft_pair_floor", "copy_floor", "BenchResult", "versions",
    "git_state", "results_dir", "set_results_dir", "committed_results_dir", "tracked_files", "newest_result",
    "DEFAULT_RESULTS_DIR", "peers_python",
]

DEFAULT_RESULTS_DIR = "qora-bench-results"
_RESULTS_DIR: Path | None = None  # set by ``qora bench --out DIR``


@dataclass
class Timing:
    """Repeated timings of one case, in milliseconds."""

    samples_ms: list

    @property
    def median_ms(self) -> float:
        return float(np.median(self.samples_ms))

    @property
    def min_ms(self) -> float:
        return float(np.min(self.samples_ms))

    @property
    def spread(self) -> float:
        """(p90 - p10) / median: how noisy the repeats were."""
        p10, p90 = np.percentile(self.samples_ms, [10, 90])
        return float((p90 - p10) / self.median_ms) if self.median_ms else 0.0

    def as_dict(self) -> dict:
        return {"median_ms": self.median_ms, "min_ms": self.min_ms, "spread": self.spread,
                "repeats": len(self.samples_ms)}


def median_wall(fn, repeats: int, *, warmup: int = 0):
    """``(fn()'s last result, the median wall time in s)`` of ``repeats`` calls after ``warmup``
    untimed ones: for work that returns to the host (a fit, a preview, a file read)."""
    for _ in range(warmup):
        fn()
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return out, float(np.median(times))


def time_device(backend, fn, *, warmup: int = 3, repeats: int = 20, setup=None, per_call: int = 1) -> Timing:
    """Time ``fn()`` on ``backend``; each sample is one call divided by ``per_call``.

    ``setup()``, if given, runs before each sample outside the timed region (to
    restore inputs that ``fn`` changes). Device work is timed with CUDA events on
    the current stream, so a sample is the work queued by ``fn``, not its launch.
    """
    for _ in range(warmup):
        if setup is not None:
            setup()
        fn()
    backend.synchronize()
    samples = []
    for _ in range(repeats):
        if setup is not None:
            setup()
            backend.synchronize()
        with backend.timer() as t:
            fn()
        samples.append(t.ms / per_call)
    return Timing(samples)


def time_queued(backend, launch, *, repeats: int = 20, flush_bytes: int = 256 * 2**20) -> Timing:
    """Device time of one short launch, with neither the host's launch gap nor a warm L2 in it.

    Timing a single launch between two events also times the host's work between them (the event
    runs at once on an idle device, the kernel only once the host has launched it); timing launches
    back to back on the same buffers lets the later ones read the L2. Here each sample first queues a
    copy of ``flush_bytes`` (far past the 60 MiB L2 of an H200), then the start event, ``launch()``
    and the stop event: the device is still copying while the host launches, so the events bracket
    the kernel alone, and the kernel starts with an L2 holding the copy's data, not its own.
    GPU only.
    """
    if not backend.is_cuda:
        raise ValueError("time_queued times device launches: it needs the CUDA backend")
    cp = backend.xp
    src = cp.empty(flush_bytes // 4, cp.float32)
    dst = cp.empty_like(src)
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    launch()
    samples = []
    for _ in range(repeats):
        backend.synchronize()
        dst[...] = src
        start.record()
        launch()
        stop.record()
        stop.synchronize()
        samples.append(cp.cuda.get_elapsed_time(start, stop))
    return Timing(samples)


def time_peer(run_iterations, n: int, *, best_of: int = 5) -> float:
    """Milliseconds per iteration of a peer, by the difference of ``n`` and ``2n`` iterations.

    ``run_iterations(k)`` must run ``k`` iterations and return only when they are
    done (block until ready). Each length is timed ``best_of`` times and the
    fastest of each is kept (other load only ever adds time, and a one-off cost
    such as a compilation lands in one sample); the result is their difference
    over ``n``. Raises ``RuntimeError`` if the difference is not positive.
    """
    if n < 1:
        raise ValueError("n must be at least 1")
    run_iterations(n)  # compile and warm up (both lengths: a graph per length, a jit per shape)
    run_iterations(2 * n)
    best_n = best_2n = math.inf
    for _ in range(best_of):
        t0 = time.perf_counter()
        run_iterations(n)
        t1 = time.perf_counter()
        run_iterations(2 * n)
        t2 = time.perf_counter()
        best_n = min(best_n, t1 - t0)
        best_2n = min(best_2n, t2 - t1)
    ms = (best_2n - best_n) / n * 1e3
    if not ms > 0:
        raise RuntimeError(f"time_peer: 2n iterations were not slower than n ({best_2n:.6f} s vs {best_n:.6f} s)")
    return ms


def _pairs_per_replay(n_points: int, precision: str) -> tuple[int, float]:
    """Pairs per graph replay and the input magnitude that keeps them in range.

    An unscaled forward+inverse pair multiplies the data by n, so R pairs need
    R*log2(n) + log2(n)/2 octaves of exponent range: fp32 has about 250, fp16
    about 40 with subnormals. Fewer pairs per replay cost a little launch gap at
    the smallest sizes; overflowing would time Inf and NaN arithmetic instead.
    """
    octaves = math.log2(n_points)
    if precision == "fp16":
        return 1, 2.0 ** (10 - octaves)  # inverse output lands near 2^10
    pairs = int(max(1, min(8, (240 // octaves) - 1)))
    return pairs, 2.0 ** (-(pairs + 0.5) * octaves / 2)


def fft_pair_floor(backend, shape, precision: str = "fp32", *, repeats: int = 20, seed: int = 0) -> dict:
    """Time one forward and one inverse in-place C2C transform of ``shape``.

    On the GPU the pair is replayed from a CUDA graph (several pairs per graph for
    fp32, see :func:`_pairs_per_replay`) on random data restored before every
    sample; fp16 uses an ``XtPlanNd`` plan. On the CPU it is ``scipy.fft`` on all
    cores (fp32 only). Returns ``{"ms": median per pair, ...}``.
    """
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape))
    pairs, magnitude = _pairs_per_replay(n, precision)
    host = (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(np.complex64) * np.float32(magnitude)
    if not backend.is_cuda:
        if precision != "fp32":
            raise ValueError("the CPU floor is fp32 only")
        plan = backend.fft.c2c(shape, np.complex64, norm=None)
        x = host.copy()

        def pair():
            plan.forward(x, out=x)
            plan.inverse(x, out=x)

        t = time_device(backend, pair, warmup=2, repeats=max(5, repeats // 4), setup=lambda: np.copyto(x, host))
        return {"ms": t.median_ms, "timing": t.as_dict(), "pairs_per_sample": 1}

    from qora.backend.graph import StepGraph

    xp = backend.xp
    if precision == "fp16":
        plan = backend.fft.half_c2c(shape)
        pristine = xp.asarray(np.stack([host.real, host.imag], axis=-1).astype(np.float16))
    elif precision == "fp32":
        plan = backend.fft.c2c(shape, np.complex64, norm=None)
        pristine = xp.asarray(host)
    else:
        raise ValueError(f"precision must be 'fp32' or 'fp16', got {precision!r}")
    x = pristine.copy()

    def pair():
        plan.forward(x, out=x)
        plan.inverse(x, out=x)

    pair()  # make cuFFT's kernels resident before capture
    graph = StepGraph(pair, repeat=pairs)

    def restore():
        x[...] = pristine

    samples = []
    for i in range(repeats + 3):
        restore()
        backend.synchronize()
        start, stop = xp.cuda.Event(), xp.cuda.Event()
        start.record(graph.stream)
        graph.replay()
        stop.record(graph.stream)
        stop.synchronize()
        if i >= 3:
            samples.append(xp.cuda.get_elapsed_time(start, stop) / pairs)
    finite = bool(xp.isfinite(x.astype(xp.float32) if precision == "fp16" else x).all())
    t = Timing(samples)
    del x, pristine, graph
    return {"ms": t.median_ms, "timing": t.as_dict(), "pairs_per_sample": pairs, "finite": finite,
            "plan_created_s": plan.created_s}


def copy_floor(backend) -> dict:
    """The measured copy bandwidth (GB/s, read + write) with its detail."""
    from qora.backend.device import copy_bandwidth

    gbs, detail = copy_bandwidth(backend)
    return {"gbs": gbs, **detail}


def results_dir() -> Path:
    """Where a benchmark writes its result: the folder given to :func:`set_results_dir` (``qora bench
    --out DIR``), else ``QORA_RESULTS_DIR``, else ``qora-bench-results/`` under the current
    directory; never the source checkout unless asked (``--out bench/results`` there)."""
    if _RESULTS_DIR is not None:
        return _RESULTS_DIR
    env = os.environ.get("QORA_RESULTS_DIR")
    if env:
        return Path(env)
    return Path.cwd() / DEFAULT_RESULTS_DIR


def set_results_dir(directory) -> None:
    """Make :func:`results_dir` return ``directory`` (None: back to the environment and default)."""
    global _RESULTS_DIR
    _RESULTS_DIR = None if directory is None else Path(directory)


def committed_results_dir() -> Path:
    """``bench/results`` of the source checkout: the results the documents cite."""
    return Path(__file__).resolve().parents[3] / "bench" / "results"


def tracked_files(directory: Path) -> set | None:
    """The files under ``directory`` that git tracks (resolved paths), or None where there is no
    git or no repository (then every file counts)."""
    import subprocess

    directory = Path(directory)
    if not directory.is_dir():
        return None
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--", "."], cwd=directory, capture_output=True, timeout=30,
                             check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return {(directory / name).resolve() for name in out.decode().split("\0") if name}


def peers_python() -> Path:
    """The peers' interpreter (``QORA_PEERS_PYTHON`` or ``.peers/bin/python`` of the checkout)."""
    env = os.environ.get("QORA_PEERS_PYTHON")
    if env:
        import shutil

        return Path(shutil.which(env) or env)
    return Path(__file__).resolve().parents[3] / ".peers" / "bin" / "python"


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in text.lower()).strip("-").replace("--", "-")


@dataclass
class BenchResult:
    """One benchmark run: its cases and everything needed to trust and repeat it."""

    benchmark: str
    backend: str
    device: dict
    cases: dict = field(default_factory=dict)
    notes: dict = field(default_factory=dict)
    columns: tuple = ("ms",)
    git: dict = field(default_factory=git_state)  # taken when the run starts, not when it is written

    def add(self, name: str, **values) -> None:
        self.cases[name] = values

    def as_dict(self) -> dict:
        return {
            "benchmark": self.benchmark,
            "backend": self.backend,
            "device": self.device,
            "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "versions": versions(),
            **self.git,
            "cases": self.cases,
            "notes": self.notes,
        }

    def write(self, directory: Path | None = None) -> Path:
        """Write the JSON atomically to ``directory/<benchmark>/`` (``directory`` defaults to
        :func:`results_dir`): one folder per benchmark, apart from logs and profiler dumps."""
        directory = (Path(directory) if directory is not None else results_dir()) / self.benchmark
        directory.mkdir(parents=True, exist_ok=True)
        data = self.as_dict()
        stamp = data["date"].replace(":", "").replace("-", "")[:15]
        path = directory / f"{self.benchmark}-{_slug(self.device.get('name', 'unknown'))}-{stamp}.json"
        with atomic_path(path) as tmp:
            tmp.write_text(json.dumps(data, indent=2, sort_keys=False, default=_json_default) + "\n")
        return path

    def table(self) -> str:
        """The cases as a fixed-width text table of ``columns``."""
        cols = list(self.columns)
        width = max([len("case")] + [len(k) for k in self.cases])
        lines = [f"{'case':<{width}}  " + "  ".join(f"{c:>12}" for c in cols)]
        for name, vals in self.cases.items():
            cells = []
            for c in cols:
                v = vals.get(c)
                cells.append(f"{v:>12.4g}" if isinstance(v, (int, float)) and v is not None else f"{str(v):>12}")
            lines.append(f"{name:<{width}}  " + "  ".join(cells))
        return "\n".join(lines)


def _json_default(o):
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    return str(o)


def newest_result(benchmark: str, directory: Path | None = None, *, tracked: bool = False) -> tuple[Path, dict] | None:
    """The newest result file of ``benchmark`` in ``directory/<benchmark>/`` (by its recorded date),
    or None. With ``tracked``, only files git tracks count (all of them where there is no git)."""
    directory = Path(directory) if directory is not None else results_dir()
    allowed = tracked_files(directory) if tracked else None
    best = None
    for path in sorted((directory / benchmark).glob("*.json")):
        if allowed is not None and path.resolve() not in allowed:
            continue
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if data.get("benchmark") != benchmark:
            continue
        if best is None or data.get("date", "") > best[1].get("date", ""):
            best = (path, data)
    return best


def shared_data_folder(kind: str, env: str):
    """Where the project's measured files of ``kind`` ("cdi", "odt", ...) are: ``$env``, else ``$QORA_SHARED_DATA``/kind,
    else ``shared/data/kind`` beside the checkout."""
    import os
    from pathlib import Path

    if os.environ.get(env):
        return Path(os.environ[env])
    if os.environ.get("QORA_SHARED_DATA"):
        return Path(os.environ["QORA_SHARED_DATA"]) / kind
    return Path(__file__).resolve().parents[4] / "shared" / "data" / kind
