"""Probe (issue 37's binned variant): two ways to break the twin superposition the search ends on with the 2 x 2
binned logo (bench/probes/binned_twin_trace.py), on the fine model, traced as there.

    PYTHONPATH=src:bench/probes python bench/probes/binned_detwin.py VARIANT [STARTS] [file]

VARIANT: ``envelope-start``: the first positivity pass starts from the envelope's modulus, not from noise (the
envelope is the least twinned iterate of the search); ``suppress:L``: before every shrinkwrap of the positivity
passes, the iterate less L times its point reflection about its own centre of symmetry, clipped at 0 (the dominant
of two superposed images grows, the other shrinks); ``both:L``; ``grow:G``: the envelope's support grown by G px
before the positivity passes (the default's 10 px leaves room for the twin's placement); ``grow:G,th:T``: and the
positivity passes' shrinkwrap threshold T (0.15 by default); with ``quarter`` among the comma-separated parts,
the envelope's complex passes start from the autocorrelation's support cut at its centre along both axes, not one;
``half:AXIS:SIDE`` (AXIS 0 or 1, SIDE ``lo`` or ``hi``): the first positivity pass's first HIO runs on the grown
support cut at its centre of mass along AXIS (Fienup and Wackerman's half support: room for one of two superposed
images), the pass's cycles on the whole grown support.
"""

import sys
import time

import numpy as np

from binned_fine_model import binned_rfactor
from binned_free_r import rfactors
from binned_twin_trace import say, setup, traced_envelope, tracer

from qora.phase import analysis, envelope


def reflected(x):
    """Each start's iterate reflected through its own centre of symmetry (the peak of its correlation with its
    point reflection)."""
    out = np.empty_like(x)
    for k, o in enumerate(x):
        f = np.fft.rfft2(o)
        c = np.fft.irfft2(f * f, s=o.shape)
        s = np.unravel_index(int(c.argmax()), c.shape)
        out[k] = np.roll(o[::-1, ::-1], (s[0] + 1, s[1] + 1), (0, 1))
    return out


def _quarter(support, xp, ndi):
    """The autocorrelation's support cut at its centre of mass along both axes: for a convex object the quadrant
    of S - S holds a translate of S."""
    centre = ndi.center_of_mass(support.astype(xp.float32))
    rows = xp.arange(support.shape[0]).reshape(-1, 1)
    cols = xp.arange(support.shape[1]).reshape(1, -1)
    return support & (rows < centre[0]) & (cols < centre[1])


def _half(support, axis, side):
    """Each start's support cut at its centre of mass along ``axis``, the ``side`` ("lo" or "hi") kept."""
    out = np.empty_like(support)
    for k, s in enumerate(np.asarray(support)):
        centre = float(np.nonzero(s)[axis].mean())
        index = np.arange(s.shape[axis]).reshape((-1, 1) if axis == 0 else (1, -1))
        out[k] = s & ((index < centre) if side == "lo" else (index >= centre))
    return out


def _restoring(whole, after):
    """positive_pass's ``after``: the whole support back after the first HIO, then ``after`` as before."""
    def hook(cycle, x, support):
        if cycle == -1:
            return whole
        return after(cycle, x, support)
    return hook


def main(variant, starts=2, which="binned"):
    pattern, run, intensity, mask, truth, binned, bmask = setup(starts, which)
    start_from_envelope = variant.startswith(("envelope-start", "both"))
    lam = float(variant.split(":")[1]) if variant.startswith(("suppress", "both")) else 0.0
    opts = dict(part.split(":") for part in variant.split(",") if part.startswith(("grow:", "th:")))
    grow, threshold = int(opts.get("grow", envelope.GROW)), float(opts.get("th", 0.15))
    half = [part.split(":")[1:] for part in variant.split(",") if part.startswith("half:")]
    if "quarter" in variant.split(","):
        envelope._twin_half = _quarter
    t0 = time.perf_counter()
    x, support, steps, draw = traced_envelope(pattern, run, starts, truth)
    E = envelope
    suppress = (lambda x: np.ascontiguousarray(np.clip(x - lam * reflected(x), 0, None), np.float32)) if lam else None
    for p in range(2):
        support = steps.grown(support, grow)
        if start_from_envelope and p == 0:
            x = (np.abs(x) * support).astype(np.float32)
        else:
            x = draw(lambda r: r.random(pattern.shape).astype(np.float32)) * support
        after = tracer(p, truth)
        if half and p == 0:
            whole, support = support, _half(support, int(half[0][0]), half[0][1])
            x = x * support
            after = _restoring(whole, after)
        x, support = E.positive_pass(run, steps, x, support, threshold=threshold, edit=suppress, after=after)
    support = steps.grown(support, 1)
    x = run.positive(x * support, support, E.REFINE[0], hio=True, damp=1.0)
    x = run.positive(x, support, E.REFINE[1], hio=False, damp=1.0)
    say("refined", x, support, truth)
    for k in range(starts):
        r = (analysis.amplitude_rfactor(x[k], intensity, mask) if which == "file"
             else rfactors(x[k], binned, [~bmask], (1, 2))[0] if which == "1x2" else binned_rfactor(x[k], binned, bmask))
        print(f"start {k}: R {r:.4f}, IoU {analysis.support_iou(support[k], truth):.3f}, "
              f"{int(support[k].sum())} px", flush=True)
    print(f"{time.perf_counter() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 2, sys.argv[3] if len(sys.argv) > 3 else "binned")
