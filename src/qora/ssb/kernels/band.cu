// qora.ssb: the band agreement (qora.ssb.band.Band) when chi is quadratic in k, the fits' case
// (C10, C12a, C12b with the thick model's thickness and tilt), with no special function per term.
//
// chi(k) = k^T M k with M = pi lambda [[C10 - C12a, C12b], [C12b, C10 + C12a]] in (ky, kx). The two
// terms of Gamma then share one phase that is linear in k,
//     chi(k - Q) - chi(k) = -2 k.MQ + QMQ,    chi(k) - chi(k + Q) = -2 k.MQ - QMQ,
//     Gamma = e^{2i k.MQ} (A1 s1 e^{-i QMQ} - A2 s2 e^{+i QMQ}),
// and e^{2i k.v} = e^{2i ky vy} e^{2i kx vx} splits into a row factor and a column factor because
// the bright-field pixels lie on the detector's grid. The thick model's depth phases are
// u = t (pi lambda k.Q -+ pi lambda |Q|^2 / 2 - pi tau.Q): again e^{i pi lambda t k.Q} splits into rows
// and columns. So each block (one band frequency Q) makes, per parameter set, four small tables
// in float64 (one sincos per detector row or column, ~100 each) and every (k, Q, set) term is a
// few complex products of table entries: the sincos of the seed's kernel (two per term, and two
// sines for the depth weights) are gone. Per-term arithmetic is float32; sums of S and N are
// float64.
//
// The apertures are top-hat: k - Q inside when |k - Q|^2 <= limit^2, decided by hypot as the array
// code does when the squared test is within rounding of the edge.

#define QPI 3.141592653589793238462643383279502884
#define BAND_THREADS 256
#define BAND_WARPS (BAND_THREADS / 32)

// cmul, warp_sum (qora/backend/kernels)
#include "qora_device.cuh"

namespace {

// e^{i phase} as float2: the phase reduced to [-pi, pi] in float64, then the float32 sincos (its
// fast path, ~1e-7 absolute, the rounding a float2 table entry has anyway): the FP64 sincos it
// replaces was a fifth of a standard pass's instructions
__device__ __forceinline__ float2 unit(double phase) {
    const double r = fma(-2.0 * QPI, rint(phase * (0.5 / QPI)), phase);
    float s, c;
    sincosf((float)r, &s, &c);
    return make_float2(c, s);
}

// |d| <= limit, with d = (dy, dx) and its squared length d2 computed by the caller
__device__ __forceinline__ bool inside(double d2, double dy, double dx, double limit) {
    const double l2 = limit * limit;
    if (fabs(d2 - l2) > 1e-12 * l2) return d2 <= l2;
    return hypot(dy, dx) <= limit;
}

// The same test in float32: 1 inside, 0 outside, -1 within 3e-5 of the edge in |d|^2, where the
// float64 test decides. The float32 |d|^2 errs by at most ~2e-6 l2 (|k|, |Q| up to twice the
// aperture), so the margin holds every decision it makes; a pixel lies that close to the edge
// of one of its three disks for a few in 10^5 of the (k, Q) pairs.
__device__ __forceinline__ int inside_fast(float d2, float l2) {
    const float margin = 3e-5f * l2;
    return d2 < l2 - margin ? 1 : (d2 > l2 + margin ? 0 : -1);
}

// sinc(u) = sin(u) / u from sin(u) (a table product, absolute error ~1e-7); a series below 0.5,
// where the quotient would magnify that error. Both are computed and one selected (no divergent
// branch), the quotient by the fast reciprocal (2 ulp for |u| >= 0.5, below the table's error):
// the IEEE division's sequence was a tenth of the one-set pass's instructions (issue 43, ncu)
__device__ __forceinline__ float sinc_of(float sin_u, float u) {
    const float u2 = u * u;
    const float series = 1.0f + u2 * (-1.0f / 6 + u2 * (1.0f / 120 + u2 * (-1.0f / 5040 + u2 * (1.0f / 362880))));
    return fabsf(u) < 0.5f ? series : __fdividef(sin_u, u);
}

// sinc and its first two derivatives in u
__device__ __forceinline__ void sinc_derivatives(float sin_u, float cos_u, float u, float& s, float& s1, float& s2) {
    const float u2 = u * u;
    if (fabsf(u) < 0.5f) {
        s = 1.0f + u2 * (-1.0f / 6 + u2 * (1.0f / 120 + u2 * (-1.0f / 5040 + u2 * (1.0f / 362880))));
        s1 = u * (-1.0f / 3 + u2 * (1.0f / 30 + u2 * (-1.0f / 840 + u2 * (1.0f / 45360))));
        s2 = -1.0f / 3 + u2 * (1.0f / 10 + u2 * (-1.0f / 168 + u2 * (1.0f / 6480)));
        return;
    }
    const float inv = __fdividef(1.0f, u);  // |u| >= 0.5: the fast reciprocal's 2 ulp
    s = sin_u * inv;
    s1 = (cos_u - s) * inv;
    s2 = -s - 2.0f * s1 * inv;
}

struct Pixel {  // one bright-field pixel against the block's Q
    bool in1, in2;  // k - Q, k + Q inside the aperture
    int row, col;
    float ky, kx, kq;
};

// The per-(Q, set) constants and the row/column tables of one parameter set, in shared memory.
// set: C10, C12a, C12b, thickness, tilt_y, tilt_x.
struct SetConstants {
    float2 w;        // e^{-i QMQ}
    float2 eb1, eb2; // e^{i t h1}, e^{i t h2}: the Q-only parts of the two depth phases
    float h1, h2;    // a/2 - pi lambda k.Q of the two terms (1/A)
    float t;         // thickness (A); 0 for the standard model
};

// One set's four tables in shared memory, one after the other: 2 (nrow + ncol) float2.
struct Tables {
    float2 *rows, *cols, *drows, *dcols;  // e^{2i ky vy}, e^{2i kx vx}, e^{i pi lambda t ky Qy}, e^{i pi lambda t kx Qx}
    __device__ Tables(float2* base, int nrow, int ncol)
        : rows(base), cols(base + nrow), drows(base + nrow + ncol), dcols(base + 2 * nrow + ncol) {}
    __device__ __forceinline__ float2 phase(const Pixel& p) const { return cmul(rows[p.row], cols[p.col]); }
    __device__ __forceinline__ float2 depth(const Pixel& p) const { return cmul(drows[p.row], dcols[p.col]); }
};

__device__ void make_tables(const double* __restrict__ set, double lam, double Qy, double Qx,
                            const double* __restrict__ krow, int nrow, const double* __restrict__ kcol, int ncol,
                            const Tables& tab, SetConstants* __restrict__ sc) {
    float2 *rows = tab.rows, *cols = tab.cols, *drows = tab.drows, *dcols = tab.dcols;
    const double pl = QPI * lam;
    const double c10 = set[0], c12a = set[1], c12b = set[2], t = set[3];
    const double vy = pl * ((c10 - c12a) * Qy + c12b * Qx), vx = pl * (c12b * Qy + (c10 + c12a) * Qx);
    for (int i = threadIdx.x; i < nrow; i += blockDim.x) {
        rows[i] = unit(2.0 * krow[i] * vy);
        if (t != 0.0) drows[i] = unit(pl * t * krow[i] * Qy);
    }
    for (int i = threadIdx.x; i < ncol; i += blockDim.x) {
        cols[i] = unit(2.0 * kcol[i] * vx);
        if (t != 0.0) dcols[i] = unit(pl * t * kcol[i] * Qx);
    }
    if (threadIdx.x == 0) {
        const double q2 = Qy * Qy + Qx * Qx, tilt = QPI * (set[4] * Qy + set[5] * Qx);
        const double h1 = -0.5 * pl * q2 - tilt, h2 = 0.5 * pl * q2 - tilt;
        sc->w = unit(-(Qy * vy + Qx * vx));
        sc->eb1 = unit(t * h1);
        sc->eb2 = unit(t * h2);
        sc->h1 = (float)h1;
        sc->h2 = (float)h2;
        sc->t = (float)t;
    }
}


// The block's band frequency in both precisions
struct Frequency {
    double y, x, limit;
    float yf, xf, l2f;
    __device__ Frequency(double qy, double qx, double lim)
        : y(qy), x(qx), limit(lim), yf((float)qy), xf((float)qx), l2f((float)(lim * lim)) {}
};

// the pixel's apertures against Q (float32; float64 near an edge): false when neither term of
// Gamma is present
__device__ __forceinline__ bool pixel_terms(float2 kf, const double* __restrict__ k, int j, int c, const Frequency& Q,
                                            Pixel& p) {
    const float k2 = kf.x * kf.x + kf.y * kf.y;
    const float dy1 = kf.x - Q.yf, dx1 = kf.y - Q.xf, dy2 = kf.x + Q.yf, dx2 = kf.y + Q.xf;
    const int c0 = inside_fast(k2, Q.l2f);
    if (c0 == 0) return false;
    int c1 = inside_fast(dy1 * dy1 + dx1 * dx1, Q.l2f), c2 = inside_fast(dy2 * dy2 + dx2 * dx2, Q.l2f);
    if (c0 < 0 || c1 < 0 || c2 < 0) {  // rare: the array code's float64 decisions
        const double ky = k[2 * j], kx = k[2 * j + 1];
        const double kq = ky * Q.y + kx * Q.x, kk = ky * ky + kx * kx, q2 = Q.y * Q.y + Q.x * Q.x;
        if (!inside(kk, ky, kx, Q.limit)) return false;
        c1 = inside(kk - 2.0 * kq + q2, ky - Q.y, kx - Q.x, Q.limit);
        c2 = inside(kk + 2.0 * kq + q2, ky + Q.y, kx + Q.x, Q.limit);
    }
    p.in1 = c1 > 0;
    p.in2 = c2 > 0;
    if (!p.in1 && !p.in2) return false;
    p.row = c & 0xffff;
    p.col = c >> 16;
    p.ky = kf.x;
    p.kx = kf.y;
    p.kq = kf.x * Q.yf + kf.y * Q.xf;
    return true;
}

// The pixels of a block's row of G, U at a time with every load issued before any is used: a thread
// keeps U loads of G in flight (DRAM latency is what a pass waits on, not arithmetic).
template <int U>
struct Loads {
    float2 g[U], k[U];
    int cell[U];
    __device__ __forceinline__ void fetch(const float2* __restrict__ G, const float2* __restrict__ k32,
                                          const int* __restrict__ cell_of, long long row, int j0, int step, int nbf) {
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int j = j0 + u * step;
            if (j < nbf) {
                g[u] = G[row + j];
                k[u] = k32[j];
                cell[u] = cell_of[j];
            } else {
                cell[u] = -1;
            }
        }
    }
};

// The pixel arrays the kernels take: k in float64 (ky, kx) and float32, and each pixel's detector
// cell (row | column << 16)
struct Pixels {
    const double* k;
    const float2* k32;
    const int* cell;
};

// body(pixel, g) for every bright-field pixel of the block's row of G with a term of Gamma (this
// thread's share), U pixels' loads at a time; after() once after each U
template <int U, typename Body, typename After>
__device__ __forceinline__ void each_pixel(const float2* __restrict__ G, const Pixels& px, int q, int nbf,
                                           const Frequency& Q, Body&& body, After&& after) {
    for (int j0 = threadIdx.x; j0 < nbf; j0 += U * BAND_THREADS) {
        Loads<U> in;
        in.fetch(G, px.k32, px.cell, (long long)q * nbf, j0, BAND_THREADS, nbf);
#pragma unroll
        for (int u = 0; u < U; ++u) {
            Pixel p;
            if (in.cell[u] < 0 || !pixel_terms(in.k[u], px.k, j0 + u * BAND_THREADS, in.cell[u], Q, p)) continue;
            body(p, in.g[u]);
        }
        after();
    }
}

template <int U, typename Body>
__device__ __forceinline__ void each_pixel(const float2* __restrict__ G, const Pixels& px, int q, int nbf,
                                           const Frequency& Q, Body&& body) {
    each_pixel<U>(G, px, q, nbf, Q, body, [] {});
}

template <int N, typename T>
__device__ __forceinline__ void warp_sum(T (&v)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) v[i] = ::warp_sum(v[i]);
}

}  // namespace


// The block's per-thread sums v (NV of them) added over the block into part[0][...] (float64)
template <int NV, typename T>
__device__ __forceinline__ void block_sums(T (&v)[NV], double (*part)[NV]) {
    warp_sum(v);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (lane == 0)
#pragma unroll
        for (int i = 0; i < NV; ++i) part[warp][i] = (double)v[i];
    __syncthreads();
    for (int i = threadIdx.x; i < NV; i += BAND_THREADS) {
        double total = 0.0;
        for (int w = 0; w < BAND_WARPS; ++w) total += part[w][i];
        part[0][i] = total;
    }
    __syncthreads();
}

// Every set's tables and constants for the block's Q, set b's at tables + b * stride; with padded,
// the phase tables of the sets from nsets to padded - 1 are zero (terms that add nothing, so that
// a kernel may run all padded sets without a guard per set)
__device__ __forceinline__ void make_all_tables(const double* __restrict__ sets, int nsets, double lam,
                                                const Frequency& Q, const double* __restrict__ krow, int nrow,
                                                const double* __restrict__ kcol, int ncol, float2* tables, int stride,
                                                SetConstants* sc, int padded = 0) {
    for (int b = 0; b < nsets; ++b)
        make_tables(sets + 6 * b, lam, Q.y, Q.x, krow, nrow, kcol, ncol, Tables(tables + b * stride, nrow, ncol),
                    sc + b);
    for (int i = nsets * stride + threadIdx.x; i < padded * stride; i += blockDim.x) tables[i] = make_float2(0.f, 0.f);
    __syncthreads();
}

// a += x1 y1 + x2 y2: two FMAs into a float sum; a float64 sum (Newton's one-set passes) takes the
// float32 product pair
__device__ __forceinline__ void mac(float& a, float x1, float y1, float x2, float y2) {
    a = fmaf(x1, y1, fmaf(x2, y2, a));
}
__device__ __forceinline__ void mac(double& a, float x1, float y1, float x2, float y2) {
    a += (double)fmaf(x1, y1, x2 * y2);
}

// one term's seven sums at r[at...]: s1 G conj(e), s2 G conj(e) (complex), s1^2, s2^2, s1 s2
template <int N>
__device__ __forceinline__ void add_term(float (&r)[N], int at, float s1, float s2, float ar, float ai) {
    r[at] = fmaf(s1, ar, r[at]);
    r[at + 1] = fmaf(s1, ai, r[at + 1]);
    r[at + 2] = fmaf(s2, ar, r[at + 2]);
    r[at + 3] = fmaf(s2, ai, r[at + 3]);
    r[at + 4] = fmaf(s1, s1, r[at + 4]);
    r[at + 5] = fmaf(s2, s2, r[at + 5]);
    r[at + 6] = fmaf(s1, s2, r[at + 6]);
}

#define BAND_BATCH_ARGS const float2 *__restrict__ G, const double *__restrict__ k, const float2 *__restrict__ k32, \
    const int *__restrict__ cell, const double *__restrict__ krow, int nrow, const double *__restrict__ kcol, \
    int ncol, const double *__restrict__ qy, const double *__restrict__ qx, const double *__restrict__ sets, \
    int nsets, int nq, int nbf, double lam, double limit, double *__restrict__ out

// S = sum_k G conj(Gamma) and N = sum_k |Gamma|^2 for up to MAXB parameter sets (B x 6 numbers) in
// one pass: out (B, nq, 3) = Re S, Im S, N. Dynamic shared memory: B * 2 * (nrow + ncol) float2.
// With the depth weights s1, s2 (sinc, 0 where a term's aperture is closed) both terms of Gamma
// carry the one table phasor e: Gamma = e (s1 w - s2 conj(w)), w = e^{-i QMQ} per (Q, set), so
//     S = conj(w) A1 - w A2,  A_i = sum_k s_i G conj(e),   N = n1 + n2 - 2 n12 Re(w^2)
// with n1 = sum s1^2, n2 = sum s2^2, n12 = sum s1 s2 (|e| = |w| = 1): a term is one table product,
// G conj(e) and seven multiply-adds, and w enters once per (Q, set) (issue 43: from ~24 flops and
// two complex products a term). Acc: float64 sums for the one-set passes of Newton's line search
// (where the agreement's last digits decide a step), taken from float32 sums over each U pixels so
// that a term is not converted seven times; float32 for the search's batches (registers, so
// occupancy). The block's sums are float64.
template <int MAXB, typename Acc>
__global__ void __launch_bounds__(BAND_THREADS, MAXB == 1 ? 3 : (MAXB <= 4 ? 2 : 1))  // the most blocks per SM without spills (ptxas)
band_quad_batch(BAND_BATCH_ARGS) {
    constexpr int U = 4, NS = 7;  // per set: Re A1, Im A1, Re A2, Im A2, n1, n2, n12
    extern __shared__ float2 tables[];
    __shared__ SetConstants sc[MAXB];
    __shared__ double part[BAND_WARPS][NS * MAXB];
    const int q = blockIdx.x;
    const Frequency Q(qy[q], qx[q], limit);
    const int stride = 2 * (nrow + ncol);
    make_all_tables(sets, nsets, lam, Q, krow, nrow, kcol, ncol, tables, stride, sc);
    const float pl = (float)(QPI * lam);
    constexpr bool WIDE = sizeof(Acc) > sizeof(float);
    Acc acc[NS * MAXB];
    float run[WIDE ? NS * MAXB : 1];  // float64 sums: this U's float32 sums (float32 sums add to acc itself)
#pragma unroll
    for (int i = 0; i < NS * MAXB; ++i) acc[i] = 0;
#pragma unroll
    for (int i = 0; i < (WIDE ? NS * MAXB : 0); ++i) run[i] = 0;
    each_pixel<U>(G, Pixels{k, k32, cell}, q, nbf, Q, [&](const Pixel& p, float2 g) {
#pragma unroll
            for (int b = 0; b < MAXB; ++b) {
                if (b < nsets) {  // uniform: every thread of the block takes the same sets
                    const Tables tb(tables + b * stride, nrow, ncol);
                    const SetConstants& s = sc[b];
                    const float2 e = tb.phase(p);
                    float s1 = p.in1 ? 1.0f : 0.0f, s2 = p.in2 ? 1.0f : 0.0f;
                    if (s.t != 0.0f) {
                        const float2 d = tb.depth(p);  // e^{i pi lambda t k.Q}
                        const float a1 = fmaf(pl, p.kq, s.h1), a2 = fmaf(pl, p.kq, s.h2);
                        s1 *= sinc_of(d.x * s.eb1.y + d.y * s.eb1.x, s.t * a1);
                        s2 *= sinc_of(d.x * s.eb2.y + d.y * s.eb2.x, s.t * a2);
                    }
                    const float ar = fmaf(g.x, e.x, g.y * e.y), ai = fmaf(g.y, e.x, -g.x * e.y);  // G conj(e)
                    if constexpr (WIDE)
                        add_term(run, NS * b, s1, s2, ar, ai);
                    else
                        add_term(acc, NS * b, s1, s2, ar, ai);
                }
            }
        }, [&] {
            if constexpr (WIDE) {
#pragma unroll
                for (int i = 0; i < NS * MAXB; ++i) {
                    acc[i] += (Acc)run[i];
                    run[i] = 0.0f;
                }
            }
        });
    block_sums(acc, part);
    if (threadIdx.x < nsets) {
        const int b = threadIdx.x;
        const double* a = part[0] + NS * b;
        const double wr = sc[b].w.x, wi = sc[b].w.y;
        double* o = out + ((long long)b * nq + q) * 3;
        o[0] = wr * a[0] + wi * a[1] - (wr * a[2] - wi * a[3]);  // conj(w) A1 - w A2
        o[1] = wr * a[1] - wi * a[0] - (wr * a[3] + wi * a[2]);
        o[2] = a[4] + a[5] - 2.0 * a[6] * (wr * wr - wi * wi);
    }
}

// band_quad_batch for sets of the standard model (no depth; thickness 0): out and arguments the
// same, dynamic shared memory B * (nrow + ncol) float2. Without depth weights both terms of Gamma
// carry the one table phasor e, so
//     S = conj(w) A1 - w A2,  A_i = sum_k [k -+ Q inside] G conj(e),
//     N = n1 + n2 - 2 n12 Re(w^2)   (n1, n2, n12: the pixels with term 1, term 2, both),
// and a (k, Q, set) term is one table product and two complex multiply-adds; N needs no per-set
// work at all. Its fewer registers (the phase constants are not held per set) let more blocks share
// an SM.
template <int MAXB, typename Acc>
__global__ void __launch_bounds__(BAND_THREADS, MAXB == 8 ? 3 : 4)  // the most blocks per SM without spills (ptxas)
band_quad_standard(BAND_BATCH_ARGS) {
    constexpr int U = 4;
    extern __shared__ float2 tables[];
    __shared__ SetConstants sc[MAXB];
    __shared__ double part[BAND_WARPS][4 * MAXB + 3];
    const int q = blockIdx.x;
    const Frequency Q(qy[q], qx[q], limit);
    const int stride = nrow + ncol;
    make_all_tables(sets, nsets, lam, Q, krow, nrow, kcol, ncol, tables, stride, sc, MAXB);
    Acc acc[4 * MAXB + 3];  // per set Re A1, Im A1, Re A2, Im A2; then n1, n2, n12
#pragma unroll
    for (int i = 0; i < 4 * MAXB + 3; ++i) acc[i] = 0;
    int n1 = 0, n2 = 0, n12 = 0;
    each_pixel<U>(G, Pixels{k, k32, cell}, q, nbf, Q, [&](const Pixel& p, float2 g) {
        const float2 g1 = p.in1 ? g : make_float2(0.f, 0.f), g2 = p.in2 ? g : make_float2(0.f, 0.f);
        n1 += p.in1;
        n2 += p.in2;
        n12 += p.in1 & p.in2;
        const float2 *row = tables + p.row, *col = tables + nrow + p.col;
#pragma unroll
        for (int b = 0; b < MAXB; ++b) {  // every padded set: the sets past nsets have zero tables
            const float2 e = cmul(row[b * stride], col[b * stride]);
            mac(acc[4 * b], g1.x, e.x, g1.y, e.y);  // G conj(e)
            mac(acc[4 * b + 1], g1.y, e.x, -g1.x, e.y);
            mac(acc[4 * b + 2], g2.x, e.x, g2.y, e.y);
            mac(acc[4 * b + 3], g2.y, e.x, -g2.x, e.y);
        }
    });
    acc[4 * MAXB] = (Acc)n1;  // exact: counts below 2^24
    acc[4 * MAXB + 1] = (Acc)n2;
    acc[4 * MAXB + 2] = (Acc)n12;
    block_sums(acc, part);
    if (threadIdx.x < nsets) {
        const int b = threadIdx.x;
        const double* a = part[0] + 4 * b;
        const double wr = sc[b].w.x, wi = sc[b].w.y;
        const double c1 = part[0][4 * MAXB], c2 = part[0][4 * MAXB + 1], c12 = part[0][4 * MAXB + 2];
        double* o = out + ((long long)b * nq + q) * 3;
        o[0] = wr * a[0] + wi * a[1] - (wr * a[2] - wi * a[3]);  // conj(w) A1 - w A2
        o[1] = wr * a[1] - wi * a[0] - (wr * a[3] + wi * a[2]);
        o[2] = c1 + c2 - 2.0 * c12 * (wr * wr - wi * wi);
    }
}

// One parameter set with the exact first and second derivatives in the NP parameters C10, C12a,
// C12b (NP = 3) and thickness, tilt_y, tilt_x (NP = 6), all moments of qora.ssb.band.Band
// in one pass. out (nq, NOUT): Re S, Im S, N, then per parameter Re Sp, Im Sp, Np, then per pair
// i <= j (row by row) Re Sij, Im Sij, Nij. Every derivative of a term A e^{-i phi} s(u) is the
// term's phasor times a real or imaginary number: -i d_p s (aberration p, d_p = d phi / d c_p),
// s' u_p (depth parameter p), -d_p d_q s, -i d_p s' u_q, s'' u_p u_q + s' u_pq.
// the blocks of BAND_THREADS an SM must hold (the register cap follows): a probe's compile option
#ifndef QORA_DERIVATIVE_BLOCKS_6
#define QORA_DERIVATIVE_BLOCKS_6 2  // 128 registers, 168 B local: 15.1 ms a whole-band pass against 16.0 at 249 (H200)
#endif
#ifndef QORA_DERIVATIVE_BLOCKS_3
#define QORA_DERIVATIVE_BLOCKS_3 3  // 80 registers: 4.60 ms against 5.23 at 98 (0: the compiler's choice)
#endif
template <int NP>
__global__ void __launch_bounds__(BAND_THREADS, NP == 6 ? QORA_DERIVATIVE_BLOCKS_6 : QORA_DERIVATIVE_BLOCKS_3)
band_quad_derivatives(const float2* __restrict__ G, const double* __restrict__ k, const float2* __restrict__ k32,
                      const int* __restrict__ cell,
                      const double* __restrict__ krow, int nrow, const double* __restrict__ kcol, int ncol,
                      const double* __restrict__ qy, const double* __restrict__ qx, const double* __restrict__ set,
                      int nq, int nbf, double lam, double limit, double* __restrict__ out) {
    constexpr int NPAIR = NP * (NP + 1) / 2;
    constexpr int NF = 3 * NP + 3 * NPAIR;  // float sums: the derivative moments
    extern __shared__ float2 tables[];
    __shared__ SetConstants sc[1];
    __shared__ double part[BAND_WARPS][3 + NF];
    const int q = blockIdx.x;
    const Frequency Q(qy[q], qx[q], limit);
    const double Qy = Q.y, Qx = Q.x;
    const Tables tab(tables, nrow, ncol);
    make_tables(set, lam, Qy, Qx, krow, nrow, kcol, ncol, tab, sc);
    __syncthreads();
    const SetConstants s = sc[0];
    const float pl = (float)(QPI * lam);
    // d phi_term / d c_p = -2 lin_p +- quad_p, lin_p = ay_p ky + ax_p kx (term 1 takes +, term 2 -)
    const float ay[3] = {(float)(QPI * lam * Qy), (float)(-QPI * lam * Qy), (float)(QPI * lam * Qx)};
    const float ax[3] = {(float)(QPI * lam * Qx), (float)(QPI * lam * Qx), (float)(QPI * lam * Qy)};
    const float quad[3] = {(float)(QPI * lam * (Qy * Qy + Qx * Qx)), (float)(QPI * lam * (Qx * Qx - Qy * Qy)),
                           (float)(2.0 * QPI * lam * Qy * Qx)};
    // d u / d tilt_y, d tilt_x (both terms) and d2 u / d t d tilt
    const float uty = (float)(-QPI * Qy * set[3]), utx = (float)(-QPI * Qx * set[3]);
    const float ut_ty = (float)(-QPI * Qy), ut_tx = (float)(-QPI * Qx);
    double sr = 0.0, si = 0.0, sn = 0.0;
    float acc[NF];
#pragma unroll
    for (int i = 0; i < NF; ++i) acc[i] = 0.f;
    constexpr int U = 2;
    each_pixel<U>(G, Pixels{k, k32, cell}, q, nbf, Q, [&](const Pixel& p, float2 g) {
        const float2 e = tab.phase(p);
        const float2 f1 = p.in1 ? cmul(e, s.w) : make_float2(0.f, 0.f);
        const float2 f2 = p.in2 ? cmul(e, make_float2(s.w.x, -s.w.y)) : make_float2(0.f, 0.f);
        float v1 = 1.f, v1d = 0.f, v1dd = 0.f, v2 = 1.f, v2d = 0.f, v2dd = 0.f, a1 = 0.f, a2 = 0.f;
        if (NP == 6 && s.t != 0.0f) {
            const float2 d = tab.depth(p);
            a1 = fmaf(pl, p.kq, s.h1);
            a2 = fmaf(pl, p.kq, s.h2);
            sinc_derivatives(d.x * s.eb1.y + d.y * s.eb1.x, d.x * s.eb1.x - d.y * s.eb1.y, s.t * a1, v1, v1d, v1dd);
            sinc_derivatives(d.x * s.eb2.y + d.y * s.eb2.x, d.x * s.eb2.x - d.y * s.eb2.y, s.t * a2, v2, v2d, v2dd);
        } else if (NP == 6) {  // t = 0: s = 1, s' = 0, s'' = -1/3
            v1dd = v2dd = -1.0f / 3;
            a1 = fmaf(pl, p.kq, s.h1);
            a2 = fmaf(pl, p.kq, s.h2);
        }
        float d1[3], d2[3];
#pragma unroll
        for (int i = 0; i < 3; ++i) {
            const float lin = fmaf(ay[i], p.ky, ax[i] * p.kx);
            d1[i] = -2.f * lin + quad[i];
            d2[i] = -2.f * lin - quad[i];
        }
        // d u / d(thickness, tilt_y, tilt_x) per term
        const float u1[3] = {a1, uty, utx}, u2[3] = {a2, uty, utx};
        // the coefficient of a derivative (by parameter) for one term: (real, imaginary)
        auto first = [&](int i, float v, float vd, const float* d, const float* u) -> float2 {
            return i < 3 ? make_float2(0.f, -d[i] * v) : make_float2(vd * u[i - 3], 0.f);
        };
        auto second = [&](int i, int m, float v, float vd, float vdd, const float* d, const float* u) -> float2 {
            if (i < 3 && m < 3) return make_float2(-d[i] * d[m] * v, 0.f);
            if (i < 3) return make_float2(0.f, -d[i] * vd * u[m - 3]);
            if (m < 3) return make_float2(0.f, -d[m] * vd * u[i - 3]);
            float cross = 0.f;  // d2 u / d p d m: only (thickness, tilt)
            if (i == 3 && m == 4) cross = ut_ty;
            if (i == 3 && m == 5) cross = ut_tx;
            return make_float2(vdd * u[i - 3] * u[m - 3] + vd * cross, 0.f);
        };
        auto gamma = [&](float2 c1, float2 c2) -> float2 {  // f1 c1 - f2 c2
            const float2 x = cmul(f1, c1), y = cmul(f2, c2);
            return make_float2(x.x - y.x, x.y - y.y);
        };
        const float2 gam = gamma(make_float2(v1, 0.f), make_float2(v2, 0.f));
        sr += (double)(g.x * gam.x + g.y * gam.y);
        si += (double)(g.y * gam.x - g.x * gam.y);
        sn += (double)(gam.x * gam.x + gam.y * gam.y);
        float2 gp[NP];
#pragma unroll
        for (int i = 0; i < NP; ++i) {
            gp[i] = gamma(first(i, v1, v1d, d1, u1), first(i, v2, v2d, d2, u2));
            acc[3 * i] += g.x * gp[i].x + g.y * gp[i].y;
            acc[3 * i + 1] += g.y * gp[i].x - g.x * gp[i].y;
            acc[3 * i + 2] += 2.f * (gam.x * gp[i].x + gam.y * gp[i].y);
        }
        int pair = 0;
#pragma unroll
        for (int i = 0; i < NP; ++i) {
#pragma unroll
            for (int m = i; m < NP; ++m) {
                const float2 gij = gamma(second(i, m, v1, v1d, v1dd, d1, u1), second(i, m, v2, v2d, v2dd, d2, u2));
                float* a = acc + 3 * NP + 3 * pair;
                a[0] += g.x * gij.x + g.y * gij.y;
                a[1] += g.y * gij.x - g.x * gij.y;
                a[2] += 2.f * (gp[m].x * gp[i].x + gp[m].y * gp[i].y + gam.x * gij.x + gam.y * gij.y);
                ++pair;
            }
        }
    });
    double sums[3] = {sr, si, sn};
    warp_sum(sums);
    warp_sum(acc);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (lane == 0) {
        part[warp][0] = sums[0];
        part[warp][1] = sums[1];
        part[warp][2] = sums[2];
#pragma unroll
        for (int i = 0; i < NF; ++i) part[warp][3 + i] = acc[i];
    }
    __syncthreads();
    for (int i = threadIdx.x; i < 3 + NF; i += BAND_THREADS) {
        double total = 0.0;
        for (int w = 0; w < BAND_WARPS; ++w) total += part[w][i];
        out[(long long)q * (3 + NF) + i] = total;
    }
}

#ifdef QORA_NVCC_CHECK  // nvcc -DQORA_NVCC_CHECK: instantiate for a local compile (NVRTC uses name expressions)
#define BATCH(KERNEL, B, A) template __global__ void KERNEL<B, A>(const float2*, const double*, const float2*, \
    const int*, const double*, int, const double*, int, const double*, const double*, const double*, int, int, int, \
    double, double, double*);
BATCH(band_quad_batch, 1, double)
BATCH(band_quad_batch, 2, double)
BATCH(band_quad_batch, 4, float)
BATCH(band_quad_standard, 1, double)
BATCH(band_quad_standard, 2, double)
BATCH(band_quad_standard, 4, float)
BATCH(band_quad_standard, 8, float)
#define DERIVATIVES(NP) template __global__ void band_quad_derivatives<NP>(const float2*, const double*, \
    const float2*, const int*, const double*, int, const double*, int, const double*, const double*, const double*, \
    int, int, double, double, double*);
DERIVATIVES(3)
DERIVATIVES(6)
#endif
