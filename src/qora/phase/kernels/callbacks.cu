// cuFFT LTO callbacks of the callback variant (compiled by cuFFT through NVRTC and linked by
// nvJitLink into its own kernels when the plans are made), in two forms (CallbackEngine.mode).
//
// Store form (the default): the forward transform's store callback applies the modulus
// projection to each value as cuFFT writes it and adds the value's error term to one of 4096
// float slots per start (slot = pixel mod 4096, to spread the atomics); the inverse transform's
// store callback applies the support update and writes the new object into the other half of
// a double buffer (cuFFT does not promise to leave its output untouched before the final store,
// so the old object is read from one half and the new one written to the other).
// Load form: the same arithmetic as the transforms load their input (see below).
//
// References: qora.phase.physics.modulus_project and support_update; the same arithmetic as
// modulus_step and update_step in phase.cu.

#include <cufftXt.h>

#define QORA_SLOTS 4096

// Switches for the cut-down builds of the callback probe (qora.bench.phase.run_callback_probe);
// the shipped variant uses the defaults.
#ifndef QORA_CB_MODULUS
#define QORA_CB_MODULUS 1  // 0: the forward store writes the value unchanged (a copy-only callback)
#endif
#ifndef QORA_CB_ERROR
#define QORA_CB_ERROR 1  // 0: no error sum; 1: one atomic per value; 2: one per full warp
#endif
#ifndef QORA_CB_UPDATE
#define QORA_CB_UPDATE 1  // 0: the inverse store writes P_M x into the new half without the update
#endif

// Adds e to the start's slots. With QORA_CB_ERROR 2, a warp whose 32 lanes all store values of
// one start sums them with shuffles first (cuFFT calls the callback from code that may diverge,
// so partial warps fall back to one atomic each).
__device__ __forceinline__ void qora_add_error(float* slots, long long b, long long i, float e, bool measured) {
#if QORA_CB_ERROR == 2
    const unsigned mask = __activemask();
    if (mask == 0xffffffffu && __all_sync(mask, __shfl_sync(mask, b, 0) == b)) {
        for (int o = 16; o > 0; o >>= 1) e += __shfl_xor_sync(mask, e, o);
        if ((threadIdx.x & 31) == 0) atomicAdd(slots + b * QORA_SLOTS + ((i >> 5) & (QORA_SLOTS - 1)), e);
        return;
    }
#endif
#if QORA_CB_ERROR != 0
    if (measured) atomicAdd(slots + b * QORA_SLOTS + (i & (QORA_SLOTS - 1)), e);
#endif
}

struct QoraForwardInfo {
    const float* amp;      // n values, FFT layout, -1 where masked
    float* slots;          // B * QORA_SLOTS partial error sums
    long long n;           // pixels per start
    float scale;           // 1 / sqrt(n)
    float pad;
};

struct QoraInverseInfo {
    const unsigned char* support;  // B * n
    float2* buf0;                  // the two halves of the object's double buffer
    float2* buf1;
    const int* state;              // state[0]: iterations done in this replay, state[1]: starting half
    const float* coef;             // a, b, constraint code
    long long n;
};

// The modulus projection of one value v of the unscaled forward transform at a flat offset,
// with its error term; the result, inverse-transformed unscaled, is P_M x (the 1 / sqrt(n) of
// both transforms folded in: |w| = a / sqrt(n), and s^2 v where the pixel is masked).
__device__ __forceinline__ cufftComplex qora_modulus(cufftComplex v, unsigned long long offset,
                                                     const QoraForwardInfo* info) {
    const long long n = info->n;
    const long long b = (long long)offset / n;
    const long long i = (long long)offset - b * n;
#if QORA_CB_MODULUS == 0
    return v;
#endif
    const float a = info->amp[i];
    const float s = info->scale;
    const float mag = sqrtf(v.x * v.x + v.y * v.y);
    cufftComplex w;
    const float d = a >= 0.0f ? s * mag - a : 0.0f;
    qora_add_error(info->slots, b, i, d * d, a >= 0.0f);
    if (a >= 0.0f) {
        if (mag > 0.0f) {
            const float f = s * a / mag;
            w.x = v.x * f;
            w.y = v.y * f;
        } else {
            w.x = s * a;
            w.y = 0.0f;
        }
    } else {
        w.x = v.x * s * s;
        w.y = v.y * s * s;
    }
    return w;
}

// The support update of one value p = P_M x: p inside the support (and constraint), a x + b p
// outside (coef = a, b, constraint code); x is read only where it is needed.
__device__ __forceinline__ float2 qora_update(cufftComplex p, const float2* x, unsigned long long offset,
                                              const unsigned char* support, const float* coef) {
    float2 v = make_float2(p.x, p.y);
#if QORA_CB_UPDATE == 0
    return v;
#endif
    const int constraint = (int)coef[2];
    bool inside = support[offset] != 0;
    if (constraint != 0) {
        if (constraint == 2 && p.x < 0.0f) inside = false;
        else v.y = 0.0f;
    }
    if (!inside) {
        const float2 xo = x[offset];
        v = make_float2(coef[0] * xo.x + coef[1] * p.x, coef[0] * xo.y + coef[1] * p.y);
    }
    return v;
}

__device__ void qora_forward_store(void* out, unsigned long long offset, cufftComplex v, void* info_,
                                   void* shared) {
    static_cast<cufftComplex*>(out)[offset] = qora_modulus(v, offset, static_cast<const QoraForwardInfo*>(info_));
}

__device__ void qora_inverse_store(void* out, unsigned long long offset, cufftComplex p, void* info_,
                                   void* shared) {
    const QoraInverseInfo* info = static_cast<const QoraInverseInfo*>(info_);
    const int old = (info->state[1] + info->state[0] - 1) & 1;  // the reduce kernel counted this iteration
    const float2* x_old = old ? info->buf1 : info->buf0;
    float2* x_new = old ? info->buf0 : info->buf1;
    x_new[offset] = qora_update(p, x_old, offset, info->support, info->coef);
}

// The load-callback form (docs/phase-performance.md compares the two): both callbacks
// run in the first pass of a transform, as it reads its input, instead of in the last pass.
// The inverse transform loads the forward spectrum through the modulus projection; the forward
// transform of the next iteration loads p = P_M x through the support update and also writes
// the new x (in place: cuFFT loads each input value once, and x is not one of its buffers).

struct QoraUpdateInfo {
    const unsigned char* support;  // B * n
    float2* x;                     // the object, updated in place
    const float* coef;             // a, b, constraint code
    long long n;
};

__device__ cufftComplex qora_modulus_load(void* in, unsigned long long offset, void* info_, void* shared) {
    return qora_modulus(static_cast<const cufftComplex*>(in)[offset], offset,
                        static_cast<const QoraForwardInfo*>(info_));
}

__device__ cufftComplex qora_update_load(void* in, unsigned long long offset, void* info_, void* shared) {
    const QoraUpdateInfo* info = static_cast<const QoraUpdateInfo*>(info_);
    const float2 v = qora_update(static_cast<const cufftComplex*>(in)[offset], info->x, offset, info->support,
                                 info->coef);
    info->x[offset] = v;
    cufftComplex w;
    w.x = v.x;
    w.y = v.y;
    return w;
}
