"""Why the default (real-envelope) fails on the ESRF logo at 1e6 photons: the search traced stage by stage, fixed
supports, and variants of the search, in one probe (no src edits; the search is copied here with hooks).

    PYTHONPATH=src .venv/bin/python bench/probes/logo_1e6_stages.py MODE [ARGS]

MODE: counts | trace PHOTONS SEEDS | fixed PHOTONS | variant NAME PHOTONS SEEDS
"""

import sys
import time

import numpy as np
import scipy.ndimage as ndi

from qora.backend import resolve
from qora.bench.phase_measured import load_logo
from qora.phase import analysis, envelope
from qora.phase.envelope import DAMPING, ENVELOPE, GROW, POSITIVE, REFINE, _autocorrelation, _sigmas, _Supports, \
    _twin_half
from qora.phase.envelope_iterate import Pattern

BE = resolve("cpu")


def variants():
    """logo_variants.py's draws exactly: one rng(7), Poisson at 1e8, 1e7, 1e6 in that order."""
    intensity, mask, truth = load_logo()
    rng = np.random.default_rng(7)
    total = intensity[~mask].sum()
    out = {p: rng.poisson(intensity * p / total).astype(float) for p in (1e8, 1e7, 1e6)}
    out[0] = intensity
    return out, mask, truth


def best_overlap(s, t):
    """(IoU, share of the truth inside s, share of s on the truth) at the shift/twin of best IoU."""
    s = np.asarray(s, bool)
    ref = np.conj(np.fft.fft2(t.astype(float)))
    best = (0.0, 0.0, 0.0)
    for c in (s, s[::-1, ::-1]):
        counts = np.real(np.fft.ifft2(np.fft.fft2(c.astype(float)) * ref))
        inter = counts.max()
        iou = inter / (c.sum() + t.sum() - inter)
        if iou > best[0]:
            best = (iou, inter / t.sum(), inter / max(c.sum(), 1))
    return best


def shrinkwrap_sweep(x, hull, truth, sigmas=(0.5, 1.0, 2.0), thresholds=(0.15, 0.25, 0.35)) -> str:
    """One shrinkwrap of ``x`` inside ``hull`` per (blur, threshold): "sigma/threshold: support size IoU", joined."""
    steps = _Supports(np, ndi, 2)
    out = []
    for sig in sigmas:
        for thr in thresholds:
            sw = steps.shrinkwrap(x[None], hull[None], sig, thr)[0]
            out.append(f"{sig}/{thr}: {int(sw.sum())} {best_overlap(sw, truth)[0]:.2f}")
    return ", ".join(out)


def row(label, x, s, pattern, mask, truth, t0):
    xs, ss = np.asarray(x), np.asarray(s)
    for k in range(xs.shape[0]):
        iou, cover, purity = best_overlap(ss[k], truth)
        r = analysis.amplitude_rfactor(xs[k], pattern, mask)
        print(f"  [{k}] {label:28s} support {int(ss[k].sum()):6d} px  IoU {iou:.3f}  truth covered {cover:.3f}  "
              f"on truth {purity:.3f}  R {r:.3f}  ({time.perf_counter() - t0:.0f} s)", flush=True)


def traced_search(pattern_arr, mask, truth, seeds, *, fit_mask=None, pos_threshold=0.15, pos_sigma=(1.0, 0.5),
                  grow=GROW, damp=DAMPING, final_grow=1, refine_mask=None, trace=True, average=False, remean=0, frozen=False, cycles_trace=False):
    """envelope.search with a row per stage. fit_mask: the unmeasured mask the search fits (default mask);
    refine_mask: the mask of the refinement (default fit_mask)."""
    fit_mask = mask if fit_mask is None else fit_mask
    refine_mask = fit_mask if refine_mask is None else refine_mask
    p = Pattern(pattern_arr, fit_mask, BE.xp)
    run = envelope.iterations_for(p, BE, len(seeds))
    rngs = [np.random.default_rng(s) for s in seeds]
    xp, shape = np, p.shape
    steps = _Supports(xp, ndi, 2)
    draw = lambda make: np.stack([make(r) for r in rngs])  # noqa: E731
    t0 = time.perf_counter()
    show = (lambda *a: row(*a, pattern_arr, mask, truth, t0)) if trace else (lambda *a: None)
    start = _autocorrelation(p)
    x = draw(lambda r: (r.random(shape) * np.exp(2j * np.pi * r.random(shape))).astype(np.complex64)) * start
    support = np.broadcast_to(start, x.shape)
    first, cycles, hio, er = ENVELOPE
    x = run.complex(x, support, first, hio=True)
    show("autocorrelation, HIO 200", x, support)
    support = np.broadcast_to(_twin_half(start, xp, ndi), x.shape)
    x = x * support
    for sigma in _sigmas(2.0, 0.5, cycles):
        x = run.complex(run.complex(x, support, hio, hio=True), support, er, hio=False)
        support = steps.shrinkwrap(x, support, sigma, 0.25)
    show("envelope (blob)", x, support)
    first, cycles, hio, er = POSITIVE
    for k in range(2):
        support = steps.grown(support, grow)
        show(f"pass {k + 1}: blob filled+grown", x, support)
        x = draw(lambda r: r.random(shape).astype(np.float32)) * support
        ref = support
        x = run.positive(x, support, first, hio=True, damp=damp)
        show(f"pass {k + 1}: HIO+ 1000", x, support)
        for sigma in _sigmas(pos_sigma[0], pos_sigma[1], cycles):
            if average:  # shrinkwrap on the mean of the HIO iterates' in-support projections (noise averaged)
                acc = np.zeros(x.shape, np.float64)
                for _ in range(hio):
                    pr, err = run.project_real(x, damp)
                    run.record(err)
                    acc += np.where(support & (pr >= 0), pr, 0)
                    x = run.update(x, pr, support, hio=True, positive=True)
                x = run.positive(x, support, er, hio=False, damp=damp)
                support = steps.shrinkwrap((acc / hio).astype(np.float32), support, sigma, pos_threshold)
                continue
            x = run.positive(run.positive(x, support, hio, hio=True, damp=damp), support, er, hio=False, damp=damp)
            if frozen:  # the threshold on the rms over the pass's first (grown) support, not the current one
                support = steps.shrinkwrap(x, ref, sigma, pos_threshold) & support
            else:
                support = steps.shrinkwrap(x, support, sigma, pos_threshold)
            if cycles_trace:
                show(f"  cycle sigma {sigma:.2f}", x, support)
        show(f"pass {k + 1}: shrinkwrapped", x, support)
    support = steps.grown(support, final_grow)
    if refine_mask is not fit_mask:
        p = Pattern(pattern_arr, refine_mask, BE.xp)
        run = envelope.iterations_for(p, BE, len(seeds))
    x = run.positive(x * support, support, REFINE[0], hio=True, damp=1.0)
    if remean:  # HIO on the found support averaged over `remean` iterations, the support found again from the mean
        acc = np.zeros(x.shape, np.float64)
        for _ in range(remean):
            pr, err = run.project_real(x, 1.0)
            run.record(err)
            acc += np.where(support & (pr >= 0), pr, 0)
            x = run.update(x, pr, support, hio=True, positive=True)
        mean = (acc / remean).astype(np.float32)
        row("HIO averaged (mean)", mean, support, pattern_arr, mask, truth, t0)
        for thr in (0.15, 0.25, 0.35):
            for sig in (0.5, 1.0):
                s2 = steps.filled(steps.shrinkwrap(mean, support, sig, thr))
                x2 = run.positive(mean * s2, s2, REFINE[1], hio=False, damp=1.0)
                row(f"mean sw {thr}/{sig}, ER 200", x2, s2, pattern_arr, mask, truth, t0)
    x = run.positive(x, support, REFINE[1], hio=False, damp=1.0)
    row("refined (final)", x, support, pattern_arr, mask, truth, t0)
    return x, support


def fixed(pattern_arr, fit_mask, support, seeds=(0,), hio=800, er=200, damp=1.0):
    """Positivity HIO + ER from random starts on a fixed support; returns the objects."""
    p = Pattern(pattern_arr, fit_mask, BE.xp)
    run = envelope.iterations_for(p, BE, len(seeds))
    s = np.broadcast_to(np.fft.ifftshift(support) if False else support, (len(seeds),) + support.shape).copy()
    x = np.stack([np.random.default_rng(k).random(support.shape).astype(np.float32) for k in seeds]) * s
    x = run.positive(x, s, hio, hio=True, damp=damp)
    return run.positive(x, s, er, hio=False, damp=damp)


def radius(shape):
    n0, n1 = shape
    q0, q1 = np.meshgrid(np.arange(n0) - n0 // 2, np.arange(n1) - n1 // 2, indexing="ij")
    return np.hypot(q0, q1)


def counts(pats, mask, truth):
    q = radius(mask.shape)
    meas = ~mask
    # speckle area in pixels: (512/extent0) * (512/extent1) of the logo (oversampling per axis)
    rows, cols = np.nonzero(truth)
    ext = (np.ptp(rows) + 1, np.ptp(cols) + 1)
    speckle = mask.shape[0] / ext[0] * mask.shape[1] / ext[1]
    print(f"logo extent {ext} px, speckle area {speckle:.1f} px, truth {int(truth.sum())} px")
    edges = [0, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 363]
    for ph in (1e8, 1e7, 1e6):
        I = pats[ph]
        print(f"{ph:.0e}: measured counts {I[meas].sum():.3g}, per object pixel {I[meas].sum() / truth.sum():.1f}")
        for a, b in zip(edges[:-1], edges[1:]):
            shell = meas & (q >= a) & (q < b)
            if shell.any():
                m = I[shell].mean()
                print(f"   |q| {a:3d}-{b:3d}: {m:9.3f} counts/px, {m * speckle:9.2f} per speckle, "
                      f"{(I[shell] == 0).mean():.2f} zeros")


def main():
    mode = sys.argv[1]
    pats, mask, truth = variants()
    if mode == "counts":
        counts(pats, mask, truth)
    elif mode == "trace":
        ph = float(sys.argv[2])
        seeds = [int(s) for s in sys.argv[3].split(",")]
        t = time.perf_counter()
        traced_search(pats[ph], mask, truth, seeds)
        print(f"{ph:.0e} seeds {seeds}: {time.perf_counter() - t:.1f} s")
    elif mode == "fixed":
        ph = float(sys.argv[2])
        I = pats[ph]
        q = radius(mask.shape)
        supports = {"true": truth}
        for g in (1, 2, 3, 5):
            supports[f"true grown {g}"] = ndi.binary_dilation(truth, iterations=g)
        for sig in (1.0, 2.0, 3.0):
            b = ndi.gaussian_filter(truth.astype(float), sig)
            supports[f"true blurred {sig} >0.1"] = b > 0.1
        for label, s in supports.items():
            for qmax in (None, 96, 64, 48):
                fm = mask if qmax is None else (mask | (q > qmax))
                t = time.perf_counter()
                x = fixed(I, fm, s)
                r = analysis.amplitude_rfactor(x[0], I, mask)
                rlow = analysis.amplitude_rfactor(x[0], I, mask | (q > 48))
                print(f"{ph:.0e} {label:22s} {int(s.sum()):6d} px fit |q|<={qmax}: R {r:.3f} (R |q|<=48: {rlow:.3f})"
                      f" {time.perf_counter() - t:.1f} s", flush=True)
    elif mode == "variant":
        name, ph = sys.argv[2], float(sys.argv[3])
        seeds = [int(s) for s in sys.argv[4].split(",")]
        q = radius(mask.shape)
        kw = {}
        for part in name.split("+"):
            if part.startswith("lowpass"):  # fit |q| <= Q only; the refinement fits everything
                kw["fit_mask"] = mask | (q > float(part[7:]))
                kw["refine_mask"] = mask
            elif part.startswith("lowpassall"):
                kw["fit_mask"] = mask | (q > float(part[10:]))
            elif part.startswith("thr"):
                kw["pos_threshold"] = float(part[3:])
            elif part.startswith("sig"):
                a, b = part[3:].split("-")
                kw["pos_sigma"] = (float(a), float(b))
            elif part.startswith("remean"):
                kw["remean"] = int(part[6:])
            elif part == "frozen":
                kw["frozen"] = True
            elif part == "cycles":
                kw["cycles_trace"] = True
            elif part == "avg":
                kw["average"] = True
            elif part.startswith("grow"):
                kw["grow"] = int(part[4:])
        t = time.perf_counter()
        traced_search(pats[ph], mask, truth, seeds, **kw)
        print(f"{name} {ph:.0e} seeds {seeds}: {time.perf_counter() - t:.1f} s")


if __name__ == "__main__" and sys.argv[1] not in ("noise", "free"):
    main()


def noise_floor():
    """The R-factor of the 'truth' (the file's true-support positivity reconstruction, scaled to each variant's
    photons) against each Poisson draw; beside it the true-support fits: positivity (this search's model) on 3
    seeds, and the complex HIO 800 + ER 200 of logo_variants' bound."""
    from qora.phase import reconstruct
    pats, mask, truth = variants()
    I0 = pats[0]
    total = I0[~mask].sum()
    x0 = fixed(I0, mask, truth, seeds=(0,))[0]
    r_file = analysis.amplitude_rfactor(x0, I0, mask)
    print(f"file: positivity true-support R {r_file:.4f}")
    for ph in (1e8, 1e7, 1e6):
        I = pats[ph]
        xt = x0 * np.sqrt(ph / total)
        r_truth = analysis.amplitude_rfactor(xt, I, mask)
        xs = fixed(I, mask, truth, seeds=(0, 1, 2))
        r_pos = [analysis.amplitude_rfactor(x, I, mask) for x in xs]
        known = reconstruct(I, mask=mask, support=truth, recipe="HIO**800 ER**200", starts=1, backend="cpu")
        r_cx = analysis.amplitude_rfactor(known.object, I, mask)
        print(f"{ph:.0e}: R of the scaled file object {r_truth:.3f}; positivity on true support "
              f"{np.round(r_pos, 3).tolist()}; complex (the bound's floor) {r_cx:.3f} -> bound {0.13 * r_cx / 0.1097:.3f}",
              flush=True)


if __name__ == "__main__" and sys.argv[1] == "noise":
    noise_floor()


def band_iterations(pattern, starts, k):
    """The array code's iterations with the noise band of docs 'Noise-aware modulus' in the positivity passes:
    a measured amplitude is left where it lies within [max(0, a - k/2), a + k/2] (a = sqrt(counts)), moved to
    the nearest edge otherwise."""
    from qora.backend import fft as backend_fft
    from qora.phase.envelope_iterate import ArrayIterations

    class Band(ArrayIterations):
        def project_real(self, x, damp):
            p = self.p
            spec = backend_fft.rfftn(x, axes=p.axes, norm="ortho")
            mod = np.abs(spec)
            lo, hi = np.maximum(p.amp_r - k / 2, 0), p.amp_r + k / 2
            target = np.clip(mod, lo, hi)
            misfit = np.sum(np.where(p.meas_r, (mod - p.amp_r) ** 2, 0), axis=p.axes)
            out = np.where(p.meas_r, spec * (target / np.maximum(mod, 1e-12)), spec * damp)
            return (backend_fft.irfftn(out, s=p.shape, axes=p.axes, norm="ortho").astype(np.float32),
                    np.sqrt(misfit / p.norm_r))

    return Band(pattern, starts)


def held_out(mask, frac=0.05, seed=0):
    """About frac of the measured pixels, each with its mirror about q = 0 (the Friedel completion would leak it)."""
    from qora.phase.symmetry import mirror
    rng = np.random.default_rng(100 + seed)
    pick = (rng.random(mask.shape) < frac / 2) & ~mask
    pick = pick | mirror(pick, np)
    return pick & ~mask


def free_r(ph=1e6, holds=(0, 1), seeds=(0, 1)):
    """Fixed supports (positivity HIO 800 + ER 200, no damping), 5% of the measured pixels held out: R on the
    fitted pixels and the free R on the held-out ones."""
    pats, mask, truth = variants()
    I = pats[ph]
    hull = ndi.binary_dilation(ndi.binary_fill_holes(ndi.binary_closing(truth, iterations=6)), iterations=4)
    supports = {"true": truth}
    for g in (1, 2, 3, 5):
        supports[f"true+{g}"] = ndi.binary_dilation(truth, iterations=g)
    supports["hull"] = hull
    _, s_def = traced_search(I, mask, truth, [0], trace=False)
    _, s_avg = traced_search(I, mask, truth, [0], trace=False, average=True)
    supports["search default (seed 0)"] = s_def[0]
    supports["search avg (seed 0)"] = s_avg[0]
    for label, s in supports.items():
        iou = best_overlap(s, truth)[0]
        out = []
        for h in holds:
            hold = held_out(mask, seed=h)
            xs = fixed(I, mask | hold, s, seeds=seeds)
            for x in xs:
                out.append((analysis.amplitude_rfactor(x, I, mask | hold), analysis.amplitude_rfactor(x, I, ~hold)))
        out = np.array(out)
        print(f"{ph:.0e} {label:24s} {int(s.sum()):6d} px IoU {iou:.2f}: R fitted {out[:, 0].min():.3f}-{out[:, 0].max():.3f}"
              f", free R {out[:, 1].min():.3f}-{out[:, 1].max():.3f} (median {np.median(out[:, 1]):.3f})", flush=True)


if __name__ == "__main__" and sys.argv[1] == "free":
    free_r(float(sys.argv[2]) if len(sys.argv) > 2 else 1e6)
