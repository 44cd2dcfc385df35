"""CDI physics on ``xp`` arrays (NumPy or CuPy): the reference for every variant.

Conventions
-----------
- The object ``x`` is centre-origin (r = 0 at index n//2 on every axis).
- Measured intensities come as the detector records them (q = 0 at index n//2);
  :func:`native_amplitude` converts them once to the FFT's layout (q = 0 at
  index 0). A real-space translation only multiplies the transform by a phase
  ramp, which the modulus projection leaves alone, so the object can stay
  centre-origin while the data are in FFT layout.
- Transforms are unitary: ``F x = fft(x) / sqrt(n)``, so ``||x|| = ||a||`` for a
  consistent object. Kernels run the FFTs unscaled and fold ``s = 1/sqrt(n)``
  into the modulus step.
- Masked (unmeasured) pixels are encoded as a negative amplitude (-1), so the
  mask costs no separate array.

The update rule shared by ER, HIO and RAAR: inside the support the projected
value ``p = P_M x``; outside ``a x + b p`` (:func:`update_coefficients`).
"""

from __future__ import annotations

import math

import numpy as np

from qora.backend import fft, xp_of

__all__ = [
    "ALGORITHMS", "CONSTRAINTS", "CONSTRAINT_CODES", "update_coefficients", "native_amplitude", "modulus_project",
    "support_update", "fourier_error", "gaussian_blur", "shrinkwrap", "autocorrelation_support",
    "detector_intensity",
]

ALGORITHMS = ("ER", "HIO", "RAAR")
CONSTRAINTS = (None, "real", "positive")
CONSTRAINT_CODES = {c: i for i, c in enumerate(CONSTRAINTS)}  # the kernels' and the Numba loops' constraint codes
MASKED = -1.0


def update_coefficients(algorithm: str, beta: float = 0.9) -> tuple[float, float]:
    """(a, b) of the outside-support update ``a x + b P_M x``.

    ER: (0, 0). HIO: (1, -beta). RAAR: (beta, 1 - 2 beta): inside the support
    RAAR's ``beta/2 (R_S R_M + I) x + (1 - beta) P_M x`` reduces to ``P_M x`` and
    outside to ``beta x + (1 - 2 beta) P_M x``.
    """
    algorithm = algorithm.upper()
    if algorithm == "ER":
        return 0.0, 0.0
    if algorithm == "HIO":
        return 1.0, -float(beta)
    if algorithm == "RAAR":
        return float(beta), 1.0 - 2.0 * float(beta)
    raise ValueError(f"algorithm must be one of {ALGORITHMS}, got {algorithm!r}")


def native_amplitude(intensity, mask=None, xp=np, dtype=np.float32):
    """sqrt(intensity) moved to FFT layout, with masked pixels set to -1.

    Parameters
    ----------
    intensity : array, detector layout (q = 0 at index n//2)
    mask : bool array, optional
        True where a pixel was *not* measured.
    """
    axes = tuple(range(intensity.ndim))
    amp = xp.sqrt(xp.asarray(intensity, dtype=np.float64))
    if mask is not None:
        amp = xp.where(xp.asarray(mask, dtype=bool), MASKED, amp)
    return xp.ascontiguousarray(xp.fft.ifftshift(amp, axes=axes)).astype(dtype)


def modulus_project(y, amp, scale):
    """Modulus projection of an unscaled transform ``y = fft(x)``.

    Returns ``(w, err_sum)`` where ``ifft_unscaled(w)`` is ``P_M x`` and
    ``err_sum = sum over measured pixels of (|F x| - a)^2`` (``F`` unitary,
    ``F x = scale * y``). Measured pixels take the measured modulus with the
    current phase (phase 0 where ``y = 0``); masked pixels keep ``F x``.
    """
    xp = xp_of(y)
    mag = xp.abs(y)
    measured = amp >= 0
    d = scale * mag - amp
    err_sum = float(xp.sum(xp.where(measured, d * d, 0).astype(np.float64)))
    safe = xp.where(mag > 0, mag, 1)
    unit = xp.where(mag > 0, y / safe, 1)
    w = xp.where(measured, scale * amp * unit, (scale * scale) * y)
    return w.astype(y.dtype), err_sum


def support_update(x, p, support, a: float, b: float, constraint=None):
    """The ER/HIO/RAAR update: ``p`` where the support (and constraint) holds, else ``a x + b p``.

    ``constraint``: None, "real" (inside, keep Re p), or "positive" (inside,
    keep Re p where it is >= 0; where Re p < 0 the pixel is updated as outside,
    Fienup's rule).
    """
    if constraint not in CONSTRAINTS:
        raise ValueError(f"constraint must be one of {CONSTRAINTS}, got {constraint!r}")
    inside = support.astype(bool)
    val = p
    if constraint in ("real", "positive"):
        val = p.real.astype(p.dtype)
    if constraint == "positive":
        inside = inside & (p.real >= 0)
    return xp_of(x).where(inside, val, a * x + b * p).astype(x.dtype)


def fourier_error(x, amp, *, xp=None) -> float:
    """sqrt(sum over measured (|F x| - a)^2 / sum a^2), F unitary; ``amp`` in FFT layout."""
    xp = xp or xp_of(x)
    axes = tuple(range(x.ndim - amp.ndim, x.ndim))
    y = fft.fftn(x, axes=axes, norm="ortho")
    measured = amp >= 0
    num = xp.sum(xp.where(measured, (xp.abs(y) - amp) ** 2, 0).astype(np.float64))
    den = xp.sum(xp.where(measured, amp.astype(np.float64) ** 2, 0))
    return float(xp.sqrt(num / den))


def gaussian_blur(v, sigma: float, *, xp=None):
    """Periodic Gaussian blur (std ``sigma`` pixels) of a real array over all its axes, by FFT."""
    xp = xp or xp_of(v)
    if sigma <= 0:
        return v
    spec = fft.rfftn(v)
    shape = v.shape
    factor = None
    for ax, n in enumerate(shape):
        f = xp.fft.rfftfreq(n) if ax == len(shape) - 1 else xp.fft.fftfreq(n)
        g = xp.exp(-2.0 * (math.pi * sigma * f) ** 2)
        g = g.reshape([-1 if i == ax else 1 for i in range(len(shape))])
        factor = g if factor is None else factor * g
    return fft.irfftn(spec * factor, s=shape, axes=tuple(range(len(shape)))).astype(v.dtype)


def shrinkwrap(x, support, *, sigma: float, threshold: float, min_fraction: float = 0.2, xp=None):
    """A new support: where the blurred modulus of ``x`` exceeds ``threshold`` x its maximum.

    Guarded against collapse: if the new support is smaller than ``min_fraction``
    of the old one (or empty), the old support is kept. Returns ``(support, changed)``.
    """
    xp = xp or xp_of(x)
    blurred = gaussian_blur(xp.abs(x).astype(np.float32), sigma, xp=xp)
    new = blurred > threshold * blurred.max()
    old_count = int(support.sum())
    if int(new.sum()) < max(1, min_fraction * old_count):
        return support, False
    return new.astype(support.dtype), True


def autocorrelation_support(intensity, *, threshold: float = 0.04, sigma: float = 1.0, mask=None, xp=np):
    """Support estimate from the autocorrelation of the pattern (centre-origin boolean array).

    The autocorrelation |IFT(I)| spans twice the object, so this support
    contains every translate of the object that fits the array; shrinkwrap
    tightens it. Masked pixels are set to zero first.
    """
    intensity = xp.asarray(intensity, dtype=np.float64)
    if mask is not None:
        intensity = xp.where(xp.asarray(mask, bool), 0.0, intensity)
    axes = tuple(range(intensity.ndim))
    auto = xp.abs(xp.fft.fftshift(fft.ifftn(xp.fft.ifftshift(intensity, axes=axes)), axes=axes))
    auto = gaussian_blur(auto, sigma, xp=xp)
    return auto > threshold * auto.max()


def detector_intensity(obj, xp=np):
    """|F obj|^2 (unitary) in detector layout (q = 0 at n//2), for a centre-origin object."""
    axes = tuple(range(obj.ndim))
    y = fft.fftn(xp.fft.ifftshift(xp.asarray(obj, dtype=np.complex128), axes=axes), norm="ortho")
    return xp.fft.fftshift(xp.abs(y) ** 2, axes=axes)
