"""Questions 2 and 3: the real-object search (envelope.search's steps) with a locator set L as the start support
and/or a hard upper bound on every support update.

  --bins 2x2 / 1x2: the fine model of binned_fine_model.py (512^2 grid, each measured bin the sum of its sub-pixels),
      5% of the bins held out (binned_free_r.held_out_bins, hold seed 0) for a free R.
  --bins 1x1: the default's own pattern (Friedel-completed) and iterations (the CPU's fused path), R and IoU as the
      benchmark scores them (R <= 0.13, IoU >= 0.55).
  --mode none: the search as it is; bound: envelope as usual, then L aligned to each start's envelope object and
      every grown / shrinkwrapped support intersected with it; start: no envelope, the first positivity pass starts
      from L (the second from the first's result grown 10 px, as the default); both: start from L and bound by it.
  --locator ideal2 / ideal3: the pair / triple locator of the true S - S (oracle: what a perfect A would give);
      FILE.npz:KEY: a data-derived set saved by measure_sets.py.

    cd /work/main && PYTHONPATH=src:bench/probes .venv/bin/python bench/probes/binned_locator/search_bound.py \
        --bins 2x2 --mode bound --locator ideal3 --starts 3
"""

import argparse
import os
import sys
import time

import numpy as np
import scipy.ndimage

sys.path.insert(0, os.path.dirname(__file__))
import locator as loc  # noqa: E402
from binned_free_r import FineIterations, FinePattern, envelope_stage, held_out_bins, rfactors  # noqa: E402

from qora.phase import analysis, envelope as E  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def log(msg):
    print(msg, flush=True)


def get_locator(name, truth, shape):
    if name in ("ideal2", "ideal3"):
        A = loc.ideal_ac_support(truth)
        ext = loc.extreme_points(A, 16)
        if name == "ideal2":
            return min((loc.locator(A, v) for _, v in ext), key=lambda L: L.sum())
        # the triple pick of measure_sets.py on the ideal S - S
        return loc.locator(A, (-138, 65), (-41, 125))
    path, _, key = name.partition(":")
    return np.load(path if os.path.isabs(path) else os.path.join(HERE, path))[key].astype(bool)


def search(pattern, rngs, run, ndi, L=None, mode="none", threshold=0.15, trace=None):
    xp, shape = np, pattern.shape
    steps = E._Supports(xp, ndi, len(shape))
    draw = lambda make: np.stack([make(r) for r in rngs])  # noqa: E731
    n = len(rngs)
    bound = None
    if mode in ("start", "both"):
        support = np.broadcast_to(L, (n,) + shape).copy()
        if mode == "both":
            bound = support.copy()
    else:
        x, support, _, _ = envelope_stage(pattern, rngs, run, ndi)
        if trace:
            trace("envelope", support)
        if mode == "bound":
            bound = np.stack([loc.align(L, x[k]) for k in range(n)])
    bounded = None if bound is None else (lambda cycle, x, s: None if cycle < 0 else s & bound)
    for p in range(2):
        if not (p == 0 and mode in ("start", "both")):
            support = steps.grown(support, E.GROW)
            if bound is not None:
                support = support & bound
        x = draw(lambda r: r.random(shape).astype(np.float32)) * support
        x, support = E.positive_pass(run, steps, x, support, threshold=threshold, after=bounded)
        if trace:
            trace(f"pass {p + 1}", support)
    support = steps.grown(support, 1)
    if bound is not None:
        support = support & bound
    x = run.positive(x * support, support, E.REFINE[0], hio=True, damp=1.0)
    return run.positive(x, support, E.REFINE[1], hio=False, damp=1.0), support


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bins", default="2x2")
    ap.add_argument("--mode", default="none", choices=["none", "bound", "start", "both"])
    ap.add_argument("--locator", default="ideal3")
    ap.add_argument("--starts", type=int, default=3)
    ap.add_argument("--start-seed", type=int, default=0)
    ap.add_argument("--threshold", type=float, default=0.15)
    ap.add_argument("--save", default="")
    args = ap.parse_args()
    from qora.bench.phase_measured import load_logo

    intensity, mask, truth = load_logo()
    b = tuple(int(v) for v in args.bins.split("x"))
    L = None if args.mode == "none" else get_locator(args.locator, truth, intensity.shape)
    refs = {"ideal2": get_locator("ideal2", truth, None), "ideal3": get_locator("ideal3", truth, None)}
    if L is not None:
        log(f"locator {args.locator}: {int(L.sum())} px, holds {loc.containment(L, truth):.4f} of the logo")
    trace = lambda stage, s: log(f"  {stage}: support px {[int(v.sum()) for v in s]}, IoU "  # noqa: E731
                                 f"{[round(analysis.support_iou(v, truth), 3) for v in s]}, logo inside "
                                 f"{[round(loc.containment(v, truth), 3) for v in s]}")
    rngs = [np.random.default_rng(args.start_seed + k) for k in range(args.starts)]
    t0 = time.perf_counter()
    if b == (1, 1):
        from qora.phase import envelope_cpu
        from qora.phase.envelope_iterate import ArrayIterations, FastCpuIterations, Pattern

        pattern = Pattern(intensity, mask, np)
        run = (FastCpuIterations if envelope_cpu.available() else ArrayIterations)(pattern, args.starts)
        x, s = search(pattern, rngs, run, scipy.ndimage, L, args.mode, args.threshold, trace)
        sec = time.perf_counter() - t0
        for k in range(args.starts):
            r = analysis.amplitude_rfactor(x[k], intensity, mask)
            iou = analysis.support_iou(s[k], truth)
            ok = r <= 0.13 and iou >= 0.55
            log(f"start {args.start_seed + k}: R {r:.4f}  IoU {iou:.3f}  support {int(s[k].sum())} px  "
                f"{'success' if ok else 'FAIL'}  inside ideal L2 {loc.containment(refs['ideal2'], s[k]):.3f}  "
                f"({sec / args.starts:.1f} s per start)")
    else:
        n0, n1 = intensity.shape
        binned, bmask = loc.bin_pattern(intensity, mask, b)
        bmeas = ~bmask
        held = held_out_bins(bmeas, b, 0.05, 0, friedel=True)
        work = bmeas & ~held[0]
        pattern = FinePattern(binned, work, b)
        run = FineIterations(pattern, args.starts)
        x, s = search(pattern, rngs, run, scipy.ndimage, L, args.mode, args.threshold, trace)
        sec = time.perf_counter() - t0
        for k in range(args.starts):
            rw, rf, ra = rfactors(x[k], binned, [work, held[0], bmeas], b)
            iou = analysis.support_iou(s[k], truth)
            log(f"start {args.start_seed + k}: R work {rw:.4f}  R free {rf:.4f}  R all {ra:.4f}  IoU {iou:.3f}  "
                f"support {int(s[k].sum())} px  logo inside {loc.containment(s[k], truth):.3f}  inside ideal L2 "
                f"{loc.containment(refs['ideal2'], s[k]):.3f}, L3 {loc.containment(refs['ideal3'], s[k]):.3f}  "
                f"({sec / args.starts:.1f} s per start)")
    log(f"{args.bins} {args.mode} {args.locator}: {sec:.0f} s for {args.starts}")
    if args.save:
        np.savez_compressed(os.path.join(HERE, args.save), objects=x, supports=np.asarray(s))


if __name__ == "__main__":
    main()
