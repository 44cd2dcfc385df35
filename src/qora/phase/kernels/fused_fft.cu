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

enum { MODE_FORWARD = 0, MODE_INVERSE = 1, MODE_MODULUS = 2, MODE_UPDATE = 3, MODE_UPDATE_FORWARD = 4, MODE_SPLIT = 5 };

// MODE_SPLIT (candidate, docs/phase-performance.md, "fused_fft candidates"): the middle pass of a 2D
// column transform of H = N1 N2 points split in three passes (four-step), for H = 2048 and 4096 where one
// block cannot hold enough whole columns. With y = N2 n1 + n2 and spectral row k = k1 + N1 k2:
//   pass 1, strided_forward of N1 points, stride N2 rows:   rows N2 k1 + n2 <- F_n1 (rows N2 n1 + n2)
//   pass 2, strided_split_<N2>, lines of N2 rows N2 k1 + j: twiddle exp(-2 pi i j k1 / H), F_j (now
//           row N2 k1 + k2 holds spectral row k1 + N1 k2), modulus step against that row's amplitude,
//           F_j^-1, twiddle exp(+2 pi i j k1 / H)
//   pass 3, strided_inverse of N1 points, stride N2 rows:   rows N2 n1 + n2 <- F_k1^-1 (rows N2 k1 + n2)
// so the data leave pass 3 in natural order and the amplitude is read in its own order.
__host__ __device__ constexpr bool is_modulus(int mode) { return mode == MODE_MODULUS || mode == MODE_SPLIT; }

// How a strided pass brings its tile on chip (the candidates of docs/phase-performance.md, "fused_fft
// candidates"): LOAD_PLAIN, one register-staged load per thread in flight (the measured default);
// LOAD_ASYNC, every load of the tile in flight at once through cp.async (no registers held);
// LOAD_PIPE, a persistent grid whose blocks walk the tiles with two tile buffers, the next tile's
// copies in flight while the current one is transformed and stored.
enum { LOAD_PLAIN = 0, LOAD_ASYNC = 1, LOAD_PIPE = 2 };

template <int N, int EPT, int F>
struct Lines {
    using Forward = LineFFT<N, EPT, F, fft_direction::forward>;
    using Inverse = LineFFT<N, EPT, F, fft_direction::inverse>;
    using cx = typename Forward::value_type;
    static constexpr int line_bytes = N * (F + 1) * 8;
    static constexpr int tile_bytes = line_bytes + N * F * 4;  // the lines, then the amplitude
    static constexpr int fft_bytes = Forward::shared_memory_size > Inverse::shared_memory_size
                                         ? Forward::shared_memory_size : Inverse::shared_memory_size;
    static constexpr int strided_smem = tile_bytes > fft_bytes ? tile_bytes : fft_bytes;
    // LOAD_PIPE: two tiles and the FFT's own memory (no longer overlaid on the tile); the forward and
    // inverse passes' tiles without the amplitude
    static constexpr int pipe_smem = 2 * tile_bytes + fft_bytes;
    static constexpr int pipe_smem_lines = 2 * line_bytes + fft_bytes;
    static constexpr int contig_smem = fft_bytes;
};

// Tile t of a strided pass over lines of length N with stride `inner` elements: element (o, j, i)
// at (o * N + j) * inner + i; tile t holds lines i0 .. i0 + F - 1 of one o. n: elements per start.
struct StridedTile {
    long long o;
    long long first;  // element (o, 0, 0)
    long long i0;
    __device__ __forceinline__ StridedTile(long long t, long long inner, int N, int F) {
        const long long per_o = inner / F;
        o = t / per_o;
        first = o * N * inner;
        i0 = (t % per_o) * F;
    }
};

// The loads of one tile (and, for the modulus pass, its amplitudes) into `tile` / `amp_tile`:
// register-staged when !ASYNC, else issued as cp.async (the caller commits and waits).
template <int N, int F, int MODE, bool ASYNC>
__device__ __forceinline__ void strided_load(const float2* __restrict__ base, const float* __restrict__ amp,
                                             long long amp_first, long long inner, float2* tile, float* amp_tile,
                                             long long amp_inner) {
    const int tid = threadIdx.y * blockDim.x + threadIdx.x;
    const int threads = blockDim.x * blockDim.y;
    // one element per step, not unrolled: unrolled loads raise the registers past two blocks per SM,
    // which measured slower on the H200 (docs/phase-performance.md)
    for (int k = tid; k < N * F; k += threads) {
        const int j = k / F, f = k % F;
        if (ASYNC) {
            qora::copy_async<8>(tile + j * (F + 1) + f, base + j * inner + f);
            if (is_modulus(MODE)) qora::copy_async<4>(amp_tile + k, amp + amp_first + j * amp_inner + f);
        } else {
            tile[j * (F + 1) + f] = base[j * inner + f];
            if (is_modulus(MODE)) amp_tile[k] = amp[amp_first + j * amp_inner + f];
        }
    }
}

template <int N, int F>
__device__ __forceinline__ void strided_store(float2* __restrict__ base, long long inner, const float2* tile) {
    const int tid = threadIdx.y * blockDim.x + threadIdx.x;
    const int threads = blockDim.x * blockDim.y;
    for (int k = tid; k < N * F; k += threads) {
        const int j = k / F, f2 = k % F;
        base[j * inner + f2] = tile[j * (F + 1) + f2];
    }
}

// MODE_SPLIT: multiply this thread's element j = tx + e stride of its line by exp(i pi j x)
template <class L>
__device__ __forceinline__ void twiddle_lines(typename L::cx* r, float x) {
    for (int e = 0; e < L::Forward::elements_per_thread; ++e) {
        const int j = threadIdx.x + e * L::Forward::stride;
        float sn, cs;
        sincospif(j * x, &sn, &cs);  // j x is exact, so the twiddle is accurate to an ulp
        const float re = r[e].x * cs - r[e].y * sn, im = r[e].x * sn + r[e].y * cs;
        r[e] = typename L::cx{re, im};
    }
}

// The transform(s) of the block's F lines, from the tile back into the tile (this thread writes the
// elements it read). fft_smem: the FFT's shared memory, overlaid on the tile (OVERLAID: barriers
// between the tile's use and the FFT's) or separate. The modulus pass adds its error sum to the
// slot of start first / n (first: the tile's element (o, 0, 0); n: elements per start).
template <int N, int EPT, int F, int MODE, bool OVERLAID>
__device__ __forceinline__ void strided_transform(float2* tile, const float* amp_tile, unsigned char* fft_smem,
                                                  float scale, double* __restrict__ err_sums,
                                                  const int* __restrict__ counter, int starts, long long first,
                                                  long long n, float twiddle = 0.0f) {
    using L = Lines<N, EPT, F>;
    using cx = typename L::cx;
    cx r[L::Forward::storage_size];
    const int f = threadIdx.y;
    for (int e = 0; e < EPT; ++e) {
        const int j = threadIdx.x + e * L::Forward::stride;
        if (j < N) {
            const float2 v = tile[j * (F + 1) + f];
            r[e] = cx{v.x, v.y};
        }
    }
    if (OVERLAID) __syncthreads();
    if (MODE == MODE_SPLIT) twiddle_lines<L>(r, -twiddle);
    if (MODE == MODE_INVERSE) {
        typename L::Inverse().execute(r, reinterpret_cast<cx*>(fft_smem));
    } else {
        typename L::Forward().execute(r, reinterpret_cast<cx*>(fft_smem));
    }
    if (is_modulus(MODE)) {
        float err = 0.0f;
        for (int e = 0; e < EPT; ++e) {
            const int j = threadIdx.x + e * L::Forward::stride;
            if (j < N) {
                const float2 w = modulus_one(make_float2(r[e].x, r[e].y), amp_tile[j * F + f], scale, err);
                r[e] = cx{w.x, w.y};
            }
        }
        __syncthreads();
        typename L::Inverse().execute(r, reinterpret_cast<cx*>(fft_smem));
        if (MODE == MODE_SPLIT) twiddle_lines<L>(r, twiddle);
        const int slot = *counter;
        block_add_2d(err, err_sums + (long long)slot * starts + first / n);
    }
    if (OVERLAID) __syncthreads();
    for (int e = 0; e < EPT; ++e) {
        const int j = threadIdx.x + e * L::Forward::stride;
        if (j < N) tile[j * (F + 1) + f] = make_float2(r[e].x, r[e].y);
    }
}

// One tile per block (LOAD_PLAIN, LOAD_ASYNC): block blockIdx.x takes tile blockIdx.x.
template <int N, int EPT, int F, int MODE, int LOAD>
__device__ __forceinline__ void strided_pass(float2* __restrict__ data, long long inner, const float* __restrict__ amp,
                                             long long n, float scale, double* __restrict__ err_sums,
                                             const int* __restrict__ counter, int starts, int n1 = 1) {
    using L = Lines<N, EPT, F>;
    extern __shared__ __align__(16) unsigned char smem[];
    float2* tile = reinterpret_cast<float2*>(smem);
    float* amp_tile = reinterpret_cast<float*>(smem + L::line_bytes);
    static_assert(L::Forward::block_dim.x * EPT == N && L::Forward::block_dim.y == F, "line layout");
    const StridedTile t(blockIdx.x, inner, N, F);
    float2* base = data + t.first + t.i0;
    // MODE_SPLIT: lines o = (start, k1); their spectral row k1 + N1 k2 of the amplitude (k2 = j)
    const int k1 = MODE == MODE_SPLIT ? (int)(t.o % n1) : 0;
    const long long amp_first = MODE == MODE_SPLIT ? k1 * inner + t.i0 : t.first % n + t.i0;
    strided_load<N, F, MODE, LOAD == LOAD_ASYNC>(base, amp, amp_first, inner, tile, amp_tile,
                                                 MODE == MODE_SPLIT ? n1 * inner : inner);
    if (LOAD == LOAD_ASYNC) {
        qora::copy_async_commit();
        qora::copy_async_wait<0>();
    }
    __syncthreads();
    // MODE_SPLIT: exp(-+2 pi i j k1 / H) = exp(-+i pi j x), x = 2 k1 / (N1 N) (exact: powers of two)
    strided_transform<N, EPT, F, MODE, true>(tile, amp_tile, smem, scale, err_sums, counter, starts, t.first, n,
                                             MODE == MODE_SPLIT ? 2.0f * k1 / (float)(n1 * N) : 0.0f);
    __syncthreads();
    strided_store<N, F>(base, inner, tile);
}

// LOAD_PIPE: a grid of about as many blocks as fit on the GPU at once; each walks tiles blockIdx.x,
// blockIdx.x + gridDim.x, ... with two tile buffers, issuing the next tile's copies before it
// transforms and stores the current one, so that DRAM reads overlap the transforms and the stores.
template <int N, int EPT, int F, int MODE>
__device__ __forceinline__ void strided_pipe(float2* __restrict__ data, long long inner, const float* __restrict__ amp,
                                             long long n, float scale, double* __restrict__ err_sums,
                                             const int* __restrict__ counter, int starts, long long tiles) {
    using L = Lines<N, EPT, F>;
    constexpr int buffer = is_modulus(MODE) ? L::tile_bytes : L::line_bytes;  // one tile buffer's bytes
    extern __shared__ __align__(16) unsigned char smem[];
    unsigned char* fft_smem = smem + 2 * buffer;
    static_assert(L::Forward::block_dim.x * EPT == N && L::Forward::block_dim.y == F, "line layout");
    long long t = blockIdx.x;
    if (t >= tiles) return;
    {
        const StridedTile first(t, inner, N, F);
        strided_load<N, F, MODE, true>(data + first.first + first.i0, amp, first.first % n + first.i0, inner,
                                       reinterpret_cast<float2*>(smem),
                                       reinterpret_cast<float*>(smem + L::line_bytes), inner);
        qora::copy_async_commit();
    }
    for (int b = 0; t < tiles; t += gridDim.x, b ^= 1) {
        float2* tile = reinterpret_cast<float2*>(smem + b * buffer);
        float* amp_tile = reinterpret_cast<float*>(smem + b * buffer + L::line_bytes);
        qora::copy_async_wait<0>();
        __syncthreads();  // tile t is in buffer b; every thread is done storing from buffer b ^ 1
        const long long next = t + gridDim.x;
        if (next < tiles) {
            const StridedTile nt(next, inner, N, F);
            unsigned char* other = smem + (b ^ 1) * buffer;
            strided_load<N, F, MODE, true>(data + nt.first + nt.i0, amp, nt.first % n + nt.i0, inner,
                                           reinterpret_cast<float2*>(other),
                                           reinterpret_cast<float*>(other + L::line_bytes), inner);
        }
        qora::copy_async_commit();
        const StridedTile cur(t, inner, N, F);
        strided_transform<N, EPT, F, MODE, false>(tile, amp_tile, fft_smem, scale, err_sums, counter, starts,
                                                  cur.first, n);
        __syncthreads();
        strided_store<N, F>(data + cur.first + cur.i0, inner, tile);
    }
}

// Contiguous lines (the x axis): the block takes lines F * blockIdx.x + threadIdx.y.
//   MODE_FORWARD:        y <- F_x x
//   MODE_UPDATE:         x <- update(x, F_x^-1 y)                (counter advanced)
//   MODE_UPDATE_FORWARD: x <- update(x, F_x^-1 y); y <- F_x x     (counter advanced)
// PREFETCH (candidate, docs/phase-performance.md, "fused_fft candidates"): the block's x and support
// (one contiguous run of F lines each) are copied into shared memory with cp.async before the inverse
// transform, instead of read after it, so that those 9 B/el do not wait behind the transform.
template <int N, int EPT, int F, int MODE, bool PREFETCH = false>
__device__ __forceinline__ void contig_pass(float2* __restrict__ y, float2* __restrict__ x,
                                            const unsigned char* __restrict__ support, float a, float b,
                                            int constraint, int* __restrict__ counter) {
    using L = Lines<N, EPT, F>;
    using cx = typename L::cx;
    extern __shared__ __align__(16) unsigned char smem[];
    const long long base = ((long long)blockIdx.x * F + threadIdx.y) * N;
    // PREFETCH: the block's lines of x, then of the support, after the FFT's memory
    float2* x_run = reinterpret_cast<float2*>(smem + L::fft_bytes);
    unsigned char* s_run = smem + L::fft_bytes + N * F * 8;
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
        if (PREFETCH) {
            const long long first = (long long)blockIdx.x * F * N;
            const int threads = blockDim.x * blockDim.y;
            for (int k = qora::block_thread(); k < N * F; k += threads) qora::copy_async<8>(x_run + k, x + first + k);
            for (int k = qora::block_thread(); k < N * F / 4; k += threads)
                qora::copy_async<4>(s_run + 4 * k, support + first + 4 * k);
            qora::copy_async_commit();
        }
        for (int e = 0; e < EPT; ++e) {
            const int j = threadIdx.x + e * L::Forward::stride;
            if (j < N) {
                const float2 v = y[base + j];
                r[e] = cx{v.x, v.y};
            }
        }
        typename L::Inverse().execute(r, reinterpret_cast<cx*>(smem));
        if (PREFETCH) {
            qora::copy_async_wait<0>();
            __syncthreads();
        }
        for (int e = 0; e < EPT; ++e) {
            const int j = threadIdx.x + e * L::Forward::stride;
            if (j < N) {
                const float2 p = make_float2(r[e].x, r[e].y);
                const int local = threadIdx.y * N + j;
                const unsigned char s = PREFETCH ? s_run[local] : support[base + j];
                // inside the support without a constraint the old x is not needed
                const float2 v = (s && constraint == 0) ? p
                                 : update_one(PREFETCH ? x_run[local] : x[base + j], p, s, a, b, constraint);
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

// Kernels of size N with F lines per block and EPT elements per thread, named <kind>_<N>_<F>_<EPT>
// (strided ones with LOAD_ASYNC: <kind>_<N>_<F>_<EPT>_async; LOAD_PIPE: ..._pipe, one more argument,
// the number of tiles); <family>_params_<N>_<F>_<EPT>[_async|_pipe] writes the launch parameters for
// the host: block (x, y) and dynamic shared memory (bytes; _pipe: of the modulus pass, then of the
// forward and inverse passes).
#define QORA_BOUNDS(N, EPT, F) __launch_bounds__(Lines<N, EPT, F>::Forward::max_threads_per_block)
#define QORA_STRIDED_LOAD(N, EPT, F, LOAD, SUFFIX)                                                         \
    extern "C" __global__ void strided_params_##N##_##F##_##EPT##SUFFIX(int* out) {                        \
        out[0] = Lines<N, EPT, F>::Forward::block_dim.x;                                                   \
        out[1] = Lines<N, EPT, F>::Forward::block_dim.y;                                                   \
        out[2] = Lines<N, EPT, F>::strided_smem;                                                           \
    }                                                                                                      \
    extern "C" __global__ void QORA_BOUNDS(N, EPT, F) strided_forward_##N##_##F##_##EPT##SUFFIX(           \
        float2* data, long long inner) {                                                                   \
        strided_pass<N, EPT, F, MODE_FORWARD, LOAD>(data, inner, nullptr, 1, 0.0f, nullptr, nullptr, 0);   \
    }                                                                                                      \
    extern "C" __global__ void QORA_BOUNDS(N, EPT, F) strided_inverse_##N##_##F##_##EPT##SUFFIX(           \
        float2* data, long long inner) {                                                                   \
        strided_pass<N, EPT, F, MODE_INVERSE, LOAD>(data, inner, nullptr, 1, 0.0f, nullptr, nullptr, 0);   \
    }                                                                                                      \
    extern "C" __global__ void QORA_BOUNDS(N, EPT, F) strided_modulus_##N##_##F##_##EPT##SUFFIX(           \
        float2* data, long long inner, const float* amp, long long n, float scale, double* err_sums,       \
        const int* counter, int starts) {                                                                  \
        strided_pass<N, EPT, F, MODE_MODULUS, LOAD>(data, inner, amp, n, scale, err_sums, counter, starts);\
    }
// MODE_SPLIT's middle pass, lines of N = N2 points (N1 = H / N2 passed at run time)
#define QORA_STRIDED_SPLIT(N, EPT, F, LOAD, SUFFIX)                                                        \
    extern "C" __global__ void strided_params_##N##_##F##_##EPT##_split##SUFFIX(int* out) {                \
        out[0] = Lines<N, EPT, F>::Forward::block_dim.x;                                                   \
        out[1] = Lines<N, EPT, F>::Forward::block_dim.y;                                                   \
        out[2] = Lines<N, EPT, F>::strided_smem;                                                           \
    }                                                                                                      \
    extern "C" __global__ void QORA_BOUNDS(N, EPT, F) strided_split_##N##_##F##_##EPT##SUFFIX(             \
        float2* data, long long inner, const float* amp, long long n, float scale, double* err_sums,       \
        const int* counter, int starts, int n1) {                                                          \
        strided_pass<N, EPT, F, MODE_SPLIT, LOAD>(data, inner, amp, n, scale, err_sums, counter, starts, n1); \
    }
#define QORA_STRIDED(N, EPT, F) QORA_STRIDED_LOAD(N, EPT, F, LOAD_PLAIN, )
#define QORA_STRIDED_ASYNC(N, EPT, F) QORA_STRIDED_LOAD(N, EPT, F, LOAD_ASYNC, _async)
#define QORA_STRIDED_PIPE(N, EPT, F)                                                                       \
    extern "C" __global__ void strided_params_##N##_##F##_##EPT##_pipe(int* out) {                         \
        out[0] = Lines<N, EPT, F>::Forward::block_dim.x;                                                   \
        out[1] = Lines<N, EPT, F>::Forward::block_dim.y;                                                   \
        out[2] = Lines<N, EPT, F>::pipe_smem;                                                              \
        out[3] = Lines<N, EPT, F>::pipe_smem_lines;                                                        \
    }                                                                                                      \
    extern "C" __global__ void QORA_BOUNDS(N, EPT, F) strided_forward_##N##_##F##_##EPT##_pipe(            \
        float2* data, long long inner, long long tiles) {                                                  \
        strided_pipe<N, EPT, F, MODE_FORWARD>(data, inner, nullptr, 1, 0.0f, nullptr, nullptr, 0, tiles);  \
    }                                                                                                      \
    extern "C" __global__ void QORA_BOUNDS(N, EPT, F) strided_inverse_##N##_##F##_##EPT##_pipe(            \
        float2* data, long long inner, long long tiles) {                                                  \
        strided_pipe<N, EPT, F, MODE_INVERSE>(data, inner, nullptr, 1, 0.0f, nullptr, nullptr, 0, tiles);  \
    }                                                                                                      \
    extern "C" __global__ void QORA_BOUNDS(N, EPT, F) strided_modulus_##N##_##F##_##EPT##_pipe(            \
        float2* data, long long inner, const float* amp, long long n, float scale, double* err_sums,       \
        const int* counter, int starts, long long tiles) {                                                 \
        strided_pipe<N, EPT, F, MODE_MODULUS>(data, inner, amp, n, scale, err_sums, counter, starts, tiles);\
    }

// PREFETCH update kernels are held to 64 registers (1024 threads per SM: two blocks of 512): the run
// addresses live across the transform and took the 16-per-thread ones to 80-112 registers, one block
// per SM (the forward kernel of the family prefetches nothing: plain bounds)
#define QORA_BOUNDS_64(N, EPT, F)                                                                          \
    __launch_bounds__(Lines<N, EPT, F>::Forward::max_threads_per_block,                                    \
                      1024 / Lines<N, EPT, F>::Forward::max_threads_per_block)
#define QORA_CONTIG_LOAD(N, EPT, F, PREFETCH, SUFFIX, SMEM, BOUNDS)                                       \
    extern "C" __global__ void contig_params_##N##_##F##_##EPT##SUFFIX(int* out) {                         \
        out[0] = Lines<N, EPT, F>::Forward::block_dim.x;                                                   \
        out[1] = Lines<N, EPT, F>::Forward::block_dim.y;                                                   \
        out[2] = SMEM;                                                                                     \
    }                                                                                                      \
    extern "C" __global__ void QORA_BOUNDS(N, EPT, F) contig_forward_##N##_##F##_##EPT##SUFFIX(            \
        float2* y, float2* x) {                                                                            \
        contig_pass<N, EPT, F, MODE_FORWARD, PREFETCH>(y, x, nullptr, 0.0f, 0.0f, 0, nullptr);             \
    }                                                                                                      \
    extern "C" __global__ void BOUNDS(N, EPT, F) contig_update_##N##_##F##_##EPT##SUFFIX(                  \
        float2* y, float2* x, const unsigned char* support, float a, float b, int constraint, int* counter,\
        int forward) {                                                                                     \
        if (forward)                                                                                       \
            contig_pass<N, EPT, F, MODE_UPDATE_FORWARD, PREFETCH>(y, x, support, a, b, constraint, counter);\
        else                                                                                               \
            contig_pass<N, EPT, F, MODE_UPDATE, PREFETCH>(y, x, support, a, b, constraint, counter);       \
    }
#define QORA_CONTIG(N, EPT, F) QORA_CONTIG_LOAD(N, EPT, F, false, , (Lines<N, EPT, F>::contig_smem), QORA_BOUNDS)
// the prefetching x pass: the FFT's memory, then F lines of x (8 B) and of the support (1 B)
#define QORA_CONTIG_PREFETCH(N, EPT, F)                                                                    \
    QORA_CONTIG_LOAD(N, EPT, F, true, _prefetch, (Lines<N, EPT, F>::contig_smem + N * F * 9), QORA_BOUNDS_64)

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

// Candidates, measured against the above by bench/probes/fused_fft_probe.py --strided-loads
// (docs/phase-performance.md, "fused_fft candidates"); the host takes them only when asked
// (FusedFFTEngine(strided_load=...)). LOAD_ASYNC at every strided layout above:
QORA_STRIDED_ASYNC(64, 8, 16)
QORA_STRIDED_ASYNC(128, 8, 16)
QORA_STRIDED_ASYNC(256, 8, 2)
QORA_STRIDED_ASYNC(256, 8, 16)
QORA_STRIDED_ASYNC(256, 16, 2)
QORA_STRIDED_ASYNC(256, 16, 16)
QORA_STRIDED_ASYNC(512, 8, 8)
QORA_STRIDED_ASYNC(512, 16, 8)
QORA_STRIDED_ASYNC(1024, 8, 4)
QORA_STRIDED_ASYNC(1024, 16, 4)
QORA_STRIDED_ASYNC(2048, 8, 4)
QORA_STRIDED_ASYNC(2048, 16, 4)
QORA_STRIDED_ASYNC(4096, 16, 2)
// 8 lines of 2048 points (1024 threads, a 211 KB tile: one block per SM, every row of the tile a
// whole 64-byte pair of sectors): only with the copies in flight at once can one block fill the SM
QORA_STRIDED_ASYNC(2048, 16, 8)
// LOAD_PIPE: two tiles and the FFT's memory per block (modulus pass; forward and inverse without the
// amplitude): 64 x 16 lines: 33 KB (25); 128 x 16: 68 KB (50); 256 x 16 (16 per thread): 116 KB (84;
// the modulus pass one block per SM); 256 x 8: 60 KB (44); 512 x 4: 64 KB (48)
QORA_STRIDED_PIPE(64, 8, 16)
QORA_STRIDED_PIPE(128, 8, 16)
QORA_STRIDED_PIPE(256, 16, 16)
QORA_STRIDED_PIPE(256, 16, 8)
QORA_STRIDED_PIPE(512, 16, 4)
// the four-step split of the 2D column pass (MODE_SPLIT): middle passes of 32 (H = 2048) and 64
// (H = 4096) points, 16 lines of adjacent columns per block (128-byte rows), plain and with cp.async
QORA_STRIDED_SPLIT(32, 8, 16, LOAD_PLAIN, )
QORA_STRIDED_SPLIT(64, 8, 16, LOAD_PLAIN, )
QORA_STRIDED_SPLIT(32, 8, 16, LOAD_ASYNC, _async)
QORA_STRIDED_SPLIT(64, 8, 16, LOAD_ASYNC, _async)
// the x pass with x and the support prefetched through cp.async (contig_load="prefetch"), at every
// contiguous layout above
QORA_CONTIG_PREFETCH(64, 8, 16)
QORA_CONTIG_PREFETCH(128, 8, 16)
QORA_CONTIG_PREFETCH(256, 8, 1)
QORA_CONTIG_PREFETCH(256, 8, 16)
QORA_CONTIG_PREFETCH(256, 16, 1)
QORA_CONTIG_PREFETCH(256, 16, 16)
QORA_CONTIG_PREFETCH(512, 8, 8)
QORA_CONTIG_PREFETCH(512, 16, 8)
QORA_CONTIG_PREFETCH(1024, 8, 4)
QORA_CONTIG_PREFETCH(1024, 16, 4)
QORA_CONTIG_PREFETCH(2048, 16, 4)
QORA_CONTIG_PREFETCH(4096, 16, 2)
