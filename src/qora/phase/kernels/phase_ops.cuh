// qora.phase: the element-wise steps of one iteration, shared by the stand-alone kernels
// (phase.cu) and the kernels that run them inside the transform (fused_fft.cu).
// References: qora.phase.physics.modulus_project and support_update.
#ifndef QORA_PHASE_OPS_CUH
#define QORA_PHASE_OPS_CUH

// The modulus projection of one spectral value v of the unscaled forward transform: returns
// scale * P_M(scale * v), ready for an unscaled inverse transform, and adds the squared
// amplitude error to err. a < 0 marks a masked (unmeasured) pixel, left free.
__device__ __forceinline__ float2 modulus_one(float2 v, float a, float scale, float& err) {
    float mag = sqrtf(v.x * v.x + v.y * v.y);
    if (a >= 0.0f) {
        float d = scale * mag - a;
        err += d * d;
        if (mag > 0.0f) {
            float f = scale * a / mag;
            return make_float2(v.x * f, v.y * f);
        }
        return make_float2(scale * a, 0.0f);
    }
    float s2 = scale * scale;
    return make_float2(v.x * s2, v.y * s2);
}

__device__ __forceinline__ void block_add(float v, double* target) {
    // warp shuffle, then one value per warp through shared memory, one atomic per block
    __shared__ float warp_sums[32];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) warp_sums[warp] = v;
    __syncthreads();
    if (warp == 0) {
        int nwarps = (blockDim.x + 31) >> 5;
        float s = lane < nwarps ? warp_sums[lane] : 0.0f;
        for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);
        if (lane == 0) atomicAdd(target, (double)s);
    }
}

// The support update of one value: p inside the support (and the constraint), a x + b p outside.
// constraint 0: none, 1: real (the imaginary part dropped), 2: positive (real, and a negative
// real part counts as outside).
__device__ __forceinline__ float2 update_one(float2 x, float2 p, unsigned char s, float a, float b,
                                             int constraint) {
    bool inside = s != 0;
    float2 v = p;
    if (constraint != 0) {
        if (constraint == 2 && p.x < 0.0f) inside = false;
        else v.y = 0.0f;
    }
    if (inside) return v;
    return make_float2(a * x.x + b * p.x, a * x.y + b * p.y);
}

#endif
