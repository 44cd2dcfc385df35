"""Comparing reconstructions: alignment, object error, PRTF and modes.

A CDI reconstruction is defined up to a global phase, a translation and the
twin (complex conjugate with point reflection about the array centre).
:func:`align` removes all three against a reference; :func:`object_error` is the
relative L2 error after that. The alignment and the agreement report follow their input: CuPy arrays are transformed
on the GPU (the same arithmetic in float64; the sub-pixel search, a few small products per step, on the host), NumPy
arrays on the host.
"""

from __future__ import annotations

import numpy as np
import scipy.optimize

from qora.backend import fft, xp_of

__all__ = ["twin", "shift", "align", "object_error", "scaled_error", "prtf", "prtf_resolution", "modes", "consensus",
           "agreement", "AGREE_OBJECT_ERROR", "convergence", "CONVERGED_FALL", "amplitude_rfactor",
           "support_iou"]

# Two starts found the same object when their aligned unit-norm objects differ by at most this (relative L2). Starts
# that found the object differ by edge ringing and noise (0.01-0.2 from the truth each on the success cases, so at most
# ~0.3 from each other); a start that did not is another object, 0.5-1.4 away (docs/phase.md, "Agreement between starts").
AGREE_OBJECT_ERROR = 0.3
# A run has converged when its Fourier error fell by less than this fraction over its last CONVERGENCE_WINDOW
# iterations. At a fixed point the float32 error changes in the sixth digit (7e-7 on the 64^2 triangle at 1e8
# photons); ER creeping along a stagnation valley still moves it by 5.6e-4 (the 256^2 simulated triangle, object error
# 0.06 against the truth), and more iterations would move the object further (docs/phase.md, "Convergence").
CONVERGED_FALL = 1e-4
CONVERGENCE_WINDOW = 50


def twin(x: np.ndarray) -> np.ndarray:
    """The twin image: conj(x(-r)), point reflection about index n//2 on every axis."""
    xp = xp_of(x)
    out = xp.conj(x)
    for ax, n in enumerate(x.shape):
        idx = (2 * (n // 2) - xp.arange(n)) % n
        out = xp.take(out, idx, axis=ax)
    return out


def _ramp(spec, delta):
    """A spectrum times the phase ramp that translates its object by ``delta`` pixels."""
    xp = xp_of(spec)
    for ax, (n, d) in enumerate(zip(spec.shape, delta)):
        f = xp.fft.fftfreq(n).reshape([-1 if i == ax else 1 for i in range(spec.ndim)])
        spec = spec * xp.exp(-2j * np.pi * f * d)
    return spec


def shift(x: np.ndarray, delta) -> np.ndarray:
    """Translate ``x`` by ``delta`` pixels (sub-pixel allowed) with a Fourier phase ramp."""
    return fft.ifftn(_ramp(fft.fftn(x), delta))


def _overlap_at(cross, freqs, d) -> float:
    """|sum_k cross_k exp(2 pi i f_k . d)|: the cross-correlation of two objects at the (sub-pixel)
    translation ``d``, from their cross spectrum ``cross = conj(F x) F ref``.

    The phase factor is a product over axes, so the sum contracts one axis at a time with a vector
    (the first contraction, a matrix-vector product over the whole array, is the only full pass):
    a few ms at 128^3 where forming the full-array phase ramp took ~0.1 s, which the sub-pixel search
    evaluates hundreds of times (docs/phase.md, "The Bragg-like case").
    """
    out = cross
    for f, di in zip(reversed(freqs), reversed(d)):
        # as a 2D matrix: NumPy's matmul of an N-D stack by a vector skips BLAS (12x slower at 128^3)
        out = out.reshape(-1, f.size) @ np.exp(2j * np.pi * f * di)
    return abs(complex(out[0]))


def _best_shift(spec_x, spec_ref, *, subpixel: bool = True, tolerance: float = 1e-6):
    """The translation maximising |<shift(x), ref>| from the objects' spectra: the integer peak of the
    cross-correlation, then (``subpixel``) its refinement."""
    xp = xp_of(spec_x)
    cross = xp.conj(spec_x) * spec_ref
    xc = fft.ifftn(cross)
    shape = spec_x.shape
    peak = np.array(np.unravel_index(int(xp.argmax(xp.abs(xc))), shape), float)
    peak = np.where(peak > np.array(shape) / 2, peak - np.array(shape), peak)
    if not subpixel:
        return peak
    # the sub-pixel search on the host: a step is a few small products and a read, which a device pays in launches
    # and a synchronisation (0.35 ms a step on an H100, 0.07 ms on its host)
    cross = cross if xp is np else cross.get()
    freqs = [np.fft.fftfreq(n) for n in shape]
    found = _newton_peak(cross, freqs, peak, tolerance)
    if found is None:
        found = _nelder_mead_peak(cross, freqs, peak, tolerance)
    return found if _overlap_at(cross, freqs, found) >= _overlap_at(cross, freqs, peak) else peak


def _derivatives(cross, freqs, d):
    """S(d) = sum_k cross_k exp(2 pi i f_k . d) with its first and second derivatives in d: T[m_0, ..., m_last] =
    sum_k cross_k prod_a (2 pi i f_a)^(m_a) exp(2 pi i f_a d_a), m_a in 0, 1, 2. One pass over ``cross`` (three
    phase vectors per axis, contracted one axis at a time as :func:`_overlap_at` does)."""
    out = cross
    for axis in reversed(range(cross.ndim)):
        w = 2j * np.pi * freqs[axis]
        e = np.exp(w * d[axis])
        out = np.tensordot(out, np.stack([e, w * e, w * w * e], axis=1), axes=([axis], [0]))
    return out.transpose(tuple(reversed(range(cross.ndim))))  # tensordot appended the orders last axis first


def _newton_peak(cross, freqs, start, tolerance: float, steps: int = 20):
    """The maximum of |S(d)|^2 near ``start`` by Newton's method on its analytic gradient and Hessian; None where a
    step leaves the concave neighbourhood of the peak (Hessian not negative definite, or a step over a pixel)."""
    nd = cross.ndim
    unit = np.eye(nd, dtype=int)
    d = np.array(start, float)
    for _ in range(steps):
        t = _derivatives(cross, freqs, d)
        s = t[(0,) * nd]
        g = np.array([t[tuple(unit[j])] for j in range(nd)])
        h = np.array([[t[tuple(unit[j] + unit[k])] for k in range(nd)] for j in range(nd)])
        grad = 2 * np.real(np.conj(s) * g)
        hess = 2 * np.real(np.conj(g)[:, None] * g[None, :] + np.conj(s) * h)
        if not (np.all(np.isfinite(hess)) and np.all(np.linalg.eigvalsh(hess) < 0)):
            return None
        step = -np.linalg.solve(hess, grad)
        if np.abs(step).max() > 1.0:
            return None
        d = d + step
        if np.abs(step).max() < 0.1 * tolerance:  # quadratic convergence: the last step bounds the error
            return d
    return None


def _nelder_mead_peak(cross, freqs, start, tolerance: float):
    """The maximum of |S(d)| near ``start`` by Nelder-Mead (where Newton's method does not apply)."""
    def overlap(d):
        return -_overlap_at(cross, freqs, d)

    res = scipy.optimize.minimize(overlap, start, method="Nelder-Mead",
                                  options={"xatol": tolerance, "fatol": 1e-14 * abs(overlap(start)), "maxiter": 400})
    return res.x


def align(x: np.ndarray, reference: np.ndarray, *, allow_twin: bool = True, subpixel: bool = True,
          tolerance: float = 1e-6):
    """``x`` (or its twin) translated and phased to best match ``reference`` (the sub-pixel shift to ``tolerance``
    pixels).

    Returns ``(aligned, info)`` with ``info = {"twin": bool, "shift": tuple, "phase": float}``.
    """
    xp = xp_of(x, reference)
    x = xp.asarray(x, np.complex128)
    ref = xp.asarray(reference, np.complex128)
    if x.shape != ref.shape:
        raise ValueError(f"shapes differ: {x.shape} and {ref.shape}")
    spec_ref = fft.fftn(ref)
    best = None
    for is_twin in ((False, True) if allow_twin else (False,)):
        spec = fft.fftn(twin(x) if is_twin else x)
        d = _best_shift(spec, spec_ref, subpixel=subpixel, tolerance=tolerance)
        moved = fft.ifftn(_ramp(spec, d))
        c = complex(xp.vdot(moved, ref))
        phase = float(np.angle(c))
        moved = moved * np.exp(1j * phase)
        err = float(xp.linalg.norm(moved - ref))
        if best is None or err < best[0]:
            best = (err, moved, {"twin": is_twin, "shift": tuple(float(v) for v in d), "phase": phase})
    return best[1], best[2]


def object_error(x: np.ndarray, reference: np.ndarray, **kwargs) -> float:
    """||align(x) - ref|| / ||ref||: the relative object error after phase, translation and twin."""
    aligned, _ = align(x, reference, **kwargs)
    xp = xp_of(aligned)
    ref = xp.asarray(reference, np.complex128)
    return float(xp.linalg.norm(aligned - ref) / xp.linalg.norm(ref))


def scaled_error(x: np.ndarray, reference: np.ndarray) -> tuple[float, dict]:
    """The relative object error after phase, translation, twin *and* the global scale.

    A reconstruction's amplitude is in sqrt(counts) of its pattern, a reference's in whatever units it was
    made in (a simulated object before the photon scaling), so the scale says nothing about the phasing:
    the aligned object is multiplied by the real factor s = Re<aligned, ref> / ||aligned||^2 that minimises
    ||s aligned - ref||. Returns ``(error, info)`` with ``info`` that of :func:`align` plus ``"scale"``.
    """
    aligned, info = align(x, reference)
    ref = np.asarray(reference, np.complex128)
    norm = float(np.vdot(aligned, aligned).real)
    scale = float(np.vdot(aligned, ref).real) / norm if norm > 0 else 1.0
    info["scale"] = scale
    return float(np.linalg.norm(scale * aligned - ref) / np.linalg.norm(ref)), info


def prtf(objects, intensity, *, nbins: int | None = None, aligned: bool = False):
    """Phase-retrieval transfer function over starts, radially averaged.

    ``objects`` (K, *shape) are aligned to the first (``aligned``: they already are); PRTF(q) = |<F x_k>| / sqrt(I)
    in shells of |q|. Returns ``(q, prtf)`` with q in cycles per pixel.
    """
    objects = np.asarray(objects)
    ref = objects[0]
    aligned = objects if aligned else np.stack([ref] + [align(o, ref)[0] for o in objects[1:]])
    axes = tuple(range(1, objects.ndim))
    spec = np.fft.fftshift(fft.fftn(np.fft.ifftshift(aligned, axes=axes), axes=axes, norm="ortho"), axes=axes)
    mean = np.abs(spec.mean(axis=0))
    amp = np.sqrt(np.maximum(np.asarray(intensity, float), 0))
    grids = np.meshgrid(*[(np.arange(n) - n // 2) / n for n in ref.shape], indexing="ij")
    q = np.sqrt(sum(g**2 for g in grids))
    nbins = nbins or min(ref.shape) // 2
    edges = np.linspace(0, 0.5, nbins + 1)
    which = np.digitize(q, edges) - 1
    valid = (which >= 0) & (which < nbins) & (amp > 0)
    num = np.bincount(which[valid], weights=mean[valid], minlength=nbins)
    den = np.bincount(which[valid], weights=amp[valid], minlength=nbins)
    with np.errstate(invalid="ignore", divide="ignore"):
        curve = np.where(den > 0, num / den, np.nan)
    return 0.5 * (edges[1:] + edges[:-1]), curve


def modes(objects, *, count: int = 3):
    """Orthogonal modes of the aligned starts (SVD), strongest first, and their weights.

    Returns ``(modes (count, *shape), weights (count,))``, weights summing to 1
    over all modes: how much of the starts' power each mode carries.
    """
    objects = np.asarray(objects)
    ref = objects[0]
    aligned = np.stack([ref] + [align(o, ref)[0] for o in objects[1:]])
    mat = aligned.reshape(len(aligned), -1)
    u, s, vh = np.linalg.svd(mat, full_matrices=False)
    weights = s**2 / np.sum(s**2)
    count = min(count, len(s))
    return (vh[:count] * s[:count, None]).reshape((count,) + ref.shape), weights[:count]


def consensus(objects, scores, *, keep: int = 5) -> dict:
    """Do the best starts agree? The aligned object error between each pair of the ``keep`` best.

    Parameters
    ----------
    objects : ndarray (K, *shape)
        Every start's object (``PhaseResult.objects``, from ``keep_all=True``).
    scores : ndarray (K,)
        Lower is better (``final_errors`` or ``free_llk``); NaN scores rank last.
    keep : int
        How many of the best starts to compare.

    Returns
    -------
    dict with ``starts`` (the kept starts' indices, best first), ``errors`` ((keep, keep) matrix of
    :func:`object_error` between unit-norm objects, symmetric, zero diagonal; dimensionless) and
    ``median`` and ``max`` of its off-diagonal entries: a small median means the runs found the same
    object (up to shift, phase and twin), a large one that the ranking picked one of several answers.
    """
    objects = np.asarray(objects)
    scores = np.asarray(scores, float)
    if objects.shape[0] != scores.shape[0]:
        raise ValueError(f"{objects.shape[0]} objects but {scores.shape[0]} scores")
    order = np.argsort(np.where(np.isfinite(scores), scores, np.inf), kind="stable")[: max(1, int(keep))]
    unit = [objects[i] / np.linalg.norm(objects[i]) for i in order]
    k = len(unit)
    errors = np.zeros((k, k))
    for i in range(k):
        for j in range(i + 1, k):
            errors[i, j] = errors[j, i] = object_error(unit[j], unit[i])
    off = errors[~np.eye(k, dtype=bool)]
    return {"starts": [int(i) for i in order], "errors": errors,
            "median": float(np.median(off)) if off.size else 0.0, "max": float(off.max()) if off.size else 0.0}


def prtf_resolution(q, curve, *, level: float = 1.0 / np.e) -> float:
    """The highest spatial frequency (cycles per pixel) below which the PRTF stays at or above ``level``
    (1/e by convention); the full period 1/q is the resolution in object pixels."""
    below = np.flatnonzero(~(np.nan_to_num(curve, nan=0.0) >= level))
    first = int(below[0]) if below.size else len(q)
    return float(q[first - 1]) if first > 0 else 0.0


def _support_overlap(support, reference, info) -> float:
    """Intersection over union of ``support`` moved as :func:`align` moved its object (twin = point reflection,
    shift rounded to whole pixels) and ``reference``."""
    s = np.asarray(support, bool)
    if info["twin"]:
        for ax, n in enumerate(s.shape):
            s = np.take(s, (2 * (n // 2) - np.arange(n)) % n, axis=ax)
    s = np.roll(s, [int(round(d)) for d in info["shift"]], axis=tuple(range(s.ndim)))
    ref = np.asarray(reference, bool)
    union = np.count_nonzero(s | ref)
    return float(np.count_nonzero(s & ref) / union) if union else 1.0


COMPACT_NEAR = 1.05  # compact_best: the starts within 5% of the lowest R-factor compete on support size


def compact_best(rfactors, support_px, near: float = COMPACT_NEAR) -> int:
    """The real-object search's ranking (:mod:`qora.phase.envelope`): among the starts whose amplitude R-factor is
    within ``near`` times the lowest, the one with the smallest support (a swollen support fits a noisy pattern's
    inconsistencies slightly better; the object does not). Ties go to the earlier start."""
    r = np.asarray(rfactors, float)
    candidates = [k for k in range(len(r)) if r[k] <= near * np.nanmin(r)]
    return min(candidates, key=lambda k: (int(support_px[k]), k))


# The agreement's alignments stop at a thousandth of a pixel: a shift error of 1e-3 px moves an object's aligned error
# by under 1e-3 (its gradient is at most pi per pixel of shift for a unit-norm object sampled at Nyquist), far inside
# the agreement bound; the search to 1e-6 px spent its last iterations on digits the report does not use.
AGREE_SHIFT_TOLERANCE = 1e-3


def agreement(objects, supports, scores, *, intensity=None, bound: float = AGREE_OBJECT_ERROR) -> dict:
    """Did the starts find the same object as the best? Every start aligned to the best one.

    Parameters
    ----------
    objects, supports : ndarray (K, *shape)
        Every start's object and support.
    scores : ndarray (K,)
        Lower is better (the ranking's score); NaN ranks last.
    intensity : ndarray, optional
        The measured pattern (detector layout): with it, the PRTF of the agreeing starts.
    bound : float
        Aligned object error (unit-norm objects, dimensionless) up to which a start agrees with the best.

    Returns
    -------
    dict with ``best`` (index), ``starts`` (all indices, best first), ``object_error`` and ``support_overlap``
    (each start against the best, in that order: relative L2 after shift, phase and twin; intersection over
    union of the supports moved the same way), ``agree`` (how many starts, the best included, are within
    ``bound``), ``total``, ``bound``, ``reproducible`` (at least half the starts agree; None for one start),
    ``message`` (one line for a user) and, with ``intensity`` and two or more agreeing starts, ``prtf_q``,
    ``prtf`` (radial PRTF of the agreeing starts) and ``resolution_px`` (1 / the frequency where it falls
    below 1/e, pixels).
    """
    xp = xp_of(objects)
    objects = xp.asarray(objects)
    scores = np.asarray(scores, float)
    if not (len(objects) == len(supports) == len(scores)):
        raise ValueError(f"{len(objects)} objects, {len(supports)} supports and {len(scores)} scores")
    order = [int(i) for i in np.argsort(np.where(np.isfinite(scores), scores, np.inf), kind="stable")]
    objects, supports, intensity, factor = _coarse(objects, supports, intensity)
    xp = xp_of(objects)  # coarsened objects are on the host
    best = order[0]
    ref = objects[best] / max(float(xp.linalg.norm(objects[best])), 1e-30)
    errors, overlaps, moved = [0.0], [1.0], {best: objects[best]}
    for i in order[1:]:
        norm = max(float(xp.linalg.norm(objects[i])), 1e-30)
        aligned, info = align(objects[i] / norm, ref, tolerance=AGREE_SHIFT_TOLERANCE)
        errors.append(float(xp.linalg.norm(aligned - ref)))
        overlaps.append(_support_overlap(supports[i], supports[best], info))
        if errors[-1] <= bound:  # kept for the PRTF (alignment is linear: the start's own scale restored)
            moved[i] = aligned * norm
    agreeing = [i for i, e in zip(order, errors) if e <= bound]
    total = len(order)
    reproducible = None if total < 2 else 2 * len(agreeing) >= total
    if reproducible is None:
        message = "one start: reproducibility not tested (run several starts)"
    else:
        message = (f"{'reproducible' if reproducible else 'not reproducible'}: {len(agreeing)} of {total} starts "
                   f"agree with the best (aligned object error <= {bound:g})")
    out = {"best": best, "starts": order, "object_error": errors, "support_overlap": overlaps,
           "agree": len(agreeing), "total": total, "bound": float(bound), "reproducible": reproducible,
           "message": message, "coarsened": factor}
    if intensity is not None and len(agreeing) >= 2:
        stack = xp.stack([moved[i] for i in agreeing])
        q, curve = prtf(stack if xp is np else stack.get(), intensity, aligned=True)
        cutoff = prtf_resolution(q, curve)
        out.update(prtf_q=(q / factor).tolist(), prtf=[None if not np.isfinite(v) else float(v) for v in curve],
                   resolution_px=float(factor / cutoff) if cutoff > 0 else None)
    return out


# The agreement report compares objects of at most this many voxels (128^3): about 1 s a start on two cores. Larger
# ones are compared at a coarser sampling (their spectra cropped about q = 0): whether two starts found the same
# object shows at low resolution, and a 512^3 start aligned in full took over a minute and 2 GiB of the host's
# memory per copy, more than the run itself on the GPU.
AGREE_MOST_VOXELS = 2**21


def _coarse(objects, supports, intensity):
    """Objects, supports and pattern at a sampling ``factor`` times coarser where the objects exceed
    :data:`AGREE_MOST_VOXELS`: each object's unitary spectrum cropped to the central n // factor per axis (so its
    transform there equals the original's, and the cropped pattern is its intensity), each support pooled over
    factor^d blocks (a block is in where any of its pixels is). Factor 1 returns them as they are."""
    shape = objects.shape[1:]
    factor = 1
    while np.prod([n // factor for n in shape]) > AGREE_MOST_VOXELS:
        factor *= 2
    if factor == 1:
        return objects, np.asarray(supports), intensity, 1
    objects = objects if xp_of(objects) is np else objects.get()  # coarsened on the host
    small = tuple(n // factor for n in shape)
    box = tuple(slice(n // 2 - m // 2, n // 2 - m // 2 + m) for n, m in zip(shape, small))
    axes = tuple(range(len(shape)))
    coarse = []
    for x in objects:
        spec = np.fft.fftshift(fft.fftn(np.fft.ifftshift(x, axes=axes), norm="ortho"), axes=axes)[box]
        coarse.append(np.fft.fftshift(fft.ifftn(np.fft.ifftshift(spec, axes=axes), norm="ortho"), axes=axes))
    pooled = []
    for sup in np.asarray(supports, bool):
        trimmed = sup[tuple(slice(0, m * factor) for m in small)]
        pooled.append(trimmed.reshape([v for m in small for v in (m, factor)]).any(axis=tuple(range(1, 2 * len(small), 2))))
    pattern = None if intensity is None else np.asarray(intensity)[box]
    return np.stack(coarse).astype(np.complex64), np.stack(pooled), pattern, factor


def convergence(errors, *, window: int = CONVERGENCE_WINDOW, fall: float = CONVERGED_FALL) -> dict:
    """Was a start still improving when its recipe ended? ``errors`` is its Fourier error per iteration (NaN
    for iterations skipped by a free-LLK switch).

    Returns ``{"window", "fall", "converged", "message"}``: ``fall`` is (e[-window] - e[-1]) / e[-1] over the
    last ``window`` iterations run (fewer if the run was shorter); ``converged`` when it is below ``fall``.
    """
    e = np.asarray(errors, float)
    e = e[np.isfinite(e)]
    if e.size < 2:
        return {"window": int(e.size), "fall": 0.0, "converged": True, "message": "converged (too few iterations to tell)"}
    w = min(int(window), e.size - 1)
    drop = float((e[-1 - w] - e[-1]) / max(e[-1], 1e-30))
    ok = drop < fall
    message = ("converged" if ok else
               f"not converged: the Fourier error still fell by {100 * drop:.2g}% over the last {w} iterations "
               "(more iterations of the last stage may improve the object)")
    return {"window": w, "fall": drop, "converged": bool(ok), "message": message}


def amplitude_rfactor(obj, intensity, mask=None) -> float:
    """The amplitude R-factor of a centre-origin object against a pattern (detector layout):
    sum | |F x| - sqrt(I) | / sum sqrt(I) over the measured pixels, F unitary (dimensionless). The usual figure of
    merit of CDI codes (PyNX prints it); the object must be in sqrt(counts), as a reconstruction's is."""
    xp = xp_of(obj)  # on the device for a CuPy object (the pattern and mask follow it there)
    obj = xp.asarray(obj, np.complex128)
    axes = tuple(range(obj.ndim))
    model = xp.abs(xp.fft.fftshift(fft.fftn(xp.fft.ifftshift(obj, axes=axes), norm="ortho"), axes=axes))
    measured = xp.ones(model.shape, bool) if mask is None else ~xp.asarray(mask, bool)
    amp = xp.sqrt(xp.maximum(xp.asarray(intensity, float)[measured], 0.0))
    return float(xp.abs(model[measured] - amp).sum() / amp.sum())


def support_iou(support, reference) -> float:
    """Intersection over union of ``support`` with ``reference`` at the best whole-pixel translation, the support or
    its point reflection (the twin's), whichever overlaps more (periodic arrays; from the FFT cross-correlation)."""
    ref = np.asarray(reference, float)
    spec_ref = np.conj(fft.fftn(ref))
    best = 0.0
    s = np.asarray(support, bool)
    for candidate in (s, twin(s.astype(np.complex64)).real > 0.5):
        counts = np.real(fft.ifftn(fft.fftn(candidate.astype(float)) * spec_ref))
        inter = float(counts.max())
        best = max(best, inter / (candidate.sum() + ref.sum() - inter))
    return best
