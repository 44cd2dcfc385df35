"""From off-axis holograms to complex fields: sideband, extraction, ratio, illumination.

An off-axis hologram |u_ref + u|^2 = 1 + |u|^2 + u conj(u_ref) + conj(u) u_ref holds
the field u in the sideband u conj(u_ref), centred at minus the reference (carrier)
frequency. :func:`extract_fields` crops an n x n window of the hologram's spectrum
around that sideband (wrapping around the spectrum's edges, so a window that
crosses k_x = 0 or the Nyquist frequency is no special case), keeps the detection
pupil, and transforms back: the field at twice the hologram pixel. The integer part
of the carrier is removed by the crop; its sub-pixel part leaves a linear phase ramp
that cancels in :func:`field_ratio` with the background.
"""

from __future__ import annotations

import math

import numpy as np

from qora.holo.plans import CropPlan, intensities, stack_holograms
from qora.holo.unwrap import rytov
from qora.io.errors import InputError
from qora.io.validate import integer, positive

__all__ = ["ratio_from_holograms", "ratio_from_rectangular", "quantitative_phase", "square_fields", "padded_square", "find_sideband", "extract_fields", "field_ratio",
           "illumination_frequencies", "peak_frequency", "finite_pair", "crop_parameters"]


def _dtft_magnitude(h, fy, fx, pixel):
    """|sum h(r) w(r) exp(-2 pi i f.r)| on the grid fy x fx (cycles/um), centre-origin samples, Hann-windowed."""
    n0, n1 = h.shape
    y = (np.arange(n0) - n0 // 2) * pixel
    x = (np.arange(n1) - n1 // 2) * pixel
    w = np.outer(np.hanning(n0), np.hanning(n1))
    ey = np.exp(-2j * math.pi * np.outer(fy, y))
    ex = np.exp(-2j * math.pi * np.outer(fx, x))
    return np.abs(ey @ (h * w) @ ex.T)


# the least contrast of a sideband against its spectrum: its peak over the median of the searched half plane. An
# off-axis hologram's is hundreds (the HL60 cell 427, its background 779); noise's is 3.5-4.6 (64^2 to 1024^2
# uniform or Poisson pixels), where a search picked a random bin and reconstructed garbage without a word
SIDEBAND_CONTRAST = 20.0


def peak_frequency(image, pixel: float, *, exclude_radius: float | None = None, half: str = "negative_x",
                   min_contrast: float | None = None):
    """The frequency (nu_y, nu_x), cycles/um, of the strongest spectral peak, to sub-pixel precision.

    The coarse peak is the largest |FFT| bin outside ``exclude_radius`` (cycles/um,
    default 5% of the sampling frequency) of zero frequency and, with ``half`` =
    "negative_x", in the half plane nu_x < 0 (nu_y < 0 on the nu_x = 0 line); "all"
    searches everywhere. It is refined by maximising the Hann-windowed discrete-time
    Fourier transform on successively finer grids (1/10, 1/200 and 1/4000 bin), which
    for a plane wave peaks exactly at its frequency.
    """
    image = np.asarray(image)
    n0, n1 = image.shape
    spec = np.abs(np.fft.fft2(np.fft.ifftshift(image)))
    fy = np.fft.fftfreq(n0, pixel)
    fx = np.fft.fftfreq(n1, pixel)
    FY, FX = np.meshgrid(fy, fx, indexing="ij")
    if exclude_radius is None:
        exclude_radius = 0.05 / pixel
    allowed = np.hypot(FY, FX) > exclude_radius if exclude_radius > 0 else np.ones(spec.shape, bool)
    if half == "negative_x":
        allowed &= (FX < 0) | ((FX == 0) & (FY < 0))
    elif half != "all":
        raise InputError(f"half must be 'negative_x' or 'all', got {half!r}")
    if not allowed.any():
        raise InputError("no frequency left to search: exclude_radius is too large")
    k = np.unravel_index(int(np.argmax(np.where(allowed, spec, -1))), spec.shape)
    cy, cx = fy[k[0]], fx[k[1]]
    step_y, step_x = 1 / (n0 * pixel), 1 / (n1 * pixel)
    if min_contrast is not None:
        contrast = float(spec[k] / max(np.median(spec[allowed]), 1e-300))
        if contrast < min_contrast:
            raise InputError(f"no sideband found: the strongest peak off the centre is {contrast:.1f} times the "
                             f"spectrum's median, where an off-axis hologram's is hundreds (at least {min_contrast:g} "
                             "is needed); is this an off-axis hologram of the illumination, and the hologram pixel "
                             "right?")
    for span, count in ((1.0, 21), (0.1, 41), (0.005, 41)):
        gy = cy + np.linspace(-span, span, count) * step_y
        gx = cx + np.linspace(-span, span, count) * step_x
        mag = _dtft_magnitude(image, gy, gx, pixel)
        iy, ix = np.unravel_index(int(np.argmax(mag)), mag.shape)
        cy, cx = gy[iy], gx[ix]
    return np.array([cy, cx])


def find_sideband(background, hologram_pixel: float, **kwargs) -> np.ndarray:
    """Where the field's sideband sits, (nu_y, nu_x) in cycles/um, from a normal-incidence background.

    For a background hologram |u_ref + u_in|^2 with u_in at normal incidence this is
    minus the carrier frequency (the sideband u conj(u_ref)), found to sub-pixel
    precision (see :func:`peak_frequency`). Pass it to :func:`extract_fields`. ``background``: (N, N),
    camera intensities (counts, or any linear scale); ``hologram_pixel``: um. A background whose strongest
    peak stands less than :data:`SIDEBAND_CONTRAST` times above its spectrum's median holds no sideband: an
    InputError says so.
    """
    background = intensities("background", background)
    if background.ndim != 2:
        raise InputError(f"background must be one 2D hologram, got shape {background.shape}")
    hologram_pixel = positive("hologram_pixel", hologram_pixel, unit="um")
    kwargs.setdefault("min_contrast", SIDEBAND_CONTRAST)
    return peak_frequency(background - background.mean(), hologram_pixel, **kwargs)


def finite_pair(name: str, value) -> np.ndarray:
    """``value`` as two finite floats (a frequency (nu_y, nu_x)); InputError naming ``name`` otherwise."""
    try:
        a = np.asarray(value, float).reshape(-1)
    except (TypeError, ValueError):
        raise InputError(f"{name} must be two numbers (nu_y, nu_x), got {value!r}") from None
    if a.shape != (2,) or not np.all(np.isfinite(a)):
        raise InputError(f"{name} must be two finite numbers (nu_y, nu_x), got {value!r}")
    return a


def crop_parameters(hologram_pixel, n, pupil_frequency, sideband):
    """The checked parameters of a sideband crop: hologram pixel and pupil frequency positive, n an
    integer of at least 1 (or a pair of them, a rectangular window), the sideband two finite frequencies."""
    if np.ndim(n) == 0:
        n = integer("n (the field size)", n, low=1)
    else:
        n = tuple(integer("n (the field shape)", v, low=1) for v in np.ravel(n))
        if len(n) != 2:
            raise InputError(f"n (the field shape) must be one size or two (n_y, n_x), got {n!r}")
    return (positive("hologram_pixel", hologram_pixel, unit="um"), n,
            positive("pupil_frequency", pupil_frequency, unit="cycles/um"), finite_pair("sideband", sideband))


def extract_fields(holograms, sideband, *, hologram_pixel: float, n, pupil_frequency: float,
                   filter: str = "disk") -> np.ndarray:
    """Complex fields (A, n, n) at pixel ``hologram_pixel`` N / n from holograms (A, N, N) or (N, N).

    Parameters
    ----------
    sideband : (nu_y, nu_x)
        Centre of the sideband u conj(u_ref), cycles/um (from :func:`find_sideband`).
    n : int or (n_y, n_x)
        Size of the crop window and of the output fields (at most N). Rectangular holograms (A, M, N)
        take a window (n_y, n_x) (at most (M, N)); keep n_y / M = n_x / N for square field pixels.
    pupil_frequency : float
        The filter's radius, cycles/um (for the disk: detection NA / wavelength): frequencies further
        than this from the sideband's centre are removed (the autocorrelation term and noise).
    filter : str
        The filter's shape (:data:`qora.holo.filters.FILTERS`), default the sharp disk of the pupil.

    The output is centre-origin; its scale is that of u (a plane wave of amplitude 1
    gives |field| = 1). This is the CPU path; :func:`qora.holo.extract_fields` (the api's) picks
    the backend (its CUDA twin is :func:`qora.holo.cuda_pipeline.extract_fields`).
    """
    holos, single = stack_holograms(holograms, square=False)
    hologram_pixel, n, pupil_frequency, sideband = crop_parameters(hologram_pixel, n, pupil_frequency, sideband)
    crop = CropPlan(holos.shape[-2:], sideband, hologram_pixel=hologram_pixel, n=n, pupil_frequency=pupil_frequency,
                    filter=filter)
    out = np.stack([crop(h) for h in holos])
    return out[0] if single else out


def field_ratio(fields, background_fields, *, floor: float = 1e-6) -> np.ndarray:
    """u / u_bg: the sample fields over the background fields of the same illuminations.

    Fields (A, n, n), complex, any common amplitude unit; the ratio is dimensionless.
    Background values below ``floor`` (dimensionless) times their median modulus are a clear error
    (a dark background pixel would make the ratio meaningless).
    """
    fields = np.asarray(fields)
    bg = np.asarray(background_fields)
    if fields.shape != bg.shape:
        raise InputError(f"fields {fields.shape} and backgrounds {bg.shape} differ in shape")
    mag = np.abs(bg)
    if np.any(mag == 0) or np.any(mag < floor * np.median(mag)):
        raise InputError("a background field is (nearly) zero somewhere: cannot form the ratio (is the "
                         "background a hologram of the illumination, with its sideband inside the pupil?)")
    return fields / bg


def illumination_frequencies(background_fields, pixel: float) -> np.ndarray:
    """Lateral frequency (nu_y, nu_x) of each background field's plane wave, (A, 2) cycles/um.

    ``background_fields``: (A, n, n), complex; ``pixel``: their pixel, um.
    """
    bg = np.asarray(background_fields)
    if bg.ndim == 2:
        bg = bg[None]
    return np.stack([peak_frequency(b, pixel, exclude_radius=0.0, half="all") for b in bg])


def square_fields(fields, size: int | None = None) -> np.ndarray:
    """Field ratios (A, M, N) (or one (M, N)) centred in squares of ``size`` (default the smallest fast FFT
    length >= M, N), the margin filled with each field's border mean: the background, so the padding
    adds no edge. This is how rectangular fields of any size reach the ODT, which needs cubes."""
    from qora.backend.fft import fast_length

    u = np.asarray(fields)
    single = u.ndim == 2
    u = u[None] if single else u
    if u.ndim != 3:
        raise InputError(f"fields must be (A, M, N) or (M, N), got shape {u.shape}")
    m, n = u.shape[-2:]
    size = fast_length(max(m, n)) if size is None else integer("size", size, low=max(m, n))
    border = np.concatenate([u[:, 0], u[:, -1], u[:, 1:-1, 0], u[:, 1:-1, -1]], axis=-1).mean(axis=-1)
    out = np.empty((u.shape[0], size, size), np.result_type(u.dtype, np.complex64))
    out[...] = border[:, None, None]
    o0, o1 = (size - m) // 2, (size - n) // 2
    out[:, o0:o0 + m, o1:o1 + n] = u
    return out[0] if single else out


def square_offsets(shape, size: int, step: int = 1) -> tuple[int, ...]:
    """Where an image of ``shape`` (M, N) starts in a ``size`` square: centred, each offset rounded down to a
    multiple of ``step``, so that on a grid ``step`` times coarser the image still starts on a whole pixel."""
    return tuple(((size - m) // 2) // step * step for m in shape)


def padded_square(image, size: int, step: int = 1) -> np.ndarray:
    """``image`` (M, N) minus its mean, centred in a ``size`` x ``size`` square of zeros (size >= M, N), at the
    offsets of :func:`square_offsets` (multiples of ``step``).

    Subtracting the mean first keeps the zero-frequency term out of the sideband: padding the raw
    intensities would add the step at the data's edge, whose spectrum is a sinc streak through zero."""
    m, n = image.shape
    out = np.zeros((size, size))
    o0, o1 = square_offsets(image.shape, size, step)
    out[o0:o0 + m, o1:o1 + n] = image - image.mean()
    return out


# qpimage's example pipeline for this kind of data fits a tilted plane on a frame of 5 hologram pixels and removes it
# (compute_bg(fit_profile="tilt", border_px=5)): the default here, in hologram pixels (docs/holo.md, "Quantitative
# phase of one hologram of any shape").
BACKGROUND_PROFILE = "tilt"
BACKGROUND_BORDER = 5


def border_on_field(border: int, n: int, padded: int) -> int:
    """A frame of ``border`` hologram pixels on a field of ``n`` pixels cut from a ``padded`` square: at least 1."""
    return max(1, round(integer("background_border", border, low=1) * n / padded))


def quantitative_phase(hologram, background, *, hologram_pixel: float = 1.0, n: int | None = None,
                       pupil_frequency: float | None = None, sideband=None, filter: str = "disk",
                       filter_fraction: float | None = None, background_profile: str | int | None = BACKGROUND_PROFILE,
                       background_border: int = BACKGROUND_BORDER) -> dict:
    """Field, unwrapped phase and amplitude of one hologram against its background (QPI).

    Holograms (M, N), camera intensities, of any shape: each is made zero-mean and placed in a
    square of the smallest fast FFT length P >= M, N (a square hologram of fast length is used as it
    is); the field is extracted on that square, cropped back to the data's region and divided by the
    background's. The sideband is found in the background automatically (or given, cycles per unit
    of ``hologram_pixel``). The filter (``filter``, a shape of :data:`qora.holo.filters.FILTERS`) has
    the radius ``pupil_frequency`` (cycles per unit, e.g. the detection NA / wavelength) or
    ``filter_fraction`` of the sideband's distance from zero frequency; neither: a third of that
    distance, the usual choice for off-axis setups (the autocorrelation term then stays out; qpretrieve's).
    ``n``: the crop window on the P x P spectrum (default P: the hologram's own sampling, the image the size of
    the hologram; P // 2 gives fields at twice the pixel). The data are placed in the square at offsets that are
    whole pixels of the field's grid too, so a coarser field is not shifted against the hologram.
    ``background_profile`` ("offset", "tilt", "poly2", an order, or None for none): the phase background fitted
    on a frame of ``background_border`` hologram pixels and removed (default a tilt on 5 pixels, qpimage's
    pipeline; :func:`qora.holo.background.correct_background`).

    Returns ``{"ratio", "phase" (rad), "amplitude", "sideband", "pixel", "filter_radius" (cycles per unit),
    "offset" (the data's first pixel in the P square, hologram pixels), "background"}``.
    """
    from qora.backend.fft import fast_length
    from qora.holo.background import correct_background
    from qora.holo.filters import filter_radius

    hologram = intensities("hologram", hologram)
    background = intensities("background", background)
    if hologram.shape != background.shape or hologram.ndim != 2:
        raise InputError(f"hologram {hologram.shape} and background {background.shape} must be equal 2D shapes")
    hologram_pixel = positive("hologram_pixel", hologram_pixel)
    shape = hologram.shape
    big = fast_length(max(shape))
    n = big if n is None else integer("n (the field size)", n, low=2, high=big)
    step = big // math.gcd(big, n)  # offsets in multiples of this are whole pixels of the n-grid
    offsets = square_offsets(shape, big, step)
    if hologram.shape != (big, big):
        hologram, background = padded_square(hologram, big, step), padded_square(background, big, step)
    if sideband is None:
        sideband = find_sideband(background, hologram_pixel)
    sideband = finite_pair("sideband", sideband)
    radius = filter_radius(sideband, radius=pupil_frequency, fraction=filter_fraction)
    kw = dict(hologram_pixel=hologram_pixel, n=n, pupil_frequency=radius, filter=filter)
    region = tuple(slice(o * n // big, o * n // big + round(m * n / big)) for o, m in zip(offsets, shape))
    ratio = field_ratio(extract_fields(hologram, sideband, **kw)[region],
                        extract_fields(background, sideband, **kw)[region])
    r = rytov(ratio)
    phase = r.imag
    if background_profile is not None:
        phase = correct_background(phase, profile=background_profile, border=border_on_field(background_border, n, big))
    return {"ratio": ratio, "phase": phase, "amplitude": np.exp(r.real), "sideband": sideband,
            "pixel": hologram_pixel * big / n, "filter_radius": radius, "offset": offsets,
            "background": "none" if background_profile is None else
            f"{background_profile} on a {background_border}-pixel frame"}


def ratio_from_rectangular(holograms, backgrounds, *, hologram_pixel: float, pixel: float,
                           pupil_frequency: float, filter: str = "disk") -> np.ndarray:
    """Field ratios (A, m, n) of holograms (A, M, N) of any shape over their backgrounds, at the field pixel
    ``pixel`` um: the window (round(M h / pixel), round(N h / pixel)) for ``hologram_pixel`` h um, the sideband
    found in the first background, the filter of radius ``pupil_frequency`` cycles/um. Pad them square with
    :func:`square_fields` for the ODT."""
    holos, _ = stack_holograms(holograms, square=False)
    bgs, _ = stack_holograms(backgrounds, "backgrounds", square=False)
    if holos.shape != bgs.shape:
        raise InputError(f"holograms {holos.shape} and backgrounds {bgs.shape} must have one shape")
    hologram_pixel, pixel = positive("hologram_pixel", hologram_pixel, unit="um"), positive("pixel", pixel, unit="um")
    window = tuple(int(round(m * hologram_pixel / pixel)) for m in holos.shape[-2:])
    sideband = find_sideband(bgs[0], hologram_pixel)
    kw = dict(hologram_pixel=hologram_pixel, n=window, pupil_frequency=pupil_frequency, filter=filter)
    return field_ratio(extract_fields(holos, sideband, **kw), extract_fields(bgs, sideband, **kw))


def ratio_from_holograms(holograms, backgrounds, geometry, hologram_pixel: float, sideband=None) -> np.ndarray:
    """Field ratios (A, n, n) of a hologram stack over its backgrounds: the per-call chain in one call.

    Holograms and backgrounds (A, N, N) are camera intensities (counts, or any linear scale),
    ``hologram_pixel`` in um; the ratios are dimensionless, on the geometry's grid. The sideband (nu_y, nu_x),
    cycles/um, is found in the first (normal-incidence) background unless given.
    """
    holograms, backgrounds = np.asarray(holograms), np.asarray(backgrounds)
    if holograms.shape != backgrounds.shape or holograms.ndim != 3:
        raise InputError(f"holograms {holograms.shape} and backgrounds {backgrounds.shape} must be stacks (A, N, N) "
                         "of one shape")
    if sideband is None:
        sideband = find_sideband(backgrounds[0], hologram_pixel)
    kw = dict(hologram_pixel=hologram_pixel, n=geometry.n, pupil_frequency=geometry.pupil_frequency)
    return field_ratio(extract_fields(holograms, sideband, **kw), extract_fields(backgrounds, sideband, **kw))
