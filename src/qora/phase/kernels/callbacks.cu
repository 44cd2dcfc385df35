// cuFFT LTO store callbacks of the callback variant (compiled by cuFFT through NVRTC and
// linked by nvJitLink into its own kernels when the plans are made).
//
// The forward transform's store callback applies the modulus projection to each value as
// cuFFT writes it and adds the value's error term to one of 4096 float slots per start
// (slot = pixel mod 4096, to spread the atomics); the inverse transform's store callback
// applies the support update and writes the new object into the other half of a double
// buffer (cuFFT does not promise to leave its output untouched before the final store, so the
// old object is read from one half and the new one written to the other).
//
// References: qora.phase.physics.modulus_project and support_update; the same arithmetic as
// modulus_step and update_step in phase.cu.

#include <cufftXt.h>

#define QORA_SLOTS 4096

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

__device__ void qora_forward_store(void* out, unsigned long long offset, cufftComplex v, void* info_,
                                   void* shared) {
    const QoraForwardInfo* info = static_cast<const QoraForwardInfo*>(info_);
    const long long n = info->n;
    const long long b = (long long)offset / n;
    const long long i = (long long)offset - b * n;
    const float a = info->amp[i];
    const float s = info->scale;
    const float mag = sqrtf(v.x * v.x + v.y * v.y);
    cufftComplex w;
    if (a >= 0.0f) {
        const float d = s * mag - a;
        atomicAdd(info->slots + b * QORA_SLOTS + (i & (QORA_SLOTS - 1)), d * d);
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
    static_cast<cufftComplex*>(out)[offset] = w;
}

__device__ void qora_inverse_store(void* out, unsigned long long offset, cufftComplex p, void* info_,
                                   void* shared) {
    const QoraInverseInfo* info = static_cast<const QoraInverseInfo*>(info_);
    const int old = (info->state[1] + info->state[0] - 1) & 1;  // the reduce kernel counted this iteration
    const float2* x_old = old ? info->buf1 : info->buf0;
    float2* x_new = old ? info->buf0 : info->buf1;
    const float a = info->coef[0];
    const float b = info->coef[1];
    const int constraint = (int)info->coef[2];
    bool inside = info->support[offset] != 0;
    float2 v = make_float2(p.x, p.y);
    if (constraint != 0) {
        if (constraint == 2 && p.x < 0.0f) inside = false;
        else v.y = 0.0f;
    }
    if (!inside) {
        const float2 x = x_old[offset];
        v = make_float2(a * x.x + b * p.x, a * x.y + b * p.y);
    }
    x_new[offset] = v;
}
