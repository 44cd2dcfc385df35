// qora.phase, variant fused_fft: one HIO/ER/RAAR iteration as passes of cuFFTDx line transforms
// that carry the element-wise work, so that no pass over memory is spent on it alone.
//
// An array of B starts, each of shape (D, H, W) or (H, W), complex64, x contiguous. One iteration
// (steady state, 3D) is four kernels, each one read and one write of the array:
//   strided_forward   along y           Y <- F_y Y
//   strided_modulus   along z           Y <- F_z^-1 [ scale * P_M(scale * F_z Y) ]  (+ error sums)
//   strided_inverse   along y           Y <- F_y^-1 Y
//   contig_update     along x           x <- update(x, F_x^-1 Y); Y <- F_x x_new   (the next
//                                       iteration's first pass, while x_new is in registers)
// In 2D the modulus pass is the y pass. A run of iterations starts with contig_forward
// (Y <- F_x x) and ends with contig_update without the forward transform (MODE_UPDATE).
//
// Strided passes move F adjacent lines per block through a shared-memory tile (padded to F + 1
// columns against bank conflicts) so that global loads and stores stay coalesced; the amplitude is
// tiled the same way. The element-wise steps are those of phase.cu (phase_ops.cuh), so this
// variant is compared with the CPU reference by the same tests.
//
// Built offline (cuFFTDx is a header library that NVRTC would recompile on every machine):
// `python -m qora.phase.build_fused --mathdx <nvidia/mathdx>` writes fused_fft.sm_90.cubin beside this file.

#include "line_fft.cuh"  // qora/backend/kernels: the line transforms shared with qora.holo's fused BPM
#include "phase_ops.cuh"

using namespace cufftdx;
using qora::LineFFT;
using qora::block_add_2d;

enum { MODE_FORWARD = 0, MODE_INVERSE = 1, MODE_MODULUS = 2, MODE_UPDATE = 3, MODE_UPDATE_FORWARD = 4 };

template <int N, int EPT, int F>
struct Lines {
    using Forward = LineFFT<N, EPT, F, fft_direction::forward>;
    using Inverse = LineFFT<N, EPT, F, fft_direction::inverse>;
    using cx = typename Forward::value_type;
    static constexpr int tile_bytes = N * (F + 1) * 8 + N * F * 4;  // the lines, then the amplitude
    static constexpr int fft_bytes = Forward::shared_memory_size > Inverse::shared_memory_size
                                         ? Forward::shared_memory_size : Inverse::shared_memory_size;
    static constexpr int strided_smem = tile_bytes > fft_bytes ? tile_bytes : fft_bytes;
    static constexpr int contig_smem = fft_bytes;
};

// Lines of length N with stride `inner` elements: element (o, j, i) at (o * N + j) * inner + i; the
// block takes lines i0 .. i0 + F - 1 of one o. n: elements per start (the amplitude's size).
template <int N, int EPT, int F, int MODE>
__device__ __forceinline__ void strided_pass(float2* __restrict__ data, long long inner, const float* __restrict__ amp,
                                             long long n, float scale, double* __restrict__ err_sums,
                                             const int* __restrict__ counter, int starts) {
    using L = Lines<N, EPT, F>;
    using cx = typename L::cx;
    extern __shared__ __align__(16) unsigned char smem[];
    float2* tile = reinterpret_cast<float2*>(smem);
    float* amp_tile = reinterpret_cast<float*>(smem + N * (F + 1) * 8);
    const long long per_o = inner / F;
    const long long o = blockIdx.x / per_o;
    const long long i0 = (blockIdx.x % per_o) * F;
    const long long first = o * N * inner;  // element (o, 0, 0)
    float2* base = data + first + i0;
    static_assert(L::Forward::block_dim.x * EPT == N && L::Forward::block_dim.y == F, "line layout");
    const int tid = threadIdx.y * blockDim.x + threadIdx.x;
    const int threads = blockDim.x * blockDim.y;
    // one element per step, not unrolled: unrolled loads raise the registers past two blocks per SM,
    // which measured slower on the H200 (docs/phase-performance.md)
    for (int k = tid; k < N * F; k += threads) {
        const int j = k / F, f = k % F;
        tile[j * (F + 1) + f] = base[j * inner + f];
        if (MODE == MODE_MODULUS) amp_tile[k] = amp[first % n + i0 + j * inner + f];
    }
    __syncthreads();
    cx r[L::Forward::storage_size];
    const int f = threadIdx.y;
    for (int e = 0; e < EPT; ++e) {
        const int j = threadIdx.x + e * L::Forward::stride;
        if (j < N) {
            const float2 v = tile[j * (F + 1) + f];
            r[e] = cx{v.x, v.y};
        }
    }
    __syncthreads();
    if (MODE == MODE_INVERSE) {
        typename L::Inverse().execute(r, reinterpret_cast<cx*>(smem));
    } else {
        typename L::Forward().execute(r, reinterpret_cast<cx*>(smem));
    }
    if (MODE == MODE_MODULUS) {
        float err = 0.0f;
        for (int e = 0; e < EPT; ++e) {
            const int j = threadIdx.x + e * L::Forward::stride;
            if (j < N) {
                const float2 w = modulus_one(make_float2(r[e].x, r[e].y), amp_tile[j * F + f], scale, err);
                r[e] = cx{w.x, w.y};
            }
        }
        __syncthreads();
        typename L::Inverse().execute(r, reinterpret_cast<cx*>(smem));
        const int slot = *counter;
        block_add_2d(err, err_sums + (long long)slot * starts + first / n);
    }
    __syncthreads();
    for (int e = 0; e < EPT; ++e) {
        const int j = threadIdx.x + e * L::Forward::stride;
        if (j < N) tile[j * (F + 1) + f] = make_float2(r[e].x, r[e].y);
    }
    __syncthreads();
    for (int k = tid; k < N * F; k += threads) {
        const int j = k / F, f2 = k % F;
        base[j * inner + f2] = tile[j * (F + 1) + f2];
    }
}

// Contiguous lines (the x axis): the block takes lines F * blockIdx.x + threadIdx.y.
//   MODE_FORWARD:        y <- F_x x
//   MODE_UPDATE:         x <- update(x, F_x^-1 y)                (counter advanced)
//   MODE_UPDATE_FORWARD: x <- update(x, F_x^-1 y); y <- F_x x     (counter advanced)
template <int N, int EPT, int F, int MODE>
__device__ __forceinline__ void contig_pass(float2* __restrict__ y, float2* __restrict__ x,
                                            const unsigned char* __restrict__ support, float a, float b,
                                            int constraint, int* __restrict__ counter) {
    using L = Lines<N, EPT, F>;
    using cx = typename L::cx;
    extern __shared__ __align__(16) unsigned char smem[];
    const long long base = ((long long)blockIdx.x * F + threadIdx.y) * N;
    cx r[L::Forward::storage_size];
    if (MODE == MODE_FORWARD) {
        for (int e = 0; e < EPT; ++e) {
            const int j = threadIdx.x + e * L::Forward::stride;
            if (j < N) {
                const float2 v = x[base + j];
                r[e] = cx{v.x, v.y};
            }
        }
    } else {
        for (int e = 0; e < EPT; ++e) {
            const int j = threadIdx.x + e * L::Forward::stride;
            if (j < N) {
                const float2 v = y[base + j];
                r[e] = cx{v.x, v.y};
            }
        }
        typename L::Inverse().execute(r, reinterpret_cast<cx*>(smem));
        for (int e = 0; e < EPT; ++e) {
            const int j = threadIdx.x + e * L::Forward::stride;
            if (j < N) {
                const float2 p = make_float2(r[e].x, r[e].y);
                const unsigned char s = support[base + j];
                // inside the support without a constraint the old x is not needed
                const float2 v = (s && constraint == 0) ? p : update_one(x[base + j], p, s, a, b, constraint);
                x[base + j] = v;
                r[e] = cx{v.x, v.y};
            }
        }
        if (counter != nullptr && blockIdx.x == 0 && threadIdx.x == 0 && threadIdx.y == 0) *counter += 1;
        if (MODE == MODE_UPDATE) return;
        __syncthreads();
    }
    typename L::Forward().execute(r, reinterpret_cast<cx*>(smem));
    for (int e = 0; e < EPT; ++e) {
        const int j = threadIdx.x + e * L::Forward::stride;
        if (j < N) y[base + j] = make_float2(r[e].x, r[e].y);
    }
}

// Kernels of size N with F lines per block and EPT elements per thread, named <kind>_<N>_<F>_<EPT>;
// <family>_params_<N>_<F>_<EPT> writes the
// launch parameters for the host: block (x, y) and dynamic shared memory (bytes).
#define QORA_BOUNDS(N, EPT, F) __launch_bounds__(Lines<N, EPT, F>::Forward::max_threads_per_block)
#define QORA_STRIDED(N, EPT, F)                                                                            \
    extern "C" __global__ void strided_params_##N##_##F##_##EPT(int* out) {                                        \
        out[0] = Lines<N, EPT, F>::Forward::block_dim.x;                                                   \
        out[1] = Lines<N, EPT, F>::Forward::block_dim.y;                                                   \
        out[2] = Lines<N, EPT, F>::strided_smem;                                                           \
    }                                                                                                      \
    extern "C" __global__ void QORA_BOUNDS(N, EPT, F) strided_forward_##N##_##F##_##EPT(float2* data, long long inner) { \
        strided_pass<N, EPT, F, MODE_FORWARD>(data, inner, nullptr, 1, 0.0f, nullptr, nullptr, 0);         \
    }                                                                                                      \
    extern "C" __global__ void QORA_BOUNDS(N, EPT, F) strided_inverse_##N##_##F##_##EPT(float2* data, long long inner) { \
        strided_pass<N, EPT, F, MODE_INVERSE>(data, inner, nullptr, 1, 0.0f, nullptr, nullptr, 0);         \
    }                                                                                                      \
    extern "C" __global__ void QORA_BOUNDS(N, EPT, F) strided_modulus_##N##_##F##_##EPT(                           \
        float2* data, long long inner, const float* amp, long long n, float scale, double* err_sums,       \
        const int* counter, int starts) {                                                                  \
        strided_pass<N, EPT, F, MODE_MODULUS>(data, inner, amp, n, scale, err_sums, counter, starts);      \
    }

#define QORA_CONTIG(N, EPT, F)                                                                             \
    extern "C" __global__ void contig_params_##N##_##F##_##EPT(int* out) {                                         \
        out[0] = Lines<N, EPT, F>::Forward::block_dim.x;                                                   \
        out[1] = Lines<N, EPT, F>::Forward::block_dim.y;                                                   \
        out[2] = Lines<N, EPT, F>::contig_smem;                                                            \
    }                                                                                                      \
    extern "C" __global__ void QORA_BOUNDS(N, EPT, F) contig_forward_##N##_##F##_##EPT(float2* y, float2* x) {     \
        contig_pass<N, EPT, F, MODE_FORWARD>(y, x, nullptr, 0.0f, 0.0f, 0, nullptr);                       \
    }                                                                                                      \
    extern "C" __global__ void QORA_BOUNDS(N, EPT, F) contig_update_##N##_##F##_##EPT(                             \
        float2* y, float2* x, const unsigned char* support, float a, float b, int constraint, int* counter,\
        int forward) {                                                                                     \
        if (forward)                                                                                       \
            contig_pass<N, EPT, F, MODE_UPDATE_FORWARD>(y, x, support, a, b, constraint, counter);         \
        else                                                                                               \
            contig_pass<N, EPT, F, MODE_UPDATE>(y, x, support, a, b, constraint, counter);                 \
    }

// (N, elements per thread, lines per block). The host takes the most lines per block that still
// leave two blocks per SM (small 2D problems need narrow blocks to fill the GPU); strided blocks of
// at least 4 lines keep every row of the tile a whole 32-byte sector where the data are large.
QORA_STRIDED(64, 8, 16)
QORA_CONTIG(64, 8, 16)
QORA_STRIDED(128, 8, 16)
QORA_CONTIG(128, 8, 16)
QORA_STRIDED(256, 8, 2)
QORA_STRIDED(256, 8, 16)
QORA_STRIDED(256, 16, 2)
QORA_STRIDED(256, 16, 16)
QORA_CONTIG(256, 8, 1)
QORA_CONTIG(256, 8, 16)
QORA_CONTIG(256, 16, 1)
QORA_CONTIG(256, 16, 16)
QORA_STRIDED(512, 8, 8)
QORA_STRIDED(512, 16, 8)
QORA_CONTIG(512, 8, 8)
QORA_CONTIG(512, 16, 8)
QORA_STRIDED(1024, 8, 4)
QORA_STRIDED(1024, 16, 4)
QORA_CONTIG(1024, 8, 4)
QORA_CONTIG(1024, 16, 4)
QORA_STRIDED(2048, 8, 4)
QORA_STRIDED(2048, 16, 4)
QORA_CONTIG(2048, 16, 4)
QORA_STRIDED(4096, 16, 2)
QORA_CONTIG(4096, 16, 2)
