"""Partial coherence: a point-spread function of the intensity, refined during the iterations.

A partially coherent beam records the coherent pattern blurred by the transform of the mutual
coherence function: ``I_meas = |F x|^2 (*) K`` (periodic convolution over the detector, ``K >= 0``,
``sum K = 1``). No coherent object fits such data; the blur shows up as a floor of the object error
(0.19-0.21 on ``featured_256_psf`` even with the true support) and as shrinkwrap losing the object.

The model used here (the documented approach of PyNX and cohere, written anew):

- The model intensity is ``I_c = K (*) |F x|^2``; the modulus constraint uses it: on a measured
  pixel the wave is scaled by ``sqrt(I / I_c)`` (keeping its phase), which with ``K`` a delta is
  the ordinary modulus projection ``a F x / |F x|``. Unmeasured (masked or held-out) pixels keep
  ``F x``.
- Every ``every`` iterations ``K`` takes one Richardson-Lucy step against the counts,
  ``K(t) <- K(t) sum_q m(q) [I(q) / I_c(q)] |F x|^2(q - t) / sum_q m(q) |F x|^2(q - t)``, with ``m``
  the measured pixels used in the fit (masked and held-out pixels excluded: they carry no count), then
  clipped at 0 and normalised to sum 1. The step is multiplicative, so the kernel stays inside the
  window where it starts.
- The first ``K`` is a Gaussian (std ``sigma`` pixels) or a pseudo-Voigt (``eta`` times a Lorentzian
  plus ``1 - eta`` times a Gaussian of the same full width at half maximum, each normalised), cut to
  the window ``|t| <= radius`` (``window_radius``: three FWHM, at least 2 pixels) and normalised.

Everything runs on the engine's own arrays (NumPy or CuPy, written once over ``xp``); the error
history stays on the device until a chunk ends, so a GPU run reads the host no more often than the
projection stages do (the per-iteration work is eager CuPy, not a captured graph).
"""

from __future__ import annotations

import math

import numpy as np

from qora.backend import fft
from qora.io.errors import InputError
from qora.phase.array_loop import array_iterate

__all__ = ["MODELS", "FWHM_PER_SIGMA", "window_radius", "kernel_profile", "blur", "psf_modulus_step",
           "richardson_lucy_step", "Coherence", "coherence_iterate", "BLUR_WIDTHS", "PARTIAL_COHERENCE_WIDTH",
           "blur_deviance", "blur_width", "partially_coherent",
           "SHARPEN_FLOOR", "sharpen"]

MODELS = ("gaussian", "voigt")
FITS = ("rl", "width")  # how a psf stage refines its kernel (Coherence)
WIDTH_STEP = 0.05  # pixels: the width refinement's step, the spacing of BLUR_WIDTHS
FWHM_PER_SIGMA = 2.0 * math.sqrt(2.0 * math.log(2.0))
# Below this the model intensity of a pixel is treated as 0 (the ratio I / I_c would be unbounded).
_FLOOR = 1e-20


def window_radius(sigma: float) -> int:
    """Half-width (pixels) of the kernel's window: three FWHM of the profile, at least 2."""
    return max(2, int(math.ceil(3.0 * FWHM_PER_SIGMA * sigma)))


def _radius2(shape, xp):
    """Squared distance from the origin in FFT layout (origin at index 0, periodic), float64."""
    r2 = 0
    for ax, n in enumerate(shape):
        f = xp.fft.fftfreq(n) * n
        r2 = r2 + (f**2).reshape([-1 if i == ax else 1 for i in range(len(shape))])
    return r2


def kernel_profile(shape, *, model: str = "gaussian", sigma: float = 1.0, eta: float = 0.5, radius=None,
                   xp=np, dtype=np.float32):
    """The first kernel: FFT layout (origin at index 0), zero beyond ``radius`` pixels, sum 1.

    Parameters
    ----------
    shape : tuple of int
        The pattern's shape (2D or 3D).
    model : {"gaussian", "voigt"}
    sigma : float
        Std of the Gaussian, pixels; the pseudo-Voigt's Lorentzian has the same FWHM (2.355 sigma).
    eta : float
        Pseudo-Voigt: the Lorentzian's share in [0, 1] (each part normalised before mixing).
    radius : float, optional
        Window half-width, pixels; default :func:`window_radius`.
    """
    if model not in MODELS:
        raise InputError(f"psf model must be one of {MODELS}, got {model!r}")
    if not sigma > 0:
        raise InputError(f"psf sigma must be > 0 pixels, got {sigma!r}")
    if not 0.0 <= eta <= 1.0:
        raise InputError(f"psf eta must be in [0, 1], got {eta!r}")
    radius = window_radius(sigma) if radius is None else radius
    r2 = _radius2(tuple(shape), xp)
    window = r2 <= radius * radius
    gauss = xp.where(window, xp.exp(-r2 / (2.0 * sigma * sigma)), 0.0)
    kernel = gauss / gauss.sum()
    if model == "voigt":
        half = 0.5 * FWHM_PER_SIGMA * sigma
        lorentz = xp.where(window, 1.0 / (1.0 + r2 / (half * half)), 0.0)
        kernel = eta * lorentz / lorentz.sum() + (1.0 - eta) * kernel
    return kernel.astype(dtype)


def _axes(ndim_pattern: int, ndim: int):
    return tuple(range(ndim - ndim_pattern, ndim))


def blur(intensity, transfer, shape):
    """Periodic convolution of ``intensity`` (..., *shape) with the kernel whose rfftn is ``transfer``."""
    axes = _axes(len(shape), intensity.ndim)
    return fft.irfftn(fft.rfftn(intensity, axes=axes) * transfer, s=shape, axes=axes)


def psf_modulus_step(y, amp, transfer, shape, xp):
    """The modulus constraint against the blurred model, on a unitary transform ``y`` (..., *shape).

    Returns ``(w, coherent, err)``: ``w`` = ``y sqrt(I / I_c)`` on measured pixels (``amp >= 0``;
    ``amp`` where ``I_c`` is 0), ``y`` elsewhere; ``coherent`` = ``|y|^2``; ``err`` (...,) the sum over
    measured pixels of ``(sqrt(I_c) - amp)^2`` (on the device).
    """
    coherent = (y.real * y.real + y.imag * y.imag)
    model = xp.maximum(blur(coherent, transfer, shape), 0)
    measured = amp >= 0
    has = model > _FLOOR
    root = xp.sqrt(xp.where(has, model, 1))
    d = xp.where(measured, xp.where(has, root, 0) - amp, 0)
    err = xp.sum((d * d).reshape(d.shape[: d.ndim - len(shape)] + (-1,)), axis=-1, dtype=np.float64)
    factor = (amp / root).astype(y.real.dtype)
    w = xp.where(measured, xp.where(has, y * factor, amp.astype(y.dtype)), y)
    return w.astype(y.dtype), coherent, err


def richardson_lucy_step(kernel, coherent, counts, used, shape, xp):
    """One Richardson-Lucy update of ``kernel`` (..., *shape; FFT layout) against ``counts``.

    ``coherent`` is ``|F x|^2`` (..., *shape), ``counts`` the measured intensity and ``used`` the
    pixels it holds (bool, *shape). Returns the new kernel, >= 0, sum 1, zero where the old one was.
    """
    axes = _axes(len(shape), kernel.ndim)
    spec_c = fft.rfftn(coherent, axes=axes)
    model = xp.maximum(fft.irfftn(spec_c * fft.rfftn(kernel, axes=axes), s=shape, axes=axes), 0)
    weight = used.astype(coherent.dtype)
    # a used pixel the model puts at 0 gives no direction: ratio 1 there (neutral), 0 off the used pixels
    ratio = xp.where(model > _FLOOR, counts / xp.where(model > _FLOOR, model, 1), 1) * weight

    def correlate(f):  # sum_q f(q) coherent(q - t), for every shift t
        return fft.irfftn(fft.rfftn(f, axes=axes) * xp.conj(spec_c), s=shape, axes=axes)

    num = correlate(ratio)
    den = correlate(xp.broadcast_to(weight, coherent.shape))
    tiny = 1e-12 * xp.max(xp.abs(den))
    new = xp.where(kernel > 0, kernel * xp.maximum(num, 0) / xp.maximum(den, tiny), 0)
    total = xp.sum(new.reshape(new.shape[: new.ndim - len(shape)] + (-1,)), axis=-1)
    total = total.reshape(total.shape + (1,) * len(shape))
    # a kernel whose update vanished everywhere (no counts) is kept as it was
    return xp.where(total > 0, new / xp.where(total > 0, total, 1), kernel).astype(kernel.dtype)


class Coherence:
    """The kernels of an engine's starts (B, *shape) and when to refine them.

    Parameters
    ----------
    engine : CPU or CUDA engine
        Its ``amp`` (FFT layout, -1 where masked or held out), ``batch`` and ``backend`` are used.
    model, sigma, eta : see :func:`kernel_profile`
    every : int
        The kernel refined every that many iterations (0: the kernel is kept).
    fit : {"rl", "width"}
        How it is refined: "rl" a Richardson-Lucy step (the kernel free within its window); "width" the Gaussian's
        width moved by one :data:`WIDTH_STEP` where that lowers the Poisson deviance (one parameter a start).
    amp : array, optional
        The measured amplitude (FFT layout, -1 where not measured or held out) the kernel is fitted to;
        default the engine's (a stage with ``masked=fill`` gives the engine filled pixels, which the
        kernel's fit must not count).
    """

    def __init__(self, engine, *, model: str = "gaussian", sigma: float = 1.0, eta: float = 0.5,
                 every: int = 5, amp=None, sigmas=None, fit: str = "rl") -> None:
        xp = engine.backend.xp
        amp = engine.amp if amp is None else xp.asarray(amp)
        self.shape = tuple(engine.shape)
        self.model, self.sigma, self.eta, self.every = model, float(sigma), float(eta), int(every)
        if sigmas is None:
            first = kernel_profile(self.shape, model=model, sigma=sigma, eta=eta, xp=xp)
            self.kernels = xp.repeat(first[None], engine.batch, axis=0)  # writable: each start refines its own
        else:  # a first kernel of its own width for each start
            self.kernels = xp.stack([kernel_profile(self.shape, model=model, sigma=float(s), eta=eta, xp=xp)
                                     for s in sigmas])
        if fit not in FITS:
            raise InputError(f"psf fit must be one of {FITS}, got {fit!r}")
        self.fit = fit
        self.sigmas = [float(sigma)] * engine.batch if sigmas is None else [float(s) for s in sigmas]
        self.used = amp >= 0
        self.counts = xp.where(self.used, amp * amp, 0).astype(np.float32)
        self._measured = None  # the counts' shared sums for psf_fit=width, made at its first step
        self.iterations = 0
        self._refresh()

    def matches(self, model: str, sigma: float, eta: float) -> bool:
        return (model, float(sigma), float(eta)) == (self.model, self.sigma, self.eta)

    def _refresh(self) -> None:
        axes = _axes(len(self.shape), self.kernels.ndim)
        self.transfer = fft.rfftn(self.kernels, axes=axes)

    def refine(self, coherent, xp) -> None:
        if self.fit == "width":
            self._step_widths(coherent, xp)
        else:
            self.kernels = richardson_lucy_step(self.kernels, coherent, self.counts, self.used, self.shape, xp)
        self._refresh()

    def _step_widths(self, coherent, xp) -> None:
        """Each start's Gaussian width moved by :data:`WIDTH_STEP` (kept at least the grid's first nonzero width)
        where that fits its coherent intensity to the counts better: alternating with the object's updates, a
        descent on (object, width) of the blurred model's likelihood."""
        spec = fft.rfftn(coherent, axes=_axes(len(self.shape), coherent.ndim))
        if self._measured is None:
            self._measured = _Measured(self.counts, self.used, xp)
        for k, width in enumerate(self.sigmas):
            tried = sorted({max(BLUR_WIDTHS[1], round(width + d, 3)) for d in (-WIDTH_STEP, 0.0, WIDTH_STEP)})
            best = min(tried, key=lambda w: self._measured.deviance(spec[k], w))
            if best != width:
                self.sigmas[k] = best
                self.kernels[k] = kernel_profile(self.shape, model=self.model, sigma=best, eta=self.eta, xp=xp)

    def kernel_detector_layout(self, start: int, to_host) -> np.ndarray:
        """Start ``start``'s kernel with its origin at index n//2 (the detector's layout), on the host."""
        k = np.asarray(to_host(self.kernels[start]))
        return np.fft.fftshift(k)


def coherence_iterate(engine, state: Coherence, iterations: int, a: float, b: float, constraint=None) -> np.ndarray:
    """``iterations`` ER/HIO/RAAR updates of every start of ``engine`` with the blurred modulus constraint.

    The kernel takes a Richardson-Lucy step after every ``state.every``-th iteration (counted over the
    whole run of the stage(s) that share ``state``), from the coherent intensity of that iteration.
    Returns the Fourier error of the blurred model per iteration and start (iterations, B),
    ``sqrt(sum (sqrt(I_c) - a)^2 / sum a^2)``, read from the device once.
    """

    def step(y, xp, _):
        w, coherent, err = psf_modulus_step(y, engine.amp, state.transfer, state.shape, xp)
        state.iterations += 1
        if state.every and state.iterations % state.every == 0:
            # refined after this iteration's projection, which used the kernel as it was
            state.refine(coherent, xp)
        return w, err

    return array_iterate(engine, iterations, a, b, constraint, step, what="the psf model")


# The Gaussian widths (std, detector pixels) :func:`blur_width` tries; 0 is no blur. A sampled Gaussian narrower
# than about 0.3 px is a delta to 0.4% (its neighbours weigh exp(-1 / (2 0.3^2)) = 0.004), so the grid starts there.
BLUR_WIDTHS = (0.0,) + tuple(round(0.25 + 0.05 * i, 2) for i in range(26))
# The counts are taken as blurred (the default recipe then models partial coherence) when a blur at least this wide
# (pixels) fits them better than none (:func:`partially_coherent`). Measured on the default's best start
# (docs/phase.md, "Partial coherence from the data"): a 0.4 px blur raises the deviance 2.1-2.8 times on the bright
# coherent cases and by 6% at 145 photons per speckle, and lowers it by 4-7% on the 0.7 px blur of featured_256_psf,
# even from a start that did not find the object; the width that fits best is 0-0.3 px on coherent counts and
# 0.4-0.5 px there (a coherent object takes up part of the blur).
PARTIAL_COHERENCE_WIDTH = 0.4

def blur_deviance(obj, intensity, mask=None, *, widths=BLUR_WIDTHS, xp=np) -> np.ndarray:
    """Poisson deviance per measured pixel of the counts against the coherent intensity of ``obj`` blurred by a
    Gaussian of each of ``widths``.

    Parameters
    ----------
    obj : array (N1, N2[, N3]), complex
        An object (any origin: a translation leaves its intensity unchanged), amplitude in sqrt(counts) or any
        scale: the model is scaled to the measured total for each width.
    intensity : array, same shape
        The counts, detector layout (q = 0 at n//2).
    mask : bool array, optional
        True where not measured; those pixels are left out.
    widths : sequence of float
        Gaussian std in detector pixels; 0 is no blur.

    Returns
    -------
    ndarray (len(widths),), float64: ``sum 2 (m - I + I log(I / m)) / count`` over the measured pixels, with
    ``m`` the blurred model. Runs on ``xp``'s device (NumPy or CuPy).
    """
    shape = tuple(np.shape(intensity))
    if tuple(np.shape(obj)) != shape:
        raise InputError(f"object {tuple(np.shape(obj))} and intensity {shape} must have the same shape")
    obs = xp.fft.ifftshift(xp.asarray(intensity, dtype=np.float32))
    used = xp.ones(shape, bool) if mask is None else ~xp.fft.ifftshift(xp.asarray(mask, bool))
    y = fft.fftn(xp.asarray(obj, dtype=np.complex64), norm="ortho")
    spec = fft.rfftn((y.real * y.real + y.imag * y.imag).astype(np.float32))
    measured = _Measured(obs, used, xp)
    return np.array([measured.deviance(spec, width) for width in widths])


class _Measured:
    """The counts a blurred model is scored against, with the sums every width shares taken once."""

    def __init__(self, counts, used, xp) -> None:
        self.counts, self.used, self.xp = counts, used, xp
        self.total = float(xp.sum(xp.where(used, counts, 0), dtype=np.float64))
        self.pixels = max(1, int(used.sum()))
        self.safe = xp.where(counts > 0, counts, 1)

    def deviance(self, spec, width: float) -> float:
        """Poisson deviance per used pixel of the counts against the coherent intensity whose rfftn is ``spec``
        blurred by a Gaussian of std ``width`` pixels (0: unblurred), scaled to the counts' total."""
        xp, counts, used = self.xp, self.counts, self.used
        shape = tuple(counts.shape)
        transfer = 1 if width == 0 else fft.rfftn(kernel_profile(shape, sigma=float(width), xp=xp))
        model = xp.maximum(fft.irfftn(spec * transfer, s=shape), 0)
        model = model * np.float32(self.total / max(float(xp.sum(xp.where(used, model, 0), dtype=np.float64)), 1e-30))
        model = xp.maximum(model, np.float32(1e-30))
        term = xp.where(counts > 0, counts * xp.log(self.safe / model), 0)
        return float(xp.sum(xp.where(used, 2 * (model - counts + term), 0), dtype=np.float64)) / self.pixels


def blur_width(obj, intensity, mask=None, *, widths=BLUR_WIDTHS, xp=np) -> float:
    """The Gaussian width (std, detector pixels) whose blur of ``obj``'s coherent intensity fits the counts best
    (the lowest :func:`blur_deviance`); 0 when no blur fits better than none."""
    deviance = blur_deviance(obj, intensity, mask, widths=widths, xp=xp)
    return float(widths[int(np.argmin(deviance))])


def partially_coherent(deviance, widths=BLUR_WIDTHS, *, least: float = PARTIAL_COHERENCE_WIDTH) -> bool:
    """Whether counts look recorded with a partially coherent beam: some blur of at least ``least`` pixels fits
    them better than no blur (``deviance`` from :func:`blur_deviance` over ``widths``, which must hold 0).

    A coherent reconstruction of blurred counts cannot reproduce their lowered speckle contrast, whatever
    object it found: its intensity blurred by about the beam's kernel fits better than unblurred. On coherent
    counts a blur that wide spoils the fit (the speckles' own width is what it smears). Tested on the decision
    rather than on the best width, whose value a coherent object's partial take-up of the blur lowers.
    """
    widths = np.asarray(widths, float)
    deviance = np.asarray(deviance, float)
    if not np.any(widths == 0):
        raise InputError("the widths must include 0 (no blur) to compare against")
    wide = widths >= least
    return bool(wide.any() and deviance[wide].min() < deviance[widths == 0].min())


# Wiener floor of :func:`sharpen`: the kernel's transfer function below this is not divided out in full (the gain is
# at most 1 / (2 floor) = 10), so the Poisson noise at the autocorrelation's rim is not blown up.
SHARPEN_FLOOR = 0.05


def sharpen(intensity, width: float, *, floor: float = SHARPEN_FLOOR):
    """``intensity`` (detector layout, fully filled: no holes) deconvolved by a Gaussian of std ``width`` pixels.

    A Wiener division of its transform (the autocorrelation of the object) by the kernel's transfer function
    ``T``: ``F^-1[F(I) T / (T^2 + floor^2)]``, clipped at 0. It undoes the blur a partially coherent beam puts on
    the pattern where ``T`` is well above ``floor`` (the autocorrelation near its centre), enough for a coherent
    search to find the support (docs/phase.md, "Partial coherence from the data"); the object is then refined
    against the counts as measured, with the blur modelled (``psf=``). Host arrays (NumPy), float64.
    """
    if not width > 0:
        raise InputError(f"the sharpening width must be > 0 pixels, got {width!r}")
    counts = np.fft.ifftshift(np.asarray(intensity, np.float64))
    transfer = np.fft.rfftn(kernel_profile(counts.shape, sigma=float(width), xp=np, dtype=np.float64))
    axes = tuple(range(counts.ndim))
    out = np.fft.irfftn(np.fft.rfftn(counts) * transfer / (transfer * transfer + floor * floor), s=counts.shape,
                        axes=axes)
    return np.fft.fftshift(np.maximum(out, 0.0))
