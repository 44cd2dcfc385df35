// qora.holo: a volume turned into its pose by trilinear interpolation, and the exact adjoint.
// The reference is qora/holo/rotate.py (the same formula: lab voxel p, centre-origin offset p - c,
// reads the object at s = m (p - c) + c, m = R^T; the eight voxels around s, zero outside).
// Coordinates and weights in double, as on the host, so both sides pick the same voxels; the
// values are float32. The adjoint scatters with atomics (the order of the float sums varies).

struct qr_pose {
    double m00, m01, m02, m10, m11, m12, m20, m21, m22, cz, cy, cx;
};

// The eight (voxel, weight) pairs of lab voxel t; f(index, weight) is called for those inside.
template <typename F>
__device__ __forceinline__ void qr_corners(long long t, int nz, int ny, int nx, const qr_pose& p, F f) {
    const int i = (int)(t % nx);
    const int j = (int)((t / nx) % ny);
    const int k = (int)(t / ((long long)nx * ny));
    const double pz = k - p.cz, py = j - p.cy, px = i - p.cx;
    const double sz = p.m00 * pz + p.m01 * py + p.m02 * px + p.cz;
    const double sy = p.m10 * pz + p.m11 * py + p.m12 * px + p.cy;
    const double sx = p.m20 * pz + p.m21 * py + p.m22 * px + p.cx;
    const double fz0 = floor(sz), fy0 = floor(sy), fx0 = floor(sx);
    const int z0 = (int)fz0, y0 = (int)fy0, x0 = (int)fx0;
    const double fz = sz - fz0, fy = sy - fy0, fx = sx - fx0;
    for (int dz = 0; dz < 2; ++dz) {
        const int zz = z0 + dz;
        if (zz < 0 || zz >= nz) continue;
        const double wz = dz ? fz : 1.0 - fz;
        for (int dy = 0; dy < 2; ++dy) {
            const int yy = y0 + dy;
            if (yy < 0 || yy >= ny) continue;
            const double wy = wz * (dy ? fy : 1.0 - fy);
            for (int dx = 0; dx < 2; ++dx) {
                const int xx = x0 + dx;
                if (xx < 0 || xx >= nx) continue;
                f(((long long)zz * ny + yy) * nx + xx, wy * (dx ? fx : 1.0 - fx));
            }
        }
    }
}

// The pose comes as twelve doubles (m row-major, then the centre): plain scalars for any launcher.
#define QR_POSE_PARAMS double m00, double m01, double m02, double m10, double m11, double m12, \
                       double m20, double m21, double m22, double cz, double cy, double cx
#define QR_POSE {m00, m01, m02, m10, m11, m12, m20, m21, m22, cz, cy, cx}

// Every lab voxel t of the grid-stride loop, with its corners: gather reads them into out[t], the adjoint
// (Adjoint) adds in[t] into them.
template <bool Adjoint>
__device__ __forceinline__ void qr_apply(const float* __restrict__ in, int nz, int ny, int nx, const qr_pose& pose,
                                         float* __restrict__ out) {
    const long long total = (long long)nz * ny * nx;
    for (long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x; t < total;
         t += (long long)gridDim.x * blockDim.x) {
        if (Adjoint) {
            const float v = in[t];
            if (v == 0.0f) continue;
            qr_corners(t, nz, ny, nx, pose, [&](long long c, double w) { atomicAdd(&out[c], (float)(w * v)); });
        } else {
            double acc = 0.0;
            qr_corners(t, nz, ny, nx, pose, [&](long long c, double w) { acc += w * (double)in[c]; });
            out[t] = (float)acc;
        }
    }
}

// out[p] = sum_corners w vol[corner]  (qora.holo.rotate.rotate)
extern "C" __global__ void rotate_gather(const float* __restrict__ vol, int nz, int ny, int nx, QR_POSE_PARAMS,
                                         float* __restrict__ out) {
    qr_apply<false>(vol, nz, ny, nx, QR_POSE, out);
}

// out[corner] += w lab[p]  (qora.holo.rotate.rotate_adjoint; out is accumulated into, not cleared)
extern "C" __global__ void rotate_scatter(const float* __restrict__ lab, int nz, int ny, int nx, QR_POSE_PARAMS,
                                          float* __restrict__ out) {
    qr_apply<true>(lab, nz, ny, nx, QR_POSE, out);
}
