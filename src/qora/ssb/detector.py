"""The detector and scan geometry of a 4D-STEM dataset: the bright-field disk fitted on the mean
pattern, its pixels and their k, the scan's frequencies, the bright-field level's check, and how
the (possibly lazy) data are read.

Conventions (docs/ssb.md): data axes (scan_row, scan_col, det_row, det_col); units A, 1/A, mrad, kV.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from qora.ssb.optics import wavelength

__all__ = ["DetectorFit", "fit_detector", "fit_detector_from_mean", "bright_field_pixels", "scan_frequencies",
           "check_level", "array_like", "gather"]

@dataclass(frozen=True)
class DetectorFit:
    """The bright-field disk on the detector: centre (row, col) and radius, pixels;
    ``mrad_per_pixel`` from the convergence semi-angle."""

    center: tuple
    radius: float
    mrad_per_pixel: float


def fit_detector(data, alpha_mrad: float, *, threshold: float = 0.5, rows: int | None = None) -> DetectorFit:
    """Centre and radius of the bright-field disk from the mean diffraction pattern, to sub-pixel.

    The pattern is scaled by its bright-field level (the median above ``threshold`` of the
    maximum); its sum is then the disk's area in pixels (partly lit edge pixels count by
    their fraction), so radius = sqrt(area / pi), and the centre is the intensity-weighted
    centroid of the scaled pattern, clipped to [0, 1] to keep dark-field counts out.
    ``rows``: sum only that many scan rows, evenly spaced (a large memory-mapped scan need not be
    read whole for a mean pattern; every row by default).
    """
    data = array_like(data)
    if data.ndim != 4:
        raise ValueError(f"4D-STEM data must be (scan_row, scan_col, det_row, det_col), got shape {data.shape}")
    if rows is not None:
        if rows < 1:
            raise ValueError(f"rows must be positive, got {rows}")
        data = data[np.unique(np.linspace(0, data.shape[0] - 1, min(rows, data.shape[0])).round().astype(int))]
    return fit_detector_from_mean(np.asarray(data.mean(axis=(0, 1), dtype=np.float64)), alpha_mrad,
                                  threshold=threshold)


def fit_detector_from_mean(mean, alpha_mrad: float, *, threshold: float = 0.5) -> DetectorFit:
    """:func:`fit_detector` from the mean diffraction pattern (det_row, det_col) itself."""
    mean = np.asarray(mean, np.float64)
    if not np.all(np.isfinite(mean)):
        raise ValueError("the data hold NaN or Inf")
    if not mean.max() > 0:
        raise ValueError("the mean diffraction pattern is zero: no bright field to fit")
    level = np.median(mean[mean > threshold * mean.max()])
    w = np.clip(mean / level, 0.0, 1.0)
    area = w.sum()
    rows, cols = np.indices(w.shape)
    center = (float((w * rows).sum() / area), float((w * cols).sum() / area))
    radius = math.sqrt(area / math.pi)
    return DetectorFit(center, radius, alpha_mrad / radius)


def bright_field_pixels(detector_shape, detector: DetectorFit, alpha_mrad: float, kv: float):
    """The bright-field pixels, inside the disk by their centres: their flat indices on the
    detector and their k = (ky, kx) (1/A, detector axes), (nbf, 2)."""
    lam = wavelength(kv)
    dk = detector.mrad_per_pixel * 1e-3 / lam
    rows, cols = np.indices(tuple(detector_shape))
    ky = (rows - detector.center[0]) * dk
    kx = (cols - detector.center[1]) * dk
    index = np.flatnonzero(np.hypot(ky, kx) <= alpha_mrad * 1e-3 / lam)
    return index, np.stack([ky.ravel()[index], kx.ravel()[index]], 1)


def scan_frequencies(scan_shape, scan_step: float, rotation: float, *, half: bool, xp=np):
    """(Qy, Qx) (1/A) of the scan's FFT grid (its half plane with ``half``), in the detector's
    axes: the scan frame turned by ``rotation`` rad."""
    sy, sx = scan_shape
    cols = sx // 2 + 1 if half else sx
    qy = xp.asarray(np.fft.fftfreq(sy, scan_step))[:, None] * xp.ones((1, cols))
    qx_axis = np.fft.rfftfreq(sx, scan_step) if half else np.fft.fftfreq(sx, scan_step)
    qx = xp.asarray(qx_axis)[None, :] * xp.ones((sy, 1))
    c, s = math.cos(rotation), math.sin(rotation)
    return c * qy + s * qx, -s * qy + c * qx



def check_level(level) -> None:
    """Raises ValueError unless the bright field's level (its mean count) is positive."""
    if not float(level) > 0:
        raise ValueError("the bright field holds no intensity")


def array_like(data):
    """``data`` as it is when it is an array that reads lazily (a NumPy memmap, a dask array from
    a detector file), else as a NumPy array."""
    if isinstance(data, np.ndarray) or (hasattr(data, "shape") and hasattr(data, "compute")):
        return data
    return np.asarray(data)


def gather(data, pixels):
    """(scan_row, scan_col, npix) of the detector pixels (rows, cols): only they are read (for a
    lazy array, the band of detector rows that holds them)."""
    rows, cols = pixels
    if isinstance(data, np.ndarray):
        return data[:, :, rows, cols]
    r0, r1 = int(rows.min()), int(rows.max()) + 1
    band = np.asarray(data[:, :, r0:r1])
    return band[:, :, rows - r0, cols]
