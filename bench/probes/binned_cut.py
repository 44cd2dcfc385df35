"""Probe (issue 37's binned variant): detwin the search's result after the fact. The swollen result on the 2 x 2
binned logo is the logo and its twin superposed, point-symmetric about a centre c (bench/probes/binned_twin_trace.py).
Each start's result is cut by a half plane through c (rows or columns, either side), and the cut object starts a
positivity pass (its support grown by G px) and the refinement again; each candidate traced as there.

    PYTHONPATH=src:bench/probes python bench/probes/binned_cut.py [STARTS] [GROW] [file]
"""

import sys
import time

import numpy as np

from binned_fine_model import binned_rfactor
from binned_twin_trace import say, setup, traced_envelope

from qora.phase import analysis, envelope as E


def symmetry_centre(o):
    """The centre of the point reflection that maps ``o`` closest onto itself (peak of o * o correlation) and
    the normalised peak (1: point-symmetric)."""
    f = np.fft.rfft2(o)
    c = np.fft.irfft2(f * f, s=o.shape)
    s = np.unravel_index(int(c.argmax()), c.shape)
    # o(r) ~ o(s - r) (mod n): centre at s / 2, modulo half the array
    return np.array(s, float) / 2, float(c.max() / np.sum(o * o))


def half_plane(shape, centre, axis, side):
    index = np.arange(shape[axis]).reshape((-1, 1) if axis == 0 else (1, -1))
    inside = index < centre[axis] if side == "lo" else index >= centre[axis]
    return np.broadcast_to(inside, shape)


def search_to_refined(pattern, run, starts, truth):
    x, support, steps, draw = traced_envelope(pattern, run, starts, truth)
    for p in range(2):
        support = steps.grown(support, E.GROW)
        x, support = E.positive_pass(run, steps, draw(lambda r: r.random(pattern.shape).astype(np.float32)) * support,
                                     support)
    support = steps.grown(support, 1)
    x = run.positive(x * support, support, E.REFINE[0], hio=True, damp=1.0)
    return run.positive(x, support, E.REFINE[1], hio=False, damp=1.0), support, steps


def main(starts=2, grow=3, which="binned"):
    pattern, run, intensity, mask, truth, binned, bmask = setup(starts, which)
    t0 = time.perf_counter()
    x, support, steps = search_to_refined(pattern, run, starts, truth)
    say("refined (the default)", x, support, truth)
    for k in range(starts):
        centre, sym = symmetry_centre(np.clip(x[k], 0, None).astype(np.float64))
        print(f"start {k}: symmetric {sym:.2f} about {centre}", flush=True)
    for axis in (0, 1):
        for side in ("lo", "hi"):
            cut = np.empty_like(support)
            for k in range(starts):
                centre, _ = symmetry_centre(np.clip(x[k], 0, None).astype(np.float64))
                # the centre modulo half the array: take the one inside the support's bounding box
                centre = np.where(centre < np.array(x[k].shape) / 4, centre + np.array(x[k].shape) / 2, centre)
                cut[k] = support[k] & half_plane(support[k].shape, centre, axis, side)
            xs = (x * cut).astype(np.float32)
            s = steps.grown(cut, grow)
            xs, s = E.positive_pass(run, steps, xs * s, s)
            s = steps.grown(s, 1)
            xs = run.positive(xs * s, s, E.REFINE[0], hio=True, damp=1.0)
            xs = run.positive(xs, s, E.REFINE[1], hio=False, damp=1.0)
            say(f"cut {axis} {side}", xs, s, truth)
            for k in range(starts):
                r = analysis.amplitude_rfactor(xs[k], intensity, mask) if which == "file" else binned_rfactor(
                    xs[k], binned, bmask)
                print(f"  start {k}: R {r:.4f}, IoU {analysis.support_iou(s[k], truth):.3f}, {int(s[k].sum())} px",
                      flush=True)
    print(f"{time.perf_counter() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2, int(sys.argv[2]) if len(sys.argv) > 2 else 3,
         sys.argv[3] if len(sys.argv) > 3 else "binned")
