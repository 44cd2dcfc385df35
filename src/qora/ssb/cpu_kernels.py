"""The band agreement's quadratic-chi passes on the CPU: Numba loops over the band's G, the host
twins of the CUDA kernels in ``kernels/band.cu``.

They evaluate what :class:`qora.ssb.band.Band`'s array code does (``_batch_arrays``,
``_array_moments``) when chi holds only C10 and C12 and the apertures are top-hat, by the same
factorisation as the CUDA kernels: with chi(k) = k^T M k, M = pi lambda [[C10 - C12a, C12b],
[C12b, C10 + C12a]] over (ky, kx), both terms of Gamma share the phasor e^{2i k.MQ}, which splits
into a detector-row factor and a detector-column factor (:func:`quadratic_tables`), so a
(Q, k, set) term costs one table product instead of two sincos, and

    Gamma(Q, k) = e^{2i k.MQ} (A1 s1 w - A2 s2 conj(w)),   w = e^{-i QMQ},

with A1, A2 the apertures at k - Q and k + Q and s1, s2 the thick model's depth weights. The
parameter sets and the detector grid come as the CUDA launchers take them (a row C10, C12a,
C12b, thickness, tilt_y, tilt_x per set, :meth:`Band._quadratic_row`; the grid of
``qora.ssb.band._detector_grid``), and the outputs have the CUDA kernels' layouts, so the band
reads either the same way. Unlike the device kernels every number here is float64 (the host has
the FP64 throughput that the GPU's consumer pipes lack), and the apertures are decided exactly as
the array code decides them (``hypot(k -+ Q) <= limit``), so the two agree to rounding.

One loop body per quantity, each a ``prange`` over the band's frequencies Q (the rows of G): the
threads take whole rows, the per-Q tables are private to a thread. Thread count:
:func:`qora.backend.host.num_threads` (``QORA_NUM_THREADS``). No ``fastmath``: the reductions
keep their written order and the parity tests hold to 1e-11 (docs/ssb-performance.md section 9 has
the cost model and where the loops stand against the FMA peak).
"""

from __future__ import annotations

import math

from qora.backend.host import numba_threads, openmp_passive

openmp_passive()  # before Numba loads its OpenMP runtime

import numba  # noqa: E402
import numpy as np  # noqa: E402

__all__ = ["band_quad_batch", "band_quad_derivatives", "band_rotation_moments", "aperture_limit", "quadratic_tables", "set_threads"]

_jit = dict(cache=True, nogil=True)


set_threads = numba_threads  # Numba's thread count for the next loop (the one CPU thread setting)


def aperture_limit(alpha: float, wavelength: float) -> float:
    """The aperture radius (1/A) as the array code's :func:`qora.ssb.optics.aperture` compares with
    it (alpha in mrad and back), so that a pixel on the edge is decided the same way."""
    return (alpha * 1e3 * wavelength) * 1e-3 / wavelength


ANCHOR = 16  # a table entry by its own sincos every ANCHOR entries, the ones between by a phase step


@numba.njit(inline="always", **_jit)
def _phasors(kk, v, table, b):
    """table[i, b] = e^{2i kk[i] v}. On a detector grid kk is evenly spaced, so between exact
    entries (every :data:`ANCHOR`) each entry is the previous one times e^{2i dk v}: the sincos of
    every row and column (most of a pass's work with few pixels per row) drop 16-fold, for an error of
    a few ulp of the phase (the spacing's rounding, ~1e-16 of |k|, times at most 15 steps)."""
    n = kk.size
    dk = (kk[n - 1] - kk[0]) / (n - 1) if n > 1 else 0.0
    step = complex(math.cos(2.0 * dk * v), math.sin(2.0 * dk * v))
    for i in range(n):
        if i % ANCHOR == 0:
            ph = 2.0 * kk[i] * v
            table[i, b] = complex(math.cos(ph), math.sin(ph))
        else:
            table[i, b] = table[i - 1, b] * step


@numba.njit(inline="always", **_jit)
def quadratic_tables(sets, lam, Qy, Qx, krow, kcol, rows, cols, w):
    """Per set b (row C10, C12a, C12b, ...) at frequency Q: the row and column factors of
    e^{2i k.MQ}, rows[r, b] = e^{2i ky_r vy} and cols[c, b] = e^{2i kx_c vx} with v = MQ, and
    w[b] = e^{-i QMQ}: ``band.cu``'s ``make_tables`` (its phase tables) in float64. ``krow`` and
    ``kcol`` evenly spaced (:func:`grid_columns` checks)."""
    pl = math.pi * lam
    for b in range(sets.shape[0]):
        c10, c12a, c12b = sets[b, 0], sets[b, 1], sets[b, 2]
        vy = pl * ((c10 - c12a) * Qy + c12b * Qx)
        vx = pl * (c12b * Qy + (c10 + c12a) * Qx)
        _phasors(krow, vy, rows, b)
        _phasors(kcol, vx, cols, b)
        ph = -(Qy * vy + Qx * vx)
        w[b] = complex(math.cos(ph), math.sin(ph))


@numba.njit(inline="always", **_jit)
def _inside(dx, dy, limit):
    """The array code's top-hat test hypot(dx, dy) <= limit, by the squared length (a few ulp from
    exact, so its answer is the same) except within 1e-12 of the edge, where hypot decides."""
    d2, l2 = dx * dx + dy * dy, limit * limit
    if abs(d2 - l2) > 1e-12 * l2:
        return d2 <= l2
    return math.hypot(dx, dy) <= limit


@numba.njit(inline="always", **_jit)
def _pixel_apertures(k, j, Qy, Qx, limit):
    """0 when pixel j has no term of Gamma at Q, else 1 (k - Q inside) + 2 (k + Q inside): the
    array code's top-hat decisions (:func:`qora.ssb.optics.aperture`) for k, k - Q and k + Q."""
    ky, kx = k[j, 0], k[j, 1]
    if not _inside(kx, ky, limit):
        return 0
    code = 0
    if _inside(kx - Qx, ky - Qy, limit):
        code += 1
    if _inside(kx + Qx, ky + Qy, limit):
        code += 2
    return code


@numba.njit(inline="always", **_jit)
def _sinc(u):
    """sin(u) / u with the array code's series below 1e-4 (``qora.ssb.model.sinc_derivatives``)."""
    if abs(u) < 1e-4:
        return 1.0 - u * u / 6.0
    return math.sin(u) / u


@numba.njit(inline="always", **_jit)
def _sinc3(u):
    """sinc(u) and its first two derivatives, as ``qora.ssb.model.sinc_derivatives``."""
    if abs(u) < 1e-4:
        return 1.0 - u * u / 6.0, -u / 3.0, -1.0 / 3.0 + u * u / 10.0
    s, c = math.sin(u), math.cos(u)
    return s / u, (u * c - s) / (u * u), -s / u - 2.0 * c / (u * u) + 2.0 * s / (u * u * u)


@numba.njit(inline="always", **_jit)
def _row_sums(tr, ti, gr, gi, xr, xi):
    """(tr, ti) += G conj(x) for every set: the standard loop's innermost, vectorised over the sets."""
    for b in range(tr.size):
        tr[b] += gr * xr[b] + gi * xi[b]
        ti[b] += gi * xr[b] - gr * xi[b]


@numba.njit(parallel=True, **_jit)
def _standard_loop(G, k, order, row_of, col_of, krow, kcol, qy, qx, sets, lam, limit, out):
    """Re S, Im S, N of every set (thickness 0) at the frequencies (qy, qx) into out (B, nf, 3).
    ``qy``, ``qx`` may hold several rotations' copies of the band's frequencies one after the
    other (nf = R nq): frequency f reads G's row f % nq. Without depth weights, S = conj(w) A1 - w A2
    with A_i = sum over the pixels with term i of G conj(e), and N = n1 + n2 - 2 n12 Re(w^2).

    The pixels are taken row by row (``order``): within a detector row e = rows[r] cols[c] has one
    row factor, so A_i = sum_r conj(rows[r]) sum_c G conj(cols[c]), and a (pixel, set) term is two
    real multiply-adds per part, over the sets (contiguous, vectorised) with no table product."""
    nq, nbf = G.shape
    nb = sets.shape[0]
    for f in numba.prange(qy.size):
        q = f % nq
        rows = np.empty((krow.size, nb), np.complex128)
        cols = np.empty((kcol.size, nb), np.complex128)
        w = np.empty(nb, np.complex128)
        quadratic_tables(sets, lam, qy[f], qx[f], krow, kcol, rows, cols, w)
        cr, ci = np.ascontiguousarray(cols.real), np.ascontiguousarray(cols.imag)
        a1 = np.zeros(nb, np.complex128)
        a2 = np.zeros(nb, np.complex128)
        # this row's sums: Re, Im of sum G conj(cols) over term 1's pixels (t0, t1), term 2's (t2, t3)
        t0, t1, t2, t3 = np.zeros(nb), np.zeros(nb), np.zeros(nb), np.zeros(nb)
        n1 = n2 = n12 = 0
        row = -1
        for jj in range(nbf + 1):
            j = order[jj] if jj < nbf else -1
            if j < 0 or row_of[j] != row:  # a new detector row: the last one's sums times its row factor
                if row >= 0:
                    for b in range(nb):
                        e = rows[row, b].conjugate()
                        a1[b] += e * complex(t0[b], t1[b])
                        a2[b] += e * complex(t2[b], t3[b])
                        t0[b] = t1[b] = t2[b] = t3[b] = 0.0
                if j < 0:
                    break
                row = row_of[j]
            code = _pixel_apertures(k, j, qy[f], qx[f], limit)
            if code == 0:
                continue
            g = G[q, j]
            gr, gi = g.real, g.imag
            c = col_of[j]
            xr, xi = cr[c], ci[c]  # this column's factors, one per set (contiguous)
            if code & 1:
                n1 += 1
                _row_sums(t0, t1, gr, gi, xr, xi)
            if code & 2:
                n2 += 1
                _row_sums(t2, t3, gr, gi, xr, xi)
            if code == 3:
                n12 += 1
        for b in range(nb):
            s = w[b].conjugate() * a1[b] - w[b] * a2[b]
            out[b, f, 0] = s.real
            out[b, f, 1] = s.imag
            out[b, f, 2] = n1 + n2 - 2.0 * n12 * (w[b] * w[b]).real


@numba.njit(parallel=True, **_jit)
def _thick_loop(G, k, row_of, col_of, krow, kcol, qy, qx, sets, lam, limit, out):
    """:func:`_standard_loop` for sets of the thick model: each term weighted by its depth weight
    s = sinc(u), u = t (pi lambda k.Q -+ pi lambda |Q|^2 / 2 - pi tau.Q)."""
    nq, nbf = G.shape
    nb = sets.shape[0]
    pl = math.pi * lam
    for f in numba.prange(qy.size):
        q = f % nq
        Qy, Qx = qy[f], qx[f]
        rows = np.empty((krow.size, nb), np.complex128)
        cols = np.empty((kcol.size, nb), np.complex128)
        w = np.empty(nb, np.complex128)
        quadratic_tables(sets, lam, Qy, Qx, krow, kcol, rows, cols, w)
        h1 = np.empty(nb)
        h2 = np.empty(nb)
        for b in range(nb):
            tilt = math.pi * (sets[b, 4] * Qy + sets[b, 5] * Qx)
            h1[b] = -0.5 * pl * (Qy * Qy + Qx * Qx) - tilt
            h2[b] = 0.5 * pl * (Qy * Qy + Qx * Qx) - tilt
        s = np.zeros(nb, np.complex128)
        n = np.zeros(nb)
        for j in range(nbf):
            code = _pixel_apertures(k, j, Qy, Qx, limit)
            if code == 0:
                continue
            g = G[q, j]
            r, c = row_of[j], col_of[j]
            kq = pl * (k[j, 0] * Qy + k[j, 1] * Qx)
            for b in range(nb):
                e = rows[r, b] * cols[c, b]
                t = sets[b, 3]
                gam = 0j
                if code & 1:
                    gam += e * w[b] * _sinc(t * (kq + h1[b]))
                if code & 2:
                    gam -= e * w[b].conjugate() * _sinc(t * (kq + h2[b]))
                s[b] += g * gam.conjugate()
                n[b] += gam.real * gam.real + gam.imag * gam.imag
        for b in range(nb):
            out[b, f, 0] = s[b].real
            out[b, f, 1] = s[b].imag
            out[b, f, 2] = n[b]


@numba.njit(inline="always", **_jit)
def _first(i, v, vd, d, u):
    """A term's first-derivative factor in parameter i (0-2 aberrations, 3-5 thickness, tilts):
    -i d_i s, or s' u_i (``band.cu``'s ``first``)."""
    if i < 3:
        return complex(0.0, -d[i] * v)
    return complex(vd * u[i - 3], 0.0)


@numba.njit(inline="always", **_jit)
def _second(i, m, v, vd, vdd, d, u, cross_ty, cross_tx):
    """A term's second-derivative factor in parameters i <= m (``band.cu``'s ``second``)."""
    if i < 3 and m < 3:
        return complex(-d[i] * d[m] * v, 0.0)
    if i < 3:
        return complex(0.0, -d[i] * vd * u[m - 3])
    cross = 0.0  # d2 u / d i d m: only (thickness, tilt)
    if i == 3 and m == 4:
        cross = cross_ty
    if i == 3 and m == 5:
        cross = cross_tx
    return complex(vdd * u[i - 3] * u[m - 3] + vd * cross, 0.0)


@numba.njit(parallel=True, **_jit)
def _derivatives_loop(G, k, row_of, col_of, krow, kcol, qy, qx, row, nparam, lam, limit, out):
    """One set ``row`` with every first and second derivative in the ``nparam`` (3: C10, C12a,
    C12b; 6: and thickness, tilt_y, tilt_x) quadratic parameters into out (nq, 3 + 3 n + 3 n (n + 1)
    / 2): ``band.cu``'s ``band_quad_derivatives`` (its layout and its derivative factors)."""
    nq, nbf = G.shape
    pl = math.pi * lam
    sets = row.reshape(1, 6)
    t = row[3]
    thick = nparam == 6
    npair = nparam * (nparam + 1) // 2
    for q in numba.prange(nq):
        Qy, Qx = qy[q], qx[q]
        rows = np.empty((krow.size, 1), np.complex128)
        cols = np.empty((kcol.size, 1), np.complex128)
        w1 = np.empty(1, np.complex128)
        quadratic_tables(sets, lam, Qy, Qx, krow, kcol, rows, cols, w1)
        w = w1[0]
        tilt = math.pi * (row[4] * Qy + row[5] * Qx)
        h1 = -0.5 * pl * (Qy * Qy + Qx * Qx) - tilt
        h2 = 0.5 * pl * (Qy * Qy + Qx * Qx) - tilt
        # d phi_term / d c_p = -2 lin_p +- quad_p, lin_p = ay_p ky + ax_p kx (term 1 +, term 2 -)
        ay = np.array([pl * Qy, -pl * Qy, pl * Qx])
        ax = np.array([pl * Qx, pl * Qx, pl * Qy])
        quad = np.array([pl * (Qy * Qy + Qx * Qx), pl * (Qx * Qx - Qy * Qy), 2.0 * pl * Qy * Qx])
        uty, utx = -math.pi * Qy * t, -math.pi * Qx * t  # d u / d tilt (both terms)
        d1 = np.empty(3)
        d2 = np.empty(3)
        u1 = np.empty(3)
        u2 = np.empty(3)
        u1[1] = u2[1] = uty
        u1[2] = u2[2] = utx
        gp = np.empty(nparam, np.complex128)
        acc_s = np.zeros(nparam + npair, np.complex128)  # the S moments
        acc_n = np.zeros(nparam + npair)  # the N moments
        s0 = 0j
        n0 = 0.0
        for j in range(nbf):
            code = _pixel_apertures(k, j, Qy, Qx, limit)
            if code == 0:
                continue
            g = G[q, j]
            ky, kx = k[j, 0], k[j, 1]
            e = rows[row_of[j], 0] * cols[col_of[j], 0]
            f1 = e * w if code & 1 else 0j
            f2 = e * w.conjugate() if code & 2 else 0j
            v1 = v2 = 1.0
            v1d = v2d = v1dd = v2dd = 0.0
            a1 = a2 = 0.0
            if thick:
                kq = pl * (ky * Qy + kx * Qx)
                a1, a2 = kq + h1, kq + h2
                if t != 0.0:
                    v1, v1d, v1dd = _sinc3(t * a1)
                    v2, v2d, v2dd = _sinc3(t * a2)
                else:  # s = 1, s' = 0, s'' = -1/3
                    v1dd = v2dd = -1.0 / 3.0
            u1[0], u2[0] = a1, a2
            for i in range(3):
                lin = ay[i] * ky + ax[i] * kx
                d1[i] = -2.0 * lin + quad[i]
                d2[i] = -2.0 * lin - quad[i]
            gam = f1 * v1 - f2 * v2
            s0 += g * gam.conjugate()
            n0 += gam.real * gam.real + gam.imag * gam.imag
            for i in range(nparam):
                gp[i] = f1 * _first(i, v1, v1d, d1, u1) - f2 * _first(i, v2, v2d, d2, u2)
                acc_s[i] += g * gp[i].conjugate()
                acc_n[i] += 2.0 * (gam.conjugate() * gp[i]).real
            pair = nparam
            for i in range(nparam):
                for m in range(i, nparam):
                    gij = (f1 * _second(i, m, v1, v1d, v1dd, d1, u1, -math.pi * Qy, -math.pi * Qx)
                           - f2 * _second(i, m, v2, v2d, v2dd, d2, u2, -math.pi * Qy, -math.pi * Qx))
                    acc_s[pair] += g * gij.conjugate()
                    acc_n[pair] += 2.0 * ((gp[m].conjugate() * gp[i]).real + (gam.conjugate() * gij).real)
                    pair += 1
        out[q, 0] = s0.real
        out[q, 1] = s0.imag
        out[q, 2] = n0
        for i in range(nparam + npair):
            out[q, 3 + 3 * i] = acc_s[i].real
            out[q, 4 + 3 * i] = acc_s[i].imag
            out[q, 5 + 3 * i] = acc_n[i]


@numba.njit(inline="always", **_jit)
def _soft_along(ky, kx, radius, width, py, px, pyy, pxx):
    """The soft aperture at k and its first and second derivatives along a path with dk/dtheta =
    (py, px), d2k/dtheta2 = (pyy, pxx): :func:`qora.ssb.model.soft_aperture`."""
    r = math.hypot(ky, kx)
    a = 0.5 * (1.0 - math.tanh((r - radius) / (2.0 * width)))
    ar = -a * (1.0 - a) / width
    arr = a * (1.0 - a) * (1.0 - 2.0 * a) / (width * width)
    rs = max(r, 1e-300)
    ur = (ky * py + kx * px) / rs
    speed2 = py * py + px * px
    return a, ar * ur, arr * ur * ur + ar * ((speed2 - ur * ur) / rs + (ky * pyy + kx * pxx) / rs)


@numba.njit(inline="always", **_jit)
def _quadratic_basis(ky, kx, py, px, pyy, pxx, pl, b, d, dd):
    """B_p(k) of C10, C12a, C12b (chi per A, pi lambda k^T M_p k) and their first and second
    derivatives along the path, into b, d, dd (3,): :func:`qora.ssb.model.basis_derivatives`."""
    b[0] = pl * (ky * ky + kx * kx)
    d[0] = 2.0 * pl * (ky * py + kx * px)
    dd[0] = 2.0 * pl * (py * py + px * px + ky * pyy + kx * pxx)
    b[1] = pl * (kx * kx - ky * ky)
    d[1] = 2.0 * pl * (kx * px - ky * py)
    dd[1] = 2.0 * pl * (px * px - py * py + kx * pxx - ky * pyy)
    b[2] = 2.0 * pl * kx * ky
    d[2] = 2.0 * pl * (kx * py + ky * px)
    dd[2] = 2.0 * pl * (2.0 * px * py + kx * pyy + ky * pxx)


@numba.njit(parallel=True, **_jit)
def _rotation_loop(G, k, a0, qy, qx, coef, lam, radius, width, order, out):
    """One set of the standard model (``coef``: C10, C12a, C12b) with the scan rotation among the
    parameters and soft apertures: Re S, Im S, N and, for ``order`` 2, their first and second
    derivatives in (C10, C12a, C12b, rotation) into out (nq, 3 + 12 + 30), the layout of
    :func:`_derivatives_loop` with the rotation as the fourth parameter. ``a0`` (nbf,): the soft
    aperture at each pixel; (qy, qx) the band's frequencies at the set's rotation, which turn
    with dQ/dtheta = (Qx, -Qy). Reference: ``Band._array_moments`` of a band fitting the rotation."""
    nq, nbf = G.shape
    pl = math.pi * lam
    npar = 4
    npair = 10
    for q in numba.prange(nq):
        Qy, Qx = qy[q], qx[q]
        b0 = np.empty(3)
        bs = np.empty(3)
        bd = np.empty(3)
        bdd = np.empty(3)
        junk = np.empty(3)
        dp = np.empty((2, 3))  # per term: the phase difference per unit coefficient, its rotation derivatives
        dpd = np.empty((2, 3))
        dpdd = np.empty((2, 3))
        v = np.empty(2, np.complex128)
        gt = np.empty((2, npar), np.complex128)
        ht = np.empty((2, npair), np.complex128)
        gp = np.empty(npar, np.complex128)
        acc_s = np.zeros(npar + npair, np.complex128)
        acc_n = np.zeros(npar + npair)
        s0 = 0j
        n0 = 0.0
        for j in range(nbf):
            ky, kx = k[j, 0], k[j, 1]
            _quadratic_basis(ky, kx, 0.0, 0.0, 0.0, 0.0, pl, b0, junk, junk)
            for term in range(2):
                sg = -1.0 if term == 0 else 1.0  # term 1 at k - Q, term 2 at k + Q
                py, px, pyy, pxx = sg * Qx, -sg * Qy, -sg * Qy, -sg * Qx
                ksy, ksx = ky + sg * Qy, kx + sg * Qx
                sa, sa1, sa2 = _soft_along(ksy, ksx, radius, width, py, px, pyy, pxx)
                a, a_d, a_dd = a0[j] * sa, a0[j] * sa1, a0[j] * sa2
                _quadratic_basis(ksy, ksx, py, px, pyy, pxx, pl, bs, bd, bdd)
                phi = phi_d = phi_dd = 0.0
                for p in range(3):  # term 1: B(k - Q) - B(k); term 2: B(k) - B(k + Q)
                    dp[term, p] = bs[p] - b0[p] if term == 0 else b0[p] - bs[p]
                    dpd[term, p] = bd[p] if term == 0 else -bd[p]
                    dpdd[term, p] = bdd[p] if term == 0 else -bdd[p]
                    phi += coef[p] * dp[term, p]
                    phi_d += coef[p] * dpd[term, p]
                    phi_dd += coef[p] * dpdd[term, p]
                e = complex(math.cos(phi), -math.sin(phi))
                v[term] = a * e
                if order == 0:
                    continue
                for p in range(3):
                    gt[term, p] = complex(0.0, -a * dp[term, p]) * e
                gt[term, 3] = complex(a_d, -a * phi_d) * e
                pair = 0
                for i in range(npar):
                    for m in range(i, npar):
                        if m < 3:
                            h = complex(-a * dp[term, i] * dp[term, m], 0.0)
                        elif i < 3:
                            h = complex(-a * dp[term, i] * phi_d, -a_d * dp[term, i] - a * dpd[term, i])
                        else:
                            h = complex(a_dd - a * phi_d * phi_d, -2.0 * a_d * phi_d - a * phi_dd)
                        ht[term, pair] = h * e
                        pair += 1
            g = G[q, j]
            gam = v[0] - v[1]
            s0 += g * gam.conjugate()
            n0 += gam.real * gam.real + gam.imag * gam.imag
            if order == 0:
                continue
            for i in range(npar):
                gp[i] = gt[0, i] - gt[1, i]
                acc_s[i] += g * gp[i].conjugate()
                acc_n[i] += 2.0 * (gam.conjugate() * gp[i]).real
            pair = 0
            for i in range(npar):
                for m in range(i, npar):
                    gij = ht[0, pair] - ht[1, pair]
                    acc_s[npar + pair] += g * gij.conjugate()
                    acc_n[npar + pair] += 2.0 * ((gp[m].conjugate() * gp[i]).real + (gam.conjugate() * gij).real)
                    pair += 1
        out[q, 0] = s0.real
        out[q, 1] = s0.imag
        out[q, 2] = n0
        if order == 0:
            continue
        for i in range(npar + npair):
            out[q, 3 + 3 * i] = acc_s[i].real
            out[q, 4 + 3 * i] = acc_s[i].imag
            out[q, 5 + 3 * i] = acc_n[i]


def grid_columns(grid):
    """(ky of each row, kx of each column, row of each pixel, column of each pixel) of the detector
    grid ``qora.ssb.band._detector_grid`` makes, the rows and columns filled in to an evenly spaced
    grid (what :func:`quadratic_tables` steps along) where the bright field skips one: what the
    launchers here take as ``grid``. None when a row or column lies off an evenly spaced grid (the
    band then keeps to the array code)."""
    krow, kcol, cell = (np.asarray(a) for a in grid)
    row_of, col_of = cell & 0xFFFF, cell >> 16
    out = []
    for kk, index in ((krow, row_of), (kcol, col_of)):
        kk = np.asarray(kk, np.float64)
        if len(kk) > 1:
            d = np.diff(kk)
            spacing = d.min()
            if spacing <= 0 or np.any(np.abs(d / spacing - np.round(d / spacing)) > 1e-6):
                return None
            steps = np.concatenate([[0], np.cumsum(np.round(d / spacing).astype(np.int64))])
            full = np.empty(steps[-1] + 1)
            full[steps] = kk
            missing = np.setdiff1d(np.arange(len(full)), steps)
            full[missing] = kk[0] + missing * spacing
            kk, index = full, steps[index]
        out.append((np.ascontiguousarray(kk), np.ascontiguousarray(index, np.int64)))
    return out[0][0], out[1][0], out[0][1], out[1][1]


def band_quad_batch(*, G, k, grid, qy, qx, table, wavelength: float, alpha: float, out, k32=None) -> None:
    """(B, nf, 3) Re S, Im S, N into ``out`` of the B sets of ``table`` (rows C10, C12a, C12b,
    thickness, tilt_y, tilt_x), all in one pass over G (nq, nbf) whatever B; the standard-model
    loop when no set has a thickness. ``qy``, ``qx`` (nf,): the band's frequencies in the detector
    frame (1/A), or R rotations' copies of them one after the other (nf = R nq). ``alpha``: the
    aperture (1/A); ``k`` (nbf, 2) float64; ``grid`` the detector grid of :func:`grid_columns`.
    ``k32`` is the CUDA launchers' and unused here.

    Reference: ``qora.ssb.band.Band._batch_arrays`` (S and N as there)."""
    table = np.ascontiguousarray(table, np.float64).reshape(-1, 6)
    krow, kcol, row_of, col_of = grid
    set_threads()
    args = (np.ascontiguousarray(G), np.ascontiguousarray(k, np.float64))
    rest = (row_of, col_of, krow, kcol, np.ascontiguousarray(qy, np.float64), np.ascontiguousarray(qx, np.float64),
            table, float(wavelength), aperture_limit(alpha, wavelength), out)
    if np.any(table[:, 3] != 0.0):
        _thick_loop(*args, *rest)
    else:  # the pixels row by row (stable: within a row in the band's order)
        _standard_loop(*args, np.argsort(row_of, kind="stable"), *rest)


def band_quad_derivatives(*, G, k, grid, qy, qx, row, thick: bool, wavelength: float, alpha: float, out,
                          k32=None) -> None:
    """Re S, Im S, N and their first and second derivatives in the 3 (C10, C12a, C12b) or, with
    ``thick``, 6 quadratic parameters of the set ``row``, into ``out`` (nq, 3 + 3 n + 3 n (n + 1) / 2),
    the layout of :func:`qora.ssb.kernels.band_quad_derivatives`.

    Reference: ``qora.ssb.band.Band.moments`` by the array code (``Band._array_moments``)."""
    krow, kcol, row_of, col_of = grid
    set_threads()
    _derivatives_loop(np.ascontiguousarray(G), np.ascontiguousarray(k, np.float64), row_of, col_of, krow, kcol,
                      np.ascontiguousarray(qy, np.float64), np.ascontiguousarray(qx, np.float64),
                      np.ascontiguousarray(row, np.float64), 6 if thick else 3, float(wavelength),
                      aperture_limit(alpha, wavelength), out)


ROTATION_PARAMETERS = ("C10", "C12a", "C12b", "rotation")  # the order of band_rotation_moments' derivatives


def band_rotation_moments(*, G, k, aperture0, qy, qx, coefficients, wavelength: float, radius: float, width: float,
                          order: int, out) -> None:
    """Re S, Im S, N of one set of the standard model (``coefficients`` C10, C12a, C12b in A) at the
    scan rotation that turned the band's frequencies to (``qy``, ``qx``), with soft apertures
    (``radius``, ``width`` in 1/A; ``aperture0`` (nbf,) the soft aperture at each pixel), and for
    ``order`` 2 every first and second derivative in :data:`ROTATION_PARAMETERS`, into ``out``
    (nq, 45), the layout of :func:`band_quad_derivatives` with n = 4.

    Reference: ``qora.ssb.band.Band._array_moments`` of a band with ``"rotation"`` among its
    parameters."""
    set_threads()
    _rotation_loop(np.ascontiguousarray(G), np.ascontiguousarray(k, np.float64),
                   np.ascontiguousarray(aperture0, np.float64), np.ascontiguousarray(qy, np.float64),
                   np.ascontiguousarray(qx, np.float64), np.ascontiguousarray(coefficients, np.float64),
                   float(wavelength), float(radius), float(width), int(order), out)
