"""Host copies by non-temporal (streaming) stores, x86-64: the written lines go to memory without being read first
(an ordinary store reads its line for ownership) and without staying dirty in the host's caches, where a copy
engine reading them next would wait on them. qora.ssb's gather writes G's pixels this way, and qora.holo's CUDA
Pipeline its page-locked buffers (docs/ssb-performance.md, section 29; docs/holo-performance.md).
"""

from __future__ import annotations

from qora.backend.host import numba_threads, openmp_passive

openmp_passive()  # before Numba loads its OpenMP runtime

import platform  # noqa: E402

import numba  # noqa: E402
import numpy as np  # noqa: E402
from llvmlite import ir  # noqa: E402
from numba import types  # noqa: E402
from numba.core import cgutils  # noqa: E402
from numba.extending import intrinsic  # noqa: E402

__all__ = ["STREAMING_STORES", "store_streaming", "store_fence", "copy_streaming"]

# Numba emits no streaming store of its own: an intrinsic marks a 32-bit store with LLVM's !nontemporal (MOVNTI)
STREAMING_STORES = platform.machine().lower() in ("x86_64", "amd64")
PARTS_PER_THREAD = 4  # shares of a copy per Numba thread (a share's stores end with one fence)


@intrinsic
def store_streaming(typingctx, words, index, value):
    """``words[index] = value``, a non-temporal store (``words`` a 1-D contiguous uint32 array)."""
    def codegen(context, builder, signature, args):
        array_type = signature.args[0]
        array = context.make_array(array_type)(context, builder, args[0])
        pointer = cgutils.get_item_pointer(context, builder, array_type, array, [args[1]], wraparound=False)
        store = builder.store(args[2], pointer)
        store.set_metadata("nontemporal", builder.module.add_metadata([ir.IntType(32)(1)]))
        return context.get_dummy_value()
    return types.void(words, index, words.dtype), codegen


@intrinsic
def store_fence(typingctx):
    """SFENCE: the streaming stores before it are ordered before any store after (a copy engine reads next)."""
    def codegen(context, builder, signature, args):
        fence = builder.module.declare_intrinsic("llvm.x86.sse.sfence", fnty=ir.FunctionType(ir.VoidType(), []))
        builder.call(fence, [])
        return context.get_dummy_value()
    return types.void(), codegen


@numba.njit(parallel=True, cache=True, nogil=True)
def _copy_words(src, dst, parts):
    n = src.size
    step = (n + parts - 1) // parts
    for p in numba.prange(parts):
        lo = p * step
        hi = min(n, lo + step)
        for j in range(lo, hi):
            store_streaming(dst, numba.uint64(j), src[j])
        store_fence()


def copy_streaming(dst: np.ndarray, src: np.ndarray) -> bool:
    """``dst[...] = src`` by streaming stores over Numba's threads, for arrays of one dtype and shape, both C-ordered,
    their bytes whole 32-bit words at 32-bit aligned addresses; False (nothing copied) where that does not hold or
    the host is not x86-64, so that the caller copies as usual."""
    if not (STREAMING_STORES and dst.dtype == src.dtype and dst.shape == src.shape and dst.flags.c_contiguous
            and src.flags.c_contiguous and dst.nbytes % 4 == 0 and dst.ctypes.data % 4 == 0
            and src.ctypes.data % 4 == 0 and dst.nbytes):
        return False
    parts = PARTS_PER_THREAD * numba_threads()
    _copy_words(src.reshape(-1).view(np.uint32), dst.reshape(-1).view(np.uint32), parts)
    return True
