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
        for variant in args.variants.split(","):
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
        rows.append(row)
        print(json.dumps(row))
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "fused_fft_probe.json").write_text(json.dumps({"copy_gbs": copy, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
