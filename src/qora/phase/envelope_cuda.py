"""The envelope search's iterations on the GPU: every start at once, each block of iterations one CUDA graph.

The complex passes are the ``batched`` variant's engine (:class:`qora.phase.cuda.CudaEngine`: batched cuFFT,
``phase.cu``'s modulus step and update). The positivity passes iterate real starts through R2C / C2R transforms
with ``envelope.cu``'s damped modulus step and positive update (:class:`PositiveEngine`). Both keep each
start's error in a device history read once per block. The array code (:class:`ArrayIterations` on CuPy) is the
reference they are tested against (tests/phase/test_phase_envelope_gpu.py); docs/phase-performance.md has the
times.
"""

from __future__ import annotations

import math

import numpy as np

from qora.backend import resolve
from qora.phase import kernels as K
from qora.phase.cuda_base import _GraphLoop
from qora.phase.envelope_iterate import BETA, ArrayIterations, Pattern

__all__ = ["PositiveEngine", "CudaIterations", "CHUNK", "SupportNdimage"]

CHUNK = 5  # iterations per captured graph, replayed: every block of the search's schedule is a multiple


def _coefficients(hio: bool) -> tuple[float, float]:
    return (1.0, -BETA) if hio else (0.0, 0.0)


class PositiveEngine(_GraphLoop):
    """HIO and ER with positivity on ``batch`` real starts of ``shape``; the unmeasured Fourier values (``amp_half``
    -1, FFT layout, half spectrum) are multiplied by the damping set with :meth:`iterate`'s ``damp``."""

    def __init__(self, amp_half: np.ndarray, shape, batch: int, *, graph: bool = True) -> None:
        self.backend = resolve("cuda")
        xp = self.xp = self.backend.xp
        self.batch, self.shape = int(batch), tuple(shape)
        full = (self.batch,) + self.shape
        self.plan = self.backend.fft.r2c(full, np.float32, axes=tuple(range(1, len(full))), norm=None)
        self.x, self.p = xp.zeros(full, np.float32), xp.zeros(full, np.float32)
        self.y = xp.empty(self.plan.spectrum_shape, np.complex64)
        self.support = xp.zeros(full, np.uint8)
        self.amp = xp.asarray(np.ascontiguousarray(amp_half, np.float32))
        self.denominator = float(np.sum(np.where(amp_half >= 0, np.asarray(amp_half, np.float64) ** 2, 0.0)))
        self.n, self.n_half = int(np.prod(self.shape)), int(amp_half.size)
        self.scale = 1.0 / math.sqrt(self.n)
        self.damp = xp.ones(1, np.float32)  # read by the kernel: one captured graph serves every damping
        self._init_loop(graph)
        self.plan.forward(self.x, out=self.y)  # cuFFT kernels resident before any capture
        xp.cuda.get_current_stream().synchronize()

    def _step(self, a, b, code) -> None:
        self.plan.forward(self.x, out=self.y)
        K.modulus_damped(y=self.y, amp=self.amp, scale=self.scale, n=self.n_half, batch=self.batch, damp=self.damp,
                         err_sums=self.history, counter=self.counter)
        self.plan.inverse(self.y, out=self.p)  # C2R may overwrite y: it is scratch
        K.update_positive(x=self.x, p=self.p, support=self.support, a=a, b=b, n=self.n, batch=self.batch,
                          counter=self.counter)

    def run(self, count: int, *, hio: bool, damp: float) -> np.ndarray:
        """``count`` iterations; each start's Fourier error per iteration (count, batch), on the host."""
        self.damp.fill(np.float32(damp))
        a, b = _coefficients(hio)
        return self.iterate(count, a, b, "positive", chunk=CHUNK)


class CudaIterations(ArrayIterations):
    """:class:`ArrayIterations`' interface on the GPU's engines; the blocks' errors recorded per block."""

    def __init__(self, pattern: Pattern, starts: int, progress=None, total: int = 0, offset: int = 0) -> None:
        from qora.phase.cuda import CudaEngine

        super().__init__(pattern, starts, progress, total, offset)
        full = np.ones(pattern.shape, bool)
        self.complex_engine = CudaEngine(pattern.native(half=False), full, batch=starts, graph=True)
        self.positive_engine = PositiveEngine(pattern.native(half=True), pattern.shape, starts)

    @staticmethod
    def _load(engine, x, support):
        engine.x[...] = x
        engine.support[...] = support.astype(np.uint8)

    def complex(self, x, support, count: int, *, hio: bool):
        engine = self.complex_engine
        self._load(engine, x, support)
        a, b = _coefficients(hio)
        self.record(engine.iterate(count, a, b, None, chunk=CHUNK))
        return engine.x.copy()

    def positive(self, x, support, count: int, *, hio: bool, damp: float):
        engine = self.positive_engine
        self._load(engine, x, support)
        self.record(engine.run(count, hio=hio, damp=damp))
        return engine.x.copy()


class SupportNdimage:
    """``cupyx.scipy.ndimage`` for the search's support steps (:class:`qora.phase.envelope._Supports`), with its
    Gaussian filter and its dilation by the nearest-neighbour cross taken by ``support.cu``'s two kernels, compiled
    once: cupyx compiles a kernel per filter length and axis, and a first run on an empty kernel cache spent 19 of
    its 28 s there (docs/phase-performance.md). Everything else is cupyx's."""

    def __init__(self) -> None:
        from qora.backend import cupy_submodule

        self._ndi = cupy_submodule("cupyx.scipy.ndimage")
        self.xp = resolve("cuda").xp

    def __getattr__(self, name):
        return getattr(self._ndi, name)

    def gaussian_filter1d(self, x, sigma: float, axis: int = -1, *, truncate: float = 4.0):
        """:func:`scipy.ndimage.gaussian_filter1d` of a float32 array (mode "reflect"), its weights as scipy makes
        them (float64, normalised, then float32)."""
        xp = self.xp
        x = xp.ascontiguousarray(x, xp.float32)
        radius = int(truncate * float(sigma) + 0.5)
        k = np.arange(-radius, radius + 1, dtype=np.float64)
        phi = np.exp(-0.5 / float(sigma) ** 2 * k**2)
        weights = xp.asarray((phi / phi.sum()).astype(np.float32))
        axis = axis % x.ndim
        out = xp.empty_like(x)
        K.gaussian_axis(x=x, out=out, weights=weights, radius=radius, outer=math.prod(x.shape[:axis]),
                        n=x.shape[axis], inner=math.prod(x.shape[axis + 1:]))
        return out

    def binary_dilation(self, mask, structure=None, iterations: int = 1, **kwargs):
        """``iterations`` (at least 1) dilations by ``structure`` where it is the search's cross (no coupling along the
        first, the starts' axis; nearest neighbours along the 2 or 3 others) and no other option is given, else cupyx's
        (iterations < 1: until nothing changes)."""
        xp = self.xp
        mask = xp.ascontiguousarray(mask, bool)
        plain = set(kwargs) <= {"brute_force"}  # no mask, border value or origin of cupyx's to honour
        if not plain or mask.ndim not in (3, 4) or iterations < 1 or not _is_start_cross(structure, mask.ndim):
            return self._ndi.binary_dilation(mask, structure=structure, iterations=iterations, **kwargs)
        shape = mask.shape + (1,) * (4 - mask.ndim)
        src, out = mask.copy(), xp.empty_like(mask)
        for _ in range(int(iterations)):
            K.dilate_cross(src=src, out=out, batch=shape[0], d1=shape[1], d2=shape[2], d3=shape[3])
            src, out = out, src
        return src


def _is_start_cross(structure, ndim: int) -> bool:
    """Whether ``structure`` is the nearest-neighbour cross of the last ndim - 1 axes, nothing along the first."""
    import scipy.ndimage

    if structure is None:
        return False
    s = np.asarray(structure.get() if hasattr(structure, "get") else structure, bool)
    cross = np.zeros((3,) * ndim, bool)
    cross[1] = scipy.ndimage.generate_binary_structure(ndim - 1, 1)
    return s.shape == cross.shape and bool(np.array_equal(s, cross))
