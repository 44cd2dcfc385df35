"""The GP loop's ``fused_fft`` kernels on CUDA: one Gerchberg-Papoulis iteration on the half spectrum as four
passes of cuFFTDx line transforms that carry the clamp and the restore (``kernels/gp_fused.cu``;
docs/holo-performance.md, "The fused GP loop").

:class:`FusedGP` runs the loop of :meth:`qora.holo.cuda_solver.SpectrumSolver` on the half spectrum in the
row layout of :func:`row_stride` (rows of ``n / 2 + 1`` values at a stride padded to whole blocks of lines):
a z pass back from the restored data, then per iteration a y pass back, the x pass (C2R, clamp, R2C), a y
pass forward and the z pass that restores the measured bins (on the tiles that hold one:
:meth:`FusedGP.measured_tiles`); the last iteration is followed by a y pass back
and the x pass's C2R alone, which leaves the real volume in place (rows of ``2 * row_stride(n)`` floats).
Grids of edge 128, 256 and 512 (:data:`SIZES`), compute capability 9.x (the prebuilt
``gp_fused.sm_90.cubin``; rebuild with ``python -m qora.holo.build_fused``).
"""

from __future__ import annotations

import numpy as np

from qora.backend import xp_of
from qora.backend.kernels import load_cubin
from qora.holo.cuda_stages import cupy

__all__ = ["FusedGP", "SIZES", "LAYOUT", "PASS_BYTES", "available", "loop_bytes", "row_stride"]

CUBIN = "gp_fused.sm_90.cubin"
#: (elements per thread, lines per block) by grid edge: qora.phase's layouts of its strided passes, but 8 lines at
#: 256 (H200, bench/probes/gp_fused_probe.py: an iteration 0.3176 ms against 0.3263 with 16 lines)
LAYOUT = {128: (8, 16), 256: (16, 8), 512: (16, 8)}
SIZES = tuple(LAYOUT)
#: grid edges whose x pass takes two rows a transform (gp_rows_packed; measured on an H100 with
#: bench/probes/gp_fused_probe.py: the pass 0.0762 -> 0.0644 ms at 256^3, 0.727 -> 0.509 ms at 512^3)
PACKED = {256: True, 512: True}
#: DRAM bytes per half-spectrum value and iteration, by pass (the model of docs/holo-performance.md): the y
#: passes and the x pass read and write it; the z pass also reads a (8 B) and the counts (1 B)
PASS_BYTES = {"inverse_y": 16, "rows": 16, "forward_y": 16, "restore_z": 25}


def loop_bytes(n: int, iterations: int, measured: float = 1.0) -> int:
    """DRAM bytes of :meth:`FusedGP.run` by the model: every pass reads and writes the half spectrum's
    n^2 (n / 2 + 1) values (the z pass also reads a and the counts, on the ``measured`` share of its tiles), the
    first z pass and the last y and x passes included."""
    values = n * n * (n // 2 + 1)
    per_iteration = sum(PASS_BYTES.values()) - (1.0 - measured) * PASS_BYTES["restore_z"]
    return int(values * (iterations * per_iteration + 3 * 16))


def row_stride(n: int, lines: int | None = None) -> int:
    """The half spectrum's row stride in values: ``n / 2 + 1`` rounded up to whole blocks of ``lines`` (default
    :data:`LAYOUT`'s) and to 16 values, so that every block's loads start on a 128-byte line."""
    lines = max(LAYOUT[n][1] if lines is None else lines, 16)
    return -(-(n // 2 + 1) // lines) * lines


def available(n: int) -> bool:
    """Whether the fused loop can run on this device at grid edge ``n`` (an sm_90 device, a built size)."""
    return n in LAYOUT and str(cupy().cuda.Device().compute_capability).startswith("9")


class FusedGP:
    """The fused GP loop at grid edge ``n`` (one of :data:`SIZES`, on compute capability 9.x); ``layout``
    (elements per thread, lines per block): a candidate built beside :data:`LAYOUT`'s (for the probes);
    ``packed``: the x pass with two rows a transform (default :data:`PACKED`)."""

    def __init__(self, n: int, layout: tuple | None = None, *, packed: bool | None = None) -> None:
        if not available(n):
            raise ValueError(f"the fused GP loop needs a grid edge in {SIZES} on compute capability 9.x, got {n}")
        cp = cupy()
        ept, lines = LAYOUT[n] if layout is None else layout
        suffix = f"{n}_{lines}_{ept}"
        module = load_cubin("qora.holo", CUBIN)
        out = cp.zeros(6, np.int32)
        module.get_function(f"gp_params_{suffix}")((1,), (1,), (out,))
        bx, by, smem_lines, smem_restore, smem_rows, smem_packed = (int(v) for v in out.get())
        self.packed = PACKED.get(n, False) if packed is None else bool(packed)
        self.n, self.lines, self.block = n, lines, (bx, by)
        self.width, self.stride = n // 2 + 1, row_stride(n, lines)
        self.smem = {"inverse": smem_lines, "forward": smem_lines, "restore": smem_restore, "rows": smem_rows,
                     "rows_final": smem_rows, "rows_packed": smem_packed}
        self.kernels = {}
        for kind, smem in self.smem.items():
            kernel = self.kernels[kind] = module.get_function(f"gp_{kind}_{suffix}")
            kernel.max_dynamic_shared_size_bytes = smem
        # tiles of a strided pass: n lines of n points (y: one per z, R = 1; z: one per y, R = n) in groups
        self.tiles = n * -(-self.width // lines)

    def model_bytes(self, iterations: int, counts=None) -> int:
        """DRAM bytes of :meth:`run` by the model (:func:`loop_bytes`), with ``counts``: on its measured tiles."""
        measured = 1.0 if counts is None else len(self.measured_tiles(counts)) / self.tiles
        return loop_bytes(self.n, iterations, measured)

    def _strided(self, kind: str, e, along_z: bool, *extra, tiles=None) -> None:
        args = (e, np.int64(self.n if along_z else 1), np.int32(self.width), np.int32(self.stride)) + extra
        self.kernels[kind]((self.tiles if tiles is None else len(tiles),), self.block, args, shared_mem=self.smem[kind])

    def measured_tiles(self, counts):
        """The z pass's tiles (``lines`` lines along z at one y, int32 indices y * groups + g, on ``counts``' device)
        that hold a measured bin. On the others c = M(k) + M(-k) is 0 along every line, the data term too, so the
        restoring z pass is the identity there and is not run (docs/holo-performance.md: 44% of the tiles hold one
        at the benchmark's 256^3)."""
        xp = xp_of(counts)
        n, groups = self.n, -(-self.width // self.lines)
        lines = xp.zeros((n, groups * self.lines), bool)  # (y, x) holds a measured bin along z
        lines[:, :self.width] = counts.reshape(n, n, self.stride)[..., :self.width].max(axis=0) > 0
        return xp.flatnonzero(lines.reshape(n, groups, self.lines).any(axis=2)).astype(np.int32)

    def _restore(self, e, a, counts, tiles) -> None:
        if len(tiles):
            self._strided("restore", e, True, a, counts, tiles, np.float32(1.0 / self.n), tiles=tiles)

    def _rows(self, kind: str, e, *extra) -> None:
        rows_a_block = self.lines * (2 if kind == "rows_packed" else 1)
        self.kernels[kind]((self.n * self.n // rows_a_block,), self.block, (e, np.int32(self.stride)) + extra,
                           shared_mem=self.smem[kind])

    def run(self, e, a, counts, iterations: int, scale: float, bounds) -> float:
        """``iterations`` GP iterations from ``e`` (the restored data term, half spectrum in the row layout), then
        the C2R: ``e`` ends as the real volume times a factor (rows of ``2 * stride`` floats); returns what takes it
        to the volume. ``a`` and ``counts`` (uint8, M(k) + M(-k)) in the same layout; ``scale`` the unnormalised
        inverse transform's (1 / n^3); ``bounds`` the clamp's (lower, upper). The restoring z pass is normalised
        (1 / n), so that it may skip the lines without a measured bin: after it the volume is n^2 times the real
        one, not n^3, and the clamp's scale follows."""
        lower, upper = (np.float32(b) for b in bounds)
        tiles = self.measured_tiles(counts)
        self._strided("inverse", e, True)
        for i in range(iterations):
            self._strided("inverse", e, False)
            self._rows("rows_packed" if self.packed else "rows", e, np.float32(scale * (self.n if i else 1)), lower,
                       upper)
            self._strided("forward", e, False)
            self._restore(e, a, counts, tiles)
        self._strided("inverse", e, False)
        self._rows("rows_final", e)
        return scale * self.n if iterations else scale
