"""Locator sets (Fienup, Crimmins & Holsztynski 1982) for the ESRF logo and its binned variants (issue 37).

The autocorrelation support A = S - S is estimated from the pattern on the grid the object is reconstructed on
(512^2; for binned data the fine grid of binned_fine_model.py), the unmeasured and sub-pixel intensities filled by a
Gerchberg-Papoulis extrapolation of the autocorrelation (real, >= 0, zero outside a region that tightens to the
thresholded estimate grown; in Fourier: >= 0 and each measured bin's sum equal to the data). Then for an extreme
point v of A (v = b - a for two points of S): L = A & (A + v) holds S - a (and its twin -S + b); triple
intersections L & (A + w) are kept only where they pass the consistency check L - L >= A (a set holding a translate
of S has S - S inside L - L).

Helpers only; the measurements are in measure_sets.py and search_bound.py (this folder).
"""

import numpy as np
import scipy.ndimage as ndi
from scipy.signal import fftconvolve
from scipy.spatial import ConvexHull, Delaunay


def block_sum(a, b):
    n0, n1 = a.shape
    return a.reshape(n0 // b[0], b[0], n1 // b[1], b[1]).sum(axis=(1, 3))


def bin_pattern(intensity, mask, b):
    """Binned data as preprocess(bin=...) / binned_fine_model.py make it: masked pixels zeroed, a bin unmeasured
    where any of its pixels is."""
    n0, n1 = intensity.shape
    binned = block_sum(np.where(mask, 0, intensity), b)
    bmask = mask.reshape(n0 // b[0], b[0], n1 // b[1], b[1]).any(axis=(1, 3))
    return binned, bmask


def mirror_fine(a):
    return np.roll(a[::-1, ::-1], 1, axis=(0, 1))


def centred_ac(intensity):
    """Autocorrelation (real part), r = 0 at index n//2, of a detector-layout intensity (q = 0 at n//2)."""
    return np.fft.fftshift(np.fft.ifft2(np.fft.ifftshift(intensity)).real)


def centred_spectrum(ac):
    return np.fft.fftshift(np.fft.fft2(np.fft.ifftshift(ac)).real)


def ac_estimate(binned, bmask, b, iterations=400, level=0.005, grow=3, window=200, refine_every=50, log=None):
    """Gerchberg-Papoulis estimate of the autocorrelation on the fine grid (shape binned.shape * b).

    Constraints: ac real, >= 0, zero outside region R (first a box |r| <= window, then every ``refine_every``
    iterations R = (ac > level * max) grown by ``grow`` px, inside the box); intensity >= 0 and, on measured bins,
    the sum of each bin's sub-pixels equal to the datum (orthogonal projection: the residual spread evenly).
    Returns the centred autocorrelation estimate and the fine intensity."""
    n = (binned.shape[0] * b[0], binned.shape[1] * b[1])
    meas_b = ~bmask
    nb = b[0] * b[1]
    spread = lambda a: np.kron(a, np.ones(b))  # noqa: E731
    if nb == 1:  # unbinned: Friedel completion (the mirror of an unmeasured pixel)
        mi = mirror_fine(meas_b)
        binned = np.where(meas_b, binned, mirror_fine(binned))
        meas_b = meas_b | mi
    fine = spread(np.where(meas_b, binned, 0) / nb)
    rr = np.indices(n) - np.array([n[0] // 2, n[1] // 2])[:, None, None]
    box = (np.abs(rr[0]) <= window) & (np.abs(rr[1]) <= window)
    region = box.copy()
    cross = ndi.generate_binary_structure(2, 1)
    for it in range(iterations):
        g = centred_ac(fine)
        if it and it % refine_every == 0:
            region = ndi.binary_dilation(g > level * g.max(), cross, iterations=grow) & box
        g = np.where(region, np.maximum(g, 0), 0)
        fine = np.maximum(centred_spectrum(g), 0)
        resid = np.where(meas_b, binned - block_sum(fine, b), 0)
        fine = np.maximum(fine + spread(resid / nb), 0)
        if log and (it % 100 == 0 or it == iterations - 1):
            r = np.sqrt(np.maximum(block_sum(fine, b), 0))[meas_b]
            d = np.sqrt(np.maximum(binned, 0))[meas_b]
            log(f"    GP it {it}: region {int(region.sum())} px, data misfit R {np.abs(r - d).sum() / d.sum():.4f}")
    return centred_ac(fine), fine


def aliased_ac_binned(binned, bmask, b, fine_shape):
    """The binned grid's own autocorrelation (period n/b), measured bins only, periodically extended onto the fine
    grid (a superset of the unaliased one wherever the true extent exceeds the period: conservative)."""
    ac = centred_ac(np.where(bmask, 0, binned))
    reps = (fine_shape[0] // ac.shape[0] + 1, fine_shape[1] // ac.shape[1] + 1)
    big = np.tile(ac, reps)
    # centre: index m//2 of the small grid -> index n//2 of the fine one
    o0 = ac.shape[0] // 2 - fine_shape[0] // 2 % ac.shape[0]
    o1 = ac.shape[1] // 2 - fine_shape[1] // 2 % ac.shape[1]
    big = np.roll(big, (-o0, -o1), axis=(0, 1))
    return big[:fine_shape[0], :fine_shape[1]]


def ac_support(ac, level, window=None):
    """A: the thresholded estimate's connected component at r = 0, holes filled (optionally inside a box)."""
    a = ac > level * ac.max()
    if window is not None:
        n = a.shape
        rr = np.indices(n) - np.array([n[0] // 2, n[1] // 2])[:, None, None]
        a &= (np.abs(rr[0]) <= window[0]) & (np.abs(rr[1]) <= window[1])
    lab, _ = ndi.label(a)
    c = lab[a.shape[0] // 2, a.shape[1] // 2]
    return ndi.binary_fill_holes(lab == c) if c else a


def ideal_ac_support(truth):
    """S - S exactly (the indicator's autocorrelation > 0.5), centred."""
    t = truth.astype(float)
    ac = fftconvolve(t, t[::-1, ::-1], mode="same")
    # mode "same" centres r = 0 at index n//2 for even n? check the peak
    pk = np.unravel_index(np.argmax(ac), ac.shape)
    ac = np.roll(ac, (truth.shape[0] // 2 - pk[0], truth.shape[1] // 2 - pk[1]), axis=(0, 1))
    return ac > 0.5


def extreme_points(A, directions=16):
    """One extreme point of A (offset from the centre) per direction in [0, pi): the pixel maximising d . r, the
    middle of ties."""
    n = A.shape
    pts = np.argwhere(A) - np.array([n[0] // 2, n[1] // 2])
    out = []
    for k in range(directions):
        th = np.pi * k / directions
        d = np.array([np.cos(th), np.sin(th)])
        s = pts @ d
        top = pts[s >= s.max() - 0.5]
        out.append((th, tuple(int(v) for v in top[len(top) // 2])))
    return out


def shifted(A, v):
    return np.roll(A, v, axis=(0, 1))


def locator(A, v, w=None):
    L = A & shifted(A, v)
    if w is not None:
        L &= shifted(A, w)
    return L


def difference_set(L):
    """L - L (centred), by FFT correlation of indicators."""
    f = np.fft.fft2(L.astype(float))
    c = np.fft.fftshift(np.fft.ifft2(f * np.conj(f)).real)
    return c > 0.5


def covers(L, A):
    """Share of A inside L - L (1.0 for a locator that holds a translate of S, where A = S - S)."""
    return float((difference_set(L) & A).sum() / A.sum())


def containment(L, truth):
    """Largest share of the truth (or its twin) inside L at any translation."""
    f = np.conj(np.fft.fft2(L.astype(float)))
    best = 0.0
    for t in (truth, truth[::-1, ::-1]):
        c = np.fft.ifft2(np.fft.fft2(t.astype(float)) * f).real
        best = max(best, c.max() / t.sum())
    return float(best)


def hull_mask(truth):
    pts = np.argwhere(truth)
    hull = Delaunay(pts[ConvexHull(pts).vertices])
    grid = np.argwhere(np.ones(truth.shape, bool))
    return (hull.find_simplex(grid) >= 0).reshape(truth.shape)


def align(L, x):
    """L translated (and/or point-reflected) to hold most of |x| (x: one start's object): the bound placed on the
    current object."""
    f = np.fft.fft2(np.abs(x).astype(float))
    best, out = -np.inf, L
    for cand in (L, mirror_fine(L)):
        c = np.fft.ifft2(f * np.conj(np.fft.fft2(cand.astype(float)))).real
        k = np.unravel_index(np.argmax(c), c.shape)
        if c[k] > best:
            best, out = c[k], np.roll(cand, k, axis=(0, 1))
    return out
