"""Recipes: the sequence of algorithm stages of a reconstruction, as frozen data.

A recipe reads like its notation::

    HIO**400 ER**100
    HIO(beta=0.8, sw=20, sigma=2, sigma_min=1, threshold=0.2)**600 ER(constraint=real)**100

Each stage is ``NAME(options)**iterations`` with NAME one of ER, HIO, RAAR, ML (Poisson-likelihood
refinement of the object found, :mod:`qora.phase.ml`).
Options: ``beta`` (HIO/RAAR feedback, default 0.9), ``constraint`` (``none``,
``real``, ``positive``), partial coherence: ``psf`` (``none``, ``gaussian``, ``voigt``), ``psf_sigma``,
``psf_eta``, ``psf_every`` (:mod:`qora.phase.coherence`), ``band`` (noise-aware modulus,
:mod:`qora.phase.band`), ``sharpen`` (fit counts deconvolved for a Gaussian blur, :func:`qora.phase.coherence.sharpen`),
``average`` (end the stage on the mean of its last iterates, :mod:`qora.phase.average`), and shrinkwrap: ``sw``
(update the support every that
many iterations; 0 = never), ``sigma`` and ``sigma_min`` (Gaussian blur in
pixels, decreasing geometrically from the first to the second over the stage's
updates), ``threshold`` (fraction of the blurred maximum). ``str(recipe)`` prints
the recipe back in canonical form, so it can be stored with a result and parsed
again.
"""

from __future__ import annotations

import math
import numbers
import re
from dataclasses import dataclass, field, fields, replace

from qora.io.errors import InputError
from qora.phase.physics import ALGORITHMS as PROJECTIONS, update_coefficients

# ML: gradient steps on the Poisson log-likelihood of the counts (qora.phase.ml), to refine a found object
ALGORITHMS = PROJECTIONS + ("ML",)
MAX_GROW = 16  # pixels a stage may dilate the support by
# The most iterations one stage may ask for: a 512^3 iteration takes ~4 ms on an H200, so a million is over an hour
# of one start; a number beyond it is a typing slip (HIO**10000000000), not a plan, and would run for years.
MAX_STAGE_ITERATIONS = 1_000_000
# What a stage does with the unmeasured pixels: leave them free, or hold them at an interpolated modulus
MASKED_RULES = ("free", "fill")

__all__ = ["Stage", "Recipe", "RecipeError", "default_recipe", "DEFAULT_RECIPE", "PYNX_RULE_RECIPE", "NAMED_RECIPES",
           "ENVELOPE_RECIPE", "is_envelope",
           "named_recipe", "FEW_PHOTONS_RECIPE", "PARTIAL_COHERENCE_RECIPE", "FEW_PHOTONS_PER_SPECKLE", "photons_per_speckle", "is_default",
           "looks_like_counts", "partial_coherence_recipe",
           "SHARPENED_SEARCH_RECIPE", "SHARPEN_MARGIN"]


class RecipeError(InputError):
    """A recipe string that does not parse, or a stage with invalid options (an InputError, so a
    ValueError)."""


@dataclass(frozen=True)
class Stage:
    """One stage: ``iterations`` of ``algorithm`` with its options.

    Attributes
    ----------
    algorithm : str
        One of ``ALGORITHMS``: ER, HIO, RAAR (projections), or ML (Poisson-likelihood refinement,
        :mod:`qora.phase.ml`; ``beta`` and ``constraint`` do not apply to it).
    iterations : int
        Iterations of this stage (count, at least 1).
    beta : float
        Feedback parameter in (0, 1], dimensionless.
    constraint : {None, "real", "positive"}
        Extra constraint inside the support.
    sw : int
        Shrinkwrap every ``sw`` iterations (0: the support is kept).
    sigma, sigma_min : float
        Shrinkwrap blur, std in pixels, from ``sigma`` at the stage's first update down to ``sigma_min``
        at its last (geometric).
    threshold : float
        Shrinkwrap threshold, a fraction of the statistic ``stat`` of the blurred modulus (in (0, 1) for
        ``max``; positive for ``rms`` and ``mean``).
    stat : {"max", "rms", "mean"}
        The statistic: the maximum over the array, or the rms or mean over the current support
        (:func:`qora.phase.support.shrinkwrap_update`).
    smin, smax : float
        Size guard: the support is kept between ``smin`` and ``smax`` times the object volume estimated
        from the autocorrelation support (A / 2^d); a shrinkwrap outside is re-thresholded to the bound
        and the retune recorded in the result's ``support_log``. 0 switches a bound off (``smin=0``
        falls back to refusing a collapse below a fifth of the old support).
    detwin : int
        1: at the stage's start, each support is cut to its half beyond its centroid along the first
        axis (:func:`qora.phase.support.halve_supports`), to break the twin ambiguity.
    grow : int
        At the stage's start, each support dilated by this many pixels (0 to 16; one face-neighbour step
        each, :func:`qora.phase.support.grow_supports`): after a shrinkwrap search whose threshold cut the
        object's edges (docs/phase.md, "The final support grown").
    prange : float
        Phase range, radians (0: off): at each shrinkwrap, support pixels whose phase is further than
        this from the support's mean phase are dropped (:func:`qora.phase.support.within_phase_range`).
    shape : {None, "filled", "convex"}
        Shape prior applied to each shrinkwrap support (:mod:`qora.phase.support_shape`): enclosed
        holes filled, or the convex hull (a faceted crystal). Only for objects known to have that shape.
    psf : {None, "gaussian", "voigt"}
        Partial coherence (:mod:`qora.phase.coherence`): the modulus constraint fits the model intensity
        blurred by a kernel that starts as this profile and is refined by Richardson-Lucy; None: coherent.
        Consecutive stages with the same psf options share the kernel. ER, HIO and RAAR only.
    psf_sigma : float
        The first kernel's Gaussian std, pixels (the pseudo-Voigt's Lorentzian has the same FWHM); 0: fitted to
        each start's object when the stage starts (:func:`qora.phase.coherence.blur_width`, at least 0.25 px).
    psf_eta : float
        Pseudo-Voigt: the Lorentzian's share, in [0, 1].
    psf_every : int
        The kernel refined every that many iterations (0: the kernel is kept).
    psf_fit : {"rl", "width"}
        How: a Richardson-Lucy step (the kernel free within its window) or a step of the Gaussian's width
        (one parameter; :class:`qora.phase.coherence.Coherence`).
    band : float
        Noise-aware modulus (:mod:`qora.phase.band`): on measured pixels ``|F x|`` is kept within
        ``sqrt(I) +- band * 0.5`` (0.5 = the std of sqrt of Poisson counts, sqrt(photons)) and moved to the
        nearest edge outside it; 0 (default) is the exact modulus projection. For photon counts; ER, HIO
        and RAAR without ``psf``.
    masked : {"free", "fill"}
        The unmeasured pixels (beamstop, gaps) during this stage: ``free`` keeps the model's value there;
        ``fill`` holds them at the modulus interpolated from their measured neighbours
        (:func:`qora.phase.support.fill_masked`), which keeps energy out of the modes nothing measured
        (a gap's stripes, the missing centre's blob) while the support is being found. Held-out pixels
        of the free LLK are never filled.
    settle : int
        With ``sw``: the last ``settle`` iterations before each support update are error reduction (ER), so the
        support is read from an object estimate (the modulus projection kept inside the support, zero outside)
        rather than from HIO's or RAAR's outside-support feedback, whose values grow where the support is wrong
        and which shrinkwrap would otherwise count as object (docs/phase.md, "The ESRF logo"). PyNX's example
        for measured patterns does the same (five ER before each update). 0: off; less than ``sw``.
    average : int
        The stage's last ``average`` iterations run with the exact modulus projection as array code, their
        in-support iterates (each start's global phase matched to the first) are averaged, and the stage ends
        with that mean as the iterate (:mod:`qora.phase.average`; 0 off). ER, HIO and RAAR without shrinkwrap,
        ``psf`` or ``band``.
    sharpen : float
        Std (detector pixels, 0 off) of a Gaussian blur the stage's counts are deconvolved for
        (:func:`qora.phase.coherence.sharpen`): a coherent search on a pattern a partially coherent beam blurred.
        ER, HIO and RAAR without ``psf`` (the psf model fits the blur on the counts as measured).
    switch : int
        Every that many iterations, the Poisson deviance on the held-out pixels (the free LLK,
        :mod:`qora.phase.llk`) is computed; the stage ends early, moving on to the next stage, once no start
        has improved on its lowest value for 3 checks (0: never). Needs held-out pixels (``free_fraction > 0``).
    """

    algorithm: str
    iterations: int
    beta: float = 0.9
    constraint: str | None = None
    sw: int = 0
    sigma: float = 2.0
    sigma_min: float = 1.0
    threshold: float = 0.2
    stat: str = "max"
    smin: float = 0.0
    smax: float = 0.0
    detwin: int = 0
    grow: int = 0
    shape: str | None = None
    prange: float = 0.0
    psf: str | None = None
    psf_sigma: float = 1.0
    psf_eta: float = 0.5
    psf_every: int = 5
    psf_fit: str = "rl"
    band: float = 0.0
    masked: str = "free"
    switch: int = 0
    sharpen: float = 0.0
    average: int = 0
    settle: int = 0

    def __post_init__(self):
        if self.algorithm not in ALGORITHMS:
            raise RecipeError(f"recipe: unknown algorithm {self.algorithm!r}; expected one of {ALGORITHMS}")
        for name in ("beta", "sigma", "sigma_min", "threshold", "prange"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
                raise RecipeError(f"recipe stage {self.algorithm}: {name} must be a finite number, got {value!r}")
        if self.detwin not in (0, 1):
            raise RecipeError(f"recipe stage {self.algorithm}: detwin must be 0 or 1, got {self.detwin!r}")
        if (isinstance(self.grow, bool) or not isinstance(self.grow, numbers.Integral)
                or not 0 <= self.grow <= MAX_GROW):
            raise RecipeError(f"recipe stage {self.algorithm}: grow must be an integer from 0 to {MAX_GROW}, "
                              f"got {self.grow!r}")
        if isinstance(self.sw, bool) or not isinstance(self.sw, numbers.Integral):
            raise RecipeError(f"recipe stage {self.algorithm}: sw must be an integer, got {self.sw!r}")
        if (isinstance(self.iterations, bool) or not isinstance(self.iterations, numbers.Integral)
                or self.iterations < 1):
            raise RecipeError(f"recipe stage {self.algorithm}: iterations must be a positive integer, "
                              f"got {self.iterations!r}")
        if self.iterations > MAX_STAGE_ITERATIONS:
            raise RecipeError(f"recipe stage {self.algorithm}: {self.iterations} iterations is more than the "
                              f"{MAX_STAGE_ITERATIONS:,} a stage may run; split the work or lower the count")
        if not 0.0 < self.beta <= 1.0:
            raise RecipeError(f"recipe stage {self.algorithm}: beta must be in (0, 1], got {self.beta}")
        if self.constraint not in (None, "real", "positive"):
            raise RecipeError(f"recipe stage {self.algorithm}: constraint must be none, real or positive, "
                              f"got {self.constraint!r}")
        from qora.phase.support_shape import SHAPES

        if not 0.0 <= self.prange <= math.pi:
            raise RecipeError(f"recipe stage {self.algorithm}: prange must be in [0, pi] radians (0: off), "
                              f"got {self.prange}")
        if self.shape not in SHAPES:
            raise RecipeError(f"recipe stage {self.algorithm}: shape must be none, filled or convex, "
                              f"got {self.shape!r}")
        if self.sw < 0:
            raise RecipeError(f"recipe stage {self.algorithm}: sw must be >= 0, got {self.sw}")
        if not (self.sigma > 0 and self.sigma_min > 0):
            raise RecipeError(f"recipe stage {self.algorithm}: sigma and sigma_min must be positive")
        from qora.phase.support import STATISTICS

        if self.stat not in STATISTICS:
            raise RecipeError(f"recipe stage {self.algorithm}: stat must be one of {STATISTICS}, got {self.stat!r}")
        if not 0.0 < self.threshold < (1.0 if self.stat == "max" else 10.0):
            raise RecipeError(f"recipe stage {self.algorithm}: threshold must be in (0, 1) for stat=max and in "
                              f"(0, 10) for rms and mean, got {self.threshold}")
        for name in ("smin", "smax"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0.0 <= value < 1e6:
                raise RecipeError(f"recipe stage {self.algorithm}: {name} must be a number >= 0, got {value!r}")
        if self.smax and self.smin > self.smax:
            raise RecipeError(f"recipe stage {self.algorithm}: smin ({self.smin}) exceeds smax ({self.smax})")
        if self.masked not in MASKED_RULES:
            raise RecipeError(f"recipe stage {self.algorithm}: masked must be one of {MASKED_RULES}, got {self.masked!r}")
        if isinstance(self.switch, bool) or not isinstance(self.switch, numbers.Integral) or self.switch < 0:
            raise RecipeError(f"recipe stage {self.algorithm}: switch must be an integer >= 0, got {self.switch!r}")
        if self.switch and self.algorithm == "ML":
            raise RecipeError("recipe stage ML: switch applies to ER, HIO and RAAR stages")
        self._check_psf()
        self._check_band()
        self._check_sharpen()
        self._check_average()
        self._check_settle()

    def _check_settle(self) -> None:
        value = self.settle
        where = f"recipe stage {self.algorithm}"
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
            raise RecipeError(f"{where}: settle must be an integer >= 0, got {value!r}")
        if value and not 0 < value < self.sw:
            raise RecipeError(f"{where}: settle ({value}) needs shrinkwrap (sw > 0) and must be less than sw ({self.sw})")
        if value and (self.algorithm == "ML" or self.psf is not None or self.band or self.average):
            raise RecipeError(f"{where}: settle applies to ER, HIO and RAAR stages without psf, band or average")

    def _check_average(self) -> None:
        where = f"recipe stage {self.algorithm}"
        value = self.average
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not 0 <= value <= self.iterations:
            raise RecipeError(f"{where}: average must be an integer in [0, iterations], got {value!r}")
        if value and (self.algorithm == "ML" or self.sw or self.psf is not None or self.band):
            raise RecipeError(f"{where}: average applies to ER, HIO and RAAR stages without sw, psf or band")

    def _check_sharpen(self) -> None:
        where = f"recipe stage {self.algorithm}"
        value = self.sharpen
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0.0 <= value <= 50.0:
            raise RecipeError(f"{where}: sharpen must be a width in [0, 50] pixels (0: off), got {value!r}")
        if value and self.algorithm == "ML":
            raise RecipeError(f"{where}: sharpen applies to ER, HIO and RAAR stages, not to ML")
        if value and self.psf is not None:
            raise RecipeError(f"{where}: sharpen and psf model the same blur two ways; use one per stage")

    def _check_band(self) -> None:
        where = f"recipe stage {self.algorithm}"
        if isinstance(self.band, bool) or not isinstance(self.band, numbers.Real) or not 0.0 <= self.band <= 100.0:
            raise RecipeError(f"{where}: band must be a number in [0, 100] (standard deviations), got {self.band!r}")
        if self.band and self.algorithm == "ML":
            raise RecipeError(f"{where}: band applies to ER, HIO and RAAR stages, not to ML")
        if self.band and self.psf is not None:
            raise RecipeError(f"{where}: band and psf are two different modulus constraints; use one per stage")

    def _check_psf(self) -> None:
        from qora.phase.coherence import FITS, MODELS

        if self.psf is None:
            return
        where = f"recipe stage {self.algorithm}"
        if self.psf not in MODELS:
            raise RecipeError(f"{where}: psf must be none or one of {MODELS}, got {self.psf!r}")
        if self.algorithm == "ML":
            raise RecipeError(f"{where}: psf applies to ER, HIO and RAAR stages, not to ML")
        for name in ("psf_sigma", "psf_eta"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
                raise RecipeError(f"{where}: {name} must be a finite number, got {value!r}")
        if not 0.0 <= self.psf_sigma <= 50.0:
            raise RecipeError(f"{where}: psf_sigma must be in [0, 50] pixels (0: fitted to each start), "
                              f"got {self.psf_sigma}")
        if not 0.0 <= self.psf_eta <= 1.0:
            raise RecipeError(f"{where}: psf_eta must be in [0, 1], got {self.psf_eta}")
        if isinstance(self.psf_every, bool) or not isinstance(self.psf_every, numbers.Integral) or self.psf_every < 0:
            raise RecipeError(f"{where}: psf_every must be an integer >= 0, got {self.psf_every!r}")
        if self.psf_fit not in FITS:
            raise RecipeError(f"{where}: psf_fit must be one of {FITS}, got {self.psf_fit!r}")

    @property
    def kind(self) -> str:
        """How the stage's iterations run (:data:`qora.phase.stage_kinds.STAGE_KINDS` maps each to its iteration):
        "ml" (Poisson-likelihood refinement), "partial-coherence" (``psf``), "band" (the noise-aware modulus) or
        "projection" (ER, HIO, RAAR with the exact modulus). The last ``average`` iterations of a stage are
        averaged whatever its kind."""
        if self.algorithm == "ML":
            return "ml"
        return "partial-coherence" if self.psf else "band" if self.band else "projection"

    @property
    def coefficients(self) -> tuple[float, float]:
        """(a, b) of the outside-support update (ML: (0, 0), the object is kept on the support)."""
        if self.algorithm == "ML":
            return 0.0, 0.0
        return update_coefficients(self.algorithm, self.beta)

    def sigma_at(self, update: int, updates: int) -> float:
        """Blur for the ``update``-th of ``updates`` shrinkwrap updates of this stage."""
        if updates <= 1:
            return self.sigma
        t = update / (updates - 1)
        return float(self.sigma * (self.sigma_min / self.sigma) ** t)

    def __str__(self) -> str:
        opts = []
        defaults = Stage("ER", 1)
        for f in fields(self):
            if f.name in ("algorithm", "iterations"):
                continue
            value = getattr(self, f.name)
            if f.name in ("sigma", "sigma_min", "threshold", "stat", "smin", "smax", "shape", "prange",
                          "settle") and self.sw == 0:
                continue
            if f.name.startswith("psf_") and self.psf is None:
                continue
            if value != getattr(defaults, f.name):
                opts.append(f"{f.name}={'none' if value is None else _fmt(value)}")
        inner = f"({', '.join(opts)})" if opts else ""
        return f"{self.algorithm}{inner}**{self.iterations}"


def _fmt(v) -> str:
    if isinstance(v, float):
        return repr(v).rstrip("0").rstrip(".") if "." in repr(v) else repr(v)
    return str(v)


_STAGE = re.compile(r"\s*([A-Za-z]+)\s*(?:\(([^()]*)\))?\s*\*\*\s*(\d+)\s*")
_OPTION_TYPES = {"beta": float, "sw": int, "sigma": float, "sigma_min": float, "threshold": float,
                 "constraint": str, "stat": str, "smin": float, "smax": float, "detwin": int, "grow": int, "psf": str,
                 "psf_sigma": float, "psf_eta": float, "psf_every": int, "psf_fit": str, "band": float, "masked": str,
                 "switch": int, "shape": str, "prange": float, "sharpen": float,
                 "average": int, "settle": int}


def _parse_options(text: str, where: str) -> dict:
    out = {}
    if not text or not text.strip():
        return out
    for item in text.split(","):
        if "=" not in item:
            raise RecipeError(f"{where}: option {item.strip()!r} is not of the form name=value")
        key, value = (s.strip() for s in item.split("=", 1))
        if key not in _OPTION_TYPES:
            raise RecipeError(f"{where}: unknown option {key!r}; expected one of {sorted(_OPTION_TYPES)}")
        if key in ("constraint", "shape", "psf"):
            out[key] = None if value.lower() == "none" else value.lower()
            continue
        if key in ("stat", "masked", "psf_fit"):
            out[key] = value.lower()
            continue
        try:
            out[key] = _OPTION_TYPES[key](value)
        except ValueError:
            raise RecipeError(f"{where}: option {key}={value!r} is not a valid {_OPTION_TYPES[key].__name__}") from None
    return out


@dataclass(frozen=True)
class Recipe:
    """An ordered tuple of :class:`Stage` objects."""

    stages: tuple = field(default_factory=tuple)

    def __post_init__(self):
        if not self.stages:
            raise RecipeError("a recipe needs at least one stage")

    @classmethod
    def parse(cls, text: "str | Recipe") -> "Recipe":
        """Parse ``"HIO**400 ER**100"`` (see the module docstring for options)."""
        if isinstance(text, Recipe):
            return text
        if not isinstance(text, str):
            raise RecipeError(f"recipe must be a string (or a Recipe), got {type(text).__name__}")
        stages = []
        pos = 0
        text = text.strip()
        if not text:
            raise RecipeError("empty recipe: give stages such as HIO**400 ER**100")
        while pos < len(text):
            m = _STAGE.match(text, pos)
            if m is None:
                raise RecipeError(f"cannot parse recipe at character {pos}: {text[pos:pos + 30]!r} "
                                  "(expected NAME(options)**N, e.g. HIO**400)")
            name, opts, n = m.group(1).upper(), m.group(2), int(m.group(3))
            stages.append(Stage(name, n, **_parse_options(opts, f"recipe stage {len(stages) + 1} ({name})")))
            pos = m.end()
        return cls(tuple(stages))

    @property
    def iterations(self) -> int:
        return sum(s.iterations for s in self.stages)

    @property
    def needs_free_pixels(self) -> bool:
        """Whether a stage ends on the free LLK (``switch``), which needs held-out pixels."""
        return any(s.switch for s in self.stages)

    def __add__(self, other: "Recipe | str") -> "Recipe":
        return Recipe(self.stages + Recipe.parse(other).stages)

    def __str__(self) -> str:
        return " ".join(str(s) for s in self.stages)

    def with_options(self, **options) -> "Recipe":
        """The same stages with ``options`` applied to every stage."""
        return Recipe(tuple(replace(s, **options) for s in self.stages))


DEFAULT_RECIPE = ("HIO(sw=20, sigma=3, sigma_min=1, threshold=0.25, smin=0.25, smax=4)**1000 "
                  "ER(sw=20, sigma=1, sigma_min=0.5, threshold=0.25, smin=0.25, smax=4)**200 ER**300")


# Few photons: the same schedule with the threshold taken from the rms of the blurred modulus inside the
# support (PyNX's statistic) instead of its maximum. At few counts the beamstop's unmeasured low-q modes
# leave a smooth slope across the object's modulus; a threshold on the maximum then cuts the dim side off
# (the support collapses to part of the object), one on the rms does not (docs/phase.md, "Few photons").
# Then HIO on the support found, its last 800 iterates averaged (qora.phase.average), and ER from the mean: at 145
# photons per speckle ER alone stops at a fixed point 0.2-0.3 from the truth, and the mean of HIO's iterates
# averages the noise that places it there (triangle_256_1e6: 0/10 -> 6-8/10 within 0.2; docs/phase.md, "Few photons:
# what the counts allow").
# The search HIO runs 1500 iterations (1000 in the standard default): at these counts a longer search found the
# triangle in one more start of ten (9/10 against 7-8/10 with the averaged HIO after it).
# Then the support is found again from the mean (five shrinkwrap updates of ER, the same rms rule and blur 1 -> 0.5
# px) and the averaged HIO and ER repeated on it: the mean's modulus has less noise than any single iterate's, so
# its support's edge is closer to the object's, and the starts that ended just above the bound (0.20-0.29, a support
# off along part of the edge) come below it. The size guard's upper bound is 2 (not 4) object volumes in every
# shrinkwrap: the rms threshold sits low while HIO's iterate is still noise, the support swells to the bound in the
# first updates, and a tighter bound there lost fewer starts. triangle_256_1e6, seeds 0-3, 10 starts each: 40/40
# within 0.2 against 33/40 before (docs/phase.md, "Few photons: what the counts allow").
FEW_PHOTONS_RECIPE = ("HIO(sw=20, sigma=3, sigma_min=1, threshold=0.25, stat=rms, smin=0.25, smax=2)**1500 "
                      "ER(sw=20, sigma=1, sigma_min=0.5, threshold=0.25, stat=rms, smin=0.25, smax=2)**200 ER**300 "
                      "HIO(average=800)**1000 "
                      "ER(sw=20, sigma=1, sigma_min=0.5, threshold=0.25, stat=rms, smin=0.25, smax=2)**100 "
                      "HIO(average=800)**1000 ER**100")
# Below this many photons per speckle (measured counts / object pixels) the default is the few-photon recipe
FEW_PHOTONS_PER_SPECKLE = 1000.0


def photons_per_speckle(counts: float, object_pixels: float) -> float:
    """Mean counts per independent speckle: the measured total over the object's pixel count (an object of
    V pixels has V independent Fourier samples, whatever the oversampling)."""
    return float(counts) / max(1.0, float(object_pixels))


def looks_like_counts(intensity, mask=None) -> bool:
    """Whether a pattern is photon counts (whole numbers on the measured pixels): only then is its total a
    photon count."""
    import numpy as np

    measured = intensity if mask is None else intensity[~mask]
    return bool(measured.size) and bool(np.all(measured == np.round(measured)))


def is_default(text) -> bool:
    """Whether ``text`` asks for the default recipe (None or the name ``default``), which the solver may pick
    by the photon count."""
    return text is None or (isinstance(text, str) and text.strip().lower() == "default")


def default_recipe(*, photons_per_speckle: float | None = None) -> Recipe:
    """The recipe that reconstructs the test objects from an autocorrelation support without tuning.

    With ``photons_per_speckle`` below :data:`FEW_PHOTONS_PER_SPECKLE`, :data:`FEW_PHOTONS_RECIPE` (the
    same schedule with the shrinkwrap threshold on the rms and a longer search, then HIO on the support found
    ending on the mean of its iterates, the support found again from that mean, HIO averaged once more on it,
    and ER); the solver passes it for count data. After a default run the
    solver also checks the counts for a partially coherent beam (:meth:`qora.phase.Solver.run`).

    HIO with shrinkwrap every 20 iterations (blur 3 -> 1 px, threshold 0.25)
    finds the object; ER with a light shrinkwrap tightens the support to it;
    plain ER then converges on that support (for a 3D pattern the solver adds ER on that support grown,
    :func:`with_grown_finish`). The shrinkwrap is kept between a quarter
    and four times the object volume the autocorrelation implies (a collapse to a blob, or
    a support swelling over noise, is re-thresholded and logged). See docs/phase.md
    ("Support from the pattern alone", "Success rates") for how it was chosen.
    """
    if photons_per_speckle is not None and photons_per_speckle < FEW_PHOTONS_PER_SPECKLE:
        return Recipe.parse(FEW_PHOTONS_RECIPE)
    return Recipe.parse(DEFAULT_RECIPE)


# In 3D the default's search ends on a support cut at 0.25 of the blurred modulus's maximum, which trims the
# objects' edges. Dilated by 3 voxels after the search, then ER: the default's median object error, 10 starts on the
# CPU, prism_48 0.033 (0.058 before), featured3d_64 0.053 (0.063), every start within the bound; on the 34-ID-C Bragg
# crop the stage list's final error 0.143-0.157 -> 0.108-0.111, the default's (its coherence check reruns with the psf
# model there) 0.131-0.137 -> 0.117-0.121 (docs/phase.md, "The final support grown, after the search"). In 2D it
# changes little and mostly for the worse, so only 3D patterns get it.
GROWN_FINISH_VOXELS = 3
GROWN_FINISH_ITERATIONS = 600


def with_grown_finish(recipe: "Recipe") -> "Recipe":
    """``recipe`` followed by ER on each start's final support dilated by :data:`GROWN_FINISH_VOXELS` (the default's
    ending for 3D patterns). The new stage keeps the last stage's psf model, so a partially coherent run's kernels
    carry on (:meth:`qora.phase.Solver.run`)."""
    last = recipe.stages[-1]
    finish = Stage("ER", GROWN_FINISH_ITERATIONS, grow=GROWN_FINISH_VOXELS, psf=last.psf, psf_sigma=last.psf_sigma,
                   psf_eta=last.psf_eta, psf_every=last.psf_every, psf_fit=last.psf_fit)
    return Recipe(tuple(recipe.stages) + (finish,))


# PyNX's documented support rule, written as a recipe of ours for comparison (PyNX itself is not on the
# package index): RAAR with the support updated every 50 cycles, threshold 0.25 of the rms of the blurred
# modulus inside the support, blur decreasing from 2 to 0.5 pixels, a size guard, then ER.
PYNX_RULE_RECIPE = ("RAAR(beta=0.9, sw=50, sigma=2, sigma_min=0.5, threshold=0.25, stat=rms, smin=0.2, smax=1.5)**600 "
                    "ER(sw=50, sigma=0.5, sigma_min=0.5, threshold=0.25, stat=rms, smin=0.2, smax=1.5)**200")
# Partial coherence: the default's schedule with the shrinkwrap threshold at 0.2 of the maximum (the blur
# lowers the object's edges in the iterate, and 0.25 cut into it) and the psf model (qora.phase.coherence)
# on the ER stages, a Gaussian kernel of 1 pixel refined by Richardson-Lucy every 5 iterations. On
# featured_256_psf, 10 starts: 8/10 within the bound (median 0.090), against 6/10 with threshold 0.25 and
# 5/10 with the psf on every stage; on coherent data the psf during the search goes wrong (featured_256:
# 0.34-0.49 instead of 0.04). docs/phase.md, "Partial coherence".
PARTIAL_COHERENCE_RECIPE = ("HIO(sw=20, sigma=3, sigma_min=1, threshold=0.2, smin=0.25, smax=4)**1000 "
                            "ER(sw=20, sigma=1, sigma_min=0.5, threshold=0.2, smin=0.25, smax=4, psf=gaussian)**200 "
                            "ER(psf=gaussian)**300")


# The default's schedule for counts its check found blurred by W px: the search (HIO, then ER with shrinkwrap) on
# the counts sharpened for a blur of W + SHARPEN_MARGIN, then ER on the measured counts with the psf model, each
# start's first kernel fitted to its object (psf_sigma=0). {sharpen} is filled in by partial_coherence_recipe.
SHARPENED_SEARCH_RECIPE = ("HIO(sw=20, sigma=3, sigma_min=1, threshold=0.25, smin=0.25, smax=4, sharpen={sharpen})**1000 "
                           "ER(sw=20, sigma=1, sigma_min=0.5, threshold=0.25, smin=0.25, smax=4, sharpen={sharpen})**200 "
                           "ER(psf=gaussian, psf_sigma=0)**300")
# The blur the check fits to a coherent reconstruction is short of the beam's: the coherent object takes part of
# it up (0.40-0.5 px for the 0.7 px of featured_256_psf), and a search sharpened for 0.4 px found the object in
# 2/10 starts, for 0.45 px in 7/10, for 0.5 and 0.6 px in 10/10 (docs/phase.md, "Partial coherence from the data").
SHARPEN_MARGIN = 0.1


def partial_coherence_recipe(width: float | None = None) -> Recipe:
    """The recipe the default runs when its check finds the counts blurred by ``width`` pixels (``Solver.run``,
    docs/phase.md, "Partial coherence from the data"): :data:`SHARPENED_SEARCH_RECIPE`, the search on the counts
    sharpened for ``width + SHARPEN_MARGIN`` px, the refinement with the psf model. None: the named recipe
    :data:`PARTIAL_COHERENCE_RECIPE` (for a user who knows the beam is partially coherent)."""
    if width is None:
        return Recipe.parse(PARTIAL_COHERENCE_RECIPE)
    if isinstance(width, bool) or not isinstance(width, numbers.Real) or not 0.0 < width <= 49.0:
        raise RecipeError(f"the fitted blur width must be in (0, 49] pixels, got {width!r}")
    return Recipe.parse(SHARPENED_SEARCH_RECIPE.format(sharpen=_fmt(round(float(width) + SHARPEN_MARGIN, 3))))


NAMED_RECIPES = {"default": DEFAULT_RECIPE, "pynx-rule": PYNX_RULE_RECIPE, "few-photons": FEW_PHOTONS_RECIPE,
                 "partial-coherence": PARTIAL_COHERENCE_RECIPE}


ENVELOPE_RECIPE = "real-envelope"  # a search of its own for real, non-negative objects (qora.phase.envelope)


def is_envelope(text) -> bool:
    """Whether ``text`` names the real-object envelope search (:mod:`qora.phase.envelope`), which is not a
    list of stages."""
    return isinstance(text, str) and text.strip().lower() == ENVELOPE_RECIPE


def named_recipe(text: "str | Recipe | None") -> Recipe:
    """A recipe by name (``default``, ``pynx-rule``, ``few-photons``, ``partial-coherence``) or from its
    notation; None is the
    default (for the photon-count choice see :meth:`qora.phase.Solver.run`)."""
    if text is None:
        return default_recipe()
    if isinstance(text, str) and text.strip().lower() in NAMED_RECIPES:
        return Recipe.parse(NAMED_RECIPES[text.strip().lower()])
    return Recipe.parse(text)
