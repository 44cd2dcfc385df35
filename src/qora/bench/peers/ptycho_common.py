"""What the iterative ptychography peers' scripts (ptycho_quantem.py, ptycho_ptyrad.py) share: their command line's
common part, the synthetic scan of their timing mode, the fit of a scan map to a peer's positions, the peak GPU
memory, and the timing line they print.

Those scripts run by path in a peer's own environment, where this folder is ``sys.path[0]``: they import this
module by its bare name. It needs NumPy alone (torch only where a peak is asked for on cuda).
"""

import argparse

import numpy as np

KV, ALPHA, C10 = 300.0, 25.0, 100.0  # the timing mode's optics
TIMING_PIXEL = 0.1  # A per object pixel in the timing mode: the probe window is detector^2 object pixels


def parser(doc: str) -> argparse.ArgumentParser:
    """The scripts' parser with the arguments they share: FIXTURE OUT, --timing, --positions, --detector, --slices,
    --modes, --iterations, --batch, --device, --seed (each script adds its own optimiser's)."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("fixture", nargs="?")
    p.add_argument("out", nargs="?")
    p.add_argument("--timing", action="store_true")
    p.add_argument("--positions", type=int, default=128**2)
    p.add_argument("--detector", type=int, default=128)
    for name in ("--slices", "--modes", "--iterations", "--batch"):
        p.add_argument(name, type=int)
    p.add_argument("--device")
    p.add_argument("--seed", type=int, default=0)
    return p


def dispatch(p: argparse.ArgumentParser, args, defaults: dict, *, quality, timing) -> None:
    """Fills every argument left unset from ``defaults``, then runs ``timing(args)`` or ``quality(args)``."""
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.timing:
        timing(args)
    elif args.fixture and args.out:
        quality(args)
    else:
        p.error("FIXTURE and OUT are needed, or --timing")


def synthetic_counts(positions: int, detector: int, seed: int, *, flat: bool) -> tuple[int, np.ndarray]:
    """The timing mode's scan: (side, counts) for a square raster of ``positions`` with random positive counts,
    float32, (side, side, detector, detector), or (positions, detector, detector) where ``flat``."""
    side = int(round(positions**0.5))
    if side * side != positions:
        raise SystemExit(f"--positions must be a square number, got {positions}")
    shape = ((positions,) if flat else (side, side)) + (detector, detector)
    return side, np.random.default_rng(seed).random(shape, dtype=np.float32) * 10 + 0.1


def detector_mrad(wavelength_a: float, detector: int) -> float:
    """The detector pixel (mrad) that makes the timing mode's object pixels TIMING_PIXEL."""
    return wavelength_a / (detector * TIMING_PIXEL) * 1e3


def scan_map(positions, rows: int, cols: int) -> np.ndarray:
    """The 2 x 3 affine from (scan_row, scan_col, 1) to the object's (row, col), least squares over ``positions``
    (rows * cols, 2) in raster order."""
    ii, jj = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    design = np.stack([ii.ravel(), jj.ravel(), np.ones(ii.size)], 1)
    return np.linalg.lstsq(design, np.asarray(positions, np.float64), rcond=None)[0].T


def peak_memory(device: str):
    """torch.cuda.max_memory_allocated on cuda (bytes), else None."""
    if not device.startswith("cuda"):
        return None
    import torch

    return int(torch.cuda.max_memory_allocated())


def timing_summary(args, per_iteration) -> dict:
    """The timing line's shared keys: the case, the median seconds an iteration after the first (the warm-up),
    positions per second and the peak GPU memory."""
    seconds = float(np.median(per_iteration[1:] if len(per_iteration) > 1 else per_iteration))
    return {"timing": f"{args.positions}x{args.detector}/{args.slices}s{args.modes}m", "seconds_per_iteration": seconds,
            "positions_per_s": args.positions / seconds, "peak_bytes": peak_memory(args.device)}
