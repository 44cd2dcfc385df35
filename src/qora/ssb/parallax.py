"""The parallax (tcBF) image on a grid finer than the scan's: :meth:`qora.ssb.Session.image` with ``upsample`` above 1.

Each bright-field pixel's image shows the specimen shifted by grad chi(k) / 2 pi; the shifts differ by sub-pixel
amounts between pixels, which is what fills a finer grid. Array code (:func:`_scatter`) or, where G is on the
device, the kernel :func:`qora.ssb.kernels.parallax_fine` (:func:`_fine`); the session's ``_pick`` chooses.
"""

from __future__ import annotations

import math
from functools import partial

import numpy as np

from qora.backend.fft import fftn, ifftn, irfftn
from qora.ssb import kernels
from qora.ssb.detector import scan_steps
from qora.ssb.optics import Aberrations, chi, chi_gradient
from qora.ssb.timing import Clock as _Clock

__all__ = ["parallax_upsampled"]


def parallax_upsampled(session, aberrations: Aberrations, factor: int, timings: dict | None = None) -> np.ndarray:
    """Parallax on a grid ``factor`` times finer: each bright-field image's samples are
    placed at their shifted positions R + grad chi(k) / 2 pi on the fine grid (bilinear
    weights; the shifts differ by sub-pixel amounts between pixels, which is what fills
    the finer grid), the weighted sums divided by the summed weights, and the result
    phase-flipped by sign(sin chi(Q)) on the fine grid's frequencies."""
    clock = _Clock(session.backend, timings)
    xp = session.xp
    sy, sx = session.scan_shape
    fy, fx = sy * factor, sx * factor
    fine_y, fine_x = (step / factor for step in scan_steps(session.scan_step))
    gx, gy = chi_gradient(session._k[:, 1], session._k[:, 0], aberrations, session.wavelength)
    c, s = math.cos(session.rotation), math.sin(session.rotation)
    # G(Q, k) ~ exp(i grad chi(k).Q): the image of pixel k at R shows the specimen at
    # R + grad chi / 2 pi (scan axes, A), where its samples go
    shift_y = (c * gy - s * gx) / (2 * np.pi)
    shift_x = (s * gy + c * gx) / (2 * np.pi)
    pick = session._pick(partial(_scatter, session), partial(_fine, session), fits=factor in kernels.FINE_FACTORS)
    image = pick(shift_y, shift_x, factor)
    clock.lap("sums")
    qy = xp.asarray(np.fft.fftfreq(fy, fine_y))[:, None]
    qx = xp.asarray(np.fft.fftfreq(fx, fine_x))[None, :]
    qdy, qdx = c * qy + s * qx, -s * qy + c * qx
    flip = xp.sign(xp.sin(chi(qdx, qdy, aberrations, session.wavelength)))
    spectrum = fftn(image, axes=(-2, -1)) * flip / 2
    spectrum[0, 0] = 0
    image = ifftn(spectrum, axes=(-2, -1)).real
    clock.lap("fft")
    image = session.backend.to_host(image)
    clock.lap("copy")
    return image


def _scatter(session, shift_y, shift_x, factor: int):
    """The fine parallax image by scattering each bright-field image's samples with bilinear
    weights (array code), divided by the summed weights."""
    xp = session.xp
    sy, sx = session.scan_shape
    fy, fx = sy * factor, sx * factor
    fine_y, fine_x = (step / factor for step in scan_steps(session.scan_step))
    rows, cols = xp.meshgrid(xp.arange(sy) * factor, xp.arange(sx) * factor, indexing="ij")
    total = xp.zeros(fy * fx)
    weight = xp.zeros(fy * fx)
    # ~10 float64 temporaries per pixel of the scan and of the chunk: chunks of 256 MB each
    for ks, g in session._chunks(min(session.chunk, max(1, (256 << 20) // (8 * sy * sx)))):
        bf = irfftn(g, s=session.scan_shape, axes=(0, 1))  # (sy, sx, chunk): the normalised BF images
        # each pixel's own unscattered level out (edge pixels are partly lit): a level left in
        # would print the coarse grid onto the fine one
        values = bf - bf.mean(axis=(0, 1))
        py = rows[..., None] + shift_y[ks] / fine_y
        px = cols[..., None] + shift_x[ks] / fine_x
        y0, x0 = xp.floor(py).astype(np.int64), xp.floor(px).astype(np.int64)
        wy, wx = py - y0, px - x0
        for dy, wy_ in ((0, 1 - wy), (1, wy)):
            for dx, wx_ in ((0, 1 - wx), (1, wx)):
                idx = (((y0 + dy) % fy) * fx + (x0 + dx) % fx).ravel()
                w = (wy_ * wx_).ravel()
                xp.add.at(total, idx, w * values.ravel())  # repeated indices summed
                xp.add.at(weight, idx, w)
    return xp.where(weight > 0, total / xp.where(weight > 0, weight, 1), 0).reshape(fy, fx)


def _fine(session, shift_y, shift_x, factor: int):
    """:func:`_scatter` by the kernel :func:`qora.ssb.kernels.parallax_fine`: the scattered
    sum's fine spectrum summed over the bright field straight from G, then one inverse FFT; the
    summed weights repeat with period ``factor`` (the samples of one image lie ``factor`` fine
    pixels apart, so each fine pixel takes at most one of them per axis), an F x F table."""
    xp = session.xp
    sy, sx = session.scan_shape
    ny, nx = sy * factor, sx * factor
    shifts = np.stack([session.backend.to_host(shift_y), session.backend.to_host(shift_x)], 1)
    sigma = shifts / (np.asarray(scan_steps(session.scan_step)) / factor)
    whole = np.floor(sigma)
    frac = sigma - whole
    spectrum = xp.empty((ny, nx), np.complex64)
    kernels.parallax_fine(G=session.G, factor=factor, whole=whole, frac=frac, spectrum=spectrum)
    total = ifftn(spectrum, axes=(-2, -1)).real
    # per axis, an image's sample lands on (floor(sigma) + R factor) with weight 1 - e and on the
    # next fine pixel with e: weight by fine row modulo factor, summed over the pixels
    per_axis = []
    for axis in (0, 1):
        a = np.zeros((len(frac), factor))
        first = np.mod(whole[:, axis], factor).astype(int)
        np.add.at(a, (np.arange(len(frac)), first), 1 - frac[:, axis])
        np.add.at(a, (np.arange(len(frac)), (first + 1) % factor), frac[:, axis])
        per_axis.append(a)
    weight = xp.asarray(np.tile(per_axis[0].T @ per_axis[1], (sy, sx)), np.float32)
    return xp.where(weight > 0, total / xp.where(weight > 0, weight, 1), 0)
