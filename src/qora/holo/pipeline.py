"""The holography Pipeline: everything that depends only on the geometry, computed once.

Built once for a geometry (crop window and pupil, mapping targets and factors,
hit counts), given the background holograms once (:meth:`Pipeline.set_background`),
then :meth:`Pipeline.process` turns each hologram stack of a time series into a
refractive-index volume. It runs the same functions as the per-call chain
(``extract_fields`` -> ``field_ratio`` -> ``rytov`` -> ``reconstruct``), so the two
agree to rounding. With ``backend="cuda"`` (the default where a GPU is) it is
:class:`qora.holo.cuda.CudaPipeline`: plans, buffers and backgrounds on the device, made once.
"""

from __future__ import annotations

import numpy as np

from qora.holo.fields import CropPlan, _stack, field_ratio
from qora.holo.geometry import Geometry
from qora.holo.odt import MappingPlan, OdtResult, first_order, invert, solver_grid
from qora.progress import report

__all__ = ["Pipeline"]


class Pipeline:
    """Holograms to index volumes for one geometry, with its backgrounds kept between calls.

    Parameters
    ----------
    geometry : Geometry
    sideband : (nu_y, nu_x)
        The sideband's centre, cycles/um (``find_sideband`` of a normal-incidence background).
    hologram_pixel : float
        Hologram pixel in object space, um (half the geometry's pixel for a 2n crop).
    hologram_n : int
        Hologram size N (holograms are N x N).
    approximation, method, iterations, r2c, tv_weight, tv_inner, oversample
        As in :func:`qora.holo.odt.reconstruct`.
    backend : {"auto", "cpu", "cuda"}
        "auto" is the GPU where there is one.
    upload_parts, mapping, fgp
        CUDA only: see :class:`qora.holo.cuda.CudaPipeline`.
    """

    def __init__(self, geometry: Geometry, *, sideband, hologram_pixel: float, hologram_n: int,
                 approximation: str = "rytov", method: str = "gp", iterations: int = 50, r2c: bool = True,
                 tv_weight: float = 1e-3, tv_inner: int = 20, oversample: float = 1.0, backend="auto",
                 upload_parts: int = 1, mapping: str = "gather", fgp: str = "fused") -> None:
        from qora.backend import resolve

        if backend == "auto" and (geometry.n % 2 or hologram_n % 2):
            backend = "cpu"  # the CUDA stages need even sizes (centre-origin signs)
        self.backend = resolve(backend)
        self.cuda = None
        if self.backend.is_cuda:
            from qora.holo.cuda import CudaPipeline

            self.cuda = CudaPipeline(geometry, sideband=sideband, hologram_pixel=hologram_pixel, hologram_n=hologram_n,
                                     approximation=approximation, method=method, iterations=iterations, r2c=r2c,
                                     tv_weight=tv_weight, tv_inner=tv_inner, oversample=oversample,
                                     upload_parts=upload_parts, mapping=mapping, fgp=fgp)
        self.geometry = geometry
        self.crop = CropPlan(hologram_n, sideband, hologram_pixel=hologram_pixel, n=geometry.n,
                             pupil_frequency=geometry.pupil_frequency)
        self.mapping = MappingPlan(solver_grid(geometry, oversample))
        self.options = dict(method=method, iterations=iterations, r2c=r2c, tv_weight=tv_weight, tv_inner=tv_inner)
        self.approximation = approximation
        first_order(np.ones((1, 2, 2), complex), approximation)  # reject a bad name now, not per stack
        self.background_fields = None

    def _fields(self, holograms):
        holos, _ = _stack(holograms)
        if holos.shape != (self.geometry.count, self.crop.big, self.crop.big):
            raise ValueError(f"expected holograms of shape {(self.geometry.count, self.crop.big, self.crop.big)}, "
                             f"got {holos.shape}")
        return np.stack([self.crop(h) for h in holos])

    def set_background(self, holograms) -> None:
        """Extract and keep the background fields (one hologram per illumination)."""
        if self.cuda is not None:
            self.cuda.set_background(holograms)
            self.background_fields = True
            return
        self.background_fields = self._fields(holograms)

    def process(self, holograms=None, *, progress=None, copy: bool = True) -> OdtResult:
        """One stack of sample holograms (A, N, N) -> :class:`OdtResult`.

        On CUDA, ``holograms=None`` processes what was written into ``self.cuda.input()``, and
        ``copy=False`` returns the page-locked output buffer (valid until the next call).
        """
        if self.background_fields is None:
            raise RuntimeError("call set_background(...) before process(...)")
        if self.cuda is not None:
            return self.cuda.process(holograms, progress=progress, copy=copy)
        if holograms is None:
            raise ValueError("give the hologram stack (only the CUDA Pipeline has an input buffer)")
        steps = 3
        report(progress, "fields", 0, steps)
        ratio = field_ratio(self._fields(holograms), self.background_fields)
        report(progress, "rytov" if self.approximation == "rytov" else "born", 1, steps)
        phi = first_order(ratio, self.approximation)
        report(progress, self.options["method"], 2, steps)
        index = invert(phi, self.geometry, self.mapping, **self.options)
        report(progress, "done", 3, steps)
        return OdtResult(index, self.geometry, self.options["method"], self.approximation,
                         0 if self.options["method"] == "plain" else self.options["iterations"],
                         info={"measured_fraction": float(self.mapping.measured.mean()),
                               "r2c": self.options["r2c"], "grid": self.mapping.geometry.n})

    def process_series(self, stacks, *, progress=None):
        """Yield the volume of each stack of a time series, in order."""
        stacks = list(stacks)
        for i, holos in enumerate(stacks):
            yield self.process(holos)
            report(progress, "stacks", i + 1, len(stacks))
