"""qora.holo on CUDA: the spectrum solver, from mapped spectra to the index box on the device.

:class:`SpectrumSolver` runs Gerchberg-Papoulis on half spectra (C2R, clamp, R2C, restore on the
padded in-place layout, or where it runs the fused loop of :mod:`qora.holo.gp_fused`) or C2C, the
plain inversion, or FISTA-TV with the FGP step ("fused" default, "separate", "cube", "march"); the
index is computed in place and copied out row by row. A complex index (absorption) runs GP in C2C
with the imaginary part kept non-negative, and TV in C2C with one FGP prox per part (the CPU's
:func:`qora.holo.regularisation.fista_tv_complex`). The TV weight "auto" is the discrepancy
principle's, by the CPU's own search (:func:`qora.holo.regularisation.discrepancy_search`) with the
device's FISTA and misfit; the noise energy comes from the host (``MappingPlan.noise_energy``, set
by the caller in :attr:`noise_energy`).
Its kernels are launched through :mod:`qora.holo.kernels`. A leaf of the CPU modules.
"""

from __future__ import annotations

import math

import numpy as np

from qora.backend.fft import C2C, C2R, FORWARD, INVERSE, R2C
from qora.holo import kernels as K
from qora.holo.cuda_stages import MEMCPY_DEFAULT, FgpProx, Mapper, WorkArea, check_even, copy_box, cupy
from qora.holo.fista import momenta
from qora.holo.geometry import Geometry
from qora.holo.gp_fused import SIZES as FUSED_SIZES
from qora.holo.gp_fused import FusedGP
from qora.holo.gp_fused import available as fused_gp_available
from qora.holo.odt import potential_bounds
from qora.holo.options import ReconstructionOptions
from qora.holo.regularisation import discrepancy_search
from qora.io.errors import InputError

__all__ = ["SpectrumSolver"]

#: the box of the imaginary part of a complex potential: absorption only (the CPU's ``constrain``)
ABSORPTION_BOUNDS = (0.0, math.inf)


class SpectrumSolver:
    """From mapped spectra to the index box: GP (R2C or C2C), plain, or FISTA-TV, on one grid.

    Parameters
    ----------
    geometry : Geometry
        The solver's grid (``solver_grid``; edge N, even).
    field_of_view : int
        Edge of the central box returned (the recorded field of view, at most N).
    work : WorkArea
        The shared cuFFT work area its plans come from.
    options : ReconstructionOptions
        method, iterations, r2c, tv_weight (a number or "auto"), tv_inner, fgp, index_min, index_max
        and complex_index are read (validated when the options were made); fgp is the FGP step's
        kernel (docs/holo-performance.md), the variants equal to each other within 2 ulp. A complex
        index always solves on the full spectrum (C2C), as the CPU does.
    """

    def __init__(self, geometry: Geometry, field_of_view: int, work: WorkArea, options: ReconstructionOptions) -> None:
        cp = cupy()
        o = options
        method, iterations, r2c, tv_weight, tv_inner, fgp = (o.method, o.iterations, o.r2c, o.tv_weight, o.tv_inner,
                                                             o.fgp)
        big = geometry.n
        check_even("solver grid", big)
        self.bounds = potential_bounds(geometry, o.index_min, o.index_max)
        self.complex = bool(o.complex_index)
        self.auto = method == "tv" and tv_weight == "auto"
        self.noise_energy: float | None = None  # "auto" needs it before each call (MappingPlan.noise_energy)
        if not 0 < field_of_view <= big:
            raise ValueError(f"field of view {field_of_view} must fit the grid {big}")
        self.geometry, self.big, self.nb = geometry, big, field_of_view
        self.method, self.iterations, self.fgp = method, iterations, fgp
        self.half = big // 2 + 1
        self.real = not self.complex and (method == "tv" or (method == "gp" and r2c))
        # "auto" is a valid weight for any method (the options do not read it outside TV): never a number here
        self.lam = 0.0 if tv_weight == "auto" else tv_weight * geometry.k0**2
        self.tv_inner = tv_inner
        if o.gp_loop == "fused_fft" and method == "gp" and not self.real:
            raise InputError("gp_loop 'fused_fft' runs GP on half spectra: it needs r2c=True and a real index")
        self.fused = self._fused_loop(o.gp_loop) if self.real and method == "gp" else None
        # the half spectrum's row: n / 2 + 1 values, or the fused loop's padded stride
        n3, nh = big**3, big * big * (self.fused.stride if self.fused is not None else self.half)
        # the mapped sums (complex N^3); on the R2C path later the padded real volume and its half spectrum
        self.sums = cp.empty(n3, cp.complex64)
        # hit counts (int32 N^3); on the R2C path later the data term a (complex half spectrum)
        self.hits_raw = cp.empty(max(4 * n3, 8 * nh), cp.uint8)
        self.hits = self.hits_raw[:4 * n3].view(cp.int32)
        if self.real:
            self.a = self.hits_raw[:8 * nh].view(cp.complex64)
            self.counts = cp.empty(nh, cp.uint8)
            inembed, onembed = (big, big, 2 * self.half), (big, big, self.half)
            self.forward = work.plan(R2C, (big,) * 3, inembed=inembed, onembed=onembed)
            self.backward = work.plan(C2R, (big,) * 3, inembed=onembed, onembed=inembed)
        else:
            self.estimate = cp.empty(n3, cp.complex64)
            self.c2c = work.plan(C2C, (big,) * 3)
        self.parts = 0
        if method == "tv":
            nb3 = field_of_view**3
            # one box per part of the potential (real; real and imaginary for a complex index)
            self.parts = 2 if self.complex else 1
            self.vs = [cp.empty(nb3, cp.float32) for _ in range(self.parts)]
            self.ys = [cp.empty(nb3, cp.float32) for _ in range(self.parts)]
            self.x_prevs = [cp.empty(nb3, cp.float32) for _ in range(self.parts)]
            self.part_bounds = [self.bounds, ABSORPTION_BOUNDS][:self.parts]
            # the separate variant's primal point goes to y, free while the prox runs
            self.proxes = [FgpProx((field_of_view,) * 3, self.lam, fgp, scratch=y, bounds=b)
                           for y, b in zip(self.ys, self.part_bounds)]
            self.v, self.y, self.x_prev, self.prox = self.vs[0], self.ys[0], self.x_prevs[0], self.proxes[0]
            self.loss = cp.zeros(1, cp.float64)
        self.scale = 1.0 / n3
        self.averaged = False  # set per call from the mapper: True when it gave averaged data (exact gridding)
        self.info: dict = {}
        if method == "gp":  # which loop ran (the C2C loop on full spectra is cuFFT's)
            self.info["gp_loop"] = "fused_fft" if self.fused is not None else "cufft"

    # -- helpers -------------------------------------------------------------------------------
    def _fused_loop(self, choice: str):
        """The fused GP loop where ``choice`` ("auto", "cufft", "fused_fft") asks for it and it runs, else None."""
        if choice == "cufft" or (choice == "auto" and not fused_gp_available(self.big)):
            return None
        if not fused_gp_available(self.big):
            raise InputError(f"gp_loop 'fused_fft' needs a solver grid edge in {FUSED_SIZES} on compute capability "
                             f"9.x (this grid: {self.big}); use gp_loop='cufft'")
        return FusedGP(self.big)

    def _prepare_half(self, row: int | None = None) -> None:
        """counts = M(k) + M(-k), P = sums / hits, a = (P(k) + conj P(-k)) / 2 (into the hit-count buffer), in
        rows of ``row`` values (default n / 2 + 1)."""
        big = self.big
        K.gp_counts(hits=self.hits, n=big, counts=self.counts, row=row)
        self._average()
        K.gp_data(data=self.sums, n=big, a=self.a, row=row)

    def _average(self) -> None:
        """P = sums / hits where hit, unless the mapper averaged already (exact gridding)."""
        if not self.averaged:
            K.normalise_hits(sums=self.sums, hits=self.hits, total=self.big**3)

    def _restore(self) -> None:
        pairs = self.big**2 * self.half // 2
        K.restore_half(e=self.sums, a=self.a, counts=self.counts, pairs=pairs)

    def _clamp(self) -> None:
        quads = self.big**2 * 2 * self.half // 4
        K.clamp_real(v=self.sums, quads=quads, scale=self.scale, bounds=self.bounds)

    def _index_scalars(self):
        g = self.geometry
        return np.float32(g.medium_index**2), np.float32(1.0 / g.k0**2)

    # -- solvers -------------------------------------------------------------------------------
    def __call__(self, spectra, mapper: Mapper, dst_ptr: int, absorption_ptr: int | None = None) -> None:
        """Map ``spectra`` (A, N, N), solve, and write the index box (nb^3 float32) to ``dst_ptr``, and with a
        complex index the imaginary index kappa (nb^3 float32) to ``absorption_ptr``."""
        cp = cupy()
        if self.complex != (absorption_ptr is not None):
            raise ValueError("a complex index writes the absorption too: give absorption_ptr exactly then")
        if self.auto and self.noise_energy is None:
            raise ValueError("tv_weight 'auto' needs the noise energy of the mapped spectrum (set noise_energy)")
        stream = cp.cuda.get_current_stream()
        self.averaged = bool(getattr(mapper, "averaged", False))
        mapper(spectra, self.sums, self.hits)
        if self.method == "tv":
            self._tv(dst_ptr, absorption_ptr, stream)
        elif self.real:
            self._gp_half(dst_ptr, stream)
        else:
            self._gp_complex(dst_ptr, absorption_ptr, stream)

    def _gp_half(self, dst_ptr, stream) -> None:
        cp = cupy()
        row = self.half if self.fused is None else self.fused.stride
        self._prepare_half(row)
        nh = self.big**2 * row
        cp.cuda.runtime.memcpyAsync(self.sums.data.ptr, self.a.data.ptr, 8 * nh, MEMCPY_DEFAULT, stream.ptr)
        p = self.sums.data.ptr
        scale = self.scale  # what takes the volume the loop leaves to the real one
        if self.fused is not None:
            scale = self.fused.run(self.sums, self.a, self.counts, self.iterations, self.scale, self.bounds)
        else:
            for _ in range(self.iterations):
                self.backward.execute(p, p)
                self._clamp()
                self.forward.execute(p, p)
                self._restore()
            self.backward.execute(p, p)
        medium2, inv_k02 = self._index_scalars()
        K.index_real(v=self.sums, total=self.big**2 * 2 * row, scale=scale, medium2=medium2, inv_k02=inv_k02)
        copy_box(p, 2 * row, self.big, self.nb, dst_ptr, stream)

    def _gp_complex(self, dst_ptr, absorption_ptr, stream) -> None:
        cp = cupy()
        n3 = self.big**3
        self._average()
        cp.cuda.runtime.memcpyAsync(self.estimate.data.ptr, self.sums.data.ptr, 8 * n3, MEMCPY_DEFAULT, stream.ptr)
        e = self.estimate.data.ptr
        iterations = self.iterations if self.method == "gp" else 0
        for _ in range(iterations):
            self.c2c.execute(e, e, INVERSE)
            K.clamp_complex(v=self.estimate, total=n3, scale=self.scale, bounds=self.bounds, keep_imag=self.complex)
            self.c2c.execute(e, e, FORWARD)
            K.restore_complex(e=self.estimate, data=self.sums, hits=self.hits, total=n3)
        self.c2c.execute(e, e, INVERSE)
        medium2, inv_k02 = self._index_scalars()
        index = self.hits_raw[:4 * n3].view(cp.float32)  # the hit counts are spent: the index goes there
        kappa = self.sums.view(cp.float32)[:n3] if self.complex else None  # and the data: the absorption there
        K.index_complex(v=self.estimate, total=n3, scale=self.scale, medium2=medium2, inv_k02=inv_k02, out=index,
                        out_imag=kappa)
        copy_box(index.data.ptr, self.big, self.big, self.nb, dst_ptr, stream)
        if kappa is not None:
            copy_box(kappa.data.ptr, self.big, self.big, self.nb, absorption_ptr, stream)

    def _box(self, kernel: str, src, dst, scale: float = 1.0) -> None:
        big, nb = self.big, self.nb
        lo = big // 2 - nb // 2
        rl = 2 * self.half
        if kernel == "box_restrict":
            K.box_restrict(padded=src, n=big, rl=rl, nb=nb, lo=lo, scale=scale, box=dst)
        else:
            K.box_expand(box=src, n=big, rl=rl, nb=nb, lo=lo, padded=dst)

    # -- FISTA-TV: one run per weight (several for "auto"), on the real half spectrum or the complex one ---------
    def _tv(self, dst_ptr, absorption_ptr, stream) -> None:
        cp = cupy()
        nb3 = self.nb**3
        if self.complex:
            self._average()  # P, the data of the restore step
        else:
            self._prepare_half()
        if self.auto:
            k02 = self.geometry.k0**2
            weight, best, record = discrepancy_search(
                lambda w, start, _part: self._fista(w * k02, start, copy=True), self._misfit, self.noise_energy,
                complex_index=self.complex)
            for part, x in zip(self.x_prevs, best):
                cp.cuda.runtime.memcpyAsync(part.data.ptr, x.data.ptr, 4 * nb3, MEMCPY_DEFAULT, stream.ptr)
            self.info["tv_weight"], self.info["tv_selection"] = float(weight), record
        else:
            self._fista(self.lam, None)
        medium2, inv_k02 = self._index_scalars()
        if self.complex:
            K.index_parts(re=self.x_prevs[0], im=self.x_prevs[1], total=nb3, medium2=medium2, inv_k02=inv_k02)
            cp.cuda.runtime.memcpyAsync(absorption_ptr, self.x_prevs[1].data.ptr, 4 * nb3, MEMCPY_DEFAULT, stream.ptr)
        else:
            K.index_real(v=self.x_prev, total=nb3, scale=1.0, medium2=medium2, inv_k02=inv_k02)
        cp.cuda.runtime.memcpyAsync(dst_ptr, self.x_prev.data.ptr, 4 * nb3, MEMCPY_DEFAULT, stream.ptr)

    def _plain_box(self) -> None:
        """y = the box of the plain inversion of the data (FISTA's default start)."""
        cp = cupy()
        stream = cp.cuda.get_current_stream()
        if self.complex:
            n3 = self.big**3
            e = self.estimate.data.ptr
            cp.cuda.runtime.memcpyAsync(e, self.sums.data.ptr, 8 * n3, MEMCPY_DEFAULT, stream.ptr)
            self.c2c.execute(e, e, INVERSE)
            self._restrict_complex(self.ys)
        else:
            p = self.sums.data.ptr
            cp.cuda.runtime.memcpyAsync(p, self.a.data.ptr, 8 * self.big**2 * self.half, MEMCPY_DEFAULT, stream.ptr)
            self.backward.execute(p, p)
            self._box("box_restrict", self.sums.view(cp.float32), self.y, self.scale)

    def _restrict_complex(self, out) -> None:
        big, nb = self.big, self.nb
        K.box_restrict_complex(grid=self.estimate, n=big, nb=nb, lo=big // 2 - nb // 2, scale=self.scale, re=out[0],
                               im=out[1])

    def _expand(self, parts) -> None:
        """The box ``parts`` placed in the zero grid (the padded real volume, or the complex estimate)."""
        cp = cupy()
        big, nb = self.big, self.nb
        if self.complex:
            K.box_expand_complex(re=parts[0], im=parts[1], n=big, nb=nb, lo=big // 2 - nb // 2, grid=self.estimate)
        else:
            self._box("box_expand", parts[0], self.sums.view(cp.float32))

    def _gradient_step(self) -> None:
        """v = the box of the restore step applied to y: FISTA's gradient step of length 1 (both paths)."""
        cp = cupy()
        self._expand(self.ys)
        if self.complex:
            e = self.estimate.data.ptr
            self.c2c.execute(e, e, FORWARD)
            K.restore_complex(e=self.estimate, data=self.sums, hits=self.hits, total=self.big**3)
            self.c2c.execute(e, e, INVERSE)
            self._restrict_complex(self.vs)
        else:
            p = self.sums.data.ptr
            self.forward.execute(p, p)
            self._restore()
            self.backward.execute(p, p)
            self._box("box_restrict", self.sums.view(cp.float32), self.v, self.scale)

    def _fista(self, lam: float, start, *, copy: bool = False):
        """``iterations`` FISTA-TV steps at weight ``lam`` (on the potential) from ``start`` (the box parts, as
        :meth:`_fista` with ``copy`` returns them) or the plain inversion; the iterate ends in the x_prev boxes.
        The dual restarts from zero (as the CPU's each call). With ``copy`` returns copies of the iterate."""
        cp = cupy()
        stream = cp.cuda.get_current_stream()
        nb, nb3 = self.nb, self.nb**3
        if start is None:
            self._plain_box()
        else:
            for y, x in zip(self.ys, start):
                cp.cuda.runtime.memcpyAsync(y.data.ptr, x.data.ptr, 4 * nb3, MEMCPY_DEFAULT, stream.ptr)
        for x_prev, y in zip(self.x_prevs, self.ys):
            cp.cuda.runtime.memcpyAsync(x_prev.data.ptr, y.data.ptr, 4 * nb3, MEMCPY_DEFAULT, stream.ptr)
        for prox in self.proxes:
            prox.set_weight(lam)
            prox.reset()
        weights = momenta()
        for _ in range(self.iterations):
            self._gradient_step()
            momentum = np.float32(next(weights))
            for v, prox, bounds, x_prev, y in zip(self.vs, self.proxes, self.part_bounds, self.x_prevs, self.ys):
                prox.steps(v, self.tv_inner)
                K.fista_step(v=v, p=prox.p, nz=nb, ny=nb, nx=nb, lam=np.float32(lam), bounds=bounds, momentum=momentum,
                             x_prev=x_prev, y=y)
        return [x.copy() for x in self.x_prevs] if copy else None

    def _misfit(self, parts) -> float:
        """R of the box ``parts`` against the data (:func:`qora.holo.regularisation.misfit`; on the half spectrum
        up to a constant, which the search's differences cancel)."""
        self._expand(parts)
        self.loss.fill(0)
        if self.complex:
            e = self.estimate.data.ptr
            self.c2c.execute(e, e, FORWARD)
            K.misfit_complex(e=self.estimate, data=self.sums, hits=self.hits, total=self.big**3, out=self.loss)
        else:
            p = self.sums.data.ptr
            self.forward.execute(p, p)
            K.misfit_half(e=self.sums, a=self.a, counts=self.counts, n=self.big, out=self.loss)
        return float(self.loss.get()[0])

    def fgp_steps(self, steps: int) -> None:
        """``steps`` FGP iterations on the dual for the current primal data (the counters' target)."""
        self.prox.steps(self.v, steps)

    @property
    def device_bytes(self) -> int:
        """Bytes of the solver's own buffers (the shared work area not included)."""
        names = ("sums", "hits_raw", "counts", "estimate")
        own = sum(getattr(self, n).nbytes for n in names if hasattr(self, n))
        for boxes in ("vs", "ys", "x_prevs"):
            own += sum(b.nbytes for b in getattr(self, boxes, ()))
        for prox, y in zip(getattr(self, "proxes", ()), getattr(self, "ys", ())):
            own += prox.nbytes - (y.nbytes if prox.z is y else 0)
        return int(own)
