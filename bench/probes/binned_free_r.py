"""Probe (issue 37's binned variant): a free R-factor on the binned logo pattern, reconstructed on the fine grid.

A seeded random share of the measured bins (with their Friedel partners: the bins that hold the mirrors of their
sub-pixels) is held out: unmeasured to every modulus step, scored only at the end (amplitude R-factor on those bins
alone). Two modes:

    # fixed supports (true, true grown by 2/5/10 px, or saved supports), positivity, HIO 800 + ER 200
    PYTHONPATH=src python bench/probes/binned_free_r.py fixed --bins 1x2 --hold-seed 0 --supports true,d2,d5,d10
    # the real-object search of binned_fine_model.py (shrinkwrap threshold of the positivity passes settable)
    PYTHONPATH=src python bench/probes/binned_free_r.py search --bins 1x2 --hold-seed 0 --starts 3 --save F.npz
    # from a saved search: shrinkwrap at a rising threshold, HIO + ER after each, free R per step
    PYTHONPATH=src python bench/probes/binned_free_r.py trim --load F.npz --ramp 0.15:1.0:12 --hio 100 --er 50
"""

import argparse
import time

import numpy as np
import scipy.ndimage

from qora.backend import fft as backend_fft
from qora.phase import analysis, envelope
from qora.phase.envelope_iterate import ArrayIterations


def block_sum(a, b):
    s, ny, nx = a.shape
    return a.reshape(s, ny // b[0], b[0], nx // b[1], b[1]).sum(axis=(2, 4))


def spread(a, b):
    return np.repeat(np.repeat(a, b[0], axis=1), b[1], axis=2)


def mirror_fine(a):
    """Mirror about q = 0 at n//2 (detector layout, even n): index i -> (n - i) mod n."""
    return np.roll(a[::-1, ::-1], 1, axis=(0, 1))


def held_out_bins(bmeasured, b, frac, seed, friedel=True):
    """Seeded random bins (about ``frac`` of the measured ones), each with the bins that hold its sub-pixels' mirrors."""
    rng = np.random.default_rng(seed)
    partners = b[0] * b[1]  # bins a bin's mirror straddles (1 for 1x1, 2 for 1x2, 4 for 2x2)
    f0 = frac / (1 + partners) if friedel else frac
    seeds = (rng.random(bmeasured.shape) < f0) & bmeasured
    if not friedel:
        return seeds, seeds
    fine = np.kron(seeds, np.ones(b, bool))
    m = mirror_fine(fine).reshape(seeds.shape[0], b[0], seeds.shape[1], b[1]).any(axis=(1, 3))
    return (seeds | m) & bmeasured, seeds  # seeds: every sub-pixel's mirror is held out too (no leak)


class FinePattern:
    """What envelope.search needs of a pattern: binned data (bins b) on the fine grid; ``work`` the bins the modulus
    step constrains (measured, not held out)."""

    def __init__(self, binned, work, b):
        self.xp, self.b = np, b
        self.shape = tuple(s * k for s, k in zip(binned.shape, b))
        self.axes = (1, 2)
        fine = np.kron(np.where(work, binned, 0) / (b[0] * b[1]), np.ones(b))
        self.intensity, self.measured = fine, np.kron(work, np.ones(b, bool))
        self.bins = np.fft.ifftshift(np.where(work, binned, 0))
        self.bmeas = np.fft.ifftshift(work)
        self.norm = float(self.bins[self.bmeas].sum())
        self.sqrt_bins = np.sqrt(self.bins).astype(np.float32)


class FineIterations(ArrayIterations):
    def _fit_binned(self, spectrum, damp):
        p = self.p
        model = np.sqrt(block_sum((spectrum.real ** 2 + spectrum.imag ** 2), p.b))
        misfit = np.sum(np.where(p.bmeas, (model - p.sqrt_bins) ** 2, 0), axis=(1, 2))
        factor = np.where(p.bmeas, p.sqrt_bins / np.maximum(model, 1e-12), damp).astype(np.float32)
        return spectrum * spread(factor, p.b), np.sqrt(misfit / p.norm)

    def project_complex(self, x):
        p = self.p
        spectrum, err = self._fit_binned(backend_fft.fftn(x, axes=p.axes, norm="ortho"), 1.0)
        return backend_fft.ifftn(spectrum, axes=p.axes, norm="ortho").astype(np.complex64), err

    def project_real(self, x, damp):
        p = self.p
        spectrum, err = self._fit_binned(backend_fft.fftn(x.astype(np.complex64), axes=p.axes, norm="ortho"), damp)
        return backend_fft.ifftn(spectrum, axes=p.axes, norm="ortho").real.astype(np.float32), err


def rfactors(obj, binned, sets, b):
    """Amplitude R-factor of the object's binned pattern on each boolean bin set (detector layout)."""
    power = np.abs(np.fft.fftshift(np.fft.fft2(obj, norm="ortho"))) ** 2
    model = np.sqrt(block_sum(power[None], b)[0])
    data = np.sqrt(np.maximum(binned, 0))
    return [float(np.sum(np.abs(model - data)[s]) / np.sum(data[s])) for s in sets]


def envelope_stage(pattern, rngs, run, ndi):
    """envelope.search's first stage (complex HIO/ER from the autocorrelation, shrinkwrapped): (x, support, steps,
    draw), what the probes' variants of the positivity passes start from."""
    E = envelope
    xp, shape = pattern.xp, pattern.shape
    steps = E._Supports(xp, ndi, len(shape))
    draw = lambda make: xp.asarray(np.stack([make(r) for r in rngs]))  # noqa: E731
    start = E._autocorrelation(pattern)
    x = draw(lambda r: (r.random(shape) * np.exp(2j * np.pi * r.random(shape))).astype(np.complex64)) * start
    support = xp.broadcast_to(start, x.shape)
    first, cycles, hio, er = E.ENVELOPE
    x = run.complex(x, support, first, hio=True)
    support = xp.broadcast_to(E._twin_half(start, xp, ndi), x.shape)
    x = x * support
    for sigma in E._sigmas(2.0, 0.5, cycles):
        x = run.complex(run.complex(x, support, hio, hio=True), support, er, hio=False)
        support = steps.shrinkwrap(x, support, sigma, 0.25)
    return x, support, steps, draw


def search(pattern, rngs, run, ndi, threshold=0.15, grow=envelope.GROW):
    """envelope.search with the positivity passes' shrinkwrap threshold (0.15 there) as a parameter."""
    E = envelope
    shape = pattern.shape
    x, support, steps, draw = envelope_stage(pattern, rngs, run, ndi)
    for _ in range(2):
        support = steps.grown(support, grow)
        x = draw(lambda r: r.random(shape).astype(np.float32)) * support
        x, support = E.positive_pass(run, steps, x, support, threshold=threshold)
    support = steps.grown(support, 1)
    x = run.positive(x * support, support, E.REFINE[0], hio=True, damp=1.0)
    return run.positive(x, support, E.REFINE[1], hio=False, damp=1.0), support


def setup(args):
    from qora.bench.phase_measured import load_logo

    intensity, mask, truth = load_logo()
    b = tuple(int(v) for v in args.bins.split("x"))
    n0, n1 = intensity.shape
    binned = np.where(mask, 0, intensity).reshape(n0 // b[0], b[0], n1 // b[1], b[1]).sum(axis=(1, 3))
    bmeas = ~mask.reshape(n0 // b[0], b[0], n1 // b[1], b[1]).any(axis=(1, 3))
    held, core = held_out_bins(bmeas, b, args.frac, args.hold_seed, friedel=not args.no_friedel)
    work = bmeas & ~held
    print(f"bins {b}: {binned.shape}, measured {int(bmeas.sum())}, held out {int(held.sum())} "
          f"({held.sum() / bmeas.sum():.3f}; hold seed {args.hold_seed}, friedel {not args.no_friedel})", flush=True)
    return b, binned, bmeas, (held, core), work, truth


def report(label, obj, sup, binned, work, held, bmeas, truth, b, seconds):
    rw, rf, rc, ra = rfactors(obj, binned, [work, held[0], held[1], bmeas], b)
    iou = analysis.support_iou(sup, truth)
    print(f"{label:>12}: R work {rw:.4f}  R free {rf:.4f}  (seed bins {rc:.4f})  R all {ra:.4f}  "
          f"support {int(sup.sum()):6d} px  IoU {iou:.3f}  ({seconds:.0f} s)", flush=True)
    return rw, rf, rc, ra, int(sup.sum()), iou


def fixed(args):
    b, binned, bmeas, held, work, truth = setup(args)
    pattern = FinePattern(binned, work, b)
    cross = scipy.ndimage.generate_binary_structure(2, 1)
    sups, labels = [], []
    for name in args.supports.split(","):
        if name == "true":
            s = truth
        elif name.startswith("d"):
            s = scipy.ndimage.binary_dilation(truth, cross, iterations=int(name[1:]))
        elif name.startswith("e"):
            s = scipy.ndimage.binary_erosion(truth, cross, iterations=int(name[1:]))
        else:  # file.npz[:k]: start k's support of a saved search
            path, _, k = name.partition(":")
            s = np.load(path)["supports"][int(k or 0)]
            name = f"{path.split('/')[-1][:-4]}:{k or 0}"
        sups.append(s.astype(bool))
        labels.append(name)
    support = np.stack(sups)
    t0 = time.perf_counter()
    run = FineIterations(pattern, len(sups))
    rng = np.random.default_rng(args.start_seed)
    x = rng.random(support.shape).astype(np.float32) * support
    x = run.positive(x, support, args.hio, hio=True, damp=args.damp)
    x = run.positive(x, support, args.er, hio=False, damp=args.damp)
    seconds = time.perf_counter() - t0
    print(f"start seed {args.start_seed}, HIO {args.hio} + ER {args.er}, damp {args.damp}: {seconds:.0f} s for "
          f"{len(sups)}", flush=True)
    for k, name in enumerate(labels):
        report(name, x[k], support[k], binned, work, held, bmeas, truth, b, seconds / len(sups))


def do_search(args):
    b, binned, bmeas, held, work, truth = setup(args)
    pattern = FinePattern(binned, work, b)
    t0 = time.perf_counter()
    run = FineIterations(pattern, args.starts)
    rngs = [np.random.default_rng(args.start_seed + k) for k in range(args.starts)]
    x, s = search(pattern, rngs, run, scipy.ndimage, threshold=args.threshold)
    seconds = time.perf_counter() - t0
    print(f"search, threshold {args.threshold}, starts seeds {args.start_seed}..{args.start_seed + args.starts - 1}: "
          f"{seconds:.0f} s", flush=True)
    for k in range(args.starts):
        report(f"start {args.start_seed + k}", x[k], s[k], binned, work, held, bmeas, truth, b, seconds / args.starts)
    if args.save:
        np.savez_compressed(args.save, objects=x, supports=np.asarray(s))


def trim(args):
    """From a saved search (``--load``): cycles of shrinkwrap at a rising threshold, each followed by positivity
    HIO + ER on the new support; the working and free R after each cycle. The rule: keep the cycle of lowest free R."""
    b, binned, bmeas, held, work, truth = setup(args)
    pattern = FinePattern(binned, work, b)
    saved = np.load(args.load)
    x, support = saved["objects"].astype(np.float32), saved["supports"].astype(bool)
    starts = len(x)
    steps = envelope._Supports(np, scipy.ndimage, 2)
    lo, hi, count = (float(v) for v in args.ramp.split(":"))
    ramp = [lo + (hi - lo) * k / max(int(count) - 1, 1) for k in range(int(count))]
    run = FineIterations(pattern, starts)
    best = [None] * starts
    t0 = time.perf_counter()
    for t in ramp:
        support = steps.shrinkwrap(x, support, args.sigma, t)
        x = run.positive(x * support, support, args.hio, hio=True, damp=1.0)
        x = run.positive(x, support, args.er, hio=False, damp=1.0)
        for k in range(starts):
            out = report(f"t {t:.2f} s{k}", x[k], support[k], binned, work, held, bmeas, truth, b,
                         time.perf_counter() - t0)
            if best[k] is None or out[1] < best[k][1][1]:
                best[k] = (t, out)
    for k in range(starts):
        t, (rw, rf, rc, ra, px, iou) = best[k]
        print(f"start {k}: lowest free R at t {t:.2f}: R work {rw:.4f}, R free {rf:.4f}, {px} px, IoU {iou:.3f}",
              flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["fixed", "search", "trim"])
    ap.add_argument("--bins", default="1x2")
    ap.add_argument("--frac", type=float, default=0.05)
    ap.add_argument("--hold-seed", type=int, default=0)
    ap.add_argument("--no-friedel", action="store_true")
    ap.add_argument("--start-seed", type=int, default=0)
    ap.add_argument("--supports", default="true,d2,d5,d10")
    ap.add_argument("--hio", type=int, default=800)
    ap.add_argument("--er", type=int, default=200)
    ap.add_argument("--damp", type=float, default=1.0)
    ap.add_argument("--starts", type=int, default=3)
    ap.add_argument("--threshold", type=float, default=0.15)
    ap.add_argument("--save", default="")
    ap.add_argument("--load", default="")
    ap.add_argument("--ramp", default="0.15:1.0:12")
    ap.add_argument("--sigma", type=float, default=1.0)
    args = ap.parse_args()
    {"fixed": fixed, "search": do_search, "trim": trim}[args.mode](args)


if __name__ == "__main__":
    main()
