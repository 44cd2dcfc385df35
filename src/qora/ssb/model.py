"""The fits' parametrisation of chi: the parameters by name, the aberration basis with its exact
derivatives, the soft aperture and the depth weight's sinc, and chi as the kernels take it.

Parameters p (the fitted ones, by name): aberrations in cartesian form, ``C10``, ``C12a``,
``C12b``, ``C21a``, ``C21b``, ``C23a``, ``C23b``, ``C30`` (A; C_nm,a = C cos(m phi), C_nm,b =
C sin(m phi)), and the thick-sample ``thickness`` (A), ``tilt_y``, ``tilt_x`` (rad). chi is
linear in the cartesian coefficients, chi = sum_p c_p B_p(k) (:func:`basis`). The electron optics
themselves (wavelength, :class:`~qora.ssb.optics.Aberrations`, chi, the aperture) are
:mod:`qora.ssb.optics`.
"""

from __future__ import annotations

import numpy as np

from qora.backend.core import xp_of
from qora.ssb.optics import KNOWN_ABERRATIONS, Aberrations

__all__ = ["ABERRATION_PARAMETERS", "THICK_PARAMETERS", "QUADRATIC_PARAMETERS", "KERNEL_COEFFICIENTS",
           "parameters_to_aberrations", "basis", "basis_derivatives", "soft_aperture", "sinc_derivatives",
           "chi_coefficients", "quadratic_tag"]

# the Cartesian aberration parameters a fit may take (all in A; C_nm,a = C cos(m phi), C_nm,b = C sin(m phi)),
# and the thick-sample ones: thickness (A), tilt_y and tilt_x (rad)
ABERRATION_PARAMETERS = ("C10", "C12a", "C12b", "C21a", "C21b", "C23a", "C23b", "C30")
THICK_PARAMETERS = ("thickness", "tilt_y", "tilt_x")
# the parameters of the quadratic-chi kernels, in their order (kernels/band.cu)
QUADRATIC_PARAMETERS = ("C10", "C12a", "C12b", "thickness", "tilt_y", "tilt_x")
# the coefficients of band_batch's table (kernels/ssb.cu), in its order; then C32, C34: zero
KERNEL_COEFFICIENTS = ("C10", "C12a", "C12b", "C21a", "C21b", "C23a", "C23b", "C30")

def basis(name: str, ky, kx, lam: float):
    """B_p(k): the chi per unit of the cartesian coefficient ``name`` (rad / A)."""
    coefficient = name.rstrip("ab") if name[-1] in "ab" else name
    n, m = KNOWN_ABERRATIONS[coefficient]
    xp = xp_of(ky, kx)
    w = lam * xp.hypot(ky, kx)
    theta = xp.arctan2(ky, kx)
    angular = xp.sin(m * theta) if name.endswith("b") else xp.cos(m * theta)
    return 2 * np.pi / lam * w ** (n + 1) / (n + 1) * angular


def parameters_to_aberrations(values: dict) -> Aberrations:
    """Cartesian parameters (A) -> :class:`Aberrations` (thickness and tilt ignored)."""
    cart = {}
    for name in ABERRATION_PARAMETERS:
        if name not in values:
            continue
        if name[-1] in "ab":
            base = name[:-1]
            a, b = cart.get(base, (0.0, 0.0))
            cart[base] = (values[name], b) if name.endswith("a") else (a, values[name])
        else:
            cart[name] = values[name]
    return Aberrations.from_cartesian(**cart)


def sinc_derivatives(u):
    """sinc(u) = sin(u) / u and its first two derivatives in u (series near 0)."""
    xp = xp_of(u)
    small = xp.abs(u) < 1e-4
    us = xp.where(small, 1.0, u)
    s, c = xp.sin(us), xp.cos(us)
    f = xp.where(small, 1 - u**2 / 6, s / us)
    d1 = xp.where(small, -u / 3, (us * c - s) / us**2)
    d2 = xp.where(small, -1 / 3 + u**2 / 10, -s / us - 2 * c / us**2 + 2 * s / us**3)
    return f, d1, d2


def basis_derivatives(name: str, ky, kx, lam: float, qdy, qdx, qddy, qddx):
    """B_p(k) and its first and second derivatives along a path k(theta) with dk/dtheta = (qdy, qdx)
    and d2k/dtheta2 = (qddy, qddx): (B, dB, d2B). Exact: r^(n+1) cos(m phi) = Re(z^m) |z|^(n+1-m)
    with z = kx + i ky is a polynomial (n + 1 - m is even for every Krivanek term here)."""
    coefficient = name.rstrip("ab") if name[-1] in "ab" else name
    n, m = KNOWN_ABERRATIONS[coefficient]
    j = (n + 1 - m) // 2
    xp = xp_of(ky, kx)
    c = 2 * np.pi * lam**n / (n + 1)
    z = kx + 1j * ky
    r2 = kx**2 + ky**2

    def zp(p):  # z^p, 0 for negative p (its coefficient is then zero)
        return z**p if p >= 0 else xp.zeros_like(z)

    def rp(p):
        return r2**p if p >= 0 else xp.zeros_like(r2)

    f = zp(m) * rp(j)
    fx = m * zp(m - 1) * rp(j) + zp(m) * j * rp(j - 1) * 2 * kx
    fy = 1j * m * zp(m - 1) * rp(j) + zp(m) * j * rp(j - 1) * 2 * ky
    fxx = m * (m - 1) * zp(m - 2) * rp(j) + 4 * m * j * zp(m - 1) * rp(j - 1) * kx \
        + zp(m) * (j * (j - 1) * rp(j - 2) * 4 * kx**2 + 2 * j * rp(j - 1))
    fyy = -m * (m - 1) * zp(m - 2) * rp(j) + 4j * m * j * zp(m - 1) * rp(j - 1) * ky \
        + zp(m) * (j * (j - 1) * rp(j - 2) * 4 * ky**2 + 2 * j * rp(j - 1))
    fxy = 1j * m * (m - 1) * zp(m - 2) * rp(j) + 2 * m * j * zp(m - 1) * rp(j - 1) * (ky + 1j * kx) \
        + zp(m) * j * (j - 1) * rp(j - 2) * 4 * kx * ky
    part = xp.imag if name.endswith("b") else xp.real
    d1 = fx * qdx + fy * qdy
    d2 = fxx * qdx**2 + 2 * fxy * qdx * qdy + fyy * qdy**2 + fx * qddx + fy * qddy
    return c * part(f), c * part(d1), c * part(d2)


def soft_aperture(ky, kx, radius: float, width: float, qdy=None, qdx=None, qddy=None, qddx=None):
    """A(k) = 1 / (1 + exp((|k| - radius) / width)) (1/A), and its first and second derivatives
    along a path with dk/dtheta = (qdy, qdx), d2k/dtheta2 = (qddy, qddx) when given."""
    xp = xp_of(ky, kx)
    r = xp.hypot(ky, kx)
    a = 0.5 * (1 - xp.tanh((r - radius) / (2 * width)))  # the logistic, without overflow
    if qdy is None:
        return a
    ar = -a * (1 - a) / width
    arr = a * (1 - a) * (1 - 2 * a) / width**2
    rs = xp.maximum(r, 1e-300)
    ur = (ky * qdy + kx * qdx) / rs  # the path's radial speed
    speed2 = qdy**2 + qdx**2
    first = ar * ur
    second = arr * ur**2 + ar * ((speed2 - ur**2) / rs + (ky * qddy + kx * qddx) / rs)
    return a, first, second


def chi_coefficients(aberrations: Aberrations) -> list:
    """The 12 cartesian coefficients the kernels' chi_of takes (C10, C12a, C12b, ..., C34b; A)."""
    cart = aberrations.cartesian()
    coef = []
    for name in ("C10", "C12", "C21", "C23", "C30", "C32", "C34"):
        value = cart.get(name, 0.0 if KNOWN_ABERRATIONS[name][1] == 0 else (0.0, 0.0))
        coef.extend(value if isinstance(value, tuple) else (value,))
    return coef


def quadratic_tag(aberrations: Aberrations) -> str:
    """"true" when chi has only C10 and C12 (the kernels' QUAD instantiations), else "false"."""
    cart = aberrations.cartesian()
    higher = [v for name, v in cart.items() if name not in ("C10", "C12")]
    return "false" if any(np.any(np.asarray(v) != 0) for v in higher) else "true"
