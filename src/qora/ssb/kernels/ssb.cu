#define QORA_PI 3.141592653589793238462643383279502884
// qora.ssb: the SSB (and thick-model) image sums over the bright field, one block per Q; with
// OBF, the optimum bright field's sums over every bright-field pixel (qora.ssb.obf).
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

// chi_of when only C10 and C12 may be non-zero (QUAD: the fits' case), else chi_of: the other
// terms, zero then, were two thirds of a term's float64 work
template <bool QUAD>
__device__ __forceinline__ double chi_at(const double* __restrict__ c, double lam, double ky, double kx) {
    if (!QUAD) return chi_of(c, lam, ky, kx);
    const double x2 = kx * kx, y2 = ky * ky;
    return QORA_PI * lam * (c[0] * (x2 + y2) + c[1] * (x2 - y2) + c[2] * 2.0 * kx * ky);
}

// hypot(dy, dx) <= limit, by the squared length except within rounding of the edge, where hypot
// decides as the array code does
__device__ __forceinline__ bool within(double dy, double dx, double limit) {
    const double d2 = dy * dy + dx * dx, l2 = limit * limit;
    if (fabs(d2 - l2) > 1e-12 * l2) return d2 <= l2;
    return hypot(dy, dx) <= limit;
}


// float32 sincos for complex64 G: the argument reduced to [-pi, pi] in float64 first, so the
// phase keeps ~1e-7 rad however large chi grows (a plain float32 chi loses 1e-6 rad at 13 rad)
template <typename C> struct Fast { static constexpr bool value = false; };
template <> struct Fast<float2> { static constexpr bool value = true; };

template <bool FAST>
__device__ __forceinline__ void sincos_of(double x, double* s, double* c) {
    if (FAST) {
        const double r = x - 2.0 * QORA_PI * rint(x * (0.5 / QORA_PI));
        float sf, cf;
        sincosf((float)r, &sf, &cf);
        *s = sf;
        *c = cf;
    } else {
        sincos(x, s, c);
    }
}

template <bool FAST>
__device__ __forceinline__ double sinc_of_half(double a, double t) {  // sin(a t / 2) / (a t / 2)
    const double u = 0.5 * a * t;
    if (fabs(u) < 1e-8) return 1.0 - u * u / 6.0;
    double s, c;
    sincos_of<FAST>(u, &s, &c);
    if (FAST) return (double)((float)s / (float)u);  // s is float32 already: a float64 division adds nothing
    return s / u;
}

// chi at each bright-field pixel k (float64): the same for every Q, so the sums take it from here
// instead of evaluating the polynomial twice per (Q, k) term
__global__ void chi_pixels(const double* __restrict__ coef, const double* __restrict__ k, int nbf, double lam,
                           double* __restrict__ out) {
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j < nbf) out[j] = chi_of(coef, lam, k[2 * j], k[2 * j + 1]);
}

// Gamma(Q, k) / |Gamma| (ur, ui) and |Gamma| where k is a double-overlap pixel (one of the disks
// shifted by -Q, +Q holds it) and |Gamma| > 1e-12: false elsewhere, where the SSB sums leave the pixel
// out. Gamma is one of the two terms (the other's aperture is 0), a unit phasor times the thick
// model's sinc weight w, so |Gamma| = |w| and the phasor's direction flips with the sign of w.
template <bool FAST, bool QUAD>
__device__ __forceinline__ bool ssb_gamma(const double* __restrict__ c, double lam, double limit, double ky, double kx,
                                          double c0, double Qy, double Qx, double thickness, double tilt_phase,
                                          double& ur, double& ui, double& mag) {  // c0 = chi(k), from chi_pixels
    const double my = ky - Qy, mx = kx - Qx, py = ky + Qy, px = kx + Qx;
    const bool minus = within(my, mx, limit), plus = within(py, px, limit);
    if (minus == plus) return false;  // not a double-overlap pixel
    double w = 1.0, s, co;
    if (minus) {  // conj(psi(k)) psi(k - Q) = e^{i (chi(k) - chi(k - Q))}
        sincos_of<FAST>(c0 - chi_at<QUAD>(c, lam, my, mx), &s, &co);
        if (thickness != 0.0)
            w = sinc_of_half<FAST>(QORA_PI * lam * ((ky * ky + kx * kx) - (my * my + mx * mx)) - tilt_phase, thickness);
        ur = co;
    } else {  // - psi(k) conj(psi(k + Q)) = -e^{-i (chi(k) - chi(k + Q))}
        sincos_of<FAST>(c0 - chi_at<QUAD>(c, lam, py, px), &s, &co);
        if (thickness != 0.0)
            w = sinc_of_half<FAST>(QORA_PI * lam * ((py * py + px * px) - (ky * ky + kx * kx)) - tilt_phase, thickness);
        ur = -co;
    }
    ui = s;
    mag = fabs(w);
    if (w < 0.0) {
        ur = -ur;
        ui = -ui;
    }
    return mag > 1e-12;
}

// OBF's term at (Q, k): the whole thin-sample Gamma (both terms where both shifted disks hold k),
// (gr, gi), and |Gamma|^2; false where neither disk holds k (Gamma = 0). One sincos per term, as
// ssb_gamma; the sums are G conj(Gamma) and |Gamma|^2 (the matched filter and its power).
template <bool FAST, bool QUAD>
__device__ __forceinline__ bool obf_gamma(const double* __restrict__ c, double lam, double limit, double ky, double kx,
                                          double c0, double Qy, double Qx, double& gr, double& gi, double& power) {
    const double my = ky - Qy, mx = kx - Qx, py = ky + Qy, px = kx + Qx;
    const bool minus = within(my, mx, limit), plus = within(py, px, limit);
    if (!minus && !plus) return false;
    double s, co;
    gr = 0.0;
    gi = 0.0;
    if (minus) {  // conj(psi(k)) psi(k - Q) = e^{i (chi(k) - chi(k - Q))}
        sincos_of<FAST>(c0 - chi_at<QUAD>(c, lam, my, mx), &s, &co);
        gr = co;
        gi = s;
    }
    if (plus) {  // - psi(k) conj(psi(k + Q)) = -e^{-i (chi(k) - chi(k + Q))}
        sincos_of<FAST>(c0 - chi_at<QUAD>(c, lam, py, px), &s, &co);
        gr -= co;
        gi += s;
    }
    power = gr * gr + gi * gi;
    return true;
}

template <typename C, bool QUAD, bool OBF>
__global__ void __launch_bounds__(THREADS)
ssb_sums(const C* __restrict__ G, const double* __restrict__ k, const double* __restrict__ chi0,
         const double* __restrict__ qy,
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
        double ur, ui, mag;  // SSB: Gamma / |Gamma| and |Gamma|; OBF: Gamma and |Gamma|^2
        const bool use = OBF ? obf_gamma<Fast<C>::value, QUAD>(c, lam, limit, ky, kx, chi0[j], Qy, Qx, ur, ui, mag)
                             : ssb_gamma<Fast<C>::value, QUAD>(c, lam, limit, ky, kx, chi0[j], Qy, Qx, thickness,
                                                               tilt_phase, ur, ui, mag);
        if (!use) continue;
        const double2 g = load2(G[(long long)q * nbf + j]);
        sr += g.x * ur + g.y * ui;  // G times the conjugated weight
        si += g.y * ur - g.x * ui;
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
// (qora.ssb.band.Band, its batch moments): per Q (a block) and set, S = sum_k G conj(Gamma) and
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
                const double w = t != 0.0 ? sinc_of_half<false>(QORA_PI * lam * (k2 - (my * my + mx * mx)) - tilt, t) : 1.0;
                gr += w * co;
                gi -= w * s;
            }
            if (plus) {  // - e^{-i (chi(k) - chi(k + Q))} s2
                double s, co;
                sincos(c0 - chi_of(cs, lam, py, px), &s, &co);
                const double w = t != 0.0 ? sinc_of_half<false>(QORA_PI * lam * ((py * py + px * px) - k2) - tilt, t) : 1.0;
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
template __global__ void ssb_sums<float2, true, true>(const float2*, const double*, const double*, const double*,
                                                const double*,
                                          const double*, int, int, double, double, double, double, double, double2*,
                                          double*);
template __global__ void band_batch<float2>(const float2*, const double*, const double*, const double*, const double*,
                                            int, int, int, double, double, double2*, double*);
#endif

// The parallax image on a grid F times finer (qora.ssb.session.Session._parallax_upsampled), in
// Fourier space. The array code places each bright-field image's samples v_k(R) at f R + sigma_k on
// the fine grid with bilinear weights. Per axis, sum_n Lambda(n - p) e^{-2 pi i m n / N} with
// p = F R + s, s = floor(sigma) + e, is e^{-2 pi i m R / S} e^{-2 pi i m s / N} ((1 - e) + e e^{-2 pi i m / N})
// (N = F S): so the fine spectrum of the scattered sum is exactly
//     T(m) = sum_k V_k(m mod S) By_k(my) Bx_k(mx),  By_k(m) = w^{m floor(sigma_y)} ((1 - e_y) + e_y w^m),
// w = e^{-2 pi i / N}, V_k the scan spectrum of pixel k's image with its mean out (G with Q = 0 left
// out). One block per frequency of the coarse full plane (G from the half plane, conjugated where
// mirrored) accumulates its F x F aliases; the root-of-unity tables are read through L1.
template <typename C, int F>
__global__ void __launch_bounds__(THREADS)
parallax_fine(const C* __restrict__ G, int sy, int sx, int nbf, const int* __restrict__ whole,
              const float* __restrict__ frac, const float2* __restrict__ root_y, const float2* __restrict__ root_x,
              float2* __restrict__ T) {
    __shared__ float2 part[THREADS / 32][F * F];
    const int cx = blockIdx.x, cy = blockIdx.y;
    const int Ny = F * sy, Nx = F * sx, sxh = sx / 2 + 1;
    const bool mirrored = cx >= sxh;
    const long long row = ((long long)(mirrored ? (sy - cy) % sy : cy) * sxh + (mirrored ? sx - cx : cx)) * nbf;
    float2 wy[F], wx[F];  // w^m of the aliases
#pragma unroll
    for (int i = 0; i < F; ++i) {
        wy[i] = root_y[cy + i * sy];
        wx[i] = root_x[cx + i * sx];
    }
    float2 acc[F * F];
#pragma unroll
    for (int i = 0; i < F * F; ++i) acc[i] = make_float2(0.f, 0.f);
    if (cy != 0 || cx != 0) {  // Q = 0: each image's mean, taken out
        for (int j = threadIdx.x; j < nbf; j += THREADS) {
            const double2 g = load2(G[row + j]);
            const float2 v = make_float2((float)g.x, mirrored ? -(float)g.y : (float)g.y);
            const int ny = whole[2 * j], nx = whole[2 * j + 1];  // floor(sigma) mod N
            const float ey = frac[2 * j], ex = frac[2 * j + 1];
            float2 by[F], bx[F];
            int iy = (int)(((long long)cy * ny) % Ny), ix = (int)(((long long)cx * nx) % Nx);
            const int sty = sy * (ny % F), stx = sx * (nx % F);  // (m + S) n - m n = S n = S (n mod F) mod N
#pragma unroll
            for (int i = 0; i < F; ++i) {
                const float2 ry = root_y[iy], rx = root_x[ix];
                const float2 ly = make_float2(1.f - ey + ey * wy[i].x, ey * wy[i].y);
                const float2 lx = make_float2(1.f - ex + ex * wx[i].x, ex * wx[i].y);
                by[i] = make_float2(ry.x * ly.x - ry.y * ly.y, ry.x * ly.y + ry.y * ly.x);
                bx[i] = make_float2(rx.x * lx.x - rx.y * lx.y, rx.x * lx.y + rx.y * lx.x);
                iy += sty;
                if (iy >= Ny) iy -= Ny;
                ix += stx;
                if (ix >= Nx) ix -= Nx;
            }
#pragma unroll
            for (int i = 0; i < F; ++i) {
                const float2 vy = make_float2(v.x * by[i].x - v.y * by[i].y, v.x * by[i].y + v.y * by[i].x);
#pragma unroll
                for (int jx = 0; jx < F; ++jx) {
                    float2& a = acc[i * F + jx];
                    a.x += vy.x * bx[jx].x - vy.y * bx[jx].y;
                    a.y += vy.x * bx[jx].y + vy.y * bx[jx].x;
                }
            }
        }
    }
#pragma unroll
    for (int i = 0; i < F * F; ++i)
        for (int off = 16; off > 0; off >>= 1) {
            acc[i].x += __shfl_down_sync(0xffffffffu, acc[i].x, off);
            acc[i].y += __shfl_down_sync(0xffffffffu, acc[i].y, off);
        }
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (lane == 0)
#pragma unroll
        for (int i = 0; i < F * F; ++i) part[warp][i] = acc[i];
    __syncthreads();
    if (threadIdx.x < F * F) {
        float2 total = make_float2(0.f, 0.f);
        for (int w = 0; w < THREADS / 32; ++w) {
            total.x += part[w][threadIdx.x].x;
            total.y += part[w][threadIdx.x].y;
        }
        const int i = threadIdx.x / F, jx = threadIdx.x % F;
        T[(long long)(cy + i * sy) * Nx + cx + jx * sx] = total;
    }
}

#ifdef QORA_NVCC_CHECK
template __global__ void parallax_fine<float2, 3>(const float2*, int, int, int, const int*, const float*, const float2*,
                                                  const float2*, float2*);
template __global__ void parallax_fine<double2, 2>(const double2*, int, int, int, const int*, const float*,
                                                   const float2*, const float2*, float2*);
#endif

// The mean-phase loss (qora.ssb.session.Session.mean_phase) from the half plane. Each pixel's
// corrected plane P(Q) = G(Q, k) conj(Gamma) / |Gamma| (double overlap; 0 elsewhere, at Q = 0 and on
// the Nyquist row and column) is anti-Hermitian, Gamma(-Q) = -conj Gamma(Q) and G(-Q) = conj G(Q),
// so its image is G(0, k) / N + i r with r real: r = C2R(-i P) / N. loss_half writes -i P for a
// chunk of pixels as (chunk, sy, sx / 2 + 1) planes, one block per half-plane Q; an unscaled C2R
// gives N r; loss_moments adds each position's unit phasor (G(0, k), N r) / |.| over the chunk.
template <typename C, bool QUAD>
__global__ void __launch_bounds__(THREADS)
loss_half(const C* __restrict__ G, const double* __restrict__ k, const double* __restrict__ chi0,
          const double* __restrict__ qy,
          const double* __restrict__ qx, const double* __restrict__ coef, int sy, int sx, int nbf, int first, int count,
          double lam, double limit, double thickness, double tilt_y, double tilt_x, C* __restrict__ planes) {
    __shared__ double c[12];
    if (threadIdx.x < 12) c[threadIdx.x] = coef[threadIdx.x];
    __syncthreads();
    const int sxh = sx / 2 + 1, q = blockIdx.x, row = q / sxh, col = q % sxh;
    const long long plane = (long long)sy * sxh;
    const bool nyquist = (sy % 2 == 0 && row == sy / 2) || (sx % 2 == 0 && col == sx / 2);
    const double Qy = qy[q], Qx = qx[q];
    const double tilt_phase = 2.0 * QORA_PI * (tilt_y * Qy + tilt_x * Qx);
    for (int j = threadIdx.x; j < count; j += THREADS) {
        double ur, ui, mag, pr = 0.0, pi = 0.0;
        const int kk = first + j;
        if (q != 0 && !nyquist &&
            ssb_gamma<Fast<C>::value, QUAD>(c, lam, limit, k[2 * kk], k[2 * kk + 1], chi0[kk], Qy, Qx, thickness,
                                            tilt_phase, ur, ui, mag)) {
            const double2 g = load2(G[(long long)q * nbf + kk]);
            pr = g.x * ur + g.y * ui;  // G conj(Gamma) / |Gamma|
            pi = g.y * ur - g.x * ui;
        }
        C out;
        out.x = pi;  // -i P
        out.y = -pr;
        planes[j * plane + q] = out;
    }
}

template <typename R>
__global__ void loss_moments(const R* __restrict__ images, const double* __restrict__ g0, int count, long long npos,
                             double2* __restrict__ phasor) {
    const long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= npos) return;
    double sr = 0.0, si = 0.0;
    for (int j = 0; j < count; ++j) {
        const double re = g0[j], im = (double)images[j * npos + p];
        const double m = hypot(re, im);
        if (m > 0.0) {
            sr += re / m;
            si += im / m;
        } else {
            sr += 1.0;  // angle(0) = 0
        }
    }
    double2 acc = phasor[p];
    acc.x += sr;
    acc.y += si;
    phasor[p] = acc;
}

#ifdef QORA_NVCC_CHECK
template __global__ void loss_half<float2, true>(const float2*, const double*, const double*, const double*, const double*,
                                           const double*, int, int, int, int, int, double, double, double, double,
                                           double, float2*);
#endif
