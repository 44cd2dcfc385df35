"""Probe of FGP-step kernel shapes at 512^3 on the GPU (issue 6; docs/holo-performance.md).

Times candidate kernels built from the same device functions as ``fgp_fused`` (so they
give the same result bit for bit, checked here) on the buffers of a TV solver:
the fused kernel with other launch bounds and block shapes, and z-marching versions that
carry the primal point of the next plane in a register (one recomputation fewer per voxel).
Run on the device: ``PYTHONPATH=src python3 bench/fgp_probe.py [N]``.
"""

import sys

import cupy as cp
import numpy as np

from qora.backend.kernels import kernel_source
from qora.holo import cuda
from qora.holo import reference as R

PROBES = r"""
template <int PLANES>
__device__ __forceinline__ void fgp_column_body(TV_ARGS) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x, j = blockIdx.y * blockDim.y + threadIdx.y;
    const int k0 = blockIdx.z * PLANES;
    if (i >= nx || j >= ny || k0 >= nz) return;
    float zc = tv_primal(v, r, make_dims(nz, ny, nx), k0, j, i, lam, nonnegative);
    const int k_end = min(k0 + PLANES, nz);
    for (int k = k0; k < k_end; ++k) zc = fgp_fused_voxel(TV_PASS, k, j, i, zc);
}
extern "C" __global__ void __launch_bounds__(256) fgp_column2(TV_ARGS) { fgp_column_body<2>(TV_PASS); }
extern "C" __global__ void __launch_bounds__(256) fgp_column4(TV_ARGS) { fgp_column_body<4>(TV_PASS); }
extern "C" __global__ void __launch_bounds__(256) fgp_column8(TV_ARGS) { fgp_column_body<8>(TV_PASS); }
extern "C" __global__ void __launch_bounds__(256) fgp_column16(TV_ARGS) { fgp_column_body<16>(TV_PASS); }
extern "C" __global__ void __launch_bounds__(256, 8) fgp_column4_lb8(TV_ARGS) { fgp_column_body<4>(TV_PASS); }
extern "C" __global__ void __launch_bounds__(256, 8) fgp_fused_lb8(TV_ARGS) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x, j = blockIdx.y * blockDim.y + threadIdx.y, k = blockIdx.z;
    if (i >= nx || j >= ny) return;
    fgp_fused_voxel(TV_PASS, k, j, i, tv_primal(v, r, make_dims(nz, ny, nx), k, j, i, lam, nonnegative));
}
"""

# name: (kernel, block, planes per block)
CASES = {
    "fused 32x8": ("fgp_fused", (32, 8, 1), 1),
    "fused 32x4": ("fgp_fused", (32, 4, 1), 1),
    "fused 64x4": ("fgp_fused", (64, 4, 1), 1),
    "fused 128x2": ("fgp_fused", (128, 2, 1), 1),
    "fused lb8 32x8": ("fgp_fused_lb8", (32, 8, 1), 1),
    "column2 32x8": ("fgp_column2", (32, 8, 1), 2),
    "column4 32x8": ("fgp_column4", (32, 8, 1), 4),
    "column8 32x8": ("fgp_column8", (32, 8, 1), 8),
    "column16 32x8": ("fgp_column16", (32, 8, 1), 16),
    "column4 64x4": ("fgp_column4", (64, 4, 1), 4),
    "column4 lb8 32x8": ("fgp_column4_lb8", (32, 8, 1), 4),
}


def main(n=512, steps=10):
    g = R.geometry(n)
    work = cuda.WorkArea()
    solver = cuda.Solver(g, n, work, method="tv", iterations=1, tv_inner=1, tv_weight=1e-3)
    rng = np.random.default_rng(0)
    solver.v[...] = cp.asarray(rng.standard_normal(n**3).astype(np.float32) * 1e-3)
    solver.p[...] = cp.asarray(np.clip(rng.standard_normal(3 * n**3), -1, 1).astype(np.float32))
    solver.r[...] = solver.p
    module = cp.RawModule(code=kernel_source("qora.holo", "holo.cu") + PROBES, options=("--std=c++17",))
    dims = (np.int32(n),) * 3
    lam, step, m, one = np.float32(solver.lam), np.float32(1 / (12 * solver.lam)), np.float32(0.3), np.int32(1)
    p0, r0 = solver.p.copy(), solver.r.copy()
    reference = None
    copy_gbs = cuda_copy = None
    from qora.backend import resolve
    from qora.bench.common import copy_floor

    copy_gbs = copy_floor(resolve("cuda"))["gbs"]
    print(f"n={n}, copy {copy_gbs:.0f} GB/s; 13 volumes = {13 * 4 * n**3 / 2**20:.0f} MiB")
    for name, (kernel, block, planes) in CASES.items():
        fn = module.get_function(kernel)
        grid = (-(-n // block[0]), -(-n // block[1]), -(-n // planes))
        args = (solver.v, solver.r, solver.p, solver.r_next, *dims, lam, one, step, m)
        solver.p[...] = p0
        fn(grid, block, args)
        out = (solver.p.get(), solver.r_next.get())
        if reference is None:
            reference = out
        same = all(np.array_equal(a, b) for a, b in zip(out, reference))
        for _ in range(3):
            fn(grid, block, args)
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        samples = []
        for _ in range(5):
            start.record()
            for _ in range(steps):
                fn(grid, block, args)
            stop.record()
            stop.synchronize()
            samples.append(cp.cuda.get_elapsed_time(start, stop) / steps)
        ms = float(np.median(samples))
        gbs = 13 * 4 * n**3 / ms / 1e6
        print(f"  {name:<18} {ms:7.3f} ms  {gbs:6.0f} GB/s by the 13-volume model = {100 * gbs / copy_gbs:5.1f}% "
              f"of copy; regs {fn.num_regs}; bitwise equal to fused: {same}")
    del p0, r0, cuda_copy


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 512)
