"""The beam propagation model in the rotation geometry: time per pass and an inversion of the cell phantom.

    PYTHONPATH=src python bench/probes/holo_bpm_rotation.py [N] [ANGLES] [BACKEND] [STEPS] [VARIANT]

The default cell (scale N / 64, 0.15 um voxels) simulated by the fine-grid multislice (qora.holo.cell)
about a 0.2 rad tilted axis, ANGLES non-uniform angles, ODTbrain's rotation sense; BACKEND "cpu" or
"cuda" (default cpu). Prints one JSON line per measurement: the forward pass and the gradient
(median of 3, after one warm-up), the turn and its adjoint alone (CPU), and STEPS (default 20) BPM
steps from the Rytov + GP-20 start against Rytov plain: RMSE, region contrasts, nucleus edge, seconds.
STEPS 0 times the two passes only, on the BPM's own field of the cell as data (no multislice, which
takes minutes on the host at 128^3 and 180 angles; the pass's time does not depend on the data).
VARIANT (CUDA): the slice step, "cufft" or "fused_fft" (default: "auto").
"""

import json
import sys
import time

import numpy as np

from qora import holo
from qora.holo.bpm import bpm_forward, bpm_gradient, bpm_tables
from qora.holo.cell import default_cell, multislice_ratio, structure_metrics
from qora.holo.geometry import Geometry, rotation_axis
from qora.holo.rotate import rotate, rotate_adjoint

n = int(sys.argv[1]) if len(sys.argv) > 1 else 48
count = int(sys.argv[2]) if len(sys.argv) > 2 else 60
backend = sys.argv[3] if len(sys.argv) > 3 else "cpu"
steps = int(sys.argv[4]) if len(sys.argv) > 4 else 20
variant = sys.argv[5] if len(sys.argv) > 5 else "auto"
pixel = 0.15
cell = default_cell(scale=n / 64)
angles = np.sort(np.random.default_rng(0).uniform(0, 2 * np.pi, count))
g = Geometry(0.532, 1.333, pixel, n, 1.2, angles=angles, axis=rotation_axis(0.2), rotation_sense=-1)
x = (cell.render(n, pixel).real - g.medium_index).astype(np.float32)
if backend == "cuda":
    from qora.holo import bpm_cuda as M
else:
    M = None
tables = bpm_tables(g, n)
t0 = time.perf_counter()
ratio = multislice_ratio(cell, g) if steps else np.asarray((M or sys.modules[__name__]).bpm_forward(x, g, tables))
print(f"# {n}^3, {count} angles, {backend}: data in {time.perf_counter() - t0:.1f} s", flush=True)


def median_s(fn, repeats=3):
    fn()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return float(np.median(samples))


on_device = {"variant": variant} if M else {}
forward = lambda: (M or sys.modules[__name__]).bpm_forward(x, g, tables, **on_device)  # noqa: E731
gradient = lambda: (M or sys.modules[__name__]).bpm_gradient(x, ratio, g, tables, **on_device)  # noqa: E731
row = {"n": n, "angles": count, "backend": backend, **on_device, "forward_s": median_s(forward),
       "gradient_s": median_s(gradient)}
if not M:
    row["turn_and_adjoint_s"] = median_s(lambda: [rotate_adjoint(rotate(x, g.rotation(a)), g.rotation(a))
                                                  for a in range(count)])
print(json.dumps(row), flush=True)
if not steps:
    sys.exit(0)
for name, fn in (("rytov plain, oversample 1", lambda: holo.reconstruct(ratio, g, method="plain", oversample=1,
                                                                         backend=backend)),
                 (f"BPM-{steps} from Rytov + GP-20", lambda: holo.bpm_reconstruct(ratio, g, iterations=steps,
                                                                                   backend=backend))):
    t0 = time.perf_counter()
    res = fn()
    m = structure_metrics(res.index, cell, pixel)
    m.update(method=name, seconds=round(time.perf_counter() - t0, 2), backend=backend)
    print(json.dumps(m), flush=True)
