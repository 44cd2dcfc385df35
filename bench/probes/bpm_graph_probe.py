"""The fused_fft BPM's slice loop launched from the host against the same loop replayed as one CUDA graph
(``qora.backend.graph.StepGraph``), forward and gradient at n^3 (49 illuminations, one chunk), side by side
in one run with a copy kernel. The passes are dependent launches of 25-50 us each (512 per forward at
256^3); the question is how much of the measured time is the gap between them.

    PYTHONPATH=src python bench/probes/bpm_graph_probe.py [--sizes 256,128] [--repeats 5]
"""

from __future__ import annotations

import argparse

from qora.backend import resolve
from qora.backend.graph import StepGraph
from qora.bench.common import copy_floor, time_device


def probe(be, n: int, copy: float, repeats: int) -> None:
    import numpy as np

    from qora.holo import phantoms as P
    from qora.holo import reference as R
    from qora.holo.bpm_cuda import BpmDevice
    from qora.holo.bpm_fused import SLICE_BYTES
    from qora.holo.plans import bpm_tables

    cp = be.xp
    g = R.geometry(n)
    sphere = P.Sphere(radius=1.5, index=1.40)
    truth = P.render_spheres([sphere], n, g.pixel, g.medium_index, supersample=3)
    dev = BpmDevice(g, bpm_tables(g, n), variant="fused_fft")
    dev.fused.graphs = False  # the engine's own graphs off: "launched" is every pass from the host
    dev.set_contrast(cp.asarray((truth - g.medium_index).astype(np.float32)))
    data = cp.asarray(P.partial_wave_ratio(sphere, g) + 1, cp.complex64)
    out = cp.empty((g.count, n, n), cp.complex64)
    elements = g.count * n**3
    dev.fused.forward(out)
    dev.fused.reverse(data)  # allocates the stored envelopes before any capture
    direct = {"forward": lambda: dev.fused.forward(out), "gradient": lambda: dev.fused.queue_reverse(data)}
    ref = {"forward": out.copy()}
    dev.fused.queue_reverse(data)
    ref["gradient"] = dev.grad.copy()
    for direction, fn in direct.items():
        graph = StepGraph(fn)
        t_direct = time_device(be, fn, warmup=1, repeats=repeats).median_ms
        t_graph = time_device(be, graph.replay, warmup=1, repeats=repeats).median_ms
        result = out if direction == "forward" else dev.grad
        diff = float(cp.linalg.norm(result - ref[direction]) / cp.linalg.norm(ref[direction]))
        model = SLICE_BYTES["fused_fft", direction] + (8 if direction == "forward" else 16) / dev.chunk
        pct = {k: 100 * model * elements / (ms * 1e-3) / 1e9 / copy for k, ms in (("direct", t_direct),
                                                                                ("graph", t_graph))}
        print(f"  {n}^3 fused_fft {direction}: launched {t_direct:.2f} ms ({pct['direct']:.0f}% of copy at "
              f"{model:.0f} B/el), graph {t_graph:.2f} ms ({pct['graph']:.0f}%), x{t_direct / t_graph:.3f}; "
              f"graph against launched {diff:.1e}", flush=True)
        graph = None
    dev = None
    cp.get_default_memory_pool().free_all_blocks()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="256,128")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    be = resolve("cuda")
    copy = copy_floor(be)["gbs"]
    print(f"{be.device_facts().name}; copy {copy:.0f} GB/s", flush=True)
    for n in (int(v) for v in args.sizes.split(",")):
        probe(be, n, copy, args.repeats)


if __name__ == "__main__":
    main()
