"""The BPM's ``fused_resident`` variant on CUDA: one thread-block cluster per illumination keeps the field
on chip through the whole slice loop (``kernels/bpm_resident.cu``; docs/holo-performance.md, "The field
on chip").

:class:`qora.holo.bpm_cuda.BpmDevice` with ``variant="fused_resident"`` runs its forward and reverse
passes through :class:`ResidentSteps`: one kernel launch per chunk for the forward model, one for the
gradient (the forward pass storing the envelopes w_k, the residual and the reverse pass, the field never
leaving the cluster's shared memory). The slice algebra, the register order of S and the tables, and the
byte accounting follow :mod:`qora.holo.bpm_fused`; the field's round trips to DRAM are gone and the
tables are read once per kernel (16 B per element and slice forward against 64). Measured slower than
``fused_fft`` on the H200 all the same (256^3 forward 30.5 against 14.5 ms in
one run of ``qora bench holo``): with one illumination per
cluster too few warps run to hide the on-chip latencies, so ``variant="auto"`` never picks it. Lateral
sizes 128 and 256 (:data:`LAYOUTS`), compute capability 9.x (thread-block clusters).
"""

from __future__ import annotations

import numpy as np

from qora.backend.kernels import load_cubin
from qora.holo.bpm_fused import check_capability, gradient_and_loss, start_spectra, use_register_order
from qora.holo.cuda_stages import cupy
from qora.io.errors import InputError

__all__ = ["ResidentSteps", "LAYOUTS", "CTAS_PER_SM", "SLICE_BYTES"]

CUBIN = "bpm_resident.sm_90.cubin"
#: (elements per thread, CTAs per cluster) by lateral size: 32 lines of 16 threads per CTA
LAYOUTS = {128: (8, 4), 256: (16, 8)}
#: CTAs per SM each size is built for (the first is the default): the field and the tables in shared
#: memory leave room for two at 128 (97 KB each) and one at 256 (194 KB)
CTAS_PER_SM = {128: (2,), 256: (1,)}
#: DRAM bytes per element and slice: S read and written (tq and tr of every slice but the last are read
#: into shared memory once per kernel); the gradient adds w_k stored, then G read and written and w_k read.
#: The screen adds 8 / B per pass as in bpm_fused
SLICE_BYTES = {"forward": 16, "gradient": 48}


class ResidentSteps:
    """Forward model and gradient of a :class:`~qora.holo.bpm_cuda.BpmDevice` (``variant="fused_resident"``).

    ``s`` holds S (forward) and then G (reverse) in the column transform's register order
    (:func:`qora.holo.bpm_fused.spectral_order` with lines = n / cluster); the device's tables are replaced
    by their register-order copies. ``ctas_per_sm``: one of :data:`CTAS_PER_SM` for the size.
    """

    def __init__(self, dev, *, ctas_per_sm: int | None = None) -> None:
        n = dev.n
        if n not in LAYOUTS:
            raise InputError(f"BPM variant 'fused_resident' needs a lateral size in {tuple(LAYOUTS)}, got {n}; "
                             "use variant='fused_fft' or 'cufft'")
        ctas = CTAS_PER_SM[n][0] if ctas_per_sm is None else int(ctas_per_sm)
        if ctas not in CTAS_PER_SM[n]:
            raise InputError(f"ctas_per_sm must be one of {CTAS_PER_SM[n]} at {n} points, got {ctas_per_sm}")
        check_capability("fused_resident")
        cp = cupy()
        ept, cluster = LAYOUTS[n]
        module = load_cubin("qora.holo", CUBIN)
        suffix = f"{n}_{cluster}_{ept}_{ctas}"
        out = cp.zeros(4, np.int32)
        module.get_function(f"bpm_resident_params_{suffix}")((1,), (1,), (out,))
        bx, by, self.smem, self.cluster = (int(v) for v in out.get())
        self.block = (bx, by)
        self.kernels = {}
        for kind in ("forward", "gradient"):
            kernel = self.kernels[kind] = module.get_function(f"bpm_resident_{kind}_{suffix}")
            kernel.max_dynamic_shared_size_bytes = self.smem
        self.name = suffix
        self.dev = dev
        use_register_order(dev, ept, n // cluster)

    def _start(self, b: int):
        """S_0 = n^2 delta for the chunk's first ``b`` illuminations."""
        s = self.dev.s[:b]
        start_spectra(s, self.dev.n)
        return s

    def _launch(self, kind: str, b: int, *args) -> None:
        self.kernels[kind]((b * self.cluster,), self.block, args, shared_mem=self.smem)

    def _tables(self, sl):
        dev = self.dev
        return dev.screens, dev.cq[sl], dev.cr[sl], dev.lq[sl], dev.lr[sl], np.int32(dev.nz)

    def forward(self, out) -> None:
        """Field ratios (A, n, n) complex64, centre-origin, into the device array ``out``."""
        dev = self.dev
        scale = np.float32(1.0 / (dev.n * dev.n))
        for sl in dev.chunks:
            b = sl.stop - sl.start
            self._launch("forward", b, self._start(b), *self._tables(sl), scale, out[sl])

    def reverse(self, data, index=slice(None), *, residual: bool = False):
        """As :meth:`BpmDevice.reverse`: Re(J^H r) over the illuminations ``index`` (nz, n, n) float32
        centre-origin, and sum |r|^2."""
        cp, dev = cupy(), self.dev
        n, nz = dev.n, dev.nz
        chunks = dev.reverse_chunks(index)
        if dev.stored is None or dev.stored.shape[1] < max((sl.stop - sl.start for sl in chunks), default=0):
            dev.stored = cp.empty((nz, dev.chunk, n, n), cp.complex64)
        scale = np.float32(1.0 / (n * n))
        stored_slice = np.int64(dev.stored.shape[1] * n * n)  # complex values from one slice's w_k to the next
        for sl in chunks:
            b = sl.stop - sl.start
            self._launch("gradient", b, self._start(b), *self._tables(sl), scale, dev.stored, stored_slice,
                         data[sl], np.float32(0) if residual else scale, dev.loss, dev.kd, dev.grad)
        return gradient_and_loss(dev)
