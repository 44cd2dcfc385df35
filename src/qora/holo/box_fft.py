"""Half-spectrum transforms of a volume known to be zero outside a central box (pruned 3D FFTs).

TV's FISTA loop transforms, every iteration, a real volume that is zero outside the recorded
field of view: an n^3 box inside the solver's big^3 grid (big = 2n at the default oversampling),
and only the box of the inverse transform is read back. Done axis by axis, the forward transform
needs only the lines that hold data: along x the n^2 rows of the box (a quarter of big^2), along y
n * (big / 2 + 1) lines (a half), along z all of them; the inverse is the same in reverse, keeping
the box's planes after each axis. At big = 2n that is (1/4 + 1/2 + 1) / 3 = 58% of the work of
the full transforms, with no copy of the zero-padded grid (measured in docs/holo-performance.md).

Layouts are those of :class:`qora.holo.odt.FieldOfView`: the box centre-origin (n^3), the spectrum
in FFT order (origin at index 0) as :func:`numpy.fft.rfftn` of the zero-padded grid returns it.
The transforms are ducc0's (scipy.fft's where ducc0 is missing), on :func:`qora.backend.fft.cpu_threads`.
"""

from __future__ import annotations

import numpy as np

from qora.backend.fft_host import _ducc0, cpu_threads

__all__ = ["BoxSpectrum"]


def _runs(ndim: int, axis: int, n: int, big: int):
    """The box's two runs along ``axis``: (index into the FFT-layout grid, index into the centre-origin box)."""
    lo = n // 2

    def sl(a, b):
        index = [slice(None)] * ndim
        index[axis] = slice(a, b)
        return tuple(index)

    return ((sl(0, n - lo), sl(lo, n)), (sl(big - lo, big), sl(0, lo)))


def _place(dst, src, axis: int, n: int) -> None:
    """Write the centre-origin ``src`` (length n along ``axis``) into the FFT-layout ``dst``."""
    for grid, box in _runs(dst.ndim, axis, n, dst.shape[axis]):
        dst[grid] = src[box]


def _take(src, axis: int, n: int):
    """The centre-origin box (length n along ``axis``) of the FFT-layout ``src``, a new C-contiguous array."""
    shape = list(src.shape)
    shape[axis] = n
    out = np.empty(shape, src.dtype)
    for grid, box in _runs(src.ndim, axis, n, src.shape[axis]):
        out[box] = src[grid]
    return out


class BoxSpectrum:
    """rfftn of a box placed in a zero big^3 grid (:meth:`forward`), and the box of irfftn (:meth:`inverse`).

    ``forward(box)`` equals ``rfftn(FieldOfView.expand(box))`` and ``inverse(spectrum)`` equals
    ``FieldOfView.crop(irfftn(spectrum, s=(big,) * 3))`` to rounding (tests/holo/test_holo_box_fft.py).
    """

    def __init__(self, big: int, n: int) -> None:
        if not 0 < n <= big:
            raise ValueError(f"the box {n} must fit the grid {big}")
        self.big, self.n = big, n
        self.half = big // 2 + 1
        self._ducc0 = _ducc0()

    def _threads(self, size: int) -> int:
        return cpu_threads(size)

    def _r2c(self, a, axis):
        if self._ducc0 is not None:
            return self._ducc0.fft.r2c(a, axes=(axis,), forward=True, nthreads=self._threads(a.size))
        import scipy.fft
        return scipy.fft.rfft(a, axis=axis, workers=self._threads(a.size))

    def _c2c(self, a, axis, forward):
        if self._ducc0 is not None:
            return self._ducc0.fft.c2c(a, axes=(axis,), forward=forward, out=a, nthreads=self._threads(a.size))
        import scipy.fft
        f = scipy.fft.fft if forward else scipy.fft.ifft
        return f(a, axis=axis, norm="backward" if forward else "forward", overwrite_x=True,
                 workers=self._threads(a.size))

    def _c2r(self, a, axis):
        if self._ducc0 is not None:
            return self._ducc0.fft.c2r(a, axes=(axis,), lastsize=self.big, forward=False,
                                       nthreads=self._threads(a.size))
        import scipy.fft
        return scipy.fft.irfft(a, n=self.big, axis=axis, norm="forward", workers=self._threads(a.size))

    def forward(self, box):
        """The half spectrum (big, big, big // 2 + 1), complex128, of the real centre-origin ``box`` (n^3)."""
        n, big, h = self.n, self.big, self.half
        rows = np.zeros((n, n, big))
        _place(rows, np.asarray(box, np.float64), 2, n)
        lines = np.zeros((n, big, h), np.complex128)
        _place(lines, self._r2c(rows, 2), 1, n)
        self._c2c(lines, 1, True)
        spectrum = np.zeros((big, big, h), np.complex128)
        _place(spectrum, lines, 0, n)
        return self._c2c(spectrum, 0, True)

    def inverse(self, spectrum):
        """The real centre-origin box (n^3) of the inverse transform (NumPy's 1 / big^3 scale) of a half spectrum."""
        n, big = self.n, self.big
        planes = self._c2c(np.array(spectrum, np.complex128), 0, False)
        lines = _take(planes, 0, n)
        self._c2c(lines, 1, False)
        rows = _take(lines, 1, n)
        volume = self._c2r(rows, 2)
        return _take(volume, 2, n) / float(big) ** 3
