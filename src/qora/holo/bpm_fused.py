"""The BPM's ``fused_fft`` variant on CUDA: each slice step as two passes of cuFFTDx line transforms
that carry the element-wise work (``kernels/bpm_fused.cu``; docs/holo-performance.md, "The fused
slice step").

:class:`qora.holo.bpm_cuda.BpmDevice` with ``variant="fused_fft"`` runs its forward and reverse
passes through :class:`FusedSteps`, on the same buffers, screens and (reordered) tables. Per slice,
forward: a row pass (the inverse x transform of the previous step, the screen, the forward x
transform) and a column pass (the forward y transform, S = tq A + tr S, the inverse y transform);
the reverse pass has the same two with the adjoint steps and the gradient's sum over the chunk's
illuminations. Lateral sizes 128, 256 and
512 (:data:`SIZES`), on compute capability 9.x (the prebuilt ``bpm_fused.sm_90.cubin``; rebuild with
``python -m qora.holo.build_fused``).
"""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np

from qora.backend.kernels import load_cubin, multiprocessors, resident_blocks
from qora.holo.cuda_stages import cupy
from qora.io.errors import InputError

__all__ = ["FusedSteps", "SIZES", "SLICE_BYTES", "PASS_BYTES", "COLUMN", "ROW", "REVERSE_ROW", "COLUMN_LOADS", "ROW_LOADS",
           "REVERSE_LOADS",
           "LANES", "spectral_order", "natural_order", "check_capability", "use_register_order", "start_spectra",
           "gradient_and_loss"]

SIZES = (128, 256, 512)
CUBIN = "bpm_fused.sm_90.cubin"
#: (elements per thread, lines per block) of the column passes by lateral size: 16 elements per thread
#: at 256 and 512, where qora.phase measured its two-transform strided passes faster so
COLUMN = {128: (8, 16), 256: (16, 16), 512: (16, 8)}
#: the column passes' elements per thread that are built (``column_ept``)
COLUMN_BUILT = {128: (8,), 256: (8, 16), 512: (8, 16)}
#: the forward, output and residual row passes; 16 elements per thread at 256 (measured on the H200 with
#: every candidate side by side: forward 17.4 against 18.9 ms, gradient 38.6 against 39.9 ms at 256^3)
ROW = {128: (8, 16), 256: (16, 16), 512: (8, 8)}
#: the reverse row pass: 4 illuminations of one row per block, so that the gradient's sum over the
#: illuminations costs one float atomic per pixel and 4 illuminations
REVERSE_ROW = {128: (8, 4), 256: (16, 4), 512: (8, 4)}
#: the reverse row pass's load where the "early" one measured faster (128^3: gradient 5.49 against 6.17 ms)
REVERSE_LOAD = {128: "early"}

#: the byte model: DRAM bytes per element (one complex64 value of one illumination) and slice, by variant
#: and direction (the gradient: the forward pass storing w_k, then the reverse pass), with 32 B per cuFFT 2D
#: transform (two passes); the screen (8 n^2 bytes per slice, shared by the chunk's B illuminations)
#: adds 8 / B on top (docs/holo-performance.md, "The fused slice step")
SLICE_BYTES = {("cufft", "forward"): 136, ("cufft", "gradient"): 280,
               ("fused_fft", "forward"): 64, ("fused_fft", "gradient"): 144}
#: the fused passes' bytes per element: row_forward reads and writes W (and writes w_k when stored);
#: column passes read W, S (G), tq, tr and write S (G), W; row_reverse reads W, w_k and writes W;
#: once per chunk, row_output reads W and writes the fields, row_residual reads W and the data, writes W
PASS_BYTES = {"row_forward": 16, "row_forward_keep": 24, "column_forward": 48, "column_reverse": 48,
              "row_reverse": 24, "row_output": 16, "row_residual": 24}

#: candidates (docs/holo-performance.md, "Fused BPM candidates"; kernels/bpm_fused.cu): the column passes'
#: tile through cp.async ("async"), and with S (G), tq, tr staged into shared memory in the same burst
#: ("stage"); the row passes as persistent grids with the next group's lines prefetched ("pipe").
#: "plain" is the measured default; FusedSteps raises where a candidate is not built at a layout.
COLUMN_LOADS = ("plain", "async", "stage")
ROW_LOADS = ("plain", "pipe")
#: the reverse row pass: as the row passes (None), or "early": the stored envelope w_k loaded before the
#: inverse transform (plain grid)
REVERSE_LOADS = ("plain", "pipe", "early")

#: the slice loops replayed as CUDA graphs after their first call (``FusedSteps(graphs=...)``): measured
#: on the H200 1.08x forward and 1.07x gradient at 256^3, 1.42x and 2.32x at 128^3 against host launches
GRAPHS = True
#: concurrent lanes by lateral size (1 where absent): each chunk's slice loops split by illumination into
#: this many groups, each on its own stream (branches of one graph), so that one group's passes run in the
#: gaps and beside the passes of another. Measured on the H200 (49 illuminations, graphs on): 256^3 forward
#: 14.50-14.57 against 16.31-16.37 ms, gradient 31.87-32.16 against 36.65-36.67 ms with 3 lanes; 512^3 131.7
#: against 139.2 ms and 284.3 against 301.8 ms with 2 (3 and 4 the same); no gain at 128^3 (2.03-2.11 ms with
#: 2-4 lanes, against 2.06)
LANES = {256: 3, 512: 2}

_NULL = np.uint64(0)


def spectral_order(table, ept: int, lines: int):
    """A spectral array (A, n, n) in the FFT layout [a, ky, kx], rearranged into the column pass's
    register order (A, n, n): the value of (ky = tx + e n / ept, kx = bx lines + f) at
    [a, bx, e, f, tx] (C order), where block bx of illumination a holds it in register e of thread (tx, f).
    Works on NumPy and CuPy arrays."""
    a, n, m = table.shape
    if n != m or n % ept or n % lines:
        raise ValueError(f"spectral_order needs (A, n, n) with n divisible by {ept} and {lines}, got {table.shape}")
    t = table.reshape(a, ept, n // ept, n // lines, lines)  # [a, e, tx, bx, f]
    return t.transpose(0, 3, 1, 4, 2).reshape(a, n, n)


def natural_order(ordered, ept: int, lines: int):
    """The inverse of :func:`spectral_order`."""
    a, n, _ = ordered.shape
    t = ordered.reshape(a, n // lines, ept, lines, n // ept)  # [a, bx, e, f, tx]
    return t.transpose(0, 2, 4, 1, 3).reshape(a, n, n)


def check_capability(variant: str) -> None:
    """Both fused variants' cubins are built for sm_90 (prebuilt: users need no cuFFTDx headers)."""
    if not str(cupy().cuda.Device().compute_capability).startswith("9"):
        raise InputError(f"BPM variant {variant!r} is built for compute capability 9.x (H100/H200); use "
                         "variant='cufft'")


def use_register_order(dev, ept: int, lines: int) -> None:
    """The device's tables (tq, tr and the last slice's) replaced by copies in the column transform's register
    order (:func:`spectral_order`), which the fused kernels read without a tile."""
    cp = cupy()
    dev.cq, dev.cr, dev.lq, dev.lr = (cp.asarray(np.ascontiguousarray(spectral_order(t, ept, lines)))
                                      for t in dev.tables.products(np.complex64))


def start_spectra(s, n: int) -> None:
    """S_0 = n^2 delta in each illumination's spectra ``s`` (the register order keeps bin (0, 0) first)."""
    s.fill(0)
    s[:, 0, 0] = n * n


def gradient_and_loss(dev):
    """A finished reverse pass's sums: the gradient (nz, n, n) centre-origin and the loss, read back."""
    return cupy().fft.fftshift(dev.grad, axes=(-2, -1)), float(dev.loss.get()[0])


class _Pass:
    """The kernels of one pass family at one (size, elements per thread, lines per block)."""

    def __init__(self, module, family: str, n: int, ept: int, lines: int, kinds, load: str = "plain") -> None:
        cp = cupy()
        suffix = f"{n}_{lines}_{ept}" + ("" if load == "plain" else f"_{load}")
        try:
            params = module.get_function(f"bpm_{family}_params_{suffix}")
        except Exception as exc:  # noqa: BLE001 - CuPy raises its driver error for a name not in the module
            raise InputError(f"the fused BPM has no {family} pass of {n} points with {ept} elements per thread "
                             f"and {lines} lines per block ({load} loads)") from exc
        out = cp.zeros(4, np.int32)
        params((1,), (1,), (out,))
        bx, by, smem, smem_reverse = (int(v) for v in out.get())
        self.block, self.lines, self.ept = (bx, by), lines, ept
        self.kernels, self.smem = {}, {}
        for kind in kinds:
            kernel = self.kernels[kind] = module.get_function(f"bpm_{family}_{kind}_{suffix}")
            self.smem[kind] = smem_reverse if (family, kind) == ("row", "reverse") else smem
            kernel.max_dynamic_shared_size_bytes = self.smem[kind]
        self.name = suffix
        # a persistent grid ("pipe"): as many blocks as fit on the GPU at once, each walking the tiles
        self.grid = None
        if load == "pipe":
            sms = multiprocessors()
            self.grid = {kind: sms * resident_blocks(k, bx * by, self.smem[kind]) for kind, k in self.kernels.items()}

    def __call__(self, kind: str, blocks: int, *args) -> None:
        if self.grid is None:
            self.kernels[kind]((int(blocks),), self.block, args, shared_mem=self.smem[kind])
        else:
            self.kernels[kind]((min(int(blocks), self.grid[kind]),), self.block, args + (np.int64(blocks),),
                               shared_mem=self.smem[kind])


class FusedSteps:
    """The slice steps of a :class:`~qora.holo.bpm_cuda.BpmDevice` (``variant="fused_fft"``) as fused line passes.

    Runs on the device's buffers: ``s`` holds the spectra S (forward) or the adjoint state G (reverse)
    in the column pass's register order (:func:`spectral_order`), ``w`` the slice between the passes
    (x spectral, y real); the device's tables are replaced by their register-order copies.
    ``column_ept``: the column passes' elements per thread (one of :data:`COLUMN_BUILT`; default
    :data:`COLUMN`). Candidates (built at some layouts only; :data:`COLUMN_LOADS`, :data:`ROW_LOADS`):
    ``column_load``, ``column_lines`` (lines per column block), ``row_load`` and ``row_ept`` (elements
    per thread of every row pass), ``reverse_load`` (:data:`REVERSE_LOADS`; None: ``row_load``, or
    :data:`REVERSE_LOAD`'s measured choice with plain row loads). ``graphs``: replay each chunk's slice
    loops as CUDA graphs after their first call (default :data:`GRAPHS`); the device's buffers, screens
    and tables keep their addresses, so a new contrast (``set_contrast``) needs no new capture.
    ``lanes``: the slice loops of a chunk as this many concurrent groups of illuminations, one stream
    each (default :data:`LANES` at the lateral size, else 1; the groups' edges fall on whole groups of
    the reverse row pass).
    """

    def __init__(self, dev, *, column_ept: int | None = None, column_load: str = "plain",
                 column_lines: int | None = None, row_load: str = "plain", row_ept: int | None = None,
                 reverse_load: str | None = None, graphs: bool | None = None, lanes: int | None = None) -> None:
        if column_load not in COLUMN_LOADS:
            raise InputError(f"column_load must be one of {COLUMN_LOADS}, got {column_load!r}")
        if row_load not in ROW_LOADS:
            raise InputError(f"row_load must be one of {ROW_LOADS}, got {row_load!r}")
        n = dev.n
        if reverse_load is None:
            reverse_load = REVERSE_LOAD.get(n, "plain") if row_load == "plain" else row_load
        if reverse_load not in REVERSE_LOADS:
            raise InputError(f"reverse_load must be one of {REVERSE_LOADS}, got {reverse_load!r}")
        if n not in SIZES:
            raise InputError(f"BPM variant 'fused_fft' needs a lateral size in {SIZES}, got {n}; use variant='cufft'")
        ept, lines = COLUMN[n]
        if column_ept is not None:
            if column_ept not in COLUMN_BUILT[n]:
                raise InputError(f"column_ept must be one of {COLUMN_BUILT[n]} at {n} points, got {column_ept}")
            ept = int(column_ept)
        if column_lines is not None:
            lines = int(column_lines)
        check_capability("fused_fft")
        cp = cupy()
        self.dev = dev
        self.lanes = LANES.get(n, 1) if lanes is None else int(lanes)
        if self.lanes < 1:
            raise InputError(f"lanes must be at least 1, got {self.lanes}")
        # made here, not in a capture: streams and events are the host's objects, the graph only records them
        self._streams = [cp.cuda.Stream(non_blocking=True) for _ in range(self.lanes)]
        self._forked = cp.cuda.Event(disable_timing=True)
        self._joined = [cp.cuda.Event(disable_timing=True) for _ in range(self.lanes)]
        self.graphs = GRAPHS if graphs is None else bool(graphs)
        self._graphs, self._graphs_seen = {}, set()
        module = load_cubin("qora.holo", CUBIN)
        self.column = _Pass(module, "column", n, ept, lines, ("forward", "reverse"), column_load)
        row, reverse_row = ROW[n], REVERSE_ROW[n]
        if row_ept is not None:
            row, reverse_row = (int(row_ept), row[1]), (int(row_ept), reverse_row[1])
        self.row = _Pass(module, "row", n, *row, ("forward", "output", "residual"), row_load)
        self.reverse_row = _Pass(module, "row", n, *reverse_row, ("reverse",), reverse_load)
        use_register_order(dev, ept, lines)

    def _queue(self, key, step) -> None:
        """Queue ``step`` (device work on the device's own buffers only): the first time directly, so that
        whatever it compiles is compiled, then captured once into a CUDA graph and replayed. A slice loop
        is 2 n_z dependent launches of 10-50 us; launched from the host they measured 1.08x (256^3) to 2.3x
        (128^3 gradient) slower than the same loop replayed as one graph (docs/holo-performance.md)."""
        if not self.graphs:
            step()
            return
        graph = self._graphs.get(key)
        if graph is None:
            if key not in self._graphs_seen:
                self._graphs_seen.add(key)
                step()
                return
            from qora.backend.graph import GraphCaptureError, StepGraph

            try:
                graph = self._graphs[key] = StepGraph(step)
            except GraphCaptureError:  # a CuPy or driver without capture: launch from the host from now on
                self.graphs = False
                step()
                return
        graph.replay()

    def run_forward(self, sl, keep: bool) -> None:
        """S of the chunk ``sl`` after all slices (``w``: F_y^-1 S); with ``keep`` the envelopes w_k into
        the device's ``stored``."""
        cp, dev = cupy(), self.dev
        n, b = dev.n, sl.stop - sl.start
        if keep and (dev.stored is None or dev.stored.shape[1] < b):
            dev.stored = cp.empty((dev.nz, dev.chunk, n, n), cp.complex64)
            self._graphs.clear()  # they hold the old buffer's address
        self._queue(("forward", sl.start, sl.stop, keep), lambda: self._slices_forward(sl, keep))

    def _parts(self, b: int):
        """The chunk's B illuminations as (start, stop) groups, one per lane: inner edges on multiples of
        the reverse row pass's illuminations per block, so that the lanes' blocks of 4 are as many as one
        lane's."""
        group = self.reverse_row.lines
        lanes = max(1, min(self.lanes, -(-b // group)))
        edges = [0] + [group * round(i * b / lanes / group) for i in range(1, lanes)] + [b]
        return [(lo, hi) for lo, hi in zip(edges, edges[1:]) if hi > lo]

    @contextmanager
    def _lanes(self, count: int):
        """``count`` streams that start after the work queued so far on the current stream and that it waits
        for at the end (a fork and a join, which a stream capture records as branches of one graph)."""
        cp = cupy()
        main = cp.cuda.get_current_stream()
        if count == 1:
            yield [main]
            return
        streams = self._streams[:count]
        self._forked.record(main)
        for stream in streams:
            stream.wait_event(self._forked)
        try:
            yield streams
        finally:
            for stream, joined in zip(streams, self._joined):
                joined.record(stream)
                main.wait_event(joined)

    def _slices_forward(self, sl, keep: bool) -> None:
        dev = self.dev
        n, b = dev.n, sl.stop - sl.start
        s, w = dev.s[:b], dev.w[:b]
        start_spectra(s, n)
        w.fill(0)
        w[:, :, 0] = n * n  # F_y^-1 S_0: n^2 in column kx = 0 of every row
        scale = np.float32(1.0 / (n * n))
        parts = self._parts(b)
        with self._lanes(len(parts)) as streams:
            for k in range(dev.nz):
                tq, tr = dev._tables(sl, k)
                for (lo, hi), stream in zip(parts, streams):
                    with stream:
                        stored = dev.stored[k, lo:hi] if keep else _NULL
                        self.row("forward", (hi - lo) * n // self.row.lines, w[lo:hi], dev.screens[k], scale, stored)
                        self.column("forward", (hi - lo) * n // self.column.lines, w[lo:hi], s[lo:hi], tq[lo:hi],
                                    tr[lo:hi])

    def forward(self, out) -> None:
        """Field ratios (A, n, n) complex64, centre-origin, into the device array ``out``."""
        dev = self.dev
        n = dev.n
        for sl in dev.chunks:
            b = sl.stop - sl.start
            self.run_forward(sl, False)
            self.row("output", b * n // self.row.lines, dev.w[:b], np.float32(1.0 / (n * n)), out[sl])

    def reverse(self, data, index=slice(None), *, residual: bool = False):
        """As :meth:`BpmDevice.reverse`: Re(J^H r) over the illuminations ``index`` (nz, n, n) float32
        centre-origin, and sum |r|^2."""
        self.queue_reverse(data, index, residual=residual)
        return gradient_and_loss(self.dev)

    def queue_reverse(self, data, index=slice(None), *, residual: bool = False) -> None:
        """The work of :meth:`reverse` without reading anything back: the device's ``grad`` (natural order)
        and ``loss`` hold the sums when it has run (so that it can be captured into a CUDA graph)."""
        dev = self.dev
        n = dev.n
        scale = np.float32(1.0 / (n * n))
        for sl in dev.reverse_chunks(index):
            b = sl.stop - sl.start
            self.run_forward(sl, True)
            g, h = dev.s[:b], dev.w[:b]
            self.row("residual", b * n // self.row.lines, h, data[sl], np.float32(0) if residual else scale,
                     dev.loss)
            self._queue(("reverse", sl.start, sl.stop), lambda sl=sl, g=g, h=h: self._slices_reverse(sl, g, h))

    def _slices_reverse(self, sl, g, h) -> None:
        dev = self.dev
        n, nz, b = dev.n, dev.nz, sl.stop - sl.start
        scale = np.float32(1.0 / (n * n))
        parts = self._parts(b)
        with self._lanes(len(parts)) as streams:
            for k in range(nz - 1, -1, -1):
                tq, tr = dev._tables(sl, k)
                for (lo, hi), stream in zip(parts, streams):
                    with stream:
                        self.column("reverse", (hi - lo) * n // self.column.lines, h[lo:hi], g[lo:hi], tq[lo:hi],
                                    tr[lo:hi], scale, np.int32(k == nz - 1))
                        self.reverse_row("reverse", n * -(-(hi - lo) // self.reverse_row.lines), h[lo:hi],
                                         dev.screens[k], dev.stored[k, lo:hi], np.int32(hi - lo), dev.kd, dev.grad[k])
