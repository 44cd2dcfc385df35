"""The SSB image sums on the host: the Numba twin of ``kernels/ssb.cu``'s ``ssb_sums`` (methods "ssb", "thick", "obf").

For each half-plane frequency Q (a thread takes whole rows of G) the loop sums, over the bright-field pixels k of
the double overlap (exactly one of the disks shifted by -Q, +Q holds k), G(Q, k) conj(Gamma) / |Gamma| and |Gamma|,
Gamma = conj(psi(k)) psi(k - Q) - psi(k) conj(psi(k + Q)) with psi = A e^{-i chi}; the thick model weighs the
term by sinc(a t / 2). There the other term's aperture is 0, so Gamma / |Gamma| is one unit phasor (its sign
flipped where the sinc is negative): one sincos a pixel, where the array code (``Session._sums_arrays``, the
reference) made both terms with four complex exponentials and ~40 temporaries per chunk. chi is the kernels'
polynomial in (kx, ky); every number is float64, so the two routes agree to rounding (tests/ssb/test_ssb_core.py).
"""

from __future__ import annotations

import math

from qora.backend.host import numba_threads, openmp_passive

openmp_passive()  # before Numba loads its OpenMP runtime

import numba  # noqa: E402
import numpy as np  # noqa: E402

from qora.ssb.cpu_kernels import _inside, _sinc  # noqa: E402  (the band loops' top-hat test and sinc)

__all__ = ["chi_polynomial", "ssb_sums"]

_jit = dict(cache=True, nogil=True)


@numba.njit(inline="always", **_jit)
def chi_polynomial(c, lam, ky, kx):
    """chi (rad) at (ky, kx) (1/A) from the 12 cartesian coefficients (A) of :func:`qora.ssb.model.chi_coefficients`:
    2 pi / lambda sum_nm (lambda |k|)^(n+1) / (n+1) (C_a cos m phi + C_b sin m phi), as a polynomial."""
    x2, y2, xy = kx * kx, ky * ky, kx * ky
    r2 = x2 + y2
    l2 = lam * lam
    two = 0.5 * l2 * (c[0] * r2 + c[1] * (x2 - y2) + c[2] * 2.0 * xy)
    three = l2 * lam / 3.0 * (r2 * (c[3] * kx + c[4] * ky) + c[5] * kx * (x2 - 3.0 * y2) + c[6] * ky * (3.0 * x2 - y2))
    four = 0.25 * l2 * l2 * (c[7] * r2 * r2 + r2 * (c[8] * (x2 - y2) + c[9] * 2.0 * xy)
                             + c[10] * (x2 * x2 - 6.0 * x2 * y2 + y2 * y2) + c[11] * 4.0 * xy * (x2 - y2))
    return 2.0 * math.pi / lam * (two + three + four)


@numba.njit(inline="always", **_jit)
def _obf_term(c, lam, c0, my, mx, py, px, minus, plus):
    """OBF's whole thin-sample Gamma at one (Q, k) (both terms where both shifted disks hold k)."""
    gr = gi = 0.0
    if minus:  # e^{i (chi(k) - chi(k - Q))}
        phase = c0 - chi_polynomial(c, lam, my, mx)
        gr, gi = math.cos(phase), math.sin(phase)
    if plus:  # -e^{-i (chi(k) - chi(k + Q))}
        phase = c0 - chi_polynomial(c, lam, py, px)
        gr, gi = gr - math.cos(phase), gi + math.sin(phase)
    return gr, gi


@numba.njit(parallel=True, **_jit)
def _sums_loop(G, k, chi0, qy, qx, c, lam, limit, thickness, tilt_y, tilt_x, obf, numerator, norm):
    nq, nbf = G.shape
    for q in numba.prange(nq):
        Qy, Qx = qy[q], qx[q]
        tilt_phase = 2.0 * math.pi * (tilt_y * Qy + tilt_x * Qx)
        sr = si = sn = 0.0
        for j in range(nbf):
            ky, kx = k[j, 0], k[j, 1]
            my, mx, py, px = ky - Qy, kx - Qx, ky + Qy, kx + Qx
            minus, plus = _inside(mx, my, limit), _inside(px, py, limit)
            if obf:  # G conj(Gamma) and |Gamma|^2 over every pixel one of the shifted disks holds
                if minus or plus:
                    gr, gi = _obf_term(c, lam, chi0[j], my, mx, py, px, minus, plus)
                    g = G[q, j]
                    sr += g.real * gr + g.imag * gi
                    si += g.imag * gr - g.real * gi
                    sn += gr * gr + gi * gi
                continue
            if minus == plus:
                continue
            # minus: conj(psi(k)) psi(k - Q) = e^{i (chi(k) - chi(k - Q))}; plus: -e^{-i (chi(k) - chi(k + Q))}
            oy, ox, sign = (my, mx, 1.0) if minus else (py, px, -1.0)
            phase = chi0[j] - chi_polynomial(c, lam, oy, ox)
            a = sign * math.pi * lam * ((ky * ky + kx * kx) - (oy * oy + ox * ox))
            w = _sinc(0.5 * (a - tilt_phase) * thickness) if thickness != 0.0 else 1.0
            mag = abs(w)
            if not mag > 1e-12:
                continue
            turn = 1.0 if w >= 0.0 else -1.0  # a negative weight turns the phasor over
            ur, ui = sign * turn * math.cos(phase), turn * math.sin(phase)
            g = G[q, j]
            sr += g.real * ur + g.imag * ui  # G conj(Gamma) / |Gamma|
            si += g.imag * ur - g.real * ui
            sn += mag
        numerator[q] += complex(sr, si)
        norm[q] += sn


@numba.njit(**_jit)
def _chi_pixels(k, c, lam):
    """chi at each bright-field pixel: the same for every Q, so the sums take it from here."""
    out = np.empty(k.shape[0])
    for j in range(k.shape[0]):
        out[j] = chi_polynomial(c, lam, k[j, 0], k[j, 1])
    return out


def ssb_sums(*, G, k, coefficients, qy, qx, wavelength: float, alpha: float, thickness: float, tilt, numerator,
             norm, obf: bool = False) -> None:
    """The arguments and outputs of :func:`qora.ssb.kernels.ssb_sums` on host arrays: ``G`` (nq, nbf) with
    ``qy``, ``qx`` of the same nq half-plane frequencies (1/A), ``k`` (nbf, 2) (1/A), ``coefficients`` the 12 of
    :func:`qora.ssb.model.chi_coefficients` (A), ``alpha`` the aperture (1/A), ``thickness`` (A, 0: the standard
    model) and ``tilt`` (rad); adds into ``numerator`` (nq,) complex128 and ``norm`` (nq,) float64 (views of the
    image's half plane, raveled). ``obf``: OBF's sums (G conj(Gamma) and |Gamma|^2 over every bright-field pixel,
    the thin model).

    Reference: ``qora.ssb.session.Session._sums_arrays``."""
    numba_threads()
    k = np.ascontiguousarray(k, np.float64)
    c = np.ascontiguousarray(coefficients, np.float64)
    lam = float(wavelength)
    chi0 = _chi_pixels(k, c, lam)
    _sums_loop(G, k, chi0, np.ascontiguousarray(qy, np.float64).ravel(), np.ascontiguousarray(qx, np.float64).ravel(),
               c, lam, float(alpha), float(thickness), float(tilt[0]), float(tilt[1]), bool(obf), numerator, norm)
