"""qora.holo on CUDA: the stages before the solver, their shared cuFFT work area, and the TV prox.

Each stage owns its device buffers, made once; plans come from a shared :class:`WorkArea`;
kernels are launched through :mod:`qora.holo.kernels`.

- :class:`FieldStage`: R2C of the raw holograms, the sideband window read from the half
  spectrum (bins with k_x < 0 as conjugates of their mirror bins), inverse C2C.
- :class:`FirstOrder`: the Rytov phase by least-squares unwrapping (divergence of the wrapped
  gradient written in Makhoul's order, one batched 2D FFT, the Neumann division and the exact
  inverse in one kernel, the inverse FFT, congruence and border rule by block reductions), or Born.
- :class:`Mapper`: the Ewald mapping by gather (a thread per lateral column of the volume,
  no atomics) or scatter (a thread per illumination and bin, atomics), from the host's
  :class:`~qora.holo.plans.MappingPlan` tables.
- :class:`FgpProx`: the TV proximal step by FGP ("fused", "separate", "cube", "march").

Centre-origin bookkeeping: no array is ever shifted. The hologram is transformed as it is and
the crop multiplies by one sign per image; the mapping folds (-1)^(k_z + k_y + k_x + k'_y + k'_x)
into its factors, so the solver's real volume comes out centre-origin (see docs/holo.md, "CUDA").
A leaf: it imports the host tables (:mod:`qora.holo.plans`), never the other way round.
"""

from __future__ import annotations


import numpy as np

from qora.backend import require_cupy
from qora.backend.fft import C2C, FORWARD, INVERSE, R2C, RawPlan, WorkArea as _WorkArea
from qora.holo import kernels as K
from qora.holo.fista import momenta
from qora.holo.options import FGP_VARIANTS, MAPPINGS
from qora.holo.plans import CropPlan, MappingPlan

__all__ = ["WorkArea", "FieldStage", "FirstOrder", "Mapper", "FgpProx", "cupy", "ptr", "check_even", "upload_parts",
           "copy_box", "MEMCPY_DEFAULT"]

MEMCPY_DEFAULT = 4  # cudaMemcpyDefault: the direction from the addresses (unified addressing)
_FGP_STEPS = {"fused": K.fgp_fused, "cube": K.fgp_cube, "march": K.fgp_march}  # "separate" is two kernels


def cupy():
    """CuPy (a clear ImportError where there is none)."""
    return require_cupy("qora.holo on CUDA")


def ptr(a, offset_elements: int = 0) -> int:
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


def check_even(name: str, value: int) -> None:
    if value % 2:
        raise ValueError(f"the CUDA path needs an even {name}, got {value} (the centre-origin signs assume it)")


def upload_parts(count: int, parts: int) -> list[tuple[int, int]]:
    """(first image, images) of ``parts`` nearly equal upload parts."""
    if not 1 <= parts <= count:
        raise ValueError(f"upload parts must be between 1 and the number of holograms ({count}), got {parts}")
    sizes = [count // parts + (i < count % parts) for i in range(parts)]
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    return [(int(s), int(z)) for s, z in zip(starts, sizes)]


class FieldStage:
    """Holograms (A, N, N) float32 on the device -> complex fields (A, n, n), centre-origin."""

    def __init__(self, crop: CropPlan, count: int, work: WorkArea, *, parts: int = 1) -> None:
        cp = cupy()
        if not crop.square:
            raise ValueError(f"the CUDA field stage takes square holograms and windows, got {crop.shape} and "
                             f"{crop.window} (extract rectangular ones on the CPU)")
        big, n = crop.big, crop.n
        check_even("hologram size", big)
        check_even("field size", n)
        self.big, self.n, self.count = big, n, count
        self.parts = upload_parts(count, parts)
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
        cp = cupy()
        stream = cp.cuda.get_current_stream()
        for i, (first, size) in enumerate(self.parts):
            if ready is not None:
                stream.wait_event(ready[i])
            self.r2c[size].execute(ptr(self.holograms, first * self.big**2),
                                   ptr(self.spectra, first * self.big * (self.big // 2 + 1)), FORWARD)
            K.crop_window(spectra=self.spectra[first:first + size], big=self.big, rows=self.rows, cols=self.cols,
                          pupil=self.pupil, n=self.n, count=size, sign=self.sign, out=out[first:first + size])
        self.inverse.execute(out.data.ptr, out.data.ptr, INVERSE)


class FirstOrder:
    """First-order fields phi (A, n, n) from num / den: the Rytov phase log(r) or Born r - 1."""

    def __init__(self, count: int, n: int, work: WorkArea) -> None:
        cp = cupy()
        self.count, self.n = count, n
        self.psi = cp.empty((count, n, n), cp.float32)
        self.v = cp.empty((count, n, n), cp.complex64)
        self.w = cp.empty((count, n, n), cp.complex64)
        self.sums = cp.zeros((count, 4), cp.float64)
        self.plan = work.plan(C2C, (n, n), batch=count)

    def __call__(self, num, den, out, approximation: str = "rytov") -> None:
        n, a = self.n, self.count
        if approximation == "born":
            K.born_write(num=num, den=den, total=a * n * n, out=out)
            return
        if approximation != "rytov":
            raise ValueError(f"approximation must be 'rytov' or 'born', got {approximation!r}")
        K.unwrap_divergence(num=num, den=den, count=a, m=n, n=n, psi=self.psi, v=self.v)
        self.plan.execute(self.v.data.ptr, self.v.data.ptr, FORWARD)
        K.unwrap_poisson(v=self.v, count=a, m=n, n=n, w=self.w)
        self.plan.execute(self.w.data.ptr, self.w.data.ptr, INVERSE)
        scale = np.float32(1.0 / (n * n))
        self.sums.fill(0)
        K.unwrap_congruence(psi=self.psi, solved=self.w, count=a, m=n, n=n, scale=scale, sums=self.sums)
        K.unwrap_border(psi=self.psi, solved=self.w, count=a, m=n, n=n, scale=scale, sums=self.sums)
        K.rytov_write(num=num, den=den, psi=self.psi, solved=self.w, count=a, m=n, n=n, scale=scale, sums=self.sums,
                      out=out)


class Mapper:
    """The Ewald mapping of 2D spectra (A, N, N) into volume sums (N^3 complex) and hit counts."""

    def __init__(self, plan: MappingPlan, mode: str = "gather") -> None:
        if mode not in MAPPINGS:
            raise ValueError(f"mapping must be one of {MAPPINGS}, got {mode!r}")
        cp = cupy()
        big = plan.geometry.n
        check_even("solver grid", big)
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
            K.map_scatter(spectra=spectra, source=self.source, target=self.target, factor=self.factor,
                          entries=self.entries, sums=sums, hits=hits)
        else:
            K.map_gather(spectra=spectra, column_start=self.column_start, source=self.source, plane=self.plane,
                         factor=self.factor, columns=self.big * self.big, sums=sums, hits=hits)


def copy_box(src_ptr: int, row_floats: int, big: int, nb: int, dst_ptr: int, stream) -> None:
    """The central nb^3 box of a float volume of edge ``big`` (rows of ``row_floats``) to a dense nb^3 at dst."""
    cp = cupy()
    lo = big // 2 - nb // 2
    if nb == big:
        cp.cuda.runtime.memcpy2DAsync(dst_ptr, 4 * nb, src_ptr, 4 * row_floats, 4 * nb, big * big,
                                      MEMCPY_DEFAULT, stream.ptr)
        return
    for k in range(nb):
        src = src_ptr + 4 * (((k + lo) * big + lo) * row_floats + lo)
        cp.cuda.runtime.memcpy2DAsync(dst_ptr + 4 * k * nb * nb, 4 * nb, src, 4 * row_floats, 4 * nb, nb,
                                      MEMCPY_DEFAULT, stream.ptr)


class FgpProx:
    """The TV proximal step by FGP on the device, for real volumes (nz, ny, nx) float32.

    Holds the dual p (warm-started between calls, as FISTA's outer loop and the BPM inversion
    use it), its momentum copy r and the next r (double-buffered: neighbouring threads still
    read the old r). ``variant`` picks the step's kernel (:data:`FGP_VARIANTS`); ``scratch``
    is a volume the "separate" variant may use for the primal point (allocated if not given).
    """

    def __init__(self, shape, lam: float, variant: str = "fused", *, scratch=None, nonnegative: bool = True,
                 bounds=None) -> None:
        cp = cupy()
        if variant not in FGP_VARIANTS:
            raise ValueError(f"fgp must be one of {FGP_VARIANTS}, got {variant!r}")
        if not lam >= 0:
            raise ValueError(f"the TV weight must be non-negative, got {lam}")
        self.shape = tuple(int(v) for v in shape)
        self.lam, self.variant, self.nonnegative = float(lam), variant, nonnegative
        # the box of the primal point: (0, inf) is non-negativity, (-inf, inf) none
        self.bounds = tuple(bounds) if bounds is not None else ((0.0 if nonnegative else -np.inf), np.inf)
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

    def set_weight(self, lam: float) -> None:
        """A new TV weight (the discrepancy search tries several); 0 makes the prox the projection alone."""
        if not lam >= 0:
            raise ValueError(f"the TV weight must be non-negative, got {lam}")
        self.lam = float(lam)

    def _dims(self) -> dict:
        nz, ny, nx = self.shape
        return dict(nz=nz, ny=ny, nx=nx)

    def steps(self, v, count: int) -> None:
        """``count`` FGP iterations for the data v (r restarted from p, t = 1)."""
        cp = cupy()
        if count == 0 or self.lam == 0:  # no TV: the dual stays zero, the primal is the projection
            return
        cp.cuda.runtime.memcpyAsync(self.r.data.ptr, self.p.data.ptr, self.p.nbytes, MEMCPY_DEFAULT,
                                    cp.cuda.get_current_stream().ptr)
        dims = self._dims()
        lam = np.float32(self.lam)
        step = np.float32(1.0 / (12.0 * self.lam))
        bounds = self.bounds
        r, r_next = self.r, self.r_next
        launch = _FGP_STEPS.get(self.variant)
        weights = momenta()
        for _ in range(count):
            m = np.float32(next(weights))
            if launch is not None:
                launch(v=v, r=r, p=self.p, r_next=r_next, **dims, lam=lam, bounds=bounds, step=step, momentum=m)
            else:  # "separate": the primal point into z, then the dual step
                K.fgp_primal(v=v, r=r, **dims, lam=lam, bounds=bounds, out=self.z)
                K.fgp_dual(z=self.z, r=r, p=self.p, r_next=r_next, **dims, step=step, momentum=m)
            r, r_next = r_next, r
        self.r, self.r_next = r, r_next

    def primal(self, v, out) -> None:
        """out = max(v - lam D^T p, 0): the prox's result for the current dual."""
        K.fgp_primal(v=v, r=self.p, **self._dims(), lam=np.float32(self.lam), bounds=self.bounds,
                     out=out)

    def __call__(self, v, steps: int, out) -> None:
        """The prox of v into ``out`` after ``steps`` FGP iterations from the current (warm) dual."""
        self.steps(v, steps)
        self.primal(v, out)

    @property
    def nbytes(self) -> int:
        return int(self.p.nbytes * 3 + (self.z.nbytes if self.z is not None else 0))
