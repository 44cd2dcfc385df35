"""Issue 37: the default's final support grown by GROW voxels (pixels) and ITERATIONS of ER from each start's
object, on a synthetic success case: the aligned object error and the Fourier error before and after, per start,
and the share within the case's bound (CPU). The Bragg crop's counterpart is bragg_floor_probe.py's refine with
QORA_GROW.

    PYTHONPATH=src python bench/probes/grow_support_probe.py CASE [STARTS] [GROW] [ITERATIONS]
"""
import sys
import time

import numpy as np
from scipy.ndimage import binary_dilation

from qora.bench.phase_success import CASES, aligned_error, record, reference_error, success_bound
from qora.phase import reconstruct


def er(x, support, counts, mask, iterations):
    axes = tuple(range(x.ndim))
    measured = np.ones(x.shape, bool) if mask is None else ~np.asarray(mask, bool)
    measured = np.fft.ifftshift(measured, axes=axes)
    amp = np.sqrt(np.maximum(np.fft.ifftshift(counts, axes=axes), 0.0))
    x = np.fft.ifftshift(x, axes=axes).astype(np.complex128)
    outside = ~np.fft.ifftshift(support, axes=axes)
    for _ in range(iterations):
        y = np.fft.fftn(x, norm="ortho")
        m = np.abs(y)
        y = np.where(measured, amp * y / np.where(m > 0, m, 1.0), y)
        x = np.fft.ifftn(y, norm="ortho")
        x[outside] = 0
    y = np.abs(np.fft.fftn(x, norm="ortho"))
    ferr = float(np.sqrt(((y - amp)[measured] ** 2).sum() / (amp[measured] ** 2).sum()))
    return np.fft.fftshift(x, axes=axes), ferr


def main(name, starts=5, grow=1, iterations=300):
    case = CASES[name]
    truth = case.object()
    counts, mask = record(truth, case.detector, seed=0)
    t0 = time.perf_counter()
    res = reconstruct(counts, mask=mask, starts=int(starts), backend="cpu", seed=0, keep_all=True)
    bound = success_bound(reference_error(truth, counts, mask, backend="cpu"))
    print(f"{name}: recipe {res.recipe[:60]}..., bound {bound:.3f}, {time.perf_counter() - t0:.0f} s", flush=True)
    before, after = [], []
    for i, (obj, sup) in enumerate(zip(res.objects, res.supports)):
        e0 = aligned_error(obj, truth)
        _, f0 = er(obj, sup.astype(bool), counts, mask, 0)
        grown = binary_dilation(sup.astype(bool), iterations=int(grow))
        x, f1 = er(obj, grown, counts, mask, int(iterations))
        _, fsame = er(obj, sup.astype(bool), counts, mask, int(iterations))
        e1 = aligned_error(x, truth)
        before.append(e0)
        after.append(e1)
        print(f"  start {i}: error {e0:.4f} -> {e1:.4f} (grown {int(grow)}); Fourier {f0:.4f}, same support ER "
              f"{fsame:.4f}, grown ER {f1:.4f}; support {int(sup.sum())} -> {int(grown.sum())}", flush=True)
    summary(name, bound, before, after)


def summary(name, bound, before, after):
    b, a = np.asarray(before), np.asarray(after)
    print(f"SUMMARY {name}: within {bound:.3f}: {int((b < bound).sum())}/{b.size} -> {int((a < bound).sum())}/{a.size}; "
          f"median {np.median(b):.4f} -> {np.median(a):.4f}; worse in {int((a > b).sum())}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], *map(int, sys.argv[2:]))

