"""The CUDA kernels of qora.ssb and one launcher per kernel.

The sources are ``ssb.cu`` (the image sums, the mean-phase planes, the upsampled parallax, the
general band batch), ``band.cu`` (the quadratic-chi band kernels of the fits), ``depth.cu`` (the
depth-incoherent model's section transfers), ``ptycho.cu`` (the multislice model's per-slice products) and
``bslz4.cu``
(DECTRIS frames decoded from bitshuffle-LZ4 into the gathered pixels, live), compiled on first
use by :func:`qora.backend.kernels.get_kernel`, the one loader. Each launcher takes keyword
arguments, computes its launch configuration (grid, block, shared memory) itself and names in
its docstring the array-code function it must agree with (tests/ssb/test_ssb_cuda.py compares
them). This module is a leaf: it imports only :mod:`qora.backend` and NumPy, and nothing here
runs unless a launcher is called (on device arrays).
"""

from __future__ import annotations

import functools

import numpy as np

from qora.backend import require_cupy
from qora.backend.kernels import get_kernel

__all__ = ["ssb_sums", "chi_pixels", "loss_half", "loss_moments", "parallax_fine", "band_batch",
           "band_quad_batch", "band_quad_standard", "band_quad_derivatives", "agreement_sum", "derivative_sums",
           "incoherent_transfers", "incoherent_sums", "incoherent_tasks", "double_overlap",
           "INCOHERENT_KINDS", "bslz4_gather", "bslz4_shared_bytes", "ptycho_transmit", "ptycho_slice_adjoint",
           "ptycho_far_weight", "ptycho_probe_sums", "ptycho_object_step",
           "kernel", "compile_modules", "complex_tag", "most_sets", "batch_size",
           "batch_kernel_name", "table_bytes", "sets_per_launch", "FINE_FACTORS", "BLOCK", "SHARED_BYTES"]

# the most parameter sets one launch takes: the thick kernel 4 (8 held one block per SM at 178 registers
# and took 29.5 ms a pass against 9.9 ms for two launches of 4 at full scale, H200,
# docs/ssb-performance.md), the standard-model kernel 8
MOST_SETS = {"band_quad_batch": 4, "band_quad_standard": 8}
BATCH_SETS = max(MOST_SETS.values())
FINE_FACTORS = (2, 3, 4)  # the upsampling factors parallax_fine is compiled for
# dynamic shared memory a launch may take without opting in: 48 KiB less the kernels' static shared
# memory (the block sums and the sets' constants, 2.6 KB at most in band.cu)
SHARED_BYTES = 44 * 1024


def _batch_names(kernel_name: str) -> tuple:
    return tuple(f"{kernel_name}<{n}, {'double' if n <= 2 else 'float'}>" for n in (1, 2, 4, 8)
                 if n <= MOST_SETS[kernel_name])


_MODULES = {
    "ssb.cu": tuple(f"ssb_sums<{c}, {q}, {o}>" for c in ("float2", "double2") for q in ("true", "false")
                    for o in ("true", "false"))
              + tuple(f"loss_half<{c}, {q}>" for c in ("float2", "double2") for q in ("true", "false"))
              + ("band_batch<float2>", "band_batch<double2>")
              + tuple(f"parallax_fine<{c}, {f}>" for c in ("float2", "double2") for f in FINE_FACTORS)
              + ("loss_moments<float>", "loss_moments<double>", "chi_pixels"),
    "band.cu": _batch_names("band_quad_batch") + _batch_names("band_quad_standard")
               + ("band_quad_derivatives<3>", "band_quad_derivatives<6>"),
    "depth.cu": tuple(f"incoherent_transfers<{c}, {o}>" for c in ("float2", "double2") for o in (0, 1, 2))
                + tuple(f"incoherent_sums<{c}, {o}>" for c in ("float2", "double2") for o in (0, 2)) + ("double_overlap",),
    "ptycho.cu": tuple(f"{k}<{c}>" for k in ("ptycho_transmit", "ptycho_slice_adjoint", "ptycho_probe_sums",
                                              "ptycho_object_step")
                       for c in ("float2", "double2"))
                 + tuple(f"ptycho_far_weight<{c}, {a}>" for c in ("float2", "double2") for a in ("float", "double")),
    "bslz4.cu": tuple(f"bslz4_gather<{t}, {o}>" for t in ("unsigned char", "unsigned short", "unsigned int")
                      for o in ("float", "double")),
}

def _source_number(file: str, pattern: str) -> int:
    """The number ``pattern`` (a regular expression with one group) finds in the kernel source ``file``."""
    import re
    from pathlib import Path

    found = re.search(pattern, (Path(__file__).parent / file).read_text())
    if found is None:
        raise RuntimeError(f"{file}: no {pattern!r}: the launchers' block size is read from the source")
    return int(found.group(1))


# threads per block, read from the sources they are written in once (the launchers must agree with the kernels'
# shared arrays and launch bounds): THREADS in ssb.cu, BAND_THREADS in band.cu, the launch bounds of depth.cu's
# transfers, 32 x WARPS in bslz4.cu
BLOCK = {"ssb.cu": _source_number("ssb.cu", r"#define THREADS (\d+)"),
         "band.cu": _source_number("band.cu", r"#define BAND_THREADS (\d+)"),
         "depth.cu": _source_number("depth.cu", r"__launch_bounds__\((\d+)\) incoherent_transfers"),
         "bslz4.cu": 32 * _source_number("bslz4.cu", r"#define WARPS (\d+)")}
_COUNT_TYPE = {1: "unsigned char", 2: "unsigned short", 4: "unsigned int"}


def most_sets(*, standard: bool) -> int:
    """The most parameter sets one launch of the batch kernel takes (:data:`MOST_SETS`)."""
    return MOST_SETS["band_quad_standard" if standard else "band_quad_batch"]


def batch_size(sets: int, *, standard: bool = True) -> int:
    """The compile-time set count of the instantiation that runs ``sets`` sets: 1, 2, 4 or 8, at
    most :func:`most_sets`. ``band_quad_standard`` runs (and so needs the shared memory of) all of
    them."""
    most = most_sets(standard=standard)
    if not 1 <= sets <= most:
        raise ValueError(f"one launch takes 1 to {most} sets, got {sets}")
    return next(n for n in (1, 2, 4, 8) if n >= sets)


def batch_kernel_name(sets: int, *, standard: bool = False) -> str:
    """The band_quad_batch instantiation (``band_quad_standard`` for sets of the standard model)
    for ``sets`` sets: the smallest that holds them, as its registers (and so the warps an SM keeps
    in flight) grow with the count."""
    size = batch_size(sets, standard=standard)
    name = "band_quad_standard" if standard else "band_quad_batch"
    return f"{name}<{size}, {'double' if size <= 2 else 'float'}>"


def table_bytes(*, standard: bool, sets: int, rows: int, cols: int) -> int:
    """Dynamic shared memory of a quadratic kernel's launch on a detector grid of ``rows`` x ``cols``:
    per set the phase tables (and the thick model's depth tables), for every padded set of
    band_quad_standard."""
    if standard:
        return batch_size(sets, standard=True) * (rows + cols) * 8
    return sets * 2 * (rows + cols) * 8


def sets_per_launch(*, standard: bool, rows: int, cols: int) -> int:
    """The most sets one launch of the batch kernels takes on this grid: 8, 4 or 2 where the kernel
    takes them and their tables fit :data:`SHARED_BYTES`, else 1."""
    most = most_sets(standard=standard)
    return next((n for n in (8, 4, 2) if n <= most and table_bytes(standard=standard, sets=n, rows=rows, cols=cols)
                 <= SHARED_BYTES), 1)


def complex_tag(array) -> str:
    """The CUDA vector type of a complex array: ``float2`` (complex64) or ``double2`` (complex128)."""
    return "float2" if array.dtype == np.complex64 else "double2"


_FILE_OF = {name: filename for filename, names in _MODULES.items() for name in names}


def kernel(name: str):
    """The compiled kernel ``name`` (a template expression such as ``"ssb_sums<float2, true>"``), kept
    per device by :func:`qora.backend.kernels.get_kernel` once fetched."""
    filename = _FILE_OF.get(name)
    if filename is None:
        raise KeyError(f"no qora.ssb kernel {name!r}; known: {list(_FILE_OF)}")
    return get_kernel("qora.ssb", filename, name, name_expressions=_MODULES[filename])


def compile_modules(files=None) -> float:
    """Compile now (or load from CuPy's disk cache) every instantiation of the modules ``files`` (default all of
    :data:`_MODULES`): on a fresh machine NVRTC takes seconds a module, which a live scan must pay before its
    header, not after its first frame (issue 38: a cold final fit 14.6 s after the last frame). Returns the
    seconds it took."""
    import time

    t0 = time.perf_counter()
    for filename in _MODULES if files is None else files:
        for name in _MODULES[filename]:
            kernel(name)
    return time.perf_counter() - t0


def _xp():
    return require_cupy("the qora.ssb kernels")


@functools.lru_cache(maxsize=8)
def _roots_host(n: int) -> np.ndarray:
    return np.exp(-2j * np.pi * np.arange(n) / n).astype(np.complex64)


def _tf(flag: bool) -> str:
    return "true" if flag else "false"


# -- ssb.cu --------------------------------------------------------------------------------------
def chi_pixels(*, coefficients, k, wavelength: float, out):
    """chi (rad, float64) at each bright-field pixel ``k`` (nbf, 2) into ``out`` (nbf,), by the
    kernels' own polynomial (``chi_of``); ``coefficients``: the 12 cartesian ones of
    :func:`qora.ssb.model.chi_coefficients`. Returns ``out``.

    Reference: :func:`qora.ssb.optics.chi` at the pixels."""
    nbf = len(k)
    kernel("chi_pixels")(((nbf + 255) // 256,), (256,), (_xp().asarray(coefficients, np.float64), k, np.int32(nbf),
                                                          np.float64(wavelength), out))
    return out


def ssb_sums(*, G, k, chi0, qy, qx, coefficients, quadratic: bool, wavelength: float, alpha: float,
             thickness: float, tilt, numerator, norm, obf: bool = False) -> None:
    """Per half-plane Q (``qy``, ``qx``), the SSB sums over the bright field written into ``numerator``
    (complex128) and ``norm`` (float64): G conj(Gamma) / |Gamma| and |Gamma| over the
    double-overlap pixels, one block per Q; with ``obf``, OBF's G conj(Gamma) and |Gamma|^2 over every
    bright-field pixel (the thin model: ``thickness`` must be 0). ``chi0``: :func:`chi_pixels`; ``alpha``: the
    aperture (1/A); ``quadratic``: chi has only C10 and C12 (:func:`qora.ssb.model.quadratic_tag`).

    Reference: ``qora.ssb.session.Session._sums_arrays`` (methods "ssb", "thick" and "obf")."""
    if obf and thickness:
        raise ValueError("the OBF sums take the thin model (thickness 0)")
    xp = _xp()
    nq, nbf = int(qy.size), len(k)
    kernel(f"ssb_sums<{complex_tag(G)}, {_tf(quadratic)}, {_tf(obf)}>")(
        (nq,), (BLOCK["ssb.cu"],),
        (G, k, chi0, xp.ascontiguousarray(qy.ravel()), xp.ascontiguousarray(qx.ravel()),
         xp.asarray(coefficients, np.float64), np.int32(nq), np.int32(nbf), np.float64(wavelength),
         np.float64(alpha), np.float64(thickness), np.float64(tilt[0]), np.float64(tilt[1]), numerator, norm))


def loss_half(*, G, k, chi0, qy, qx, coefficients, quadratic: bool, scan_shape, first: int, count: int,
              wavelength: float, alpha: float, thickness: float, tilt, planes) -> None:
    """The corrected half planes -i P of the bright-field pixels ``first`` .. ``first + count`` into
    ``planes`` (count, sy, sx // 2 + 1) of G's dtype; ``qy``, ``qx``: the half plane's frequencies
    (flat, contiguous, float64 on the device), ``coefficients`` a device array of the 12.

    Reference: the corrected planes of ``qora.ssb.session.Session._mean_phase_arrays``."""
    sy, sx = scan_shape
    nbf = len(k)
    kernel(f"loss_half<{complex_tag(G)}, {_tf(quadratic)}>")(
        (sy * (sx // 2 + 1),), (BLOCK["ssb.cu"],),
        (G, k, chi0, qy, qx, coefficients, np.int32(sy), np.int32(sx), np.int32(nbf), np.int32(first),
         np.int32(count), np.float64(wavelength), np.float64(alpha), np.float64(thickness), np.float64(tilt[0]),
         np.float64(tilt[1]), planes))


def loss_moments(*, images, g0, phasor) -> None:
    """Adds each position's phasor exp(i angle) of the ``count`` pixels' images G(0, k) / N + i r
    (``images`` (count, sy, sx), real, N r; ``g0`` their G(0, k)) into ``phasor`` (sy, sx), complex128.

    Reference: the phasor sum of ``qora.ssb.session.Session._mean_phase_arrays``."""
    count = images.shape[0]
    npos = int(np.prod(images.shape[1:]))
    real = "float" if images.dtype == np.float32 else "double"
    kernel(f"loss_moments<{real}>")(((npos + 255) // 256,), (256,), (images, g0, np.int32(count), np.int64(npos),
                                                                     phasor))


def parallax_fine(*, G, factor: int, whole, frac, spectrum) -> None:
    """The fine spectrum (sy factor, sx factor) of the scattered parallax sum into ``spectrum``
    (complex64), from G (sy, sx // 2 + 1, nbf) on the device: ``whole`` (floor) and ``frac`` of each
    pixel's shift in fine pixels, (nbf, 2) host arrays.

    Reference: the scattered sum of ``qora.ssb.session.Session._parallax_scatter``."""
    xp = _xp()
    ny, nx = spectrum.shape
    sy, sx, nbf = ny // factor, nx // factor, G.shape[2]
    kernel(f"parallax_fine<{complex_tag(G)}, {factor}>")(
        (sx, sy), (BLOCK["ssb.cu"],),
        (G, np.int32(sy), np.int32(sx), np.int32(nbf), xp.asarray(np.mod(whole, [ny, nx]).astype(np.int32)),
         xp.asarray(frac.astype(np.float32)), xp.asarray(_roots_host(ny)), xp.asarray(_roots_host(nx)), spectrum))


def band_batch(*, G, k, qy, qx, table, wavelength: float, alpha: float, S, N) -> None:
    """S = sum_k G conj(Gamma) and N = sum_k |Gamma|^2 (B, nq) of each set of ``table`` (B, 15) host
    float64: the 8 cartesian coefficients C10 .. C30 (4 zeros) then thickness, tilt_y, tilt_x; one
    pass over the band's G (nq, nbf), chi from its coefficients per term.

    Reference: ``qora.ssb.band.Band._batch_arrays``."""
    nq, nbf = G.shape
    kernel(f"band_batch<{complex_tag(G)}>")(
        (nq,), (BLOCK["ssb.cu"],), (G, k, qy, qx, _xp().asarray(table), np.int32(len(table)), np.int32(nq),
                                    np.int32(nbf), np.float64(wavelength), np.float64(alpha), S, N))


# -- band.cu --------------------------------------------------------------------------------------
def _quadratic(name: str, *, G, k, k32, grid, qy, qx, table, nsets, wavelength, alpha, out, standard: bool) -> None:
    """One launch of a band.cu kernel; ``nsets`` None for the derivative kernel (no count argument)."""
    xp = _xp()
    krow, kcol, cell = grid
    nq, nbf = G.shape
    shared = table_bytes(standard=standard, sets=1 if nsets is None else nsets, rows=len(krow), cols=len(kcol))
    args = (G, k, k32, cell, krow, np.int32(len(krow)), kcol, np.int32(len(kcol)), qy, qx,
            xp.asarray(table, np.float64))
    args += (np.int32(nsets),) if nsets is not None else ()
    args += (np.int32(nq), np.int32(nbf), np.float64(wavelength), np.float64(alpha), out)
    kernel(name)((nq,), (BLOCK["band.cu"],), args, shared_mem=shared)


def band_quad_batch(*, G, k, k32, grid, qy, qx, table, wavelength: float, alpha: float, out) -> None:
    """(B, nq, 3) Re S, Im S, N into ``out`` of the B (1 to :func:`most_sets`) sets of ``table``
    (rows C10, C12a, C12b, thickness, tilt_y, tilt_x), the thick model's kernel; G complex64 (nq,
    nbf), ``k`` (nbf, 2) float64 and ``k32`` float32, ``grid`` the detector's (row ky, column kx,
    cell) tables.

    Reference: ``qora.ssb.band.Band._batch_arrays`` (S and N as there)."""
    _quadratic(batch_kernel_name(len(table), standard=False), G=G, k=k, k32=k32, grid=grid, qy=qy, qx=qx,
               table=table, nsets=len(table), wavelength=wavelength, alpha=alpha, out=out, standard=False)


def band_quad_standard(*, G, k, k32, grid, qy, qx, table, wavelength: float, alpha: float, out) -> None:
    """:func:`band_quad_batch` for sets of the standard model (thickness 0), up to 8 a launch.

    Reference: ``qora.ssb.band.Band._batch_arrays``."""
    _quadratic(batch_kernel_name(len(table), standard=True), G=G, k=k, k32=k32, grid=grid, qy=qy, qx=qx,
               table=table, nsets=len(table), wavelength=wavelength, alpha=alpha, out=out, standard=True)


def band_quad_derivatives(*, G, k, k32, grid, qy, qx, row, thick: bool, wavelength: float, alpha: float,
                          out) -> None:
    """Re S, Im S, N and their first and second derivatives in the 3 (C10, C12a, C12b) or, with
    ``thick``, 6 quadratic parameters of the set ``row``, into ``out`` (nq, 3 + 3 n + 3 n (n + 1) / 2).

    Reference: ``qora.ssb.band.Band.moments`` by the array code (``Band._array_moments``)."""
    _quadratic(f"band_quad_derivatives<{6 if thick else 3}>", G=G, k=k, k32=k32, grid=grid, qy=qy, qx=qx,
               table=row, nsets=None, wavelength=wavelength, alpha=alpha, out=out, standard=False)


_AGREEMENT_SUM = None


def agreement_sum(*, raw):
    """sum over Q of |S|^2 / N per set, from the batch kernels' (B, nq, 3) Re S, Im S, N on the device,
    in one reduction launch (a CuPy ReductionKernel): (B,) float64 on the device.

    Reference: :func:`qora.ssb.band.combine_batch_moments` (before its division by the total)."""
    global _AGREEMENT_SUM
    if _AGREEMENT_SUM is None:
        _AGREEMENT_SUM = _xp().ReductionKernel("float64 re, float64 im, float64 n", "float64 total",
                                               "(re * re + im * im) / max(n, 1e-300)", "a + b", "total = a", "0",
                                               "qora_ssb_agreement_sum")
    return _AGREEMENT_SUM(raw[..., 0], raw[..., 1], raw[..., 2], axis=1)


_DERIVATIVE_TERMS = None
_DERIVATIVE_TERMS_OP = r"""
const double* r = &moments[(long long)i * ncols];
double* o = &terms[(long long)i * nout];
const double sr = r[0], si = r[1], n = fmax(r[2], 1e-300);
const double p = sr * sr + si * si, in = 1.0 / n, in2 = in * in;
double pp[6], np_[6];
o[0] = p * in;
for (int a = 0; a < nk; ++a) {
    pp[a] = 2.0 * (sr * r[3 + 3 * a] + si * r[4 + 3 * a]);
    np_[a] = r[5 + 3 * a];
    o[1 + a] = pp[a] * in - p * np_[a] * in2;
}
int m = 0;
for (int a = 0; a < nk; ++a) {
    for (int b = a; b < nk; ++b, ++m) {
        const double* s = &r[3 + 3 * nk + 3 * m];
        const double pab = 2.0 * (r[3 + 3 * a] * r[3 + 3 * b] + r[4 + 3 * a] * r[4 + 3 * b] + sr * s[0] + si * s[1]);
        o[1 + nk + m] = pab * in - (pp[a] * np_[b] + pp[b] * np_[a]) * in2 - p * s[2] * in2
                        + 2.0 * p * np_[a] * np_[b] * in2 * in;
    }
}
"""


def derivative_sums(*, raw, parameters: int):
    """The agreement's sums over Q from ``band_quad_derivatives``' (nq, 3 + 3 n + 3 n (n + 1) / 2)
    output for n = ``parameters`` (3 or 6): sum_Q |S|^2 / N, its n first derivatives and the
    n (n + 1) / 2 second derivatives of the pairs i <= j (the kernel's order), float64 on the
    device, from one elementwise launch (each Q's terms) and one sum: no complex arrays, no
    launch per parameter (the array route took ~40 small launches and three copies to the host a
    Newton step: cProfile at full scale, 1.6 ms of host time a step where the kernel takes 1 ms on a
    thinned band).

    Reference: :func:`qora.ssb.moments.combine_moments` (before its division by the total)."""
    global _DERIVATIVE_TERMS
    cp = _xp()
    if _DERIVATIVE_TERMS is None:
        _DERIVATIVE_TERMS = cp.ElementwiseKernel("raw float64 moments, int32 ncols, int32 nk, int32 nout",
                                                 "raw float64 terms", _DERIVATIVE_TERMS_OP,
                                                 "qora_ssb_derivative_terms")
    n = int(parameters)
    if n > 6 or raw.ndim != 2 or raw.shape[1] != 3 + 3 * n + 3 * n * (n + 1) // 2 or raw.dtype != np.float64:
        raise ValueError(f"raw must be (nq, {3 + 3 * n + 3 * n * (n + 1) // 2}) float64 for {n} parameters, got "
                         f"{raw.shape} {raw.dtype}")
    nout = 1 + n + n * (n + 1) // 2
    terms = cp.empty((raw.shape[0], nout))
    _DERIVATIVE_TERMS(cp.ascontiguousarray(raw), np.int32(raw.shape[1]), np.int32(n), np.int32(nout), terms,
                      size=raw.shape[0])
    return terms.sum(axis=0)


# -- depth.cu -------------------------------------------------------------------------------------
INCOHERENT_KINDS = {"C10": 0, "C12a": 1, "C12b": 2, "thickness": 3}  # depth.cu's parameter codes


def incoherent_transfers(*, k, qy, qx, wavelength: float, limit: float, coefficients, thickness: float, parameters,
                         sections: int, order: int, out) -> None:
    """The depth sections' transfers X (rows, L, M, nbf) into ``out`` (complex64 or complex128) for
    the frequencies ``qy``, ``qx`` (rows,) (contiguous float64, the detector frame) and the pixels
    ``k`` (nbf, 2) float64: L = 1 for ``order`` 0; the transfer and its first derivatives in
    ``parameters`` (names of :data:`INCOHERENT_KINDS`) for ``order`` 1, L = 1 + P; for ``order`` 2 also
    the second of each pair i <= j.
    ``coefficients``: C10, C12a, C12b (A; 0 where not fitted); ``limit`` the aperture (1/A, as
    :func:`qora.ssb.cpu_kernels.aperture_limit`); ``thickness`` (A).

    Reference: ``qora.ssb.depth.IncoherentBand._array_transfers``."""
    from qora.backend.kernels import multiprocessors

    xp = _xp()
    rows, nbf = int(qy.size), len(k)
    threads = BLOCK["depth.cu"]
    grid = max(1, min(-(-rows * nbf // threads), 16 * multiprocessors()))
    kinds = xp.asarray([INCOHERENT_KINDS[p] for p in parameters], np.int32)
    if order not in (0, 1, 2):
        raise ValueError(f"order must be 0, 1 or 2, got {order!r}")
    kernel(f"incoherent_transfers<{complex_tag(out)}, {order}>")(
        (grid,), (threads,), (k, qy, qx, np.int32(rows), np.int32(nbf), np.float64(wavelength), np.float64(limit),
                              xp.asarray(coefficients, np.float64), np.float64(thickness), kinds,
                              np.int32(len(parameters)), np.int32(sections), out))


SUMS_TILE, TASK_WIDTH, SUMS_THREADS, TASKS_PER_THREAD = 32, 9, 256, 2  # depth.cu's constants


@functools.lru_cache(maxsize=32)
def incoherent_tasks(columns: int, sections: int, parameters: int) -> np.ndarray:
    """The task table of ``incoherent_sums`` (n, 4) int32 (kind, tile row, first column, columns): each
    of the ``columns`` x ``sections`` rows (l, m) of the transfers against G and the sections' T; with
    derivatives (``columns`` > 1) each row a = (p, m) of the first derivatives against the derivative rows
    b >= a, :data:`TASK_WIDTH` at a time."""
    m, pm = int(sections), int(parameters) * int(sections)
    tasks = [(0, r, 0, 1 + m) for r in range(columns * m)]
    if columns > 1:
        tasks += [(1, m + a, b0, min(TASK_WIDTH, pm - b0)) for a in range(pm) for b0 in range(a, pm, TASK_WIDTH)]
    if len(tasks) > SUMS_THREADS * TASKS_PER_THREAD or 1 + m > TASK_WIDTH:
        raise ValueError(f"incoherent_sums takes at most {TASK_WIDTH - 1} sections and "
                         f"{SUMS_THREADS * TASKS_PER_THREAD} tasks; {sections} sections and {parameters} parameters need {len(tasks)}")
    return np.asarray(tasks, np.int32)


def incoherent_sums(*, G, k, qy, qx, wavelength: float, limit: float, coefficients, thickness: float, parameters,
                    sections: int, order: int, sX, AX, B) -> None:
    """The incoherent model's sums over k for every frequency of ``qy``, ``qx`` (the band's, contiguous
    float64) without the transfers in global memory: sX (nq, L M) = sum_k conj(X) G, AX (nq, L M, M) =
    sum_k conj(X_lm) T_n and, for ``order`` 2, B (nq, P M, P M) = sum_k conj(T_pm) T_qn, complex128;
    G (nq, nbf) complex64 or complex128; the rest as :func:`incoherent_transfers`.

    Reference: ``qora.ssb.depth.IncoherentBand._products`` of the array code's transfers."""
    xp = _xp()
    nq, nbf = G.shape
    if not G.flags.c_contiguous:
        raise ValueError("incoherent_sums reads G row by row: give a C-contiguous array")
    P, m = len(parameters), int(sections)
    columns = 1 if order == 0 else 1 + P + P * (P + 1) // 2
    tasks = xp.asarray(incoherent_tasks(columns, m, P))
    shared = (columns * m + 1) * SUMS_TILE * 16
    function = kernel(f"incoherent_sums<{complex_tag(G)}, {0 if order == 0 else 2}>")
    if shared > 48 * 1024 and function.max_dynamic_shared_size_bytes < shared:
        function.max_dynamic_shared_size_bytes = shared  # past the default 48 KiB: an opt-in per kernel
    kinds = xp.asarray([INCOHERENT_KINDS[p] for p in parameters], np.int32)
    function((nq,), (SUMS_THREADS,),
             (G, k, qy, qx, np.int32(nbf), np.float64(wavelength), np.float64(limit),
              xp.asarray(coefficients, np.float64), np.float64(thickness), kinds, np.int32(P), np.int32(m), tasks,
              np.int32(len(tasks)), sX, AX, sX if B is None else B),
             shared_mem=shared)


def double_overlap(*, k, qy, qx, limit: float, out) -> None:
    """Per frequency of ``qy``, ``qx`` (contiguous float64), the pixels of ``k`` (nbf, 2) inside the
    aperture (radius ``limit`` 1/A) whose k - Q and k + Q are inside too, counted once per term of
    Gamma, into ``out`` (rows,) float64.

    Reference: the sum over k of A1^2 + A2^2 in ``qora.ssb.depth.IncoherentBand``."""
    kernel("double_overlap")((int(qy.size),), (256,), (k, qy, qx, np.int32(len(k)), np.float64(limit), out))


# -- ptycho.cu ------------------------------------------------------------------------------------
def _window_launch(wave):
    """One thread a (window, pixel): the grid, the block and the (batch, modes, side) arguments."""
    batch, modes, n = int(wave.shape[0]), int(wave.shape[1]), int(wave.shape[-1])
    return (-(-batch * n * n // 256),), (256,), (np.int32(batch), np.int32(modes), np.int32(n))


def ptycho_transmit(*, wave, slice_, corners, out) -> None:
    """``out`` = ``wave`` (B, K, N, N) times the windows of ``slice_`` (H, W) at ``corners`` (B, 2) int64 (each
    window's first pixel), all contiguous and of one complex dtype.

    Reference: ``wave * slice_[windows][:, None]`` in ``qora.ssb.ptycho.model.forward``."""
    grid, block, (batch, modes, n) = _window_launch(wave)
    kernel(f"ptycho_transmit<{complex_tag(wave)}>")(
        grid, block, (wave, slice_, corners, out, batch, modes, n, np.int32(slice_.shape[1])))


def ptycho_slice_adjoint(*, wave, g, slice_, corners, g_out, g_slice, lit=None) -> None:
    """The slice's adjoint in the backward pass: ``g_slice`` (H, W) += sum over modes of conj(``wave``) ``g`` at
    each window, ``lit`` (H, W, real; optional) += sum over modes of |``wave``|^2, ``g_out`` = ``g`` times the
    windows' conj(``slice_``); ``wave``, ``g``, ``g_out`` (B, K, N, N), contiguous, one complex dtype.

    Reference: ``qora.ssb.ptycho.model._scatter_add`` of those sums and the product in ``backward``."""
    grid, block, (batch, modes, n) = _window_launch(wave)
    lit = np.uint64(0) if lit is None else lit  # 0: a null pointer, no sum
    kernel(f"ptycho_slice_adjoint<{complex_tag(wave)}>")(
        grid, block, (wave, g, slice_, corners, g_out, g_slice, lit, batch, modes, n, np.int32(slice_.shape[1])))


def ptycho_far_weight(*, far, amplitudes, out, loss, floor: float, poisson: bool) -> None:
    """The misfit's weight at the detector: per (window, pixel) I = max(sum over modes of |``far``|^2, ``floor``),
    ``out`` (B, K, N, N) = w ``far`` with w = 1 - a / sqrt(I) (amplitude misfit) or 1 - a^2 / I (``poisson``), a
    the measured ``amplitudes`` (B, N, N; float32 or float64); the misfit (sqrt(I) - a)^2, or I - D - D log(I /
    max(D, floor)) with D = a^2, summed over the batch into ``loss`` (a 0-d float64, added to).

    Reference: the array code of ``qora.ssb.ptycho.model._far_weight``."""
    grid, block, (batch, modes, n) = _window_launch(far)
    amplitude = "float" if amplitudes.dtype == np.float32 else "double"
    kernel(f"ptycho_far_weight<{complex_tag(far)}, {amplitude}>")(
        grid, block, (far, amplitudes, out, loss, batch, modes, n, np.float64(floor), np.int32(bool(poisson))))


def ptycho_probe_sums(*, g, ramps, out, probe_k=None, d_positions=None) -> None:
    """``out`` (K, N, N) = the sum over the batch of conj(``ramps``) (B, N, N) times ``g`` (B, K, N, N): the probe's
    gradient in Fourier space; with ``probe_k`` (K, N, N) and ``d_positions`` (B, 2) float64 (added to), the
    positions' derivatives 2 Re sum conj(g) (-2 pi i f) ramps probe_k over each window's modes and pixels (f the
    pixel's frequency in cycles a pixel, FFT order). Complex arrays of one dtype, contiguous.

    Reference: ``qora.ssb.ptycho.model.backward``'s array code (the probe's sum and the positions' derivative)."""
    batch, modes, n = int(g.shape[0]), int(g.shape[1]), int(g.shape[-1])
    positions = d_positions is not None
    kernel(f"ptycho_probe_sums<{complex_tag(g)}>")(
        (-(-modes * n * n // 256),), (256,),
        (g, ramps, probe_k if positions else np.uint64(0), out, d_positions if positions else np.uint64(0),
         np.int32(batch), np.int32(modes), np.int32(n)), shared_mem=16 * batch if positions else 0)


def ptycho_object_step(*, objects, g, lit, peak, rate: float, share: float) -> None:
    """In place, ``objects`` (S, H, W) -= ``rate`` ``g`` / ((1 - ``share``) ``lit`` + ``share`` ``peak`` + 1e-30),
    then each pixel's modulus clamped to at most 1; ``g`` (S, H, W) of the objects' complex dtype, ``lit`` (S, H,
    W) and ``peak`` (S,) of its real dtype, contiguous.

    Reference: the array code of ``qora.ssb.ptycho.solver._object_step``."""
    slices, plane = int(objects.shape[0]), int(objects[0].size)
    kernel(f"ptycho_object_step<{complex_tag(objects)}>")(
        (-(-slices * plane // 256),), (256,),
        (objects, g, lit, peak, np.float64(rate), np.float64(share), np.int64(plane), np.int32(slices)))


# -- bslz4.cu -------------------------------------------------------------------------------------
def bslz4_shared_bytes(*, block_bytes: int, itemsize: int) -> int:
    """Dynamic shared memory of a ``bslz4_gather`` CTA: a decode buffer of ``block_bytes`` per warp
    and the block's sums (u32 a count of uint8 / uint16, u64 of uint32)."""
    warps = BLOCK["bslz4.cu"] // 32
    return warps * block_bytes + (block_bytes // itemsize) * (8 if itemsize == 4 else 4)


def bslz4_gather(*, blob, starts, sizes, tails, slot, block_bytes: int, whole: int, count: int, itemsize: int,
                 out, sums, status, frames_per_cta: int = 32) -> None:
    """Decode a batch of bitshuffle-LZ4 frames (the packed ``blob`` on the device, uint8; the
    block table ``starts`` (n, nblocks) int64, ``sizes`` int32, ``tails`` (n,) int64 of
    :func:`qora.ssb.live.bslz4_batch.block_table`) into the gathered pixels ``out`` (n, gathered)
    float32 or float64 (the columns ``slot`` (count,) int32 names, -1 none), adding every pixel into
    ``sums`` (count,) uint64; ``status`` (n,) int32 is set to 2 for a malformed block. Runs on the
    current stream; one CTA per LZ4 block index and ``frames_per_cta`` frames.

    Reference: :func:`qora.ssb.live.bslz4_batch.gather_host` (the same algorithm in Numba)."""
    n, nblocks = starts.shape
    shared = bslz4_shared_bytes(block_bytes=block_bytes, itemsize=itemsize)
    name = f"bslz4_gather<{_COUNT_TYPE[itemsize]}, {'float' if out.dtype == np.float32 else 'double'}>"
    function = kernel(name)
    if shared > 48 * 1024 and function.max_dynamic_shared_size_bytes < shared:
        function.max_dynamic_shared_size_bytes = shared  # past the default 48 KiB: an opt-in per kernel
    grid = (max(nblocks, 1), (n + frames_per_cta - 1) // frames_per_cta)
    if grid[1] > 65535:  # CUDA's limit on gridDim.y
        raise ValueError(f"a batch of {n} frames needs more than 65535 CTAs of {frames_per_cta} frames: "
                         "give smaller batches")
    function(grid, (BLOCK["bslz4.cu"],),
             (blob, starts, sizes, tails, slot, np.int32(n), np.int32(nblocks), np.int32(block_bytes), np.int32(whole),
              np.int32(count), np.int32(out.shape[1]), np.int32(frames_per_cta), out, sums, status),
             shared_mem=shared)
