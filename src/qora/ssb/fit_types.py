"""The session fit's two types: :class:`FitOptions` (what :func:`qora.ssb.fit` is asked, checked once) and
:class:`FitResult` (what it found, saved and loaded as one JSON file).

A :class:`FitResult` reads like the JSON object it is written as (``result["thick"]["parameters"]``), so
a script that loaded a fit file with ``json.load`` and one that holds the result see the same keys.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from qora.io.errors import InputError
from qora.io.options import with_changes
from qora.io.validate import integer, nonnegative, number, positive
from qora.ssb.depth import DEPTH_MODELS, MOST_SECTIONS
from qora.ssb.identify import COARSE_ROWS
from qora.ssb.orientation import check_orientation

__all__ = ["FitOptions", "FitResult", "FitImages", "BRANCHES", "STARTS", "THICK_TILT_STARTS"]

BRANCHES = ("auto", "as-fitted", "flipped")  # the branch: the rule, or either branch by hand
STARTS = 4  # Newton's starts in the standard fit with the rotation given (the search's distinct best trials)
# the thick fit's starts: the standard fit's values with these tilts (rad), so that a second tilt
# basin as good as the first is found and the tilt reported as not determined
THICK_TILT_STARTS = ((0.0, 0.0), (0.01, 0.01), (-0.01, -0.01))


def _band(band) -> tuple[float, float]:
    try:
        low, high = band
    except (TypeError, ValueError):
        raise InputError(f"band must be (low, high) in 1/A, got {band!r}") from None
    low, high = nonnegative("band low", low, unit="1/A"), positive("band high", high, unit="1/A")
    if not low < high:
        raise InputError(f"band must be (low, high) with low < high (1/A), got {band!r}")
    return (low, high)


@dataclass(frozen=True)
class FitOptions:
    """What the session fit is asked (:func:`qora.ssb.fitting.fit_session`, whose docstring says what each
    does); every field is checked when the options are made, so a wrong one is an :class:`InputError` before
    any pass over G.

    rotation : float or None
        The scan rotation, rad; None: fitted.
    orientation : str
        The detector's against the scan (:data:`qora.ssb.orientation.ORIENTATIONS`) or "auto".
    branch : {"auto", "as-fitted", "flipped"}
    tilt : bool
        Fit the thick-sample branch (thickness, A; specimen tilt, rad) beside the standard one.
    band : (float, float)
        The spatial frequencies the agreement is summed over, 1/A.
    trials, batch, seed : int
        The cold start's search: trials, trials per pass over G, the seed.
    starts, thick_starts : int
        Newton's starts of the standard and the thick branch.
    compare_standard : bool
        Keep the standard branch in the result when ``tilt`` is on.
    depth_model : {"auto", "columnar", "incoherent"}
    sections : int or None
        Depth sections of the incoherent model (None: one per depth of field).
    coarse_rows : int
        The search and the starts run on the band thinned to at least this many frequencies.
    """

    rotation: float | None = None
    orientation: str = "auto"
    branch: str = "auto"
    tilt: bool = True
    band: tuple[float, float] = (0.2, 0.9)
    trials: int = 200
    batch: int = 8
    seed: int = 0
    starts: int = STARTS
    thick_starts: int = len(THICK_TILT_STARTS)
    compare_standard: bool = True
    depth_model: str = "auto"
    sections: int | None = None
    coarse_rows: int = COARSE_ROWS

    def __post_init__(self) -> None:
        put = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731 (frozen: set once here)
        if self.rotation is not None:
            put("rotation", number("rotation", self.rotation, unit="rad"))
        put("orientation", check_orientation(self.orientation))
        if self.branch not in BRANCHES:
            raise InputError(f"branch must be one of {', '.join(BRANCHES)}; got {self.branch!r}")
        put("batch", integer("batch", self.batch, low=1))
        put("trials", integer("trials", self.trials, low=self.batch))
        put("seed", integer("seed", self.seed, low=0))
        put("starts", integer("starts", self.starts, low=1))
        put("thick_starts", integer("thick_starts", self.thick_starts, low=1, high=len(THICK_TILT_STARTS)))
        put("coarse_rows", integer("coarse_rows", self.coarse_rows, low=1))
        put("band", _band(self.band))
        put("tilt", bool(self.tilt))
        put("compare_standard", bool(self.compare_standard))
        if self.depth_model not in DEPTH_MODELS:
            raise InputError(f"depth_model must be one of {', '.join(DEPTH_MODELS)}; got {self.depth_model!r}")
        if self.sections is not None:
            put("sections", integer("sections", self.sections, low=1, high=MOST_SECTIONS))
            if self.depth_model == "columnar" or not self.tilt:
                raise InputError("sections belongs to the incoherent depth model: give tilt=True and depth_model "
                                 "'auto' or 'incoherent' with it")

    @classmethod
    def made(cls, options: FitOptions | None = None, **changes) -> FitOptions:
        """``options`` (default: the defaults) with ``changes``; an unknown name is an OptionError."""
        return with_changes(options, changes, kind=cls, what="fit")


# the result's keys in the order its JSON file lists them; each a field of FitResult
_ORDER = ("rotation_rad", "rotation_deg", "orientation", "branch", "standard", "conventions", "band_inv_a", "thick",
          "better", "better_rule", "depth_model", "incoherent", "warm_start", "timings_s", "passes")


@dataclass(eq=False)
class FitResult(Mapping):
    """What the session fit found (JSON-ready values: floats, lists, dicts).

    rotation_rad : float
        The scan rotation, rad, in [-pi, pi) (``rotation_deg`` in degrees).
    standard, thick, incoherent : dict or None
        Per branch: its ``parameters`` (A, rad), ``agreement``, ``hessian``, standard errors and
        identifiability report (sigma only for determined parameters).
    orientation, branch : dict or None
        The detector's orientation (with the runner-up's score) and the branch with its rule's statistic.
    better, better_rule : str or None
        Which branch explains the data better, and the margin and rule that decided it.
    depth_model : dict or None
        The thick model chosen ("columnar" or "incoherent") and why.
    conventions : dict or None
        The sign and unit conventions of the parameters.
    band_inv_a : list
        The band (1/A).
    warm_start : bool
        A live fit warm-started from the previous one (no search, no orientation).
    timings_s, passes : dict
        Stage times (s) and passes over G.

    Read it as the JSON object (``result["standard"]["parameters"]["C10"]``; keys whose value is None are
    absent) or by attribute; :meth:`save` and :meth:`load` write and read that object.
    """

    rotation_rad: float
    standard: dict | None = None
    thick: dict | None = None
    incoherent: dict | None = None
    orientation: dict | None = None
    branch: dict | None = None
    better: str | None = None
    better_rule: str | None = None
    depth_model: dict | None = None
    conventions: dict | None = None
    band_inv_a: list = field(default_factory=list)
    warm_start: bool = False
    timings_s: dict = field(default_factory=dict)
    passes: dict = field(default_factory=dict)

    @property
    def rotation_deg(self) -> float:
        return float(np.rad2deg(self.rotation_rad))

    def _value(self, key: str):
        if key not in _ORDER:
            return None
        value = getattr(self, key)
        return None if value is None or (key == "warm_start" and not value) else value

    def __getitem__(self, key: str):
        value = self._value(key)
        if value is None:
            raise KeyError(key)
        return value

    def __iter__(self) -> Iterator[str]:
        return (key for key in _ORDER if self._value(key) is not None)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def to_dict(self) -> dict:
        """The JSON object (a plain dict, a deep copy through JSON)."""
        return json.loads(json.dumps({key: self[key] for key in self}))

    @classmethod
    def from_dict(cls, data: Mapping) -> FitResult:
        """A result from its JSON object (``rotation_deg`` is derived, other unknown keys are an error)."""
        data = dict(data)
        data.pop("rotation_deg", None)
        unknown = sorted(set(data) - set(_ORDER))
        if unknown:
            raise InputError(f"not keys of a fit result: {unknown}")
        if "rotation_rad" not in data:
            raise InputError("a fit result needs rotation_rad")
        return cls(**data)

    def save(self, path) -> Path:
        """Write the JSON object to ``path`` atomically; returns the path."""
        from qora.io.atomic import atomic_path

        with atomic_path(path) as tmp:
            tmp.write_text(json.dumps(self.to_dict(), indent=2) + "\n")
        return Path(path)

    @classmethod
    def load(cls, path) -> FitResult:
        """A result from a fit file :meth:`save` (or ``qora ssb fit --out``) wrote."""
        path = Path(path)
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise InputError(f"no fit file {path}") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise InputError(f"{path} is not a fit file (JSON): {exc}") from None
        if not isinstance(data, dict):
            raise InputError(f"{path} is not a fit file: its JSON is not an object")
        return cls.from_dict(data)


@dataclass(eq=False)
class FitImages(Mapping):
    """What :meth:`qora.ssb.Session.reconstruct` returns: the fit (both branches) and each branch's phase image.

    fit : FitResult
    images : dict of str to ndarray
        "standard" (SSB) and "thick" (tilt-corrected) phase images, rad, on the scan grid, in the fitted frame.
    better : str
        The branch that explains the data better (``fit.better``); ``image`` is its image.

    Reads like the dict it replaces (``out["images"][out["better"]]``).
    """

    fit: FitResult
    images: dict
    better: str

    @property
    def image(self) -> np.ndarray:
        return self.images[self.better]

    def __getitem__(self, key: str):
        if key not in ("fit", "images", "better"):
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self) -> Iterator[str]:
        return iter(("fit", "images", "better"))

    def __len__(self) -> int:
        return 3
