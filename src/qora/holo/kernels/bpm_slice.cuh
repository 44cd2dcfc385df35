// The element-wise algebra of one BPM slice step, shared by the fused line passes (bpm_fused.cu) and
// the kernels that keep the field on chip for the whole slice loop (bpm_resident.cu). Reference:
// qora.holo.bpm (_forward_chunk and _reverse).
#ifndef QORA_BPM_SLICE_CUH
#define QORA_BPM_SLICE_CUH

#include <cuda_runtime.h>

__device__ __forceinline__ float2 mul(float2 a, float2 b) { return make_float2(a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x); }
// conj(a) b
__device__ __forceinline__ float2 mul_conj(float2 a, float2 b) {
    return make_float2(a.x * b.x + a.y * b.y, a.x * b.y - a.y * b.x);
}

template <class P>
__device__ __forceinline__ float2 at(const typename P::cx* r, int e) { return make_float2(r[e].x, r[e].y); }

template <class P>
__device__ __forceinline__ void put(typename P::cx* r, int e, float2 v) { r[e] = typename P::cx{v.x, v.y}; }

// Forward spectral step: S <- tq A + tr S (A: the spectrum of the screened slice); the line carries the new S.
__device__ __forceinline__ float2 propagate(float2 a, float2 tq, float2 tr, float2 s) {
    const float2 u = mul(tq, a), v = mul(tr, s);
    return make_float2(u.x + v.x, u.y + v.y);
}

// Its adjoint: with G' = A + G (G = 0 on the last slice), G <- conj(tr) G' and the line carries
// conj(tq) G' scale.
__device__ __forceinline__ float2 propagate_adjoint(float2 a, float2 tq, float2 tr, float2* g, bool first,
                                                    float scale) {
    float2 sum = a;
    if (!first) sum = make_float2(sum.x + g->x, sum.y + g->y);
    *g = mul_conj(tr, sum);
    const float2 u = mul_conj(tq, sum);
    return make_float2(u.x * scale, u.y * scale);
}

// The gradient term of one pixel, kd Im(conj(p w_k) b), and b <- conj(p) b (p: the screen, w_k: the
// stored envelope, b: the adjoint field after the inverse x transform).
__device__ __forceinline__ float screen_gradient(float2 p, float2 wk, float2* b) {
    const float2 pw = mul(p, wk), bv = *b;
    *b = mul_conj(p, bv);
    return pw.x * bv.y - pw.y * bv.x;
}

#endif
