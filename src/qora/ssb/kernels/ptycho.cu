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

// ptycho_far_weight: the misfit's gradient at the detector, per (b, p) of the batch's far fields (FFT order):
//     I = max(sum_k |far[b][k][p]|^2, floor),  a = amplitudes[b][p] (sqrt of the counts D),
//     amplitude misfit: loss += (sqrt(I) - a)^2,              w = 1 - a / sqrt(I)
//     Poisson misfit:   loss += I - D - D log(I / max(D, floor)), w = 1 - D / I
//     out[b][k][p] = w far[b][k][p]
// loss is one double, summed by the blocks (a warp's shuffles, then one atomic a warp). The array code made I in
// four passes (the squares, their sum, the sum over modes), the weight in four more, the product in one; and the
// float64 weight of float64 counts made the product and the transform after it complex128.
//
// ptycho_probe_sums: the probe's gradient in Fourier space, out[k][p] = sum_b conj(ramp[b][p]) g[b][k][p], and, where
// d_positions is given, the positions' derivatives from the same reads (the model's sub-pixel shift: d psi_0 / d f =
// F^H(-2 pi i f F(psi_0)), f the frequency in cycles a pixel):
//     d_positions[b] += 2 Re sum_{k, p} conj(g[b][k][p]) (-2 pi i (fy, fx)_p) ramp[b][p] P[k][p]
// One thread a (k, p), the batch in its loop; the positions' sums by a warp's shuffles, the block's shared sums,
// then one atomic a block and window. The array code took a product, a conjugate and a sum over the batch for the
// probe, and for the positions two products, two more and two sums over (K, N, N) per window: CuPy ran those with
// one block a window, 58 us each at the issue's size, where the kernel's bytes take a few us.

namespace {

template <typename R> __device__ __forceinline__ double misfit(R intensity, R a, R floor, bool poisson, R* weight) {
    if (poisson) {
        const R d = a * a;
        *weight = R(1) - d / intensity;
        const R safe = d > floor ? d : floor;
        return (double)intensity - (double)d - (double)d * log((double)intensity / (double)safe);
    }
    const R root = sqrt(intensity);
    *weight = R(1) - a / root;
    return (double)(root - a) * (double)(root - a);
}

}  // namespace

template <typename C, typename A>
__global__ void ptycho_far_weight(const C* __restrict__ far, const A* __restrict__ amplitudes, C* __restrict__ out,
                                  double* __restrict__ loss, int batch, int modes, int n, double floor,
                                  int poisson) {
    using R = typename Real<C>::type;
    const long long plane = (long long)n * n;
    const long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    double term = 0.0;
    if (t < batch * plane) {
        const int b = (int)(t / plane);
        const long long p = t - b * plane;
        R intensity = 0;
        for (int k = 0; k < modes; ++k) {
            const C f = far[((long long)b * modes + k) * plane + p];
            intensity += f.x * f.x + f.y * f.y;
        }
        intensity = intensity > R(floor) ? intensity : R(floor);
        R w;
        term = misfit<R>(intensity, (R)amplitudes[t], R(floor), poisson != 0, &w);
        for (int k = 0; k < modes; ++k) {
            const long long i = ((long long)b * modes + k) * plane + p;
            C f = far[i];
            f.x *= w;
            f.y *= w;
            out[i] = f;
        }
    }
    for (int offset = 16; offset > 0; offset >>= 1) term += __shfl_down_sync(0xffffffffu, term, offset);
    if ((threadIdx.x & 31) == 0 && term != 0.0) atomicAdd(loss, term);
}

template <typename C>
__global__ void ptycho_probe_sums(const C* __restrict__ g, const C* __restrict__ ramps,
                                  const C* __restrict__ probe_k, C* __restrict__ out, double* __restrict__ d_positions,
                                  int batch, int modes, int n) {
    using R = typename Real<C>::type;
    extern __shared__ double block_sums[];  // (batch, 2): the block's dL/dy, dL/dx of each window
    const long long plane = (long long)n * n;
    const long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    const bool positions = d_positions != nullptr;
    if (positions) {
        for (int i = threadIdx.x; i < 2 * batch; i += blockDim.x) block_sums[i] = 0.0;
        __syncthreads();
    }
    const bool inside = t < modes * plane;
    const int k = inside ? (int)(t / plane) : 0;
    const long long p = inside ? t - k * plane : 0;
    // the pixel's frequencies in cycles a pixel (FFT order): ky pixel and kx pixel of the model
    const int row = (int)(p / n), col = (int)(p % n);
    const R fy = R(row < (n + 1) / 2 ? row : row - n) / R(n), fx = R(col < (n + 1) / 2 ? col : col - n) / R(n);
    const C pk = (positions && inside) ? probe_k[t] : C{};
    C sum{};
    for (int b = 0; b < batch; ++b) {
        C gi{}, ramp{};
        if (inside) {
            gi = g[((long long)b * modes + k) * plane + p];
            ramp = ramps[b * plane + p];
            const C term = times_conj(gi, ramp);
            sum.x += term.x;
            sum.y += term.y;
        }
        if (!positions) continue;
        // dL/df = 2 Re sum conj(g) (-2 pi i f) ramp P: 4 pi f Im(conj(g) ramp P), summed over the block's (k, p)
        const C shifted = times(ramp, pk);
        R im = gi.x * shifted.y - gi.y * shifted.x;
        R dy = im * fy, dx = im * fx;
        for (int offset = 16; offset > 0; offset >>= 1) {
            dy += __shfl_down_sync(0xffffffffu, dy, offset);
            dx += __shfl_down_sync(0xffffffffu, dx, offset);
        }
        if ((threadIdx.x & 31) == 0) {
            atomicAdd(block_sums + 2 * b, (double)dy);
            atomicAdd(block_sums + 2 * b + 1, (double)dx);
        }
    }
    if (inside) out[t] = sum;
    if (!positions) return;
    __syncthreads();
    const double scale = 4.0 * 3.14159265358979323846;
    for (int i = threadIdx.x; i < 2 * batch; i += blockDim.x) atomicAdd(d_positions + i, scale * block_sums[i]);
}

// ptycho_object_step: the solver's step of every slice's transmission, in place, per pixel of slice s:
//     O -= rate g / ((1 - share) lit + share peak[s] + 1e-30),   then O /= max(|O|, 1)   (no slice amplifies)
// (qora.ssb.ptycho.solver's rPIE-like step). Bytes: O read and written, g and lit read: 28 B a complex64 pixel,
// where the array code's eleven passes (the products, the sums, the divisions, |O|, the clamp) moved ~150 B.
template <typename C>
__global__ void ptycho_object_step(C* __restrict__ objects, const C* __restrict__ g,
                                   const typename Real<C>::type* __restrict__ lit,
                                   const typename Real<C>::type* __restrict__ peak, double rate, double share,
                                   long long plane, int slices) {
    using R = typename Real<C>::type;
    const long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (t >= slices * plane) return;
    const int s = (int)(t / plane);
    const R step = R(rate) / ((R(1) - R(share)) * lit[t] + R(share) * peak[s] + R(1e-30));
    const C gi = g[t];
    C o = objects[t];
    o.x -= step * gi.x;
    o.y -= step * gi.y;
    const R modulus = sqrt(o.x * o.x + o.y * o.y);
    if (modulus > R(1)) {
        o.x /= modulus;
        o.y /= modulus;
    }
    objects[t] = o;
}
