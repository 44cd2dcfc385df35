"""One launch target for Nsight Compute: the fused_resident BPM kernel at n^3 in the reference geometry
(49 illuminations), run twice (the first launch warms the module; profile the second with
``--launch-skip 1``).

    ncu -k regex:bpm_resident --launch-skip 1 --launch-count 1 --section WarpStateStats ... \\
        python bench/probes/bpm_resident_target.py 128 forward
"""

from __future__ import annotations

import sys

import numpy as np


def main() -> None:
    from qora.holo import phantoms as P
    from qora.holo import reference as R
    from qora.holo.bpm_cuda import BpmDevice
    from qora.holo.cuda_stages import cupy
    from qora.holo.plans import bpm_tables

    n, kind = int(sys.argv[1]), sys.argv[2]
    cp = cupy()
    g = R.geometry(n)
    dev = BpmDevice(g, bpm_tables(g, n), variant="fused_resident")
    sphere = P.Sphere(radius=1.5, index=1.40)
    truth = P.render_spheres([sphere], n, g.pixel, g.medium_index, supersample=3)
    dev.set_contrast(cp.asarray((truth - g.medium_index).astype(np.float32)))
    out = cp.empty((g.count, n, n), cp.complex64)
    data = cp.asarray(P.partial_wave_ratio(sphere, g) + 1, cp.complex64)
    for _ in range(2):
        dev.forward(out) if kind == "forward" else dev.reverse(data)
    cp.cuda.Device().synchronize()


if __name__ == "__main__":
    main()
