"""A live run's path rehearsed before its scan (issue 38: what a fresh process on a fresh machine paid during
its first scan, paid before the series' header instead)."""

from __future__ import annotations

import contextlib
import importlib
import os
import re

import numpy as np

from qora.ssb.detector import bright_field_pixels
from qora.ssb.live.fitting import cold_fit, warm_fit

__all__ = ["rehearse", "rehearse_wide", "read_ahead_libraries", "WIDE_BYTES"]

# the CUDA libraries whose kernels load at first use (CUDA's lazy loading): a transform of a new length, a product
# of a new shape reads its kernels' pages of the library file then
_LAZY_LIBRARIES = re.compile(r"/lib(cufft|cublas|cublasLt|nvrtc|nvrtc-builtins|nvJitLink)[^/]*\.so[.0-9]*$")


def read_ahead_libraries(maps: str = "/proc/self/maps") -> list[str]:
    """Ask the kernel to read the CUDA libraries this process has mapped (cuFFT, cuBLAS, NVRTC) into the page cache,
    in the background (``posix_fadvise`` WILLNEED: it returns once the reads are queued). On a fresh machine the
    files are on disk, and each kernel loaded at first use, during a scan (a row transform of the scan's length, the
    slow axis's), would fault in its pages from there; the rehearsal's small film loads other kernels. Returns the
    files asked for (none where ``maps`` cannot be read: not Linux)."""
    for module in ("cupy.fft", "cupy.cuda.cublas"):  # their libraries mapped, so that ``maps`` names them
        with contextlib.suppress(ImportError):
            importlib.import_module(module)
    advise = getattr(os, "posix_fadvise", None)  # Linux's; a system without it has no /proc maps either
    try:
        with open(maps) as f:
            paths = sorted({line.split()[-1] for line in f if _LAZY_LIBRARIES.search(line.rstrip())})
    except OSError:
        return []
    asked = []
    for path in paths if advise is not None else ():
        with contextlib.suppress(OSError):  # a file gone or not advisable: the scan loads it as before
            fd = os.open(path, os.O_RDONLY)
            try:
                advise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
                asked.append(path)
            finally:
                os.close(fd)
    return asked


# CuPy compiles each indexing, element-wise and reduction kernel in two index widths: 32-bit offsets for an array of
# at most this many bytes (and its views), 64-bit beyond (``_index_32_bits``). A full scan's G and row buffers lie
# beyond (a 512^2 scan on a 192^2 detector: 10 GB each), the small film's never do.
WIDE_BYTES = 1 << 31
# the free device memory the wide film needs: G's rows, the row buffers, the session's slice of G, its transform
# and their copies, each just over WIDE_BYTES
WIDE_FREE = 10 * WIDE_BYTES
WIDE_COLS = 512  # the wide film's scan width: a common scan's, so that its row transforms' plan is made here too
FILM_KV, FILM_ALPHA = 300.0, 25.0  # the rehearsal's films: kV, convergence semi-angle (mrad)


def rehearse(backend, *, fit: bool, fit_rotation: bool, tilt: bool, band, trials: int,
             device_decode: bool) -> dict | None:
    """A live run's path done once, before its scan, on a small simulated film (16 x 16 positions, 32^2 frames) on
    ``backend``: the frames placed (decoded on the device where ``device_decode``), rows transformed, the session
    made, its image, and with ``fit`` the cold and the warm fit. CuPy compiles each of its element-wise, reduction
    and indexing kernels at first use (NVRTC; seconds in all where its disk cache is empty, a fresh machine's
    case), which the scan's first frames and its final fit paid otherwise (issue 38: a cold final fit 14.6 s
    after the last frame on a fresh machine). On a GPU with :data:`WIDE_FREE` bytes free, the placing and the
    session again on a film of :func:`rehearse_wide`'s extent (the 64-bit index kernels a full scan's arrays
    take). Returns the cold fit (None without ``fit``)."""
    from qora.ssb import Aberrations, parameters_to_aberrations
    from qora.ssb.live.accumulate import LiveG
    from qora.ssb.simulation import film_counts

    data, step = film_counts(64, aberrations=Aberrations(C10=-100.0), alpha_mrad=FILM_ALPHA, film_seed=5, noise_seed=6)
    flat = data.reshape((-1,) + data.shape[2:])
    live = LiveG(data.shape[:2], data.shape[2:], kv=FILM_KV, alpha_mrad=FILM_ALPHA, scan_step=step, backend=backend,
                 calibration_rows=2, decode="device" if device_decode else "host", receivers=2)
    _place_dealt(live, _batches(flat, device_decode), len(flat))
    session = live.session()
    result = None
    if fit:
        result = cold_fit(session, rotation=None if fit_rotation else 0.0, tilt=tilt, band=band, trials=trials)
        warm_fit(session, result, fit_rotation=fit_rotation, tilt=tilt, band=band)
    fitted = None if result is None else parameters_to_aberrations(result["standard"]["parameters"])
    session.image(Aberrations(C10=-100.0) if fitted is None else fitted)
    backend.synchronize()
    if backend.is_cuda and _free_bytes(backend) >= WIDE_FREE:
        rehearse_wide(backend, flat, live.detector(), step, device_decode=device_decode)
        backend.xp.get_default_memory_pool().free_all_blocks()  # its blocks are the scan's to take
    return result


def rehearse_wide(backend, flat, detector, step: float, *, device_decode: bool,
                  bytes_at_least: int = WIDE_BYTES + 1) -> tuple:
    """The frames placed and the session made again on a scan of :data:`WIDE_COLS` columns and as many rows as make
    its G's rows, its row buffers and the session's G each hold at least ``bytes_at_least`` bytes (default: beyond
    :data:`WIDE_BYTES`, where CuPy takes its 64-bit index kernels: otherwise compiled during a full scan's first
    frames and its slow-axis transform; issue 38, seven compiles on a fresh H200). Four rows of frames come
    (``flat``'s, cycled); the rest are missing, their places filled by the mean pattern as a dropped frame's are.
    The disk is ``detector`` (fixed: no margin, so that the arrays are the bright field's). Returns (the LiveG, its
    session)."""
    from qora.ssb.live.accumulate import LiveG

    bright = len(bright_field_pixels(flat.shape[1:], detector, FILM_ALPHA, FILM_KV)[0])
    item = np.dtype(np.complex64 if backend.is_cuda else np.complex128).itemsize
    per_row = min((WIDE_COLS // 2 + 1) * bright * item, WIDE_COLS * bright * item // 2)  # G's, the buffers'
    rows = -(-int(bytes_at_least) // per_row)
    live = LiveG((rows, WIDE_COLS), flat.shape[1:], kv=FILM_KV, alpha_mrad=FILM_ALPHA, scan_step=step, backend=backend,
                 detector=detector, calibration_rows=2, decode="device" if device_decode else "host", receivers=2)
    ends = [np.arange((r + 1) * WIDE_COLS - 64, (r + 1) * WIDE_COLS) for r in (2, 3)]  # rows 2 and 3 close together
    _place_dealt(live, _batches(flat, device_decode), 4 * WIDE_COLS, joined=np.concatenate(ends))
    session = live.session()
    backend.synchronize()
    return live, session


def _batches(flat, device_decode: bool):
    """A function (frame indices, receiver) -> a batch of those frames (``flat``'s, cycled), compressed as a
    DECTRIS stream sends them where ``device_decode``."""
    from qora.ssb.live import bslz4
    from qora.ssb.live.bslz4_batch import CompressedFrames
    from qora.ssb.live.frames import Frames

    blobs = [bslz4.compress(f) for f in flat] if device_decode else None

    def batch(index, receiver):
        if device_decode:
            return CompressedFrames(index, [blobs[i % len(flat)] for i in index], flat.dtype, flat.shape[1:],
                                    receiver=receiver)
        return Frames(index, flat[index % len(flat)], receiver=receiver)

    return batch


def _place_dealt(live, batch, frames: int, joined=()) -> None:
    """The first ``frames`` frames of ``live``'s scan placed as two receivers deal them (each batch every other
    frame: a write of many rows' columns at once, its own indexing kernel), then the frames ``joined`` in one batch
    (the ends of several rows: those rows close together, one transform of several rows, whose gather from the row
    buffers is another indexing kernel than one row's), row 1's second half last: late frames, as several receivers
    deliver them, take their own path (a product into the transformed row: cuBLAS loaded, its kernels chosen).
    Then the stream's end."""
    cols = live.scan_shape[1]
    held = np.arange(cols + cols // 2, 2 * cols)
    joined = np.asarray(joined, np.int64)
    dealt = np.setdiff1d(np.arange(frames), np.concatenate([held, joined]))
    for start in range(0, len(dealt), 128):
        for receiver in (0, 1):
            live.add(batch(dealt[start + receiver:start + 128:2], receiver))
    if len(joined):
        live.add(batch(joined, 1))
    live.add(batch(held, 0))
    live.finish()
    if not live.report.late:  # the placement changed its rule: the rehearsal no longer covers late frames
        raise RuntimeError("the rehearsal's held-back frames were placed in time, not late")


def _free_bytes(backend) -> float:
    from qora.backend.device import free_memory

    return free_memory(backend) or 0.0
