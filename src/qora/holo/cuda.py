"""qora.holo on CUDA: the stages of the reconstruction on the device, and the device Pipeline.

Stages (each owns its device buffers, made once; plans come from a shared :class:`WorkArea`):

- :class:`FieldStage`: R2C of the raw holograms, the sideband window read from the half
  spectrum (bins with k_x < 0 as conjugates of their mirror bins), inverse C2C.
- :class:`FirstOrder`: the Rytov phase by least-squares unwrapping (divergence of the wrapped
  gradient written in Makhoul's order, one batched 2D FFT, the Neumann division and the exact
  inverse in one kernel, the inverse FFT, congruence and border rule by block reductions), or Born.
- :class:`Mapper`: the Ewald mapping by gather (a thread per lateral column of the volume,
  no atomics) or scatter (a thread per illumination and bin, atomics), from the host's
  :class:`~qora.holo.odt.MappingPlan` tables.
- :class:`Solver`: Gerchberg-Papoulis on half spectra (C2R, clamp, R2C, restore on the padded
  in-place layout) or C2C, FISTA-TV with the FGP step ("fused" default, "separate", "cube",
  "march"), the index computed in place and copied out row by row.

Centre-origin bookkeeping: no array is ever shifted. The hologram is transformed as it is and
the crop multiplies by one sign per image; the mapping folds (-1)^(k_z + k_y + k_x + k'_y + k'_x)
into its factors, so the solver's real volume comes out centre-origin (see docs/holo.md, "CUDA").

Per-call functions (:func:`extract_fields`, :func:`first_order`, :func:`reconstruct`) take and
return host arrays and build their stages each call; :class:`CudaPipeline` builds them once.
"""

from __future__ import annotations

import math

import numpy as np

from qora.backend.fft import C2C, C2R, FORWARD, INVERSE, R2C, RawPlan, WorkArea as _WorkArea
from qora.backend import require_cupy
from qora.backend.kernels import get_kernel
from qora.holo.fields import CropPlan
from qora.holo.geometry import Geometry
from qora.holo.odt import MappingPlan, OdtResult, solver_grid

__all__ = ["FieldStage", "FirstOrder", "Mapper", "FgpProx", "Solver", "CudaPipeline", "extract_fields", "first_order",
           "reconstruct", "FGP_VARIANTS", "MAPPINGS"]

THREADS = 256
FGP_VARIANTS = ("fused", "separate", "cube", "march")
MAPPINGS = ("gather", "scatter")
FUSED_PLANES = 4  # planes per thread of the fused FGP kernel (its #define in holo.cu)
_MEMCPY_DEFAULT = 4  # cudaMemcpyDefault: the direction from the addresses (unified addressing)


def _cupy():
    return require_cupy("qora.holo on CUDA")


def _k(name: str):
    return get_kernel("qora.holo", "holo.cu", name)


def _blocks(total: int, threads: int = THREADS) -> int:
    return max(1, -(-int(total) // threads))


def _ptr(a, offset_elements: int = 0) -> int:
    return a.data.ptr + offset_elements * a.itemsize


class WorkArea(_WorkArea):
    """The shared cuFFT work area, with one plan per (kind, shape, batch, layout)."""

    def __init__(self) -> None:
        super().__init__()
        self._cache: dict = {}

    def plan(self, kind: int, shape, *, batch: int = 1, inembed=None, onembed=None) -> RawPlan:
        key = (kind, tuple(shape), batch, inembed, onembed)
        if key not in self._cache:
            self._cache[key] = self.add(RawPlan(kind, shape, batch=batch, inembed=inembed, onembed=onembed))
        return self._cache[key]

    @property
    def plan_count(self) -> int:
        return len(self._cache)


def _even(name: str, value: int) -> None:
    if value % 2:
        raise ValueError(f"the CUDA path needs an even {name}, got {value} (the centre-origin signs assume it)")


def _parts(count: int, parts: int) -> list[tuple[int, int]]:
    """(first image, images) of ``parts`` nearly equal upload parts."""
    if not 1 <= parts <= count:
        raise ValueError(f"upload parts must be between 1 and the number of holograms ({count}), got {parts}")
    sizes = [count // parts + (i < count % parts) for i in range(parts)]
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    return [(int(s), int(z)) for s, z in zip(starts, sizes)]


class FieldStage:
    """Holograms (A, N, N) float32 on the device -> complex fields (A, n, n), centre-origin."""

    def __init__(self, crop: CropPlan, count: int, work: WorkArea, *, parts: int = 1) -> None:
        cp = _cupy()
        big, n = crop.big, crop.n
        _even("hologram size", big)
        _even("field size", n)
        self.big, self.n, self.count = big, n, count
        self.parts = _parts(count, parts)
        self.holograms = cp.empty((count, big, big), cp.float32)
        self.spectra = cp.empty((count, big, big // 2 + 1), cp.complex64)
        self.r2c = {size: work.plan(R2C, (big, big), batch=size) for _, size in self.parts}
        self.inverse = work.plan(C2C, (n, n), batch=count)
        self.rows = cp.asarray(crop.rows, cp.int32)
        self.cols = cp.asarray(crop.cols, cp.int32)
        self.pupil = cp.asarray(crop.pupil * crop.scale / n**2, cp.float32)  # CPU ifft2's 1/n^2 folded in
        # window offset 0 (FFT order) is the sideband's bin: (-1)^(c_y + c_x), the per-image sign
        self.sign = np.float32(-1.0 if (int(crop.rows[0]) + int(crop.cols[0])) % 2 else 1.0)
        self.bytes_moved = count * (4 * big * big + 8 * big * (big // 2 + 1) + 2 * 8 * n * n)

    def extract(self, out, *, ready=None) -> None:
        """Fields of ``self.holograms`` into ``out`` (A, n, n) complex64; ``ready[i]``: event of part i's upload."""
        cp = _cupy()
        stream = cp.cuda.get_current_stream()
        crop = _k("crop_window")
        for i, (first, size) in enumerate(self.parts):
            if ready is not None:
                stream.wait_event(ready[i])
            self.r2c[size].execute(_ptr(self.holograms, first * self.big**2),
                                   _ptr(self.spectra, first * self.big * (self.big // 2 + 1)), FORWARD)
            crop((_blocks(size * self.n**2),), (THREADS,),
                 (self.spectra[first:first + size], np.int32(self.big), self.rows, self.cols, self.pupil,
                  np.int32(self.n), np.int32(size), self.sign, out[first:first + size]))
        self.inverse.execute(out.data.ptr, out.data.ptr, INVERSE)


class FirstOrder:
    """First-order fields phi (A, n, n) from num / den: the Rytov phase log(r) or Born r - 1."""

    def __init__(self, count: int, n: int, work: WorkArea) -> None:
        cp = _cupy()
        self.count, self.n = count, n
        self.psi = cp.empty((count, n, n), cp.float32)
        self.v = cp.empty((count, n, n), cp.complex64)
        self.w = cp.empty((count, n, n), cp.complex64)
        self.sums = cp.zeros((count, 4), cp.float64)
        self.plan = work.plan(C2C, (n, n), batch=count)

    def __call__(self, num, den, out, approximation: str = "rytov") -> None:
        n, a = self.n, self.count
        null = np.uint64(0)
        den_arg = den if den is not None else null
        if approximation == "born":
            _k("born_write")((_blocks(a * n * n),), (THREADS,), (num, den_arg, np.int64(a * n * n), out))
            return
        if approximation != "rytov":
            raise ValueError(f"approximation must be 'rytov' or 'born', got {approximation!r}")
        grid = (_blocks(n * n), a)
        n32 = np.int32(n)
        _k("unwrap_divergence")(grid, (THREADS,), (num, den_arg, n32, n32, self.psi, self.v))
        self.plan.execute(self.v.data.ptr, self.v.data.ptr, FORWARD)
        _k("unwrap_poisson")(grid, (THREADS,), (self.v, n32, n32, self.w))
        self.plan.execute(self.w.data.ptr, self.w.data.ptr, INVERSE)
        scale = np.float32(1.0 / (n * n))
        self.sums.fill(0)
        _k("unwrap_congruence")(grid, (THREADS,), (self.psi, self.w, n32, n32, scale, self.sums))
        _k("unwrap_border")((_blocks(4 * n - 4), a), (THREADS,), (self.psi, self.w, n32, n32, scale, self.sums))
        _k("rytov_write")(grid, (THREADS,), (num, den_arg, self.psi, self.w, n32, n32, scale, self.sums, out))


class Mapper:
    """The Ewald mapping of 2D spectra (A, N, N) into volume sums (N^3 complex) and hit counts."""

    def __init__(self, plan: MappingPlan, mode: str = "gather") -> None:
        if mode not in MAPPINGS:
            raise ValueError(f"mapping must be one of {MAPPINGS}, got {mode!r}")
        cp = _cupy()
        big = plan.geometry.n
        _even("solver grid", big)
        self.mode, self.big = mode, big
        sources, targets, factors = [], [], []
        for a, (t, lat, f) in enumerate(zip(plan.targets, plan.lateral, plan.factors)):
            k3 = np.stack(np.unravel_index(t, (big,) * 3))
            k2 = np.stack(np.unravel_index(lat, (big, big)))
            sign = 1 - 2 * ((k3.sum(axis=0) + k2.sum(axis=0)) % 2)  # centre-origin, both sides
            sources.append(a * big * big + lat)
            targets.append(t)
            factors.append(f * sign)
        source = np.concatenate(sources).astype(np.int64)
        target = np.concatenate(targets).astype(np.int64)
        factor = np.concatenate(factors).astype(np.complex64)
        if target.max(initial=0) >= 2**31 or source.max(initial=0) >= 2**31:
            raise ValueError("the volume or the field stack is too large for 32-bit mapping tables")
        self.entries = source.size
        if mode == "scatter":
            self.source = cp.asarray(source, cp.int32)
            self.target = cp.asarray(target, cp.int32)
            self.factor = cp.asarray(factor)
        else:
            column = target % (big * big)
            order = np.lexsort((np.arange(source.size), column))  # by column, then illumination (stable)
            counts = np.bincount(column, minlength=big * big)
            start = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
            self.column_start = cp.asarray(start)
            self.source = cp.asarray(source[order], cp.int32)
            self.plane = cp.asarray(target[order] // (big * big), cp.int32)
            self.factor = cp.asarray(factor[order])
        self.table_bytes = int(self.entries * (4 + 4 + 8))

    def __call__(self, spectra, sums, hits) -> None:
        sums.fill(0)
        hits.fill(0)
        if self.mode == "scatter":
            _k("map_scatter")((_blocks(self.entries),), (THREADS,),
                              (spectra, self.source, self.target, self.factor, np.int64(self.entries), sums, hits))
        else:
            columns = self.big * self.big
            _k("map_gather")((_blocks(columns, 128),), (128,),
                             (spectra, self.column_start, self.source, self.plane, self.factor, np.int32(columns),
                              sums, hits))


def _copy_box(src_ptr: int, row_floats: int, big: int, nb: int, dst_ptr: int, stream) -> None:
    """The central nb^3 box of a float volume of edge ``big`` (rows of ``row_floats``) to a dense nb^3 at dst."""
    cp = _cupy()
    lo = big // 2 - nb // 2
    if nb == big:
        cp.cuda.runtime.memcpy2DAsync(dst_ptr, 4 * nb, src_ptr, 4 * row_floats, 4 * nb, big * big,
                                      _MEMCPY_DEFAULT, stream.ptr)
        return
    for k in range(nb):
        src = src_ptr + 4 * (((k + lo) * big + lo) * row_floats + lo)
        cp.cuda.runtime.memcpy2DAsync(dst_ptr + 4 * k * nb * nb, 4 * nb, src, 4 * row_floats, 4 * nb, nb,
                                      _MEMCPY_DEFAULT, stream.ptr)


class FgpProx:
    """The TV proximal step by FGP on the device, for real volumes (nz, ny, nx) float32.

    Holds the dual p (warm-started between calls, as FISTA's outer loop and the BPM inversion
    use it), its momentum copy r and the next r (double-buffered: neighbouring threads still
    read the old r). ``variant`` picks the step's kernel (:data:`FGP_VARIANTS`); ``scratch``
    is a volume the "separate" variant may use for the primal point (allocated if not given).
    """

    def __init__(self, shape, lam: float, variant: str = "fused", *, scratch=None, nonnegative: bool = True) -> None:
        cp = _cupy()
        if variant not in FGP_VARIANTS:
            raise ValueError(f"fgp must be one of {FGP_VARIANTS}, got {variant!r}")
        if not lam > 0:
            raise ValueError(f"the TV weight must be positive, got {lam}")
        self.shape = tuple(int(v) for v in shape)
        self.lam, self.variant, self.nonnegative = float(lam), variant, nonnegative
        size = int(np.prod(self.shape))
        self.p = cp.zeros(3 * size, cp.float32)
        self.r = cp.empty(3 * size, cp.float32)
        self.r_next = cp.empty(3 * size, cp.float32)
        self.z = None
        if variant == "separate":
            self.z = scratch if scratch is not None else cp.empty(size, cp.float32)

    def reset(self) -> None:
        """Forget the warm start (p = 0)."""
        self.p.fill(0)

    def _dims(self):
        nz, ny, nx = self.shape
        return np.int32(nz), np.int32(ny), np.int32(nx)

    def _plane_grid(self, bx: int, by: int, planes: int = 1):
        nz, ny, nx = self.shape
        return (_blocks(nx, bx), _blocks(ny, by), _blocks(nz, planes))

    def steps(self, v, count: int) -> None:
        """``count`` FGP iterations for the data v (r restarted from p, t = 1)."""
        cp = _cupy()
        if count == 0:
            return
        cp.cuda.runtime.memcpyAsync(self.r.data.ptr, self.p.data.ptr, self.p.nbytes, _MEMCPY_DEFAULT,
                                    cp.cuda.get_current_stream().ptr)
        dims = self._dims()
        lam = np.float32(self.lam)
        step = np.float32(1.0 / (12.0 * self.lam))
        nonneg = np.int32(self.nonnegative)
        t = 1.0
        r, r_next = self.r, self.r_next
        for _ in range(count):
            t_new = (1 + math.sqrt(1 + 4 * t * t)) / 2
            m = np.float32((t - 1) / t_new)
            args = (v, r, self.p, r_next, *dims, lam, nonneg, step, m)
            if self.variant == "fused":
                _k("fgp_fused")(self._plane_grid(64, 4, FUSED_PLANES), (64, 4, 1), args)
            elif self.variant == "separate":
                _k("fgp_primal")(self._plane_grid(32, 8), (32, 8, 1), (v, r, *dims, lam, nonneg, self.z))
                _k("fgp_dual")(self._plane_grid(32, 8), (32, 8, 1), (self.z, r, self.p, r_next, *dims, step, m))
            elif self.variant == "cube":
                _k("fgp_cube")(self._plane_grid(16, 8, 4), (16, 8, 4), args)
            else:
                _k("fgp_march")(self._plane_grid(32, 8, 8), (32, 8, 1), args)
            r, r_next = r_next, r
            t = t_new
        self.r, self.r_next = r, r_next

    def primal(self, v, out) -> None:
        """out = max(v - lam D^T p, 0): the prox's result for the current dual."""
        _k("fgp_primal")(self._plane_grid(32, 8), (32, 8, 1),
                         (v, self.p, *self._dims(), np.float32(self.lam), np.int32(self.nonnegative), out))

    def __call__(self, v, steps: int, out) -> None:
        """The prox of v into ``out`` after ``steps`` FGP iterations from the current (warm) dual."""
        self.steps(v, steps)
        self.primal(v, out)

    @property
    def nbytes(self) -> int:
        return int(self.p.nbytes * 3 + (self.z.nbytes if self.z is not None else 0))


class Solver:
    """From mapped spectra to the index box: GP (R2C or C2C), plain, or FISTA-TV, on one grid.

    Parameters
    ----------
    geometry : Geometry
        The solver's grid (``solver_grid``; edge N, even).
    field_of_view : int
        Edge of the central box returned (the recorded field of view, at most N).
    method, iterations, r2c, tv_weight, tv_inner
        As in :func:`qora.holo.odt.reconstruct`.
    fgp : {"fused", "separate", "cube", "march"}
        The FGP step's kernel (see docs/holo-performance.md); equal to each other within 2 ulp.
    """

    def __init__(self, geometry: Geometry, field_of_view: int, work: WorkArea, *, method: str = "gp",
                 iterations: int = 50, r2c: bool = True, tv_weight: float = 1e-3, tv_inner: int = 20,
                 fgp: str = "fused") -> None:
        cp = _cupy()
        if method not in ("plain", "gp", "tv"):
            raise ValueError(f"method must be 'plain', 'gp' or 'tv', got {method!r}")
        if method != "plain" and iterations < 1:
            raise ValueError(f"iterations must be at least 1, got {iterations}")
        if method == "tv" and (tv_weight <= 0 or tv_inner < 0):
            raise ValueError("tv needs tv_weight > 0 and tv_inner >= 0")
        if fgp not in FGP_VARIANTS:
            raise ValueError(f"fgp must be one of {FGP_VARIANTS}, got {fgp!r}")
        big = geometry.n
        _even("solver grid", big)
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
            self.prox = FgpProx((field_of_view,) * 3, self.lam, fgp, scratch=self.y)
        self.scale = 1.0 / n3
        self.info: dict = {}

    # -- helpers -------------------------------------------------------------------------------
    def _elementwise_grid(self, count: int):
        return (min(_blocks(count), 132 * 16),)

    def _prepare_half(self) -> None:
        """counts = M(k) + M(-k), P = sums / hits, a = (P(k) + conj P(-k)) / 2 (into the hit-count buffer)."""
        big, nh = self.big, self.big**2 * self.half
        n32 = np.int32(big)
        _k("gp_counts")((_blocks(nh),), (THREADS,), (self.hits, n32, self.counts))
        _k("normalise_hits")((_blocks(big**3),), (THREADS,), (self.sums, self.hits, np.int64(big**3)))
        _k("gp_data")((_blocks(nh),), (THREADS,), (self.sums, n32, self.a))

    def _restore(self) -> None:
        pairs = self.big**2 * self.half // 2
        _k("restore_half")(self._elementwise_grid(pairs), (THREADS,),
                           (self.sums, self.a, self.counts, np.int64(pairs)))

    def _clamp(self) -> None:
        quads = self.big**2 * 2 * self.half // 4
        _k("clamp_real")(self._elementwise_grid(quads), (THREADS,), (self.sums, np.int64(quads), np.float32(self.scale)))

    def _index_scalars(self):
        g = self.geometry
        return np.float32(g.medium_index**2), np.float32(1.0 / g.k0**2)

    # -- solvers -------------------------------------------------------------------------------
    def __call__(self, spectra, mapper: Mapper, dst_ptr: int) -> None:
        """Map ``spectra`` (A, N, N), solve, and write the index box (nb^3 float32) to ``dst_ptr``."""
        cp = _cupy()
        stream = cp.cuda.get_current_stream()
        mapper(spectra, self.sums, self.hits)
        if self.method == "tv":
            self._tv(dst_ptr, stream)
        elif self.real:
            self._gp_half(dst_ptr, stream)
        else:
            self._gp_complex(dst_ptr, stream)

    def _gp_half(self, dst_ptr, stream) -> None:
        cp = _cupy()
        self._prepare_half()
        nh = self.big**2 * self.half
        cp.cuda.runtime.memcpyAsync(self.sums.data.ptr, self.a.data.ptr, 8 * nh, _MEMCPY_DEFAULT, stream.ptr)
        p = self.sums.data.ptr
        for _ in range(self.iterations):
            self.backward.execute(p, p)
            self._clamp()
            self.forward.execute(p, p)
            self._restore()
        self.backward.execute(p, p)
        medium2, inv_k02 = self._index_scalars()
        total = self.big**2 * 2 * self.half
        _k("index_real")(self._elementwise_grid(total), (THREADS,),
                         (self.sums, np.int64(total), np.float32(self.scale), medium2, inv_k02))
        _copy_box(p, 2 * self.half, self.big, self.nb, dst_ptr, stream)

    def _gp_complex(self, dst_ptr, stream) -> None:
        cp = _cupy()
        n3 = self.big**3
        _k("normalise_hits")((_blocks(n3),), (THREADS,), (self.sums, self.hits, np.int64(n3)))
        cp.cuda.runtime.memcpyAsync(self.estimate.data.ptr, self.sums.data.ptr, 8 * n3, _MEMCPY_DEFAULT, stream.ptr)
        e = self.estimate.data.ptr
        grid = self._elementwise_grid(n3)
        iterations = self.iterations if self.method == "gp" else 0
        for _ in range(iterations):
            self.c2c.execute(e, e, INVERSE)
            _k("clamp_complex")(grid, (THREADS,), (self.estimate, np.int64(n3), np.float32(self.scale)))
            self.c2c.execute(e, e, FORWARD)
            _k("restore_complex")(grid, (THREADS,), (self.estimate, self.sums, self.hits, np.int64(n3)))
        self.c2c.execute(e, e, INVERSE)
        medium2, inv_k02 = self._index_scalars()
        index = self.hits_raw[:4 * n3].view(cp.float32)  # the hit counts are spent: the index goes there
        _k("index_complex")(grid, (THREADS,), (self.estimate, np.int64(n3), np.float32(self.scale), medium2, inv_k02,
                                               index))
        _copy_box(index.data.ptr, self.big, self.big, self.nb, dst_ptr, stream)

    def _box(self, kernel: str, src, dst, scale: float = 1.0) -> None:
        big, nb = self.big, self.nb
        lo = big // 2 - nb // 2
        rl = 2 * self.half
        if kernel == "box_restrict":
            _k(kernel)((_blocks(nb**3),), (THREADS,), (src, np.int32(big), np.int32(rl), np.int32(nb), np.int32(lo),
                                                       np.float32(scale), dst))
        else:
            _k(kernel)((_blocks(big * big * rl),), (THREADS,), (src, np.int32(big), np.int32(rl), np.int32(nb),
                                                                np.int32(lo), dst))

    def _tv(self, dst_ptr, stream) -> None:
        cp = _cupy()
        self._prepare_half()
        nh = self.big**2 * self.half
        nb = self.nb
        p = self.sums.data.ptr
        real = self.sums.view(cp.float32)
        cp.cuda.runtime.memcpyAsync(p, self.a.data.ptr, 8 * nh, _MEMCPY_DEFAULT, stream.ptr)
        self.backward.execute(p, p)
        self._box("box_restrict", real, self.y, self.scale)
        cp.cuda.runtime.memcpyAsync(self.x_prev.data.ptr, self.y.data.ptr, 4 * nb**3, _MEMCPY_DEFAULT, stream.ptr)
        self.prox.reset()
        t = 1.0
        dims = (np.int32(nb),) * 3
        lam = np.float32(self.lam)
        block = (32, 8, 1)
        grid = (_blocks(nb, 32), _blocks(nb, 8), nb)
        for _ in range(self.iterations):
            self._box("box_expand", self.y, real)
            self.forward.execute(p, p)
            self._restore()
            self.backward.execute(p, p)
            self._box("box_restrict", real, self.v, self.scale)
            self.prox.steps(self.v, self.tv_inner)
            t_new = (1 + math.sqrt(1 + 4 * t * t)) / 2
            _k("fista_step")(grid, block, (self.v, self.prox.p, *dims, lam, np.int32(1), np.float32((t - 1) / t_new),
                                           self.x_prev, self.y))
            t = t_new
        medium2, inv_k02 = self._index_scalars()
        _k("index_real")(self._elementwise_grid(nb**3), (THREADS,),
                         (self.x_prev, np.int64(nb**3), np.float32(1.0), medium2, inv_k02))
        cp.cuda.runtime.memcpyAsync(dst_ptr, self.x_prev.data.ptr, 4 * nb**3, _MEMCPY_DEFAULT, stream.ptr)

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


def _pad_into(phi, padded) -> None:
    """Centre-origin fields (A, n, n) into the middle of a zeroed (A, N, N) stack (phi = 0 outside)."""
    n, big = phi.shape[-1], padded.shape[-1]
    lo = big // 2 - n // 2
    padded[:, lo:lo + n, lo:lo + n] = phi


class _Reconstruction:
    """Mapping FFT, mapper and solver for first-order fields (A, n, n) of one geometry."""

    def __init__(self, geometry: Geometry, work: WorkArea, *, oversample: float = 1.0, mapping: str = "gather",
                 plan: MappingPlan | None = None, **solver_options) -> None:
        cp = _cupy()
        grid = solver_grid(geometry, oversample)
        self.geometry, self.big = geometry, grid.n
        self.plan = plan if plan is not None else MappingPlan(grid)
        self.mapper = Mapper(self.plan, mapping)
        self.solver = Solver(grid, geometry.n, work, **solver_options)
        self.padded = cp.zeros((geometry.count, grid.n, grid.n), cp.complex64) if grid.n != geometry.n else None
        self.fft = work.plan(C2C, (grid.n, grid.n), batch=geometry.count)
        self.measured_fraction = float(self.plan.measured.mean())  # once: a host pass over N^3 (60 ms at 512^3)

    def __call__(self, phi, dst_ptr: int) -> None:
        spectra = phi
        if self.padded is not None:
            self.padded.fill(0)  # the previous call's in-place FFT left its spectrum there
            _pad_into(phi, self.padded)
            spectra = self.padded
        self.fft.execute(spectra.data.ptr, spectra.data.ptr, FORWARD)  # phi is spent
        self.solver(spectra, self.mapper, dst_ptr)


# ---------------------------------------------------------------------------------------------
# per-call functions: host arrays in and out, stages built for the call


def extract_fields(holograms, sideband, *, hologram_pixel: float, n: int, pupil_frequency: float) -> np.ndarray:
    """The CUDA twin of :func:`qora.holo.fields.extract_fields` (complex64 out)."""
    cp = _cupy()
    from qora.holo.fields import _stack

    holos, single = _stack(holograms)
    crop = CropPlan(holos.shape[-1], sideband, hologram_pixel=hologram_pixel, n=n, pupil_frequency=pupil_frequency)
    work = WorkArea()
    stage = FieldStage(crop, holos.shape[0], work)
    work.allocate()
    stage.holograms.set(holos.astype(np.float32))
    out = cp.empty((holos.shape[0], n, n), cp.complex64)
    stage.extract(out)
    host = out.get()
    return host[0] if single else host


def first_order(ratio, approximation: str = "rytov", background=None) -> np.ndarray:
    """The CUDA twin of :func:`qora.holo.odt.first_order` (ratio, or fields over ``background``)."""
    cp = _cupy()
    r = np.asarray(ratio)
    single = r.ndim == 2
    r = r[None] if single else r
    _even("field size", r.shape[-1])
    if r.shape[-1] != r.shape[-2]:
        raise ValueError(f"fields must be square, got {r.shape}")
    work = WorkArea()
    stage = FirstOrder(r.shape[0], r.shape[-1], work)
    work.allocate()
    num = cp.asarray(r, cp.complex64)
    den = None if background is None else cp.asarray(np.asarray(background).reshape(r.shape), cp.complex64)
    out = cp.empty_like(num)
    stage(num, den, out, approximation)
    host = out.get()
    return host[0] if single else host


def reconstruct(ratio, geometry: Geometry, *, approximation: str = "rytov", method: str = "gp", iterations: int = 50,
                r2c: bool = True, tv_weight: float = 1e-3, tv_inner: int = 20, oversample: float = 1.0,
                mapping: str = "gather", fgp: str = "fused") -> OdtResult:
    """The CUDA twin of :func:`qora.holo.odt.reconstruct`: same options, plus ``mapping`` and ``fgp``."""
    cp = _cupy()
    ratio = np.asarray(ratio)
    if not np.iscomplexobj(ratio) or not np.all(np.isfinite(ratio)):
        raise ValueError("ratio must be complex and finite (u / u_in)")
    if ratio.shape != (geometry.count, geometry.n, geometry.n):
        raise ValueError(f"ratio must be {(geometry.count, geometry.n, geometry.n)}, got {ratio.shape}")
    work = WorkArea()
    order = FirstOrder(geometry.count, geometry.n, work)
    recon = _Reconstruction(geometry, work, oversample=oversample, mapping=mapping, method=method,
                            iterations=iterations, r2c=r2c, tv_weight=tv_weight, tv_inner=tv_inner, fgp=fgp)
    work.allocate()
    num = cp.asarray(ratio, cp.complex64)
    phi = cp.empty_like(num)
    order(num, None, phi, approximation)
    out = cp.empty((geometry.n,) * 3, cp.float32)
    recon(phi, out.data.ptr)
    index = out.get()
    return OdtResult(index, geometry, method, approximation, 0 if method == "plain" else iterations,
                     info={"measured_fraction": recon.measured_fraction, "r2c": bool(recon.solver.real),
                           "oversample": oversample, "grid": recon.big, "backend": "cuda", "mapping": mapping,
                           "fgp": fgp if method == "tv" else None, "tv_weight": tv_weight if method == "tv" else None})


# ---------------------------------------------------------------------------------------------


class CudaPipeline:
    """The device-resident Pipeline: plans, buffers and backgrounds made once; one stream per stack.

    Same parameters as :class:`qora.holo.pipeline.Pipeline`, plus ``upload_parts`` (the hologram
    upload split into parts on a copy stream, each part's R2C ordered after its copy by an
    event), ``mapping`` ("gather" or "scatter") and ``fgp`` (the TV step's kernel).

    :meth:`input` is the page-locked host buffer of the holograms: fill it in place to save
    a host copy, then call :meth:`process` without arguments.
    """

    def __init__(self, geometry: Geometry, *, sideband, hologram_pixel: float, hologram_n: int,
                 approximation: str = "rytov", method: str = "gp", iterations: int = 50, r2c: bool = True,
                 tv_weight: float = 1e-3, tv_inner: int = 20, oversample: float = 1.0, upload_parts: int = 1,
                 mapping: str = "gather", fgp: str = "fused") -> None:
        cp = _cupy()
        if approximation not in ("rytov", "born"):
            raise ValueError(f"approximation must be 'rytov' or 'born', got {approximation!r}")
        a, n = geometry.count, geometry.n
        self.geometry, self.approximation = geometry, approximation
        self.options = dict(method=method, iterations=iterations, r2c=r2c, tv_weight=tv_weight, tv_inner=tv_inner,
                            oversample=oversample, mapping=mapping, fgp=fgp)
        self.work = WorkArea()
        crop = CropPlan(hologram_n, sideband, hologram_pixel=hologram_pixel, n=n, pupil_frequency=geometry.pupil_frequency)
        self.fields = FieldStage(crop, a, self.work, parts=upload_parts)
        self.order = FirstOrder(a, n, self.work)
        self.recon = _Reconstruction(geometry, self.work, oversample=oversample, mapping=mapping, method=method,
                                     iterations=iterations, r2c=r2c, tv_weight=tv_weight, tv_inner=tv_inner, fgp=fgp)
        self.sample = cp.empty((a, n, n), cp.complex64)
        self.background = cp.empty((a, n, n), cp.complex64)
        self.phi = cp.empty((a, n, n), cp.complex64)
        self.work.allocate()
        self._in_mem = cp.cuda.alloc_pinned_memory(4 * a * hologram_n**2)
        self._out_mem = cp.cuda.alloc_pinned_memory(4 * n**3)
        self.host_in = np.frombuffer(self._in_mem, np.float32, a * hologram_n**2).reshape(a, hologram_n, hologram_n)
        self.host_out = np.frombuffer(self._out_mem, np.float32, n**3).reshape(n, n, n)
        self.stream = cp.cuda.Stream(non_blocking=True)
        self.copy_stream = cp.cuda.Stream(non_blocking=True)
        self.uploaded = [cp.cuda.Event(disable_timing=True) for _ in self.fields.parts]
        self.free = cp.cuda.Event(disable_timing=True)
        self._flag_mem = cp.cuda.alloc_pinned_memory(4)
        self.host_flag = np.frombuffer(self._flag_mem, np.int32, 1)
        self.flag = cp.zeros(1, cp.int32)
        self.has_background = False
        self.stage_ms: dict = {}
        self.profile = False
        self.plans_made = self.work.plan_count

    def input(self) -> np.ndarray:
        """The page-locked host buffer (A, N, N) float32 that :meth:`process` uploads."""
        return self.host_in

    def _upload(self, holograms) -> None:
        cp = _cupy()
        if holograms is not None and holograms is not self.host_in:
            holos = np.asarray(holograms)
            if holos.shape != self.host_in.shape:
                raise ValueError(f"expected holograms of shape {self.host_in.shape}, got {holos.shape}")
            np.copyto(self.host_in, holos, casting="same_kind")
        self.free.record(self.stream)  # the previous stack's R2C has read the device buffer
        self.copy_stream.wait_event(self.free)
        per = self.host_in[0].size
        for event, (first, size) in zip(self.uploaded, self.fields.parts):
            cp.cuda.runtime.memcpyAsync(_ptr(self.fields.holograms, first * per), self.host_in[first:].ctypes.data,
                                        4 * size * per, 1, self.copy_stream.ptr)
            event.record(self.copy_stream)

    def _check_finite(self) -> None:
        """Queue the device-side check of the uploaded holograms (read by :meth:`_raise_if_nonfinite`)."""
        cp = _cupy()
        quads = self.fields.holograms.size // 4  # N even: N^2 is a multiple of 4
        self.flag.fill(0)
        _k("flag_nonfinite")((min(_blocks(quads), 132 * 8),), (THREADS,), (self.fields.holograms, np.int64(quads),
                                                                           self.flag))
        cp.cuda.runtime.memcpyAsync(self.host_flag.ctypes.data, self.flag.data.ptr, 4, _MEMCPY_DEFAULT,
                                    self.stream.ptr)

    def _raise_if_nonfinite(self) -> None:
        if self.host_flag[0]:
            raise ValueError("holograms have non-finite values")

    def set_background(self, holograms) -> None:
        """Extract and keep the background fields on the device (one hologram per illumination)."""
        cp = _cupy()
        self._upload(holograms)
        with self.stream:
            self.fields.extract(self.background, ready=self.uploaded)
            self._check_finite()
            mag = cp.abs(self.background)
            low = bool((mag.min() <= 0) | (mag.min() < 1e-6 * cp.median(mag)))
        self.stream.synchronize()
        self._raise_if_nonfinite()
        if low:
            raise ValueError("a background field is (nearly) zero somewhere: cannot form the ratio")
        self.has_background = True

    def process(self, holograms=None, *, progress=None, copy: bool = True) -> OdtResult:
        """One stack (A, N, N) (or the contents of :meth:`input`) -> :class:`OdtResult` (host volume).

        ``copy=False`` returns the page-locked output buffer itself (no host copy): valid until
        the next call, for a consumer that writes it out at once (a time series to disk).
        """
        from qora.progress import report

        cp = _cupy()
        if not self.has_background:
            raise RuntimeError("call set_background(...) before process(...)")
        marks = []
        self._upload(holograms)
        report(progress, "fields", 0, 3)
        with self.stream:
            def mark(name):
                if self.profile:
                    e = cp.cuda.Event()
                    e.record(self.stream)
                    marks.append((name, e))

            mark("start")
            self.fields.extract(self.sample, ready=self.uploaded)
            self._check_finite()
            mark("fields")
            self.order(self.sample, self.background, self.phi, self.approximation)
            mark(self.approximation)
            self.recon(self.phi, self.host_out.ctypes.data)
            mark("solve")
        self.stream.synchronize()
        self._raise_if_nonfinite()
        report(progress, "done", 3, 3)
        if self.profile:
            self.stage_ms = {name: cp.cuda.get_elapsed_time(marks[i - 1][1], e)
                             for i, (name, e) in enumerate(marks) if i > 0}
        o = self.options
        return OdtResult(self.host_out.copy() if copy else self.host_out, self.geometry, o["method"], self.approximation,
                         0 if o["method"] == "plain" else o["iterations"],
                         info={"measured_fraction": self.recon.measured_fraction, "r2c": self.recon.solver.real,
                               "grid": self.recon.big, "backend": "cuda", "mapping": o["mapping"],
                               "upload_parts": len(self.fields.parts)})
