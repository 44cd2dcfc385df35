"""py4DSTEM's parallax (tcBF) fit of defocus, astigmatism and scan rotation, for ``qora bench ssb``.

Run by py4DSTEM's own environment (bench/py4dstem-env.sh: it needs numpy < 2), never by qora:

    python ssb_py4dstem.py DATA.npy SCAN_STEP_A KV MRAD_PER_PIXEL

DATA is (scan_row, scan_col, det_row, det_col), qora's layout, which is py4DSTEM's (Rx, Ry, Qx, Qy).
Prints one JSON line: seconds (preprocess + reconstruct + aberration_fit), py4DSTEM's polar
aberrations (C10 and C12 in A, phi12 in rad, its own axes), its scan rotation (rad) and version.
"""

import json
import sys
import time
import warnings

import numpy as np


def main(path, step, kv, mrad_per_pixel):
    warnings.filterwarnings("ignore")
    import matplotlib

    matplotlib.use("Agg")
    import py4DSTEM

    data = np.load(path)
    dc = py4DSTEM.DataCube(data=data)
    dc.calibration.set_R_pixel_size(step)
    dc.calibration.set_R_pixel_units("A")
    dc.calibration.set_Q_pixel_size(mrad_per_pixel)
    dc.calibration.set_Q_pixel_units("mrad")
    t0 = time.perf_counter()
    parallax = py4DSTEM.process.phase.Parallax(energy=kv * 1e3, datacube=dc, device="cpu", verbose=False)
    parallax.preprocess(plot_average_bf=False)
    parallax.reconstruct(plot_aligned_bf=False, plot_convergence=False, progress_bar=False)
    parallax.aberration_fit(plot_CTF_comparison=False, plot_BF_shifts_comparison=False)
    seconds = time.perf_counter() - t0
    polar = {k: float(v) for k, v in parallax.aberrations_dict_polar.items()}
    print(json.dumps({"seconds": seconds, "polar": polar, "rotation_rad": float(parallax.rotation_Q_to_R_rads),
                      "py4dstem": py4DSTEM.__version__}))


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]))
