// qora.holo exact gridding: the type-1 non-uniform DFT of the Ewald caps' samples on the device
// (qora/holo/gridding_cuda.py; the host's is ducc0's, qora/holo/gridding.py).
//
// Spreading: each sample's value c_j (the mapped value times its density weight) is added to the GRID_W^3
// points of a fine grid (nf = 2 N per axis, periodic) nearest its position t_j = 2 u_j (u_j its frequency
// in bins of the N grid), weighted by the "exponential of semicircle" kernel
//     phi(s) = exp(beta (sqrt(1 - (2 s / GRID_W)^2) - 1)),   |s| < GRID_W / 2,
// one factor per axis. The fine grid's inverse DFT, divided by the kernel's transform per axis and cropped
// to the central N^3, is the volume (deconvolve_crop).

#include "qora_device.cuh"

#define GRID_W 6  // kernel width in fine-grid points: about 1e-5 of the largest value at twice oversampling

__device__ __forceinline__ float es_kernel(float s, float beta) {
    const float x = 2.0f * s / GRID_W;
    const float r = 1.0f - x * x;
    return r > 0.0f ? __expf(beta * (sqrtf(r) - 1.0f)) : 0.0f;
}

// the first of the GRID_W fine points an axis touches (periodic, in [0, nf)) and their kernel weights
__device__ __forceinline__ int axis_weights(float t, int nf, float beta, float* w) {
    const float first = ceilf(t - 0.5f * GRID_W);
#pragma unroll
    for (int i = 0; i < GRID_W; ++i) w[i] = es_kernel(first + i - t, beta);
    int l0 = (int)first % nf;
    return l0 < 0 ? l0 + nf : l0;
}

// fine[(lz, ly, lx)] += weight_j spectra[source_j] phi(lz - tz) phi(ly - ty) phi(lx - tx), a thread per sample
extern "C" __global__ void spread_exact(const float2* __restrict__ spectra, const int* __restrict__ source,
                                        const float2* __restrict__ weight, const float* __restrict__ uz,
                                        const float* __restrict__ uy, const float* __restrict__ ux,
                                        long long count, int nf, float beta, float2* __restrict__ fine) {
    const long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= count) return;
    const float2 c = cmul(weight[j], spectra[source[j]]);
    float wz[GRID_W], wy[GRID_W], wx[GRID_W];
    const int z0 = axis_weights(2.0f * uz[j], nf, beta, wz);
    const int y0 = axis_weights(2.0f * uy[j], nf, beta, wy);
    const int x0 = axis_weights(2.0f * ux[j], nf, beta, wx);
#pragma unroll
    for (int a = 0; a < GRID_W; ++a) {
        const int lz = z0 + a < nf ? z0 + a : z0 + a - nf;
#pragma unroll
        for (int b = 0; b < GRID_W; ++b) {
            const int ly = y0 + b < nf ? y0 + b : y0 + b - nf;
            const float wzy = wz[a] * wy[b];
            float2* row = fine + ((long long)lz * nf + ly) * nf;
#pragma unroll
            for (int d = 0; d < GRID_W; ++d) {
                const int lx = x0 + d < nf ? x0 + d : x0 + d - nf;
                const float w = wzy * wx[d];
                atomicAdd(&row[lx].x, w * c.x);
                atomicAdd(&row[lx].y, w * c.y);
            }
        }
    }
}

// volume[i] (centre origin, N^3) = fine[k mod nf] * scale * deconv[iz] deconv[iy] deconv[ix], k = i - N/2 per axis
extern "C" __global__ void deconvolve_crop(const float2* __restrict__ fine, int nf, int n,
                                           const float* __restrict__ deconv, float scale,
                                           float2* __restrict__ volume) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)n * n * n) return;
    const int ix = (int)(i % n), iy = (int)((i / n) % n), iz = (int)(i / ((long long)n * n));
    const int h = n / 2;
    const int fz = iz - h < 0 ? iz - h + nf : iz - h;
    const int fy = iy - h < 0 ? iy - h + nf : iy - h;
    const int fx = ix - h < 0 ? ix - h + nf : ix - h;
    const float2 v = fine[((long long)fz * nf + fy) * nf + fx];
    const float s = scale * deconv[iz] * deconv[iy] * deconv[ix];
    volume[i] = make_float2(v.x * s, v.y * s);
}
