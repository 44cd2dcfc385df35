// qora.holo, BPM variant fused_fft: each slice step of the beam propagation model as two passes of
// cuFFTDx line transforms that carry the element-wise work (docs/holo-performance.md, "The fused
// slice step"). Reference: qora.holo.bpm (_forward_chunk and _reverse), slice by slice.
//
// A chunk of B illuminations. The 2D transform F = F_y F_x is split between the passes:
//   W (B, n, n), row-major: between passes, x in the spectral and y in the real domain
//   S (B, n, n): the envelope spectra S_k (forward) or the adjoint state G (reverse), kept in the
//     column pass's register order (below); so are the tables tq = c q, tr = c (1 - q).
// Forward, slice k (W = F_y^-1 S_k on entry):
//   row_forward      along x   w = F_x^-1 W / n^2 (stored when asked); W <- F_x (p_k w)
//   column_forward   along y   A = F_y W; S <- tq A + tr S; W <- F_y^-1 S
// and after the last slice row_output writes w = F_x^-1 W / n^2 centre-origin. The reverse pass
// starts with row_residual (r = w - data, or r = data; loss += |r|^2; W <- F_x r) and then, slice
// k from the last down:
//   column_reverse   along y   G' = F_y W + G (G = 0 on the last slice); G <- conj(tr) G';
//                              W <- F_y^-1 (conj(tq) G' / n^2)
//   row_reverse      along x   b = F_x^-1 W; grad_k += kd sum_a Im(conj(p_k w_k) b);
//                              W <- F_x (conj(p_k) b)
// Each pass is one read and one write of W: 64 bytes per element and slice forward against 136
// for the cuFFT step, 72 + 72 for the gradient against 280 (the byte model in the docs).
//
// Register order of the spectral arrays: block `blk` of the column pass (illumination blk / (n/F),
// columns kx = (blk % (n/F)) F + f) holds element (ky = tx + e stride, kx) of line f = ty in thread
// (tx, ty), register e; that value lives at blk n F + (e F + f) stride + tx, so the pass reads and
// writes S and the tables coalesced, without the tile. qora.holo.bpm_fused.spectral_order makes it.
//
// The reverse row pass puts the same row y of F illuminations in one block, so that the gradient's
// sum over illuminations is added in shared memory and reaches global memory as one float atomic
// per pixel and F illuminations.
//
// Built offline (cuFFTDx is a header library): `python -m qora.holo.build_fused --mathdx <nvidia/mathdx>`
// writes bpm_fused.sm_90.cubin beside this file.

#include "line_fft.cuh"
#include "bpm_slice.cuh"

using qora::LinePair;

// ------------------------------------------------------------------------------------------
// Column passes (along y): block blk takes columns bx F .. bx F + F - 1 of illumination b.

// How the column pass brings its operands on chip (candidates, docs/holo-performance.md, "Fused BPM
// candidates"): COLUMN_PLAIN, the tile of W through registers one load per thread in flight and S
// (G), tq, tr read after the forward transform (the measured default); COLUMN_ASYNC, the tile through
// cp.async, all of it in flight at once; COLUMN_STAGE, as ASYNC and the block's S (G), tq and tr (three
// contiguous runs of N F values in register order) copied into shared memory in the same burst, so
// that no load waits behind the forward transform.
enum { COLUMN_PLAIN = 0, COLUMN_ASYNC = 1, COLUMN_STAGE = 2 };

template <int N, int EPT, int F, int LOAD>
struct ColumnSmem {
    using P = LinePair<N, EPT, F>;
    static constexpr int run_bytes = N * F * 8;  // one spectral operand of the block
    static constexpr int overlaid = P::tile_bytes > P::fft_bytes ? P::tile_bytes : P::fft_bytes;
    // STAGE: the tile (the FFT's memory overlaid on it), then S (G), tq, tr
    static constexpr int bytes = LOAD == COLUMN_STAGE ? overlaid + 3 * run_bytes : overlaid;
};

// a contiguous run of N F float2 (the block's part of a register-order array) into shared memory
template <int N, int F>
__device__ __forceinline__ void run_load_async(const float2* __restrict__ src, float2* dst) {
    const int threads = blockDim.x * blockDim.y;
    for (int k = qora::block_thread(); k < N * F; k += threads) qora::copy_async<8>(dst + k, src + k);
}

template <int N, int EPT, int F, bool REVERSE, int LOAD>
__device__ __forceinline__ void column_pass(float2* __restrict__ w, float2* __restrict__ s,
                                            const float2* __restrict__ tq, const float2* __restrict__ tr,
                                            float scale, int first) {
    using P = LinePair<N, EPT, F>;
    using C = ColumnSmem<N, EPT, F, LOAD>;
    using cx = typename P::cx;
    extern __shared__ __align__(16) unsigned char smem[];
    float2* tile = reinterpret_cast<float2*>(smem);
    const long long blk = blockIdx.x;
    const long long b = blk / (N / F), bx = blk % (N / F);
    float2* base = w + b * N * N + bx * F;
    // STAGE: the block's operands at run offset blk N F; thread (tx, ty), register e reads local index
    // ty stride + tx + e F stride (consecutive threads, consecutive values: no bank conflict)
    float2* s_run = reinterpret_cast<float2*>(smem + C::overlaid);
    float2* tq_run = s_run + N * F;
    float2* tr_run = tq_run + N * F;
    if (LOAD == COLUMN_PLAIN) {
        qora::tile_load<N, F>(base, N, tile);
    } else {
        qora::tile_load_async<N, F>(base, N, tile);
        if (LOAD == COLUMN_STAGE) {
            const long long run = blk * N * F;
            if (!(REVERSE && first)) run_load_async<N, F>(s + run, s_run);
            run_load_async<N, F>(tq + run, tq_run);
            run_load_async<N, F>(tr + run, tr_run);
        }
        qora::copy_async_commit();
        qora::copy_async_wait<0>();
    }
    __syncthreads();
    cx r[EPT];
    qora::tile_to_registers<P>(tile, r);
    __syncthreads();
    typename P::Forward().execute(r, reinterpret_cast<cx*>(smem));
    const long long q = blk * N * F + threadIdx.y * P::stride + threadIdx.x;  // register e at q + e F stride
    const int local = threadIdx.y * P::stride + threadIdx.x;
    for (int e = 0; e < EPT; ++e) {
        const long long i = q + (long long)e * F * P::stride;
        const int li = local + e * F * P::stride;
        const float2 a = at<P>(r, e);
        const float2 q = LOAD == COLUMN_STAGE ? tq_run[li] : tq[i], t = LOAD == COLUMN_STAGE ? tr_run[li] : tr[i];
        if (!REVERSE) {  // S <- tq A + tr S
            const float2 next = propagate(a, q, t, LOAD == COLUMN_STAGE ? s_run[li] : s[i]);
            s[i] = next;
            put<P>(r, e, next);
        } else {  // G' = A + G; G <- conj(tr) G'; the line <- conj(tq) G' / n^2
            float2 g = make_float2(0.0f, 0.0f);
            if (!first) g = LOAD == COLUMN_STAGE ? s_run[li] : s[i];
            put<P>(r, e, propagate_adjoint(a, q, t, &g, first, scale));
            s[i] = g;
        }
    }
    __syncthreads();
    typename P::Inverse().execute(r, reinterpret_cast<cx*>(smem));
    __syncthreads();
    qora::registers_to_tile<P>(r, tile);
    __syncthreads();
    qora::tile_store<N, F>(base, N, tile);
}

// ------------------------------------------------------------------------------------------
// Row passes (along x). Forward, output and residual: block blk takes lines blk F + ty of the
// chunk's B n lines (line = b n + y).

enum { ROW_FORWARD = 0, ROW_OUTPUT = 1, ROW_RESIDUAL = 2 };

// Everything of a forward, output or residual row pass after the load of line `line` into r
// (the inverse x transform, the element-wise step, the forward transform and the store).
template <int N, int EPT, int F, int MODE>
__device__ __forceinline__ void row_body(typename LinePair<N, EPT, F>::cx* r, long long line, float2* __restrict__ w,
                                         const float2* __restrict__ other, float scale, float2* __restrict__ out,
                                         double* __restrict__ loss) {
    using P = LinePair<N, EPT, F>;
    using cx = typename P::cx;
    extern __shared__ __align__(16) unsigned char smem[];
    const int y = (int)(line % N);
    float2* row = w + line * N;
    if (!(MODE == ROW_RESIDUAL && scale == 0.0f)) typename P::Inverse().execute(r, reinterpret_cast<cx*>(smem));
    // centre-origin row of this line (output and data), and its columns shifted by N / 2 below
    const long long centred = (line - y + (y + N / 2) % N) * N;
    float err = 0.0f;
    for (int e = 0; e < EPT; ++e) {
        const int x = threadIdx.x + e * P::stride;
        const float2 v = make_float2(r[e].x * scale, r[e].y * scale);
        if (MODE == ROW_FORWARD) {  // other: the screen p_k (n, n); out: stored w_k or null
            if (out != nullptr) out[line * N + x] = v;
            put<P>(r, e, mul(other[(long long)y * N + x], v));
        } else if (MODE == ROW_OUTPUT) {
            out[centred + (x + N / 2) % N] = v;
        } else {  // other: the data (centre-origin); r = w - d, or with scale 0 the residual d itself
            const float2 d = other[centred + (x + N / 2) % N];
            const float2 res = scale != 0.0f ? make_float2(v.x - d.x, v.y - d.y) : d;
            err += res.x * res.x + res.y * res.y;
            put<P>(r, e, res);
        }
    }
    if (MODE == ROW_OUTPUT) return;
    if (MODE == ROW_RESIDUAL) qora::block_add_2d(err, loss);  // its barrier also frees the FFT's shared memory
    else __syncthreads();
    typename P::Forward().execute(r, reinterpret_cast<cx*>(smem));
    qora::registers_to_line<P>(r, row);
}

template <int N, int EPT, int F, int MODE>
__device__ __forceinline__ void row_pass(float2* __restrict__ w, const float2* __restrict__ other,
                                         float scale, float2* __restrict__ out, double* __restrict__ loss) {
    using P = LinePair<N, EPT, F>;
    const long long line = (long long)blockIdx.x * F + threadIdx.y;
    typename P::cx r[EPT];
    qora::line_to_registers<P>(w + line * N, r);
    row_body<N, EPT, F, MODE>(r, line, w, other, scale, out, loss);
}

// The row pass as a persistent grid (candidate ROW_PIPE, docs/holo-performance.md, "Fused BPM
// candidates"): about as many blocks as fit on the GPU at once walk the `groups` groups of F lines,
// each loading the next group's line into registers before it transforms the current one, so that
// DRAM reads overlap the transforms (EPT more registers per thread).
template <int N, int EPT, int F, int MODE>
__device__ __forceinline__ void row_pipe(float2* __restrict__ w, const float2* __restrict__ other, float scale,
                                         float2* __restrict__ out, double* __restrict__ loss, long long groups) {
    using P = LinePair<N, EPT, F>;
    using cx = typename P::cx;
    long long g = blockIdx.x;
    if (g >= groups) return;
    cx next[EPT];
    qora::line_to_registers<P>(w + (g * F + threadIdx.y) * N, next);
    for (; g < groups; g += gridDim.x) {
        cx r[EPT];
        for (int e = 0; e < EPT; ++e) r[e] = next[e];
        const long long later = g + gridDim.x;
        if (later < groups) qora::line_to_registers<P>(w + (later * F + threadIdx.y) * N, next);
        row_body<N, EPT, F, MODE>(r, g * F + threadIdx.y, w, other, scale, out, loss);
        __syncthreads();  // the next group's transform reuses the FFT's shared memory
    }
}

// Reverse: tile t takes row y = t / groups of illuminations (t % groups) F + ty (lines past `count`
// run on zeros and store nothing).
struct ReverseLine {
    int y;
    bool valid;
    long long line;
    template <int N, int F>
    __device__ __forceinline__ static ReverseLine of(unsigned int t, int count) {
        const int groups = (count + F - 1) / F;
        ReverseLine l;
        l.y = t / groups;
        const int a = (t % groups) * F + threadIdx.y;
        l.valid = a < count;
        l.line = ((long long)a * N + l.y) * N;
        return l;
    }
};

template <class P>
__device__ __forceinline__ void reverse_load(const float2* __restrict__ w, const ReverseLine& l, typename P::cx* r) {
    if (l.valid) {
        qora::line_to_registers<P>(w + l.line, r);
    } else {
        for (int e = 0; e < P::Forward::elements_per_thread; ++e) r[e] = typename P::cx{0.0f, 0.0f};
    }
}

// EARLY (candidate reverse_load="early", docs/holo-performance.md, "Fused BPM candidates"): the stored
// envelope w_k (8 of the pass's 24 B/el) is loaded into registers before the inverse transform instead
// of after it, so that its reads are in flight during the transform (2 EPT more registers).
template <int N, int EPT, int F, bool EARLY = false>
__device__ __forceinline__ void reverse_body(typename LinePair<N, EPT, F>::cx* r, const ReverseLine& l,
                                             float2* __restrict__ w, const float2* __restrict__ screen,
                                             const float2* __restrict__ stored, float kd, float* __restrict__ grad) {
    using P = LinePair<N, EPT, F>;
    using cx = typename P::cx;
    extern __shared__ __align__(16) unsigned char smem[];
    float* partial = reinterpret_cast<float*>(smem + P::fft_bytes);  // (F, N), after the FFT's memory
    const int y = l.y;
    float2 early[EARLY ? EPT : 1];
    if (EARLY) {
        for (int e = 0; e < EPT; ++e)
            early[e] = l.valid ? stored[l.line + threadIdx.x + e * P::stride] : make_float2(0.0f, 0.0f);
    }
    typename P::Inverse().execute(r, reinterpret_cast<cx*>(smem));
    for (int e = 0; e < EPT; ++e) {
        const int x = threadIdx.x + e * P::stride;
        const float2 p = screen[(long long)y * N + x];
        const float2 wk = EARLY ? early[e] : l.valid ? stored[l.line + x] : make_float2(0.0f, 0.0f);
        float2 bv = at<P>(r, e);
        partial[threadIdx.y * N + x] = screen_gradient(p, wk, &bv);  // Im(conj(p w) b)
        put<P>(r, e, bv);
    }
    __syncthreads();
    typename P::Forward().execute(r, reinterpret_cast<cx*>(smem));
    if (l.valid) qora::registers_to_line<P>(r, w + l.line);
    const int threads = blockDim.x * blockDim.y;
    for (int x = qora::block_thread(); x < N; x += threads) {
        float sum = 0.0f;
        for (int f = 0; f < F; ++f) sum += partial[f * N + x];
        atomicAdd(grad + (long long)y * N + x, kd * sum);
    }
}

template <int N, int EPT, int F, bool EARLY = false>
__device__ __forceinline__ void row_reverse(float2* __restrict__ w, const float2* __restrict__ screen,
                                            const float2* __restrict__ stored, int count, float kd,
                                            float* __restrict__ grad) {
    using P = LinePair<N, EPT, F>;
    const ReverseLine l = ReverseLine::of<N, F>(blockIdx.x, count);
    typename P::cx r[EPT];
    reverse_load<P>(w, l, r);
    reverse_body<N, EPT, F, EARLY>(r, l, w, screen, stored, kd, grad);
}

// row_reverse as a persistent grid over its `tiles` (n groups-of-illumination rows), as row_pipe
template <int N, int EPT, int F>
__device__ __forceinline__ void row_reverse_pipe(float2* __restrict__ w, const float2* __restrict__ screen,
                                                 const float2* __restrict__ stored, int count, float kd,
                                                 float* __restrict__ grad, long long tiles) {
    using P = LinePair<N, EPT, F>;
    using cx = typename P::cx;
    unsigned int t = blockIdx.x;
    if (t >= tiles) return;
    cx next[EPT];
    reverse_load<P>(w, ReverseLine::of<N, F>(t, count), next);
    for (; t < tiles; t += gridDim.x) {
        cx r[EPT];
        for (int e = 0; e < EPT; ++e) r[e] = next[e];
        const unsigned int later = t + gridDim.x;
        if (later < tiles) reverse_load<P>(w, ReverseLine::of<N, F>(later, count), next);
        reverse_body<N, EPT, F>(r, ReverseLine::of<N, F>(t, count), w, screen, stored, kd, grad);
        __syncthreads();  // the partial sums and the FFT's shared memory are reused by the next tile
    }
}

// ------------------------------------------------------------------------------------------
// Kernels named <kind>_<N>_<F>_<EPT>; <family>_params_<N>_<F>_<EPT> writes block (x, y) and the
// dynamic shared memory of each kind for the host.

#define QORA_BOUNDS(N, EPT, F) __launch_bounds__(LinePair<N, EPT, F>::Forward::max_threads_per_block)
#define QORA_MAX(a, b) ((a) > (b) ? (a) : (b))

#define QORA_BPM_COLUMN_LOAD(N, EPT, F, LOAD, SUFFIX)                                                      \
    extern "C" __global__ void bpm_column_params_##N##_##F##_##EPT##SUFFIX(int* out) {                      \
        using P = LinePair<N, EPT, F>;                                                                      \
        out[0] = P::Forward::block_dim.x;                                                                   \
        out[1] = P::Forward::block_dim.y;                                                                   \
        out[2] = ColumnSmem<N, EPT, F, LOAD>::bytes;                                                        \
    }                                                                                                       \
    extern "C" __global__ void QORA_BOUNDS(N, EPT, F) bpm_column_forward_##N##_##F##_##EPT##SUFFIX(         \
        float2* w, float2* s, const float2* tq, const float2* tr) {                                         \
        column_pass<N, EPT, F, false, LOAD>(w, s, tq, tr, 1.0f, 0);                                         \
    }                                                                                                       \
    extern "C" __global__ void QORA_BOUNDS(N, EPT, F) bpm_column_reverse_##N##_##F##_##EPT##SUFFIX(         \
        float2* w, float2* g, const float2* tq, const float2* tr, float scale, int first) {                 \
        column_pass<N, EPT, F, true, LOAD>(w, g, tq, tr, scale, first);                                     \
    }
#define QORA_BPM_COLUMN(N, EPT, F) QORA_BPM_COLUMN_LOAD(N, EPT, F, COLUMN_PLAIN, )
#define QORA_BPM_COLUMN_ASYNC(N, EPT, F) QORA_BPM_COLUMN_LOAD(N, EPT, F, COLUMN_ASYNC, _async)
#define QORA_BPM_COLUMN_STAGE(N, EPT, F) QORA_BPM_COLUMN_LOAD(N, EPT, F, COLUMN_STAGE, _stage)

// the launch parameters of a row-pass family: its block shape, the transforms' shared memory, and that
// with the tile of F lines
#define QORA_BPM_ROW_PARAMS(N, EPT, F, SUFFIX)                                                              \
    extern "C" __global__ void bpm_row_params_##N##_##F##_##EPT##SUFFIX(int* out) {                         \
        using P = LinePair<N, EPT, F>;                                                                      \
        out[0] = P::Forward::block_dim.x;                                                                   \
        out[1] = P::Forward::block_dim.y;                                                                   \
        out[2] = P::fft_bytes;                                                                              \
        out[3] = P::fft_bytes + F * N * 4;                                                                  \
    }

#define QORA_BPM_ROW(N, EPT, F)                                                                             \
    QORA_BPM_ROW_PARAMS(N, EPT, F, )                                                                        \
    extern "C" __global__ void QORA_BOUNDS(N, EPT, F) bpm_row_forward_##N##_##F##_##EPT(                    \
        float2* w, const float2* screen, float scale, float2* stored) {                                     \
        row_pass<N, EPT, F, ROW_FORWARD>(w, screen, scale, stored, nullptr);                                \
    }                                                                                                       \
    extern "C" __global__ void QORA_BOUNDS(N, EPT, F) bpm_row_output_##N##_##F##_##EPT(                     \
        float2* w, float scale, float2* out) {                                                              \
        row_pass<N, EPT, F, ROW_OUTPUT>(w, nullptr, scale, out, nullptr);                                   \
    }                                                                                                       \
    extern "C" __global__ void QORA_BOUNDS(N, EPT, F) bpm_row_residual_##N##_##F##_##EPT(                   \
        float2* w, const float2* data, float scale, double* loss) {                                         \
        row_pass<N, EPT, F, ROW_RESIDUAL>(w, data, scale, nullptr, loss);                                   \
    }                                                                                                       \
    extern "C" __global__ void QORA_BOUNDS(N, EPT, F) bpm_row_reverse_##N##_##F##_##EPT(                    \
        float2* w, const float2* screen, const float2* stored, int count, float kd, float* grad) {          \
        row_reverse<N, EPT, F>(w, screen, stored, count, kd, grad);                                         \
    }

// the row passes as persistent grids (ROW_PIPE): one more argument, the number of groups (tiles)
#define QORA_BPM_ROW_PIPE(N, EPT, F)                                                                        \
    QORA_BPM_ROW_PARAMS(N, EPT, F, _pipe)                                                                   \
    extern "C" __global__ void QORA_BOUNDS(N, EPT, F) bpm_row_forward_##N##_##F##_##EPT##_pipe(             \
        float2* w, const float2* screen, float scale, float2* stored, long long groups) {                   \
        row_pipe<N, EPT, F, ROW_FORWARD>(w, screen, scale, stored, nullptr, groups);                        \
    }                                                                                                       \
    extern "C" __global__ void QORA_BOUNDS(N, EPT, F) bpm_row_output_##N##_##F##_##EPT##_pipe(              \
        float2* w, float scale, float2* out, long long groups) {                                            \
        row_pipe<N, EPT, F, ROW_OUTPUT>(w, nullptr, scale, out, nullptr, groups);                           \
    }                                                                                                       \
    extern "C" __global__ void QORA_BOUNDS(N, EPT, F) bpm_row_residual_##N##_##F##_##EPT##_pipe(            \
        float2* w, const float2* data, float scale, double* loss, long long groups) {                       \
        row_pipe<N, EPT, F, ROW_RESIDUAL>(w, data, scale, nullptr, loss, groups);                           \
    }                                                                                                       \
    extern "C" __global__ void QORA_BOUNDS(N, EPT, F) bpm_row_reverse_##N##_##F##_##EPT##_pipe(             \
        float2* w, const float2* screen, const float2* stored, int count, float kd, float* grad,            \
        long long tiles) {                                                                                  \
        row_reverse_pipe<N, EPT, F>(w, screen, stored, count, kd, grad, tiles);                             \
    }

// the reverse row pass with w_k loaded before the inverse transform (EARLY), plain grid
#define QORA_BPM_REVERSE_EARLY(N, EPT, F)                                                                   \
    QORA_BPM_ROW_PARAMS(N, EPT, F, _early)                                                                  \
    extern "C" __global__ void QORA_BOUNDS(N, EPT, F) bpm_row_reverse_##N##_##F##_##EPT##_early(            \
        float2* w, const float2* screen, const float2* stored, int count, float kd, float* grad) {          \
        row_reverse<N, EPT, F, true>(w, screen, stored, count, kd, grad);                                   \
    }

// (N, elements per thread, lines per block): the column passes with 16 elements per thread where
// qora.phase measured its two-transform strided passes faster so (256 points), the row passes
// with 8; 4 lines per block for the reverse row pass (its B = 49 illuminations in 13 groups).
QORA_BPM_COLUMN(128, 8, 16)
QORA_BPM_COLUMN(256, 8, 16)
QORA_BPM_COLUMN(256, 16, 16)
QORA_BPM_COLUMN(512, 8, 8)
QORA_BPM_COLUMN(512, 16, 8)
QORA_BPM_ROW(128, 8, 16)
QORA_BPM_ROW(128, 8, 4)
QORA_BPM_ROW(256, 8, 16)
QORA_BPM_ROW(256, 8, 4)
QORA_BPM_ROW(512, 8, 8)
QORA_BPM_ROW(512, 8, 4)

// Candidates, measured against the above by bench/probes/bpm_fused_probe.py --column-loads/--row-loads
// (docs/holo-performance.md, "Fused BPM candidates"); FusedSteps takes them only when asked.
// Column passes with the tile through cp.async, and with S (G), tq, tr staged in the same burst
// (256 x 16 lines: 34 + 96 KB, one block of 256 threads per SM; 256 x 8 lines: 18 + 48 KB, three
// blocks of 128 threads):
QORA_BPM_COLUMN_ASYNC(128, 8, 16)
QORA_BPM_COLUMN_ASYNC(256, 16, 16)
QORA_BPM_COLUMN_ASYNC(256, 8, 16)
QORA_BPM_COLUMN_ASYNC(512, 16, 8)
QORA_BPM_COLUMN_STAGE(128, 8, 16)
QORA_BPM_COLUMN_STAGE(256, 16, 16)
QORA_BPM_COLUMN_STAGE(256, 16, 8)
QORA_BPM_COLUMN_STAGE(512, 16, 4)
// column passes of 8 lines with 16 elements per thread (plain loads): more, smaller blocks per SM
QORA_BPM_COLUMN(256, 16, 8)
// row passes: persistent grids with the next group prefetched, and 16 elements per thread
QORA_BPM_ROW_PIPE(128, 8, 16)
QORA_BPM_ROW_PIPE(128, 8, 4)
QORA_BPM_ROW_PIPE(256, 8, 16)
QORA_BPM_ROW_PIPE(256, 8, 4)
QORA_BPM_ROW_PIPE(512, 8, 8)
QORA_BPM_ROW_PIPE(512, 8, 4)
QORA_BPM_ROW(256, 16, 16)
QORA_BPM_ROW(256, 16, 4)
QORA_BPM_ROW_PIPE(256, 16, 16)
QORA_BPM_ROW_PIPE(256, 16, 4)
// the reverse row pass with the stored envelope loaded early (reverse_load="early")
QORA_BPM_REVERSE_EARLY(128, 8, 4)
QORA_BPM_REVERSE_EARLY(256, 8, 4)
QORA_BPM_REVERSE_EARLY(256, 16, 4)
QORA_BPM_REVERSE_EARLY(512, 8, 4)
