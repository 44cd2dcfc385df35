"""The depth-incoherent model's sums over k on the CPU: one Numba loop over the band's frequencies, the
host twin of ``kernels/depth.cu`` (``incoherent_sums``).

For each frequency Q (a thread takes whole rows of G) and each bright-field pixel k with a term of
Gamma, the loop makes both terms once (apertures, aberration phase, depth phase and the sinc of the
section width), then every section's transfer with its first and second derivatives (the columns of
:meth:`qora.ssb.depth.IncoherentBand._transfers`), and adds their products into the per-Q sums

    sX[l, m] = sum_k conj(X_lm) G,   AX[l, m, n] = sum_k conj(X_lm) T_n,   B[a, b] = sum_k conj(T_a) T_b

(a, b over the first derivatives' (p, m)), the outputs of :meth:`IncoherentBand._products`. Nothing of
the band's (Q, k) size is made: a pixel's transfers live in a (L, M) scratch array of the thread. Every
number is float64 and the apertures are decided as the array code decides them, so the two agree to
rounding (tests/ssb/test_ssb_depth.py). Thread count: :func:`qora.backend.host.num_threads`.
"""

from __future__ import annotations

import math

from qora.backend.host import numba_threads, openmp_passive

openmp_passive()  # before Numba loads its OpenMP runtime

import numba  # noqa: E402
import numpy as np  # noqa: E402

from qora.ssb.cpu_kernels import _phasors, _pixel_apertures, _sinc3, quadratic_tables  # noqa: E402  (the band
# loops' sinc and its derivatives, their row and column phase tables and aperture tests)

__all__ = ["incoherent_sums", "incoherent_values", "double_overlap", "KINDS"]

KINDS = {"C10": 0, "C12a": 1, "C12b": 2, "thickness": 3}  # the parameter codes, as depth.cu's
_jit = dict(cache=True, nogil=True)


@numba.njit(inline="always", **_jit)
def _term(ky, kx, qy, qx, sign, lam, limit, c, d):
    """One term of Gamma at (Q, k) (term 1 at k - Q for ``sign`` -1, term 2 at k + Q): its base s e^{-i phase}
    (0 where an aperture cuts it) and depth phase a; its basis differences of C10, C12a, C12b into ``d``."""
    sy, sx = ky + sign * qy, kx + sign * qx
    if not (math.hypot(sx, sy) <= limit and math.hypot(kx, ky) <= limit):
        return 0j, 0.0
    pl = math.pi * lam
    b10 = pl * ((sy * sy + sx * sx) - (ky * ky + kx * kx))
    o = 1.0 if sign < 0 else -1.0  # term 1: B(k - Q) - B(k); term 2: B(k) - B(k + Q)
    d[0] = o * b10
    d[1] = o * pl * ((sx * sx - sy * sy) - (kx * kx - ky * ky))
    d[2] = o * 2.0 * pl * (sy * sx - ky * kx)
    phase = c[0] * d[0] + c[1] * d[1] + c[2] * d[2]
    amp = 1.0 if sign < 0 else -1.0
    return amp * complex(math.cos(phase), -math.sin(phase)), -o * b10


@numba.njit(**_jit)
def _pixel_columns(base, a, d, t, M, kinds, order, X, E):
    """Add one term's contribution to every section's columns X (L, M) at this pixel (``E``: an (M,) scratch for
    the sections' phasors)."""
    P = kinds.size
    h, h1, h2 = _sinc3(a * t / (2.0 * M))
    h1 /= 2.0 * M
    h2 /= 4.0 * M * M
    _section_phasors(a, t, M, E)
    for m in range(M):
        cm = (m + 0.5) / M - 0.5
        g = E[m]
        f = g * h
        X[0, m] += base * f
        if order == 0:
            continue
        f1 = complex(h1, cm * h) * g  # df/du = (i c h + h1) g
        f2 = complex(h2 - cm * cm * h, 2.0 * cm * h1) * g
        n = 1 + P
        for i in range(P):
            ai = kinds[i] < 3
            di = d[kinds[i]] if ai else 0.0
            X[1 + i, m] += (-1j * di) * base * f if ai else base * f1 * a
            for j in range(i, P):
                aj = kinds[j] < 3
                dj = d[kinds[j]] if aj else 0.0
                if ai and aj:
                    X[n, m] += -di * dj * base * f
                elif ai or aj:
                    X[n, m] += (-1j * (di if ai else dj)) * base * f1 * a
                else:
                    X[n, m] += base * f2 * a * a
                n += 1


@numba.njit(parallel=True, **_jit)
def _sums_loop(G, k, qy, qx, lam, limit, c, t, kinds, M, order, sX, AX, B):
    nq, nbf = G.shape
    P = kinds.size
    L = 1 if order == 0 else 1 + P + P * (P + 1) // 2
    PM = P * M
    for q in numba.prange(nq):
        X = np.empty((L, M), np.complex128)
        s = np.zeros((L, M), np.complex128)
        A = np.zeros((L, M, M), np.complex128)
        Bq = np.zeros((PM, PM), np.complex128)
        d1 = np.empty(3)
        d2 = np.empty(3)
        E = np.empty(M, np.complex128)
        for j in range(nbf):
            ky, kx = k[j, 0], k[j, 1]
            base1, a1 = _term(ky, kx, qy[q], qx[q], -1.0, lam, limit, c, d1)
            base2, a2 = _term(ky, kx, qy[q], qx[q], 1.0, lam, limit, c, d2)
            if base1 == 0 and base2 == 0:
                continue
            X[:] = 0
            if base1 != 0:
                _pixel_columns(base1, a1, d1, t, M, kinds, order, X, E)
            if base2 != 0:
                _pixel_columns(base2, a2, d2, t, M, kinds, order, X, E)
            g = G[q, j]
            for l in range(L):
                for m in range(M):
                    cx = X[l, m].conjugate()
                    s[l, m] += cx * g
                    for n in range(M):
                        A[l, m, n] += cx * X[0, n]
            if order:
                for a in range(PM):
                    xa = X[1 + a // M, a % M].conjugate()
                    for b in range(a, PM):
                        Bq[a, b] += xa * X[1 + b // M, b % M]
        sX[q] = s
        AX[q] = A
        if order:
            for a in range(PM):
                for b in range(a, PM):
                    B[q, a // M, a % M, b // M, b % M] = Bq[a, b]
                    B[q, b // M, b % M, a // M, a % M] = Bq[a, b].conjugate()


@numba.njit(inline="always", **_jit)
def _section_phasors(a, t, M, E):
    """E[m] = e^{i c_m a t} for the M sections of a film of thickness ``t`` and a term of depth phase ``a``,
    c_m = (m + 1/2) / M - 1/2 the section's centre (:func:`_phasors_of` from one sincos)."""
    u = a * t / (2.0 * M)
    _phasors_of(complex(math.cos(u), math.sin(u)), M, E)


@numba.njit(inline="always", **_jit)
def _phasors_of(half, M, E):
    """:func:`_section_phasors` from half = e^{iu}, u = a t / 2M: the phases step by 2u from -(M - 1) u, so one
    sincos makes all M (a recurrence of M products, ~M ulp)."""
    step = half * half
    first = 1.0 + 0j
    for _ in range(M - 1):
        first *= half
    E[0] = first.conjugate()
    for m in range(1, M):
        E[m] = E[m - 1] * step


@numba.njit(inline="always", **_jit)
def _section_factors(a, t, M, F):
    """Each section's weight of a term: e^{i c_m a t} sinc(a t / 2M) (:func:`_section_phasors`)."""
    _section_phasors(a, t, M, F)
    h = _sinc3(a * t / (2.0 * M))[0]
    for m in range(M):
        F[m] *= h


@numba.njit(parallel=True, **_jit)
def _values_loop(G, k, row_of, col_of, krow, kcol, qy, qx, lam, limit, coefs, thick, slot, M, sX, AX):
    nq, nbf = G.shape
    S = coefs.shape[0]
    R = max(slot.max() + 1, 1)
    pl = math.pi * lam
    for q in numba.prange(nq):
        Qy, Qx = qy[q], qx[q]
        # each set's phasors on the detector grid: term 1's e^{-i(K + L.k)} = w rows[r] cols[c], term 2's -conj(w)
        # times the same (the terms' phases differ by 2K at every pixel of Q), with no sincos a pixel
        rows = np.empty((krow.size, S), np.complex128)
        cols = np.empty((kcol.size, S), np.complex128)
        w = np.empty(S, np.complex128)
        quadratic_tables(coefs, lam, Qy, Qx, krow, kcol, rows, cols, w)
        # each thickness's depth phasors: e^{iu}, u = a t / 2M with a = -+ pi lam |Q|^2 + 2 pi lam k.Q, a table too
        hrows = np.empty((krow.size, S), np.complex128)
        hcols = np.empty((kcol.size, S), np.complex128)
        q2 = pl * (Qy * Qy + Qx * Qx)
        h0 = np.empty(S, np.complex128)  # term 1's e^{-i pi lam |Q|^2 t / 2M}; term 2's its conjugate
        for i in range(S):
            if i == 0 or thick[i] != thick[i - 1]:
                _phasors(krow, pl * thick[i] * Qy / (2.0 * M), hrows, i)
                _phasors(kcol, pl * thick[i] * Qx / (2.0 * M), hcols, i)
                v = q2 * thick[i] / (2.0 * M)
                h0[i] = complex(math.cos(v), -math.sin(v))
        s = np.zeros((S, M), np.complex128)
        A = np.zeros((S, M, M), np.complex128)
        P = np.zeros((R, M, M), np.complex128)  # a shared run's AX less its cross terms (shared_runs)
        C = np.zeros((R, M, M), np.complex128)  # and its cross sum
        F1 = np.empty(M, np.complex128)
        F2 = np.empty(M, np.complex128)
        X = np.empty(M, np.complex128)
        for j in range(nbf):
            code = _pixel_apertures(k, j, Qy, Qx, limit)
            if code == 0:
                continue
            on1, on2 = (code & 1) != 0, (code & 2) != 0
            r, c = row_of[j], col_of[j]
            kq = 2.0 * pl * (k[j, 0] * Qy + k[j, 1] * Qx)
            g = G[q, j]
            for i in range(S):
                if i == 0 or thick[i] != thick[i - 1]:  # the sections' weights change with the thickness alone
                    h = hrows[r, i] * hcols[c, i]
                    _section_weights(h0[i] * h, (kq - q2) * thick[i] / (2.0 * M), M, F1)
                    _section_weights(h0[i].conjugate() * h, (kq + q2) * thick[i] / (2.0 * M), M, F2)
                    if slot[i] >= 0:
                        _shared_sums(F1, F2, on1, on2, M, P[slot[i]], C[slot[i]])
                e = rows[r, i] * cols[c, i]
                b1 = w[i] * e if on1 else 0j
                b2 = -w[i].conjugate() * e if on2 else 0j
                for m in range(M):
                    X[m] = b1 * F1[m] + b2 * F2[m]
                for m in range(M):
                    cx = X[m].conjugate()
                    s[i, m] += cx * g
                    if slot[i] < 0:
                        for n in range(m, M):  # A is Hermitian: its upper triangle, the rest below
                            A[i, m, n] += cx * X[n]
        for i in range(S):
            if slot[i] >= 0:  # conj(b1) b2 = -conj(w)^2, the same at every pixel of Q
                _shared_matrix(P[slot[i]], C[slot[i]], -w[i].conjugate() ** 2, M, A[i])
            for m in range(M):
                for n in range(m):
                    A[i, m, n] = A[i, n, m].conjugate()
            sX[i, q] = s[i]
            AX[i, q] = A[i]


@numba.njit(inline="always", **_jit)
def _section_weights(half, u, M, F):
    """:func:`_section_factors` from u = a t / 2M and half = e^{iu} (made from the grid's tables): the phasors by
    :func:`_phasors_of`, the sinc from half's imaginary part, sin u."""
    _phasors_of(half, M, F)
    sinc = 1.0 - u * u / 6.0 if abs(u) < 1e-4 else half.imag / u
    for m in range(M):
        F[m] *= sinc


@numba.njit(inline="always", **_jit)
def _shared_sums(F1, F2, on1, on2, M, P, C):
    """One pixel's part of a shared run's P (the upper triangle of the terms' own products) and C (the cross
    product conj(F1_m) F2_n, where both terms are in their apertures): see :func:`shared_runs`."""
    for m in range(M):
        c1, c2 = F1[m].conjugate(), F2[m].conjugate()
        for n in range(m, M):
            if on1:
                P[m, n] += c1 * F1[n]
            if on2:
                P[m, n] += c2 * F2[n]
        if on1 and on2:
            for n in range(M):
                C[m, n] += c1 * F2[n]


@numba.njit(inline="always", **_jit)
def _shared_matrix(P, C, w, M, A):
    """AX's upper triangle of a set of a shared run: P + w C + conj(w) C^H."""
    wc = w.conjugate()
    for m in range(M):
        for n in range(m, M):
            A[m, n] = P[m, n] + w * C[m, n] + wc * C[n, m].conjugate()


def shared_runs(thicknesses, *, shortest: int = 3) -> np.ndarray:
    """For each set, the slot of its run of consecutive sets of one thickness where the run is at least
    ``shortest`` long, else -1. The sets of such a run share AX but for one factor: a set's two terms differ in
    phase by 2K at every pixel of a frequency, so AX = P + w C + conj(w) C^H with P and C
    sums over the pixels made once for the run and w = -e^{2iK} the set's own (22 complex products a pixel and set
    -> 12, the run's P and C 36 once; a run of one or two keeps the direct sum)."""
    t = np.asarray(thicknesses, np.float64).ravel()
    slot = np.full(t.size, -1, np.int64)
    start, count = 0, 0
    for i in range(1, t.size + 1):
        if i == t.size or t[i] != t[start]:
            if i - start >= shortest:
                slot[start:i] = count
                count += 1
            start = i
    return slot


@numba.njit(parallel=True, **_jit)
def _overlap_loop(k, qy, qx, limit, out):
    for q in numba.prange(qy.size):
        count = 0.0
        for j in range(k.shape[0]):
            ky, kx = k[j, 0], k[j, 1]
            if not math.hypot(kx, ky) <= limit:
                continue
            count += (math.hypot(kx - qx[q], ky - qy[q]) <= limit) + (math.hypot(kx + qx[q], ky + qy[q]) <= limit)
        out[q] = count


def double_overlap(*, k, qy, qx, limit: float, out) -> None:
    """Per frequency, the bright-field pixels whose k - Q and k + Q are inside the aperture too, counted
    once per term of Gamma, into ``out`` (nq,) float64.

    Reference: the sum over k of A1^2 + A2^2 in ``qora.ssb.depth.IncoherentBand``."""
    numba_threads()
    _overlap_loop(np.ascontiguousarray(k, np.float64), np.ascontiguousarray(qy, np.float64),
                  np.ascontiguousarray(qx, np.float64), float(limit), out)


def incoherent_sums(*, G, k, qy, qx, wavelength: float, limit: float, coefficients, thickness: float, parameters,
                    sections: int, order: int, sX, AX, B) -> None:
    """sX (nq, L, M), AX (nq, L, M, M) and, for ``order`` 2, B (nq, P, M, P, M), complex128, of the band's
    rows of G (nq, nbf) at the frequencies ``qy``, ``qx`` (nq,) (the detector frame, 1/A); the arguments as
    :func:`qora.ssb.kernels.incoherent_sums`.

    Reference: ``qora.ssb.depth.IncoherentBand._products`` of the array code's transfers."""
    numba_threads()
    kinds = np.asarray([KINDS[p] for p in parameters], np.int64)
    dummy = np.empty((1, 1, 1, 1, 1), np.complex128)
    _sums_loop(np.ascontiguousarray(G), np.ascontiguousarray(k, np.float64), np.ascontiguousarray(qy, np.float64),
               np.ascontiguousarray(qx, np.float64), float(wavelength), float(limit),
               np.asarray(coefficients, np.float64), float(thickness), kinds, int(sections), 0 if order == 0 else 2,
               sX, AX, dummy if B is None else B)


def incoherent_values(*, G, k, grid, qy, qx, wavelength: float, limit: float, coefficients, thicknesses,
                      sections: int, sX, AX) -> None:
    """The value sums of :func:`incoherent_sums` (``order`` 0: sX (S, nq, M), AX (S, nq, M, M), complex128) of S
    parameter sets in one pass over G: ``coefficients`` (S, 3) C10, C12a, C12b (A) and ``thicknesses`` (S,) (A).
    No sincos a pixel: on the detector's grid each set's phasors are a row's and a column's factor (the tables of
    the standard model's loop, :func:`qora.ssb.cpu_kernels.quadratic_tables`), each thickness's depth phasor too;
    the sections' weights are made once for each run of consecutive sets of one thickness, and AX of such a run
    from sums the run shares (:func:`shared_runs`). ``grid``: the detector grid of
    :func:`qora.ssb.cpu_kernels.grid_columns` (k's rows and columns evenly spaced).

    Reference: :func:`incoherent_sums` of each set."""
    numba_threads()
    krow, kcol, row_of, col_of = grid
    _values_loop(np.ascontiguousarray(G), np.ascontiguousarray(k, np.float64), row_of, col_of, krow, kcol,
                 np.ascontiguousarray(qy, np.float64), np.ascontiguousarray(qx, np.float64), float(wavelength),
                 float(limit), np.ascontiguousarray(coefficients, np.float64).reshape(-1, 3),
                 np.ascontiguousarray(thicknesses, np.float64).ravel(), shared_runs(thicknesses), int(sections), sX, AX)
