"""Question 1: how large are the locator sets of the logo's pattern (unbinned, 1x2, 2x2 binned), and do they hold the
logo? Saves the data-derived locator picked per variant and level to sets_<bins>.npz for search_bound.py.

    cd /work/main && PYTHONPATH=src:bench/probes .venv/bin/python bench/probes/binned_locator/measure_sets.py \
        [--bins 1x1,1x2,2x2] [--levels 0.01,0.005,0.002]
"""

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import locator as loc  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def log(msg):
    print(msg, flush=True)


def study(name, A, Aideal, truth, triples=True):
    """Sizes, containment and the consistency check for the pair and triple locators of one A."""
    rec = float((A & Aideal).sum() / Aideal.sum())
    log(f"  [{name}] |A| {int(A.sum())} px; holds {rec:.4f} of S-S ({int(Aideal.sum())} px); "
        f"excess {int((A & ~Aideal).sum())} px")
    ext = loc.extreme_points(A, 16)
    pairs = []
    for th, v in ext:
        L = loc.locator(A, v)
        cov = loc.covers(L, A)
        con = loc.containment(L, truth)
        pairs.append((int(L.sum()), th, v, cov, con, L))
        log(f"    v {str(v):>12} (dir {np.degrees(th):5.1f}): |L| {int(L.sum()):6d}  L-L covers A {cov:.4f}  "
            f"holds logo {con:.4f}")
    ok = [p for p in pairs if p[3] >= 0.995]
    pick = min(ok or pairs, key=lambda p: p[0])
    log(f"    pair pick (smallest passing the check): |L| {pick[0]}, v {pick[2]}, holds logo {pick[4]:.4f}")
    best3 = None
    if triples:
        vs = sorted({v for _, v in ext} | {(-v[0], -v[1]) for _, v in ext})
        n = A.shape
        tested = passed = 0
        for i, v in enumerate(vs):
            for w in vs[i + 1:]:
                d = (w[0] - v[0] + n[0] // 2, w[1] - v[1] + n[1] // 2)
                if not (0 <= d[0] < n[0] and 0 <= d[1] < n[1] and A[d]):
                    continue
                L = loc.locator(A, v, w)
                if L.sum() < truth.sum():  # cannot hold S
                    continue
                tested += 1
                cov = loc.covers(L, A)
                if cov < 0.995:
                    continue
                passed += 1
                if best3 is None or L.sum() < best3[0]:
                    best3 = (int(L.sum()), v, w, cov, loc.containment(L, truth), L)
        if best3:
            log(f"    triple pick ({tested} triples tested, {passed} pass the check): |L| {best3[0]}, v {best3[1]}, "
                f"w {best3[2]}, covers {best3[3]:.4f}, holds logo {best3[4]:.4f}")
        else:
            log(f"    no triple passes the check ({tested} tested)")
    return pick, best3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bins", default="1x1,1x2,2x2")
    ap.add_argument("--levels", default="0.01,0.005,0.002")
    ap.add_argument("--iterations", type=int, default=400)
    ap.add_argument("--gp-level", type=float, default=0.001)
    args = ap.parse_args()
    from qora.bench.phase_measured import load_logo

    intensity, mask, truth = load_logo()
    hull = loc.hull_mask(truth)
    Aideal = loc.ideal_ac_support(truth)
    log(f"logo {int(truth.sum())} px, convex hull {int(hull.sum())} px, S-S {int(Aideal.sum())} px "
        f"(extent {np.ptp(np.argwhere(Aideal), axis=0) + 1})")
    study("ideal S-S", Aideal, Aideal, truth)
    for bins in args.bins.split(","):
        b = tuple(int(v) for v in bins.split("x"))
        binned, bmask = loc.bin_pattern(intensity, mask, b)
        log(f"\n== bins {b}: {binned.shape}, unmeasured bins {int(bmask.sum())}")
        t0 = time.perf_counter()
        ac, fine = loc.ac_estimate(binned, bmask, b, iterations=args.iterations, level=args.gp_level, grow=4, log=log)
        log(f"  GP estimate {time.perf_counter() - t0:.0f} s")
        save = {}
        for lev in (float(v) for v in args.levels.split(",")):
            A = loc.ac_support(ac, lev)
            pick, best3 = study(f"GP level {lev}", A, Aideal, truth)
            save[f"A_{lev}"] = A
            save[f"L2v_{lev}"] = np.array(pick[2])
            save[f"L2_{lev}"] = pick[5]
            if best3:
                save[f"L3_{lev}"] = best3[5]
        if b != (1, 1):
            al = loc.aliased_ac_binned(binned, bmask, b, intensity.shape)
            for lev in (0.01,):
                A = loc.ac_support(al, lev, window=(200, 200))
                study(f"aliased binned-grid ac, periodic extension, level {lev}", A, Aideal, truth, triples=False)
        np.savez_compressed(os.path.join(HERE, f"sets_{bins}.npz"), ac=ac.astype(np.float32), **save)


if __name__ == "__main__":
    main()
