"""Probe of FGP-step kernel shapes at 512^3 on the GPU (issue 6; docs/holo-performance.md).

Times candidate kernels built from the same device functions as ``fgp_fused`` (so they
give the same result bit for bit, checked here) on the buffers of a TV solver:
the fused kernel with other launch bounds and block shapes, and z-marching versions that
carry the primal point of the next plane in a register (one recomputation fewer per voxel).
Run on the device: ``PYTHONPATH=src python3 bench/probes/fgp_probe.py [N]``.
"""

import sys

import numpy as np

from qora.backend import require_cupy
from qora.backend.kernels import kernel_source
from qora.holo import reference as R
from qora.holo.cuda_solver import SpectrumSolver
from qora.holo.cuda_stages import WorkArea
from qora.holo.options import ReconstructionOptions

cp = require_cupy("bench/probes/fgp_probe.py")

PROBES = r"""
template <int PLANES>
__device__ __forceinline__ void fgp_column_body(TV_ARGS) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x, j = blockIdx.y * blockDim.y + threadIdx.y;
    const int k0 = blockIdx.z * PLANES;
    if (i >= nx || j >= ny || k0 >= nz) return;
    float zc = tv_primal(v, r, make_dims(nz, ny, nx), k0, j, i, lam, lower, upper);
    const int k_end = min(k0 + PLANES, nz);
    for (int k = k0; k < k_end; ++k) zc = fgp_fused_voxel(TV_PASS, k, j, i, zc);
}
extern "C" __global__ void fgp_voxel(TV_ARGS) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x, j = blockIdx.y * blockDim.y + threadIdx.y, k = blockIdx.z;
    if (i >= nx || j >= ny) return;
    fgp_fused_voxel(TV_PASS, k, j, i, tv_primal(v, r, make_dims(nz, ny, nx), k, j, i, lam, lower, upper));
}
extern "C" __global__ void __launch_bounds__(256) fgp_column2(TV_ARGS) { fgp_column_body<2>(TV_PASS); }
extern "C" __global__ void __launch_bounds__(256) fgp_column4(TV_ARGS) { fgp_column_body<4>(TV_PASS); }
extern "C" __global__ void __launch_bounds__(256) fgp_column8(TV_ARGS) { fgp_column_body<8>(TV_PASS); }
extern "C" __global__ void __launch_bounds__(256) fgp_column16(TV_ARGS) { fgp_column_body<16>(TV_PASS); }
extern "C" __global__ void __launch_bounds__(256, 8) fgp_column4_lb8(TV_ARGS) { fgp_column_body<4>(TV_PASS); }
// the primal point at i + 1 from the next lane (a warp is one row of 32 voxels); at j + 1 from
// shared memory (SHARED_Y, the next row of the block) or recomputed
template <int PLANES, bool SHARED_Y>
__device__ __forceinline__ void fgp_lane_body(TV_ARGS) {
    __shared__ float rows[2][8][32];
    const int i = blockIdx.x * 32 + threadIdx.x, j = blockIdx.y * blockDim.y + threadIdx.y;
    const int k0 = blockIdx.z * PLANES;
    const bool inside = i < nx && j < ny && k0 < nz;
    const Dims d = make_dims(nz, ny, nx);
    float zc = inside ? tv_primal(v, r, d, k0, j, i, lam, lower, upper) : 0.0f;
    const int k_end = min(k0 + PLANES, nz);
    int buf = 0;
    for (int k = k0; k < k_end; ++k) {
        const long long c = (k * (long long)ny + j) * nx + i;
        float p0 = 0, p1 = 0, p2 = 0, r0 = 0, r1 = 0, r2 = 0;
        if (inside) {
            p0 = p[c]; p1 = p[d.volume + c]; p2 = p[2 * d.volume + c];
            r0 = r[c]; r1 = r[d.volume + c]; r2 = r[2 * d.volume + c];
        }
        const float z0 = (inside && k < nz - 1) ? tv_primal(v, r, d, k + 1, j, i, lam, lower, upper) : 0.0f;
        float z2 = __shfl_down_sync(0xffffffffu, zc, 1);
        if (threadIdx.x == 31) z2 = (inside && i < nx - 1) ? tv_primal(v, r, d, k, j, i + 1, lam, lower, upper) : 0.0f;
        float z1;
        if (SHARED_Y) {
            rows[buf][threadIdx.y][threadIdx.x] = zc;
            __syncthreads();
            z1 = threadIdx.y + 1 < blockDim.y ? rows[buf][threadIdx.y + 1][threadIdx.x]
                 : ((inside && j < ny - 1) ? tv_primal(v, r, d, k, j + 1, i, lam, lower, upper) : 0.0f);
            buf ^= 1;
        } else {
            z1 = (inside && j < ny - 1) ? tv_primal(v, r, d, k, j + 1, i, lam, lower, upper) : 0.0f;
        }
        if (inside) tv_dual(d, c, k, j, i, zc, z0, z1, z2, r0, r1, r2, p0, p1, p2, step, momentum, p, r_next);
        zc = z0;
    }
}
extern "C" __global__ void __launch_bounds__(256) fgp_lane4(TV_ARGS) { fgp_lane_body<4, false>(TV_PASS); }
extern "C" __global__ void __launch_bounds__(256) fgp_lane8(TV_ARGS) { fgp_lane_body<8, false>(TV_PASS); }
extern "C" __global__ void __launch_bounds__(256) fgp_lane_smem4(TV_ARGS) { fgp_lane_body<4, true>(TV_PASS); }
extern "C" __global__ void __launch_bounds__(256) fgp_lane_smem8(TV_ARGS) { fgp_lane_body<8, true>(TV_PASS); }
extern "C" __global__ void __launch_bounds__(256) fgp_lane_smem16(TV_ARGS) { fgp_lane_body<16, true>(TV_PASS); }
// software-pipelined column: the loads of voxel k + 1 issued before the arithmetic of voxel k
struct Taps {
    float p0, p1, p2, r0, r1, r2;          // own p and r at k
    float a_v, a_r0, a_r1, a_r2, a_r1m, a_r2m;                // primal at (k + 1, j, i)
    float b_v, b_r0, b_r0m, b_r1, b_r2, b_r2m;                // primal at (k, j + 1, i)
    float c_v, c_r0, c_r0m, c_r1, c_r1m, c_r2;                // primal at (k, j, i + 1)
};

__device__ __forceinline__ float ld(const float* a, long long idx, bool ok) { return ok ? a[idx] : 0.0f; }

__device__ __forceinline__ Taps load_taps(const float* __restrict__ v, const float* __restrict__ r,
                                          const float* __restrict__ p, Dims d, int k, int j, int i, bool inside) {
    Taps t;
    const long long c = (k * (long long)d.ny + j) * d.nx + i, V = d.volume;
    const bool up = inside && k < d.nz - 1, right = inside && j < d.ny - 1, next = inside && i < d.nx - 1;
    t.p0 = ld(p, c, inside); t.p1 = ld(p, V + c, inside); t.p2 = ld(p, 2 * V + c, inside);
    t.r0 = ld(r, c, inside); t.r1 = ld(r, V + c, inside); t.r2 = ld(r, 2 * V + c, inside);
    const long long a = c + d.plane;
    t.a_v = ld(v, a, up); t.a_r0 = ld(r, a, up && k + 1 < d.nz - 1); t.a_r1 = ld(r, V + a, up && j < d.ny - 1);
    t.a_r2 = ld(r, 2 * V + a, up && i < d.nx - 1); t.a_r1m = ld(r, V + a - d.nx, up && j > 0);
    t.a_r2m = ld(r, 2 * V + a - 1, up && i > 0);
    const long long b = c + d.nx;
    t.b_v = ld(v, b, right); t.b_r0 = ld(r, b, right && k < d.nz - 1); t.b_r0m = ld(r, b - d.plane, right && k > 0);
    t.b_r1 = ld(r, V + b, right && j + 1 < d.ny - 1); t.b_r2 = ld(r, 2 * V + b, right && i < d.nx - 1);
    t.b_r2m = ld(r, 2 * V + b - 1, right && i > 0);
    const long long e = c + 1;
    t.c_v = ld(v, e, next); t.c_r0 = ld(r, e, next && k < d.nz - 1); t.c_r0m = ld(r, e - d.plane, next && k > 0);
    t.c_r1 = ld(r, V + e, next && j < d.ny - 1); t.c_r1m = ld(r, V + e - d.nx, next && j > 0);
    t.c_r2 = ld(r, 2 * V + e, next && i + 1 < d.nx - 1);
    return t;
}

// tv_primal's arithmetic on loaded values (same terms, same order)
__device__ __forceinline__ float primal_of(Dims d, int k, int j, int i, float vc, float r0c, float r0m, float r1c,
                                           float r1m, float r2c, float r2m, float lam, float lower, float upper) {
    float s = 0.0f;
    if (k < d.nz - 1) s -= r0c;
    if (k > 0) s += r0m;
    if (j < d.ny - 1) s -= r1c;
    if (j > 0) s += r1m;
    if (i < d.nx - 1) s -= r2c;
    if (i > 0) s += r2m;
    const float x = vc - lam * s;
    return fminf(fmaxf(x, lower), upper);
}

template <int PLANES>
__device__ __forceinline__ void fgp_pipelined_body(TV_ARGS) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x, j = blockIdx.y * blockDim.y + threadIdx.y;
    const int k0 = blockIdx.z * PLANES;
    const bool inside = i < nx && j < ny && k0 < nz;
    if (!inside) return;
    const Dims d = make_dims(nz, ny, nx);
    float zc = tv_primal(v, r, d, k0, j, i, lam, lower, upper);
    const int k_end = min(k0 + PLANES, nz);
    Taps cur = load_taps(v, r, p, d, k0, j, i, true);
    for (int k = k0; k < k_end; ++k) {
        Taps nxt = load_taps(v, r, p, d, k + 1, j, i, k + 1 < k_end);
        const long long c = (k * (long long)ny + j) * nx + i;
        const float z0 = k < nz - 1 ? primal_of(d, k + 1, j, i, cur.a_v, cur.a_r0, cur.r0, cur.a_r1, cur.a_r1m,
                                                cur.a_r2, cur.a_r2m, lam, lower, upper) : 0.0f;
        const float z1 = j < ny - 1 ? primal_of(d, k, j + 1, i, cur.b_v, cur.b_r0, cur.b_r0m, cur.b_r1, cur.r1,
                                                cur.b_r2, cur.b_r2m, lam, lower, upper) : 0.0f;
        const float z2 = i < nx - 1 ? primal_of(d, k, j, i + 1, cur.c_v, cur.c_r0, cur.c_r0m, cur.c_r1, cur.c_r1m,
                                                cur.c_r2, cur.r2, lam, lower, upper) : 0.0f;
        tv_dual(d, c, k, j, i, zc, z0, z1, z2, cur.r0, cur.r1, cur.r2, cur.p0, cur.p1, cur.p2, step, momentum, p,
                r_next);
        zc = z0;
        cur = nxt;
    }
}
extern "C" __global__ void __launch_bounds__(256) fgp_pipe4(TV_ARGS) { fgp_pipelined_body<4>(TV_PASS); }
extern "C" __global__ void __launch_bounds__(256) fgp_pipe8(TV_ARGS) { fgp_pipelined_body<8>(TV_PASS); }
extern "C" __global__ void __launch_bounds__(256) fgp_pipe16(TV_ARGS) { fgp_pipelined_body<16>(TV_PASS); }
extern "C" __global__ void __launch_bounds__(128) fgp_pipe8_128(TV_ARGS) { fgp_pipelined_body<8>(TV_PASS); }
// carried column: every value of r (and the primal point) that the next plane needs again is kept
// in a register instead of loaded again: 19 loads per voxel instead of 27 (own r from the previous
// plane's primal point at k + 1; r0 at k - 1 for the j + 1 and i + 1 neighbours from the previous
// plane's loads). Same arithmetic in the same order as tv_primal: bitwise equal.
template <int PLANES>
__device__ __forceinline__ void fgp_carry_body(TV_ARGS) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x, j = blockIdx.y * blockDim.y + threadIdx.y;
    const int k0 = blockIdx.z * PLANES;
    if (i >= nx || j >= ny || k0 >= nz) return;
    const Dims d = make_dims(nz, ny, nx);
    const long long V = d.volume, P = d.plane;
    const bool has_y = j < ny - 1, has_x = i < nx - 1, up_y = j > 0, left_x = i > 0;
    long long c = (k0 * (long long)ny + j) * nx + i;
    float R0 = r[c], R1 = r[V + c], R2 = r[2 * V + c];
    float zc = primal_of(d, k0, j, i, v[c], R0, k0 > 0 ? r[c - P] : 0.0f, R1, up_y ? r[V + c - nx] : 0.0f, R2,
                         left_x ? r[2 * V + c - 1] : 0.0f, lam, lower, upper);
    float A = (k0 > 0 && has_y) ? r[c + nx - P] : 0.0f;  // r0 at (k - 1, j + 1, i)
    float B = (k0 > 0 && has_x) ? r[c + 1 - P] : 0.0f;   // r0 at (k - 1, j, i + 1)
    const int k_end = min(k0 + PLANES, nz);
    for (int k = k0; k < k_end; ++k, c += P) {
        const float P0 = p[c], P1 = p[V + c], P2 = p[2 * V + c];
        float z0 = 0.0f, z1 = 0.0f, z2 = 0.0f, N0 = 0.0f, N1 = 0.0f, N2 = 0.0f;
        if (k < nz - 1) {
            const long long a = c + P;
            N0 = r[a]; N1 = r[V + a]; N2 = r[2 * V + a];
            z0 = primal_of(d, k + 1, j, i, v[a], N0, R0, N1, up_y ? r[V + a - nx] : 0.0f, N2,
                           left_x ? r[2 * V + a - 1] : 0.0f, lam, lower, upper);
        }
        if (has_y) {
            const long long b = c + nx;
            const float Y0 = r[b];
            z1 = primal_of(d, k, j + 1, i, v[b], Y0, A, r[V + b], R1, r[2 * V + b], left_x ? r[2 * V + b - 1] : 0.0f,
                           lam, lower, upper);
            A = Y0;
        }
        if (has_x) {
            const long long e = c + 1;
            const float X0 = r[e];
            z2 = primal_of(d, k, j, i + 1, v[e], X0, B, r[V + e], up_y ? r[V + e - nx] : 0.0f, r[2 * V + e], R2,
                           lam, lower, upper);
            B = X0;
        }
        tv_dual(d, c, k, j, i, zc, z0, z1, z2, R0, R1, R2, P0, P1, P2, step, momentum, p, r_next);
        zc = z0;
        R0 = N0; R1 = N1; R2 = N2;
    }
}
extern "C" __global__ void __launch_bounds__(256) fgp_carry4(TV_ARGS) { fgp_carry_body<4>(TV_PASS); }
extern "C" __global__ void __launch_bounds__(256) fgp_carry8(TV_ARGS) { fgp_carry_body<8>(TV_PASS); }
extern "C" __global__ void __launch_bounds__(256) fgp_carry16(TV_ARGS) { fgp_carry_body<16>(TV_PASS); }
extern "C" __global__ void __launch_bounds__(256) fgp_carry32(TV_ARGS) { fgp_carry_body<32>(TV_PASS); }
extern "C" __global__ void __launch_bounds__(256, 8) fgp_fused_lb8(TV_ARGS) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x, j = blockIdx.y * blockDim.y + threadIdx.y, k = blockIdx.z;
    if (i >= nx || j >= ny) return;
    fgp_fused_voxel(TV_PASS, k, j, i, tv_primal(v, r, make_dims(nz, ny, nx), k, j, i, lam, lower, upper));
}
"""

# name: (kernel, block, planes per block)
CASES = {
    "fused (qora's, 4 planes) 64x4": ("fgp_fused", (64, 4, 1), 4),
    "voxel per thread 32x8": ("fgp_voxel", (32, 8, 1), 1),
    "separate (2 kernels) 32x8": ("separate", (32, 8, 1), 1),
    "voxel per thread 32x4": ("fgp_voxel", (32, 4, 1), 1),
    "voxel per thread 64x4": ("fgp_voxel", (64, 4, 1), 1),
    "voxel per thread 128x2": ("fgp_voxel", (128, 2, 1), 1),
    "fused lb8 32x8": ("fgp_fused_lb8", (32, 8, 1), 1),
    "column2 32x8": ("fgp_column2", (32, 8, 1), 2),
    "column4 32x8": ("fgp_column4", (32, 8, 1), 4),
    "column8 32x8": ("fgp_column8", (32, 8, 1), 8),
    "column16 32x8": ("fgp_column16", (32, 8, 1), 16),
    "column4 64x4": ("fgp_column4", (64, 4, 1), 4),
    "column4 lb8 32x8": ("fgp_column4_lb8", (32, 8, 1), 4),
    "pipelined4 32x8": ("fgp_pipe4", (32, 8, 1), 4),
    "pipelined8 32x8": ("fgp_pipe8", (32, 8, 1), 8),
    "pipelined16 32x8": ("fgp_pipe16", (32, 8, 1), 16),
    "pipelined8 64x4": ("fgp_pipe8", (64, 4, 1), 8),
    "pipelined8 32x4": ("fgp_pipe8_128", (32, 4, 1), 8),
    "carry4 64x4": ("fgp_carry4", (64, 4, 1), 4),
    "carry8 64x4": ("fgp_carry8", (64, 4, 1), 8),
    "carry16 64x4": ("fgp_carry16", (64, 4, 1), 16),
    "carry32 64x4": ("fgp_carry32", (64, 4, 1), 32),
    "carry8 32x8": ("fgp_carry8", (32, 8, 1), 8),
    "carry16 32x8": ("fgp_carry16", (32, 8, 1), 16),
    "carry8 128x2": ("fgp_carry8", (128, 2, 1), 8),
    "lane4 32x8": ("fgp_lane4", (32, 8, 1), 4),
    "lane8 32x8": ("fgp_lane8", (32, 8, 1), 8),
    "lane4 32x4": ("fgp_lane4", (32, 4, 1), 4),
    "lane+smem4 32x8": ("fgp_lane_smem4", (32, 8, 1), 4),
    "lane+smem8 32x8": ("fgp_lane_smem8", (32, 8, 1), 8),
    "lane+smem16 32x8": ("fgp_lane_smem16", (32, 8, 1), 16),
    "lane+smem8 32x4": ("fgp_lane_smem8", (32, 4, 1), 8),
}


def main(n=512, steps=10):
    g = R.geometry(n)
    work = WorkArea()
    solver = SpectrumSolver(g, n, work, ReconstructionOptions(method="tv", iterations=1, tv_inner=1, tv_weight=1e-3))
    rng = np.random.default_rng(0)
    solver.v[...] = cp.asarray(rng.standard_normal(n**3).astype(np.float32) * 1e-3)
    solver.prox.p[...] = cp.asarray(np.clip(rng.standard_normal(3 * n**3), -1, 1).astype(np.float32))
    solver.prox.r[...] = solver.prox.p
    module = cp.RawModule(code=kernel_source("qora.holo", "holo.cu") + PROBES, options=("--std=c++17",))
    dims = (np.int32(n),) * 3
    lam, step, m = np.float32(solver.lam), np.float32(1 / (12 * solver.lam)), np.float32(0.3)
    one = (np.float32(0.0), np.float32(np.inf))  # the box (lower, upper) of non-negativity
    p0, r0 = solver.prox.p.copy(), solver.prox.r.copy()
    reference = None
    copy_gbs = cuda_copy = None
    from qora.backend import resolve
    from qora.bench.common import copy_floor

    copy_gbs = copy_floor(resolve("cuda"))["gbs"]
    print(f"n={n}, copy {copy_gbs:.0f} GB/s; 13 volumes = {13 * 4 * n**3 / 2**20:.0f} MiB")
    for name, (kernel, block, planes) in CASES.items():
        grid = (-(-n // block[0]), -(-n // block[1]), -(-n // planes))
        args = (solver.v, solver.prox.r, solver.prox.p, solver.prox.r_next, *dims, lam, *one, step, m)
        if kernel == "separate":
            primal, dual = module.get_function("fgp_primal"), module.get_function("fgp_dual")

            def fn(grid, block, args, primal=primal, dual=dual):
                primal(grid, block, (solver.v, solver.prox.r, *dims, lam, *one, solver.y))
                dual(grid, block, (solver.y, solver.prox.r, solver.prox.p, solver.prox.r_next, *dims, step, m))

            fn.num_regs = f"{primal.num_regs}+{dual.num_regs}"
        else:
            fn = module.get_function(kernel)
        solver.prox.p[...] = p0
        fn(grid, block, args)
        out = (solver.prox.p.get(), solver.prox.r_next.get())
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
