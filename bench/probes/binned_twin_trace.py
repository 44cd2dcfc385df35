"""Probe (issue 37's binned variant): is the swollen result of the search on the 2 x 2 binned logo the logo and its
twin superposed? The search's stages traced on the fine model, each start's object correlated with the makers'
support and with its point reflection (the twin), each at its best translation.

    PYTHONPATH=src:bench/probes python bench/probes/binned_twin_trace.py [STARTS] [file]

``file``: the same trace on the unbinned file (the reference where the search succeeds).
"""

import sys
import time

import numpy as np
import scipy.ndimage

from binned_fine_model import FinePattern
from binned_free_r import FineIterations, envelope_stage
from binned_free_r import FinePattern as RectangularPattern

from qora.phase import analysis, envelope


def twin_scores(x, truth):
    """Per start: (correlation with the truth's support, with its twin), each the peak over translations of the
    normalised cross-correlation of the object's non-negative part (the modulus for complex objects)."""
    t = truth.astype(np.float64)
    ft, fw = np.fft.fft2(t), np.fft.fft2(t[::-1, ::-1].copy())
    out = []
    for o in np.asarray(x):
        o = np.abs(o) if np.iscomplexobj(o) else np.clip(o, 0, None)
        fo, norm = np.fft.fft2(o), np.linalg.norm(o) * np.linalg.norm(t)
        out.append(tuple(float(np.real(np.fft.ifft2(fo * np.conj(f))).max() / norm) for f in (ft, fw)))
    return out


def say(label, x, support, truth):
    parts = [f"d {d:.2f} t {t:.2f} | {int(s.sum())} px IoU {analysis.support_iou(s, truth):.2f}"
             for (d, t), s in zip(twin_scores(x, truth), np.asarray(support))]
    print(f"{label:>22}: " + "; ".join(parts), flush=True)


def setup(starts, which="binned"):
    """The logo (``which`` "file") or its 2 x 2 ("binned") or 1 x 2 ("1x2") binned pattern on the fine model: (pattern, iterations, intensity,
    mask, truth, binned, binned mask)."""
    from qora.bench.phase_measured import load_logo
    from qora.phase.envelope_iterate import FastCpuIterations, Pattern

    intensity, mask, truth = load_logo()
    b = (1, 2) if which == "1x2" else (2, 2)
    n0, n1 = intensity.shape
    binned = np.where(mask, 0, intensity).reshape(n0 // b[0], b[0], n1 // b[1], b[1]).sum(axis=(1, 3))
    bmask = mask.reshape(n0 // b[0], b[0], n1 // b[1], b[1]).any(axis=(1, 3))
    if which == "file":
        pattern = Pattern(intensity, mask, np)
        return pattern, FastCpuIterations(pattern, starts), intensity, mask, truth, binned, bmask
    pattern = FinePattern(binned, bmask) if b == (2, 2) else RectangularPattern(binned, ~bmask, b)
    return pattern, FineIterations(pattern, starts), intensity, mask, truth, binned, bmask


def tracer(p, truth, first_hio=False):
    """positive_pass's ``after``: the twin scores after the first and the last cycle of pass ``p`` (and, with
    ``first_hio``, after its first HIO)."""
    last = envelope.POSITIVE[1] - 1

    def after(cycle, x, support):
        if cycle == -1 and first_hio:
            say(f"pass {p} first HIO", x, support, truth)
        elif cycle in (0, last):
            say(f"pass {p} cycle {cycle}", x, support, truth)

    return after


def traced_envelope(pattern, run, starts, truth):
    """The search's envelope stage (start k from seed k), its twin scores printed: (x, support, steps, draw)."""
    rngs = [np.random.default_rng(k) for k in range(starts)]
    x, support, steps, draw = envelope_stage(pattern, rngs, run, scipy.ndimage)
    say("envelope", x, support, truth)
    return x, support, steps, draw


def main(starts=2, which="binned"):
    pattern, run, _, _, truth, _, _ = setup(starts, which)
    t0 = time.perf_counter()
    x, support, steps, draw = traced_envelope(pattern, run, starts, truth)
    for p in range(2):
        support = steps.grown(support, envelope.GROW)
        x = draw(lambda r: r.random(pattern.shape).astype(np.float32)) * support
        x, support = envelope.positive_pass(run, steps, x, support, after=tracer(p, truth, first_hio=True))
    print(f"{time.perf_counter() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2, sys.argv[2] if len(sys.argv) > 2 else "binned")
