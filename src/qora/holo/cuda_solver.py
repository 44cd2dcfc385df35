"""qora.holo on CUDA: the spectrum solver, from mapped spectra to the index box on the device.

:class:`SpectrumSolver` runs Gerchberg-Papoulis on half spectra (C2R, clamp, R2C, restore on the
padded in-place layout) or C2C, the plain inversion, or FISTA-TV with the FGP step ("fused"
default, "separate", "cube", "march"); the index is computed in place and copied out row by row.
Its kernels are launched through :mod:`qora.holo.kernels`. A leaf of the CPU modules.
"""

from __future__ import annotations

import math

import numpy as np

from qora.backend.fft import C2C, C2R, FORWARD, INVERSE, R2C
from qora.holo import kernels as K
from qora.holo.cuda_stages import MEMCPY_DEFAULT, FgpProx, Mapper, WorkArea, check_even, copy_box, cupy
from qora.holo.geometry import Geometry
from qora.holo.odt import potential_bounds
from qora.holo.options import ReconstructionOptions, cpu_only
from qora.holo.plans import Unsupported

__all__ = ["SpectrumSolver"]


def refuse_cpu_only(options: ReconstructionOptions) -> None:
    missing = cpu_only(options)
    if missing:
        raise Unsupported(f"the CUDA solver does not implement {', '.join(missing)}: use backend 'cpu' (or 'auto', "
                          "which runs these on the CPU)")


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
        method, iterations, r2c, tv_weight, tv_inner and fgp are read (validated when the options
        were made); fgp is the FGP step's kernel (docs/holo-performance.md), the variants equal
        to each other within 2 ulp.
    """

    def __init__(self, geometry: Geometry, field_of_view: int, work: WorkArea, options: ReconstructionOptions) -> None:
        cp = cupy()
        o = options
        method, iterations, r2c, tv_weight, tv_inner, fgp = (o.method, o.iterations, o.r2c, o.tv_weight, o.tv_inner,
                                                             o.fgp)
        big = geometry.n
        check_even("solver grid", big)
        refuse_cpu_only(o)
        self.bounds = potential_bounds(geometry, o.index_min, o.index_max)
        if not 0 < field_of_view <= big:
            raise ValueError(f"field of view {field_of_view} must fit the grid {big}")
        self.geometry, self.big, self.nb = geometry, big, field_of_view
        self.method, self.iterations, self.fgp = method, iterations, fgp
        self.half = big // 2 + 1
        self.real = method == "tv" or (method == "gp" and r2c)
        self.lam = tv_weight * geometry.k0**2
        self.tv_inner = tv_inner
        n3, nh = big**3, big * big * self.half
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
        if method == "tv":
            nb3 = field_of_view**3
            self.v = cp.empty(nb3, cp.float32)
            self.y = cp.empty(nb3, cp.float32)
            self.x_prev = cp.empty(nb3, cp.float32)
            # the separate variant's primal point goes to y, free while the prox runs
            self.prox = FgpProx((field_of_view,) * 3, self.lam, fgp, scratch=self.y, bounds=self.bounds)
        self.scale = 1.0 / n3
        self.info: dict = {}

    # -- helpers -------------------------------------------------------------------------------
    def _prepare_half(self) -> None:
        """counts = M(k) + M(-k), P = sums / hits, a = (P(k) + conj P(-k)) / 2 (into the hit-count buffer)."""
        big = self.big
        K.gp_counts(hits=self.hits, n=big, counts=self.counts)
        K.normalise_hits(sums=self.sums, hits=self.hits, total=big**3)
        K.gp_data(data=self.sums, n=big, a=self.a)

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
    def __call__(self, spectra, mapper: Mapper, dst_ptr: int) -> None:
        """Map ``spectra`` (A, N, N), solve, and write the index box (nb^3 float32) to ``dst_ptr``."""
        cp = cupy()
        stream = cp.cuda.get_current_stream()
        mapper(spectra, self.sums, self.hits)
        if self.method == "tv":
            self._tv(dst_ptr, stream)
        elif self.real:
            self._gp_half(dst_ptr, stream)
        else:
            self._gp_complex(dst_ptr, stream)

    def _gp_half(self, dst_ptr, stream) -> None:
        cp = cupy()
        self._prepare_half()
        nh = self.big**2 * self.half
        cp.cuda.runtime.memcpyAsync(self.sums.data.ptr, self.a.data.ptr, 8 * nh, MEMCPY_DEFAULT, stream.ptr)
        p = self.sums.data.ptr
        for _ in range(self.iterations):
            self.backward.execute(p, p)
            self._clamp()
            self.forward.execute(p, p)
            self._restore()
        self.backward.execute(p, p)
        medium2, inv_k02 = self._index_scalars()
        total = self.big**2 * 2 * self.half
        K.index_real(v=self.sums, total=total, scale=self.scale, medium2=medium2, inv_k02=inv_k02)
        copy_box(p, 2 * self.half, self.big, self.nb, dst_ptr, stream)

    def _gp_complex(self, dst_ptr, stream) -> None:
        cp = cupy()
        n3 = self.big**3
        K.normalise_hits(sums=self.sums, hits=self.hits, total=n3)
        cp.cuda.runtime.memcpyAsync(self.estimate.data.ptr, self.sums.data.ptr, 8 * n3, MEMCPY_DEFAULT, stream.ptr)
        e = self.estimate.data.ptr
        iterations = self.iterations if self.method == "gp" else 0
        for _ in range(iterations):
            self.c2c.execute(e, e, INVERSE)
            K.clamp_complex(v=self.estimate, total=n3, scale=self.scale, bounds=self.bounds)
            self.c2c.execute(e, e, FORWARD)
            K.restore_complex(e=self.estimate, data=self.sums, hits=self.hits, total=n3)
        self.c2c.execute(e, e, INVERSE)
        medium2, inv_k02 = self._index_scalars()
        index = self.hits_raw[:4 * n3].view(cp.float32)  # the hit counts are spent: the index goes there
        K.index_complex(v=self.estimate, total=n3, scale=self.scale, medium2=medium2, inv_k02=inv_k02, out=index)
        copy_box(index.data.ptr, self.big, self.big, self.nb, dst_ptr, stream)

    def _box(self, kernel: str, src, dst, scale: float = 1.0) -> None:
        big, nb = self.big, self.nb
        lo = big // 2 - nb // 2
        rl = 2 * self.half
        if kernel == "box_restrict":
            K.box_restrict(padded=src, n=big, rl=rl, nb=nb, lo=lo, scale=scale, box=dst)
        else:
            K.box_expand(box=src, n=big, rl=rl, nb=nb, lo=lo, padded=dst)

    def _tv(self, dst_ptr, stream) -> None:
        cp = cupy()
        self._prepare_half()
        nh = self.big**2 * self.half
        nb = self.nb
        p = self.sums.data.ptr
        real = self.sums.view(cp.float32)
        cp.cuda.runtime.memcpyAsync(p, self.a.data.ptr, 8 * nh, MEMCPY_DEFAULT, stream.ptr)
        self.backward.execute(p, p)
        self._box("box_restrict", real, self.y, self.scale)
        cp.cuda.runtime.memcpyAsync(self.x_prev.data.ptr, self.y.data.ptr, 4 * nb**3, MEMCPY_DEFAULT, stream.ptr)
        self.prox.reset()
        t = 1.0
        lam = np.float32(self.lam)
        for _ in range(self.iterations):
            self._box("box_expand", self.y, real)
            self.forward.execute(p, p)
            self._restore()
            self.backward.execute(p, p)
            self._box("box_restrict", real, self.v, self.scale)
            self.prox.steps(self.v, self.tv_inner)
            t_new = (1 + math.sqrt(1 + 4 * t * t)) / 2
            K.fista_step(v=self.v, p=self.prox.p, nz=nb, ny=nb, nx=nb, lam=lam, bounds=self.bounds,
                         momentum=np.float32((t - 1) / t_new), x_prev=self.x_prev, y=self.y)
            t = t_new
        medium2, inv_k02 = self._index_scalars()
        K.index_real(v=self.x_prev, total=nb**3, scale=1.0, medium2=medium2, inv_k02=inv_k02)
        cp.cuda.runtime.memcpyAsync(dst_ptr, self.x_prev.data.ptr, 4 * nb**3, MEMCPY_DEFAULT, stream.ptr)

    def fgp_steps(self, steps: int) -> None:
        """``steps`` FGP iterations on the dual for the current primal data (the counters' target)."""
        self.prox.steps(self.v, steps)

    @property
    def device_bytes(self) -> int:
        """Bytes of the solver's own buffers (the shared work area not included)."""
        names = ("sums", "hits_raw", "counts", "estimate", "v", "y", "x_prev")
        own = sum(getattr(self, n).nbytes for n in names if hasattr(self, n))
        return int(own + (self.prox.nbytes - (self.y.nbytes if self.prox.z is self.y else 0) if hasattr(self, "prox")
                          else 0))
