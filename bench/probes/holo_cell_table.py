"""The structure table of docs/holo.md ("Which method when"): the cell phantom of qora.holo.cell, simulated
by multislice on a twice finer grid, reconstructed by every method, straight and 0.2 rad tilted axis.

    PYTHONPATH=src python bench/probes/holo_cell_table.py [N] [ANGLES] [PIXEL_UM] [SCALE] [bpm]

Prints one line per (axis, method): RMSE, region contrasts relative to the truth, nucleus edge width.
With ``bpm`` last only the BPM rows (the beam propagation model in the rotation geometry, 20 steps
from its Rytov + GP-20 start) run.
"""

import json
import sys
import time

import numpy as np

from qora import holo
from qora.holo.cell import default_cell, multislice_ratio, structure_metrics
from qora.holo.geometry import Geometry, rotation_axis

n = int(sys.argv[1]) if len(sys.argv) > 1 else 48
count = int(sys.argv[2]) if len(sys.argv) > 2 else 90
pixel = float(sys.argv[3]) if len(sys.argv) > 3 else 0.15
scale = float(sys.argv[4]) if len(sys.argv) > 4 else 0.85
cell = default_cell(scale=scale)
angles = np.linspace(0, 2 * np.pi, count, endpoint=False)
METHODS = [("rytov plain, oversample 1", dict(method="plain", oversample=1)),
           ("GP-50, oversample 1", dict(method="gp", oversample=1)),
           ("GP-50 (default, oversample 2)", dict()),
           ("TV, weight auto", dict(method="tv", tv_weight="auto")),
           ("TV, weight 8e-2 (the former advice)", dict(method="tv", tv_weight=8e-2)),
           ("BPM-20 (from Rytov + GP-20)", dict(bpm=20))]
if len(sys.argv) > 5 and sys.argv[5] == "bpm":
    METHODS = [m for m in METHODS if "bpm" in m[1]]
for tilt in (0.0, 0.2):
    g = Geometry(0.532, 1.333, pixel, n, 1.2, angles=angles, axis=rotation_axis(tilt))
    t0 = time.perf_counter()
    ratio = multislice_ratio(cell, g)
    print(f"# tilt {tilt} rad: simulated in {time.perf_counter() - t0:.1f} s", flush=True)
    runs = list(METHODS)
    if tilt and len(runs) > 1:
        runs.append(("GP-50 default, axis taken as straight", dict(geometry=Geometry(0.532, 1.333, pixel, n, 1.2,
                                                                                       angles=angles))))
    for name, kw in runs:
        kw = dict(kw)  # the table's entries serve both axes
        geom = kw.pop("geometry", g)
        t0 = time.perf_counter()
        steps = kw.pop("bpm", None)
        res = holo.bpm_reconstruct(ratio, geom, iterations=steps) if steps else holo.reconstruct(ratio, geom, **kw)
        m = structure_metrics(res.index, cell, pixel)
        m.update(tilt=tilt, method=name, seconds=round(time.perf_counter() - t0, 1),
                 tv_weight=res.info.get("tv_weight"))
        print(json.dumps(m), flush=True)
