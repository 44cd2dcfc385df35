// cuFFTDx line transforms for the kernels that carry element-wise work inside the transform:
// qora.phase's kernels/fused_fft.cu (the transform type and the block sum) and qora.holo's
// kernels/bpm_fused.cu (all of it; docs/holo-performance.md, "The fused slice step").
//
// A block transforms F lines of N points, EPT elements per thread: thread (tx, ty) holds elements
// j = tx + e * stride (e = 0 .. EPT - 1, stride = N / EPT) of line ty, before and after the transform.
// Contiguous lines are read straight into registers (a warp reads consecutive elements); strided
// lines go through a shared-memory tile of N x (F + 1) values (one padding column against bank
// conflicts), so that the global loads and stores still move F adjacent values per row.
//
// Header only, for nvcc with the cuFFTDx headers (offline builds: the cubin ships as package data).
#ifndef QORA_LINE_FFT_CUH
#define QORA_LINE_FFT_CUH

#include <cufftdx.hpp>

namespace qora {

template <int N, int EPT, int F, cufftdx::fft_direction D>
using LineFFT = decltype(cufftdx::Size<N>() + cufftdx::Precision<float>() + cufftdx::Type<cufftdx::fft_type::c2c>() +
                         cufftdx::Direction<D>() + cufftdx::ElementsPerThread<EPT>() + cufftdx::FFTsPerBlock<F>() +
                         cufftdx::SM<900>() + cufftdx::Block());

// The forward and inverse transforms of one line shape and the shared memory they need.
template <int N, int EPT, int F>
struct LinePair {
    using Forward = LineFFT<N, EPT, F, cufftdx::fft_direction::forward>;
    using Inverse = LineFFT<N, EPT, F, cufftdx::fft_direction::inverse>;
    using cx = typename Forward::value_type;
    static constexpr int stride = N / EPT;
    static constexpr int fft_bytes = Forward::shared_memory_size > Inverse::shared_memory_size
                                         ? Forward::shared_memory_size : Inverse::shared_memory_size;
    static constexpr int tile_bytes = N * (F + 1) * 8;
    static_assert(Forward::block_dim.x == stride && Forward::block_dim.y == F, "line layout");
    static_assert(Forward::storage_size == EPT && Inverse::storage_size == EPT, "c2c registers");
};

__device__ __forceinline__ int block_thread() { return threadIdx.y * blockDim.x + threadIdx.x; }

// F strided lines into the tile: element j of line f at base[j * inner + f]. The caller syncs.
template <int N, int F>
__device__ __forceinline__ void tile_load(const float2* __restrict__ base, long long inner, float2* tile) {
    const int threads = blockDim.x * blockDim.y;
    // one element per step, not unrolled: more loads in flight raised the registers past two blocks
    // per SM and measured slower in qora.phase's strided passes (docs/phase-performance.md)
    for (int k = block_thread(); k < N * F; k += threads) {
        const int j = k / F, f = k % F;
        tile[j * (F + 1) + f] = base[j * inner + f];
    }
}

template <int N, int F>
__device__ __forceinline__ void tile_store(float2* __restrict__ base, long long inner, const float2* tile) {
    const int threads = blockDim.x * blockDim.y;
    for (int k = block_thread(); k < N * F; k += threads) {
        const int j = k / F, f = k % F;
        base[j * inner + f] = tile[j * (F + 1) + f];
    }
}

// Asynchronous copies global -> shared (cp.async, sm_80 and later): the copy holds no register while
// in flight, so a block can put all of its tile's loads in flight at once; the register-staged loop
// above keeps one load per thread in flight because more raised the registers past two blocks per SM.
template <int BYTES>
__device__ __forceinline__ void copy_async(void* shared_dst, const void* global_src) {
    static_assert(BYTES == 4 || BYTES == 8 || BYTES == 16, "cp.async moves 4, 8 or 16 bytes");
    const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(shared_dst));
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(dst), "l"(global_src), "n"(BYTES) : "memory");
}

// close the group of copies this thread issued since the last commit
__device__ __forceinline__ void copy_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

// wait until at most PENDING of this thread's committed groups are still in flight (a barrier must
// follow before other threads read what this one copied)
template <int PENDING>
__device__ __forceinline__ void copy_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(PENDING) : "memory"); }

// tile_load with the copies issued asynchronously (not waited for: the caller commits and waits)
template <int N, int F>
__device__ __forceinline__ void tile_load_async(const float2* __restrict__ base, long long inner, float2* tile) {
    const int threads = blockDim.x * blockDim.y;
    for (int k = block_thread(); k < N * F; k += threads) {
        const int j = k / F, f = k % F;
        copy_async<8>(tile + j * (F + 1) + f, base + j * inner + f);
    }
}

// this thread's elements of line threadIdx.y between the tile and registers
template <class P>
__device__ __forceinline__ void tile_to_registers(const float2* tile, typename P::cx* r) {
    constexpr int F = P::Forward::ffts_per_block;
    for (int e = 0; e < P::Forward::elements_per_thread; ++e) {
        const float2 v = tile[(threadIdx.x + e * P::stride) * (F + 1) + threadIdx.y];
        r[e] = typename P::cx{v.x, v.y};
    }
}

template <class P>
__device__ __forceinline__ void registers_to_tile(const typename P::cx* r, float2* tile) {
    constexpr int F = P::Forward::ffts_per_block;
    for (int e = 0; e < P::Forward::elements_per_thread; ++e)
        tile[(threadIdx.x + e * P::stride) * (F + 1) + threadIdx.y] = make_float2(r[e].x, r[e].y);
}

// a contiguous line (its first element at `line`) into and out of registers
template <class P>
__device__ __forceinline__ void line_to_registers(const float2* __restrict__ line, typename P::cx* r) {
    for (int e = 0; e < P::Forward::elements_per_thread; ++e) {
        const float2 v = line[threadIdx.x + e * P::stride];
        r[e] = typename P::cx{v.x, v.y};
    }
}

template <class P>
__device__ __forceinline__ void registers_to_line(const typename P::cx* r, float2* __restrict__ line) {
    for (int e = 0; e < P::Forward::elements_per_thread; ++e) line[threadIdx.x + e * P::stride] = make_float2(r[e].x, r[e].y);
}

// sum over the block (any shape, at most 1024 threads), one double atomic per block
__device__ __forceinline__ void block_add_2d(float v, double* target) {
    __shared__ float warp_sums[32];
    const int tid = block_thread();
    const int nthreads = blockDim.x * blockDim.y;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    if ((tid & 31) == 0) warp_sums[tid >> 5] = v;
    __syncthreads();
    if (tid < 32) {
        float s = tid < (nthreads + 31) / 32 ? warp_sums[tid] : 0.0f;
        for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);
        if (tid == 0) atomicAdd(target, (double)s);
    }
}

}  // namespace qora

#endif
