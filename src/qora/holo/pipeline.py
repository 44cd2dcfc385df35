"""The CPU holography Pipeline: everything that depends only on the geometry, computed once.

Built once for a geometry from its host tables (crop window and pupil, mapping targets and
factors, hit counts: :mod:`qora.holo.plans`), given the background holograms once
(:meth:`CpuPipeline.set_background`), then :meth:`CpuPipeline.process` turns each hologram stack
of a time series into a refractive-index volume. It runs the same functions as the per-call chain
(``extract_fields`` -> ``field_ratio`` -> ``rytov`` -> ``reconstruct``), so the two agree to
rounding. The public :class:`qora.holo.Pipeline` (in :mod:`qora.holo.api`) picks this or the
device-resident :class:`qora.holo.cuda_pipeline.CudaPipeline` and builds the tables for either.
"""

from __future__ import annotations

import numpy as np

from qora.holo.fields import field_ratio
from qora.holo.geometry import Geometry
from qora.holo.odt import OdtResult, first_order, invert, result_of, solve_options
from qora.holo.options import ReconstructionOptions
from qora.holo.plans import CropPlan, MappingPlan, stack_holograms
from qora.holo.steps import span, stack_units
from qora.io.errors import InputError
from qora.progress import report

__all__ = ["CpuPipeline"]


class CpuPipeline:
    """Holograms to index volumes on the CPU for one geometry, with its backgrounds kept between calls.

    ``crop`` and ``mapping`` are the geometry's host tables (``mapping`` on the solver's grid,
    :func:`qora.holo.plans.solver_grid`); ``options`` the solver's choices.
    """

    def __init__(self, geometry: Geometry, crop: CropPlan, mapping: MappingPlan,
                 options: ReconstructionOptions) -> None:
        self.geometry, self.crop, self.mapping, self.options = geometry, crop, mapping, options
        self.solve_options = solve_options(options)
        self.background_fields = None

    def _fields(self, holograms, name: str = "holograms"):
        holos, _ = stack_holograms(holograms, name)
        if holos.shape != (self.geometry.count, self.crop.big, self.crop.big):
            raise InputError(f"expected holograms of shape {(self.geometry.count, self.crop.big, self.crop.big)} as "
                             f"the {name} (one per illumination of the geometry), got {holos.shape}")
        return np.stack([self.crop(h) for h in holos])

    def set_background(self, holograms) -> None:
        """Extract and keep the background fields (one hologram per illumination)."""
        self.background_fields = self._fields(holograms, "backgrounds")

    def process(self, holograms, *, progress=None) -> OdtResult:
        """One stack of sample holograms (A, N, N) -> :class:`OdtResult`; ``progress`` gets done of
        :func:`qora.holo.steps.stack_units` (the fields, the first order, each solver iteration)."""
        if self.background_fields is None:
            raise RuntimeError("call set_background(...) before process(...)")
        if holograms is None:
            raise InputError("give the hologram stack (only the CUDA Pipeline has an input buffer)")
        o = self.options
        steps = stack_units(o)  # the fields, the first order, each solver iteration
        report(progress, "fields", 0, steps)
        ratio = field_ratio(self._fields(holograms), self.background_fields)
        report(progress, "rytov" if o.approximation == "rytov" else "born", 1, steps)
        phi = first_order(ratio, o.approximation)
        report(progress, o.method, 2, steps)
        info = {"measured_fraction": float(self.mapping.measured.mean()), "r2c": o.r2c,
                "grid": self.mapping.geometry.n}
        index = invert(phi, self.geometry, self.mapping, span(progress, 2, steps), info=info, **self.solve_options)
        report(progress, "done", steps, steps)
        return result_of(index, self.geometry, o, info)
