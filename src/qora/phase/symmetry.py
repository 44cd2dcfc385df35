"""Is the object real? The centrosymmetry of its pattern, measured on the pairs of pixels the detector has both of.

A real object's transform obeys F(-q) = F(q)*, so its pattern is centrosymmetric, I(-q) = I(q), up to the noise;
a phase that varies across the object (a ramp, a strain field, a phase object's structure) breaks the symmetry.
The default of :func:`qora.phase.reconstruct` runs the real-object search (:mod:`qora.phase.envelope`) when the
pattern is centrosymmetric and the stage recipe otherwise (docs/phase.md, "The ESRF logo").

Two measures, because a pattern may be counts or any scale:

- counts (whole numbers): the mean over the measured pairs of (I(q) - I(-q))^2 / max(I(q) + I(-q), 1), Poisson's
  chi^2 per pair: at most 1 for a real object (Poisson noise alone; less where counts are 0 or 1), 8 to 1,000 for
  the complex test objects (their phases span 1-1.5 rad) at 1e6-1e9 photons;
- any scale: the asymmetric share of the power, sum (I(q) - I(-q))^2 / sum (I(q) + I(-q))^2 over the pairs:
  4e-6 to 8e-6 for real objects' counts, 9e-7 on the ESRF logo's pattern (symmetrized by its makers, not
  counts), 0.13-0.54 for the complex test objects.
"""

from __future__ import annotations

import numpy as np

from qora.phase.recipe import ENVELOPE_RECIPE, is_default, looks_like_counts

__all__ = ["CHI2_REAL", "ASYMMETRY_REAL", "MIN_PAIRS", "mirror", "centrosymmetry", "choose_recipe"]

CHI2_REAL = 1.5  # counts: chi^2 per pair at most this is noise (Poisson alone gives <= 1)
ASYMMETRY_REAL = 1e-3  # any scale: an asymmetric share of the power at most this is a real object's
MIN_PAIRS = 100  # fewer measured pairs decide nothing


def mirror(a, xp=np, axes=None):
    """a(-q) about index n//2 on ``axes`` (every axis by default; detector layout), NumPy or CuPy."""
    out = a
    for ax in range(a.ndim) if axes is None else axes:
        out = xp.roll(xp.flip(out, axis=ax), 1 - a.shape[ax] % 2, axis=ax)
    return out


def centrosymmetry(intensity, mask=None) -> dict:
    """How centrosymmetric a pattern (detector layout, q = 0 at n//2; ``mask`` True where unmeasured) is.

    Returns ``{"pairs", "chi2", "asymmetry", "real", "message"}``: the number of measured pixels whose mirror
    was measured too (q != 0, nonzero sum), chi^2 per pair (None unless the pattern is counts), the asymmetric
    share of the power, whether the object looks real, and one line saying so with the numbers."""
    intensity = np.asarray(intensity, np.float64)
    measured = np.ones(intensity.shape, bool) if mask is None else ~np.asarray(mask, bool)
    mirrored = mirror(intensity)
    total = intensity + mirrored
    pairs = measured & mirror(measured) & (total > 0)
    pairs[tuple(n // 2 for n in intensity.shape)] = False  # q = 0 is its own mirror
    difference = (intensity - mirrored)[pairs]
    count = int(pairs.sum())
    asymmetry = float(np.sum(difference**2) / max(np.sum(total[pairs] ** 2), 1e-300)) if count else float("nan")
    chi2 = None
    if count and looks_like_counts(intensity, None if mask is None else np.asarray(mask, bool)):
        chi2 = float(np.mean(difference**2 / np.maximum(total[pairs], 1.0)))
    real = count >= MIN_PAIRS and (asymmetry <= ASYMMETRY_REAL or (chi2 is not None and chi2 <= CHI2_REAL))
    numbers = f"asymmetric power {asymmetry:.2g}" + ("" if chi2 is None else f", chi2 per pair {chi2:.3g}")
    if count < MIN_PAIRS:
        message = f"too few measured mirror pairs ({count}) to tell whether the object is real"
    elif real:
        message = f"the pattern is centrosymmetric ({numbers} over {count} pairs): a real object"
    else:
        message = f"the pattern is not centrosymmetric ({numbers} over {count} pairs): a complex object"
    return {"pairs": count, "chi2": chi2, "asymmetry": asymmetry, "real": bool(real), "message": message}


def choose_recipe(intensity, mask=None, *, recipe=None, support=None, variant="auto", rank="fourier"):
    """What the default runs on this pattern: ``(recipe, reason)``. Where the default was asked for (no recipe, no
    support, the automatic variant and the Fourier ranking) and the pattern is centrosymmetric
    (:func:`qora.phase.symmetry.centrosymmetry`: a real object), the real-object search ``"real-envelope"`` with
    the reason in one line; else ``recipe`` as given and "". One place for :func:`reconstruct` and the Dask
    campaigns (:func:`qora.distributed.reconstruct_many`)."""
    if not (is_default(recipe) and support is None and variant == "auto" and rank == "fourier"):
        return recipe, ""
    from qora.phase.checks import check_intensity

    intensity, mask = check_intensity(intensity, mask)
    symmetry = centrosymmetry(intensity, mask)
    if symmetry["real"]:  # a real object: the search made for one (docs/phase.md, "The ESRF logo")
        return ENVELOPE_RECIPE, symmetry["message"] + ": ran the real-envelope recipe"
    return recipe, ""
