"""The integrated centre of mass (iCoM; Lazic, Bosch and Lazar 2016) from a session's G(Q, k).

The centre of mass of each diffraction pattern over the bright field, <k>(R) = sum_k k I(R, k) / sum_k I(R, k)
(1/A, the detector's axes), is for a thin object the phase's gradient seen through the probe's intensity,
<k> = grad(phi * |P|^2) / (2 pi). Its Fourier transform C(Q) = i Q Phi(Q) A(Q) (Q in 1/A, A the probe
intensity's transfer, 1 at Q = 0), so the least-squares integral of the two components is

    Phi_iCoM(Q) = (Q . C(Q)) / (i |Q|^2) = Phi(Q) A(Q),

the phase (rad) blurred by the probe's intensity: no aberrations enter, and the fitted rotation only turns the
scan's frequencies into the detector's axes (a dot product of two vectors in one frame).

Only the bright field's pixels are summed: to first order in a weak phase object every scattered amplitude
that interferes with the unscattered wave lands inside the bright-field disk (Gamma(Q, k) vanishes wherever
psi(k) does), so the dark field adds to <k> only at second order. The numerator comes from G (its inverse
transform over the scan, one sum over k per frequency), the denominator is the session's measured bright
field per position: <k>(R) is the exact ratio, not a linearisation.
"""

from __future__ import annotations

import numpy as np

from qora.backend.fft import irfftn, rfftn
from qora.ssb.detector import unresolved_out
from qora.ssb.model import chi_coefficients

__all__ = ["first_moments", "centre_of_mass", "icom_image"]


def first_moments(session):
    """sum_k k G(Q, k) over the bright-field pixels, (ky, kx) last: (sy, sx // 2 + 1, 2) on the session's backend,
    G read once (one matrix product where G is whole on the device, else chunk by chunk, G streamed there when it
    is held on the host; no G-sized temporary)."""
    xp = session.xp
    k = xp.asarray(np.asarray(session.k, np.float64))
    G = session.G
    if getattr(session, "memory", {}).get("G_on") == "device" and G.ndim == 3:
        return (G.reshape(-1, G.shape[-1]) @ k.astype(G.dtype)).reshape(G.shape[:2] + (2,))
    total = xp.zeros(G.shape[:2] + (2,), np.complex128)
    for ks, block in session._chunks():
        total += block @ k[ks].astype(block.dtype)
    return total


def centre_of_mass(session):
    """(<k_y>, <k_x>) (R) (1/A, the detector's axes; arrays of the scan's shape on the session's backend): each
    scan position's centre of mass over the bright-field pixels, from G and the measured bright field."""
    xp = session.xp
    moments = irfftn(first_moments(session), s=session.scan_shape, axes=(0, 1))
    total = xp.asarray(session.bright_field)  # sum_k I(R, k) / level, measured per position
    return moments[..., 0] / total, moments[..., 1] / total


def icom_image(session, aberrations=None) -> np.ndarray:
    """The iCoM phase image (rad, the scan grid, a host array): Phi(Q) A(Q) by the least-squares integral of
    :func:`centre_of_mass`. Q = 0 (the mean phase) and the scan's Nyquist row and column (where +Q and -Q are
    one bin) are left out, as in the SSB image. ``aberrations`` given other than zero are refused: none enter."""
    if aberrations is not None and any(chi_coefficients(aberrations)):
        raise ValueError("the integrated centre of mass takes no aberrations (none enter it)")
    xp = session.xp
    com_y, com_x = centre_of_mass(session)
    qy, qx = session._q(half=True)
    q2 = qy**2 + qx**2
    dot = qy * rfftn(com_y, axes=(0, 1)) + qx * rfftn(com_x, axes=(0, 1))
    spectrum = xp.where(q2 > 0, dot / (1j * xp.where(q2 > 0, q2, 1.0)), 0)
    unresolved_out(spectrum, session.scan_shape)
    return session.backend.to_host(irfftn(spectrum, s=session.scan_shape, axes=(0, 1)))
