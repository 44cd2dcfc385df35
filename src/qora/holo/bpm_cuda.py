"""The beam propagation model on CUDA: forward, reverse-mode gradient and inversion.

The same slices as :mod:`qora.holo.bpm` (and the same float64 host tables, cast once to
complex64): illuminations in chunks of B with batched 2D cuFFT plans (one per chunk size,
one shared work area). Per slice forward: the inverse FFT of S into w (out of place: S is still
needed), a screen kernel that also stores w_k, the forward FFT, the propagation kernel.
Backward: a split kernel, the inverse FFT, a gradient kernel with one thread per pixel looping
over the chunk's illuminations (no atomics), the forward FFT. The stored envelopes take
8 n_z n^2 B bytes; B is chosen so that they fit in half the free device memory (or given), and
chunking does not change the result beyond the order of float sums.

``variant="fused_fft"`` (:mod:`qora.holo.bpm_fused`) runs each slice step as two cuFFTDx line
passes carrying the element-wise work instead (docs/holo-performance.md, "The fused slice step");
``variant="fused_resident"`` (:mod:`qora.holo.bpm_resident`) runs the whole slice loop of an
illumination in one thread-block cluster that keeps the field on chip ("The field on chip").
"""

from __future__ import annotations

import time
from functools import partial

import numpy as np

from qora.backend.fft import C2C, FORWARD, INVERSE
from qora.holo import kernels as K
from qora.holo.bpm import bpm_lipschitz, inversion_inputs
from qora.holo.cuda_pipeline import reconstruct as cuda_reconstruct
from qora.holo.cuda_stages import FgpProx, WorkArea, cupy
from qora.holo.fista import proximal_gradient
from qora.holo.geometry import Geometry
from qora.holo.odt import OdtResult
from qora.holo.plans import BpmTables, bpm_tables, check_scan, lab_geometry
from qora.io.errors import InputError
from qora.io.validate import positive
from qora.progress import report

__all__ = ["BpmDevice", "VARIANTS", "pick_variant", "bpm_forward", "bpm_vjp", "bpm_gradient", "bpm_reconstruct"]


#: the slice step's implementations: cuFFT transforms with element-wise kernels between them, fused
#: cuFFTDx line passes (lateral sizes 128 to 512, compute capability 9.x), or the whole slice loop in one
#: thread-block cluster per illumination with the field on chip (128 and 256); "auto" picks between them
VARIANTS = ("auto", "cufft", "fused_fft", "fused_resident")


def check_variant(variant: str) -> str:
    if variant not in VARIANTS:
        raise InputError(f"BPM variant must be one of {VARIANTS}, got {variant!r}")
    return variant


def pick_variant(variant: str, n: int, *, rotation: bool, capability: str | None = None) -> str:
    """The slice step that ``variant`` names for lateral size ``n``: "auto" is ``fused_fft`` where it was
    measured faster (the scan geometry at the sizes it is built for, :data:`qora.holo.bpm_fused.SIZES`,
    on compute capability 9.x: 1.99x forward and 1.97x gradient at 256^3 on the H200, its slice loops
    replayed as CUDA graphs in concurrent lanes), else ``cufft``. ``fused_resident`` was measured slower than ``fused_fft``
    everywhere and is never picked. The rotation geometry runs one angle at a time, where the fused step was not
    measured against cuFFT, so "auto" keeps cuFFT there. ``capability``: the device's ("90"), default
    the current device's."""
    check_variant(variant)
    if variant != "auto":
        return variant
    from qora.holo.bpm_fused import SIZES

    if rotation or n not in SIZES:
        return "cufft"
    if capability is None:
        capability = str(cupy().cuda.Device().compute_capability)
    return "fused_fft" if capability.startswith("9") else "cufft"


class BpmDevice:
    """Tables, plans and buffers of the BPM for one geometry and slice count on the device.

    ``chunk``: illuminations per chunk (default: as many as fit, with their stored envelopes,
    in half the free device memory). ``variant``: the slice step (:data:`VARIANTS`); with "fused_fft"
    forward and reverse run :class:`qora.holo.bpm_fused.FusedSteps` on these buffers, with
    "fused_resident" :class:`qora.holo.bpm_resident.ResidentSteps`, and the tables are kept in their
    register order.
    """

    def __init__(self, geometry: Geometry, tables: BpmTables, *, chunk: int | None = None,
                 variant: str = "cufft") -> None:
        cp = cupy()
        self.variant = variant = pick_variant(variant, tables.n, rotation=False)
        check_scan(geometry)
        a, n, nz = tables.count, tables.n, tables.n_z
        self.geometry, self.tables, self.n, self.nz, self.count = geometry, tables, n, nz, a
        self.cq, self.cr, self.lq, self.lr = (cp.asarray(t) for t in tables.products(np.complex64))
        if chunk is None:
            free = cp.cuda.Device().mem_info[0]
            chunk = int(0.5 * free // (8 * (nz + 4) * n * n))
        self.chunk = max(1, min(a, int(chunk)))
        self.chunks = [slice(s, min(s + self.chunk, a)) for s in range(0, a, self.chunk)]
        self.work = WorkArea()
        self.plans = {sl.stop - sl.start: self.work.plan(C2C, (n, n), batch=sl.stop - sl.start)
                      for sl in self.chunks} if variant == "cufft" else {}
        b = self.chunk
        self.s = cp.empty((b, n, n), cp.complex64)
        self.w = cp.empty((b, n, n), cp.complex64)
        self.stored = None
        self.screens = cp.empty((nz, n, n), cp.complex64)
        self.grad = cp.empty((nz, n, n), cp.float32)
        self.loss = cp.zeros(1, cp.float64)
        self.kd = np.float32(tables.k0 * tables.step)
        self.work.allocate()
        self.fused = None
        if variant == "fused_fft":
            from qora.holo.bpm_fused import FusedSteps

            self.fused = FusedSteps(self)
        elif variant == "fused_resident":
            from qora.holo.bpm_resident import ResidentSteps

            self.fused = ResidentSteps(self)

    def set_contrast(self, x) -> None:
        """The thin screens exp(i k0 d x_k) of the contrast x (nz, n, n) float32, centre-origin."""
        nz, n = self.nz, self.n
        if tuple(x.shape) != (nz, n, n):
            raise ValueError(f"contrast must be ({nz}, {n}, {n}), got {tuple(x.shape)}")
        K.bpm_screens(x=x, nz=nz, n=n, kd=self.kd, screens=self.screens)

    def _tables(self, sl, k: int):
        last = k == self.nz - 1
        return (self.lq if last else self.cq)[sl], (self.lr if last else self.cr)[sl]

    def _forward(self, sl, keep: bool) -> None:
        """S of the chunk after all slices; with ``keep`` the envelopes w_k into ``self.stored``."""
        cp = cupy()
        n, b = self.n, sl.stop - sl.start
        plan = self.plans[b]
        s, w = self.s[:b], self.w[:b]
        total = b * n * n
        if keep and (self.stored is None or self.stored.shape[1] < b):
            self.stored = cp.empty((self.nz, self.chunk, n, n), cp.complex64)
        s.fill(0)
        s[:, 0, 0] = n * n
        scale = np.float32(1.0 / (n * n))
        for k in range(self.nz):
            cp.cuda.runtime.memcpyAsync(w.data.ptr, s.data.ptr, s.nbytes, 3, cp.cuda.get_current_stream().ptr)
            plan.execute(w.data.ptr, w.data.ptr, INVERSE)
            stored = self.stored[k, :b] if keep else None
            K.bpm_screen(w=w, screen=self.screens[k], total=total, n2=n * n, scale=scale, stored=stored)
            plan.execute(w.data.ptr, w.data.ptr, FORWARD)
            tq, tr = self._tables(sl, k)
            K.bpm_propagate(a=w, tq=tq, tr=tr, total=total, s=s)

    def forward(self, out) -> None:
        """Field ratios (A, n, n) complex64, centre-origin, into the device array ``out``."""
        if self.fused is not None:
            return self.fused.forward(out)
        n = self.n
        for sl in self.chunks:
            b = sl.stop - sl.start
            self._forward(sl, False)
            w = self.w[:b]
            w[...] = self.s[:b]
            self.plans[b].execute(w.data.ptr, w.data.ptr, INVERSE)
            K.bpm_output(w=w, total=b * n * n, n=n, scale=np.float32(1.0 / (n * n)), out=out[sl])

    def reverse_chunks(self, index) -> list:
        """The chunks (slices) of the illuminations ``index`` a reverse pass runs over, the sums it adds into
        (``grad``, ``loss``) zeroed first (this model's and the fused step's passes)."""
        start, stop, _ = index.indices(self.count)
        self.grad.fill(0)
        self.loss.fill(0)
        return [slice(first, min(first + self.chunk, stop)) for first in range(start, stop, self.chunk)]

    def reverse(self, data, index=slice(None), *, residual: bool = False):
        """Re(J^H r) summed over the illuminations ``index`` (nz, n, n) float32 centre-origin, and sum |r|^2.

        r = y - data (data: field ratios, centre-origin, all illuminations), or with ``residual``
        ``data`` is r itself.
        """
        if self.fused is not None:
            return self.fused.reverse(data, index, residual=residual)
        cp = cupy()
        n, nz = self.n, self.nz
        scale = np.float32(1.0 / (n * n))
        for sl in self.reverse_chunks(index):
            b = sl.stop - sl.start
            if b not in self.plans:  # a batch's last chunk: a plan made once for its size
                self.plans[b] = self.work.plan(C2C, (n, n), batch=b)
                self.work.allocate()
            plan, total = self.plans[b], b * n * n
            self._forward(sl, True)
            g, h = self.s[:b], self.w[:b]
            if residual:
                K.bpm_residual(w=g, data=data[sl], total=total, n=n, scale=np.float32(0), loss=self.loss)
            else:
                h[...] = g
                plan.execute(h.data.ptr, h.data.ptr, INVERSE)
                K.bpm_residual(w=h, data=data[sl], total=total, n=n, scale=scale, loss=self.loss)
                g[...] = h
            plan.execute(g.data.ptr, g.data.ptr, FORWARD)  # n^2 times the adjoint of S_K
            for k in range(nz - 1, -1, -1):
                tq, tr = self._tables(sl, k)
                carry = h if k < nz - 1 else None
                K.bpm_split(g=g, carry=carry, tq=tq, tr=tr, total=total, scale=scale, h=h)
                plan.execute(h.data.ptr, h.data.ptr, INVERSE)
                K.bpm_gradient(screen=self.screens[k], stored=self.stored[k, :b], b=h, count=b, n2=n * n, kd=self.kd,
                               grad=self.grad[k])
                plan.execute(h.data.ptr, h.data.ptr, FORWARD)
        grad = cp.fft.fftshift(self.grad, axes=(-2, -1))
        return grad, float(self.loss.get()[0])


def _model(geometry, tables, chunk, variant="auto"):
    """BpmDevice, or in the rotation geometry the per-angle wrapper (:mod:`qora.holo.bpm_rotation_cuda`) of
    the BpmDevice of its one normal incidence (``chunk`` does not apply: one angle at a time)."""
    variant = pick_variant(variant, tables.n, rotation=geometry.angles is not None)
    if geometry.angles is None:
        return BpmDevice(geometry, tables, chunk=chunk, variant=variant)
    from qora.holo.bpm_rotation_cuda import RotatedBpmDevice

    return RotatedBpmDevice(geometry, BpmDevice(lab_geometry(geometry), tables, chunk=1, variant=variant))


def _device(contrast, geometry, tables, chunk, variant="auto"):
    cp = cupy()
    x = np.asarray(contrast, np.float32)
    if x.ndim != 3 or x.shape[1:] != (geometry.n, geometry.n):
        raise ValueError(f"contrast must be (n_z, {geometry.n}, {geometry.n}), got {x.shape}")
    tables = tables if tables is not None else bpm_tables(geometry, x.shape[0])
    dev = _model(geometry, tables, chunk, variant)
    xd = cp.asarray(x)
    dev.set_contrast(xd)
    return dev


def bpm_forward(contrast, geometry: Geometry, tables: BpmTables | None = None, *, chunk: int | None = None,
                variant: str = "auto"):
    """The CUDA twin of :func:`qora.holo.bpm.bpm_forward` (complex64 field ratios, host); ``variant``: one of
    :data:`VARIANTS` (:func:`pick_variant`)."""
    cp = cupy()
    dev = _device(contrast, geometry, tables, chunk, variant)
    out = cp.empty((geometry.count, geometry.n, geometry.n), cp.complex64)
    dev.forward(out)
    return out.get()


def bpm_vjp(contrast, r, geometry: Geometry, tables: BpmTables | None = None, *, chunk: int | None = None,
            variant: str = "auto"):
    """The CUDA twin of :func:`qora.holo.bpm.bpm_vjp`: J^T r (float32, host)."""
    cp = cupy()
    dev = _device(contrast, geometry, tables, chunk, variant)
    grad, _ = dev.reverse(cp.asarray(np.asarray(r), cp.complex64), residual=True)
    return grad.get()


def bpm_gradient(contrast, data, geometry: Geometry, tables: BpmTables | None = None, *, index=slice(None),
                 return_loss: bool = False, chunk: int | None = None, variant: str = "auto"):
    """The CUDA twin of :func:`qora.holo.bpm.bpm_gradient` (float32, host)."""
    cp = cupy()
    dev = _device(contrast, geometry, tables, chunk, variant)
    count = len(range(*index.indices(geometry.count)))
    grad, loss = dev.reverse(cp.asarray(np.asarray(data), cp.complex64), index)
    grad = (grad / count).get()
    return (grad, loss / (2 * count)) if return_loss else grad


def bpm_reconstruct(data, geometry: Geometry, start=None, iterations: int = 20, tv_weight: float | None = None,
                    tv_inner: int = 20, batch: int | None = None, step: float = 1.0, progress=None, *,
                    n_z: int | None = None, obliquity: bool = True, chunk: int | None = None, fgp: str = "fused",
                    variant: str = "auto"):
    """The CUDA twin of :func:`qora.holo.bpm.bpm_reconstruct` (same options, plus ``chunk``, ``fgp`` and the
    slice step's ``variant``, one of :data:`VARIANTS`).

    The iterates stay on the device (float32); the start, by default Rytov with 20 GP
    iterations, is computed by the CUDA ODT solver.
    """
    cp = cupy()
    t0 = time.perf_counter()
    step = positive("step", step)
    check_variant(variant)  # before the start is computed
    data, x0, batches = inversion_inputs(data, geometry, start, iterations, tv_weight, tv_inner, batch, n_z,
                                         reconstruct=partial(cuda_reconstruct, on_device=True))
    tables = bpm_tables(geometry, x0.shape[0], obliquity)
    dev = _model(geometry, tables, chunk, variant)
    d = cp.asarray(data, cp.complex64)
    lam = 0.0 if not tv_weight else step * tv_weight / (2 * geometry.medium_index)
    prox_tv = FgpProx(x0.shape, lam, fgp) if lam > 0 else None
    lips = [bpm_lipschitz(tables, b) for b in batches]
    losses = []

    def gradient_step(y, k):
        j = k % len(batches)
        count = len(range(*batches[j].indices(geometry.count)))
        dev.set_contrast(y)
        grad, loss = dev.reverse(d, batches[j])
        losses.append(loss / (2 * count))
        return y - cp.float32(step / lips[j] / count) * grad

    def prox(v):
        x = cp.empty_like(v)  # a new iterate each step (the pool's): x_prev and y stay as they are
        if prox_tv is not None:
            prox_tv(v, tv_inner, x)
        else:
            cp.maximum(v, 0, out=x)
        return x

    # FISTA's momentum with every illumination per step; cycling batches go without it
    x_prev, _ = proximal_gradient(cp.asarray(x0, cp.float32), gradient_step, prox, iterations,
                                  momentum=len(batches) == 1, extrapolate=lambda x, xp, w: x + cp.float32(w) * (x - xp),
                                  after_step=lambda k, _x: report(progress, "bpm", k, iterations, {"loss": losses[-1]}))
    index = (x_prev.get() + np.float32(geometry.medium_index)).astype(np.float32)
    return OdtResult(index, geometry, "bpm", "bpm", len(losses),
                     info={"loss": losses, "n_z": x0.shape[0], "batch": batch, "tv_weight": tv_weight, "step": step,
                           "obliquity": obliquity, "seconds": time.perf_counter() - t0, "backend": "cuda",
                           "chunk": dev.chunk, "variant": dev.variant})
