"""Issue 38, step 2: does the bright field's gather (``qora.ssb.bright_runs``) gain from streaming (non-temporal)
stores? Ordinary stores read each output line before writing it (write-allocate), 4.6 GB more host traffic on the
ssb-full film; memcpy's streaming stores do not. Numba emits no streaming store, so an intrinsic does (LLVM's
``!nontemporal`` on a 32-bit store: MOVNTI), two frames' pixels at a time assembled in a small scratch array
(an even count of uint16, whole 32-bit words), then an SFENCE.

    python bench/probes/nt_gather_probe.py [FRAMES]

Prints both gathers' median ms of 5 over FRAMES 192^2 uint16 frames in memory (the film's 8,741-pixel disk) and
whether they give the same pixels.
"""
import sys
import time

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic


@intrinsic
def store_nt(typingctx, arr, idx, val):
    """arr[idx] = val with a non-temporal hint (arr: 1-D contiguous uint32)."""
    def codegen(context, builder, sig, args):
        arr_t = sig.args[0]
        ary = context.make_array(arr_t)(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, arr_t, ary, [args[1]], wraparound=False)
        st = builder.store(args[2], ptr)
        st.set_metadata("nontemporal", builder.module.add_metadata([ir.IntType(32)(1)]))
        return context.get_dummy_value()
    return types.void(arr, idx, arr.dtype), codegen


@intrinsic
def sfence(typingctx):
    def codegen(context, builder, sig, args):
        fn = builder.module.declare_intrinsic("llvm.x86.sse.sfence", fnty=ir.FunctionType(ir.VoidType(), []))
        builder.call(fn, [])
        return context.get_dummy_value()
    return types.void(), codegen


@numba.njit(parallel=True, nogil=True)
def gather_plain(src, runs, npix, out, nframes, frame):
    for f in numba.prange(nframes):
        base = numba.uint64(f * frame)
        obase = numba.uint64(f * npix)
        for r in range(runs.shape[0]):
            a = base + numba.uint64(runs[r, 0])
            b = obase + numba.uint64(runs[r, 2])
            for j in range(numba.uint64(runs[r, 1])):
                out[b + j] = src[a + j]


@numba.njit(parallel=True, nogil=True)
def gather_nt(src, runs, npix, out32, nframes, frame):
    # frames in pairs: two frames' pixels (2 npix uint16, an even count) fill whole uint32 words
    for fp in numba.prange(nframes // 2):
        scratch = np.empty(2 * npix, np.uint16)
        for h in range(2):
            f = 2 * fp + h
            base = numba.uint64(f * frame)
            for r in range(runs.shape[0]):
                a = base + numba.uint64(runs[r, 0])
                b = numba.uint64(h * npix + runs[r, 2])
                for j in range(numba.uint64(runs[r, 1])):
                    scratch[b + j] = src[a + j]
        w = scratch.view(np.uint32)
        o = numba.uint64(fp * npix)  # 2 npix uint16 = npix uint32
        for j in range(npix):
            store_nt(out32, o + numba.uint64(j), w[j])
        sfence()


def main(nframes=20000):
    frame_w = 192
    frame = frame_w * frame_w
    yy, xx = np.mgrid[:frame_w, :frame_w]
    disk = (yy - 96) ** 2 + (xx - 96) ** 2 <= 52.8 ** 2
    rows = []
    idx = 0
    for r in range(frame_w):
        cols = np.flatnonzero(disk[r])
        if cols.size:
            rows.append((r * frame_w + cols[0], cols.size, idx))
            idx += cols.size
    runs = np.array(rows, np.int64)
    npix = idx
    src = np.random.default_rng(0).integers(0, 1000, nframes * frame, dtype=np.uint16)
    out = np.empty(nframes * npix, np.uint16)
    out2 = np.empty(nframes * npix, np.uint16)
    for name, fn, o in (("plain", gather_plain, out), ("nt", gather_nt, out2.view(np.uint32))):
        fn(src, runs, npix, o, nframes, frame)
        ts = []
        for _ in range(5):
            t0 = time.perf_counter()
            fn(src, runs, npix, o, nframes, frame)
            ts.append(time.perf_counter() - t0)
        print(f"{name}: {np.median(ts)*1e3:.1f} ms, {nframes*npix*2/np.median(ts)/1e9:.2f} GB/s of pixels", flush=True)
    print("equal:", np.array_equal(out, out2), "npix", npix)


if __name__ == "__main__":
    main(*map(int, sys.argv[1:]))
