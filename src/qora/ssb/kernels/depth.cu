// qora.ssb: the depth-incoherent thick model's section transfers (qora.ssb.depth.IncoherentBand).
//
// One thread per (band frequency Q of a block, bright-field pixel k) writes, for each of the M depth
// sections m and each of the L columns l (the transfer, its first derivatives in the fitted parameters,
// the second of each pair i <= j), X[q][l][m][k] of
//
//     T_m(Q, k) = sum over Gamma's two terms of  s A1 A2 e^{-i sum_p c_p d_p} f_m(a t),
//     f_m(u) = e^{i c_m u} sinc(u / 2M),   c_m = (m + 1/2) / M - 1/2,
//
// s = +1 for term 1 (k - Q), -1 for term 2 (k + Q); d_p the term's basis difference of C10, C12a or
// C12b (B(k - Q) - B(k), B(k) - B(k + Q)); a the term's depth phase pi lambda (|k|^2 - |k - Q|^2) or
// pi lambda (|k + Q|^2 - |k|^2). The layout (q, l, m, k) lets the products that follow (cuBLAS, in
// qora.ssb.depth) read the transfers, the sections' T and the first derivatives as contiguous
// matrices. Everything is computed in float64 and stored in the output's precision: the work per pair
// is a few dozen complex products and 2 M + 2 sincos, against L M stores of 8 or 16 B, so the kernel is
// a stream of stores (docs/ssb-performance.md, "The incoherent fit at the columnar cost").

#define QPI 3.141592653589793238462643383279502884
#define MOST_PARAMETERS 4
#define MOST_COLUMNS (1 + MOST_PARAMETERS + MOST_PARAMETERS * (MOST_PARAMETERS + 1) / 2)

// warp_sum (qora/backend/kernels)
#include "qora_device.cuh"

namespace {

template <typename T> struct Store;
template <> struct Store<float2> {
    static __device__ __forceinline__ float2 make(double re, double im) { return make_float2((float)re, (float)im); }
};
template <> struct Store<double2> {
    static __device__ __forceinline__ double2 make(double re, double im) { return make_double2(re, im); }
};

struct Z {  // a complex float64 in registers
    double re, im;
    __device__ __forceinline__ Z operator*(Z b) const { return {re * b.re - im * b.im, re * b.im + im * b.re}; }
    __device__ __forceinline__ Z operator*(double b) const { return {re * b, im * b}; }
    __device__ __forceinline__ Z operator+(Z b) const { return {re + b.re, im + b.im}; }
};

__device__ __forceinline__ Z minus_i(Z a) { return {a.im, -a.re}; }  // -i a

// sinc(v) and its first two derivatives in v from s, c = sin v, cos v (a series near 0, as
// qora.ssb.model.sinc_derivatives)
__device__ __forceinline__ void sinc3(double v, double s, double c, double& h, double& h1, double& h2) {
    if (fabs(v) < 1e-4) {
        h = 1.0 - v * v / 6.0;
        h1 = -v / 3.0;
        h2 = -1.0 / 3.0 + v * v / 10.0;
        return;
    }
    h = s / v;
    h1 = (v * c - s) / (v * v);
    h2 = -s / v - 2.0 * c / (v * v) + 2.0 * s / (v * v * v);
}

// One term of Gamma at (Q, k): whether it is present, its base s e^{-i phase}, depth phase a and basis
// differences d[C10, C12a, C12b]
struct Term {
    bool on;
    Z base;
    double a, d[3];
};

__device__ __forceinline__ Term term_at(double ky, double kx, double qy, double qx, double sign, double lam,
                                        double limit, const double* c) {
    Term t;
    const double sy = ky + sign * qy, sx = kx + sign * qx;  // k - Q (term 1) or k + Q (term 2)
    t.on = hypot(sx, sy) <= limit;  // k itself is a bright-field pixel; the array code tests both
    t.on = t.on && hypot(kx, ky) <= limit;
    const double pl = QPI * lam;
    // B(k +- Q) - B(k) for C10, C12a, C12b (basis of qora.ssb.model: pi lambda |k|^2, (kx^2 - ky^2), 2 ky kx)
    const double b10 = pl * ((sy * sy + sx * sx) - (ky * ky + kx * kx));
    const double b12a = pl * ((sx * sx - sy * sy) - (kx * kx - ky * ky));
    const double b12b = 2.0 * pl * (sy * sx - ky * kx);
    const double o = sign < 0 ? 1.0 : -1.0;  // term 1: B(k - Q) - B(k); term 2: B(k) - B(k + Q)
    t.d[0] = o * b10;
    t.d[1] = o * b12a;
    t.d[2] = o * b12b;
    t.a = -o * b10;  // pi lambda (|k|^2 - |k - Q|^2), pi lambda (|k + Q|^2 - |k|^2)
    const double phase = c[0] * t.d[0] + c[1] * t.d[1] + c[2] * t.d[2];
    double s, co;
    sincos(phase, &s, &co);
    const double amp = t.on ? (sign < 0 ? 1.0 : -1.0) : 0.0;
    t.base = {amp * co, -amp * s};
    return t;
}

// The L columns of section m's transfer at one (Q, k) from its two terms (the transfer, its first
// derivatives in the P fitted parameters of kind[], the second of each pair i <= j), into col
// g[e]: the section's depth phasor e^{i c_m a t} of each term
// (COLS: the columns the caller holds, so that a pass without second derivatives keeps fewer registers)
template <int COLS>
__device__ __forceinline__ void section_columns(const Term (&terms)[2], const double (&h)[2], const double (&h1)[2],
                                                const double (&h2)[2], const Z (&g)[2], double cm,
                                                const int (&kind)[MOST_PARAMETERS], int P, int order,
                                                Z (&col)[COLS]) {
#pragma unroll
    for (int l = 0; l < COLS; ++l) col[l] = {0.0, 0.0};
#pragma unroll
    for (int e = 0; e < 2; ++e) {
        const Term& t = terms[e];
        if (!t.on) continue;
        double dp[MOST_PARAMETERS];  // the fitted aberrations' d by selects (no indexed local array)
#pragma unroll
        for (int i = 0; i < MOST_PARAMETERS; ++i)
            dp[i] = kind[i] == 0 ? t.d[0] : kind[i] == 1 ? t.d[1] : kind[i] == 2 ? t.d[2] : 0.0;
        const Z f = g[e] * h[e];
        col[0] = col[0] + t.base * f;
        if (order == 0 || COLS == 1) continue;
        const Z f1 = Z{h1[e], cm * h[e]} * g[e];  // df/du = (i c h + h1) g
        const Z f2 = Z{h2[e] - cm * cm * h[e], 2.0 * cm * h1[e]} * g[e];
        // the loops unrolled to their bounds, so that col's indices are constants (registers)
#pragma unroll
        for (int i = 0; i < MOST_PARAMETERS; ++i) {
            if (i >= P || 1 + i >= COLS) continue;
            const bool ai = kind[i] < 3;
            col[1 + i] = col[1 + i] + (ai ? minus_i(t.base * f) * dp[i] : t.base * f1 * t.a);
#pragma unroll
            for (int jj = i; jj < MOST_PARAMETERS; ++jj) {
                if (jj >= P || COLS < MOST_COLUMNS) continue;  // second derivatives: order 2 only
                const int n = 1 + P + i * P - i * (i - 1) / 2 + (jj - i);
                const bool aj = kind[jj] < 3;
                Z second;
                if (ai && aj) second = t.base * f * (-dp[i] * dp[jj]);
                else if (ai || aj) second = minus_i(t.base * f1) * ((ai ? dp[i] : dp[jj]) * t.a);
                else second = t.base * f2 * (t.a * t.a);
#pragma unroll
                for (int l = 2; l < COLS; ++l)  // n >= 1 + P >= 2
                    if (l == n) col[l] = col[l] + second;
            }
        }
    }
}

// Both terms of Gamma at (Q, k), their sinc factors sinc(a t / 2M) with its first two derivatives
// (scaled to derivatives in u = a t), and the first section's depth phasor g0 = e^{i c_0 u} with the
// step r = e^{i u / M} to the next: section m's is g0 r^m (c_m = c_0 + m / M), so one sincos of
// v = u / 2M per term gives the sinc and every section's phasor (was M + 1 sincos a term)
struct PixelTerms {
    Term terms[2];
    double h[2], h1[2], h2[2];
    Z g0[2], r[2];
    __device__ __forceinline__ PixelTerms(double ky, double kx, double qy, double qx, double lam, double limit,
                                          const double* c, double thickness, int M) {
        terms[0] = term_at(ky, kx, qy, qx, -1.0, lam, limit, c);
        terms[1] = term_at(ky, kx, qy, qx, 1.0, lam, limit, c);
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const double v = terms[e].a * thickness / (2.0 * M);
            double sv, cv;
            sincos(v, &sv, &cv);
            sinc3(v, sv, cv, h[e], h1[e], h2[e]);
            h1[e] /= 2.0 * M;
            h2[e] /= 4.0 * M * M;
            const Z half = {cv, -sv};  // e^{-i v}: c_0 u = -(M - 1) v
            Z g = {1.0, 0.0};
            for (int i = 1; i < M; ++i) g = g * half;
            g0[e] = g;
            r[e] = Z{cv * cv - sv * sv, 2.0 * sv * cv};  // e^{2 i v}
        }
    }
    // section m's phasors of both terms, from g0 and r
    __device__ __forceinline__ void phasors(int m, Z (&g)[2]) const {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            Z x = g0[e];
            for (int i = 0; i < m; ++i) x = x * r[e];
            g[e] = x;
        }
    }
};

__device__ __forceinline__ void load_kinds(const int* __restrict__ kinds, int P, int (&kind)[MOST_PARAMETERS]) {
#pragma unroll
    for (int i = 0; i < MOST_PARAMETERS; ++i) kind[i] = i < P ? kinds[i] : 3;
}

}  // namespace

// X (rows, L, M, nbf) of the block's frequencies qy, qx (rows); kinds[i]: 0, 1, 2 for C10, C12a, C12b,
// 3 for the thickness, of the P fitted parameters; coefficients: C10, C12a, C12b (A; 0 where not
// fitted); order 0 writes L = 1 (the transfers), order 1 L = 1 + P (and the first derivatives), order 2
// L = 1 + P + P (P + 1) / 2.
template <typename T, int ORDER>
__global__ void __launch_bounds__(128) incoherent_transfers(
    const double* __restrict__ k, const double* __restrict__ qy, const double* __restrict__ qx, int rows, int nbf,
    double lam, double limit, const double* __restrict__ coefficients, double thickness,
    const int* __restrict__ kinds, int P, int M, T* __restrict__ X) {
    const int L = ORDER == 0 ? 1 : ORDER == 1 ? 1 + P : 1 + P + P * (P + 1) / 2;
    const double c[3] = {coefficients[0], coefficients[1], coefficients[2]};
    int kind[MOST_PARAMETERS];
    load_kinds(kinds, P, kind);
    const long long total = (long long)rows * nbf;
    for (long long idx = blockIdx.x * (long long)blockDim.x + threadIdx.x; idx < total;
         idx += (long long)gridDim.x * blockDim.x) {
        const int q = (int)(idx / nbf), j = (int)(idx - (long long)q * nbf);
        const PixelTerms pt(k[2 * j], k[2 * j + 1], qy[q], qx[q], lam, limit, c, thickness, M);
        T* out = X + (long long)q * L * M * nbf + j;
        Z g[2] = {pt.g0[0], pt.g0[1]};
        for (int m = 0; m < M; ++m) {
            constexpr int COLS = ORDER == 0 ? 1 : ORDER == 1 ? 1 + MOST_PARAMETERS : MOST_COLUMNS;
            Z col[COLS];
            section_columns(pt.terms, pt.h, pt.h1, pt.h2, g, (m + 0.5) / M - 0.5, kind, P, ORDER, col);
            g[0] = g[0] * pt.r[0];
            g[1] = g[1] * pt.r[1];
#pragma unroll
            for (int l = 0; l < COLS; ++l)
                if (l < L) out[((long long)l * M + m) * nbf] = Store<T>::make(col[l].re, col[l].im);
        }
    }
}

// The sums over k of the incoherent model without the transfers in global memory: one block of
// SUMS_THREADS per frequency Q; per tile of SUMS_TILE pixels the threads (pixel, section) write the
// tile's transfers (L M rows) and G (one more row) into shared memory, then each thread adds its tasks'
// products over the tile. A task is a row of the tile times up to TASK_WIDTH columns:
//   kind 0: row (l, m) against [G, T_0 .. T_{M-1}]: sX[q][l][m] and AX[q][l][m][0 .. M-1];
//   kind 1: row (p, m) of the first derivatives against the columns b0 .. b0 + count - 1 of them
//           (flattened (p', n), b0 >= the row's own index): B[q][a][b] and its mirror conj.
// tasks: (kind, row, b0, count) per task, the host's table (qora.ssb.kernels.incoherent_sums).
#define SUMS_THREADS 256
#define SUMS_TILE 32
#define TASK_WIDTH 9
#define MOST_TASKS_PER_THREAD 2

template <typename G_T, int ORDER>
__global__ void __launch_bounds__(SUMS_THREADS) incoherent_sums(
    const G_T* __restrict__ G, const double* __restrict__ k, const double* __restrict__ qy,
    const double* __restrict__ qx, int nbf, double lam, double limit, const double* __restrict__ coefficients,
    double thickness, const int* __restrict__ kinds, int P, int M, const int4* __restrict__ tasks,
    int ntasks, double2* __restrict__ sX, double2* __restrict__ AX, double2* __restrict__ B) {
    extern __shared__ double2 tile[];  // (L M + 1) rows of SUMS_TILE: the transfers, then G
    const int q = blockIdx.x;
    const int L = ORDER == 0 ? 1 : 1 + P + P * (P + 1) / 2;
    const int LM = L * M, PM = P * M;
    const double c[3] = {coefficients[0], coefficients[1], coefficients[2]};
    int kind[MOST_PARAMETERS];
    load_kinds(kinds, P, kind);
    const double Qy = qy[q], Qx = qx[q];
    Z acc[MOST_TASKS_PER_THREAD][TASK_WIDTH];
    int4 mine[MOST_TASKS_PER_THREAD];
#pragma unroll
    for (int t = 0; t < MOST_TASKS_PER_THREAD; ++t) {
        const int id = threadIdx.x + t * SUMS_THREADS;
        mine[t] = id < ntasks ? tasks[id] : make_int4(-1, 0, 0, 0);
#pragma unroll
        for (int w = 0; w < TASK_WIDTH; ++w) acc[t][w] = {0.0, 0.0};
    }
    const int lane = threadIdx.x & 31;
    for (int p0 = 0; p0 < nbf; p0 += SUMS_TILE) {
        __syncthreads();  // the previous tile's products are done
        const int p = threadIdx.x % SUMS_TILE, j = p0 + p;
        for (int m = threadIdx.x / SUMS_TILE; m < M; m += SUMS_THREADS / SUMS_TILE) {
            Z col[MOST_COLUMNS];
            if (j < nbf) {
                const PixelTerms pt(k[2 * j], k[2 * j + 1], Qy, Qx, lam, limit, c, thickness, M);
                Z g[2];
                pt.phasors(m, g);
                section_columns(pt.terms, pt.h, pt.h1, pt.h2, g, (m + 0.5) / M - 0.5, kind, P, ORDER, col);
            } else {
#pragma unroll
                for (int l = 0; l < MOST_COLUMNS; ++l) col[l] = {0.0, 0.0};
            }
#pragma unroll
            for (int l = 0; l < MOST_COLUMNS; ++l)
                if (l < L) tile[(l * M + m) * SUMS_TILE + p] = make_double2(col[l].re, col[l].im);
        }
        if (threadIdx.x < SUMS_TILE) {
            const int jj = p0 + threadIdx.x;
            double2 g = make_double2(0.0, 0.0);
            if (jj < nbf) {
                const G_T v = G[(long long)q * nbf + jj];
                g = make_double2((double)v.x, (double)v.y);
            }
            tile[LM * SUMS_TILE + threadIdx.x] = g;
        }
        __syncthreads();
#pragma unroll
        for (int t = 0; t < MOST_TASKS_PER_THREAD; ++t) {
            const int4 task = mine[t];
            if (task.x < 0) continue;
            for (int i = 0; i < SUMS_TILE; ++i) {
                const int pp = (i + lane) % SUMS_TILE;  // staggered: a warp's loads fall in distinct banks
                const double2 x = tile[task.y * SUMS_TILE + pp];
#pragma unroll
                for (int w = 0; w < TASK_WIDTH; ++w) {
                    if (w >= task.w) break;
                    // kind 0: column 0 is G, column w the section w - 1's transfer; kind 1: first derivative b0 + w
                    const int row = task.x == 0 ? (w == 0 ? LM : w - 1) : M + task.z + w;
                    const double2 y = tile[row * SUMS_TILE + pp];
                    acc[t][w].re += x.x * y.x + x.y * y.y;  // conj(x) y
                    acc[t][w].im += x.x * y.y - x.y * y.x;
                }
            }
        }
    }
#pragma unroll
    for (int t = 0; t < MOST_TASKS_PER_THREAD; ++t) {
        const int4 task = mine[t];
        if (task.x < 0) continue;
        if (task.x == 0) {
            sX[(long long)q * LM + task.y] = make_double2(acc[t][0].re, acc[t][0].im);
#pragma unroll
            for (int w = 1; w < TASK_WIDTH; ++w)
                if (w < task.w)
                    AX[((long long)q * LM + task.y) * M + (w - 1)] = make_double2(acc[t][w].re, acc[t][w].im);
        } else {
            const int a = task.y - M;  // the row's flattened (p, m)
#pragma unroll
            for (int w = 0; w < TASK_WIDTH; ++w) {
                if (w >= task.w) break;
                const int b = task.z + w;
                B[((long long)q * PM + a) * PM + b] = make_double2(acc[t][w].re, acc[t][w].im);
                B[((long long)q * PM + b) * PM + a] = make_double2(acc[t][w].re, -acc[t][w].im);
            }
        }
    }
}

// overlap[q] = sum over the bright-field pixels of the apertures of Gamma's two terms (A1^2 + A2^2 for
// top-hat apertures), one block of 256 threads per frequency
__global__ void __launch_bounds__(256) double_overlap(const double* __restrict__ k, const double* __restrict__ qy,
                                                      const double* __restrict__ qx, int nbf, double limit,
                                                      double* __restrict__ overlap) {
    __shared__ double part[8];
    const int q = blockIdx.x;
    double count = 0.0;
    for (int j = threadIdx.x; j < nbf; j += blockDim.x) {
        const double ky = k[2 * j], kx = k[2 * j + 1];
        if (!(hypot(kx, ky) <= limit)) continue;
        count += (hypot(kx - qx[q], ky - qy[q]) <= limit) + (hypot(kx + qx[q], ky + qy[q]) <= limit);
    }
    count = warp_sum(count);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = count;
    __syncthreads();
    if (threadIdx.x == 0) {
        double total = 0.0;
        for (int w = 0; w < (int)(blockDim.x >> 5); ++w) total += part[w];
        overlap[q] = total;
    }
}
