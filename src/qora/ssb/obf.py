"""Optimum bright field (OBF; Ooe, Seki, Ikuhara and Shibata 2021) from a session's G(Q, k).

For a weak phase object each bright-field pixel's spectrum is G(Q, k) = i Phi(Q) Gamma(Q, k) + noise, and the
noise is the shot noise of the pixel's mean count: white over Q, with a variance proportional to that count,
w(k) = G(0, k) / N (N scan positions; 1 inside a uniformly lit disk by the session's normalisation). The linear
combination of the pixels with the highest signal-to-noise ratio at each Q is the matched filter
conj(Gamma) / w; normalised so that the noise it passes is white,

    OBF(Q) = sum_k conj(Gamma(Q, k)) G(Q, k) / w(k) / (i T(Q)),   T(Q) = sqrt(sum_k |Gamma(Q, k)|^2 / w(k)),

whose signal is Phi(Q) T(Q): the phase through OBF's transfer T, the square root of the summed signal powers,
and unit-variance noise at every Q. Where SSB divides each Q by its transfer (an unbiased phase whose noise
grows where the transfer is weak), OBF leaves weak frequencies weak: the better image at low dose. The image
returned is scaled by 1 / max T, so that its transfer peaks at 1 and it reads in radians where the transfer is
strongest (the shape of T, not its scale, is what the filter sets).
"""

from __future__ import annotations

import numpy as np

from qora.backend.fft import irfftn
from qora.ssb.detector import unresolved_out

__all__ = ["obf_image"]


def obf_image(session, aberrations, *, rows: int = 16) -> np.ndarray:
    """The OBF image (rad at the transfer's peak, the scan grid, a host array) for ``aberrations``: the sums over
    the bright field in chunks of pixels and ``rows`` scan-frequency rows (array code on the session's
    backend). Q = 0 and the scan's Nyquist row and column are left out, as in the SSB image."""
    xp = session.xp
    qy, qx = session._q(half=True)
    numerator = xp.zeros(qy.shape, np.complex128)
    power = xp.zeros(qy.shape)
    count = session.scan_shape[0] * session.scan_shape[1]
    for ks, g in session._chunks():
        weight = xp.maximum(g[0, 0].real / count, 1e-12)  # each pixel's mean count: its noise variance
        for r0 in range(0, qy.shape[0], rows):
            sl = slice(r0, r0 + rows)
            gamma = session.gamma(aberrations, qy[sl], qx[sl], pixels=ks)
            numerator[sl] += (xp.conj(gamma) * g[sl] / weight).sum(-1)
            power[sl] += (xp.abs(gamma) ** 2 / weight).sum(-1)
    transfer = xp.sqrt(power)
    spectrum = xp.where(transfer > 0, numerator / (1j * xp.where(transfer > 0, transfer, 1.0)), 0)
    spectrum[0, 0] = 0
    unresolved_out(spectrum, session.scan_shape)
    peak = float(transfer.max())
    if not peak > 0:
        raise ValueError("no scan frequency has a bright-field pixel that transfers it: OBF has nothing to image")
    return session.backend.to_host(irfftn(spectrum / peak, s=session.scan_shape, axes=(0, 1)))
