"""fused_fft's slice loops split into concurrent lanes (``FusedSteps(lanes=L)``: groups of illuminations on
their own streams, branches of one CUDA graph) against one lane and against cuFFT, side by side in one run
with a copy kernel: forward and gradient at n^3 (49 illuminations, one chunk), % of copy at the model bytes.

A pass of one lane fills the GPU in about two waves of blocks, then drains; the next dependent pass starts
only when the last block is done. With two or more lanes another lane's pass runs in those gaps, and a
row pass (transform-bound, its DRAM idle half the time) can share the SMs with a column pass (mostly DRAM).

    PYTHONPATH=src python bench/probes/bpm_lanes_probe.py [--sizes 256,128] [--lanes 1,2,3,4] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import os

from qora.backend import resolve
from qora.bench.common import copy_floor, time_device


def probe(be, n: int, copy: float, lanes: list[int], repeats: int) -> dict:
    import numpy as np

    from qora.holo import phantoms as P
    from qora.holo import reference as R
    from qora.holo.bpm_cuda import BpmDevice
    from qora.holo.bpm_fused import SLICE_BYTES, FusedSteps
    from qora.holo.plans import bpm_tables

    cp = be.xp
    g = R.geometry(n)
    sphere = P.Sphere(radius=1.5, index=1.40)
    truth = P.render_spheres([sphere], n, g.pixel, g.medium_index, supersample=3)
    x = cp.asarray((truth - g.medium_index).astype(np.float32))
    out = cp.empty((g.count, n, n), cp.complex64)
    elements = g.count * n**3
    tables = bpm_tables(g, n)
    rows = {}

    def pct(variant, direction, ms):
        model = SLICE_BYTES[variant, direction] + (8 if direction == "forward" else 16) / g.count
        return 100 * model * elements / (ms * 1e-3) / 1e9 / copy

    dev = BpmDevice(g, tables, variant="cufft")
    dev.set_contrast(0.9 * x)  # the data: the model's own fields of 0.9 x (the exact partial waves are slow at 512)
    dev.forward(out)
    data = out.copy()
    dev.set_contrast(x)
    fwd = time_device(be, lambda: dev.forward(out), warmup=1, repeats=repeats).median_ms
    grad = time_device(be, lambda: dev.reverse(data), warmup=1, repeats=repeats).median_ms
    rows["cufft"] = {"forward_ms": fwd, "gradient_ms": grad, "forward_pct": pct("cufft", "forward", fwd),
                     "gradient_pct": pct("cufft", "gradient", grad)}
    print(f"  {n}^3 cufft: forward {fwd:.2f} ms ({rows['cufft']['forward_pct']:.0f}% of copy), gradient "
          f"{grad:.2f} ms ({rows['cufft']['gradient_pct']:.0f}%)", flush=True)
    dev = None
    cp.get_default_memory_pool().free_all_blocks()

    dev = BpmDevice(g, tables, variant="fused_fft")
    dev.set_contrast(x)
    ref = None
    for lane in lanes:
        dev.fused = FusedSteps(dev, lanes=lane)
        run = {"forward": lambda: dev.fused.forward(out), "gradient": lambda: dev.fused.queue_reverse(data)}
        for fn in run.values():  # the first call from the host, the second captures: timed calls replay
            fn()
            fn()
        fwd = time_device(be, run["forward"], warmup=1, repeats=repeats).median_ms
        grad = time_device(be, run["gradient"], warmup=1, repeats=repeats).median_ms
        dev.fused.forward(out)
        field = out.copy()
        dev.fused.queue_reverse(data)
        gradient = dev.grad.copy()
        if ref is None:
            ref = (field, gradient)
        diff = (float(cp.abs(field - ref[0]).max()),
                float(cp.linalg.norm(gradient - ref[1]) / cp.linalg.norm(ref[1])))
        row = rows[f"fused_fft_lanes{lane}"] = {
            "forward_ms": fwd, "gradient_ms": grad, "forward_pct": pct("fused_fft", "forward", fwd),
            "gradient_pct": pct("fused_fft", "gradient", grad), "forward_x_cufft": rows["cufft"]["forward_ms"] / fwd,
            "gradient_x_cufft": rows["cufft"]["gradient_ms"] / grad, "field_max_diff": diff[0],
            "gradient_rel_diff": diff[1], "graphs": len(dev.fused._graphs)}
        print(f"  {n}^3 fused_fft lanes {lane}: forward {fwd:.2f} ms ({row['forward_pct']:.1f}% of copy at 64 B/el, "
              f"x{row['forward_x_cufft']:.2f} cuFFT), gradient {grad:.2f} ms ({row['gradient_pct']:.1f}%, "
              f"x{row['gradient_x_cufft']:.2f}); against 1 lane: field {diff[0]:.1e} (max abs), gradient "
              f"{diff[1]:.1e}; {row['graphs']} graphs", flush=True)
    dev = None
    cp.get_default_memory_pool().free_all_blocks()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="256,128")
    parser.add_argument("--lanes", default="1,2,3,4")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default=None, help="folder for the JSON of the rows")
    args = parser.parse_args()
    be = resolve("cuda")
    copy = copy_floor(be)["gbs"]
    name = be.device_facts().name
    print(f"{name}; copy {copy:.0f} GB/s", flush=True)
    lanes = [int(v) for v in args.lanes.split(",")]
    result = {"device": name, "copy_gbs": copy, "commit": os.environ.get("QORA_COMMIT"), "sizes": {}}
    for n in (int(v) for v in args.sizes.split(",")):
        result["sizes"][n] = probe(be, n, copy, lanes, args.repeats)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "bpm_lanes_probe.json"), "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
