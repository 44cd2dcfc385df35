"""Descan: the bright-field disk's drift across the detector as the probe is scanned (the descan
coils do not quite cancel the scan), measured, fitted by a plane or a parabola over the scan, and
taken out of the patterns before G is made (docs/ssb.md, "Descan").

Conventions: data (scan_row, scan_col, det_row, det_col); shifts in detector pixels (row, col).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qora.io.errors import InputError
from qora.io.validate import integer
from qora.ssb.detector import check_data

__all__ = ["Descan", "disk_centers", "fit_descan", "correct_descan"]

ORDERS = {"plane": 1, "parabola": 2}


def disk_centers(data, *, rows: int = 16) -> np.ndarray:
    """The centre of each pattern, (scan_row, scan_col, 2) detector pixels (row, col): its centre of
    mass, the whole pattern's. A descan moves the whole pattern, so the centre of mass follows it
    exactly (a Fourier shift moves it by the shift), while the specimen moves it only by its own
    small, signed deflection (the DPC signal) that a smooth fit over the scan averages out. (A
    level-scaled, clipped centroid of the disk alone, which follows the disk's lit area, locks to
    the pixel grid: on the simulator it fitted a 1.5 px parabola to 0.05 px, the centre of mass to
    0.004 px.) Read ``rows`` scan rows at a time."""
    data = check_data(data)
    rows = integer("rows", rows, low=1)
    r, c = np.indices(data.shape[2:])
    out = np.empty(data.shape[:2] + (2,))
    for start in range(0, data.shape[0], rows):
        block = np.asarray(data[start:start + rows], dtype=np.float64)
        total = block.sum((2, 3))
        if not np.all(total > 0):
            raise InputError("data: a pattern holds no counts (all zero or negative): no centre to follow the "
                             "descan by")
        out[start:start + rows, :, 0] = (block * r).sum((2, 3)) / total
        out[start:start + rows, :, 1] = (block * c).sum((2, 3)) / total
    return out


def _terms(scan_shape, order: int) -> np.ndarray:
    """The polynomial's terms over the scan, (positions, terms): 1, y, x (and y^2, y x, x^2), y and
    x the scan row and column scaled to [-1, 1] (a well conditioned fit)."""
    sy, sx = scan_shape
    y, x = np.meshgrid(np.linspace(-1, 1, sy) if sy > 1 else np.zeros(1),
                       np.linspace(-1, 1, sx) if sx > 1 else np.zeros(1), indexing="ij")
    y, x = y.ravel(), x.ravel()
    terms = [np.ones_like(y), y, x]
    if order == 2:
        terms += [y * y, y * x, x * x]
    return np.stack(terms, 1)


@dataclass(frozen=True)
class Descan:
    """A fitted descan: ``coefficients`` (terms, 2) of the disk centre's polynomial over the scan
    (terms 1, y, x [, y^2, y x, x^2] of the scan row and column scaled to [-1, 1]; columns det_row,
    det_col, pixels), ``order`` 1 (a plane) or 2 (a parabola), ``scan_shape``, and ``residual`` the
    rms (pixels) of the measured centres about the fit (what the specimen and the noise move them)."""

    coefficients: np.ndarray
    order: int
    scan_shape: tuple
    residual: float

    def centers(self) -> np.ndarray:
        """The fitted disk centre at each position, (scan_row, scan_col, 2) pixels."""
        return (_terms(self.scan_shape, self.order) @ self.coefficients).reshape(*self.scan_shape, 2)

    def shifts(self) -> np.ndarray:
        """The fitted drift, (scan_row, scan_col, 2) pixels: the centre less its mean over the scan
        (what :func:`correct_descan` takes out; the mean centre stays, where the detector fit finds it)."""
        centers = self.centers()
        return centers - centers.mean((0, 1))

    @property
    def span(self) -> float:
        """The largest drift over the scan (pixels), row and column together."""
        return float(np.hypot(*np.moveaxis(self.shifts(), -1, 0)).max())


def fit_descan(data, *, model: str = "plane", rows: int = 16) -> Descan:
    """Fit the descan of 4D data (scan_row, scan_col, det_row, det_col): the disk centres
    (:func:`disk_centers`) fitted by least squares with a plane (``model="plane"``: a descan
    linear in the scan coordinates, the usual miscalibration of the descan coils) or a parabola
    (``"parabola"``: also the quadratic terms, for a drift that bends across a large field)."""
    if model not in ORDERS:
        raise InputError(f"descan model must be one of {', '.join(ORDERS)}, got {model!r}")
    order = ORDERS[model]
    data = check_data(data)
    centers = disk_centers(data, rows=rows).reshape(-1, 2)
    terms = _terms(data.shape[:2], order)
    if terms.shape[0] < terms.shape[1] + 1:
        raise InputError(f"a {model} descan needs more than {terms.shape[1]} scan positions, the scan has "
                         f"{terms.shape[0]}")
    coefficients, *_ = np.linalg.lstsq(terms, centers, rcond=None)
    residual = float(np.sqrt(np.mean(np.sum((centers - terms @ coefficients) ** 2, 1))))
    return Descan(coefficients, order, tuple(data.shape[:2]), residual)


def _shift_patterns(block: np.ndarray, shifts: np.ndarray) -> np.ndarray:
    """Patterns (rows, cols, det_row, det_col) moved by -shifts (rows, cols, 2) pixels, by a phase
    ramp on their Fourier transforms in a frame padded with zeros to twice the detector's size.

    Why not interpolation: the SSB signal is a small modulation of the patterns, and an
    interpolation blurs each pattern by an amount that depends on the fraction of a pixel it is
    moved, which writes a modulation correlated with the scan many times larger (on the simulator,
    bilinear correction of a 1.5 px descan left an image correlated 0.3 with the true one, the
    Fourier shift 0.98). Why padded: the detector's frame is not periodic (the dark field at one
    edge is not that at the other), and a shift in the frame itself would wrap one onto the other
    and lose the Nyquist row and column (a 0.8 px descan taken out that way left 0.80 of the image,
    padded 0.91). What comes in from beyond the detector's edge reads 0."""
    from qora.backend.fft import irfftn, rfftn

    n0, n1 = block.shape[2:]
    ky = np.fft.fftfreq(2 * n0)
    kx = np.fft.rfftfreq(2 * n1)
    frames = block.reshape(-1, n0, n1)
    moves = shifts.reshape(-1, 2)
    out = np.empty(frames.shape)
    step = 64  # frames at a time: the padded spectra of a block of scan rows would be GBs
    for i in range(0, len(frames), step):
        padded = np.zeros((len(frames[i:i + step]), 2 * n0, 2 * n1))
        padded[:, :n0, :n1] = frames[i:i + step]
        # the ramp is separable: exp(2 pi i (s_y k_y + s_x k_x)) = row factor x column factor
        rows = np.exp(2j * np.pi * moves[i:i + step, 0, None] * ky)[:, :, None]
        cols = np.exp(2j * np.pi * moves[i:i + step, 1, None] * kx)[:, None, :]
        spectrum = rfftn(padded, axes=(1, 2)) * rows * cols
        out[i:i + step] = irfftn(spectrum, s=(2 * n0, 2 * n1), axes=(1, 2))[:, :n0, :n1]
    return out.reshape(block.shape)


def correct_descan(data, descan: Descan, *, in_memory: bool | None = None):
    """``data`` with the descan taken out: each pattern moved back by the fitted drift
    (:meth:`Descan.shifts`, a Fourier shift), what :class:`qora.ssb.Session` is given, so G is made
    of the corrected patterns. float32 (float64 for float64 data).

    ``in_memory``: True computes the corrected data once, into memory (a NumPy array); False keeps
    them lazy, a dask array whose blocks of scan rows are read and shifted each time they are read
    (a Session reads its data three or more times: the mean pattern, the level, each chunk of
    bright-field pixels, so each read pays the shifts again: ~2.5 ms a 64 x 64 pattern on a shared
    core); None (default) is True when the corrected data take at most a quarter of the memory
    available, else False."""
    import dask.array as da

    from qora.backend.host import available_memory
    from qora.ssb.readers import lazy_array

    data = check_data(data)
    if tuple(data.shape[:2]) != tuple(descan.scan_shape):
        raise InputError(f"the descan was fitted on a {descan.scan_shape} scan, the data's is {data.shape[:2]}")
    shifts = descan.shifts()
    dtype = np.float32 if np.dtype(data.dtype).itemsize <= 4 else np.float64
    if in_memory is None:
        free = available_memory()
        in_memory = free is not None and int(np.prod(data.shape)) * np.dtype(dtype).itemsize <= free // 4
    lazy = lazy_array(data)
    if isinstance(lazy, np.ndarray):
        row = int(np.prod(data.shape[1:])) * np.dtype(data.dtype).itemsize
        lazy = da.from_array(lazy, chunks=(max(1, (64 << 20) // max(1, row)), -1, -1, -1))
    else:
        lazy = lazy.rechunk({1: -1, 2: -1, 3: -1})

    def block(x, block_info=None):
        start, stop = block_info[0]["array-location"][0]
        return _shift_patterns(np.asarray(x, dtype=np.float64), shifts[start:stop]).astype(dtype)

    corrected = lazy.map_blocks(block, dtype=dtype)
    return np.asarray(corrected) if in_memory else corrected
