// qora.holo, GP loop "fused_fft": one Gerchberg-Papoulis iteration on the half spectrum as four passes of
// cuFFTDx line transforms that carry the clamp and the restore (docs/holo-performance.md, "The fused GP
// loop"). cuFFT's loop spends a 3D C2R, a clamp pass, a 3D R2C and a restore pass, each of several passes
// over memory; here each pass is one read and one write of the half spectrum:
//   gp_inverse (y)  E <- F_y^-1 E
//   gp_rows    (x)  E <- R2C_x clamp(scale C2R_x E)       (the real line lives in registers only)
//   gp_forward (y)  E <- F_y E
//   gp_restore (z)  E <- F_z^-1 [ a + (1 - c / 2) F_z E ] / n  (c = M(k) + M(-k), a the data term), on the
//                   tiles that hold a measured bin only (a list): normalised, the pass is the identity where c = 0
//                   along a whole line (a is 0 there too), and most lines hold no measured bin (56% of the tiles
//                   at the benchmark's 256^3); the engine scales the clamp to match
// A run starts with gp_inverse along z (the restored data a, transformed back along z) and ends with
// gp_inverse along y and gp_rows with FINAL (the C2R alone, real values written in place).
//
// Layout: the half spectrum (n, n, P) complex64, x contiguous, W = n / 2 + 1 valid values a row and P
// (a multiple of F, the lines of a strided block) the row's stride, so that every block's loads start on
// a 128-byte line; the lines at x >= W are never read or written. The real line of gp_rows is the
// Hermitian extension of its W values through a complex transform of n points (the imaginary parts of
// the DC and Nyquist bins drop out of the real part, as cuFFT's C2R ignores them).
//
// Built offline with the other prebuilt holo modules (python -m qora.holo.build_fused).

#include "line_fft.cuh"  // qora/backend/kernels: the line transforms shared with qora.phase's fused_fft

using namespace cufftdx;
using qora::LinePair;

enum { GP_INVERSE = 0, GP_FORWARD = 1, GP_RESTORE = 2 };

// Shared memory of a strided pass: the tile of F lines (N x (F + 1) values) with the FFT's own memory
// overlaid on it, then with GP_RESTORE the tiles of a (N x F values) and of the counts (N x F bytes), which
// the restore reads after the forward transform (holding them in registers across it took 128 registers).
template <int N, int EPT, int F>
struct GpSmem {
    using P = LinePair<N, EPT, F>;
    static constexpr int lines = P::tile_bytes > P::fft_bytes ? P::tile_bytes : P::fft_bytes;
    static constexpr int restore = lines + N * F * 9;
};

// Tile t of a strided pass: element (o, j, r, x) at ((o N + j) R + r) P + x; the tile holds lines
// x = g F .. g F + F - 1 of one (o, r), those below W only.
struct GpTile {
    long long first;  // element (o, 0, r, g F)
    int valid;        // lines of the tile below W
    __device__ __forceinline__ GpTile(long long t, int N, int F, long long R, int W, int P) {
        const int groups = (W + F - 1) / F;
        const int g = (int)(t % groups);
        const long long r = (t / groups) % R, o = t / (groups * R);
        first = (o * N * R + r) * P + (long long)g * F;
        valid = min(F, W - g * F);
    }
};

template <int N, int F, int MODE>
__device__ __forceinline__ void gp_load(const float2* __restrict__ e, const float2* __restrict__ a,
                                        const unsigned char* __restrict__ counts, const GpTile& t, long long inner,
                                        float2* tile, float2* a_tile, unsigned char* c_tile) {
    const int threads = blockDim.x * blockDim.y;
    for (int k = qora::block_thread(); k < N * F; k += threads) {
        const int j = k / F, f = k % F;
        const long long at = t.first + j * inner + f;
        if (f < t.valid) {
            qora::copy_async<8>(tile + j * (F + 1) + f, e + at);
            if (MODE == GP_RESTORE) qora::copy_async<8>(a_tile + k, a + at);
        } else {
            tile[j * (F + 1) + f] = make_float2(0.0f, 0.0f);
        }
        // four counts per copy (P and the tile's first x are multiples of 4): bytes past W are never used
        if (MODE == GP_RESTORE && f % 4 == 0 && f < t.valid) qora::copy_async<4>(c_tile + k, counts + at);
    }
    qora::copy_async_commit();
    qora::copy_async_wait<0>();
}

// One strided pass over lines of N points (y: R = 1, o = z; z: R = n, o = 0): tile `index` per block.
template <int N, int EPT, int F, int MODE>
__device__ __forceinline__ void gp_strided(float2* __restrict__ e, long long R, int W, int P,
                                           const float2* __restrict__ a, const unsigned char* __restrict__ counts,
                                           long long index, float norm = 1.0f) {
    using L = LinePair<N, EPT, F>;
    using cx = typename L::cx;
    extern __shared__ __align__(16) unsigned char smem[];
    float2* tile = reinterpret_cast<float2*>(smem);
    float2* a_tile = reinterpret_cast<float2*>(smem + GpSmem<N, EPT, F>::lines);
    unsigned char* c_tile = smem + GpSmem<N, EPT, F>::lines + N * F * 8;
    const GpTile t(index, N, F, R, W, P);
    const long long inner = R * P;
    gp_load<N, F, MODE>(e, a, counts, t, inner, tile, a_tile, c_tile);
    __syncthreads();
    cx r[L::Forward::storage_size];
    const int f = threadIdx.y;
    qora::tile_to_registers<L>(tile, r);
    __syncthreads();
    if (MODE == GP_INVERSE) {
        typename L::Inverse().execute(r, reinterpret_cast<cx*>(smem));
    } else {
        typename L::Forward().execute(r, reinterpret_cast<cx*>(smem));
    }
    if (MODE == GP_RESTORE) {
        for (int k = 0; k < EPT; ++k) {
            const int j = threadIdx.x + k * L::stride;
            const float2 d = a_tile[j * F + f];
            const float b = 1.0f - 0.5f * c_tile[j * F + f];
            r[k] = cx{d.x + b * r[k].x, d.y + b * r[k].y};
        }
        __syncthreads();
        typename L::Inverse().execute(r, reinterpret_cast<cx*>(smem));
        for (int k = 0; k < EPT; ++k) r[k] = cx{norm * r[k].x, norm * r[k].y};
    }
    __syncthreads();
    qora::registers_to_tile<L>(r, tile);
    __syncthreads();
    const int threads = blockDim.x * blockDim.y;
    for (int k = qora::block_thread(); k < N * F; k += threads) {
        const int j = k / F, g = k % F;
        if (g < t.valid) e[t.first + j * inner + g] = tile[j * (F + 1) + g];
    }
}

// The x pass: the block takes rows F blockIdx.x + threadIdx.y (of n^2). Without FINAL: E <- R2C clamp(scale
// C2R E); with FINAL: the row's N real values C2R E written over it (as floats: the padded real layout).
template <int N, int EPT, int F, bool FINAL>
__device__ __forceinline__ void gp_rows(float2* __restrict__ e, int P, float scale, float lower, float upper) {
    using L = LinePair<N, EPT, F>;
    using cx = typename L::cx;
    extern __shared__ __align__(16) unsigned char smem[];
    float2* row = e + ((long long)blockIdx.x * F + threadIdx.y) * P;
    cx r[L::Forward::storage_size];
    for (int k = 0; k < EPT; ++k) {
        const int j = threadIdx.x + k * L::stride;
        // the Hermitian extension: E(N - j) = conj E(j)
        const float2 v = j <= N / 2 ? row[j] : row[N - j];
        r[k] = cx{v.x, j <= N / 2 ? v.y : -v.y};
    }
    typename L::Inverse().execute(r, reinterpret_cast<cx*>(smem));
    __syncthreads();  // every thread's reads of the block's rows are done before any row is written
    if (FINAL) {
        float* out = reinterpret_cast<float*>(row);
        for (int k = 0; k < EPT; ++k) out[threadIdx.x + k * L::stride] = r[k].x;
    } else {
        for (int k = 0; k < EPT; ++k) r[k] = cx{fminf(fmaxf(scale * r[k].x, lower), upper), 0.0f};
        typename L::Forward().execute(r, reinterpret_cast<cx*>(smem));
        for (int k = 0; k < EPT; ++k) {
            const int j = threadIdx.x + k * L::stride;
            if (j <= N / 2) row[j] = make_float2(r[k].x, r[k].y);
        }
    }
}

// The x pass with two rows a transform (candidate, gp_rows_packed): rows 2 f and 2 f + 1 of the block (F
// transforms, 2 F rows) enter as Z = A + i B of their Hermitian extensions (the DC and Nyquist bins' imaginary
// parts set to 0, as C2R ignores them), so one inverse transform gives both real lines as z = a + i b; both are
// clamped, and the forward transform's Z' splits again by A'(k) = (Z'(k) + conj Z'(N - k)) / 2 and
// B'(k) = (Z'(k) - conj Z'(N - k)) / 2i, Z'(N - k) read from the other thread through shared memory.
template <int N, int EPT, int F>
__device__ __forceinline__ void gp_rows_packed(float2* __restrict__ e, int P, float scale, float lower, float upper) {
    using L = LinePair<N, EPT, F>;
    using cx = typename L::cx;
    extern __shared__ __align__(16) unsigned char smem[];
    cx* swap = reinterpret_cast<cx*>(smem + L::fft_bytes);  // N values a transform, after the FFT's memory
    float2* ra = e + 2 * ((long long)blockIdx.x * F + threadIdx.y) * P;
    float2* rb = ra + P;
    cx r[L::Forward::storage_size];
    for (int k = 0; k < EPT; ++k) {
        const int j = threadIdx.x + k * L::stride;
        const int m = j <= N / 2 ? j : N - j;
        float2 va = ra[m], vb = rb[m];
        if (m == 0 || m == N / 2) va.y = vb.y = 0.0f;
        if (j > N / 2) va.y = -va.y, vb.y = -vb.y;
        r[k] = cx{va.x - vb.y, va.y + vb.x};
    }
    typename L::Inverse().execute(r, reinterpret_cast<cx*>(smem));
    for (int k = 0; k < EPT; ++k)
        r[k] = cx{fminf(fmaxf(scale * r[k].x, lower), upper), fminf(fmaxf(scale * r[k].y, lower), upper)};
    __syncthreads();
    typename L::Forward().execute(r, reinterpret_cast<cx*>(smem));
    cx* own = swap + threadIdx.y * N;
    for (int k = 0; k < EPT; ++k) own[threadIdx.x + k * L::stride] = r[k];
    __syncthreads();  // also: every thread's reads of the block's rows are long done
    for (int k = 0; k < EPT; ++k) {
        const int j = threadIdx.x + k * L::stride;
        if (j <= N / 2) {
            const cx z = r[k], w = own[(N - j) & (N - 1)];
            ra[j] = make_float2(0.5f * (z.x + w.x), 0.5f * (z.y - w.y));
            rb[j] = make_float2(0.5f * (z.y + w.y), -0.5f * (z.x - w.x));
        }
    }
}

// Kernels named gp_<kind>_<N>_<F>_<EPT>; gp_params_<N>_<F>_<EPT> writes block (x, y) and the dynamic shared
// memory of the strided passes (without, then with the restore's tiles), of the x pass and of the packed x pass.
#define QORA_BOUNDS(N, EPT, F) __launch_bounds__(LinePair<N, EPT, F>::Forward::max_threads_per_block)
#define QORA_GP(N, EPT, F)                                                                                 \
    extern "C" __global__ void gp_params_##N##_##F##_##EPT(int* out) {                                     \
        out[0] = LinePair<N, EPT, F>::Forward::block_dim.x;                                                \
        out[1] = LinePair<N, EPT, F>::Forward::block_dim.y;                                                \
        out[2] = GpSmem<N, EPT, F>::lines;                                                   \
        out[3] = GpSmem<N, EPT, F>::restore;                                                   \
        out[4] = LinePair<N, EPT, F>::fft_bytes;                                                           \
        out[5] = LinePair<N, EPT, F>::fft_bytes + N * F * 8;                                               \
    }                                                                                                      \
    extern "C" __global__ void QORA_BOUNDS(N, EPT, F) gp_rows_packed_##N##_##F##_##EPT(                    \
        float2* e, int P, float scale, float lower, float upper) {                                         \
        gp_rows_packed<N, EPT, F>(e, P, scale, lower, upper);                                              \
    }                                                                                                      \
    extern "C" __global__ void QORA_BOUNDS(N, EPT, F) gp_inverse_##N##_##F##_##EPT(                        \
        float2* e, long long R, int W, int P) {                                                            \
        gp_strided<N, EPT, F, GP_INVERSE>(e, R, W, P, nullptr, nullptr, blockIdx.x);                       \
    }                                                                                                      \
    extern "C" __global__ void QORA_BOUNDS(N, EPT, F) gp_forward_##N##_##F##_##EPT(                        \
        float2* e, long long R, int W, int P) {                                                            \
        gp_strided<N, EPT, F, GP_FORWARD>(e, R, W, P, nullptr, nullptr, blockIdx.x);                       \
    }                                                                                                      \
    extern "C" __global__ void QORA_BOUNDS(N, EPT, F) gp_restore_##N##_##F##_##EPT(                        \
        float2* e, long long R, int W, int P, const float2* a, const unsigned char* counts,               \
        const int* tiles, float norm) {                                                                    \
        gp_strided<N, EPT, F, GP_RESTORE>(e, R, W, P, a, counts, tiles[blockIdx.x], norm);                 \
    }                                                                                                      \
    extern "C" __global__ void QORA_BOUNDS(N, EPT, F) gp_rows_##N##_##F##_##EPT(                           \
        float2* e, int P, float scale, float lower, float upper) {                                         \
        gp_rows<N, EPT, F, false>(e, P, scale, lower, upper);                                              \
    }                                                                                                      \
    extern "C" __global__ void QORA_BOUNDS(N, EPT, F) gp_rows_final_##N##_##F##_##EPT(float2* e, int P) {  \
        gp_rows<N, EPT, F, true>(e, P, 1.0f, 0.0f, 0.0f);                                                  \
    }

// (N, elements per thread, lines per block): gp_fused.LAYOUT's, then the candidates measured against them
// (bench/probes/gp_fused_probe.py; FusedGP(n, layout=...))
QORA_GP(128, 8, 16)
QORA_GP(256, 16, 8)
QORA_GP(512, 16, 8)
QORA_GP(256, 16, 16)
QORA_GP(256, 8, 16)
QORA_GP(512, 8, 8)
QORA_GP(512, 16, 4)
