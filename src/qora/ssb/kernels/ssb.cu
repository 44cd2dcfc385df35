#define QORA_PI 3.141592653589793238462643383279502884
// qora.ssb: the SSB (and thick-model) image sums over the bright field, one block per Q.
//
// For each half-plane Q the block sums, over the bright-field pixels k where exactly one of the
// disks shifted by -Q and +Q holds k (the double overlap), G(Q, k) conj(Gamma) / |Gamma| and
// |Gamma|, with Gamma(Q, k) = conj(psi(k)) psi(k - Q) - psi(k) conj(psi(k + Q)), psi = A e^{-i chi}
// (the thick model multiplies each term by sinc(a t / 2)). chi is the Krivanek series written as a
// polynomial in (kx, ky): no angle, no power, one sincos per term. All in float64, as the array
// code it replaces (qora.ssb.session.Session.image), whose results it equals to rounding.

#define THREADS 128

// G is complex64 (float2) or complex128 (double2); sums are float64 either way
__device__ __forceinline__ double2 load2(const float2& v) { return make_double2(v.x, v.y); }
__device__ __forceinline__ double2 load2(const double2& v) { return v; }

// coefficients: C10, C12a, C12b, C21a, C21b, C23a, C23b, C30, C32a, C32b, C34a, C34b (A);
// chi = 2 pi / lambda * sum_nm (lambda |k|)^(n+1) / (n+1) (C_a cos m phi + C_b sin m phi)
__device__ __forceinline__ double chi_of(const double* __restrict__ c, double lam, double ky, double kx) {
    const double x2 = kx * kx, y2 = ky * ky, r2 = x2 + y2, xy = kx * ky;
    const double l2 = lam * lam, l3 = l2 * lam, l4 = l3 * lam;
    const double two = 0.5 * l2 * (c[0] * r2 + c[1] * (x2 - y2) + c[2] * 2.0 * xy);
    const double three = l3 / 3.0 * (r2 * (c[3] * kx + c[4] * ky) + c[5] * kx * (x2 - 3.0 * y2)
                                     + c[6] * ky * (3.0 * x2 - y2));
    const double four = 0.25 * l4 * (c[7] * r2 * r2 + r2 * (c[8] * (x2 - y2) + c[9] * 2.0 * xy)
                                     + c[10] * (x2 * x2 - 6.0 * x2 * y2 + y2 * y2) + c[11] * 4.0 * xy * (x2 - y2));
    return 2.0 * QORA_PI / lam * (two + three + four);
}

// hypot(dy, dx) <= limit, by the squared length except within rounding of the edge, where hypot
// decides as the array code does
__device__ __forceinline__ bool within(double dy, double dx, double limit) {
    const double d2 = dy * dy + dx * dx, l2 = limit * limit;
    if (fabs(d2 - l2) > 1e-12 * l2) return d2 <= l2;
    return hypot(dy, dx) <= limit;
}

__device__ __forceinline__ double sinc_half(double a, double t) {  // sin(a t / 2) / (a t / 2)
    const double u = 0.5 * a * t;
    return fabs(u) < 1e-8 ? 1.0 - u * u / 6.0 : sin(u) / u;
}

template <typename C>
__global__ void __launch_bounds__(THREADS)
ssb_sums(const C* __restrict__ G, const double* __restrict__ k, const double* __restrict__ qy,
         const double* __restrict__ qx, const double* __restrict__ coef, int nq, int nbf, double lam, double limit,
         double thickness, double tilt_y, double tilt_x, double2* __restrict__ numerator, double* __restrict__ norm) {
    __shared__ double c[12];
    __shared__ double2 part[THREADS / 32];
    __shared__ double part_n[THREADS / 32];
    if (threadIdx.x < 12) c[threadIdx.x] = coef[threadIdx.x];
    __syncthreads();
    const int q = blockIdx.x;
    if (q >= nq) return;
    const double Qy = qy[q], Qx = qx[q];
    const double tilt_phase = 2.0 * QORA_PI * (tilt_y * Qy + tilt_x * Qx);
    double sr = 0.0, si = 0.0, sn = 0.0;
    for (int j = threadIdx.x; j < nbf; j += THREADS) {
        const double ky = k[2 * j], kx = k[2 * j + 1];
        const double my = ky - Qy, mx = kx - Qx, py = ky + Qy, px = kx + Qx;
        const bool minus = within(my, mx, limit), plus = within(py, px, limit);
        if (minus == plus) continue;  // not a double-overlap pixel
        const double c0 = chi_of(c, lam, ky, kx);
        double gr, gi;  // Gamma: one of the two terms, the other's aperture being 0
        if (minus) {  // conj(psi(k)) psi(k - Q) = e^{i (chi(k) - chi(k - Q))}
            double s, co;
            sincos(c0 - chi_of(c, lam, my, mx), &s, &co);
            const double w = thickness != 0.0
                ? sinc_half(QORA_PI * lam * ((ky * ky + kx * kx) - (my * my + mx * mx)) - tilt_phase, thickness) : 1.0;
            gr = w * co;
            gi = w * s;
        } else {  // - psi(k) conj(psi(k + Q)) = -e^{-i (chi(k) - chi(k + Q))}
            double s, co;
            sincos(c0 - chi_of(c, lam, py, px), &s, &co);
            const double w = thickness != 0.0
                ? sinc_half(QORA_PI * lam * ((py * py + px * px) - (ky * ky + kx * kx)) - tilt_phase, thickness) : 1.0;
            gr = -w * co;
            gi = w * s;
        }
        const double mag = hypot(gr, gi);
        if (!(mag > 1e-12)) continue;
        const double2 g = load2(G[(long long)q * nbf + j]);
        // G conj(Gamma) / |Gamma|
        sr += (g.x * gr + g.y * gi) / mag;
        si += (g.y * gr - g.x * gi) / mag;
        sn += mag;
    }
    for (int off = 16; off > 0; off >>= 1) {
        sr += __shfl_down_sync(0xffffffffu, sr, off);
        si += __shfl_down_sync(0xffffffffu, si, off);
        sn += __shfl_down_sync(0xffffffffu, sn, off);
    }
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (lane == 0) {
        part[warp] = make_double2(sr, si);
        part_n[warp] = sn;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        double2 total = part[0];
        double total_n = part_n[0];
        for (int w = 1; w < THREADS / 32; ++w) {
            total.x += part[w].x;
            total.y += part[w].y;
            total_n += part_n[w];
        }
        numerator[q] = total;
        norm[q] = total_n;
    }
}

// The band agreement's sums for a batch of parameter sets in one pass over the band's G
// (qora.ssb.agreement.Band.batch_moments): per Q (a block) and set, S = sum_k G conj(Gamma) and
// N = sum_k |Gamma|^2, with Gamma = A(k) A(k - Q) e^{-i (chi(k - Q) - chi(k))} s1
// - A(k) A(k + Q) e^{-i (chi(k) - chi(k + Q))} s2 (top-hat apertures; s the depth sinc of the
// thick model). Each set is 15 numbers: the 12 coefficients of chi_of, thickness, tilt y, tilt x.
// The sets are taken one after the other over the block's row of G (8 kB per Q for ~500 pixels,
// read from DRAM once and then from L1): accumulators for all sets at once in registers, with
// the set loop unrolled, needed 254 registers and spilled (ptxas), as the three sincos per term
// carry their own slow-path frames.
#define MAX_SETS 64
#define SET_STRIDE 15

template <typename C>
__global__ void __launch_bounds__(THREADS)
band_batch(const C* __restrict__ G, const double* __restrict__ k, const double* __restrict__ qy,
           const double* __restrict__ qx, const double* __restrict__ sets, int nsets, int nq, int nbf, double lam,
           double limit, double2* __restrict__ S, double* __restrict__ N) {
    __shared__ double c[MAX_SETS * SET_STRIDE];
    __shared__ double part[THREADS / 32][3];
    for (int t = threadIdx.x; t < nsets * SET_STRIDE; t += THREADS) c[t] = sets[t];
    __syncthreads();
    const int q = blockIdx.x;
    if (q >= nq) return;
    const double Qy = qy[q], Qx = qx[q];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    for (int b = 0; b < nsets; ++b) {
        const double* cs = c + b * SET_STRIDE;
        const double t = cs[12], tilt = 2.0 * QORA_PI * (cs[13] * Qy + cs[14] * Qx);
        double sr = 0.0, si = 0.0, sn = 0.0;
        for (int j = threadIdx.x; j < nbf; j += THREADS) {
            const double ky = k[2 * j], kx = k[2 * j + 1];
            const double my = ky - Qy, mx = kx - Qx, py = ky + Qy, px = kx + Qx;
            const bool in0 = hypot(ky, kx) <= limit;
            const bool minus = in0 && hypot(my, mx) <= limit, plus = in0 && hypot(py, px) <= limit;
            if (!minus && !plus) continue;
            const double k2 = ky * ky + kx * kx;
            const double c0 = chi_of(cs, lam, ky, kx);
            double gr = 0.0, gi = 0.0;
            if (minus) {  // e^{-i (chi(k - Q) - chi(k))} s1
                double s, co;
                sincos(chi_of(cs, lam, my, mx) - c0, &s, &co);
                const double w = t != 0.0 ? sinc_half(QORA_PI * lam * (k2 - (my * my + mx * mx)) - tilt, t) : 1.0;
                gr += w * co;
                gi -= w * s;
            }
            if (plus) {  // - e^{-i (chi(k) - chi(k + Q))} s2
                double s, co;
                sincos(c0 - chi_of(cs, lam, py, px), &s, &co);
                const double w = t != 0.0 ? sinc_half(QORA_PI * lam * ((py * py + px * px) - k2) - tilt, t) : 1.0;
                gr -= w * co;
                gi += w * s;
            }
            const double2 g = load2(G[(long long)q * nbf + j]);
            sr += g.x * gr + g.y * gi;  // G conj(Gamma)
            si += g.y * gr - g.x * gi;
            sn += gr * gr + gi * gi;
        }
        for (int off = 16; off > 0; off >>= 1) {
            sr += __shfl_down_sync(0xffffffffu, sr, off);
            si += __shfl_down_sync(0xffffffffu, si, off);
            sn += __shfl_down_sync(0xffffffffu, sn, off);
        }
        if (lane == 0) {
            part[warp][0] = sr;
            part[warp][1] = si;
            part[warp][2] = sn;
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            double2 total = make_double2(0.0, 0.0);
            double total_n = 0.0;
            for (int w = 0; w < THREADS / 32; ++w) {
                total.x += part[w][0];
                total.y += part[w][1];
                total_n += part[w][2];
            }
            S[(long long)b * nq + q] = total;
            N[(long long)b * nq + q] = total_n;
        }
        __syncthreads();  // part is reused by the next set
    }
}

#ifdef QORA_NVCC_CHECK
template __global__ void ssb_sums<float2>(const float2*, const double*, const double*, const double*, const double*, int,
                                          int, double, double, double, double, double, double2*, double*);
template __global__ void band_batch<float2>(const float2*, const double*, const double*, const double*, const double*,
                                            int, int, int, double, double, double2*, double*);
#endif
