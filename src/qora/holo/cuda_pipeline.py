"""qora.holo on CUDA: the device Pipeline and the per-call CUDA functions.

:class:`CudaPipeline` holds the stages of :mod:`qora.holo.cuda_stages` and the
:class:`~qora.holo.cuda_solver.SpectrumSolver`, its plans, buffers and backgrounds made once, and
runs one stream per stack. The per-call functions (:func:`extract_fields`, :func:`first_order`,
:func:`reconstruct`) take and return host arrays and build their stages each call; they are the
CUDA twins of the CPU functions in :mod:`qora.holo.fields` and :mod:`qora.holo.odt`, reached
through :mod:`qora.holo.api`. A leaf: it imports the CPU and plans modules, never the reverse.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np

from qora.backend.fft import C2C, FORWARD
from qora.backend.host import copy_parts, num_threads, touched_empty
from qora.backend.streaming import copy_streaming
from qora.holo import kernels as K
from qora.holo.cuda_solver import SpectrumSolver
from qora.holo.cuda_stages import (MEMCPY_DEFAULT, FieldStage, FirstOrder, Mapper, WorkArea, check_even, cupy,
                                   ptr)
from qora.holo.geometry import Geometry
from qora.holo.odt import OdtResult, check_ratio, pad_fields
from qora.holo.options import ReconstructionOptions
from qora.holo.gridding_cuda import ExactMapper
from qora.holo.plans import CropPlan, MappingPlan, mapping_plan, solver_grid, stack_holograms
from qora.holo.steps import stack_units
from qora.io.errors import InputError
from qora.progress import report

__all__ = ["CudaPipeline", "Reconstruction", "extract_fields", "first_order", "reconstruct"]


def pad_into(phi, padded) -> None:
    """Centre-origin fields (A, n, n) into the middle of a zeroed (A, N, N) stack (phi = 0 outside)."""
    n, big = phi.shape[-1], padded.shape[-1]
    lo = big // 2 - n // 2
    padded[:, lo:lo + n, lo:lo + n] = phi


def mapper_for(plan: MappingPlan, mapping: str = "gather"):
    """The device mapper of a mapping plan: its exact gridding (:class:`ExactMapper`), or the nearest-bin
    :class:`~qora.holo.cuda_stages.Mapper` by ``mapping`` ("gather" or "scatter")."""
    return ExactMapper(plan) if plan.gridding == "exact" else Mapper(plan, mapping)


class Reconstruction:
    """Mapping FFT, mapper and solver for first-order fields (A, n, n) of one geometry.

    ``plan`` is the geometry's mapping table on the solver's grid (:func:`~qora.holo.plans.mapping_plan`), made by
    the caller: once per Pipeline; a plan with exact gridding is spread on the device (:class:`ExactMapper`).
    """

    def __init__(self, geometry: Geometry, work: WorkArea, plan: MappingPlan, options: ReconstructionOptions) -> None:
        cp = cupy()
        grid = plan.geometry
        if grid.n != solver_grid(geometry, options.oversample).n or grid.count != geometry.count:
            raise ValueError(f"the mapping plan is for a {grid.n}^3 grid and {grid.count} illuminations, not the "
                             f"solver grid of this geometry and oversample {options.oversample}")
        self.geometry, self.big = geometry, grid.n
        self.plan = plan
        self.mapper = mapper_for(plan, options.mapping)
        self.solver = SpectrumSolver(grid, geometry.n, work, options)
        self.padded = cp.zeros((geometry.count, grid.n, grid.n), cp.complex64) if grid.n != geometry.n else None
        self.fft = work.plan(C2C, (grid.n, grid.n), batch=geometry.count)
        self.measured_fraction = float(self.plan.measured.mean())  # once: a host pass over N^3 (60 ms at 512^3)

    def __call__(self, phi, dst_ptr: int, absorption_ptr: int | None = None) -> None:
        """Solve for the first-order fields ``phi`` (A, n, n) on the device (spent: transformed in place); the index
        box to ``dst_ptr``, with a complex index the absorption to ``absorption_ptr``."""
        if self.solver.auto:
            # the noise of the data, measured on the host by the CPU's own estimate (MappingPlan.noise_energy)
            self.solver.noise_energy = self.plan.noise_energy(pad_fields(phi.get(), self.big))
        spectra = phi
        if self.padded is not None:
            self.padded.fill(0)  # the previous call's in-place FFT left its spectrum there
            pad_into(phi, self.padded)
            spectra = self.padded
        self.fft.execute(spectra.data.ptr, spectra.data.ptr, FORWARD)  # phi is spent
        self.solver(spectra, self.mapper, dst_ptr, absorption_ptr)


# ---------------------------------------------------------------------------------------------
# per-call functions: host arrays in and out, stages built for the call


def extract_fields(holograms, sideband, *, hologram_pixel: float, n: int, pupil_frequency: float,
                   filter: str = "disk") -> np.ndarray:
    """The CUDA twin of :func:`qora.holo.fields.extract_fields` (complex64 out; the filter's weights are the
    crop's table, uploaded once)."""
    cp = cupy()
    holos, single = stack_holograms(holograms)
    crop = CropPlan(holos.shape[-1], sideband, hologram_pixel=hologram_pixel, n=n, pupil_frequency=pupil_frequency,
                    filter=filter)
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
    cp = cupy()
    r = np.asarray(ratio)
    single = r.ndim == 2
    r = r[None] if single else r
    check_even("field size", r.shape[-1])
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


def reconstruct(ratio, geometry: Geometry, options: ReconstructionOptions | None = None, *,
                on_device: bool = False) -> OdtResult:
    """The CUDA twin of :func:`qora.holo.odt.reconstruct`: the same options, and ``mapping`` and ``fgp`` read.
    With ``on_device`` the result's index (and absorption) stay CuPy arrays: the CUDA BPM's start."""
    cp = cupy()
    o = options if options is not None else ReconstructionOptions()
    ratio = check_ratio("ratio", ratio, geometry)
    work = WorkArea()
    order = FirstOrder(geometry.count, geometry.n, work)
    recon = Reconstruction(geometry, work, mapping_plan(geometry, o), o)
    work.allocate()
    num = cp.asarray(ratio, cp.complex64)
    phi = cp.empty_like(num)
    order(num, None, phi, o.approximation)
    out = cp.empty((geometry.n,) * 3, cp.float32)
    kappa = cp.empty((geometry.n,) * 3, cp.float32) if o.complex_index else None
    recon(phi, out.data.ptr, None if kappa is None else kappa.data.ptr)
    info = {"measured_fraction": recon.measured_fraction, "r2c": bool(recon.solver.real),
            "oversample": o.oversample, "grid": recon.big, "gridding": recon.plan.gridding, "backend": "cuda",
            "mapping": o.mapping,
            "fgp": o.fgp if o.method == "tv" else None, "tv_weight": o.tv_weight if o.method == "tv" else None}
    info.update(recon.solver.info)  # "auto": the weight chosen and the search
    if not on_device:
        out, kappa = out.get(), None if kappa is None else kappa.get()
    return OdtResult(out, geometry, o.method, o.approximation, 0 if o.method == "plain" else o.iterations,
                     info=info, absorption=kappa)


# ---------------------------------------------------------------------------------------------


class CudaPipeline:
    """The device-resident Pipeline: plans, buffers and backgrounds made once; one stream per stack.

    Made by :class:`qora.holo.Pipeline` (:mod:`qora.holo.api`) from the geometry's host tables, built
    once there: ``crop`` (the sideband window of N x N holograms) and ``mapping`` (the Ewald mapping
    on the solver's grid). ``options`` as everywhere; the CUDA ones are ``upload_parts`` (the hologram
    upload split into parts on a copy stream, each part's R2C ordered after its copy by an event),
    ``mapping`` ("gather" or "scatter") and ``fgp`` (the TV step's kernel).

    :meth:`input` is the page-locked host buffer of the holograms: fill it in place to save
    a host copy, then call :meth:`process` without arguments.
    """

    def __init__(self, geometry: Geometry, crop: CropPlan, mapping: MappingPlan, options: ReconstructionOptions) -> None:
        cp = cupy()
        a, n = geometry.count, geometry.n
        hologram_n = crop.big
        self.geometry, self.approximation, self.options = geometry, options.approximation, options
        self.work = WorkArea()
        self.fields = FieldStage(crop, a, self.work, parts=options.upload_parts)
        self.order = FirstOrder(a, n, self.work)
        self.recon = Reconstruction(geometry, self.work, mapping, options)
        self.sample = cp.empty((a, n, n), cp.complex64)
        self.background = cp.empty((a, n, n), cp.complex64)
        self.phi = cp.empty((a, n, n), cp.complex64)
        self.work.allocate()
        self._in_mem = cp.cuda.alloc_pinned_memory(4 * a * hologram_n**2)
        self._out_mem = cp.cuda.alloc_pinned_memory(4 * n**3)
        self._abs_mem = cp.cuda.alloc_pinned_memory(4 * n**3) if options.complex_index else None
        self.host_absorption = (None if self._abs_mem is None else
                                np.frombuffer(self._abs_mem, np.float32, n**3).reshape(n, n, n))
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
        self.streaming_copies = True  # False: the buffers' copies by ordinary stores (a benchmark's comparison)
        self.plans_made = self.work.plan_count
        # host threads for the copies into the input buffer and out of the output's (a single core's copy of a
        # pageable stack and of the volume doubled the 256^3 stack's time: docs/holo-performance.md)
        self._pool = ThreadPoolExecutor(num_threads(), thread_name_prefix="qora-holo-copy")

    def input(self) -> np.ndarray:
        """The page-locked host buffer (A, N, N) float32 that :meth:`process` uploads."""
        return self.host_in

    def _upload(self, holograms) -> None:
        cp = cupy()
        if holograms is not None and holograms is not self.host_in:
            holos = np.asarray(holograms)
            if holos.shape != self.host_in.shape:
                raise InputError(f"expected holograms of shape {self.host_in.shape}, got {holos.shape}")
            self._copy(self.host_in, holos)
        self.free.record(self.stream)  # the previous stack's R2C has read the device buffer
        self.copy_stream.wait_event(self.free)
        per = self.host_in[0].size
        for event, (first, size) in zip(self.uploaded, self.fields.parts):
            cp.cuda.runtime.memcpyAsync(ptr(self.fields.holograms, first * per), self.host_in[first:].ctypes.data,
                                        4 * size * per, 1, self.copy_stream.ptr)
            event.record(self.copy_stream)

    def _copy(self, dst, src) -> None:
        """``dst[...] = src`` (one of them a page-locked buffer): by streaming stores where they apply, so that the
        upload reads no line the host's caches hold dirty and the result's lines are not read before written
        (docs/holo-performance.md), else over the pool's threads (a cast, say)."""
        if not (self.streaming_copies and copy_streaming(dst, src)):
            copy_parts(dst, src, pool=self._pool)

    def _check_finite(self) -> None:
        """Queue the device-side check of the uploaded holograms (read by :meth:`_raise_if_nonfinite`)."""
        cp = cupy()
        quads = self.fields.holograms.size // 4  # N even: N^2 is a multiple of 4
        self.flag.fill(0)
        K.flag_nonfinite(x=self.fields.holograms, quads=quads, flag=self.flag)
        cp.cuda.runtime.memcpyAsync(self.host_flag.ctypes.data, self.flag.data.ptr, 4, MEMCPY_DEFAULT,
                                    self.stream.ptr)

    def _raise_if_nonfinite(self, name: str = "holograms") -> None:
        if self.host_flag[0]:  # counted only here, on the error path
            x = self.fields.holograms
            bad = int(x.size - int(cupy().count_nonzero(cupy().isfinite(x))))
            raise InputError(f"{name}: {bad} non-finite (NaN or Inf) values of {x.size}; correct or replace them "
                             "(e.g. by the neighbours' mean) before reconstructing")

    def set_background(self, holograms) -> None:
        """Extract and keep the background fields on the device (one hologram per illumination)."""
        cp = cupy()
        self._upload(holograms)
        with self.stream:
            self.fields.extract(self.background, ready=self.uploaded)
            self._check_finite()
            mag = cp.abs(self.background)
            low = bool((mag.min() <= 0) | (mag.min() < 1e-6 * cp.median(mag)))
        self.stream.synchronize()
        self._raise_if_nonfinite("backgrounds")
        if low:
            raise InputError("a background field is (nearly) zero somewhere: cannot form the ratio")
        self.has_background = True

    def process(self, holograms=None, *, progress=None, copy: bool = True) -> OdtResult:
        """One stack (A, N, N) (or the contents of :meth:`input`) -> :class:`OdtResult` (host volume).

        ``copy=False`` returns the page-locked output buffer itself (no host copy): valid until
        the next call, for a consumer that writes it out at once (a time series to disk).
        """
        cp = cupy()
        if not self.has_background:
            raise RuntimeError("call set_background(...) before process(...)")
        marks = []
        self._upload(holograms)
        units = stack_units(self.options)  # the CPU Pipeline's units; the device stack is one step here
        report(progress, "fields", 0, units)
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
            self.recon(self.phi, self.host_out.ctypes.data,
                       None if self.host_absorption is None else self.host_absorption.ctypes.data)
            mark("solve")
        # the host's arrays for the result made while the device computes (their pages mapped then, not by the copy)
        kappa = self.host_absorption
        out = touched_empty(self.host_out.shape, np.float32, pool=self._pool) if copy else self.host_out
        out_kappa = (touched_empty(kappa.shape, np.float32, pool=self._pool) if copy and kappa is not None
                     else kappa)
        self.stream.synchronize()
        self._raise_if_nonfinite()
        if copy:
            self._copy(out, self.host_out)
            if kappa is not None:
                self._copy(out_kappa, kappa)
        report(progress, "done", units, units)
        if self.profile:
            self.stage_ms = {name: cp.cuda.get_elapsed_time(marks[i - 1][1], e)
                             for i, (name, e) in enumerate(marks) if i > 0}
        o = self.options
        info = {"measured_fraction": self.recon.measured_fraction, "r2c": self.recon.solver.real,
                "grid": self.recon.big, "gridding": self.recon.plan.gridding, "backend": "cuda", "mapping": o.mapping,
                "upload_parts": len(self.fields.parts)}
        info.update(self.recon.solver.info)
        return OdtResult(out, self.geometry, o.method, self.approximation, 0 if o.method == "plain" else o.iterations,
                         info=info, absorption=out_kappa)
