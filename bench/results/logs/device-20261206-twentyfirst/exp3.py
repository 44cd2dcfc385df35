import numpy as np, numba, time
from qora.ssb.bright_runs import pixel_runs, _gather_frame, _narrow_frame

@numba.njit(parallel=True)
def v1(data, runs, out):
    n, npix = out.shape[0], out.shape[1]
    frame = data.shape[1] * data.shape[2]; width = data.shape[2]
    src = data.reshape(-1); dst = out.reshape(-1); wide = 0
    for f in numba.prange(n):
        s = _narrow_frame(src, numba.uint64(f * frame), width, runs, dst, numba.uint64(f * npix))
        wide += 1 if s > 255 else 0
    return wide

@numba.njit(parallel=True)
def v2(data, runs, out):
    n, npix = out.shape[0], out.shape[1]
    frame = data.shape[1] * data.shape[2]; width = data.shape[2]
    src = data.reshape(-1); dst = out.reshape(-1); wide = 0
    for f in numba.prange(n):
        scratch = np.empty(npix, data.dtype)
        _gather_frame(src, numba.uint64(f * frame), width, runs, scratch, numba.uint64(0))
        seen = numba.uint32(0)
        o = f * npix
        for j in range(npix):
            v = scratch[j]
            seen = numba.uint32(seen | v)
            dst[o + j] = numba.uint8(v)
        wide += 1 if seen > 255 else 0
    return wide

@numba.njit(parallel=True)
def wide(data, runs, out):
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
for n, reps in ((40, 50), (6000, 2)):
    data = np.random.default_rng(0).integers(0, 200, (n, side, side), dtype=np.uint16)
    ref = data[:, rows, cols]
    for rep in range(3):
        for name, g, od in (("wide", wide, np.uint16), ("v1", v1, np.uint8), ("v2", v2, np.uint8)):
            out = np.empty((n, npix), od); g(data, runs, out)
            assert np.array_equal(out, ref.astype(od))
            ts = []
            for _ in range(7):
                t = time.perf_counter()
                for _ in range(reps): g(data, runs, out)
                ts.append((time.perf_counter() - t) / reps)
            print(n, rep, name, f"{np.median(ts)/n*1e6:.2f} us/frame", flush=True)
