"""PtyRAD's multislice ptychography (PyTorch, automatic differentiation) on an abTEM fixture, or timed on a synthetic
scan: a peer of ``qora bench ssb-ptycho``.

Run by PtyRAD's own environment (ptyrad 1.0.0 in /work/envs/quantem), never by qora:

    python ptycho_ptyrad.py FIXTURE.npz OUT.npz [--slices 4] [--iterations 30] [--batch 4] [--modes 1]
        [--device cpu|cuda] [--lr 2.5e-4] [--lr-probe 1e-4] [--lr-pos 0] [--rblur 0] [--zblur 1] [--seed 0]
        [--flipT 0,0,0] [--defaults]
    python ptycho_ptyrad.py --timing [--positions 16384] [--detector 128] [--slices 10] [--modes 4]
        [--iterations 3] [--batch 64] [--device cuda] (and the options above)

PtyRAD is run as its CLI ``ptyrad run`` runs it (``set_gpu_device``; the params filled with defaults and validated by
its pydantic ``PtyRADParams``; ``PtyRADSolver(params, device, seed)`` and its ``reconstruct``, what ``run`` calls),
on a params dict built here: the measurements as an array (``meas_source: custom``, (N_scans, ky, kx)), the probe
simulated from the optics, raster positions simulated, the object started uniform. The optimisation is PtyRAD's:
autograd through its multislice model, Adam on the object's amplitude and phase, the probe and the positions' sub-
pixel shifts, its default loss (``loss_single``: the normalised RMS error of the patterns' square roots), batches of
random positions, one step per batch, its constraints ``ortho_pmode``, ``fix_probe_int``, ``pos_recenter`` and
``obj_zblur`` (std 1 slice). No output folder (``SAVE_ITERS: null``); the working directory and ``output_dir`` are
a temporary folder. Below Python 3.12 PtyRAD's plotting/basic.py (one f-string only 3.12 parses) is loaded from its
source with that string's quotes swapped.

Tuning, on the 8 A set (CPU, seed 0, the '2alpha' r of bench/probes/ptycho_peer_score.py; seed to seed r moves by
~0.005). PtyRAD's recommendation (walkthrough 01_multi_slice.yaml, its templates and defaults: object rate 5e-4,
probe 1e-4, positions 5e-4 from positions jittered by 0.15 px, batch 32, obj_rblur std 0.4 px) climbs slowly at 1
mode (r 0.796 at 15 iterations, 0.913 at 60, 0.919 at 100; batch 64: 0.905 at 100); larger object rates are worse
(2e-3: 0.854, 5e-3: 0.851 at 40), half of it better (2.5e-4: 0.933 at 100 and 150; 1.25e-4: 0.933 at 200); smaller
batches better still (2.5e-4 at batch 16: 0.938 at 60, at 8: 0.944 at 40 (0.941-0.944 over 3 seeds), at 4: 0.952 at
30 (0.944-0.952), at 2: 0.953 at 15), at ~1 s an iteration against 0.7 s at 32; more iterations do not help there
(batch 4, 1.25e-4: 0.947 at 40 and at 60). A fixed probe is worse (0.811 against 0.913), as are a probe rate of 5e-5
(0.910 against 0.933) and obj_rblur 0.4 (0.908 against 0.913); probe rates of 2e-4 or 5e-4, position learning and
obj_zblur off each move r by 0.006 or less. Defaults here: batch 4, object rate 2.5e-4, probe 1e-4, 30 iterations
(~35 s on 2 CPU cores), positions fixed at the truth (no jitter), no obj_rblur: r 0.952 / 0.940 / 0.938 at 2alpha /
grid / alpha+detector. ``--defaults``, PtyRAD's plain defaults but for the truth (200 iterations, batch 32, 4 probe
modes, the rates, position learning and obj_rblur above): 0.938 / 0.922 / 0.920 (6 minutes on the CPU).

Quality mode. FIXTURE is one of tests/ssb/fixtures/abtem_srtio3_ptycho_*.npz: its ``counts`` (scan_row, scan_col,
det_row, det_col), qora's layout, reshaped to PtyRAD's (N_scans, ky, kx) with scan_row the slow axis and no flip or
transpose (``meas_flipT`` [0,0,0]: PtyRAD's positions are (y, x) = (row, col), its patterns fftshift2(fft2) of the
exit wave with ky along the rows; of the 8 flips/transposes [0,0,0] scores best by far, r 0.80 at 15 iterations
against 0.39 or less), and the truth, all given to PtyRAD: ``probe_kv``, ``probe_conv_angle``, qora's C10 as its
``C10`` (both minus the defocus, "positive C10 refers to overfocus": abTEM's defocus -100 A is C10 = +100 A; -100
scores -0.22), ``pos_scan_step_size``, ``meas_calibration`` {mode: da, value: the detector's mrad per pixel} (the
object pixel lambda / (N da)), S equal slices over ``thickness`` (``obj_slice_thickness`` thickness / S), no scan
rotation (``pos_scan_affine`` null). The patterns' centre is PtyRAD's, pixel N/2, the fixtures' ``detector_center``.

Writes to OUT.npz: ``phase``, the object's phase summed over the slices (PtyRAD learns the phase itself, unwrapped),
``slice_phases`` (slices, rows, cols, the entrance first), ``sampling`` (A per object pixel, row and column),
``positions_px`` (each scan position's probe centre in object pixels, raster order: PtyRAD's window corner
``crop_pos`` plus its sub-pixel shift plus N/2, its probe centred at pixel N/2 of its window), ``scan_map`` (the
2 x 3 affine from (scan_row, scan_col, 1) to the object's (row, col), fitted to those positions) and ``errors``
(PtyRAD's loss by iteration). Prints one JSON line: the seconds of setup (validation and PtyRAD's initialisation),
of the reconstruction and of each iteration (PtyRAD's synchronised ``iter_times``), the settings, the final loss,
PtyRAD's version and, on cuda, torch.cuda.max_memory_allocated.

Timing mode mirrors ptycho_quantem.py's: a raster of ``positions`` (a square number) of random positive counts on
``detector``^2 pixels (300 kV, 25 mrad, C10 100 A; object pixels of 0.1 A, so the probe window is ``detector``^2
object pixels; a scan step of 2 object pixels), ``slices`` slices 10 A apart, ``modes`` probe modes, batches of 64,
the other settings as quality mode's. Prints one JSON line: the seconds of setup and of each iteration, the median
after the first (the warm-up), positions per second and the peak GPU memory (data, model and iterations).
"""

import json
import os
import sys
import tempfile
import time
import warnings

import numpy as np
from ptycho_common import (ALPHA, C10, KV, TIMING_PIXEL, detector_mrad, dispatch, parser, peak_memory, scan_map,
                           synthetic_counts, timing_summary)

BEST = dict(iterations=30, batch=4, lr=2.5e-4, lr_probe=1e-4, lr_pos=0.0, rblur=0.0, zblur=1.0)  # quality mode
PLAIN = dict(iterations=200, batch=32, modes=4, lr=5e-4, lr_probe=1e-4, lr_pos=5e-4, rblur=0.4, zblur=1.0)


def make_params(meas, scan, *, kv, alpha, c10, step, mrad, slices, thickness, args, out_dir):
    """PtyRAD's params dict (before its validation) for ``meas`` (N_scans, ky, kx) on a ``scan`` (rows, cols)."""
    def on(key, value):  # an update or a constraint: on from iteration 1 where value > 0, else off
        return {"start_iter": 1 if value > 0 else None, key: max(value, 0.0)}

    init = {"probe_kv": kv, "probe_conv_angle": alpha, "probe_aberrations": {"C10": c10},
            "meas_Npix": meas.shape[-1], "pos_N_scans": meas.shape[0], "pos_N_scan_slow": scan[0],
            "pos_N_scan_fast": scan[1], "pos_scan_step_size": step,
            "meas_calibration": {"mode": "da", "value": mrad}, "probe_pmode_max": args.modes,
            "obj_Nlayer": slices, "obj_slice_thickness": thickness / slices,
            "meas_flipT": [int(v) for v in args.flipT.split(",")], "pos_scan_affine": None,
            "pos_scan_rand_std": 0.15 if args.lr_pos > 0 else None,
            "meas_source": "custom", "meas_params": meas}
    model = {"optimizer_params": {"name": "Adam", "configs": {}},
             "update_params": {"obja": on("lr", args.lr), "objp": on("lr", args.lr),
                               "probe": on("lr", args.lr_probe), "probe_pos_shifts": on("lr", args.lr_pos)}}
    constraints = {"obj_rblur": on("std", args.rblur), "obj_zblur": on("std", args.zblur)}
    recon = {"NITER": args.iterations, "BATCH_SIZE": {"size": args.batch, "grad_accumulation": 1},
             "SAVE_ITERS": None, "output_dir": out_dir, "copy_params": False, "convergence_monitor": None}
    return {"init_params": init, "model_params": model, "constraint_params": constraints, "recon_params": recon}


def patch_py311():
    """PtyRAD 1.0.0 claims Python >= 3.10, yet its plotting/basic.py has one f-string (quotes reused inside) that
    only Python >= 3.12 parses; below 3.12 that module is loaded from its source with those quotes swapped."""
    if sys.version_info >= (3, 12) or "ptyrad.plotting.basic" in sys.modules:
        return
    import importlib.util

    import ptyrad

    path = os.path.join(os.path.dirname(ptyrad.__file__), "plotting", "basic.py")
    with open(path, encoding="utf-8") as f:
        source = f.read().replace("{lr_iters['niter'][-1]}", '{lr_iters["niter"][-1]}')
    module = importlib.util.module_from_spec(importlib.util.spec_from_file_location("ptyrad.plotting.basic", path))
    sys.modules[module.__name__] = module
    exec(compile(source, path, "exec"), module.__dict__)


def reconstruct(params, device, seed):
    """Validates ``params`` and runs PtyRAD's solver; returns (model, seconds of setup, seconds of reconstruction)."""
    import torch

    patch_py311()
    from ptyrad.params.ptyrad_params import PtyRADParams
    from ptyrad.runtime.device import set_gpu_device
    from ptyrad.solver import PtyRADSolver

    dev = set_gpu_device("cpu" if device == "cpu" else 0)
    t0 = time.perf_counter()
    params = PtyRADParams(**params).model_dump()
    solver = PtyRADSolver(params, device=dev, seed=seed)
    t_setup = time.perf_counter() - t0
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    solver.reconstruct()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return solver.reconstruct_results, t_setup, time.perf_counter() - t0


def solve(meas, scan, args, **optics):
    """PtyRAD on ``meas`` in a temporary working directory; returns (model, seconds of setup, of reconstruction)."""
    here = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="ptyrad_") as tmp:
        os.chdir(tmp)
        try:
            return reconstruct(make_params(meas, scan, args=args, out_dir=tmp, **optics), args.device, args.seed)
        finally:
            os.chdir(here)


def settings(args, thickness):
    return {"slices": args.slices, "slice_thickness": thickness / args.slices, "iterations": args.iterations,
            "batch": args.batch, "modes": args.modes, "optimizer": "Adam", "lr_obj": args.lr,
            "lr_probe": args.lr_probe, "lr_pos": args.lr_pos, "obj_rblur_std": args.rblur,
            "obj_zblur_std": args.zblur, "loss": "loss_single dp_pow 0.5", "meas_flipT": args.flipT,
            "device": args.device, "seed": args.seed}


def quality(args):
    import ptyrad

    fixture, out = os.path.abspath(args.fixture), os.path.abspath(args.out)
    data = np.load(fixture)
    counts = np.asarray(data["counts"], np.float32)
    rows, cols, n = counts.shape[0], counts.shape[1], counts.shape[-1]
    kv, alpha, c10 = float(data["kv"]), float(data["alpha_mrad"]), float(data["C10"])
    step, mrad, thickness = float(data["scan_step"]), float(data["detector_mrad_per_pixel"]), float(data["thickness"])
    model, t_setup, t_rec = solve(counts.reshape(rows * cols, n, n), (rows, cols), args, kv=kv, alpha=alpha, c10=c10,
                                  step=step, mrad=mrad, slices=args.slices, thickness=thickness)
    slice_phases = model.opt_objp.detach().cpu().numpy()[0].astype(np.float64)
    positions = (model.crop_pos + model.opt_probe_pos_shifts).detach().cpu().numpy().astype(np.float64) + n // 2
    errors = np.asarray([loss for _, loss in model.loss_iters])
    dx = float(model.dx)
    np.savez(out, phase=slice_phases.sum(0), slice_phases=slice_phases.astype(np.float32),
             sampling=np.asarray([dx, dx]), positions_px=positions, scan_map=scan_map(positions, rows, cols),
             errors=errors)
    print(json.dumps({"seconds": {"setup": t_setup, "reconstruct": t_rec, "per_iteration": list(model.iter_times)},
                      "settings": {**settings(args, thickness), "C10": c10, "rotation_deg": 0.0},
                      "loss": float(errors[-1]), "object_shape": list(slice_phases.shape), "pixel_A": dx,
                      "ptyrad": ptyrad.__version__, "peak_bytes": peak_memory(args.device)}))


def timing(args):
    import ptyrad
    import torch
    from ptyrad.optics.constants import get_wavelength_ang

    n = args.detector
    side, counts = synthetic_counts(args.positions, n, args.seed, flat=True)
    model, t_setup, _ = solve(counts, (side, side), args, kv=KV, alpha=ALPHA, c10=C10, step=2 * TIMING_PIXEL,
                              mrad=detector_mrad(get_wavelength_ang(KV), n), slices=args.slices,
                              thickness=10.0 * args.slices)
    per_iter = list(model.iter_times)
    print(json.dumps({**timing_summary(args, per_iter), "seconds": {"setup": t_setup, "iterations": per_iter},
                      "settings": {**settings(args, 10.0 * args.slices), "object_pixel_A": float(model.dx),
                                   "object_shape": list(model.opt_objp.shape), "scan_step_px": 2},
                      "ptyrad": ptyrad.__version__, "torch": torch.__version__}))


def main(argv=None):
    p = parser(__doc__)
    p.add_argument("--lr", type=float, help="the object's amplitude and phase learning rate")
    p.add_argument("--lr-probe", type=float, help="the probe's learning rate (0: a fixed probe)")
    p.add_argument("--lr-pos", type=float, help="the position shifts' learning rate (0: fixed, unjittered)")
    p.add_argument("--rblur", type=float, help="obj_rblur's std in pixels (0: off)")
    p.add_argument("--zblur", type=float, help="obj_zblur's std in slices (0: off)")
    p.add_argument("--flipT", default="0,0,0", help="meas_flipT as flipud,fliplr,transpose")
    p.add_argument("--defaults", action="store_true", help="PtyRAD's plain defaults (module docstring)")
    args = p.parse_args(argv)
    warnings.filterwarnings("ignore")
    defaults = dict(PLAIN if args.defaults else BEST, slices=4, modes=PLAIN["modes"] if args.defaults else 1,
                    device="cpu")
    if args.timing:
        defaults.update(slices=10, modes=4, iterations=3, batch=64, device="cuda")
    dispatch(p, args, defaults, quality=quality, timing=timing)

if __name__ == "__main__":
    main()
