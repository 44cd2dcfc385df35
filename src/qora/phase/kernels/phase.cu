// qora.phase element-wise kernels: the fused modulus step (with the Fourier error's
// partial sums) and the fused ER/HIO/RAAR support update.
//
// Layout: B starts of n complex64 values each, start b at offset b*n; the launch grid's
// y index is the start. The amplitude (n floats, FFT layout, -1 where masked) is shared
// by all starts; the support is one byte per pixel per start.
//
// References: qora.phase.physics.modulus_project and qora.phase.physics.support_update
// (parity tests in tests/phase/test_phase_cuda.py sweep every branch).

#include <cuda_fp16.h>

// Each thread moves two complex values per step as one 16-byte float4 when n is even
// (so every start's base stays 16-byte aligned); odd n falls back to one value per step.

#include "phase_ops.cuh"

// The walk of a modulus kernel over batch item blockIdx.y: with n even, pairs of values through
// pair(i, a2[i], err) (one 8- or 16-byte load each), else single values through one(i, amp[i], err); then the
// block's Fourier-error sum into err_sums[slot * B + b], slot = *counter when counter is given (the graph
// variant's device-side iteration index), else 0.
template <class Pair, class One>
__device__ __forceinline__ void modulus_walk(const float* __restrict__ amp, long long n, double* __restrict__ err_sums,
                                             const int* __restrict__ counter, Pair pair, One one) {
    float err = 0.0f;
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long t0 = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if ((n & 1) == 0) {
        const float2* a2 = reinterpret_cast<const float2*>(amp);
        for (long long i = t0; i < n / 2; i += stride) pair(i, a2[i], err);
    } else {
        for (long long i = t0; i < n; i += stride) one(i, amp[i], err);
    }
    const int slot = counter ? *counter : 0;
    block_add(err, err_sums + (long long)slot * gridDim.y + blockIdx.y);
}

// y <- w of the modulus projection (in place); err_sums[slot * B + b] += sum (|F x| - a)^2.
extern "C" __global__ void modulus_step(float2* __restrict__ y, const float* __restrict__ amp, float scale,
                                        long long n, double* __restrict__ err_sums,
                                        const int* __restrict__ counter) {
    float2* yb = y + (long long)blockIdx.y * n;
    modulus_walk(amp, n, err_sums, counter,
        [&](long long i, float2 a, float& err) {
            float4* y4 = reinterpret_cast<float4*>(yb);
            float4 v = y4[i];
            float2 w0 = modulus_one(make_float2(v.x, v.y), a.x, scale, err);
            float2 w1 = modulus_one(make_float2(v.z, v.w), a.y, scale, err);
            y4[i] = make_float4(w0.x, w0.y, w1.x, w1.y);
        },
        [&](long long i, float a, float& err) { yb[i] = modulus_one(yb[i], a, scale, err); });
}

// x <- p inside the support (and constraint), a x + b p outside. Skips the load of x
// when the support keeps both values of a pair and no constraint can reject them.
// With counter given, one thread advances the device iteration index for the next step.
extern "C" __global__ void update_step(float2* __restrict__ x, const float2* __restrict__ p,
                                       const unsigned char* __restrict__ support, float a, float b,
                                       int constraint, long long n, int* __restrict__ counter) {
    const int bi = blockIdx.y;
    float2* xb = x + (long long)bi * n;
    const float2* pb = p + (long long)bi * n;
    const unsigned char* sb = support + (long long)bi * n;
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long t0 = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if ((n & 1) == 0) {
        float4* x4 = reinterpret_cast<float4*>(xb);
        const float4* p4 = reinterpret_cast<const float4*>(pb);
        const uchar2* s2 = reinterpret_cast<const uchar2*>(sb);
        for (long long i = t0; i < n / 2; i += stride) {
            float4 pv = p4[i];
            uchar2 s = s2[i];
            float4 xv;
            if (s.x && s.y && constraint == 0) {
                xv = pv;  // both inside: x is not needed
            } else {
                float4 old = x4[i];
                float2 u0 = update_one(make_float2(old.x, old.y), make_float2(pv.x, pv.y), s.x, a, b, constraint);
                float2 u1 = update_one(make_float2(old.z, old.w), make_float2(pv.z, pv.w), s.y, a, b, constraint);
                xv = make_float4(u0.x, u0.y, u1.x, u1.y);
            }
            x4[i] = xv;
        }
    } else {
        for (long long i = t0; i < n; i += stride) xb[i] = update_one(xb[i], pb[i], sb[i], a, b, constraint);
    }
    if (counter && blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) *counter += 1;
}


// ---------------------------------------------------------------------------------------
// fp16 storage (variants half and mixed): complex values as __half2 (re, im), arithmetic in
// fp32. The amplitude is divided by its maximum, so that |F x| <= 1 and the unscaled forward
// transform stays below sqrt(n) (< 65504 for n < 2^32). The projection is stored at unit
// scale, and the inverse transform's 1/sqrt(n) is applied in the update (pscale), where it
// cannot push weak values into fp16 subnormals.

// The unit-scale projection of the fp16 kernels: modulus_one of the value at true scale, s v, left unscaled
// (measured values to amplitude a, free ones s v; the error of s |v| against a).
__device__ __forceinline__ float2 modulus_unit(float2 v, float a, float s, float& err) {
    return modulus_one(make_float2(s * v.x, s * v.y), a, 1.0f, err);
}

// y (fp16, unscaled transform) <- the unit-scale projection; error sums as modulus_step.
extern "C" __global__ void modulus_half(__half2* __restrict__ y, const float* __restrict__ amp, float s,
                                        long long n, double* __restrict__ err_sums,
                                        const int* __restrict__ counter) {
    __half2* yb = y + (long long)blockIdx.y * n;
    modulus_walk(amp, n, err_sums, counter,
        [&](long long i, float2 a, float& err) {
            uint2* y2 = reinterpret_cast<uint2*>(yb);  // two __half2 per 8-byte load
            uint2 raw = y2[i];
            __half2 w0 = __float22half2_rn(modulus_unit(__half22float2(*reinterpret_cast<__half2*>(&raw.x)), a.x, s, err));
            __half2 w1 = __float22half2_rn(modulus_unit(__half22float2(*reinterpret_cast<__half2*>(&raw.y)), a.y, s, err));
            uint2 out;
            out.x = *reinterpret_cast<unsigned int*>(&w0);
            out.y = *reinterpret_cast<unsigned int*>(&w1);
            y2[i] = out;
        },
        [&](long long i, float a, float& err) { yb[i] = __float22half2_rn(modulus_unit(__half22float2(yb[i]), a, s, err)); });
}

// The walk of the fp16 updates over batch item blockIdx.y: p = pscale * (fp16 inverse transform), each new
// value (the old one read through old(i) only where the support or the constraint needs it) stored by
// store(i, value); with counter given, one thread advances the device iteration index.
template <class Old, class Store>
__device__ __forceinline__ void update_walk_half(const __half2* __restrict__ p,
                                                 const unsigned char* __restrict__ support, float a, float b,
                                                 int constraint, float pscale, long long n,
                                                 int* __restrict__ counter, Old old, Store store) {
    const __half2* pb = p + (long long)blockIdx.y * n;
    const unsigned char* sb = support + (long long)blockIdx.y * n;
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long t0 = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    for (long long i = t0; i < n; i += stride) {
        float2 pv = __half22float2(pb[i]);
        pv.x *= pscale;
        pv.y *= pscale;
        store(i, (sb[i] && constraint == 0) ? pv : update_one(old(i), pv, sb[i], a, b, constraint));
    }
    if (counter && blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) *counter += 1;
}

// half: x (fp16) <- update with p = pscale * (fp16 inverse transform).
extern "C" __global__ void update_half(__half2* __restrict__ x, const __half2* __restrict__ p,
                                       const unsigned char* __restrict__ support, float a, float b,
                                       int constraint, float pscale, long long n, int* __restrict__ counter) {
    __half2* xb = x + (long long)blockIdx.y * n;
    update_walk_half(p, support, a, b, constraint, pscale, n, counter,
                     [&](long long i) { return __half22float2(xb[i]); },
                     [&](long long i, float2 v) { xb[i] = __float22half2_rn(v); });
}

// mixed: x (fp32, true scale) <- update with p = pscale * (fp16 inverse transform); also writes
// the fp16 copy xh = x * xh_scale that the next forward transform reads.
extern "C" __global__ void update_mixed(float2* __restrict__ x, __half2* __restrict__ xh,
                                        const __half2* __restrict__ p, const unsigned char* __restrict__ support,
                                        float a, float b, int constraint, float pscale, float xh_scale,
                                        long long n, int* __restrict__ counter) {
    float2* xb = x + (long long)blockIdx.y * n;
    __half2* hb = xh + (long long)blockIdx.y * n;
    update_walk_half(p, support, a, b, constraint, pscale, n, counter, [&](long long i) { return xb[i]; },
                     [&](long long i, float2 v) {
                         xb[i] = v;
                         hb[i] = __float22half2_rn(make_float2(v.x * xh_scale, v.y * xh_scale));
                     });
}

// xh = x * scale in fp16 (entering an fp16 stage, or loading a start).
extern "C" __global__ void to_half(const float2* __restrict__ x, __half2* __restrict__ xh, float scale,
                                   long long total) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride)
        xh[i] = __float22half2_rn(make_float2(x[i].x * scale, x[i].y * scale));
}

// x = xh * scale in fp32.
extern "C" __global__ void from_half(const __half2* __restrict__ xh, float2* __restrict__ x, float scale,
                                     long long total) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        float2 v = __half22float2(xh[i]);
        x[i] = make_float2(v.x * scale, v.y * scale);
    }
}

// callback variant: one block sums each start's 4096 error slots into the history, clears
// them, and counts the iteration (the inverse transform's callback reads the count to pick
// the halves of the double buffer).
extern "C" __global__ void reduce_slots(float* __restrict__ slots, int starts, double* __restrict__ err_sums,
                                        int* __restrict__ state) {
    const int slot = state[0];
    for (int b = 0; b < starts; ++b) {
        float v = 0.0f;
        for (int i = threadIdx.x; i < 4096; i += blockDim.x) {
            v += slots[b * 4096 + i];
            slots[b * 4096 + i] = 0.0f;
        }
        block_add(v, err_sums + (long long)slot * starts + b);
        __syncthreads();
    }
    if (threadIdx.x == 0) state[0] = slot + 1;
}
