"""Optimum bright field (OBF; Ooe, Seki, Ikuhara and Shibata 2021): the noise-optimal linear image of a weak phase
object from a session's G(Q, k).

Each bright-field pixel's spectrum is G(Q, k) = i Phi(Q) Gamma(Q, k) plus shot noise, white over Q. Gamma is the
model of a uniformly lit disk (psi of modulus 1 inside the aperture), and so is the noise: every pixel inside
the disk has the same mean count, and the same variance. At each Q the combination of the pixels with the
highest signal-to-noise ratio is then the matched filter conj(Gamma); normalised so that the noise it passes is
white,

    OBF(Q) = sum_k conj(Gamma(Q, k)) G(Q, k) / (i T(Q)),   T(Q) = sqrt(sum_k |Gamma(Q, k)|^2),

whose signal is Phi(Q) T(Q). Where SSB divides each Q by its transfer (an unbiased phase whose noise grows where
the transfer is weak), OBF leaves weak frequencies weak: the better image at low dose. The image is scaled by
1 / max T, so that its transfer peaks at 1 and it reads in radians where the transfer is strongest. The sums
are :meth:`qora.ssb.Session.image`'s (method "obf"): the fused kernel of ``kernels/ssb.cu`` where G is on the
device, its Numba twin on the host, the array code as their reference; this module holds the transfer.

The pixels are weighted equally, as the model's disk is lit: weights from the measured counts (the published
filter's 1 / variance for segments of unequal area) would not match Gamma at partly lit edge pixels, and a dead
pixel (a count near 0) would get a weight without bound.
"""

from __future__ import annotations

__all__ = ["obf_transfer"]


def obf_transfer(power):
    """T(Q) max T from the summed signal powers sum_k |Gamma(Q, k)|^2 (the session's backend): the divisor that
    makes the sums conj(Gamma) G into the OBF spectrum scaled by 1 / max T."""
    transfer = power**0.5
    return transfer * float(transfer.max())
