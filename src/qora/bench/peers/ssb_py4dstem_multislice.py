"""py4DSTEM's iterative multislice ptychography on an abTEM fixture, the peer of ``qora bench ssb-ptycho``.

Run by py4DSTEM's own environment (bench/py4dstem-env.sh: it needs numpy < 2), never by qora:

    python ssb_py4dstem_multislice.py FIXTURE.npz OUT.npz [SLICES [ITERATIONS [STEP_SIZE [BATCH [ROTATION_DEG
        [TRANSPOSE]]]]]]

(defaults 4 slices, 20 iterations, step size 0.5, batch 64 positions, rotation 0, transpose 0). FIXTURE is one of
tests/ssb/fixtures/abtem_srtio3_ptycho_*.npz: its ``counts`` (scan_row, scan_col, det_row, det_col), qora's layout,
which py4DSTEM reads as (Rx, Ry, Qx, Qy), and the true parameters (``kv``, ``alpha_mrad``, ``C10``, ``scan_step``,
``detector_mrad_per_pixel``, ``thickness``). ``py4DSTEM.process.phase.MultislicePtychography`` (CPU, gradient
descent, its defaults otherwise: no position or aberration correction, no regularisation) is given the energy, the
semiangle, qora's C10 as py4DSTEM's C10 (both minus the defocus: py4DSTEM's alias ``defocus`` is -C10, so abTEM's
defocus -100 A is C10 = +100 A), the scan step, the detector's mrad per pixel, SLICES equal slices over
``thickness`` (py4DSTEM's slice_thicknesses are the SLICES - 1 propagation distances), and the centre-of-mass
rotation forced to ROTATION_DEG and transposed if TRANSPOSE (0 and no transpose for abTEM's fixtures).

Writes to OUT.npz: ``phase``, the object's phase summed over the slices (the sum of each slice's angle, which does
not wrap where the total would), ``slice_phases`` (slices, rows, cols) each slice's angle, ``sampling`` (A per object pixel, row and column), ``positions_px`` (each scan
position's probe centre in object pixels, raster order (scan_row, scan_col)), ``scan_map`` (the 2 x 3 affine from
(scan_row, scan_col, 1) to the object's (row, col), fitted to those positions) and ``errors`` (py4DSTEM's error by
iteration). Prints one JSON line: the seconds of preprocess and of reconstruct, the settings, the final error and
py4DSTEM's version.
"""

import json
import sys
import time
import warnings

import numpy as np


def main(path, out, slices=4, iterations=20, step_size=0.5, batch=64, rotation=0.0, transpose=0):
    warnings.filterwarnings("ignore")
    import matplotlib

    matplotlib.use("Agg")
    import py4DSTEM
    from py4DSTEM.process.phase import MultislicePtychography

    data = np.load(path)
    counts = np.asarray(data["counts"], np.float32)
    kv, alpha, c10 = float(data["kv"]), float(data["alpha_mrad"]), float(data["C10"])
    step, mrad = float(data["scan_step"]), float(data["detector_mrad_per_pixel"])
    thickness = float(data["thickness"])
    dc = py4DSTEM.DataCube(data=counts)
    dc.calibration.set_R_pixel_size(step)
    dc.calibration.set_R_pixel_units("A")
    dc.calibration.set_Q_pixel_size(mrad)
    dc.calibration.set_Q_pixel_units("mrad")
    t0 = time.perf_counter()
    rec = MultislicePtychography(energy=kv * 1e3, num_slices=slices, slice_thicknesses=thickness / slices,
                                 datacube=dc, semiangle_cutoff=alpha, C10=c10, device="cpu", verbose=False)
    rec.preprocess(plot_center_of_mass=False, plot_rotation=False, plot_probe_overlaps=False,
                   force_com_rotation=rotation, force_com_transpose=bool(transpose))
    t_pre = time.perf_counter() - t0
    t0 = time.perf_counter()
    rec.reconstruct(num_iter=iterations, step_size=step_size, max_batch_size=batch or None, seed_random=0,
                    progress_bar=False)
    t_rec = time.perf_counter() - t0
    slice_phases = np.angle(np.asarray(rec.object))
    phase = slice_phases.sum(0)
    positions = np.asarray(rec._positions_px_initial, np.float64)
    rows, cols = counts.shape[:2]
    ii, jj = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    design = np.stack([ii.ravel(), jj.ravel(), np.ones(ii.size)], 1)
    scan_map = np.linalg.lstsq(design, positions, rcond=None)[0].T
    np.savez(out, phase=phase, slice_phases=slice_phases.astype(np.float32), sampling=np.asarray(rec.sampling, np.float64), positions_px=positions,
             scan_map=scan_map, errors=np.asarray(rec.error_iterations))
    print(json.dumps({"seconds": {"preprocess": t_pre, "reconstruct": t_rec},
                      "settings": {"slices": slices, "slice_thickness": thickness / slices, "iterations": iterations,
                                   "step_size": step_size, "max_batch_size": batch, "rotation_deg": rotation,
                                   "transpose": bool(transpose), "C10": c10},
                      "error": float(rec.error), "object_shape": list(phase.shape), "py4dstem": py4DSTEM.__version__}))


if __name__ == "__main__":
    args = sys.argv[3:]
    casts = (int, int, float, int, float, int)
    main(sys.argv[1], sys.argv[2], *(cast(v) for cast, v in zip(casts, args)))
