"""Electron optics of a STEM probe: wavelength, the aberration function chi and the probe.

Units: angstroms (A) for lengths, 1/A for spatial frequencies k, milliradians (mrad) for
angles, kV for the accelerating voltage, radians for phases.

Conventions (docs/ssb.md):

- The aberration function in Krivanek notation, with the scattering angle w = lambda k
  (complex, w = lambda (k_x + i k_y)) and the coefficients C_nm (A) with azimuths phi_nm (rad):

      chi(k) = 2 pi / lambda * sum_nm C_nm |w|^(n+1) cos(m (theta - phi_nm)) / (n + 1)

  so C10 is the defocus term pi lambda C10 |k|^2, and the defocus is -C10 (abTEM's and
  py4DSTEM's convention): a positive C10 is underfocus. Values are always stated as C10.
- The probe wave function in the detector plane is psi(k) = A(k) exp(-i chi(k)), with A the
  (top-hat) aperture of semi-angle alpha.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from qora.backend import xp_of
from qora.io.errors import InputError
from qora.io.validate import SEMIANGLE_MRAD, VOLTAGE_KV, physical, positive

__all__ = ["wavelength", "voltage", "semiangle", "Aberrations", "chi", "chi_gradient",
           "aperture", "probe_spectrum", "KNOWN_ABERRATIONS"]

# the physical ranges of the two numbers every 4D-STEM dataset needs: qora.io.validate's (the CLI's too)

# (n, m) of the supported coefficients: C10 defocus, C12 twofold astigmatism, C21 axial coma,
# C23 threefold astigmatism, C30 spherical aberration, and more as listed (coefficients in A, azimuths in rad)
KNOWN_ABERRATIONS = {"C10": (1, 0), "C12": (1, 2), "C21": (2, 1), "C23": (2, 3), "C30": (3, 0),
                     "C32": (3, 2), "C34": (3, 4)}

_ELECTRON_REST_ENERGY_KEV = 510.99895  # m_e c^2
_HC_KEV_A = 12.398419843  # h c in keV * A


def voltage(kv, what: str = "kv (the accelerating voltage)") -> float:
    """``kv`` as a float (kV), refused (InputError, with the reason) outside :data:`qora.io.validate.VOLTAGE_KV`."""
    return physical(what, kv, "kV", VOLTAGE_KV)


def semiangle(alpha_mrad, what: str = "alpha_mrad (the convergence semi-angle)") -> float:
    """``alpha_mrad`` as a float (mrad), refused (InputError, with the reason) outside
    :data:`qora.io.validate.SEMIANGLE_MRAD`."""
    return physical(what, alpha_mrad, "mrad", SEMIANGLE_MRAD)


def wavelength(kv: float) -> float:
    """Relativistic electron wavelength (A) at an accelerating voltage of ``kv`` kV (:func:`voltage`'s range)."""
    e = voltage(kv)
    return _HC_KEV_A / math.sqrt(e * (2 * _ELECTRON_REST_ENERGY_KEV + e))


@dataclass(frozen=True)
class Aberrations:
    """Aberration coefficients C_nm (A) and azimuths phi_nm (rad) in Krivanek notation.

    ``Aberrations(C10=50.0, C12=(20.0, 0.3))`` gives C12 as (magnitude, angle); rotationally
    symmetric terms (m = 0) take a plain number. :meth:`from_cartesian` accepts (a, b)
    components C_nm,a = C cos(m phi), C_nm,b = C sin(m phi), the other common form.
    """

    values: dict = field(default_factory=dict)

    def __init__(self, values: dict | None = None, **coefficients) -> None:
        merged = dict(values or {})
        merged.update(coefficients)
        clean = {}
        for name, v in merged.items():
            if name not in KNOWN_ABERRATIONS:
                raise InputError(f"unknown aberration {name!r}; known: {', '.join(KNOWN_ABERRATIONS)}")
            n, m = KNOWN_ABERRATIONS[name]
            try:
                if np.ndim(v) == 0:
                    mag, angle = float(v), 0.0
                else:
                    mag, angle = (float(x) for x in v)
            except (TypeError, ValueError):
                raise InputError(f"{name} must be a number or (magnitude A, angle rad), got {v!r}") from None
            if not (math.isfinite(mag) and math.isfinite(angle)):
                raise InputError(f"{name} must be finite, got {v!r}")
            if m == 0 and angle != 0.0:
                raise InputError(f"{name} is rotationally symmetric and takes no angle")
            clean[name] = (mag, angle)
        object.__setattr__(self, "values", clean)

    @classmethod
    def from_cartesian(cls, **components) -> "Aberrations":
        """From cartesian components: ``C12=(a, b)`` means C12 cos(2 phi12) = a, sin = b."""
        polar = {}
        for name, v in components.items():
            if name not in KNOWN_ABERRATIONS:
                raise InputError(f"unknown aberration {name!r}; known: {', '.join(KNOWN_ABERRATIONS)}")
            n, m = KNOWN_ABERRATIONS[name]
            if m == 0 or np.ndim(v) == 0:
                polar[name] = v
            else:
                if np.shape(v) != (2,):
                    raise InputError(f"{name} must be cartesian (a, b) in A, got {v!r}")
                a, b = (float(x) for x in v)
                polar[name] = (math.hypot(a, b), math.atan2(b, a) / m)
        return cls(polar)

    def cartesian(self) -> dict:
        """The (a, b) components of each coefficient (a plain number for m = 0)."""
        out = {}
        for name, (mag, angle) in self.values.items():
            m = KNOWN_ABERRATIONS[name][1]
            out[name] = mag if m == 0 else (mag * math.cos(m * angle), mag * math.sin(m * angle))
        return out

    def get(self, name: str) -> float:
        return self.values.get(name, (0.0, 0.0))[0]


def chi(kx, ky, aberrations: Aberrations, lam: float):
    """The aberration phase chi (rad) at spatial frequencies (kx, ky) (1/A); NumPy or CuPy arrays.

    ``aberrations``: C_nm (A) and azimuths (rad); ``lam``: the electron wavelength (A).
    """
    xp = xp_of(kx, ky)
    kx, ky = xp.asarray(kx, np.float64), xp.asarray(ky, np.float64)
    w = lam * xp.hypot(kx, ky)
    theta = xp.arctan2(ky, kx)
    out = xp.zeros(xp.broadcast(kx, ky).shape)
    for name, (mag, angle) in aberrations.values.items():
        n, m = KNOWN_ABERRATIONS[name]
        out += mag * w ** (n + 1) * xp.cos(m * (theta - angle)) / (n + 1)
    return 2 * np.pi / lam * out


def chi_gradient(kx, ky, aberrations: Aberrations, lam: float):
    """(d chi / d kx, d chi / d ky) (rad A): the image shift of a bright-field pixel is this / 2 pi.

    ``kx``, ``ky``: spatial frequencies (1/A); ``aberrations``: C_nm (A) and azimuths (rad);
    ``lam``: the electron wavelength (A).
    """
    xp = xp_of(kx, ky)
    kx, ky = xp.asarray(kx, np.float64), xp.asarray(ky, np.float64)
    k = xp.hypot(kx, ky)
    theta = xp.arctan2(ky, kx)
    dk = xp.zeros(xp.broadcast(kx, ky).shape)  # d/dk at fixed theta
    dth = xp.zeros_like(dk)  # (1/k) d/dtheta
    for name, (mag, angle) in aberrations.values.items():
        n, m = KNOWN_ABERRATIONS[name]
        c = 2 * np.pi / lam * mag * lam ** (n + 1) / (n + 1)
        dk += c * (n + 1) * k**n * xp.cos(m * (theta - angle))
        dth += -c * m * k**n * xp.sin(m * (theta - angle))
    gx = dk * xp.cos(theta) - dth * xp.sin(theta)
    gy = dk * xp.sin(theta) + dth * xp.cos(theta)
    return gx, gy


def aperture(kx, ky, alpha_mrad: float, lam: float):
    """The probe-forming aperture (1 inside |k| <= alpha / lambda, 0 outside), dimensionless.

    Parameters
    ----------
    kx, ky : ndarray
        Spatial frequencies (1/A); NumPy or CuPy arrays.
    alpha_mrad : float
        Convergence semi-angle (mrad).
    lam : float
        Electron wavelength (A), e.g. :func:`wavelength`.

    Returns
    -------
    ndarray
        0 or 1, float64, the broadcast shape of ``kx`` and ``ky``.
    """
    alpha_mrad = semiangle(alpha_mrad)
    xp = xp_of(kx, ky)
    return (xp.hypot(kx, ky) <= alpha_mrad * 1e-3 / lam).astype(np.float64)


def probe_spectrum(kx, ky, aberrations: Aberrations, alpha_mrad: float, lam: float):
    """psi(k) = A(k) exp(-i chi(k)) (unnormalised, dimensionless).

    Parameters
    ----------
    kx, ky : ndarray
        Spatial frequencies (1/A); NumPy or CuPy arrays.
    aberrations : Aberrations
        Coefficients C_nm (A) and azimuths (rad).
    alpha_mrad : float
        Convergence semi-angle (mrad).
    lam : float
        Electron wavelength (A).

    Returns
    -------
    ndarray
        Complex, the broadcast shape of ``kx`` and ``ky``.
    """
    return aperture(kx, ky, alpha_mrad, lam) * xp_of(kx, ky).exp(-1j * chi(kx, ky, aberrations, lam))
