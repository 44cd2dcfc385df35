"""The ``fused_fft`` variant of :mod:`qora.phase.cuda`: our own cuFFTDx line transforms carrying the
modulus step and the support update (``kernels/fused_fft.cu``; docs/phase-performance.md, "fused_fft")."""

from __future__ import annotations

import numpy as np

from qora.phase.cuda_base import _KernelEngine

__all__ = ["FusedFFTEngine", "measured_layout", "EPT_ORDER", "EPT_FIRST", "STRIDED_LOADS", "CONTIG_LOADS", "SPLIT_HEIGHTS"]

# fused_fft: elements per thread, in order of preference where both are built; the strided 256-point
# passes measured faster with 16 (0.170 against 0.202 ms for the modulus pass at 256^3 on the H200),
# every other pass with 8 (docs/phase-performance.md, "fused_fft")
EPT_ORDER = (8, 16)
EPT_FIRST = {("strided", 256): 16}
#: how the strided passes bring their tile on chip (kernels/fused_fft.cu, LOAD_*): "plain", one
#: register-staged load per thread in flight (the measured default); "async", the whole tile's loads in
#: flight at once through cp.async; "pipe", a persistent grid with two tile buffers, the next tile's
#: copies in flight during the current one's transforms (candidates of docs/phase-performance.md,
#: "fused_fft candidates"; a size without the candidate's kernels runs "plain")
STRIDED_LOADS = ("plain", "async", "pipe")
#: the x pass: "plain" reads x and the support after the inverse transform (the measured default);
#: "prefetch" copies them into shared memory with cp.async before it (candidate; kernels/fused_fft.cu)
CONTIG_LOADS = ("plain", "prefetch")
#: 2D heights whose column pass can run split in three passes (candidate ``column_split``; kernels/fused_fft.cu,
#: MODE_SPLIT): 64-point strided passes first and last, the middle one of height / 64 points with the modulus
#: step; (lines per block, elements per thread) of the middle pass
SPLIT_HEIGHTS = (2048, 4096)
SPLIT_N1 = 64
SPLIT_LAYOUT = (16, 8)


def measured_layout(shape) -> dict:
    """The loads and split the H200 measured fastest for a pattern of ``shape`` (2026-12-01, every candidate
    side by side, bench/results/phase-fused/fused_fft_probe-candidates-20261201.json): the x pass's
    prefetch everywhere (0.82-0.94x of graph against 0.84-1.03x without); the strided tiles through
    cp.async except in 3D at 512 (0.837x of graph with plain loads against 0.851x); at a 2D height of
    4096 the split column pass (0.923x against 0.960x); at 2048 the split measured slower (1.09x)."""
    shape = tuple(shape)
    return {"contig_load": "prefetch",
            "strided_load": "plain" if len(shape) == 3 and max(shape) == 512 else "async",
            "column_split": len(shape) == 2 and shape[0] == 4096}


class FusedFFTEngine(_KernelEngine):
    """Iterations as cuFFTDx line passes carrying the element-wise work (``kernels/fused_fft.cu``).

    Per iteration in 3D: a forward pass along y, the z pass (forward transform, modulus step with
    its error sums, inverse transform, all in registers), the inverse y pass, and the x pass that
    finishes the inverse, applies the support update and starts the next iteration's forward
    transform. In 2D the y pass carries the modulus step. Extents are powers of two from 64 to
    4096 (the sizes compiled into the prebuilt module; :data:`SIZES`). The module is built offline
    against the cuFFTDx headers (``python -m qora.phase.build_fused``), so users need no headers.
    """

    name = "fused_fft"
    SIZES = (64, 128, 256, 512, 1024, 2048, 4096)
    CUBIN = "fused_fft.sm_90.cubin"

    def __init__(self, amp, support, batch: int = 1, *, modulus_axis: str = "z", elements_per_thread=None,
                 strided_load: str | None = None, strided_lines: int | None = None, column_split: bool | None = None,
                 contig_load: str | None = None) -> None:
        """``modulus_axis``: in 3D, the strided axis whose pass carries the modulus step ("z" or "y"; the
        other strided axis gets a plain forward and inverse pass). ``elements_per_thread``: the line
        transforms' elements per thread where several are built (None: :data:`EPT_ORDER`'s first).
        ``strided_load``: one of :data:`STRIDED_LOADS`; :attr:`strided_kernels` records, per pass size,
        the kernel family that ran. ``strided_lines``: lines per block of the strided passes where built at
        that number (None: the most that leave two blocks per SM). ``column_split``: in 2D with a height in
        :data:`SPLIT_HEIGHTS`, the modulus pass as three passes of short columns (four-step). ``contig_load``:
        one of :data:`CONTIG_LOADS` (:attr:`contig_kernels` records what ran). Each of the three left None
        takes :func:`measured_layout`'s value for the pattern's shape."""
        chosen = measured_layout(np.shape(amp))
        strided_load = chosen["strided_load"] if strided_load is None else strided_load
        contig_load = chosen["contig_load"] if contig_load is None else contig_load
        column_split = chosen["column_split"] if column_split is None else column_split
        if strided_load not in STRIDED_LOADS:
            raise ValueError(f"strided_load must be one of {STRIDED_LOADS}, got {strided_load!r}")
        self.strided_load = strided_load
        if contig_load not in CONTIG_LOADS:
            raise ValueError(f"contig_load must be one of {CONTIG_LOADS}, got {contig_load!r}")
        self.contig_load = contig_load
        self.contig_kernels: dict = {}
        self.strided_lines = strided_lines
        self.column_split = bool(column_split)
        self.strided_kernels: dict = {}
        self.ept_order = EPT_ORDER if elements_per_thread is None else (int(elements_per_thread),) + EPT_ORDER
        if modulus_axis not in ("z", "y"):
            raise ValueError(f"modulus_axis must be 'z' or 'y', got {modulus_axis!r}")
        self.modulus_axis = modulus_axis
        shape = tuple(np.shape(amp))
        if len(shape) not in (2, 3) or any(s not in self.SIZES for s in shape):
            raise ValueError(f"variant 'fused_fft' needs a 2D or 3D pattern with every extent in {self.SIZES}, "
                             f"got shape {shape}; use variant='graph'")
        super().__init__(amp, support, batch, graph=True)
        from qora.backend.kernels import load_cubin

        xp = self.xp
        if self.backend.device_facts().compute_capability.split(".")[0] != "9":
            raise ValueError("variant 'fused_fft' is built for compute capability 9.x (H100/H200); use 'graph'")
        self._module = load_cubin("qora.phase", self.CUBIN)
        self._sms = self.backend.device_facts().sm_count
        self._launches: dict = {}
        self.y = xp.empty(self.full, np.complex64)
        self._ensure_history(1)
        self._steps(1, 0.0, 0.0, 0)  # every kernel loaded before any capture
        self.x.fill(0)
        self._reset()
        xp.cuda.get_current_stream().synchronize()

    def _built(self, family: str, size: int, suffix: str) -> list:
        """(lines per block, (params kernel, elements per thread)) of each built layout, most lines first."""
        order = self.ept_order
        if self.ept_order is EPT_ORDER and (family, size) in EPT_FIRST:
            order = (EPT_FIRST[family, size],) + EPT_ORDER
        built = []
        for per_block in (16, 8, 4, 2, 1):
            for ept in order:
                try:
                    params = self._module.get_function(f"{family}_params_{size}_{per_block}_{ept}{suffix}")
                except Exception:  # noqa: BLE001 - CuPy raises its driver error for a name not in the module
                    continue
                built.append((per_block, (params, ept)))
                break
        return built

    def _launch_of(self, family: str, size: int, lines: int):
        """(kernels by kind, block, shared memory by kind, lines per block, resident blocks per SM by kind
        (persistent grids; else empty)) of a pass
        over ``lines`` lines of ``size``: the most lines per block that leave two blocks per SM, else the
        fewest built; the strided passes in the :attr:`strided_load` family where it is built at ``size``."""
        key = (family, size, lines)
        launch = self._launches.get(key)
        if launch is None:
            suffixes = [""]
            if family == "strided" and self.strided_load != "plain":
                suffixes.insert(0, f"_{self.strided_load}")
            if family == "contig" and self.contig_load != "plain":
                suffixes.insert(0, f"_{self.contig_load}")
            for suffix in suffixes:
                fits = [pb for pb in self._built(family, size, suffix) if lines % pb[0] == 0]
                if fits:
                    break
            else:
                raise ValueError(f"fused_fft has no {family} kernel of size {size} for {lines} lines")
            roomy = [pb for pb in fits if lines // pb[0] >= 2 * self._sms]
            asked = [pb for pb in fits if family == "strided" and pb[0] == self.strided_lines]
            per_block, (params, ept) = asked[0] if asked else roomy[0] if roomy else fits[-1]
            out = self.xp.zeros(4, np.int32)
            params((1,), (1,), (out,))
            bx, by, smem_all, smem_lines = (int(v) for v in out.get())
            kinds = ("forward", "inverse", "modulus") if family == "strided" else ("forward", "update")
            kernels = {kind: self._module.get_function(f"{family}_{kind}_{size}_{per_block}_{ept}{suffix}")
                       for kind in kinds}
            # the pipelined forward and inverse passes need no amplitude tiles (smem_lines); others: one size
            smem = {kind: smem_lines if smem_lines and kind != "modulus" else smem_all for kind in kinds}
            for kind, kernel in kernels.items():
                kernel.max_dynamic_shared_size_bytes = smem[kind]
            resident = {}
            if suffix == "_pipe":  # a persistent grid: as many blocks as fit on the GPU at once
                from qora.backend.kernels import resident_blocks

                resident = {kind: resident_blocks(k, bx * by, smem[kind]) for kind, k in kernels.items()}
            if family == "contig":
                self.contig_kernels[size] = f"{per_block}_{ept}{suffix or '_plain'}"
            if family == "strided":
                self.strided_kernels[size] = f"{per_block}_{ept}{suffix or '_plain'}" + \
                    (f" ({resident['forward']}/{resident['modulus']} per SM)" if resident else "")
            launch = self._launches[key] = (kernels, (bx, by), smem, per_block, resident)
        return launch

    def _strided(self, kind: str, size: int, inner: int, outer: int, *args) -> None:
        kernels, block, smem, per_block, resident = self._launch_of("strided", size, outer * inner)
        tiles = outer * inner // per_block
        if resident:
            kernels[kind]((min(tiles, resident[kind] * self._sms),), block, (self.y, np.int64(inner)) + args +
                          (np.int64(tiles),), shared_mem=smem[kind])
        else:
            kernels[kind]((tiles,), block, (self.y, np.int64(inner)) + args, shared_mem=smem[kind])

    def _split(self, size: int, width: int, lines: int) -> None:
        """The middle pass of the split column transform: ``lines`` (starts x 64) groups of lines of ``size``
        rows, each with its modulus step (kernels/fused_fft.cu, MODE_SPLIT)."""
        key = ("split", size, lines)
        launch = self._launches.get(key)
        if launch is None:
            per_block, ept = SPLIT_LAYOUT
            suffixes = ["_async", ""] if self.strided_load != "plain" else [""]
            for suffix in suffixes:
                try:
                    params = self._module.get_function(f"strided_params_{size}_{per_block}_{ept}_split{suffix}")
                    kernel = self._module.get_function(f"strided_split_{size}_{per_block}_{ept}{suffix}")
                    break
                except Exception:  # noqa: BLE001 - CuPy raises its driver error for a name not in the module
                    continue
            else:
                raise ValueError(f"fused_fft has no split column pass of {size} points")
            out = self.xp.zeros(3, np.int32)
            params((1,), (1,), (out,))
            bx, by, smem = (int(v) for v in out.get())
            kernel.max_dynamic_shared_size_bytes = smem
            self.strided_kernels[f"split {size}"] = f"{per_block}_{ept}{suffix or '_plain'}"
            launch = self._launches[key] = (kernel, (bx, by), smem, per_block)
        kernel, block, smem, per_block = launch
        kernel((lines * width // per_block,), block,
               (self.y, np.int64(width), self.amp, np.int64(self.n), np.float32(self.scale), self.history,
                self.counter, np.int32(self.batch), np.int32(SPLIT_N1)), shared_mem=smem)

    def _contig(self, kind: str, *args) -> None:
        width = self.shape[-1]
        lines = self.batch * self.n // width
        kernels, block, smem, per_block, _ = self._launch_of("contig", width, lines)
        kernels[kind]((lines // per_block,), block, (self.y, self.x) + args, shared_mem=smem[kind])

    def _modulus(self, size: int, inner: int, outer: int) -> None:
        self._strided("modulus", size, inner, outer, self.amp, np.int64(self.n), np.float32(self.scale),
                      self.history, self.counter, np.int32(self.batch))

    def _steps(self, iterations: int, a: float, b: float, code: int) -> None:
        shape, batch = self.shape, self.batch
        self._contig("forward")
        for k in range(iterations):
            if len(shape) == 2:
                height, width = shape
                if self.column_split and height in SPLIT_HEIGHTS:
                    rest = height // SPLIT_N1
                    self._strided("forward", SPLIT_N1, rest * width, batch)
                    self._split(rest, width, batch * SPLIT_N1)
                    self._strided("inverse", SPLIT_N1, rest * width, batch)
                else:
                    self._modulus(height, width, batch)
            else:
                depth, height, width = shape
                if self.modulus_axis == "z":
                    self._strided("forward", height, width, batch * depth)
                    self._modulus(depth, height * width, batch)
                    self._strided("inverse", height, width, batch * depth)
                else:
                    self._strided("forward", depth, height * width, batch)
                    self._modulus(height, width, batch * depth)
                    self._strided("inverse", depth, height * width, batch)
            self._contig("update", self.support, np.float32(a), np.float32(b), np.int32(code), self.counter,
                         np.int32(k < iterations - 1))

