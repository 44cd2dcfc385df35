// qora.holo, BPM variant fused_resident: the whole slice loop of one illumination in one thread-block
// cluster, the field kept on chip from the first slice to the last (docs/holo-performance.md, "The
// field on chip"). Reference: qora.holo.bpm (_forward_chunk and _reverse); the same slice algebra as
// the fused line passes (bpm_slice.cuh), the same register order of S and the tables.
//
// One cluster of C CTAs per illumination. CTA `rank` holds rows y = rank R .. rank R + R - 1
// (R = N / C) of the slice W in its shared memory (row pitch N + 1 against bank conflicts of the
// column reads), and owns columns kx = rank R .. rank R + R - 1 for the column transforms, which it
// gathers from all C CTAs through distributed shared memory. Per slice, forward:
//   rows     along x   w = F_x^-1 W / n^2 (stored when asked); W <- F_x (p_k w)        (own rows)
//   columns  along y   A = F_y W; S <- tq A + tr S; W <- F_y^-1 S        (own columns, all CTAs' rows)
// S stays in global memory in the column pass's register order (lines = R); tq and tr of every slice
// but the last are read into shared memory once per kernel. Per element and slice DRAM sees S read and
// written: 16 B (24 storing w_k) against the line passes' 64 (72), which also move W out and back twice.
// Measured slower than the line passes all the same: with one illumination per cluster the SMs hold
// too few warps, in lockstep between cluster barriers, to hide the on-chip latencies (the docs' section).
//
// The transforms' shared memory is the field itself: a phase loads all R lines of the CTA into
// registers (R lines x N / EPT threads x EPT = R N values, the whole part), so the field's memory is
// free while the transforms run. That takes cluster barriers: after the column gather (no CTA reads
// another's field any more), before the scatter (no CTA's transform still uses its field), after
// the scatter and after the row phase.
//
// Built offline with bpm_fused.cu: `python -m qora.holo.build_fused --mathdx <nvidia/mathdx>`.

#include <cooperative_groups.h>

#include "line_fft.cuh"
#include "bpm_slice.cuh"

namespace cg = cooperative_groups;
using qora::LinePair;

template <int N_, int EPT_, int C_>
struct Resident {
    static constexpr int N = N_, EPT = EPT_, C = C_;
    static constexpr int R = N / C;
    static constexpr int pitch = N + 1;
    using P = LinePair<N, EPT, R>;
    using cx = typename P::cx;
    static constexpr int stride = P::stride;
    static constexpr int threads = stride * R;
    static constexpr int field_bytes = R * pitch * 8;
    static constexpr int run = N * R;  // values of one register-order array a CTA's columns hold
    // the field (and the transforms' memory over it), then the CTA's tq and tr of every slice but the last
    static constexpr int tables_offset = (field_bytes + 15) / 16 * 16;
    static constexpr int smem_bytes = tables_offset + 2 * run * 8;
    static_assert(N % C == 0 && threads <= 1024, "a CTA holds N / C whole lines");
    static_assert(field_bytes >= P::fft_bytes, "the field is the transforms' memory");
};

// What every resident kernel reads: the chunk's S (G) and tables in register order (lines R) from its
// first illumination on, the screens (nz, n, n), the slice count; tq and tr of every slice but the last
// are the same, so each CTA copies its part into shared memory once (`tq`, `tr`) and reads the last
// slice's from global memory.
struct Slices {
    float2* s;
    const float2* screens;
    const float2 *cq, *cr, *lq, *lr;  // every slice but the last, and the last
    int nz;
    const float2 *tq, *tr;  // the CTA's run of cq and cr in shared memory
};

template <class Z>
__device__ __forceinline__ void tables_in(Slices& a, unsigned char* smem, long long blk) {
    float2* tq = reinterpret_cast<float2*>(smem + Z::tables_offset);
    float2* tr = tq + Z::run;
    const float2* cq = a.cq + blk * Z::run;
    const float2* cr = a.cr + blk * Z::run;
    for (int i = qora::block_thread(); i < Z::run; i += Z::threads) {
        tq[i] = __ldg(cq + i);
        tr[i] = __ldg(cr + i);
    }
    a.tq = tq;
    a.tr = tr;
}

// this thread's elements of its row (threadIdx.y) of the CTA's part, between the field and registers
template <class Z>
__device__ __forceinline__ void row_in(const float2* field, typename Z::cx* r) {
    for (int e = 0; e < Z::EPT; ++e) {
        const float2 v = field[threadIdx.y * Z::pitch + threadIdx.x + e * Z::stride];
        r[e] = typename Z::cx{v.x, v.y};
    }
}

template <class Z>
__device__ __forceinline__ void row_out(const typename Z::cx* r, float2* field) {
    for (int e = 0; e < Z::EPT; ++e)
        field[threadIdx.y * Z::pitch + threadIdx.x + e * Z::stride] = make_float2(r[e].x, r[e].y);
}

// Element e of this thread's column (kx = rank R + threadIdx.y) is row ky = tx + e stride, held by CTA
// ky / R at its row ky % R: its 32-bit address in the cluster's shared window. The mapping is volatile
// so that the compiler recomputes it for the scatter instead of keeping all EPT addresses live across
// the transforms (with generic 64-bit pointers that held the registers at 128 against 64).
template <class Z>
__device__ __forceinline__ unsigned column_element(const float2* field, int rank, int e) {
    const int ky = threadIdx.x + e * Z::stride;
    const unsigned local = static_cast<unsigned>(__cvta_generic_to_shared(field)) +
                           8u * ((ky % Z::R) * Z::pitch + rank * Z::R + threadIdx.y);
    unsigned remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(ky / Z::R));
    return remote;
}

__device__ __forceinline__ float2 cluster_load(unsigned address) {
    float2 v;
    asm volatile("ld.shared::cluster.v2.f32 {%0, %1}, [%2];" : "=f"(v.x), "=f"(v.y) : "r"(address) : "memory");
    return v;
}

__device__ __forceinline__ void cluster_store(unsigned address, float2 v) {
    asm volatile("st.shared::cluster.v2.f32 [%0], {%1, %2};" ::"r"(address), "f"(v.x), "f"(v.y) : "memory");
}

// The column phase of slice k: gather the CTA's columns from the cluster, forward y transform, the
// spectral step (forward or adjoint), inverse y transform, scatter back.
template <class Z, bool REVERSE>
__device__ __forceinline__ void column_phase(cg::cluster_group& cluster, float2* field, const Slices& a, int k,
                                             long long blk, int rank, float scale) {
    using cx = typename Z::cx;
    const bool last = k == a.nz - 1;
    // the CTA's run of each register-order array; register e at q + e R stride in it
    const long long run = blk * Z::run;
    float2* sk = a.s + run;
    const int q = threadIdx.y * Z::stride + threadIdx.x;
    // S (G) is read before the gather so that its DRAM latency passes under the gather and the transform
    // (the reverse pass starts at the last slice with G = 0)
    float2 old[Z::EPT];
    for (int e = 0; e < Z::EPT; ++e)
        old[e] = REVERSE && last ? make_float2(0.0f, 0.0f) : sk[q + e * Z::R * Z::stride];
    cx r[Z::EPT];
    for (int e = 0; e < Z::EPT; ++e) {
        const float2 v = cluster_load(column_element<Z>(field, rank, e));
        r[e] = cx{v.x, v.y};
    }
    cluster.sync();  // no CTA reads another's field any more: each field is its transforms' memory
    cx* scratch = reinterpret_cast<cx*>(field);
    typename Z::P::Forward().execute(r, scratch);
    const float2* tq = last ? a.lq + run : a.tq;
    const float2* tr = last ? a.lr + run : a.tr;
    for (int e = 0; e < Z::EPT; ++e) {
        const int i = q + e * Z::R * Z::stride;
        const float2 v = at<typename Z::P>(r, e);
        if (!REVERSE) {
            const float2 next = propagate(v, tq[i], tr[i], old[e]);
            sk[i] = next;
            put<typename Z::P>(r, e, next);
        } else {
            float2 g = old[e];
            put<typename Z::P>(r, e, propagate_adjoint(v, tq[i], tr[i], &g, last, scale));
            sk[i] = g;
        }
    }
    __syncthreads();
    typename Z::P::Inverse().execute(r, scratch);
    cluster.sync();  // every CTA's transforms are done with its field
    for (int e = 0; e < Z::EPT; ++e) cluster_store(column_element<Z>(field, rank, e), make_float2(r[e].x, r[e].y));
    cluster.sync();  // every column is back before the rows are read
}

enum { ROWS_FORWARD = 0, ROWS_OUTPUT = 1, ROWS_RESIDUAL = 2, ROWS_REVERSE = 3 };

// What a row phase reads or writes besides the field (by mode).
struct RowArgs {
    const float2* screen;  // FORWARD, REVERSE: the slice's screen p_k (n, n)
    float2* stored;        // FORWARD: w_k of the chunk's illumination 0 for this slice, or null; REVERSE: read
    const float2* data;    // RESIDUAL: the chunk's data (centre-origin), or with scale 0 the residual itself
    float2* out;           // OUTPUT: the chunk's field ratios (centre-origin)
    double* loss;          // RESIDUAL
    float* grad;           // REVERSE: the slice's gradient (n, n), natural order
    float kd;
};

// The row phase: the CTA's R rows (y = rank R + threadIdx.y of illumination b) through an inverse x
// transform, the mode's element-wise step, and (but OUTPUT) a forward x transform back into the field.
template <class Z, int MODE>
__device__ __forceinline__ void row_phase(float2* field, const RowArgs& a, long long b, int rank, float scale) {
    using cx = typename Z::cx;
    constexpr int N = Z::N;
    cx r[Z::EPT];
    row_in<Z>(field, r);
    const int y = rank * Z::R + threadIdx.y;
    const long long line = b * N + y;
    const long long centred = (b * N + (y + N / 2) % N) * N;
    // the screen (and in the reverse pass w_k) read before the inverse transform, so that their latency
    // passes under it
    constexpr bool SCREEN = MODE == ROWS_FORWARD || MODE == ROWS_REVERSE;
    float2 p[SCREEN ? Z::EPT : 1], wk[MODE == ROWS_REVERSE ? Z::EPT : 1];
    for (int e = 0; SCREEN && e < Z::EPT; ++e) {
        const int x = threadIdx.x + e * Z::stride;
        p[e] = __ldg(a.screen + (long long)y * N + x);
        if (MODE == ROWS_REVERSE) wk[e] = __ldg(a.stored + line * N + x);
    }
    __syncthreads();  // the whole part is in registers: the field is the transforms' memory
    cx* scratch = reinterpret_cast<cx*>(field);
    const bool skip_inverse = MODE == ROWS_RESIDUAL && scale == 0.0f;
    if (!skip_inverse) typename Z::P::Inverse().execute(r, scratch);
    float err = 0.0f;
    for (int e = 0; e < Z::EPT; ++e) {
        const int x = threadIdx.x + e * Z::stride;
        const float2 v = make_float2(r[e].x * scale, r[e].y * scale);
        if (MODE == ROWS_FORWARD) {
            if (a.stored != nullptr) a.stored[line * N + x] = v;
            put<typename Z::P>(r, e, mul(p[e], v));
        } else if (MODE == ROWS_OUTPUT) {
            a.out[centred + (x + N / 2) % N] = v;
        } else if (MODE == ROWS_RESIDUAL) {  // r = w - d, or with scale 0 the residual d itself
            const float2 d = a.data[centred + (x + N / 2) % N];
            const float2 res = skip_inverse ? d : make_float2(v.x - d.x, v.y - d.y);
            err += res.x * res.x + res.y * res.y;
            put<typename Z::P>(r, e, res);
        } else {  // b = F_x^-1 W (unscaled); grad_k += kd Im(conj(p w_k) b); b <- conj(p) b
            float2 bv = at<typename Z::P>(r, e);
            const float term = screen_gradient(p[e], wk[e], &bv);
            atomicAdd(a.grad + (long long)y * N + x, a.kd * term);
            put<typename Z::P>(r, e, bv);
        }
    }
    if (MODE == ROWS_OUTPUT) return;
    if (MODE == ROWS_RESIDUAL) qora::block_add_2d(err, a.loss);  // its barrier also frees the transform's memory
    else __syncthreads();
    typename Z::P::Forward().execute(r, scratch);
    __syncthreads();  // the transform is done with the field before the rows go back into it
    row_out<Z>(r, field);
}

// The forward slice loop of illumination b (blockIdx.x / C) from S_0 (set by the host: n^2 at bin
// (0, 0)); W starts as F_y^-1 S_0, n^2 in column kx = 0 of every row. With `stored`, w_k of every
// slice at stored + k stored_slice (the chunk's illumination 0).
template <class Z>
__device__ __forceinline__ void forward_slices(cg::cluster_group& cluster, float2* field, Slices& s,
                                               float2* stored, long long stored_slice, float scale) {
    const long long b = blockIdx.x / Z::C;
    const int rank = (int)cluster.block_rank();
    const long long blk = b * Z::C + rank;
    for (int i = qora::block_thread(); i < Z::R * Z::pitch; i += Z::threads)
        field[i] = make_float2(i % Z::pitch == 0 ? (float)Z::N * Z::N : 0.0f, 0.0f);
    tables_in<Z>(s, reinterpret_cast<unsigned char*>(field), blk);
    __syncthreads();
    RowArgs rows{};
    for (int k = 0; k < s.nz; ++k) {
        rows.screen = s.screens + (long long)k * Z::N * Z::N;
        rows.stored = stored == nullptr ? nullptr : stored + k * stored_slice;
        row_phase<Z, ROWS_FORWARD>(field, rows, b, rank, scale);
        cluster.sync();  // every row of the slice is screened before any column is gathered
        column_phase<Z, false>(cluster, field, s, k, blk, rank, 1.0f);
    }
}

template <class Z>
__device__ __forceinline__ void resident_forward(Slices s, float scale, float2* out) {
    extern __shared__ __align__(16) unsigned char smem[];
    float2* field = reinterpret_cast<float2*>(smem);
    cg::cluster_group cluster = cg::this_cluster();
    forward_slices<Z>(cluster, field, s, nullptr, 0, scale);
    RowArgs rows{};
    rows.out = out;
    row_phase<Z, ROWS_OUTPUT>(field, rows, blockIdx.x / Z::C, (int)cluster.block_rank(), scale);
}

// Forward (storing w_k), residual, and the reverse slice loop: Re(J^H r) summed over the chunk's
// illuminations into grad (nz, n, n), sum |r|^2 into loss. G reuses S's memory.
template <class Z>
__device__ __forceinline__ void resident_gradient(Slices s, float scale, float2* stored, long long stored_slice,
                                                  const float2* data, float residual_scale, double* loss, float kd,
                                                  float* grad) {
    extern __shared__ __align__(16) unsigned char smem[];
    float2* field = reinterpret_cast<float2*>(smem);
    cg::cluster_group cluster = cg::this_cluster();
    const long long b = blockIdx.x / Z::C;
    const int rank = (int)cluster.block_rank();
    const long long blk = b * Z::C + rank;
    forward_slices<Z>(cluster, field, s, stored, stored_slice, scale);
    RowArgs rows{};
    rows.data = data;
    rows.loss = loss;
    rows.kd = kd;
    row_phase<Z, ROWS_RESIDUAL>(field, rows, b, rank, residual_scale);
    cluster.sync();
    for (int k = s.nz - 1; k >= 0; --k) {
        column_phase<Z, true>(cluster, field, s, k, blk, rank, scale);
        rows.screen = s.screens + (long long)k * Z::N * Z::N;
        rows.stored = stored + k * stored_slice;
        rows.grad = grad + (long long)k * Z::N * Z::N;
        row_phase<Z, ROWS_REVERSE>(field, rows, b, rank, 1.0f);
        cluster.sync();  // the rows are back before the next columns are gathered
    }
}

// Kernels named bpm_resident_<kind>_<N>_<C>_<EPT>_<CTAs per SM>; bpm_resident_params_... writes the block (x, y),
// the dynamic shared memory and the cluster size for the host.
#define QORA_BPM_RESIDENT(N, EPT, C, MIN_BLOCKS)                                                            \
    extern "C" __global__ void bpm_resident_params_##N##_##C##_##EPT##_##MIN_BLOCKS(int* out) {                            \
        using Z = Resident<N, EPT, C>;                                                                      \
        out[0] = Z::P::Forward::block_dim.x;                                                                \
        out[1] = Z::P::Forward::block_dim.y;                                                                \
        out[2] = Z::smem_bytes;                                                                             \
        out[3] = C;                                                                                         \
    }                                                                                                       \
    extern "C" __global__ void __cluster_dims__(C, 1, 1) __launch_bounds__(Resident<N, EPT, C>::threads, MIN_BLOCKS) \
        bpm_resident_forward_##N##_##C##_##EPT##_##MIN_BLOCKS(float2* s, const float2* screens, const float2* cq, const float2* cr, \
                                               const float2* lq, const float2* lr, int nz, float scale,      \
                                               float2* out) {                                                \
        resident_forward<Resident<N, EPT, C>>(Slices{s, screens, cq, cr, lq, lr, nz}, scale, out);          \
    }                                                                                                       \
    extern "C" __global__ void __cluster_dims__(C, 1, 1) __launch_bounds__(Resident<N, EPT, C>::threads, MIN_BLOCKS) \
        bpm_resident_gradient_##N##_##C##_##EPT##_##MIN_BLOCKS(float2* s, const float2* screens, const float2* cq,         \
                                                const float2* cr, const float2* lq, const float2* lr, int nz, \
                                                float scale, float2* stored, long long stored_slice,          \
                                                const float2* data, float residual_scale, double* loss,       \
                                                float kd, float* grad) {                                     \
        resident_gradient<Resident<N, EPT, C>>(Slices{s, screens, cq, cr, lq, lr, nz}, scale, stored,        \
                                               stored_slice, data, residual_scale, loss, kd, grad);          \
    }

// (N, elements per thread, CTAs per cluster, CTAs per SM the registers are bounded for): 32 lines of
// 16 threads per CTA. At 128 two CTAs per SM (33 + 64 KB of shared memory, 64 registers): 66 clusters of
// 4 at once, all 49 illuminations of the reference geometry in one wave. At 256 the field and tables
// (66 + 128 KB) leave one CTA per SM: 16 clusters of 8 at once, 128 registers and no spills (two per SM
// without the tables in shared memory spilled at 64 registers and measured no faster).
QORA_BPM_RESIDENT(128, 8, 4, 2)
QORA_BPM_RESIDENT(256, 16, 8, 1)
