"""The detector and scan geometry of a 4D-STEM dataset: the bright-field disk fitted on the mean
pattern, its pixels and their k, the scan's frequencies, the bright-field level's check, and how
the (possibly lazy) data are read.

Conventions (docs/ssb.md): data axes (scan_row, scan_col, det_row, det_col); units A, 1/A, mrad, kV.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from qora.io.errors import InputError
from qora.io.validate import number, positive
from qora.ssb.optics import semiangle, voltage, wavelength

__all__ = ["DetectorFit", "fit_detector", "fit_detector_from_mean", "bright_field_pixels", "scan_frequencies",
           "check_level", "check_data", "mean_pattern", "check_settings", "count_nonfinite", "array_like", "gather",
           "virtual_bright_field", "scan_steps"]


@dataclass(frozen=True)
class DetectorFit:
    """The bright-field disk on the detector: centre (row, col) and radius, detector pixels;
    ``mrad_per_pixel`` the scattering angle per detector pixel (mrad), from the convergence semi-angle."""

    center: tuple
    radius: float
    mrad_per_pixel: float

    def __post_init__(self) -> None:
        try:
            center = tuple(float(c) for c in self.center)
        except (TypeError, ValueError):
            raise InputError(f"detector.center must be (row, col) in pixels, got {self.center!r}") from None
        if len(center) != 2 or not all(math.isfinite(c) for c in center):
            raise InputError(f"detector.center must be two finite numbers (row, col) in pixels, got {self.center!r}")
        object.__setattr__(self, "center", center)
        object.__setattr__(self, "radius", positive("detector.radius", self.radius, unit="pixels"))
        object.__setattr__(self, "mrad_per_pixel", positive("detector.mrad_per_pixel", self.mrad_per_pixel,
                                                            unit="mrad"))

    def described(self) -> str:
        """The fit in one phrase for messages: centre (row, column) and radius in px, mrad per px."""
        cy, cx = self.center
        return (f"centre ({cy:.2f}, {cx:.2f}) px, radius {self.radius:.3g} px, {self.mrad_per_pixel:.4g} mrad per "
                "pixel")

    def check_frame(self, detector_shape) -> None:
        """Refuse a disk whose centre lies outside the detector's frame (det_row, det_col)."""
        rows, cols = detector_shape
        r, c = self.center
        if not (-0.5 <= r <= rows - 0.5 and -0.5 <= c <= cols - 0.5):
            raise InputError(f"detector.center ({r:g}, {c:g}) lies outside the detector's frame of {rows} x {cols} "
                             "pixels (row, col)")


def fit_detector(data, alpha_mrad: float, *, threshold: float = 0.5, rows: int | None = None,
                 edge: str = "intensity", mrad_per_pixel: float | None = None) -> DetectorFit:
    """Centre and radius of the bright-field disk from the mean diffraction pattern, to sub-pixel.

    The pattern is scaled by its bright-field level (the median above ``threshold`` of the
    maximum); its sum is then the disk's area in pixels (partly lit edge pixels count by
    their fraction), so radius = sqrt(area / pi), and the centre is the intensity-weighted
    centroid of the scaled pattern, clipped to [0, 1] to keep dark-field counts out.
    ``data``: (scan_row, scan_col, det_row, det_col), counts; ``alpha_mrad``: the convergence
    semi-angle (mrad), which the disk's radius in pixels calibrates (``mrad_per_pixel``).
    ``rows``: sum only that many scan rows, evenly spaced (a large memory-mapped scan need not be
    read whole for a mean pattern; every row by default). ``edge`` and ``mrad_per_pixel``: see
    :func:`fit_detector_from_mean`.
    """
    data = check_data(data)
    if rows is not None:
        from qora.io.validate import integer

        rows = integer("rows", rows, low=1)
        rows = np.unique(np.linspace(0, data.shape[0] - 1, min(rows, data.shape[0])).round().astype(int))
    mean = mean_pattern(data, rows)
    if not np.all(np.isfinite(mean)):
        count, size = count_nonfinite(data)
        raise InputError(f"data has {count} non-finite (NaN or Inf) values of {size}; mask them (set them to 0) "
                         "or correct the data")
    return fit_detector_from_mean(mean, alpha_mrad, threshold=threshold, edge=edge, mrad_per_pixel=mrad_per_pixel)


def mean_pattern(data, rows=None) -> np.ndarray:
    """The mean diffraction pattern (det_row, det_col), float64, over the scan rows ``rows``
    (indices; every row when None). A NumPy array (a memory map too) is summed row by row on the
    host's threads (:func:`qora.backend.host.num_threads`): NumPy's sums release the GIL, so a
    file in the page cache is read at memory speed, not one core's (issue 38: 32 rows of the
    512 x 512 x 192^2 scan, 1.2 GB, took 0.7-1.1 s on one thread of the H200 host, 0.04-0.06 s on 16). A lazy array (dask, a reader's
    view) computes its own mean."""
    rows = np.arange(data.shape[0]) if rows is None else np.asarray(rows)
    if not isinstance(data, np.ndarray):
        return np.asarray(data[rows].mean(axis=(0, 1), dtype=np.float64))
    from qora.backend.host import map_parts

    def part_sum(lo, hi):  # one pattern-sized float64 sum per thread
        total = np.zeros(data.shape[2:], np.float64)
        for r in rows[lo:hi]:
            total += np.add.reduce(data[int(r)], axis=0, dtype=np.float64)
        return total

    return sum(map_parts(part_sum, len(rows))) / (len(rows) * data.shape[1])


EDGES = ("intensity", "amplitude")
AMPLITUDE_FLOOR = 0.01  # of the bright-field level: below it a pixel is dark field, not the disk's edge


def fit_detector_from_mean(mean, alpha_mrad: float, *, threshold: float = 0.5, edge: str = "intensity",
                           mrad_per_pixel: float | None = None) -> DetectorFit:
    """:func:`fit_detector` from the mean diffraction pattern (det_row, det_col) itself (counts;
    ``alpha_mrad`` the convergence semi-angle, mrad).

    The scale: ``mrad_per_pixel`` where the detector is calibrated (a file's metadata), else fitted,
    the disk's radius against ``alpha_mrad``. How the disk's edge is read (docs/ssb.md, "Detector
    calibration"): ``edge="intensity"`` counts each edge pixel by its level-scaled intensity, right
    for an edge softened by a blur that keeps the counts (the detector's point spread, the source
    size, partial pixels): the disk's integral, so its area, is unchanged. ``edge="amplitude"``
    counts them by its square root, right for an aperture whose edge is soft in amplitude (abTEM's
    aperture, a ramp of one pixel: |ramp|^2 makes the intensity disk dk / 6 alpha small, 1.5% at 10
    px); pixels below ``AMPLITUDE_FLOOR`` of the level are left out as dark field (whose square root
    would add a ring of area)."""
    if edge not in EDGES:
        raise InputError(f"edge must be one of {', '.join(EDGES)}, got {edge!r}")
    alpha_mrad = semiangle(alpha_mrad)
    mean = np.asarray(mean)
    if np.iscomplexobj(mean) or mean.ndim != 2 or not mean.size:
        raise InputError(f"the mean pattern must be a real 2D array (det_row, det_col), got {mean.dtype} of shape "
                         f"{mean.shape}")
    mean = mean.astype(np.float64)
    if not np.all(np.isfinite(mean)):
        raise InputError(f"the mean pattern has {int((~np.isfinite(mean)).sum())} non-finite (NaN or Inf) values of "
                         f"{mean.size}; the data hold NaN or Inf")
    if not mean.max() > 0:
        raise InputError("data: the mean diffraction pattern is zero (or negative) everywhere: no bright field to "
                         "fit (is the file all zeros?)")
    level = np.median(mean[mean > threshold * mean.max()])
    w = np.clip(mean / level, 0.0, 1.0)
    area = w.sum()
    rows, cols = np.indices(w.shape)
    center = (float((w * rows).sum() / area), float((w * cols).sum() / area))
    if edge == "amplitude":
        area = np.where(w >= AMPLITUDE_FLOOR, np.sqrt(w), 0.0).sum()
    radius = math.sqrt(area / math.pi)
    if mrad_per_pixel is None:
        mrad_per_pixel = alpha_mrad / radius
    return DetectorFit(center, radius, positive("mrad_per_pixel", mrad_per_pixel, unit="mrad"))


def bright_field_pixels(detector_shape, detector: DetectorFit, alpha_mrad: float, kv: float):
    """The bright-field pixels, inside the disk by their centres: their flat indices on the
    detector and their k = (ky, kx) (1/A, detector axes), (nbf, 2). ``detector_shape`` is
    (det_row, det_col); ``alpha_mrad`` the convergence semi-angle (mrad); ``kv`` the
    accelerating voltage (kV)."""
    lam = wavelength(kv)
    dk = detector.mrad_per_pixel * 1e-3 / lam
    rows, cols = np.indices(tuple(detector_shape))
    ky = (rows - detector.center[0]) * dk
    kx = (cols - detector.center[1]) * dk
    index = np.flatnonzero(np.hypot(ky, kx) <= alpha_mrad * 1e-3 / lam)
    return index, np.stack([ky.ravel()[index], kx.ravel()[index]], 1)


def scan_steps(scan_step) -> tuple:
    """(step_y, step_x) (A) of a scan step given as one number (a square grid) or as a pair
    (step_y along the scan's rows, step_x along its columns), each refused unless positive."""
    values = np.ravel(np.asarray(scan_step, dtype=object))
    if values.size == 1:
        step = positive("scan_step", values[0], unit="A")
        return step, step
    if values.size != 2:
        raise InputError(f"scan_step must be one number or (step_y, step_x), A; got {scan_step!r}")
    return positive("scan_step (y)", values[0], unit="A"), positive("scan_step (x)", values[1], unit="A")


def scan_frequencies(scan_shape, scan_step, rotation: float, *, half: bool, xp=np):
    """(Qy, Qx) (1/A) of the scan's FFT grid (its half plane with ``half``), in the detector's
    axes: the scan frame turned by ``rotation`` rad. ``scan_shape`` is (scan_row, scan_col) and
    ``scan_step`` the scan step (A; one number, or (step_y, step_x) for a scan whose steps along
    its rows and columns differ: the frequencies are taken on the scan's own axes, then turned)."""
    if xp is np:  # the fits ask for the same host grid at each band they make (1.5 ms each at 512^2)
        return _host_frequencies(tuple(int(n) for n in scan_shape), scan_steps(scan_step), float(rotation), bool(half))
    sy, sx = scan_shape
    step_y, step_x = scan_steps(scan_step)
    cols = sx // 2 + 1 if half else sx
    qy = xp.asarray(np.fft.fftfreq(sy, step_y))[:, None] * xp.ones((1, cols))
    qx_axis = np.fft.rfftfreq(sx, step_x) if half else np.fft.fftfreq(sx, step_x)
    qx = xp.asarray(qx_axis)[None, :] * xp.ones((sy, 1))
    c, s = math.cos(rotation), math.sin(rotation)
    return c * qy + s * qx, -s * qy + c * qx


def unresolved_out(spectrum, scan_shape) -> None:
    """Zero, in place, the bins of a half-plane image spectrum that the scan does not resolve: at an even
    side's Nyquist frequency +Q and -Q are one bin, so G there mixes Phi(Q) Gamma(Q) with Phi(-Q) Gamma(-Q)."""
    sy, sx = scan_shape
    if sy % 2 == 0:
        spectrum[sy // 2] = 0
    if sx % 2 == 0:
        spectrum[:, sx // 2] = 0


@functools.lru_cache(maxsize=8)
def _host_frequencies(scan_shape: tuple, steps: tuple, rotation: float, half: bool):
    """:func:`scan_frequencies` on the host, kept for reuse: read-only arrays."""
    sy, sx = scan_shape
    cols = sx // 2 + 1 if half else sx
    qy = np.fft.fftfreq(sy, steps[0])[:, None] * np.ones((1, cols))
    qx = (np.fft.rfftfreq(sx, steps[1]) if half else np.fft.fftfreq(sx, steps[1]))[None, :] * np.ones((sy, 1))
    c, s = math.cos(rotation), math.sin(rotation)
    out = (c * qy + s * qx, -s * qy + c * qx)
    for a in out:
        a.setflags(write=False)
    return out


def check_level(level, data=None) -> None:
    """Raises InputError unless the bright field's level (its mean count) is positive and finite
    (with ``data``, a non-finite level says how many values of the data are NaN or Inf)."""
    level = float(level)
    if not math.isfinite(level):
        detail = ""
        if data is not None:
            count, size = count_nonfinite(data)
            detail = f" ({count} non-finite values of {size})"
        raise InputError(f"data: the bright field holds NaN or Inf{detail}; mask them (set them to 0) or correct "
                         "the data")
    if not level > 0:
        raise InputError("data: the bright field holds no intensity (all zero or negative)")


def check_settings(kv, alpha_mrad, scan_step, rotation=0.0):
    """The microscope settings as finite floats, each refused with its name when it is not a
    positive number (the rotation: any finite number); the scan step a float, or a (step_y,
    step_x) pair of floats where the two differ (:func:`scan_steps`)."""
    steps = scan_steps(scan_step)
    return (voltage(kv), semiangle(alpha_mrad),
            steps[0] if steps[0] == steps[1] else steps, number("rotation", rotation, unit="rad"))


def check_data(data):
    """``data`` (:func:`array_like`) if it can be 4D-STEM data: four axes (scan_row, scan_col,
    det_row, det_col), none empty, real numbers; else an InputError that says what it is. Its
    values are checked where they are read (the mean pattern, the bright field): NaN or Inf there
    is refused, with the count."""
    data = array_like(data)
    shape = tuple(getattr(data, "shape", ()))
    if len(shape) != 4:
        raise InputError(f"4D-STEM data must be (scan_row, scan_col, det_row, det_col), got shape {shape}")
    if not all(shape):
        raise InputError(f"data is empty (shape {shape})")
    dtype = np.dtype(data.dtype)
    if dtype.kind == "c":
        raise InputError(f"data must be real intensities, got complex values ({dtype}); pass abs(x)**2")
    if dtype.kind not in "iuf":
        raise InputError(f"data must hold numbers (counts or intensities), got dtype {dtype}")
    return data


def count_nonfinite(data, rows: int = 16) -> tuple:
    """(non-finite values, all values) of 4D data, read ``rows`` scan rows at a time (a memory map
    is not read whole)."""
    count = 0
    for r in range(0, data.shape[0], rows):
        count += int((~np.isfinite(np.asarray(data[r:r + rows]))).sum())
    return count, int(np.prod(data.shape))


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


def virtual_bright_field(data, *, center=None, radius=None, rows: int = 16) -> np.ndarray:
    """The virtual bright-field image (scan_row, scan_col) float64: each pattern's counts summed over
    a disk of ``radius`` detector pixels about ``center`` (row, col) (pixels in by their centres;
    default the bright-field disk fitted on the mean pattern, :func:`fit_detector_from_mean`),
    read ``rows`` scan rows at a time (a lazy array is never read whole)."""
    data = check_data(data)
    if center is None or radius is None:
        disk = fit_detector(data, 1.0, rows=64)
        center = disk.center if center is None else center
        radius = disk.radius if radius is None else radius
    radius = positive("radius", radius, unit="pixels")
    r, c = np.indices(data.shape[2:])
    mask = np.hypot(r - float(center[0]), c - float(center[1])) <= radius
    if not mask.any():
        raise InputError(f"no detector pixel lies within {radius:g} px of {tuple(center)}")
    out = np.empty(data.shape[:2])
    for start in range(0, data.shape[0], rows):
        block = np.asarray(data[start:start + rows], dtype=np.float64)
        out[start:start + rows] = block[:, :, mask].sum(-1)
    return out
