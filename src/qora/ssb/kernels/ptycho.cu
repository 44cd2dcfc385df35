// qora.ssb.ptycho: the multislice model's per-slice products on a batch of probe windows
// (qora.ssb.ptycho.model's forward and backward passes).
//
// ptycho_transmit: out[b][k][y][x] = wave[b][k][y][x] O[cy_b + y][cx_b + x], the slice's transmission of every
// mode's wave at every window of the batch. One thread a (b, y, x); the K modes in its loop, the object read once.
//
// ptycho_slice_adjoint: the adjoint of that product in the backward pass, with the step's two sums, per (b, y, x):
//     g_slice[cy + y][cx + x] += sum_k conj(w[b][k][y][x]) g[b][k][y][x]     (atomic: the windows overlap)
//     lit[cy + y][cx + x]     += sum_k |w[b][k][y][x]|^2                    (atomic; none when lit is null)
//     g_out[b][k][y][x]        = g[b][k][y][x] conj(O[cy + y][cx + x])
//
// Bytes: transmit reads w and writes out (8 B a complex64 value each way) and reads O once a (b, y, x); the adjoint
// reads w and g, writes g_out and adds 12 B of atomics a (b, y, x). In the array code each was a gather of the
// windows (index arithmetic and a fancy index), the products, a sum over the modes and two or three scatter-adds
// (xp.add.at on the real and imaginary parts): about 40 launches a slice, each a few microseconds of work and tens
// of microseconds of Python, so the pass was launch-bound (docs/ssb-methods.md, "Iterative ptychography").

namespace {

template <typename C> struct Real;
template <> struct Real<float2> { using type = float; };
template <> struct Real<double2> { using type = double; };

template <typename C> __device__ __forceinline__ C times(C a, C b) {
    C r;
    r.x = a.x * b.x - a.y * b.y;
    r.y = a.x * b.y + a.y * b.x;
    return r;
}

template <typename C> __device__ __forceinline__ C times_conj(C a, C b) {  // a conj(b)
    C r;
    r.x = a.x * b.x + a.y * b.y;
    r.y = a.y * b.x - a.x * b.y;
    return r;
}

// the object pixel under window b's pixel (y, x): the windows' corners are whole pixels of the object's grid
__device__ __forceinline__ long long under(const long long* corners, int b, int y, int x, int width) {
    return (corners[2 * b] + y) * (long long)width + corners[2 * b + 1] + x;
}

}  // namespace

template <typename C>
__global__ void ptycho_transmit(const C* __restrict__ wave, const C* __restrict__ slice,
                                const long long* __restrict__ corners, C* __restrict__ out, int batch, int modes,
                                int n, int width) {
    const long long plane = (long long)n * n;
    const long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (t >= batch * plane) return;
    const int b = (int)(t / plane);
    const long long p = t - b * plane;
    const C o = slice[under(corners, b, (int)(p / n), (int)(p % n), width)];
    for (int k = 0; k < modes; ++k) {
        const long long i = ((long long)b * modes + k) * plane + p;
        out[i] = times(wave[i], o);
    }
}

template <typename C>
__global__ void ptycho_slice_adjoint(const C* __restrict__ wave, const C* __restrict__ g,
                                     const C* __restrict__ slice, const long long* __restrict__ corners,
                                     C* __restrict__ g_out, C* __restrict__ g_slice,
                                     typename Real<C>::type* __restrict__ lit, int batch, int modes, int n,
                                     int width) {
    using R = typename Real<C>::type;
    const long long plane = (long long)n * n;
    const long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (t >= batch * plane) return;
    const int b = (int)(t / plane);
    const long long p = t - b * plane;
    const long long at = under(corners, b, (int)(p / n), (int)(p % n), width);
    const C o = slice[at];
    C sum;
    sum.x = 0;
    sum.y = 0;
    R power = 0;
    for (int k = 0; k < modes; ++k) {
        const long long i = ((long long)b * modes + k) * plane + p;
        const C w = wave[i], gi = g[i];
        const C term = times_conj(gi, w);  // conj(w) g
        sum.x += term.x;
        sum.y += term.y;
        power += w.x * w.x + w.y * w.y;
        g_out[i] = times_conj(gi, o);
    }
    R* parts = reinterpret_cast<R*>(g_slice + at);
    atomicAdd(parts, sum.x);
    atomicAdd(parts + 1, sum.y);
    if (lit != nullptr) atomicAdd(lit + at, power);
}
