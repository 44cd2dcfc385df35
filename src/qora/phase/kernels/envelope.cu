// qora.phase.envelope on the GPU: the positivity passes of the real-object search on real starts and
// their half spectra (R2C / C2R transforms). The complex passes run phase.cu's modulus_step and
// update_step unchanged.
//
// Layout: B starts, start b at offset b * n (n: values per start of the array in question); the
// launch grid's y index is the start. amp: the half spectrum's measured amplitudes (FFT layout),
// -1 where unmeasured, shared by all starts. References: qora.phase.envelope_iterate.ArrayIterations
// (project_real, update), compared in tests/phase/test_phase_envelope_gpu.py.

#include "phase_ops.cuh"

// y <- the modulus step on the half spectrum (in place): measured bins take the measured modulus,
// unmeasured ones the model's value times *damp (read from device memory, so one captured graph
// serves every damping); err_sums[slot * B + b] += sum over measured bins of (|F x| - a)^2.
extern "C" __global__ void modulus_damped(float2* __restrict__ y, const float* __restrict__ amp, float scale,
                                          long long n, const float* __restrict__ damp,
                                          double* __restrict__ err_sums, const int* __restrict__ counter) {
    const int b = blockIdx.y;
    float2* yb = y + (long long)b * n;
    const float free_scale = scale * scale * (*damp);
    float err = 0.0f;
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float a = amp[i];
        const float2 v = yb[i];
        yb[i] = a >= 0.0f ? modulus_one(v, a, scale, err) : make_float2(v.x * free_scale, v.y * free_scale);
    }
    const int slot = counter ? *counter : 0;
    block_add(err, err_sums + (long long)slot * gridDim.y + b);
}

// x <- p where the support holds and p >= 0 (Fienup's positivity: a negative value counts as outside),
// else a x + b p (HIO: a = 1, b = -beta; ER: 0, 0). One thread advances the iteration counter.
extern "C" __global__ void update_positive(float* __restrict__ x, const float* __restrict__ p,
                                           const unsigned char* __restrict__ support, float a, float b,
                                           long long n, int* __restrict__ counter) {
    const int bi = blockIdx.y;
    float* xb = x + (long long)bi * n;
    const float* pb = p + (long long)bi * n;
    const unsigned char* sb = support + (long long)bi * n;
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float pv = pb[i];
        xb[i] = (sb[i] && pv >= 0.0f) ? pv : a * xb[i] + b * pv;
    }
    if (counter && blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) *counter += 1;
}
