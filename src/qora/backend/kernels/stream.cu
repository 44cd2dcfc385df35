// Streaming kernels of the backend: the device-to-device copy that measures the
// bandwidth floor, and a templated scale used to check the loader's templates.
//
// Reference for both: plain array expressions (b = a; x *= s).

#include <cuda_fp16.h>

// b[i] = a[i] over n float4 elements, grid-stride: each thread moves 16 bytes per
// load and store, the access width that reaches copy bandwidth on Hopper.
extern "C" __global__ void copy_float4(const float4* __restrict__ a, float4* __restrict__ b,
                                       long long n) {
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        b[i] = a[i];
    }
}

// x[i] *= s for any arithmetic T (instantiated through name expressions).
template <typename T>
__global__ void scale_inplace(T* __restrict__ x, T s, long long n) {
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        x[i] = x[i] * s;
    }
}
