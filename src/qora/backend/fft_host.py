"""The host's transforms behind :mod:`qora.backend.fft`: which library runs them (FFTW where pyFFTW is
installed and the arrays are aligned, else ducc0, else :mod:`scipy.fft`), on how many threads
(:func:`cpu_threads`, from :func:`qora.backend.host.num_threads`), and which libraries are installed
(:func:`cpu_libraries`: ``qora info`` and every benchmark's JSON say when one is missing)."""

from __future__ import annotations

import threading

import numpy as np

from qora.backend.host import num_threads

__all__ = ["CPU_THREADS_FROM", "FFTW_THREADS_FROM", "cpu_threads", "cpu_libraries", "fftw_wisdom",
           "load_fftw_wisdom", "empty", "aligned", "wisdom_path", "WISDOM_ENV"]

# Below this many points per transform a second FFT thread costs more than it saves
# (ducc0 at 256^2: 0.27 ms on one thread, 0.30 on two, on the 2-core development machine).
CPU_THREADS_FROM = 2**17
# FFTW alone is faster on two threads at 256^2 (0.14 ms against 0.18), but inside an
# HIO iteration, with the element-wise loops between transforms, its threads must be
# woken each time: 0.80 ms per iteration on two threads against 0.49 on one.
FFTW_THREADS_FROM = CPU_THREADS_FROM


def cpu_threads(n_points: int, workers: int | None = None, start: int = CPU_THREADS_FROM) -> int:
    """Host threads for a transform of ``n_points`` points in all: ``workers`` if given, else one below
    ``start`` points (waking threads costs more than they save there) and
    :func:`~qora.backend.host.num_threads` from there."""
    if workers is not None:
        if int(workers) < 1:
            raise ValueError(f"workers must be at least 1, got {workers}")
        return int(workers)
    return 1 if n_points < start else num_threads()


def _ducc0():
    try:
        import ducc0
    except ImportError:  # ducc0 is a dependency; the fallback serves trimmed installs (qora info says so)
        return None
    return ducc0


def cpu_libraries() -> dict:
    """The host FFT libraries: ``{"ducc0": version or None, "pyfftw": version or None, "scipy": version,
    "used": the one C2C plans run on}``, so that ``qora info`` and every benchmark's JSON say when an
    optional one is missing (scipy.fft alone copies each result and threads only across batches of 1D lines)."""
    import scipy

    ducc0 = _ducc0()
    out = {"ducc0": getattr(ducc0, "__version__", "installed") if ducc0 is not None else None}
    try:
        import pyfftw

        out["pyfftw"] = getattr(pyfftw, "__version__", "installed")
    except ImportError:
        out["pyfftw"] = None
    out["scipy"] = scipy.__version__
    fftw_on = out["pyfftw"] is not None and _pyfftw() is not None
    out["used"] = "fftw" if fftw_on else "ducc0" if ducc0 is not None else "scipy"
    if out["pyfftw"] is not None and not fftw_on:
        out["pyfftw"] += " (disabled by QORA_DISABLE_FFTW)"
    return out


def _pyfftw():
    """pyFFTW if installed (the ``fftw`` extra) and not disabled by ``QORA_DISABLE_FFTW=1``."""
    import os

    if os.environ.get("QORA_DISABLE_FFTW", "") not in ("", "0"):
        return None
    try:
        import pyfftw
    except ImportError:
        return None
    return pyfftw


WISDOM_ENV = "QORA_FFTW_WISDOM"  # the wisdom file's path, or "off"


def wisdom_path():
    """The file the measured plans are kept in between processes (:class:`_FFTWPlans`): ``QORA_FFTW_WISDOM``
    (a path; "off": none), by default ``~/.cache/qora/fftw-wisdom-<pyFFTW's version>.npz`` (``XDG_CACHE_HOME``
    where set). None when off."""
    import os
    from pathlib import Path

    chosen = os.environ.get(WISDOM_ENV, "").strip()
    if chosen.lower() == "off":
        return None
    if chosen:
        return Path(chosen)
    pyfftw = _pyfftw()
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "qora" / f"fftw-wisdom-{getattr(pyfftw, '__version__', 'none')}.npz"


def _read_wisdom(path):
    try:
        with np.load(path) as f:
            return tuple(f[f"w{i}"].tobytes() for i in range(3))
    except (OSError, ValueError, KeyError):  # absent or damaged: the plans are measured again
        return None


def _write_wisdom(path, wisdom) -> None:
    """The wisdom into ``path`` atomically (a reader never sees half a file). Where it cannot be written the plans
    live in this process only and a later process may measure others: said once, as a warning naming the way
    out (the transforms are right either way; what is lost is the bit-for-bit repeat across processes)."""
    import os
    import warnings

    # qora.io.atomic's atomic_path sits a layer above the backend (the import contract): its rename, written here
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as f:
            np.savez(f, **{f"w{i}": np.frombuffer(w, np.uint8) for i, w in enumerate(wisdom)})
        os.replace(tmp, path)
    except OSError as exc:
        if tmp.parent.is_dir():
            tmp.unlink(missing_ok=True)
        if not _WISDOM_WARNED:
            _WISDOM_WARNED.append(True)
            warnings.warn(f"FFTW's measured plans could not be kept in {path} ({exc}): another process may plan "
                          f"other algorithms and round differently; set {WISDOM_ENV} to a writable file",
                          RuntimeWarning, stacklevel=3)


_WISDOM_WARNED: list = []  # the unwritable wisdom file is said once a process


class _FFTWPlans:
    """FFTW plans per (shape, dtype, axes, direction, in-place), made with FFTW_MEASURE.

    A plan is measured once on aligned scratch arrays, then pointed at the caller's
    arrays with ``update_arrays`` (which needs them SIMD-aligned, as arrays from
    :func:`empty` are); other arrays go to ducc0.

    Measuring picks among FFTW's algorithms by timing them, so two processes could pick different ones, whose
    results differ by rounding (2e-7), which an iterative phase retrieval grows into another reconstruction: the
    same command on the same files gave Fourier errors 0.134, 0.158 and 0.132. So the wisdom (the measured
    choices) is kept in a file (:func:`wisdom_path`): each process loads it before its first plan and writes it
    back after planning something new, and every later process on the machine plans the same algorithms: the
    same command gives the same result bit for bit. The first process to plan a size measures it (as before).
    """

    def __init__(self) -> None:
        self._plans: dict = {}
        self._lock = threading.Lock()
        self._loaded = False

    def _load_once(self, pyfftw) -> None:
        if self._loaded:
            return
        self._loaded = True
        path = wisdom_path()
        wisdom = None if path is None else _read_wisdom(path)
        if wisdom is not None:
            pyfftw.import_wisdom(wisdom)

    def get(self, shape, dtype, axes, forward: bool, in_place: bool, out_shape=None, out_dtype=None):
        """The plan from arrays of ``shape``/``dtype`` to ``out_shape``/``out_dtype`` (the same by default: C2C;
        a real input: R2C; a real output: C2R)."""
        pyfftw = _pyfftw()
        out_shape = tuple(shape) if out_shape is None else tuple(out_shape)
        out_dtype = np.dtype(dtype if out_dtype is None else out_dtype)
        n = int(np.prod(out_shape if out_dtype.kind == "f" else shape))  # the real array's points
        threads = cpu_threads(n, start=FFTW_THREADS_FROM)
        # FFTW fixes threads per plan
        key = (tuple(shape), np.dtype(dtype).str, out_shape, out_dtype.str, axes, forward, in_place, threads)
        with self._lock:
            plan = self._plans.get(key)
            if plan is None:
                self._load_once(pyfftw)
                before = pyfftw.export_wisdom()
                a = pyfftw.empty_aligned(shape, dtype)
                b = a if in_place else pyfftw.empty_aligned(out_shape, out_dtype)
                # a C2R of more than one axis may overwrite its input (FFTW cannot keep it), as R2CPlan allows
                flags = ("FFTW_MEASURE",) if out_dtype.kind == "c" else ("FFTW_MEASURE", "FFTW_DESTROY_INPUT")
                plan = pyfftw.FFTW(a, b, axes=axes, direction="FFTW_FORWARD" if forward else "FFTW_BACKWARD",
                                   flags=flags, threads=threads, planning_timelimit=20.0)
                self._plans[key] = plan
                after = pyfftw.export_wisdom()
                path = wisdom_path()
                if path is not None and after != before:  # something new was measured: kept for the next process
                    _write_wisdom(path, after)
            return plan

    def run(self, x, out, axes, forward: bool) -> bool:
        """Transform with FFTW if both arrays are aligned; False if the caller must fall back. C2C when both are
        complex, R2C from a real ``x``, C2R into a real ``out`` (unscaled, as the other libraries here are)."""
        pyfftw = _pyfftw()
        if pyfftw is None or not all(a.dtype in _FFTW_DTYPES for a in (x, out)):
            return False
        align = pyfftw.simd_alignment
        if x.ctypes.data % align or out.ctypes.data % align:
            return False
        real = x.dtype.kind == "f" or out.dtype.kind == "f"
        plan = self.get(x.shape, x.dtype, axes, forward, x is out and not real, out.shape, out.dtype)
        plan.update_arrays(x, out)
        # pyFFTW's execute is unscaled; its __call__ would scale the inverse by 1/n
        plan.execute()
        return True


_FFTW_DTYPES = tuple(np.dtype(t) for t in (np.complex64, np.complex128, np.float32, np.float64))
_fftw = _FFTWPlans()


def fftw_wisdom():
    """FFTW's wisdom (the plans measured in this process), or None without pyFFTW.

    FFTW_MEASURE picks among algorithms by timing them, so two processes can pick different
    ones and round differently; an iterative phase retrieval amplifies that to visibly different
    results. Processes that load the same wisdom (:func:`load_fftw_wisdom`) before they plan
    pick the same algorithms and give bitwise the same results (``qora.distributed`` does this
    for its workers)."""
    pyfftw = _pyfftw()
    return None if pyfftw is None else pyfftw.export_wisdom()


def load_fftw_wisdom(wisdom) -> None:
    """Load wisdom from :func:`fftw_wisdom` (before planning: plans made earlier are kept)."""
    pyfftw = _pyfftw()
    if pyfftw is not None and wisdom is not None:
        pyfftw.import_wisdom(wisdom)


def empty(shape, dtype=np.complex64) -> np.ndarray:
    """A host array aligned for the fastest CPU transforms (SIMD-aligned for FFTW)."""
    pyfftw = _pyfftw()
    if pyfftw is not None:
        return pyfftw.empty_aligned(shape, dtype)
    return np.empty(shape, dtype)


def aligned(x, dtype) -> np.ndarray:
    """``x`` as a C-contiguous host array of ``dtype`` that FFTW can transform (as from :func:`empty`): ``x`` itself
    where it is one, else a copy."""
    x = np.asarray(x)
    pyfftw = _pyfftw()
    if (x.dtype == dtype and x.flags.c_contiguous
            and (pyfftw is None or x.ctypes.data % pyfftw.simd_alignment == 0)):
        return x
    out = empty(x.shape, dtype)
    out[...] = x
    return out


def _cpu_c2c(x, out, axes, forward: bool, fftw: bool = True) -> None:
    """Unscaled C2C transform of ``x`` into ``out`` (which may be ``x``) on the CPU.

    FFTW (through pyFFTW, the ``fftw`` extra) when installed and the arrays are
    aligned; else ducc0 (pocketfft's successor, the FFT that XLA uses on CPUs),
    which transforms in place into a given buffer with no temporary; without
    either, ``scipy.fft`` through a copy. Threads: :func:`cpu_threads` of the
    whole array, so a batch of small transforms is spread over the cores too.
    """
    if fftw and _fftw.run(x, out, axes, forward):
        return
    threads = cpu_threads(x.size)
    ducc0 = _ducc0()
    if ducc0 is not None:
        ducc0.fft.c2c(x, axes=axes, forward=forward, inorm=0, out=out, nthreads=threads)
        return
    import scipy.fft

    f = scipy.fft.fftn if forward else scipy.fft.ifftn
    y = f(x, axes=axes, norm="backward" if forward else "forward", workers=threads)
    out[...] = y


def _cpu_r2c(x, out, axes, fftw: bool = True) -> None:
    """Unscaled R2C of ``x`` into ``out`` on the host (FFTW where installed, allowed and both arrays aligned, else
    ducc0 in place into ``out``, else scipy.fft)."""
    if fftw and _fftw.run(x, out, axes, True):
        return
    threads = cpu_threads(x.size)
    ducc0 = _ducc0()
    if ducc0 is not None:
        ducc0.fft.r2c(x, axes=axes, forward=True, inorm=0, out=out, nthreads=threads)
        return
    import scipy.fft

    out[...] = scipy.fft.rfftn(x, axes=axes, workers=threads)


def _cpu_c2r(x, out, axes, transform_shape, fftw: bool = True) -> None:
    """Unscaled C2R of the half spectrum ``x`` into the real ``out`` (FFTW where installed, allowed and both arrays
    aligned, else ducc0, else scipy.fft). May overwrite ``x``."""
    if fftw and _fftw.run(x, out, axes, False):
        return
    threads = cpu_threads(out.size)
    ducc0 = _ducc0()
    if ducc0 is not None:
        # allowed to overwrite x, as cuFFT's C2R is (R2CPlan's contract): keeping it costs ducc0 a copy of
        # the half spectrum, which made the C2R twice as slow as the R2C (96^3 float64: 40 ms against 20)
        ducc0.fft.c2r(x, axes=axes, forward=False, inorm=0, lastsize=transform_shape[-1], out=out, nthreads=threads,
                      allow_overwriting_input=True)
        return
    import scipy.fft

    out[...] = scipy.fft.irfftn(x, s=transform_shape, axes=axes, norm="forward", workers=threads)
