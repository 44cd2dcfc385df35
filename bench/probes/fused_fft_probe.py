"""fused_fft against graph, side by side in one run: ms per HIO iteration at the phase table's sizes,
the FFT-pair floor and the copy bandwidth, the modeled bytes per element of each, each pass timed
alone, and the candidate kernels (docs/phase-performance.md, "fused_fft candidates") beside the
default, each with its difference from graph after 20 HIO iterations from the same start.

    PYTHONPATH=src python bench/probes/fused_fft_probe.py [--sizes 256x256,...] [--candidates async,pipe,...]
        [--out DIR]

A candidate is ``<strided_load>[/<lines per block>]`` (FusedFFTEngine's strided_load and strided_lines), or
``split`` / ``split+<strided_load>`` for the 2D column pass in three passes (column_split; 2D heights
2048 and 4096 only), ``prefetch`` for the x pass (contig_load), which may follow another with "+"
(``async+prefetch``); ``ept16`` is the plain kernels with 16 elements per thread, ``plain`` the kernels
before the candidates (the "fused_fft" row is the engine's default, the measured layout).
"""

from __future__ import annotations

import argparse
import json
import time
from functools import lru_cache
from pathlib import Path

import numpy as np

from qora.backend import resolve
from qora.bench.common import copy_floor, fft_pair_floor, time_peer
from qora.bench.phase import BETA, CUDA_SHAPES, ELEMENTWISE_BYTES, _cuda_engine_runner, _iterations_for, \
    fused_fft_bytes
from qora.bench.phase import workload as _workload


@lru_cache(maxsize=1)
def workload(shape):
    """The bench workload, made once per shape (512^3 takes seconds on the host)."""
    return _workload(shape)

PASS_BYTES = {"contig forward": 16, "strided forward": 16, "strided inverse": 16, "strided modulus": 20,
              "contig update+forward": 33, "split forward": 16, "split middle": 20, "split inverse": 16}
DEFAULT_CANDIDATES = "plain,ept16,async,pipe,pipe/8,async/8,prefetch,async+prefetch,split,split+async"
PARITY_ITERATIONS = 20


#: what a candidate does not name runs as the kernels before the candidates (the engine's own default is
#: now the measured layout, :func:`qora.phase.cuda_fused.measured_layout`, timed as the "fused_fft" row)
PLAIN = {"strided_load": "plain", "contig_load": "plain", "column_split": False}


def candidate_options(text: str, shape) -> dict | None:
    """FusedFFTEngine keywords of candidate ``text`` at ``shape``, or None where it does not apply."""
    options = _named_options(text, shape)
    return None if options is None else {**PLAIN, **options}


def _named_options(text: str, shape) -> dict | None:
    if text == "plain":
        return {}
    if text == "ept16":
        return {"elements_per_thread": 16}
    if text.endswith("prefetch"):  # the x pass's candidate, alone or with a strided one ("async+prefetch")
        inner = text[: -len("prefetch")].rstrip("+")
        options = _named_options(inner, shape) if inner else {}
        return None if options is None else {**options, "contig_load": "prefetch"}
    if text.startswith("split"):
        if len(shape) != 2 or shape[0] not in (2048, 4096):
            return None
        load = text.partition("+")[2] or "plain"
        return {"column_split": True, "strided_load": load}
    load, _, lines = text.partition("/")
    options = {"strided_load": load}
    if lines:
        options["strided_lines"] = int(lines)
    return options


def pass_breakdown(shape, repeat: int = 20, **options) -> dict:
    """ms and GB/s (of the modeled bytes) of each pass of a fused_fft iteration, timed alone."""
    from qora.phase.cuda_fused import SPLIT_N1, FusedFFTEngine

    cp = resolve("cuda").xp
    amp, support, x0 = workload(shape)
    e = FusedFFTEngine(amp, support, 1, **options)
    e.set_x(x0)
    e._ensure_history(repeat * 4)
    n_el = int(np.prod(shape))
    inner_y = shape[-1]
    calls = {"contig forward": lambda: e._contig("forward"),
             "contig update+forward": lambda: e._contig("update", e.support, np.float32(1.0), np.float32(-0.9),
                                                      np.int32(0), e.counter, np.int32(1))}
    if len(shape) == 2 and e.column_split:
        rest = shape[0] // SPLIT_N1
        calls["split forward"] = lambda: e._strided("forward", SPLIT_N1, rest * inner_y, 1)
        calls["split middle"] = lambda: e._split(rest, inner_y, SPLIT_N1)
        calls["split inverse"] = lambda: e._strided("inverse", SPLIT_N1, rest * inner_y, 1)
    elif len(shape) == 2:
        calls["strided modulus"] = lambda: e._modulus(shape[0], inner_y, 1)
    else:
        calls["strided forward"] = lambda: e._strided("forward", shape[1], inner_y, shape[0])
        calls["strided inverse"] = lambda: e._strided("inverse", shape[1], inner_y, shape[0])
        calls["strided modulus"] = lambda: e._modulus(shape[0], shape[1] * shape[2], 1)
    out = {}
    for name, call in calls.items():
        call()
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        e._reset()
        start.record()
        for _ in range(repeat):
            call()
        stop.record()
        stop.synchronize()
        ms = cp.cuda.get_elapsed_time(start, stop) / repeat
        out[name] = {"ms": ms, "gbs": PASS_BYTES[name] * n_el / (ms * 1e-3) / 1e9}
    out["kernels"] = {**e.strided_kernels, **{f"contig {k}": v for k, v in e.contig_kernels.items()}}
    return out


def _ran(engine, options) -> bool:
    """Whether the candidate's kernels ran somewhere (not only the plain ones it falls back to)."""
    if options.get("contig_load", "plain") != "plain" and \
            not any(v.endswith(f"_{options['contig_load']}") for v in engine.contig_kernels.values()):
        return False
    ran = list(engine.strided_kernels.values())
    load = options.get("strided_load", "plain")
    if options.get("column_split") and not any(str(k).startswith("split") for k in engine.strided_kernels):
        return False
    if load != "plain" and not any(f"_{load}" in v for v in ran):
        return False
    lines = options.get("strided_lines")
    return lines is None or any(v.startswith(f"{lines}_") for v in ran)


def _runner(shape, variant: str, options):
    """(engine, iterate(k)) of a phase variant, or of fused_fft with the candidate's ``options``."""
    if options is None:
        return _cuda_engine_runner(variant, shape)
    from qora.phase.cuda_fused import FusedFFTEngine

    amp, support, x0 = workload(shape)
    engine = FusedFFTEngine(amp, support, 1, **options)
    engine.set_x(x0[None])
    return engine, lambda k: engine.iterate(k, 1.0, -BETA)


def _after(engine, shape) -> np.ndarray:
    """x after PARITY_ITERATIONS HIO iterations from the workload's start."""
    engine.set_x(workload(shape)[2][None])
    engine.iterate(PARITY_ITERATIONS, 1.0, -BETA)
    return engine.get_x()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default=",".join("x".join(map(str, s)) for s in CUDA_SHAPES))
    parser.add_argument("--variants", default="graph,fused_fft")
    parser.add_argument("--candidates", default=DEFAULT_CANDIDATES, help="fused_fft candidates ('' for none)")
    parser.add_argument("--target-s", type=float, default=0.1, help="seconds per timed run of one variant")
    parser.add_argument("--no-passes", action="store_true", help="skip the per-pass timings")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    be = resolve("cuda")
    copy = copy_floor(be)["gbs"]
    rows = []
    started = time.perf_counter()
    print(f"{be.device_facts().name}; copy {copy:.0f} GB/s", flush=True)
    candidates = [c for c in args.candidates.split(",") if c]
    for text in args.sizes.split(","):
        shape = tuple(int(v) for v in text.split("x"))
        n_el = int(np.prod(shape))
        pair = fft_pair_floor(be, shape, "fp32")["ms"]
        row = {"shape": list(shape), "fft_pair_ms": pair,
               "graph_floor_ms": pair + ELEMENTWISE_BYTES["graph"] * n_el / (copy * 1e9) * 1e3,
               "fused_model_ms": fused_fft_bytes(shape) * n_el / (copy * 1e9) * 1e3, "kernels": {}}
        runs = [(v, None) for v in args.variants.split(",")]
        runs += [(f"fused_fft[{c}]", candidate_options(c, shape)) for c in candidates]
        reference = None
        for name, options in runs:
            if name.startswith("fused_fft[") and options is None:
                continue
            try:
                engine, it = _runner(shape, name, options)
            except ValueError as exc:  # a size the variant or candidate is not built for
                row[name] = None
                print(f"  {text} {name}: not run ({exc})", flush=True)
                continue
            if options is not None and not _ran(engine, options):
                print(f"  {text} {name}: not built at this size (kernels {engine.strided_kernels}); skipped", flush=True)
                engine = it = None
                continue
            try:
                t0 = time.perf_counter()
                it(2)
                n = _iterations_for((time.perf_counter() - t0) * 1e3 / 2, target_s=args.target_s)
                row[name] = time_peer(it, n, best_of=3)
                x = _after(engine, shape)
            except Exception as exc:  # noqa: BLE001 - one failing candidate must not end the run
                row[name] = None
                print(f"  {text} {name}: failed: {exc!r}", flush=True)
                engine = it = None
                continue
            if name == "graph":
                reference = x
            elif reference is not None:
                row[f"{name}_rel_to_graph"] = float(np.linalg.norm(x - reference) / np.linalg.norm(reference))
            if options is not None:
                row["kernels"][name] = {**engine.strided_kernels, **{f"contig {k}": v for k, v in
                                                                      engine.contig_kernels.items()}}
            print(f"  {text} {name}: {row[name]:.4f} ms" +
                  (f" ({row[name] / row['graph']:.3f}x graph, {row.get(f'{name}_rel_to_graph', 0):.1e} from graph "
                   f"after {PARITY_ITERATIONS} HIO)" if "graph" in row and name != "graph" else ""), flush=True)
            del engine, it
            be.xp.get_default_memory_pool().free_all_blocks()
        if row.get("graph") and row.get("fused_fft"):
            row["fused_vs_graph"] = row["fused_fft"] / row["graph"]
            row["fused_vs_model"] = row["fused_fft"] / row["fused_model_ms"]
        if "fused_fft" in args.variants and len(shape) >= 2 and not args.no_passes:
            row["passes"] = pass_breakdown(shape)
            for c in candidates:
                options = candidate_options(c, shape)
                if options is not None and row.get(f"fused_fft[{c}]") is not None:
                    try:
                        row[f"passes[{c}]"] = pass_breakdown(shape, **options)
                    except Exception as exc:  # noqa: BLE001 - one failing candidate must not end the run
                        print(f"    passes[{c}]: failed: {exc!r}", flush=True)
            for key in [k for k in row if k.startswith("passes")]:
                print(f"    {key}: " + ", ".join(f"{k} {v['ms'] * 1e3:.1f} us {v['gbs']:.0f} GB/s"
                                             for k, v in row[key].items() if k != "kernels"), flush=True)
        rows.append(row)
    print(f"probe took {time.perf_counter() - started:.0f} s", flush=True)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "fused_fft_probe.json").write_text(json.dumps({"copy_gbs": copy, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
