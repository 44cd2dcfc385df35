"""Probe (issue 43, holo's GP loop): each pass of the fused GP loop timed alone, and the loop, at each layout
built, against cuFFT's loop (C2R, clamp, R2C, restore) on the same grid; GB/s by the passes' byte model; the x pass
plain and packed (two rows a transform).

    PYTHONPATH=src python bench/probes/gp_fused_probe.py [N ...]     (default 256 512)
"""

import sys

import cupy as cp
import numpy as np

from qora.holo import gp_fused
from qora.holo import kernels as K
from qora.backend.fft import C2R, R2C
from qora.holo.cuda_stages import WorkArea

CANDIDATES = {256: [(16, 8), (16, 16), (8, 16)], 512: [(16, 8), (8, 8), (16, 4)], 128: [(8, 16)]}


def timed(fn, repeats=20):
    fn()
    start, end = cp.cuda.Event(), cp.cuda.Event()
    samples = []
    for _ in range(5):
        start.record()
        for _ in range(repeats):
            fn()
        end.record()
        end.synchronize()
        samples.append(cp.cuda.get_elapsed_time(start, end) / repeats)
    return float(np.median(samples))


def cufft_iteration(n):
    half = n // 2 + 1
    nh = n * n * half
    work = WorkArea()
    inembed, onembed = (n, n, 2 * half), (n, n, half)
    forward = work.plan(R2C, (n,) * 3, inembed=inembed, onembed=onembed)
    backward = work.plan(C2R, (n,) * 3, inembed=onembed, onembed=inembed)
    work.allocate()
    e = cp.zeros(nh, cp.complex64)
    a = cp.zeros(nh, cp.complex64)
    counts = cp.zeros(nh, cp.uint8)
    p = e.data.ptr

    def step():
        backward.execute(p, p)
        K.clamp_real(v=e, quads=n * n * 2 * half // 4, scale=1.0 / n**3)
        forward.execute(p, p)
        K.restore_half(e=e, a=a, counts=counts, pairs=nh // 2)
    return timed(step)


def main(sizes):
    copy = cp.empty(2**28, cp.uint8)
    dst = cp.empty_like(copy)
    copy_ms = timed(lambda: dst.__setitem__(Ellipsis, copy))
    gbs = 2 * copy.nbytes / copy_ms / 1e6
    print(f"{cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}: copy {gbs:.0f} GB/s", flush=True)
    for n in sizes:
        values = n * n * (n // 2 + 1)
        ref = cufft_iteration(n)
        print(f"n={n}: cuFFT loop iteration {ref:.4f} ms", flush=True)
        for layout in CANDIDATES[n]:
            g = gp_fused.FusedGP(n, layout)
            e = cp.zeros(n * n * g.stride, cp.complex64)
            a = cp.zeros_like(e)
            counts = cp.ones(e.size, cp.uint8)  # every tile measured: the restoring z pass runs on all of them
            every = g.measured_tiles(counts)
            passes = {
                "inverse_y": lambda: g._strided("inverse", e, False),
                "rows": lambda: g._rows("rows", e, np.float32(1e-6), np.float32(0), np.float32(np.inf)),
                "rows_packed": lambda: g._rows("rows_packed", e, np.float32(1e-6), np.float32(0), np.float32(np.inf)),
                "forward_y": lambda: g._strided("forward", e, False),
                "restore_z": lambda: g._restore(e, a, counts, every),
                "inverse_z": lambda: g._strided("inverse", e, True),
            }
            parts = []
            for name, fn in passes.items():
                ms = timed(fn)
                model = gp_fused.PASS_BYTES.get(name, 16) * values  # rows_packed, inverse_z: 16 B
                parts.append(f"{name} {ms:.4f} ms ({model / ms / 1e6 / gbs:.0%})")
            loop = timed(lambda: g.run(e, a, counts, 10, 1.0 / n**3, (0.0, np.inf)), repeats=3) / 10
            model = sum(gp_fused.PASS_BYTES.values()) * values
            print(f"  {layout}: iteration {loop:.4f} ms = {loop / ref:.3f}x cuFFT ({model / loop / 1e6 / gbs:.0%} of "
                  f"copy); " + ", ".join(parts), flush=True)
        for packed in (False, True):
            g = gp_fused.FusedGP(n, packed=packed)
            e = cp.zeros(n * n * g.stride, cp.complex64)
            a, counts = cp.zeros_like(e), cp.ones(e.size, cp.uint8)
            loop = timed(lambda: g.run(e, a, counts, 10, 1.0 / n**3, (0.0, np.inf)), repeats=3) / 10
            print(f"  default layout, x pass {'packed' if packed else 'plain'}: iteration {loop:.4f} ms = "
                  f"{loop / ref:.3f}x cuFFT", flush=True)


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [256, 512])
