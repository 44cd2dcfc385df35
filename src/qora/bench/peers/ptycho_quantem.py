"""quantem's iterative multislice ptychography (PyTorch) on an abTEM fixture, or timed on a synthetic scan: the
peer of ``qora bench ssb-ptycho``.

Run by quantem's own environment (quantem 0.1.10: /work/envs/quantem, bench/quantem-env.sh), never by qora:

    python ptycho_quantem.py FIXTURE.npz OUT.npz [--slices 4] [--iterations 20] [--batch 64] [--modes 1]
        [--device cpu|cuda] [--lr 0.1] [--lr-probe 0.1] [--optimizer sgd|adamw|adam] [--autograd] [--seed 0]
    python ptycho_quantem.py --timing [--positions 16384] [--detector 128] [--slices 10] [--modes 4]
        [--iterations 2] [--batch 512] [--device cuda] (and the options above)

quantem is built as its ``PtychoLite`` builds itself (``PtychographyDatasetRaster``, a pixelated complex object
started uniform, a pixelated probe of M modes from the optics, quantem's default weights between them) and run by
``Ptychography.reconstruct``: its l2 amplitude loss, shuffled batches of B positions with one optimiser step per
batch, no scheduler, no position or descan learning, no regularisation. The default is quantem's analytic gradient
with its ePIE step normalisation (``autograd=False``) and plain SGD, steps 0.1 on the object and on the probe:
on the 8 A set it scored best of what was tried and is converged by 20 iterations (a thick set wants more).
``--optimizer adamw --autograd --lr 5e-3 --lr-probe 1e-3`` is PtychoLite's own choice (its batch: the whole scan).

Quality mode. FIXTURE is one of tests/ssb/fixtures/abtem_srtio3_ptycho_*.npz: its ``counts`` (scan_row, scan_col,
det_row, det_col), qora's layout, which quantem reads as (Rx, Ry, Qx, Qy), and the truth, all given to quantem: the
energy, the semiangle, qora's C10 as quantem's C10 (both minus the defocus: quantem's alias ``defocus`` is -C10, so
abTEM's defocus -100 A is C10 = +100 A), the scan step, the detector's mrad per pixel, S equal slices over
``thickness`` (quantem's slice_thicknesses are the S - 1 propagation distances), the rotation forced to 0 and no
transpose, the patterns' centre (quantem's ``no_shift``, the detector's middle, where ``detector_center`` is it;
else its ``constant`` fit, the mean centre of mass), and half the probe window of padding around the scan (quantem's
own default, none, lets a window wrap around the object's periodic grid).

Writes to OUT.npz: ``phase``, the object's phase summed over the slices (the sum of each slice's angle),
``slice_phases`` (slices, rows, cols) each slice's angle (the entrance first), ``sampling`` (A per object pixel, row
and column), ``positions_px`` (each scan position's probe centre in object pixels, raster order (scan_row,
scan_col): quantem's probe is corner-centred and a window's pixel 0 is its position), ``scan_map`` (the 2 x 3 affine
from (scan_row, scan_col, 1) to the object's (row, col), fitted to those positions) and ``errors`` (quantem's loss by
iteration). Prints one JSON line: the seconds of preprocess, of reconstruct and of each iteration, the settings, the
final loss, quantem's version and, on cuda, torch.cuda.max_memory_allocated.

Timing mode mirrors ``pass_time`` of src/qora/bench/ssb_ptycho.py: a raster of ``positions`` (a square number) of
random positive counts on ``detector``^2 pixels (300 kV, 25 mrad, C10 100 A; object pixels of 0.1 A, so the probe
window is ``detector``^2 object pixels; a scan step of 2 object pixels as qora's), ``slices`` slices 10 A apart and
``modes`` probe modes, batches of 512 positions (quantem's default, the whole scan in one batch, cannot fit a GPU at
this size). Prints one JSON line: the seconds of preprocess and of each iteration, the median after the first (the
warm-up), positions per second and the peak GPU memory of the iterations.
"""

import json
import time
import warnings

import numpy as np
from ptycho_common import (ALPHA, C10, KV, TIMING_PIXEL, detector_mrad, dispatch, parser, peak_memory, scan_map,
                           synthetic_counts, timing_summary)


def build(counts, *, kv, alpha, c10, step, mrad, slices, thickness, modes, device, seed, centre="no_shift"):
    """A preprocessed quantem PtychoLite for ``counts`` (scan_row, scan_col, det_row, det_col) and the truth;
    ``centre`` is quantem's com_fit_function (module docstring)."""
    import torch
    from quantem.core.datastructures.dataset4dstem import Dataset4dstem
    from quantem.diffractive_imaging import PtychographyDatasetRaster, PtychoLite

    class Timed(PtychoLite):
        """PtychoLite stamping the end of each iteration (synchronised), for the seconds per iteration."""

        stamps: list = []

        def _record_iter(self, iter_loss, autograd):
            super()._record_iter(iter_loss, autograd)
            if str(self._single_device).startswith("cuda"):
                torch.cuda.synchronize()
            self.stamps.append(time.perf_counter())

    energy = kv * 1e3
    pad = (counts.shape[-2] // 2, counts.shape[-1] // 2)
    ds = Dataset4dstem.from_array(counts, sampling=(step, step, mrad, mrad), units=["A", "A", "mrad", "mrad"])
    dset = PtychographyDatasetRaster.from_dataset4dstem(ds, verbose=0, learn_descan=False, learn_scan_positions=False)
    dset.preprocess(com_fit_function=centre, force_com_rotation=0.0, force_com_transpose=False,
                    obj_padding_px=pad, plot_rotation=False, plot_com=False, probe_energy=energy)
    ptycho = Timed.from_dataset(dset, num_slices=slices, slice_thicknesses=thickness / slices if slices > 1 else None,
                                num_probes=modes, energy=energy, semiangle_cutoff=alpha,
                                polar_parameters={"C10": c10}, obj_padding_px=pad, device=device, verbose=0, rng=seed)
    ptycho.stamps = []
    return ptycho


def run(ptycho, *, iterations, batch, lr, lr_probe, optimizer, analytic):
    """Reconstructs; returns (seconds in all, seconds of each iteration)."""
    import torch
    from quantem.diffractive_imaging import Ptychography

    params = {"object": {"name": optimizer, "lr": lr}}
    if lr_probe > 0:
        params["probe"] = {"name": optimizer, "lr": lr_probe}
    if ptycho.device.startswith("cuda"):
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    # PtychoLite.reconstruct less its fixed choice of AdamW: the same call it makes, all schedulers "none"
    Ptychography.reconstruct(ptycho, num_iters=iterations, optimizer_params=params,
                             scheduler_params={k: {"name": "none"} for k in params}, batch_size=batch,
                             autograd=not analytic)
    total = time.perf_counter() - t0
    return total, np.diff([t0] + ptycho.stamps).tolist()


def quality(args):
    import quantem

    data = np.load(args.fixture)
    counts = np.asarray(data["counts"], np.float32)
    kv, alpha, c10 = float(data["kv"]), float(data["alpha_mrad"]), float(data["C10"])
    step, mrad = float(data["scan_step"]), float(data["detector_mrad_per_pixel"])
    thickness = float(data["thickness"])
    middle = np.asarray(counts.shape[-2:]) / 2
    centre = "no_shift" if np.allclose(data.get("detector_center", middle + 1), middle) else "constant"
    t0 = time.perf_counter()
    ptycho = build(counts, kv=kv, alpha=alpha, c10=c10, step=step, mrad=mrad, slices=args.slices,
                   thickness=thickness, modes=args.modes, device=args.device, seed=args.seed, centre=centre)
    t_pre = time.perf_counter() - t0
    t_rec, per_iter = run(ptycho, iterations=args.iterations, batch=args.batch, lr=args.lr, lr_probe=args.lr_probe,
                          optimizer=args.optimizer, analytic=not args.autograd)
    slice_phases = np.angle(np.asarray(ptycho.obj))
    positions = np.asarray(ptycho.dset.scan_positions_px.detach().cpu().numpy(), np.float64)
    errors = np.asarray(ptycho.iter_losses)
    np.savez(args.out, phase=slice_phases.sum(0), slice_phases=slice_phases.astype(np.float32),
             sampling=np.asarray(ptycho.sampling, np.float64), positions_px=positions,
             scan_map=scan_map(positions, *counts.shape[:2]), errors=errors)
    print(json.dumps({"seconds": {"preprocess": t_pre, "reconstruct": t_rec, "per_iteration": per_iter},
                      "settings": {"slices": args.slices, "slice_thickness": thickness / args.slices,
                                   "iterations": args.iterations, "batch": args.batch, "modes": args.modes,
                                   "lr_obj": args.lr, "lr_probe": args.lr_probe, "optimizer": args.optimizer,
                                   "analytic": not args.autograd, "loss": "l2_amplitude", "device": args.device,
                                   "rotation_deg": 0.0, "transpose": False, "C10": c10, "centre": centre,
                                   "padding_px": [int(p) for p in ptycho.obj_padding_px], "seed": args.seed},
                      "loss": float(errors[-1]), "object_shape": list(slice_phases.shape),
                      "quantem": quantem.__version__, "peak_bytes": peak_memory(args.device)}))


def timing(args):
    import quantem
    import torch
    from quantem.core.utils.utils import electron_wavelength_angstrom

    n = args.detector
    side, counts = synthetic_counts(args.positions, n, args.seed, flat=False)
    t0 = time.perf_counter()
    ptycho = build(counts, kv=KV, alpha=ALPHA, c10=C10, step=2 * TIMING_PIXEL,
                   mrad=detector_mrad(electron_wavelength_angstrom(KV * 1e3), n), slices=args.slices,
                   thickness=10.0 * args.slices, modes=args.modes, device=args.device, seed=args.seed)
    del counts
    t_pre = time.perf_counter() - t0
    if args.device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    _, per_iter = run(ptycho, iterations=args.iterations, batch=args.batch, lr=args.lr, lr_probe=args.lr_probe,
                      optimizer=args.optimizer, analytic=not args.autograd)
    print(json.dumps({**timing_summary(args, per_iter), "seconds": {"preprocess": t_pre, "iterations": per_iter},
                      "settings": {"batch": args.batch, "device": args.device, "optimizer": args.optimizer,
                                   "analytic": not args.autograd, "lr_obj": args.lr,
                                   "lr_probe": args.lr_probe, "object_shape": [int(v) for v in ptycho.obj_shape_full],
                                   "object_pixel_A": TIMING_PIXEL, "scan_step_px": 2},
                      "quantem": quantem.__version__, "torch": torch.__version__}))


def main(argv=None):
    p = parser(__doc__)
    p.add_argument("--lr", type=float, default=0.1, help="the object's learning rate")
    p.add_argument("--lr-probe", type=float, default=0.1, help="the probe's learning rate (0: a fixed probe)")
    p.add_argument("--optimizer", choices=("sgd", "adamw", "adam"), default="sgd")
    p.add_argument("--autograd", action="store_true",
                   help="autograd's gradient instead of quantem's analytic one with its ePIE step normalisation")
    args = p.parse_args(argv)
    warnings.filterwarnings("ignore")
    defaults = (dict(slices=10, modes=4, iterations=2, batch=512, device="cuda") if args.timing else
                dict(slices=4, modes=1, iterations=20, batch=64, device="cpu"))
    dispatch(p, args, defaults, quality=quality, timing=timing)

if __name__ == "__main__":
    main()
