"""fused_fft against graph, side by side in one run: ms per HIO iteration at the phase table's sizes,
the FFT-pair floor and the copy bandwidth, and the modeled bytes per element of each.

    PYTHONPATH=src python bench/probes/fused_fft_probe.py [--sizes 256x256,...] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from qora.backend import resolve
from qora.bench.common import copy_floor, fft_pair_floor, time_peer
from qora.bench.phase import CUDA_SHAPES, ELEMENTWISE_BYTES, _cuda_engine_runner, _iterations_for, fused_fft_bytes


PASS_BYTES = {"contig forward": 16, "strided forward": 16, "strided inverse": 16, "strided modulus": 20,
              "contig update+forward": 33}


def pass_breakdown(shape, repeat: int = 20, ept=None) -> dict:
    """ms and GB/s (of the modeled bytes) of each pass of a fused_fft iteration, timed alone."""
    from qora.bench.phase import workload
    from qora.phase.cuda_fused import FusedFFTEngine

    be = resolve("cuda")
    cp = be.xp
    amp, support, x0 = workload(shape)
    e = FusedFFTEngine(amp, support, 1, elements_per_thread=ept)
    e.set_x(x0)
    e._ensure_history(repeat * 4)
    n_el = int(np.prod(shape))
    inner_y = shape[-1]
    calls = {"contig forward": lambda: e._contig("forward"),
             "contig update+forward": lambda: e._contig("update", e.support, np.float32(1.0), np.float32(-0.9),
                                                      np.int32(0), e.counter, np.int32(1))}
    if len(shape) == 2:
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
    return out


def _ept_runner(shape, ept):
    """fused_fft with ``ept`` elements per thread where built."""
    from qora.bench.phase import BETA, workload
    from qora.phase.cuda_fused import FusedFFTEngine

    amp, support, x0 = workload(shape)
    engine = FusedFFTEngine(amp, support, 1, elements_per_thread=ept)
    engine.set_x(x0[None])
    return engine, lambda k: engine.iterate(k, 1.0, -BETA)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default=",".join("x".join(map(str, s)) for s in CUDA_SHAPES))
    parser.add_argument("--variants", default="graph,fused_fft")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    be = resolve("cuda")
    copy = copy_floor(be)["gbs"]
    rows = []
    print(f"copy {copy:.0f} GB/s")
    for text in args.sizes.split(","):
        shape = tuple(int(v) for v in text.split("x"))
        n_el = int(np.prod(shape))
        pair = fft_pair_floor(be, shape, "fp32")["ms"]
        row = {"shape": list(shape), "fft_pair_ms": pair,
               "graph_floor_ms": pair + ELEMENTWISE_BYTES["graph"] * n_el / (copy * 1e9) * 1e3,
               "fused_model_ms": fused_fft_bytes(shape) * n_el / (copy * 1e9) * 1e3}
        variants = args.variants.split(",") + ["fused_fft_ept16"]
        for variant in variants:
            if variant == "fused_fft_ept16":
                engine, it = _ept_runner(shape, 16)
            else:
                engine, it = _cuda_engine_runner(variant, shape)
            t0 = time.perf_counter()
            it(2)
            n = _iterations_for((time.perf_counter() - t0) * 1e3 / 2)
            row[variant] = time_peer(it, n)
            del engine, it
            be.xp.get_default_memory_pool().free_all_blocks()
        if "graph" in row and "fused_fft" in row:
            row["fused_vs_graph"] = row["fused_fft"] / row["graph"]
            row["fused_vs_model"] = row["fused_fft"] / row["fused_model_ms"]
        if "fused_fft" in args.variants and len(shape) >= 2:
            row["passes"] = pass_breakdown(shape)
            row["passes_ept16"] = pass_breakdown(shape, ept=16)
        rows.append(row)
        print(json.dumps(row))
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "fused_fft_probe.json").write_text(json.dumps({"copy_gbs": copy, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
