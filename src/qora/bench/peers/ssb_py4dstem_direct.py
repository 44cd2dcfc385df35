"""py4DSTEM's direct ptychography (SSB, OBF, WDD), for ``qora bench ssb-methods``.

Run by py4DSTEM's own environment (bench/py4dstem-env.sh: it needs numpy < 2), never by qora:

    python ssb_py4dstem_direct.py DATA.npy OUT.npz SCAN_STEP_A KV ALPHA_MRAD MRAD_PER_PIXEL C10_A

DATA is (scan_row, scan_col, det_row, det_col), qora's layout, which py4DSTEM reads as (Rx, Ry, Qx, Qy). The
centre-of-mass rotation is forced to 0 and not transposed, the aberrations are C10 alone (py4DSTEM's C10 has
qora's sign: +100 A correlates 0.87 on the abTEM SrTiO3 fixture, -100 A -0.67). WDD takes py4DSTEM's suggested
relative Wiener epsilon, 0.01. Writes each method's phase (the angle of py4DSTEM's ``object``) to OUT.npz and prints
one JSON line: the seconds of each (preprocess and reconstruct) and py4DSTEM's version.
"""

import json
import sys
import time
import warnings

import numpy as np


def main(path, out, step, kv, alpha, mrad_per_pixel, c10):
    warnings.filterwarnings("ignore")
    import matplotlib

    matplotlib.use("Agg")
    import py4DSTEM
    from py4DSTEM.process.phase.direct_ptychography import OBF, SSB, WDD

    data = np.load(path).astype(np.float32)
    dc = py4DSTEM.DataCube(data=data)
    dc.calibration.set_R_pixel_size(step)
    dc.calibration.set_R_pixel_units("A")
    dc.calibration.set_Q_pixel_size(mrad_per_pixel)
    dc.calibration.set_Q_pixel_units("mrad")
    seconds, images = {}, {}
    for name, cls, kw in (("ssb", SSB, {}), ("obf", OBF, {}), ("wdd", WDD, {"relative_wiener_epsilon": 0.01})):
        t0 = time.perf_counter()
        rec = cls(energy=kv * 1e3, datacube=dc, semiangle_cutoff=alpha, device="cpu", verbose=False, C10=c10)
        rec.preprocess(plot_center_of_mass=False, plot_rotation=False, plot_overlap_trotters=False,
                       force_com_rotation=0.0, force_com_transpose=False)
        rec.reconstruct(progress_bar=False, num_jobs=1, **kw)
        seconds[name] = time.perf_counter() - t0
        images[name] = np.angle(rec.object)
    np.savez(out, **images)
    print(json.dumps({"seconds": seconds, "py4dstem": py4DSTEM.__version__}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], *(float(v) for v in sys.argv[3:8]))
