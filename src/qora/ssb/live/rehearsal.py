"""A live run's path rehearsed before its scan (issue 38: what a fresh process on a fresh machine paid during
its first scan, paid before the series' header instead)."""

from __future__ import annotations

import contextlib
import importlib
import os
import re

import numpy as np

from qora.ssb.live.fitting import cold_fit, warm_fit

__all__ = ["rehearse", "read_ahead_libraries"]

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


def rehearse(backend, *, fit: bool, fit_rotation: bool, tilt: bool, band, trials: int,
             device_decode: bool) -> dict | None:
    """A live run's path done once, before its scan, on a small simulated film (16 x 16 positions, 32^2 frames) on
    ``backend``: the frames placed (decoded on the device where ``device_decode``), rows transformed, the session
    made, its image, and with ``fit`` the cold and the warm fit. CuPy compiles each of its element-wise, reduction
    and indexing kernels at first use (NVRTC; seconds in all where its disk cache is empty, a fresh machine's
    case), which the scan's first frames and its final fit paid otherwise (issue 38: a cold final fit 14.6 s
    after the last frame on a fresh machine). Returns the cold fit (None without ``fit``)."""
    from qora.ssb import Aberrations, parameters_to_aberrations
    from qora.ssb.live import bslz4
    from qora.ssb.live.accumulate import LiveG
    from qora.ssb.live.bslz4_batch import CompressedFrames
    from qora.ssb.live.frames import Frames
    from qora.ssb.simulation import film_counts

    data, step = film_counts(64, aberrations=Aberrations(C10=-100.0), alpha_mrad=25.0, film_seed=5, noise_seed=6)
    flat = data.reshape((-1,) + data.shape[2:])
    live = LiveG(data.shape[:2], data.shape[2:], kv=300.0, alpha_mrad=25.0, scan_step=step, backend=backend,
                 calibration_rows=2, decode="device" if device_decode else "host", receivers=2)
    cols = data.shape[1]

    def batch(index, receiver):
        return (CompressedFrames(index, [bslz4.compress(f) for f in flat[index]], flat.dtype, data.shape[2:],
                                 receiver=receiver) if device_decode else Frames(index, flat[index], receiver=receiver))

    # the frames dealt between two receivers, as a detector deals them among receiving processes: each
    # batch is every other frame, a write of many rows' columns at once (its own indexing kernel)
    held = np.arange(cols + cols // 2, 2 * cols)
    dealt = np.setdiff1d(np.arange(len(flat)), held)
    for start in range(0, len(dealt), 128):
        for receiver in (0, 1):
            live.add(batch(dealt[start + receiver:start + 128:2], receiver))
    # row 1's second half comes last, after its row was transformed: late frames, as several receivers deliver
    # them, take their own path (a product into the transformed row: cuBLAS loaded, its kernels chosen)
    live.add(batch(held, 0))
    live.finish()
    if not live.report.late:  # the placement changed its rule: the rehearsal no longer covers late frames
        raise RuntimeError("the rehearsal's held-back frames were placed in time, not late")
    session = live.session()
    result = None
    if fit:
        result = cold_fit(session, rotation=None if fit_rotation else 0.0, tilt=tilt, band=band, trials=trials)
        warm_fit(session, result, fit_rotation=fit_rotation, tilt=tilt, band=band)
    fitted = None if result is None else parameters_to_aberrations(result["standard"]["parameters"])
    session.image(Aberrations(C10=-100.0) if fitted is None else fitted)
    backend.synchronize()
    return result
