// qora.ssb.live: DECTRIS frames decoded on the device, from their bitshuffle-LZ4 blobs to the
// gathered bright-field pixels (float) and the per-pixel sums of the mean pattern.
//
// A frame's blob (the bitshuffle HDF5 filter's framing) is a 12-byte header, then per block its
// big-endian u32 compressed size and an LZ4 block, then the last count % 8 elements raw. The host
// finds each block's offset and size (qora.ssb.live.bslz4_batch.block_table: a scan of the u32
// sizes, which also checks the headers); here one warp decodes one LZ4 block of one frame into
// shared memory, then its lanes bit-unshuffle it eight elements at a time, add them into the
// block's sums and write the gathered ones as floats: the decoded frame never goes to global memory.
//
// A CTA (WARPS warps) takes LZ4 block k (blockIdx.x) of up to `frames_per_cta` frames (blockIdx.y):
// its warps share one array of sums for the block's elements (shared atomics: the warps decode
// different frames of the same elements), flushed once into the u64 sums at the end.
//
// LZ4 block (lz4's "LZ4 Block Format Description"): sequences of a token (literal length in the high
// nibble, match length - 4 in the low one, each 15 extended by bytes while they are 255), the
// literals, a little-endian u16 offset back into the output, the match (it may overlap the bytes it
// writes); the last sequence has literals only. All lanes parse the same tokens (the loads are
// broadcasts, the branches uniform); the lanes split each copy.
//
// The host twin of this file (same warps, lanes, layouts) is qora.ssb.live.bslz4_batch.gather_host.

#define WARPS 4

template <typename T> struct Sum { typedef unsigned int type; };            // uint8, uint16: a CTA's
template <> struct Sum<unsigned int> { typedef unsigned long long type; };  // frames cannot overflow u32

// Decode the LZ4 block src[0:csize] into dst[0:size] (shared); true when it decodes to exactly
// `size` bytes inside its bounds. Called by all 32 lanes of a warp with the same arguments.
__device__ __forceinline__ bool lz4_warp(const unsigned char* __restrict__ src, int csize,
                                         unsigned char* __restrict__ dst, int size, int lane) {
    __syncwarp();  // every lane is done with the buffer's last frame (a failed one included)
    int i = 0, o = 0;
    while (i < csize) {
        const int token = __ldg(src + i);
        ++i;
        int lit = token >> 4;
        if (lit == 15) {
            int b;
            do {
                if (i >= csize) return false;
                b = __ldg(src + i);
                ++i;
                lit += b;
            } while (b == 255);
        }
        if (o + lit > size || i + lit > csize) return false;
        for (int t = lane; t < lit; t += 32) dst[o + t] = __ldg(src + i + t);
        i += lit;
        o += lit;
        if (i >= csize) break;  // the last sequence: literals only
        if (i + 2 > csize) return false;
        const int offset = __ldg(src + i) | (__ldg(src + i + 1) << 8);
        i += 2;
        int match = token & 15;
        if (match == 15) {
            int b;
            do {
                if (i >= csize) return false;
                b = __ldg(src + i);
                ++i;
                match += b;
            } while (b == 255);
        }
        match += 4;
        if (offset == 0 || offset > o || o + match > size) return false;
        __syncwarp();  // the bytes before o (this sequence's literals, the last match) written by all lanes
        // an overlapping match repeats the `offset` bytes before o: each byte is read from before o,
        // none from this copy, so the lanes copy independently
        if (offset >= match) {
            for (int t = lane; t < match; t += 32) dst[o + t] = dst[o - offset + t];
        } else {
            for (int t = lane; t < match; t += 32) dst[o + t] = dst[o - offset + t % offset];
        }
        o += match;
        __syncwarp();
    }
    __syncwarp();
    return o == size;
}

// The 8 x 8 bit transpose of a 64-bit word (byte j: row j) by three masked swaps (Hacker's Delight 7-3)
__device__ __forceinline__ unsigned long long transpose8(unsigned long long x) {
    unsigned long long t;
    t = (x ^ (x >> 7)) & 0x00AA00AA00AA00AAull;
    x = x ^ t ^ (t << 7);
    t = (x ^ (x >> 14)) & 0x0000CCCC0000CCCCull;
    x = x ^ t ^ (t << 14);
    t = (x ^ (x >> 28)) & 0x00000000F0F0F0F0ull;
    x = x ^ t ^ (t << 28);
    return x;
}

// blob: the batch's blobs end to end; starts (n, nblocks): the offset in blob of each LZ4 block's
// data (after its size), sizes (n, nblocks) their compressed bytes; tails (n,): the offset of each
// frame's raw last elements; slot (count,): the column of out each pixel is gathered to, or -1;
// out (n, gathered); sums (count,) u64, added into; status (n,): set to 2 where a block is malformed.
// block_bytes: the header's block size; whole: count rounded down to a multiple of 8 (elements).
template <typename T, typename Out>
__global__ void __launch_bounds__(WARPS * 32)
bslz4_gather(const unsigned char* __restrict__ blob, const long long* __restrict__ starts,
             const int* __restrict__ sizes, const long long* __restrict__ tails, const int* __restrict__ slot,
             int n, int nblocks, int block_bytes, int whole, int count, int gathered, int frames_per_cta,
             Out* __restrict__ out, unsigned long long* __restrict__ sums, int* __restrict__ status) {
    typedef typename Sum<T>::type Acc;
    extern __shared__ __align__(16) unsigned char shared[];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int k = blockIdx.x;
    const int f0 = blockIdx.y * frames_per_cta, f1 = min(n, f0 + frames_per_cta);
    const int per_block = block_bytes / (int)sizeof(T);  // elements of a full block
    unsigned char* buf = shared + warp * block_bytes;
    Acc* acc = reinterpret_cast<Acc*>(shared + WARPS * block_bytes);  // (e, q): element 8 q + e at e nb + q
    if (k < nblocks) {
        const int first = k * per_block;  // the block's first element in the frame
        const int m = min(per_block, whole - first), nb = m / 8, size = m * (int)sizeof(T);
        for (int i = threadIdx.x; i < m; i += blockDim.x) acc[i] = 0;
        __syncthreads();
        for (int f = f0 + warp; f < f1; f += WARPS) {
            const long long at = (long long)f * nblocks + k;
            if (!lz4_warp(blob + starts[at], sizes[at], buf, size, lane)) {
                if (lane == 0) status[f] = 2;
                continue;
            }
            Out* row = out + (long long)f * gathered;
            for (int q = lane; q < nb; q += 32) {  // eight elements a lane: byte b of each from rows 8 b + j
                T v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
#pragma unroll
                for (int b = 0; b < (int)sizeof(T); ++b) {
                    unsigned long long x = 0;
#pragma unroll
                    for (int j = 0; j < 8; ++j) x |= (unsigned long long)buf[(8 * b + j) * nb + q] << (8 * j);
                    x = transpose8(x);
#pragma unroll
                    for (int e = 0; e < 8; ++e) v[e] |= (T)((T)((x >> (8 * e)) & 0xFF) << (8 * b));
                }
#pragma unroll
                for (int e = 0; e < 8; ++e) {
                    atomicAdd(&acc[e * nb + q], (Acc)v[e]);
                    const int s = __ldg(slot + first + 8 * q + e);
                    if (s >= 0) row[s] = (Out)v[e];
                }
            }
            __syncwarp();  // the buffer is read before the next frame overwrites it
        }
        __syncthreads();
        for (int i = threadIdx.x; i < m; i += blockDim.x) {
            const Acc a = acc[i];
            if (a) atomicAdd(sums + first + 8 * (i % nb) + i / nb, (unsigned long long)a);
        }
    }
    if (k == max(nblocks, 1) - 1) {  // the last elements, stored raw after the blocks (little-endian)
        const int rest = count - whole;
        for (int f = f0 + warp; f < f1; f += WARPS) {
            if (lane < rest) {
                const unsigned char* p = blob + tails[f] + lane * (int)sizeof(T);
                T v = 0;
                for (int b = 0; b < (int)sizeof(T); ++b) v |= (T)((T)p[b] << (8 * b));
                if (v) atomicAdd(sums + whole + lane, (unsigned long long)v);
                const int s = slot[whole + lane];
                if (s >= 0) out[(long long)f * gathered + s] = (Out)v;
            }
        }
    }
}

template __global__ void bslz4_gather<unsigned char, float>(const unsigned char*, const long long*, const int*,
    const long long*, const int*, int, int, int, int, int, int, int, float*, unsigned long long*, int*);
template __global__ void bslz4_gather<unsigned short, float>(const unsigned char*, const long long*, const int*,
    const long long*, const int*, int, int, int, int, int, int, int, float*, unsigned long long*, int*);
template __global__ void bslz4_gather<unsigned int, float>(const unsigned char*, const long long*, const int*,
    const long long*, const int*, int, int, int, int, int, int, int, float*, unsigned long long*, int*);
template __global__ void bslz4_gather<unsigned char, double>(const unsigned char*, const long long*, const int*,
    const long long*, const int*, int, int, int, int, int, int, int, double*, unsigned long long*, int*);
template __global__ void bslz4_gather<unsigned short, double>(const unsigned char*, const long long*, const int*,
    const long long*, const int*, int, int, int, int, int, int, int, double*, unsigned long long*, int*);
template __global__ void bslz4_gather<unsigned int, double>(const unsigned char*, const long long*, const int*,
    const long long*, const int*, int, int, int, int, int, int, int, double*, unsigned long long*, int*);
