"""triangle_256_1e6: ER**300 from each found object (few-photons, 4 starts) on the TRUE support, with the exact
modulus projection (band 0) and with the noise band k = 0.5, 1, 2 (qora.phase.band); float32 CPU engine."""

import numpy as np

from qora.bench import phase_success as ps
from qora.phase import analysis, reconstruct
from qora.phase.band import band_iterate
from qora.phase.cpu import CpuEngine
from qora.phase.detector import record
from qora.phase.physics import native_amplitude, update_coefficients

case = ps.CASES["triangle_256_1e6"]
truth = case.object()
counts, mask = record(truth, case.detector, seed=0)
r = reconstruct(counts, mask=mask, starts=4, backend="cpu", keep_all=True, recipe="few-photons")
true_support = np.fft.ifftshift(np.abs(truth) > 0)
amp = native_amplitude(counts, mask)
for s, obj in enumerate(r.objects):
    aligned, _ = analysis.align(np.asarray(obj, np.complex128), truth)
    row = [f"start {s}: found {ps.aligned_error(obj, truth):.3f}"]
    for k in (0.0, 0.5, 1.0, 2.0):
        engine = CpuEngine(amp, true_support)
        engine.x[...] = np.fft.ifftshift(np.where(np.fft.fftshift(true_support), aligned, 0)).astype(np.complex64)
        engine.x_written()
        band_iterate(engine, k, 300, *update_coefficients("ER"))
        row.append(f"band {k}: {ps.aligned_error(np.fft.fftshift(engine.get_x()[0]), truth):.3f}")
    print(", ".join(row), flush=True)
