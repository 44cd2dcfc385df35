"""ODTbrain's 3D backpropagation (Rytov) as the peer of ``qora bench holo``.

Run as a script in the peers' environment::

    python holo_odtbrain.py RATIO.npy ANGLES.npy OUT.npy WAVELENGTH_PX MEDIUM_INDEX

RATIO holds the field ratios u / u0 (A, Ny, Nx) at the rotation centre's plane
(lD = 0); the output is the refractive index with ODTbrain's usual non-negativity fill
(values below the medium set to it). Prints one JSON line with the wall time.
"""

import json
import sys
import time

import numpy as np


def main(argv):
    ratio_path, angles_path, out_path = argv[0], argv[1], argv[2]
    res, nm = float(argv[3]), float(argv[4])
    import odtbrain

    ratio = np.load(ratio_path)
    angles = np.load(angles_path)
    t0 = time.perf_counter()
    sino = odtbrain.sinogram_as_rytov(ratio)
    f = odtbrain.backpropagate_3d(sino, angles, res, nm, lD=0, num_cores=2)
    ri = odtbrain.odt_to_ri(f, res, nm).real
    ri[ri < nm] = nm
    seconds = time.perf_counter() - t0
    np.save(out_path, ri.astype(np.float32))
    print(json.dumps({"seconds": seconds, "odtbrain": odtbrain.__version__, "shape": list(ri.shape)}))


if __name__ == "__main__":
    main(sys.argv[1:])
