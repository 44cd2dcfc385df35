// Device helpers every engine's kernel source may include (an #include of this file): written once here,
// resolved by qora.backend.kernels.kernel_source from qora/backend/kernels when the engine has no file of that
// name. Complex values are float2; sums accumulate in the caller's type.
__device__ __forceinline__ float2 cmul(float2 a, float2 b) {
    return make_float2(a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x);
}

__device__ __forceinline__ float2 cconj(float2 a) { return make_float2(a.x, -a.y); }

// v summed over the warp into lane 0 (the other lanes hold partial sums)
template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    return v;
}

// Sum of v over the block (any 1D, 2D or 3D block up to 1024 threads), added once to *target.
__device__ __forceinline__ void block_add(float v, double* target) {
    __shared__ float warp_sums[32];
    v = warp_sum(v);
    const int tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    const int threads = blockDim.x * blockDim.y * blockDim.z;
    const int lane = tid & 31, warp = tid >> 5;
    if (lane == 0) warp_sums[warp] = v;
    __syncthreads();
    if (warp == 0) {
        const float s = warp_sum(lane < ((threads + 31) >> 5) ? warp_sums[lane] : 0.0f);
        if (lane == 0) atomicAdd(target, (double)s);
    }
    __syncthreads();  // warp_sums is reused by the next call in the same kernel
}
