import numpy as np, numba, time, sys
from qora.ssb.bright_runs import pixel_runs, _gather_frame

def make(kind):
    if kind == "u64":
        @numba.njit(inline="always")
        def fr(src, base, width, runs, dst, obase):
            seen = numba.uint64(0)
            for r in range(runs.shape[0]):
                a = base + numba.uint64(runs[r, 0] * width + runs[r, 1]); b = obase + numba.uint64(runs[r, 3])
                for j in range(numba.uint64(runs[r, 2])):
                    v = src[a + j]; seen |= numba.uint64(v); dst[b + j] = numba.uint8(v & 255)
            return seen
    elif kind == "u32":
        @numba.njit(inline="always")
        def fr(src, base, width, runs, dst, obase):
            seen = numba.uint32(0)
            for r in range(runs.shape[0]):
                a = base + numba.uint64(runs[r, 0] * width + runs[r, 1]); b = obase + numba.uint64(runs[r, 3])
                for j in range(numba.uint64(runs[r, 2])):
                    v = src[a + j]; seen = numba.uint32(seen | v); dst[b + j] = numba.uint8(v)
            return seen
    elif kind == "u16":
        @numba.njit(inline="always")
        def fr(src, base, width, runs, dst, obase):
            seen = numba.uint16(0)
            for r in range(runs.shape[0]):
                a = base + numba.uint64(runs[r, 0] * width + runs[r, 1]); b = obase + numba.uint64(runs[r, 3])
                for j in range(numba.uint64(runs[r, 2])):
                    v = src[a + j]; seen = numba.uint16(seen | v); dst[b + j] = numba.uint8(v)
            return seen
    elif kind == "nocheck":
        @numba.njit(inline="always")
        def fr(src, base, width, runs, dst, obase):
            for r in range(runs.shape[0]):
                a = base + numba.uint64(runs[r, 0] * width + runs[r, 1]); b = obase + numba.uint64(runs[r, 3])
                for j in range(numba.uint64(runs[r, 2])):
                    dst[b + j] = numba.uint8(src[a + j])
            return numba.uint64(0)
    elif kind == "wide":
        fr = None
    @numba.njit(parallel=True)
    def g(data, runs, out):
        n, npix = out.shape[0], out.shape[1]
        frame = data.shape[1] * data.shape[2]; width = data.shape[2]
        src = data.reshape(-1); dst = out.reshape(-1)
        wide = 0
        for f in numba.prange(n):
            s = fr(src, numba.uint64(f * frame), width, runs, dst, numba.uint64(f * npix))
            wide += 1 if s > 255 else 0
        return wide
    return g

@numba.njit(parallel=True)
def gwide(data, runs, out):
    n, npix = out.shape[0], out.shape[1]
    frame = data.shape[1] * data.shape[2]; width = data.shape[2]
    src = data.reshape(-1); dst = out.reshape(-1)
    for f in numba.prange(n):
        _gather_frame(src, numba.uint64(f * frame), width, runs, dst, numba.uint64(f * npix))
    return 0

side = 192
yy, xx = np.mgrid[:side, :side]
rows, cols = np.nonzero((yy - 96) ** 2 + (xx - 96) ** 2 <= 52.8 ** 2)
runs = pixel_runs(rows, cols); npix = len(rows)
n = 20000
data = np.random.default_rng(0).integers(0, 200, (n, side, side), dtype=np.uint16)
ref = data[:, rows, cols]
for th in (1, 1):
    numba.set_num_threads(th)
    for kind in ("wide", "u64", "u32", "u16", "nocheck"):
        g = gwide if kind == "wide" else make(kind)
        out = np.empty((n, npix), np.uint16 if kind == "wide" else np.uint8)
        g(data, runs, out)
        ts = []
        for _ in range(5):
            t = time.perf_counter(); w = g(data, runs, out); ts.append(time.perf_counter() - t)
        ok = np.array_equal(out, ref.astype(out.dtype))
        print(th, kind, f"{np.median(ts)*1e3:.1f} ms", ok, w, flush=True)
