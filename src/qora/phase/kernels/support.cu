// qora.phase: the envelope search's support steps on the device (qora.phase.envelope._Supports), one module
// compiled once. cupyx.scipy.ndimage builds a kernel per filter length and axis, and the search's schedule of
// shrinkwrap widths (20 of them) made a first run on an empty kernel cache spend 19 of its 28 s compiling
// (docs/phase-performance.md). Arrays are float32 or bool (one byte), C order, viewed per step as
// (outer, n, inner) around the axis the step runs along.

// scipy.ndimage's "reflect" boundary (d c b a | a b c d | d c b a)
__device__ __forceinline__ long long reflect(long long i, long long n) {
    const long long period = 2 * n;
    i %= period;
    if (i < 0) i += period;
    return i < n ? i : period - 1 - i;
}

// out = the correlation of x with the 2 r + 1 weights along the middle axis of (outer, n, inner), as
// scipy.ndimage.correlate1d (mode "reflect"); float32 products summed in float32, the weights' order
extern "C" __global__ void gaussian_axis(const float* __restrict__ x, float* __restrict__ out,
                                         const float* __restrict__ weights, int r, long long outer, long long n,
                                         long long inner) {
    const long long total = outer * n * inner;
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += stride) {
        const long long j = idx % inner, i = (idx / inner) % n, o = idx / (inner * n);
        const float* line = x + o * n * inner + j;
        float sum = 0.0f;
        for (int k = -r; k <= r; ++k) sum += weights[k + r] * line[reflect(i + k, n) * inner];
        out[idx] = sum;
    }
}

// One step of a binary dilation by the nearest-neighbour cross along the spatial axes of
// (batch, d1, d2, d3) (d3 = 1 for 2D): out = in or any of its 2 or 3 pairs of neighbours; outside the
// array is false (scipy's border_value 0), no step couples two starts
extern "C" __global__ void dilate_cross(const unsigned char* __restrict__ in, unsigned char* __restrict__ out,
                                        long long batch, long long d1, long long d2, long long d3) {
    const long long total = batch * d1 * d2 * d3;
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += stride) {
        const long long c = idx % d3, b2 = (idx / d3) % d2, b1 = (idx / (d3 * d2)) % d1;
        bool on = in[idx];
        if (!on && b1 > 0) on = in[idx - d2 * d3];
        if (!on && b1 + 1 < d1) on = in[idx + d2 * d3];
        if (!on && b2 > 0) on = in[idx - d3];
        if (!on && b2 + 1 < d2) on = in[idx + d3];
        if (!on && d3 > 1 && c > 0) on = in[idx - 1];
        if (!on && d3 > 1 && c + 1 < d3) on = in[idx + 1];
        out[idx] = on;
    }
}
