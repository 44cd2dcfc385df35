"""The iterations of the envelope search (:mod:`qora.phase.envelope`) on a batch of starts.

Every start of a run is iterated at once: arrays of shape (starts, *pattern shape), the transforms over the
trailing axes. Three providers share one interface (``complex`` and ``positive`` run ``count`` HIO or ER
iterations on a batch and record each start's Fourier error):

- :class:`ArrayIterations`: the array code on the backend's arrays (NumPy or CuPy): the reference;
- :class:`FastCpuIterations`: the CPU's fused path (ducc0 in place, Numba loops; :mod:`qora.phase.envelope_cpu`);
- ``envelope_cuda.CudaIterations``: the GPU's kernels and CUDA graphs (:mod:`qora.phase.envelope_cuda`).

The complex passes constrain the full spectrum, the positivity passes the half spectrum of a real object (the
other half is its mirror): their errors are normalised by the measured power of the spectrum they constrain.
"""

from __future__ import annotations

import numpy as np

from qora.backend import fft as backend_fft
from qora.phase.symmetry import mirror
from qora.progress import report

__all__ = ["BETA", "STAGE", "Pattern", "friedel_complete", "ArrayIterations", "FastCpuIterations"]

BETA = 0.9  # HIO's feedback
STAGE = "real-envelope"  # the progress reports' stage (the recipe's name)
REPORT_EVERY = 50  # iterations between progress reports of the host loops


def friedel_complete(amplitude, measured, xp=np):
    """Amplitudes and measured pixels completed by Friedel's law (detector layout, q = 0 at n//2): a pixel
    unmeasured whose mirror was measured takes the mirror's amplitude."""
    return xp.where(measured, amplitude, mirror(amplitude, xp)), measured | mirror(measured, xp)


class Pattern:
    """The pattern on one backend: amplitudes Friedel-completed, the measured mask, in FFT layout; the full
    spectrum's and the half spectrum's (last axis up to n//2 + 1) measured power."""

    def __init__(self, intensity, mask, xp) -> None:
        self.xp = xp
        intensity = xp.asarray(intensity, dtype=xp.float64)
        measured = ~xp.asarray(mask, dtype=bool) if mask is not None else xp.ones(intensity.shape, bool)
        amp, meas = friedel_complete(xp.sqrt(xp.maximum(intensity, 0)), measured, xp)
        self.shape = tuple(intensity.shape)
        self.axes = tuple(range(1, intensity.ndim + 1))  # the batch of starts leads
        self.amp = xp.fft.ifftshift(amp).astype(xp.float32)
        self.meas = xp.fft.ifftshift(meas)
        half = self.shape[-1] // 2 + 1
        self.amp_r, self.meas_r = self.amp[..., :half], self.meas[..., :half]
        self.intensity, self.measured = intensity, measured
        self.norm = float(xp.sum(self.amp[self.meas].astype(xp.float64) ** 2))
        self.norm_r = float(xp.sum(self.amp_r[self.meas_r].astype(xp.float64) ** 2))

    def native(self, half: bool) -> np.ndarray:
        """The amplitudes as the CUDA kernels take them (host, contiguous float32): -1 where unmeasured."""
        amp, meas = (self.amp_r, self.meas_r) if half else (self.amp, self.meas)
        out = self.xp.where(meas, amp, -1.0).astype(np.float32)
        return np.ascontiguousarray(out.get() if hasattr(out, "get") else out)


class ArrayIterations:
    """HIO and ER on a batch of starts, as array code on the pattern's backend (the reference of the fused paths).

    ``progress`` is reported every :data:`REPORT_EVERY` iterations, as iterations times starts done of
    ``total``."""

    def __init__(self, pattern: Pattern, starts: int, progress=None, total: int = 0, offset: int = 0) -> None:
        self.p, self.starts, self.progress, self.total = pattern, int(starts), progress, int(total)
        self.offset = int(offset)  # iterations times starts done before this batch (an earlier group's)
        self.errors: list = []  # per iteration: each start's Fourier error (device arrays on the GPU)
        self.done = 0

    # -- the record of errors and the progress
    def record(self, errors) -> None:
        """One iteration's errors (starts,) or a block's (count, starts)."""
        block = errors if np.ndim(errors) == 2 else errors[None]
        self.errors.extend(block)
        before, self.done = self.done, self.done + len(block)
        if self.done // REPORT_EVERY > before // REPORT_EVERY:
            report(self.progress, STAGE, self.offset + self.done * self.starts, self.total)

    def history(self) -> np.ndarray:
        """The Fourier error of every iteration and start, (iterations, starts) float64 on the host."""
        xp = self.p.xp
        if self.errors and hasattr(self.errors[0], "get"):  # device scalars of the array code on the GPU: one copy
            return np.asarray(xp.stack(self.errors).get(), dtype=np.float64)
        return np.asarray(self.errors, dtype=np.float64)

    # -- one iteration's parts
    def _fit(self, spectrum, amp, meas, damp, norm):
        """The modulus step on a spectrum, and each start's Fourier error of the spectrum it was given."""
        xp = self.p.xp
        modulus = xp.abs(spectrum)
        misfit = xp.sum(xp.where(meas, (modulus - amp) ** 2, 0), axis=self.p.axes)
        out = xp.where(meas, amp * spectrum / xp.maximum(modulus, 1e-12), spectrum * damp)
        return out, xp.sqrt(misfit / norm)  # on the device: no sync

    def project_complex(self, x):
        p = self.p
        spectrum, err = self._fit(backend_fft.fftn(x, axes=p.axes, norm="ortho"), p.amp, p.meas, 1.0, p.norm)
        return backend_fft.ifftn(spectrum, axes=p.axes, norm="ortho").astype(p.xp.complex64), err

    def project_real(self, x, damp):
        p = self.p
        spectrum, err = self._fit(backend_fft.rfftn(x, axes=p.axes, norm="ortho"), p.amp_r, p.meas_r, damp, p.norm_r)
        return backend_fft.irfftn(spectrum, s=p.shape, axes=p.axes, norm="ortho").astype(p.xp.float32), err

    def update(self, x, p, support, *, hio: bool, positive: bool):
        """HIO's (``hio``) or ER's update of ``x`` from its projection ``p`` on ``support`` (with ``positive``, the
        object's negative values are treated as outside it: Fienup's feedback there)."""
        xp = self.p.xp
        keep = support & (p >= 0) if positive else support
        return xp.where(keep, p, x - BETA * p if hio else 0).astype(p.dtype)

    # -- the interface
    def complex(self, x, support, count: int, *, hio: bool):
        """``count`` iterations of HIO (``hio``) or ER on complex starts ``x`` (starts, *shape)."""
        for _ in range(count):
            p, err = self.project_complex(x)
            self.record(err)
            x = self.update(x, p, support, hio=hio, positive=False)
        return x

    def positive(self, x, support, count: int, *, hio: bool, damp: float):
        """``count`` iterations with positivity on real starts ``x``, the unmeasured Fourier values times ``damp``."""
        for _ in range(count):
            p, err = self.project_real(x, damp)
            self.record(err)
            x = self.update(x, p, support, hio=hio, positive=True)
        return x


class FastCpuIterations(ArrayIterations):
    """The array code's loop with the CPU's fused projections and updates (:mod:`qora.phase.envelope_cpu`)."""

    def __init__(self, pattern: Pattern, starts: int, progress=None, total: int = 0, offset: int = 0) -> None:
        from qora.phase import envelope_cpu

        super().__init__(pattern, starts, progress, total, offset)
        self.fast = envelope_cpu.Projections(pattern)

    def project_complex(self, x):
        return self.fast.complex(x)

    def project_real(self, x, damp):
        return self.fast.real(x, damp)

    def update(self, x, p, support, *, hio: bool, positive: bool):
        from qora.phase.envelope_cpu import update

        return update(np.ascontiguousarray(x), p, np.ascontiguousarray(support), BETA, hio=hio, positive=positive)

    # the iterate is updated in place: copied once a stage into an array FFTW can take, it stays one
    def complex(self, x, support, count: int, *, hio: bool):
        from qora.backend.fft_host import aligned

        return super().complex(aligned(x, np.complex64), support, count, hio=hio)

    def positive(self, x, support, count: int, *, hio: bool, damp: float):
        from qora.backend.fft_host import aligned

        return super().positive(aligned(x, np.float32), support, count, hio=hio, damp=damp)
