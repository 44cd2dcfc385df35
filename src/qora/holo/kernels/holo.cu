// qora.holo kernels: field extraction, least-squares unwrapping and Rytov, Ewald mapping,
// Gerchberg-Papoulis (half spectra and C2C), FISTA-TV with the FGP step, index.
//
// Conventions (see qora/holo/kernels/__init__.py, one launcher per kernel here, and cuda_stages.py):
// - complex values are float2; stacks are (count, rows, cols) row-major, image a at a*rows*cols;
// - the 3D volume is (z, y, x) row-major; a real volume of the in-place R2C transform has rows
//   of 2 (n/2 + 1) floats ("padded"), its half spectrum is (n, n, n/2 + 1) complex;
// - reductions accumulate in double with one atomic per block.
//
// Each physics expression exists once, as a __device__ function, and every kernel variant that
// needs it calls that function: the FGP variants differ only in where the primal point comes from.

#define QH_PI 3.14159265358979323846f
#define QH_TWO_PI 6.28318530717958647692f

// cmul, cconj, block_add (qora/backend/kernels)
#include "qora_device.cuh"

// ------------------------------------------------------------------------------------------
// Field extraction. The hologram's R2C spectrum holds k_x >= 0; a window bin with k_x > n/2
// is read as the conjugate of its mirror bin, so a window across k_x = 0 is no special case.
// factor = (-1)^(c_y + c_x) / N^2: the per-image sign that moves both origins to the centre.
extern "C" __global__ void crop_window(const float2* __restrict__ spectra, int big, const int* __restrict__ rows,
                                       const int* __restrict__ cols, const float* __restrict__ pupil, int n,
                                       int count, float factor, float2* __restrict__ out) {
    const long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long per = (long long)n * n;
    if (idx >= per * count) return;
    const int a = (int)(idx / per);
    const int i = (int)((idx / n) % n), j = (int)(idx % n);
    const int half = big / 2 + 1;
    const float2* h = spectra + (long long)a * big * half;
    const int row = rows[i], col = cols[j];
    float2 v;
    if (col < half) {
        v = h[(long long)row * half + col];
    } else {
        v = cconj(h[(long long)(row == 0 ? 0 : big - row) * half + (big - col)]);
    }
    const float w = pupil[i * n + j] * factor;
    out[idx] = make_float2(v.x * w, v.y * w);
}

// *flag = 1 if any of the floats is not finite (the holograms' check, on the device).
extern "C" __global__ void flag_nonfinite(const float4* __restrict__ x, long long quads, int* __restrict__ flag) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    bool bad = false;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < quads; i += stride) {
        const float4 v = x[i];
        bad |= !(isfinite(v.x) && isfinite(v.y) && isfinite(v.z) && isfinite(v.w));
    }
    if (__syncthreads_or(bad) && threadIdx.x == 0) *flag = 1;
}

// ------------------------------------------------------------------------------------------
// Least-squares unwrapping (Ghiglia and Romero): the divergence of the wrapped phase gradient,
// a 2D DCT-II computed by one batched 2D FFT of the Makhoul-reordered image, the Neumann
// eigenvalue division, and the exact inverse. The ratio is num / den (den may be null).

__device__ __forceinline__ float wrap_phase(float d) {  // into [-pi, pi), as Python's floor-mod
    return d - QH_TWO_PI * floorf((d + QH_PI) / QH_TWO_PI);
}

__device__ __forceinline__ float phase_of(const float2* num, const float2* den, long long k) {
    const float2 u = num[k];
    if (den == nullptr) return atan2f(u.y, u.x);
    const float2 b = den[k];
    return atan2f(u.y * b.x - u.x * b.y, u.x * b.x + u.y * b.y);  // arg(u conj(b)) = arg(u / b)
}

__device__ __forceinline__ int makhoul_position(int x, int n) {  // where element x goes
    return (x & 1) ? n - 1 - (x >> 1) : (x >> 1);
}

extern "C" __global__ void unwrap_divergence(const float2* __restrict__ num, const float2* __restrict__ den, int m,
                                             int n, float* __restrict__ psi, float2* __restrict__ reordered) {
    const int a = blockIdx.y;
    const int p = blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= m * n) return;
    const int y = p / n, x = p % n;
    const long long base = (long long)a * m * n;
    const float c = phase_of(num, den, base + p);
    float rho = 0.0f;
    if (x < n - 1) rho += wrap_phase(phase_of(num, den, base + p + 1) - c);
    if (x > 0) rho -= wrap_phase(c - phase_of(num, den, base + p - 1));
    if (y < m - 1) rho += wrap_phase(phase_of(num, den, base + p + n) - c);
    if (y > 0) rho -= wrap_phase(c - phase_of(num, den, base + p - n));
    psi[base + p] = c;
    reordered[base + (long long)makhoul_position(y, m) * n + makhoul_position(x, n)] = make_float2(rho, 0.0f);
}

// The DCT-II value at (k1, k2) from the 2D FFT V of the reordered image, divided by the
// Neumann eigenvalue; index m (or n) stands for the zero beyond the last bin.
__device__ __forceinline__ float dct_over_eigenvalue(const float2* v, int m, int n, int k1, int k2) {
    if (k1 == m || k2 == n || (k1 == 0 && k2 == 0)) return 0.0f;
    const float2 va = v[(long long)k1 * n + k2];
    const float2 vb = v[(long long)k1 * n + (k2 == 0 ? 0 : n - k2)];
    float s1, c1, s2, c2;
    sincospif((float)k1 / (2 * m), &s1, &c1);
    sincospif((float)k2 / (2 * n), &s2, &c2);
    // w2 va + conj(w2) vb with w2 = exp(-i pi k2 / 2n), then 2 Re(w1 t) with w1 = exp(-i pi k1 / 2m)
    const float tx = c2 * (va.x + vb.x) + s2 * (va.y - vb.y);
    const float ty = c2 * (va.y + vb.y) - s2 * (va.x - vb.x);
    const float x = 2.0f * (c1 * tx + s1 * ty);
    const float eig = 2.0f * cospif((float)k1 / m) + 2.0f * cospif((float)k2 / n) - 4.0f;
    return x / eig;
}

extern "C" __global__ void unwrap_poisson(const float2* __restrict__ v, int m, int n, float2* __restrict__ w) {
    const int a = blockIdx.y;
    const int p = blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= m * n) return;
    const int k1 = p / n, k2 = p % n;
    const float2* va = v + (long long)a * m * n;
    const float x1 = dct_over_eigenvalue(va, m, n, k1, k2);
    const float x2 = dct_over_eigenvalue(va, m, n, m - k1, k2);
    const float x3 = dct_over_eigenvalue(va, m, n, k1, n - k2);
    const float x4 = dct_over_eigenvalue(va, m, n, m - k1, n - k2);
    float s1, c1, s2, c2;
    sincospif((float)k1 / (2 * m), &s1, &c1);
    sincospif((float)k2 / (2 * n), &s2, &c2);
    // exp(i pi k1 / 2m) exp(i pi k2 / 2n) (x1 - x4 - i (x2 + x3)) / 4: the exact inverse's spectrum
    const float2 c = make_float2(c1 * c2 - s1 * s2, c1 * s2 + s1 * c2);
    const float2 r = cmul(c, make_float2(0.25f * (x1 - x4), -0.25f * (x2 + x3)));
    w[(long long)a * m * n + p] = r;
}

__device__ __forceinline__ float least_squares_phase(const float2* solved, int m, int n, int y, int x, float scale) {
    return solved[(long long)makhoul_position(y, m) * n + makhoul_position(x, n)].x * scale;
}

// sums[4a + 0, 1] += sum cos, sin (psi - phi): the congruence constant c = atan2(sin, cos).
extern "C" __global__ void unwrap_congruence(const float* __restrict__ psi, const float2* __restrict__ solved, int m,
                                             int n, float scale, double* __restrict__ sums) {
    const int a = blockIdx.y;
    const int p = blockIdx.x * blockDim.x + threadIdx.x;
    float c = 0.0f, s = 0.0f;
    if (p < m * n) {
        const long long base = (long long)a * m * n;
        const float d = psi[base + p] - least_squares_phase(solved + base, m, n, p / n, p % n, scale);
        sincosf(d, &s, &c);
    }
    block_add(c, sums + 4 * a);
    block_add(s, sums + 4 * a + 1);
}

__device__ __forceinline__ float congruent_phase(const float* psi, const float2* solved, const double* sums, int m,
                                                 int n, int y, int x, float scale) {
    const float c = atan2f((float)sums[1], (float)sums[0]);
    const float w = psi[y * n + x];
    const float phi = least_squares_phase(solved, m, n, y, x, scale);
    return w + QH_TWO_PI * rintf((phi + c - w) / QH_TWO_PI);
}

// sums[4a + 2] += sum of the congruent phase over the image border (for the border rule).
extern "C" __global__ void unwrap_border(const float* __restrict__ psi, const float2* __restrict__ solved, int m,
                                         int n, float scale, double* __restrict__ sums) {
    const int a = blockIdx.y;
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    const int border = 2 * n + 2 * (m - 2);
    float u = 0.0f;
    if (t < border) {
        int y, x;
        if (t < n) { y = 0; x = t; }
        else if (t < 2 * n) { y = m - 1; x = t - n; }
        else if (t < 2 * n + m - 2) { y = t - 2 * n + 1; x = 0; }
        else { y = t - 2 * n - (m - 2) + 1; x = n - 1; }
        const long long base = (long long)a * m * n;
        u = congruent_phase(psi + base, solved + base, sums + 4 * a, m, n, y, x, scale);
    }
    block_add(u, sums + 4 * a + 2);
}

// out = log|num / den| + i (congruent phase - 2 pi round(border mean / 2 pi)).
extern "C" __global__ void rytov_write(const float2* __restrict__ num, const float2* __restrict__ den,
                                       const float* __restrict__ psi, const float2* __restrict__ solved, int m, int n,
                                       float scale, const double* __restrict__ sums, float2* __restrict__ out) {
    const int a = blockIdx.y;
    const int p = blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= m * n) return;
    const long long base = (long long)a * m * n;
    const double* s = sums + 4 * a;
    const float mean = (float)(s[2] / (2 * n + 2 * (m - 2)));
    const float phase = congruent_phase(psi + base, solved + base, s, m, n, p / n, p % n, scale) -
                        QH_TWO_PI * rintf(mean / QH_TWO_PI);
    const float2 u = num[base + p];
    float mag2 = u.x * u.x + u.y * u.y;
    if (den != nullptr) {
        const float2 b = den[base + p];
        mag2 /= b.x * b.x + b.y * b.y;
    }
    out[base + p] = make_float2(0.5f * logf(mag2), phase);
}

// Born: out = num / den - 1.
extern "C" __global__ void born_write(const float2* __restrict__ num, const float2* __restrict__ den, long long total,
                                      float2* __restrict__ out) {
    const long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= total) return;
    float2 u = num[k];
    if (den != nullptr) {
        const float2 b = den[k];
        const float d = b.x * b.x + b.y * b.y;
        u = make_float2((u.x * b.x + u.y * b.y) / d, (u.y * b.x - u.x * b.y) / d);
    }
    out[k] = make_float2(u.x - 1.0f, u.y);
}

// ------------------------------------------------------------------------------------------
// Ewald mapping: each (illumination, lateral bin) adds factor * spectrum[source] to its nearest
// volume bin (tables from the host's MappingPlan, the sign of the centre-origin convention
// folded into the factor) and counts a hit.

// scatter: one thread per (illumination, bin), atomics.
extern "C" __global__ void map_scatter(const float2* __restrict__ spectra, const int* __restrict__ source,
                                       const int* __restrict__ target, const float2* __restrict__ factor,
                                       long long entries, float2* __restrict__ volume, int* __restrict__ hits) {
    const long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= entries) return;
    const float2 v = cmul(factor[e], spectra[source[e]]);
    const int t = target[e];
    atomicAdd(&volume[t].x, v.x);
    atomicAdd(&volume[t].y, v.y);
    atomicAdd(&hits[t], 1);
}

// gather: one thread per lateral column of the volume, looping over the entries that land in
// it (in illumination order); the column is this thread's alone, so no atomics.
extern "C" __global__ void map_gather(const float2* __restrict__ spectra, const int* __restrict__ column_start,
                                      const int* __restrict__ source, const int* __restrict__ plane,
                                      const float2* __restrict__ factor, int columns, float2* __restrict__ volume,
                                      int* __restrict__ hits) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= columns) return;
    const int end = column_start[c + 1];
    for (int e = column_start[c]; e < end; ++e) {
        const float2 v = cmul(factor[e], spectra[source[e]]);
        const long long t = (long long)plane[e] * columns + c;
        float2 s = volume[t];
        volume[t] = make_float2(s.x + v.x, s.y + v.y);
        hits[t] += 1;
    }
}

// ------------------------------------------------------------------------------------------
// Gerchberg-Papoulis. The mapped sums become the data P = sum / hits (0 where unmeasured).

__device__ __forceinline__ long long mirror_index(int kz, int ky, int kx, int n) {
    const int mz = kz ? n - kz : 0, my = ky ? n - ky : 0, mx = kx ? n - kx : 0;
    return ((long long)mz * n + my) * n + mx;
}

// counts[k] = M(k) + M(-k) on the half spectrum (one byte). counts and a (gp_data) are written in rows of
// `row` values: n / 2 + 1, or the fused GP loop's padded rows (gp_fused.cu).
extern "C" __global__ void gp_counts(const int* __restrict__ hits, int n, unsigned char* __restrict__ counts,
                                     int row) {
    const int half = n / 2 + 1;
    const long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (long long)n * n * half) return;
    const int kx = (int)(idx % half), ky = (int)((idx / half) % n), kz = (int)(idx / ((long long)half * n));
    const long long k = ((long long)kz * n + ky) * n + kx;
    counts[((long long)kz * n + ky) * row + kx] =
        (unsigned char)((hits[k] > 0) + (hits[mirror_index(kz, ky, kx, n)] > 0));
}

extern "C" __global__ void normalise_hits(float2* __restrict__ sums, const int* __restrict__ hits, long long total) {
    const long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= total) return;
    const int h = hits[k];
    const float2 s = sums[k];
    sums[k] = h > 0 ? make_float2(s.x / h, s.y / h) : make_float2(0.0f, 0.0f);
}

// a(k) = (P(k) + conj P(-k)) / 2 on the half spectrum: the Hermitian part of the data.
extern "C" __global__ void gp_data(const float2* __restrict__ data, int n, float2* __restrict__ a, int row) {
    const int half = n / 2 + 1;
    const long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (long long)n * n * half) return;
    const int kx = (int)(idx % half), ky = (int)((idx / half) % n), kz = (int)(idx / ((long long)half * n));
    const float2 p = data[((long long)kz * n + ky) * n + kx];
    const float2 q = data[mirror_index(kz, ky, kx, n)];
    a[((long long)kz * n + ky) * row + kx] = make_float2(0.5f * (p.x + q.x), 0.5f * (p.y - q.y));
}

// v = clamp(scale v, lower, upper) over a padded real volume, four floats per step (padding included:
// harmless). (lower, upper) = (0, inf) is GP's non-negativity.
extern "C" __global__ void clamp_real(float4* __restrict__ v, long long quads, float scale, float lower, float upper) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < quads; i += stride) {
        float4 x = v[i];
        v[i] = make_float4(fminf(fmaxf(scale * x.x, lower), upper), fminf(fmaxf(scale * x.y, lower), upper),
                           fminf(fmaxf(scale * x.z, lower), upper), fminf(fmaxf(scale * x.w, lower), upper));
    }
}

// E = a + (1 - counts / 2) E on the half spectrum, two bins per step (the bin count is even).
extern "C" __global__ void restore_half(float4* __restrict__ e, const float4* __restrict__ a,
                                        const uchar2* __restrict__ counts, long long pairs) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < pairs; i += stride) {
        const float4 x = e[i], d = a[i];
        const uchar2 c = counts[i];
        const float b0 = 1.0f - 0.5f * c.x, b1 = 1.0f - 0.5f * c.y;
        e[i] = make_float4(d.x + b0 * x.x, d.y + b0 * x.y, d.z + b1 * x.z, d.w + b1 * x.w);
    }
}

// C2C loop: keep clamp(Re(scale v), lower, upper) and drop the imaginary part, or with keep_imag (a complex
// index) keep max(Im(scale v), 0) (absorption, never gain); then restore measured bins.
extern "C" __global__ void clamp_complex(float2* __restrict__ v, long long total, float scale, float lower,
                                         float upper, int keep_imag) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride)
        v[i] = make_float2(fminf(fmaxf(scale * v[i].x, lower), upper), keep_imag ? fmaxf(scale * v[i].y, 0.0f) : 0.0f);
}

extern "C" __global__ void restore_complex(float2* __restrict__ e, const float2* __restrict__ data,
                                           const int* __restrict__ hits, long long total) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride)
        if (hits[i] > 0) e[i] = data[i];
}

// ------------------------------------------------------------------------------------------
// Index: n = Re sqrt(n_m^2 + scale V / k0^2).
extern "C" __global__ void index_real(float* __restrict__ v, long long total, float scale, float medium2,
                                      float inv_k02) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        const float s = medium2 + scale * v[i] * inv_k02;
        v[i] = s > 0.0f ? sqrtf(s) : 0.0f;
    }
}

// sqrt(x + iy) on the principal branch: (Re, Im), Im carrying the sign of y (+0 for y = +0, as NumPy's).
// The small part comes from the large one as y / 2t, never as sqrt((|z| - |x|) / 2): in float32 that
// difference cancels (x ~ n_m^2 ~ 1.8 has an ulp of 1.2e-7), which returned kappa = 0 for every
// kappa below ~1e-4 and 1% errors at 1e-3 (tests/holo/test_holo_geometry_cuda.py checks 1e-6..4e-3).
__device__ __forceinline__ float2 principal_sqrt(float x, float y) {
    const float h = hypotf(x, y);
    if (x >= 0.0f) {
        const float t = sqrtf(0.5f * (h + x));  // 0 only for x = y = 0
        return make_float2(t, t > 0.0f ? 0.5f * y / t : y);
    }
    const float t = sqrtf(0.5f * (h - x));  // > 0 for x < 0
    return make_float2(0.5f * fabsf(y) / t, copysignf(t, y));
}

// out = Re sqrt(n_m^2 + scale V / k0^2); with out_imag (a complex index) the imaginary index there too.
extern "C" __global__ void index_complex(const float2* __restrict__ v, long long total, float scale, float medium2,
                                         float inv_k02, float* __restrict__ out, float* __restrict__ out_imag) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        const float2 n = principal_sqrt(medium2 + scale * v[i].x * inv_k02, scale * v[i].y * inv_k02);
        out[i] = n.x;
        if (out_imag) out_imag[i] = n.y;
    }
}

// The same for a potential held as two real volumes (FISTA-TV's parts), in place: re -> n, im -> kappa.
extern "C" __global__ void index_parts(float* re, float* im, long long total, float medium2, float inv_k02) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        const float2 n = principal_sqrt(medium2 + re[i] * inv_k02, im[i] * inv_k02);
        re[i] = n.x;
        im[i] = n.y;
    }
}

// ------------------------------------------------------------------------------------------
// The field of view inside a larger solver grid: the central box of edge nb (offset lo) of a
// padded real volume of edge n (row length rl).
extern "C" __global__ void box_restrict(const float* __restrict__ padded, int n, int rl, int nb, int lo, float scale,
                                        float* __restrict__ box) {
    const long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (long long)nb * nb * nb) return;
    const int i = (int)(idx % nb), j = (int)((idx / nb) % nb), k = (int)(idx / ((long long)nb * nb));
    box[idx] = scale * padded[((long long)(k + lo) * n + (j + lo)) * rl + (i + lo)];
}

extern "C" __global__ void box_expand(const float* __restrict__ box, int n, int rl, int nb, int lo,
                                      float* __restrict__ padded) {
    const long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (long long)n * n * rl) return;
    const int i = (int)(idx % rl), j = (int)((idx / rl) % n), k = (int)(idx / ((long long)rl * n));
    const int bi = i - lo, bj = j - lo, bk = k - lo;
    const bool inside = bi >= 0 && bi < nb && bj >= 0 && bj < nb && bk >= 0 && bk < nb;
    padded[idx] = inside ? box[((long long)bk * nb + bj) * nb + bi] : 0.0f;
}

// The complex twins for a complex index (C2C grid of edge n, no padding): the box's two real parts.
extern "C" __global__ void box_restrict_complex(const float2* __restrict__ grid, int n, int nb, int lo, float scale,
                                                float* __restrict__ re, float* __restrict__ im) {
    const long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (long long)nb * nb * nb) return;
    const int i = (int)(idx % nb), j = (int)((idx / nb) % nb), k = (int)(idx / ((long long)nb * nb));
    const float2 v = grid[((long long)(k + lo) * n + (j + lo)) * n + (i + lo)];
    re[idx] = scale * v.x;
    im[idx] = scale * v.y;
}

extern "C" __global__ void box_expand_complex(const float* __restrict__ re, const float* __restrict__ im, int n,
                                              int nb, int lo, float2* __restrict__ grid) {
    const long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (long long)n * n * n) return;
    const int i = (int)(idx % n), j = (int)((idx / n) % n), k = (int)(idx / ((long long)n * n));
    const int bi = i - lo, bj = j - lo, bk = k - lo;
    const bool inside = bi >= 0 && bi < nb && bj >= 0 && bj < nb && bk >= 0 && bk < nb;
    const long long b = ((long long)bk * nb + bj) * nb + bi;
    grid[idx] = inside ? make_float2(re[b], im[b]) : make_float2(0.0f, 0.0f);
}

// ------------------------------------------------------------------------------------------
// The data misfit of the discrepancy principle (qora.holo.regularisation.misfit), summed in double.
// Half spectrum (a real volume): pair k with -k; with c = M(k) + M(-k) measured members of the pair and
// a = (P(k) + conj P(-k)) / 2, their misfit is c |E - 2a / c|^2 plus a constant the search cancels
// (it compares misfits); the planes kx = 0 and kx = n/2 hold both members of a pair: weight 1/2 there.
extern "C" __global__ void misfit_half(const float2* __restrict__ e, const float2* __restrict__ a,
                                       const unsigned char* __restrict__ counts, int n, double* __restrict__ out) {
    const int half = n / 2 + 1;
    const long long total = (long long)n * n * half;
    double acc = 0.0;
    for (long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
         idx += (long long)gridDim.x * blockDim.x) {
        const int c = counts[idx];
        if (c == 0) continue;
        const int kx = (int)(idx % half);
        const float w = (kx == 0 || kx == n / 2) ? 0.5f : 1.0f;
        const float2 d = make_float2(e[idx].x - 2.0f * a[idx].x / c, e[idx].y - 2.0f * a[idx].y / c);
        acc += (double)(w * c * (d.x * d.x + d.y * d.y));
    }
    block_add((float)acc, out);
}

// Full spectrum (a complex index): sum over the measured bins of |E - P|^2, as the CPU's.
extern "C" __global__ void misfit_complex(const float2* __restrict__ e, const float2* __restrict__ data,
                                          const int* __restrict__ hits, long long total, double* __restrict__ out) {
    double acc = 0.0;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        if (hits[i] > 0) {
            const float dx = e[i].x - data[i].x, dy = e[i].y - data[i].y;
            acc += (double)(dx * dx + dy * dy);
        }
    }
    block_add((float)acc, out);
}

// ------------------------------------------------------------------------------------------
// TV prox by fast gradient projection (FGP) on the dual (3, nz, ny, nx) of forward differences.
// primal:  z = max(v - lam D^T r, 0)      (D^T r from r at the voxel and its three lower neighbours)
// dual:    q = r + step D z,  p' = q / max(1, |q|),  r' = p' + momentum (p' - p)

struct Dims {
    int nz, ny, nx;
    long long plane, volume;
};

__device__ __forceinline__ Dims make_dims(int nz, int ny, int nx) {
    Dims d;
    d.nz = nz; d.ny = ny; d.nx = nx;
    d.plane = (long long)ny * nx;
    d.volume = d.plane * nz;
    return d;
}

// The primal point at (k, j, i); the order of the terms is the CPU's (qora.holo.tv_cpu).
__device__ __forceinline__ float tv_primal(const float* __restrict__ v, const float* __restrict__ r, Dims d, int k,
                                           int j, int i, float lam, float lower, float upper) {
    const long long c = (k * (long long)d.ny + j) * d.nx + i;
    float s = 0.0f;
    if (k < d.nz - 1) s -= r[c];
    if (k > 0) s += r[c - d.plane];
    if (j < d.ny - 1) s -= r[d.volume + c];
    if (j > 0) s += r[d.volume + c - d.nx];
    if (i < d.nx - 1) s -= r[2 * d.volume + c];
    if (i > 0) s += r[2 * d.volume + c - 1];
    const float x = v[c] - lam * s;
    return fminf(fmaxf(x, lower), upper);  // the box constraint (0, inf) by default
}

// The dual update at voxel c from the primal point there (zc) and at its upper neighbours
// (z0, z1, z2, ignored across the last plane); own r and p given (loaded early by the caller).
__device__ __forceinline__ void tv_dual(Dims d, long long c, int k, int j, int i, float zc, float z0, float z1,
                                        float z2, float r0, float r1, float r2, float p0, float p1, float p2,
                                        float step, float momentum, float* __restrict__ p_out,
                                        float* __restrict__ r_out) {
    const float g0 = k < d.nz - 1 ? z0 - zc : 0.0f;
    const float g1 = j < d.ny - 1 ? z1 - zc : 0.0f;
    const float g2 = i < d.nx - 1 ? z2 - zc : 0.0f;
    const float q0 = r0 + step * g0, q1 = r1 + step * g1, q2 = r2 + step * g2;
    const float norm = sqrtf(q0 * q0 + q1 * q1 + q2 * q2);
    const float s = norm > 1.0f ? 1.0f / norm : 1.0f;
    const float n0 = q0 * s, n1 = q1 * s, n2 = q2 * s;
    r_out[c] = n0 + momentum * (n0 - p0);
    r_out[d.volume + c] = n1 + momentum * (n1 - p1);
    r_out[2 * d.volume + c] = n2 + momentum * (n2 - p2);
    p_out[c] = n0;
    p_out[d.volume + c] = n1;
    p_out[2 * d.volume + c] = n2;
}

#define TV_ARGS                                                                                             \
    const float *__restrict__ v, const float *__restrict__ r, float *__restrict__ p, float *__restrict__ r_next, \
        int nz, int ny, int nx, float lam, float lower, float upper, float step, float momentum

// The fused update of voxel (k, j, i) given the primal point there: the primal point recomputed
// at its three upper neighbours; own p and r loaded first so their latency overlaps the
// neighbour reads. Returns the primal point at (k + 1, j, i) for a caller marching along z.
__device__ __forceinline__ float fgp_fused_voxel(TV_ARGS, int k, int j, int i, float zc) {
    const Dims d = make_dims(nz, ny, nx);
    const long long c = (k * (long long)ny + j) * nx + i;
    const float p0 = p[c], p1 = p[d.volume + c], p2 = p[2 * d.volume + c];
    const float r0 = r[c], r1 = r[d.volume + c], r2 = r[2 * d.volume + c];
    const float z0 = k < nz - 1 ? tv_primal(v, r, d, k + 1, j, i, lam, lower, upper) : 0.0f;
    const float z1 = j < ny - 1 ? tv_primal(v, r, d, k, j + 1, i, lam, lower, upper) : 0.0f;
    const float z2 = i < nx - 1 ? tv_primal(v, r, d, k, j, i + 1, lam, lower, upper) : 0.0f;
    tv_dual(d, c, k, j, i, zc, z0, z1, z2, r0, r1, r2, p0, p1, p2, step, momentum, p, r_next);
    return z0;
}

#define TV_PASS v, r, p, r_next, nz, ny, nx, lam, lower, upper, step, momentum

// fused (default): one kernel per step; each thread updates FUSED_PLANES voxels of its column,
// carrying the primal point of the next plane in a register (one recomputation fewer per voxel).
// Measured on the H200 at 512^3 (bench/fgp_probe.py): 2.09 ms per step against 2.59 ms with one
// thread per voxel and 2.42 ms for the two-kernel step; blocks of 64 x 4.
#define FUSED_PLANES 4
extern "C" __global__ void __launch_bounds__(256) fgp_fused(TV_ARGS) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x, j = blockIdx.y * blockDim.y + threadIdx.y;
    const int k0 = blockIdx.z * FUSED_PLANES;
    if (i >= nx || j >= ny || k0 >= nz) return;
    float zc = tv_primal(v, r, make_dims(nz, ny, nx), k0, j, i, lam, lower, upper);
    const int k_end = min(k0 + FUSED_PLANES, nz);
    for (int k = k0; k < k_end; ++k) zc = fgp_fused_voxel(TV_PASS, k, j, i, zc);
}

// two kernels: the primal point written to z by one, read by the other.
extern "C" __global__ void fgp_primal(const float* __restrict__ v, const float* __restrict__ r, int nz, int ny, int nx,
                                      float lam, float lower, float upper, float* __restrict__ z) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x, j = blockIdx.y * blockDim.y + threadIdx.y, k = blockIdx.z;
    if (i >= nx || j >= ny) return;
    const Dims d = make_dims(nz, ny, nx);
    z[(k * (long long)ny + j) * nx + i] = tv_primal(v, r, d, k, j, i, lam, lower, upper);
}

extern "C" __global__ void fgp_dual(const float* __restrict__ z, const float* __restrict__ r, float* __restrict__ p,
                                    float* __restrict__ r_next, int nz, int ny, int nx, float step, float momentum) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x, j = blockIdx.y * blockDim.y + threadIdx.y, k = blockIdx.z;
    if (i >= nx || j >= ny) return;
    const Dims d = make_dims(nz, ny, nx);
    const long long c = (k * (long long)ny + j) * nx + i;
    const float p0 = p[c], p1 = p[d.volume + c], p2 = p[2 * d.volume + c];
    const float r0 = r[c], r1 = r[d.volume + c], r2 = r[2 * d.volume + c];
    const float zc = z[c];
    const float z0 = k < nz - 1 ? z[c + d.plane] : 0.0f;
    const float z1 = j < ny - 1 ? z[c + nx] : 0.0f;
    const float z2 = i < nx - 1 ? z[c + 1] : 0.0f;
    tv_dual(d, c, k, j, i, zc, z0, z1, z2, r0, r1, r2, p0, p1, p2, step, momentum, p, r_next);
}

// Fill a shared tile of primal points: origin (k0, j0, i0), extent (tz, ty, tx), zero outside the volume.
__device__ __forceinline__ void fill_primal_tile(float* tile, int tz, int ty, int tx, int k0, int j0, int i0,
                                                 const float* __restrict__ v, const float* __restrict__ r, Dims d,
                                                 float lam, float lower, float upper, int tid, int threads) {
    const int count = tz * ty * tx;
    for (int t = tid; t < count; t += threads) {
        const int ti = t % tx, tj = (t / tx) % ty, tk = t / (tx * ty);
        const int k = k0 + tk, j = j0 + tj, i = i0 + ti;
        tile[t] = (k < d.nz && j < d.ny && i < d.nx) ? tv_primal(v, r, d, k, j, i, lam, lower, upper) : 0.0f;
    }
}

// cube tiles of 16 x 8 x 4: the primal points of the tile and its upper halo in shared memory.
#define CUBE_X 16
#define CUBE_Y 8
#define CUBE_Z 4
extern "C" __global__ void __launch_bounds__(CUBE_X * CUBE_Y * CUBE_Z) fgp_cube(TV_ARGS) {
    __shared__ float tile[(CUBE_Z + 1) * (CUBE_Y + 1) * (CUBE_X + 1)];
    const int i = blockIdx.x * CUBE_X + threadIdx.x, j = blockIdx.y * CUBE_Y + threadIdx.y;
    const int k = blockIdx.z * CUBE_Z + threadIdx.z;
    const Dims d = make_dims(nz, ny, nx);
    const bool inside = i < nx && j < ny && k < nz;
    const long long c = (k * (long long)ny + j) * nx + i;
    float p0 = 0, p1 = 0, p2 = 0, r0 = 0, r1 = 0, r2 = 0;
    if (inside) {
        p0 = p[c]; p1 = p[d.volume + c]; p2 = p[2 * d.volume + c];
        r0 = r[c]; r1 = r[d.volume + c]; r2 = r[2 * d.volume + c];
    }
    const int tid = threadIdx.x + CUBE_X * (threadIdx.y + CUBE_Y * threadIdx.z);
    fill_primal_tile(tile, CUBE_Z + 1, CUBE_Y + 1, CUBE_X + 1, blockIdx.z * CUBE_Z, blockIdx.y * CUBE_Y,
                     blockIdx.x * CUBE_X, v, r, d, lam, lower, upper, tid, CUBE_X * CUBE_Y * CUBE_Z);
    __syncthreads();
    if (!inside) return;
    const int sx = CUBE_X + 1, sxy = (CUBE_X + 1) * (CUBE_Y + 1);
    const int t = threadIdx.x + sx * threadIdx.y + sxy * threadIdx.z;
    tv_dual(d, c, k, j, i, tile[t], tile[t + sxy], tile[t + sx], tile[t + 1], r0, r1, r2, p0, p1, p2, step, momentum,
            p, r_next);
}

// x-y tiles of 32 x 8 marching along z over MARCH_PLANES planes: two planes of primal points
// (the tile and its upper halo) in shared memory, the upper one computed while marching.
#define MARCH_X 32
#define MARCH_Y 8
#define MARCH_PLANES 8
extern "C" __global__ void __launch_bounds__(MARCH_X * MARCH_Y) fgp_march(TV_ARGS) {
    __shared__ float planes[2][(MARCH_Y + 1) * (MARCH_X + 1)];
    const int i = blockIdx.x * MARCH_X + threadIdx.x, j = blockIdx.y * MARCH_Y + threadIdx.y;
    const int k0 = blockIdx.z * MARCH_PLANES;
    const Dims d = make_dims(nz, ny, nx);
    const int tid = threadIdx.x + MARCH_X * threadIdx.y, threads = MARCH_X * MARCH_Y;
    const int sx = MARCH_X + 1, t = threadIdx.x + sx * threadIdx.y;
    const bool column = i < nx && j < ny;
    float* here = planes[0];
    float* above = planes[1];
    fill_primal_tile(here, 1, MARCH_Y + 1, MARCH_X + 1, k0, blockIdx.y * MARCH_Y, blockIdx.x * MARCH_X, v, r, d, lam,
                     lower, upper, tid, threads);
    const int k_end = min(k0 + MARCH_PLANES, nz);
    for (int k = k0; k < k_end; ++k) {
        const long long c = (k * (long long)ny + j) * nx + i;
        float p0 = 0, p1 = 0, p2 = 0, r0 = 0, r1 = 0, r2 = 0;
        if (column) {
            p0 = p[c]; p1 = p[d.volume + c]; p2 = p[2 * d.volume + c];
            r0 = r[c]; r1 = r[d.volume + c]; r2 = r[2 * d.volume + c];
        }
        fill_primal_tile(above, 1, MARCH_Y + 1, MARCH_X + 1, k + 1, blockIdx.y * MARCH_Y, blockIdx.x * MARCH_X, v, r,
                         d, lam, lower, upper, tid, threads);
        __syncthreads();
        if (column)
            tv_dual(d, c, k, j, i, here[t], above[t], here[t + sx], here[t + 1], r0, r1, r2, p0, p1, p2, step,
                    momentum, p, r_next);
        __syncthreads();
        float* swap = here;
        here = above;
        above = swap;
    }
}

// After the FGP steps: x = max(v - lam D^T p, 0), then FISTA's momentum y = x + m (x - x_prev),
// x_prev = x.
extern "C" __global__ void fista_step(const float* __restrict__ v, const float* __restrict__ p, int nz, int ny, int nx,
                                      float lam, float lower, float upper, float momentum, float* __restrict__ x_prev,
                                      float* __restrict__ y) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x, j = blockIdx.y * blockDim.y + threadIdx.y, k = blockIdx.z;
    if (i >= nx || j >= ny) return;
    const Dims d = make_dims(nz, ny, nx);
    const long long c = (k * (long long)ny + j) * nx + i;
    const float x = tv_primal(v, p, d, k, j, i, lam, lower, upper);
    const float xp = x_prev[c];
    y[c] = x + momentum * (x - xp);
    x_prev[c] = x;
}

// ------------------------------------------------------------------------------------------
// Beam propagation (qora.holo.bpm): the envelope spectra S of a chunk of B illuminations
// (B, n, n), FFT layout; per-illumination tables tq = c q, tr = c (1 - q) (or the last step's).

// screens[k, p] = exp(i kd x[k, p']) with p in the FFT layout and p' its centre-origin pixel.
extern "C" __global__ void bpm_screens(const float* __restrict__ x, int nz, int n, float kd,
                                       float2* __restrict__ screens) {
    const long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (long long)nz * n * n) return;
    const int col = (int)(idx % n), row = (int)((idx / n) % n);
    const long long k = idx / ((long long)n * n);
    const float v = x[(k * n + (row + n / 2) % n) * n + (col + n / 2) % n];
    float s, c;
    sincosf(kd * v, &s, &c);
    screens[idx] = make_float2(c, s);
}

// w <- scale w (the inverse FFT's 1/n^2), stored <- w (when given), w <- screen w.
extern "C" __global__ void bpm_screen(float2* __restrict__ w, const float2* __restrict__ screen, long long total,
                                      int n2, float scale, float2* __restrict__ stored) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total) return;
    const float2 v = make_float2(w[i].x * scale, w[i].y * scale);
    if (stored != nullptr) stored[i] = v;
    w[i] = cmul(screen[i % n2], v);
}

// S <- tq A + tr S.
extern "C" __global__ void bpm_propagate(const float2* __restrict__ a, const float2* __restrict__ tq,
                                         const float2* __restrict__ tr, long long total, float2* __restrict__ s) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total) return;
    const float2 x = cmul(tq[i], a[i]), y = cmul(tr[i], s[i]);
    s[i] = make_float2(x.x + y.x, x.y + y.y);
}

// Field ratios out (B, n, n), centre-origin, from w = the unscaled inverse FFT of S (FFT layout).
extern "C" __global__ void bpm_output(const float2* __restrict__ w, long long total, int n, float scale,
                                      float2* __restrict__ out) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total) return;
    const int col = (int)(i % n), row = (int)((i / n) % n);
    const long long a = i / ((long long)n * n);
    out[(a * n + (row + n / 2) % n) * n + (col + n / 2) % n] = make_float2(w[i].x * scale, w[i].y * scale);
}

// The residual in the FFT layout, written over w: r = scale w - d for the data d (centre-origin),
// or, with scale 0, r = d (a residual given as it is); sum |r|^2 into *loss.
extern "C" __global__ void bpm_residual(float2* __restrict__ w, const float2* __restrict__ data, long long total,
                                        int n, float scale, double* __restrict__ loss) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    float e = 0.0f;
    if (i < total) {
        const int col = (int)(i % n), row = (int)((i / n) % n);
        const long long a = i / ((long long)n * n);
        const float2 d = data[(a * n + (row + n / 2) % n) * n + (col + n / 2) % n];
        const float2 r = scale != 0.0f ? make_float2(w[i].x * scale - d.x, w[i].y * scale - d.y) : d;
        w[i] = r;
        e = r.x * r.x + r.y * r.y;
    }
    block_add(e, loss);
}

// The reverse pass's split: G' = G + H (H: the previous slice's forward FFT of conj(p) b, or null),
// b = scale conj(tq) G' (scale: the next inverse FFT's 1/n^2), G = conj(tr) G'. b may be H.
extern "C" __global__ void bpm_split(float2* __restrict__ g, const float2* h, const float2* __restrict__ tq,
                                     const float2* __restrict__ tr, long long total, float scale, float2* b) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total) return;
    float2 gp = g[i];
    if (h != nullptr) gp = make_float2(gp.x + h[i].x, gp.y + h[i].y);
    const float2 u = cmul(cconj(tq[i]), gp);
    b[i] = make_float2(u.x * scale, u.y * scale);
    g[i] = cmul(cconj(tr[i]), gp);
}

// One thread per pixel looping over the chunk's B illuminations (no atomics):
// grad[p] += kd sum_b Im(conj(screen w_b) b_b), then b_b <- conj(screen) b_b for the forward FFT.
extern "C" __global__ void bpm_gradient(const float2* __restrict__ screen, const float2* __restrict__ stored,
                                        float2* __restrict__ b, int count, int n2, float kd,
                                        float* __restrict__ grad) {
    const int p = blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= n2) return;
    const float2 s = screen[p];
    float acc = 0.0f;
    for (int a = 0; a < count; ++a) {
        const long long i = (long long)a * n2 + p;
        const float2 pw = cmul(s, stored[i]);
        const float2 v = b[i];
        acc += pw.x * v.y - pw.y * v.x;
        b[i] = cmul(cconj(s), v);
    }
    grad[p] += kd * acc;
}
