"""The options of an ODT reconstruction: one frozen, validated dataclass that every layer takes.

:class:`ReconstructionOptions` crosses the CLI, :mod:`qora.holo.api`, the Pipelines (CPU and
CUDA), the CUDA spectrum solver and :mod:`qora.distributed.holo` unchanged; a bad value is a
``ValueError`` naming the field, raised when the options are made (not per stack).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import asdict, dataclass, fields

import numpy as np

from qora.io.errors import InputError
from qora.io.options import OptionError, with_changes

__all__ = ["ReconstructionOptions", "BpmOptions", "BPM_CUDA_ONLY", "OptionError", "APPROXIMATIONS", "METHODS", "MAPPINGS", "FGP_VARIANTS", "GP_LOOPS", "CUDA_ONLY"]

APPROXIMATIONS = ("rytov", "born")
METHODS = ("plain", "gp", "tv")
MAPPINGS = ("gather", "scatter")
GRIDDING_CHOICES = ("auto", "nearest", "exact")
FGP_VARIANTS = ("fused", "separate", "cube", "march")
GP_LOOPS = ("auto", "cufft", "fused_fft")
#: the fields that only the CUDA backend reads (the CPU path ignores them)
CUDA_ONLY = ("mapping", "fgp", "gp_loop", "upload_parts")
# what a field means, where its name alone would not say it in an error message
_WHAT = {"tv_inner": " (FGP steps per TV iteration)", "upload_parts": " (upload parts of the hologram stack)"}




@dataclass(frozen=True)
class ReconstructionOptions:
    """How first-order fields become an index volume (the solver's choices, not the geometry)."""

    approximation: str = "rytov"
    """First-order field: "rytov" (the unwrapped phase log(u / u_in), border rule) or "born" (u / u_in - 1)."""
    method: str = "gp"
    """"plain" (the mapped spectrum inverted), "gp" (Gerchberg-Papoulis with non-negativity) or "tv"
    (FISTA with an isotropic TV prox by FGP, and non-negativity)."""
    iterations: int = 50
    """Gerchberg-Papoulis or FISTA iterations (count, at least 1; unused by "plain")."""
    r2c: bool = True
    """Gerchberg-Papoulis on half spectra (real transforms): the same iterates, half the memory."""
    tv_weight: float | str = 1e-3
    """TV weight on n^2 - n_m^2 (dimensionless; lambda = tv_weight k0^2 on the potential, rad^2/um^2); > 0 for
    "tv"; or "auto": chosen from the data by the discrepancy principle against the noise measured in the
    mapped spectrum (docs/holo.md, "Regularisation"), the chosen weight reported in ``info["tv_weight"]``."""
    tv_inner: int = 20
    """FGP iterations per FISTA iteration (count, >= 0; the CPU solver needs at least 1 for "tv")."""
    oversample: float = 2.0
    """Solver grid edge over the field size n (ratio, at least 1): the fields are zero-padded onto the
    smallest fast FFT length of at least n * oversample (finer k-bins), the central n^3 kept. 2 by default:
    at 1 the nearest-bin mapping rings and reads a Rytov cell's nucleus 10% high (docs/holo.md)."""
    index_min: float | None = None
    """Lower bound of the real index that GP and TV enforce: None is the medium index (non-negativity of
    the potential, objects denser than the medium); a value below n_m admits objects below the medium
    (two-sided with ``index_max``); ``-inf`` no lower bound."""
    index_max: float | None = None
    """Upper bound of the real index that GP and TV enforce (None: none)."""
    complex_index: bool = False
    """Reconstruct the complex index n + i kappa (absorption kappa >= 0 enforced by GP and TV) instead of the
    real part alone; GP then runs on full spectra (C2C). The imaginary part is in ``OdtResult.absorption``."""
    gridding: str = "auto"
    """How the caps' samples meet the volume's bins: "nearest" (each to its nearest bin, each bin the mean of its
    hits), "exact" (each at its own frequency, density-compensated: :mod:`qora.holo.gridding`), or "auto":
    exact for "tv" in the rotation geometry, nearest otherwise (docs/holo.md, "Exact gridding", says what each costs
    and reads, and why not in the scanning geometry)."""
    mapping: str = "gather"
    """CUDA only: the Ewald mapping by "gather" (a thread per volume column, no atomics) or "scatter"."""
    fgp: str = "fused"
    """CUDA only: the FGP step's kernel, "fused", "separate", "cube" or "march" (equal within 2 ulp)."""
    gp_loop: str = "auto"
    """CUDA only: GP on half spectra (``r2c``) as cuFFT's 3D transforms with a clamp and a restore pass ("cufft"),
    or as four passes of our own line transforms carrying both ("fused_fft": grid edges 128, 256 and 512 on
    compute capability 9.x; docs/holo-performance.md, "The fused GP loop"); "auto": fused_fft where it runs."""
    upload_parts: int = 1
    """CUDA Pipeline only: the hologram upload split into this many parts (count, 1 to the number of holograms)."""

    def __post_init__(self) -> None:
        for name, allowed in (("approximation", APPROXIMATIONS), ("method", METHODS), ("mapping", MAPPINGS),
                              ("fgp", FGP_VARIANTS), ("gp_loop", GP_LOOPS), ("gridding", GRIDDING_CHOICES)):
            value = getattr(self, name)
            if value not in allowed:
                raise InputError(f"{name} must be one of {allowed}, got {value!r}")
        least = {"iterations": 0 if self.method == "plain" else 1, "tv_inner": 0,
                 "upload_parts": 1}
        for name, low in least.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
                raise InputError(f"{name}{_WHAT.get(name, '')} must be an integer of at least {low} "
                                 f"(method {self.method!r}), got {value!r}")
        if not isinstance(self.r2c, (bool, np.bool_)):
            raise InputError(f"r2c must be True or False, got {self.r2c!r}")
        if not (self.tv_weight == "auto" or isinstance(self.tv_weight, numbers.Real) and not isinstance(
                self.tv_weight, bool) and math.isfinite(self.tv_weight) and self.tv_weight >= 0
                and (self.tv_weight > 0 or self.method != "tv")):
            raise InputError(f"tv_weight must be 'auto' or finite and "
                             f"{'positive' if self.method == 'tv' else 'non-negative'}, got {self.tv_weight!r}")
        for name in ("index_min", "index_max"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, numbers.Real) and not isinstance(value, bool)
                                          and (value > 0 or value == -math.inf) and not math.isnan(value)):
                raise InputError(f"{name} must be None, a positive index or -inf, got {value!r}")
        if self.index_min is not None and self.index_max is not None and not self.index_min < self.index_max:
            raise InputError(f"index_min ({self.index_min!r}) must be below index_max ({self.index_max!r})")
        if not isinstance(self.complex_index, (bool, np.bool_)):
            raise InputError(f"complex_index must be True or False, got {self.complex_index!r}")
        if not (isinstance(self.oversample, numbers.Real) and math.isfinite(self.oversample) and self.oversample >= 1.0):
            raise InputError(f"oversample must be at least 1, got {self.oversample!r}")

    def grid_rule(self, rotation: bool) -> str:
        """The gridding this reconstruction uses ("nearest" or "exact"): ``gridding`` with "auto" resolved, exact
        for TV in the rotation geometry (``rotation``), whose caps fill the volume densely, nearest otherwise."""
        if self.gridding != "auto":
            return self.gridding
        return "exact" if self.method == "tv" and rotation else "nearest"

    def replace(self, **changes) -> "ReconstructionOptions":
        """A copy with ``changes`` (validated); an unknown name is an OptionError naming it (a TypeError too)."""
        return with_changes(self, changes, kind=ReconstructionOptions, what="reconstruction")

    @classmethod
    def names(cls) -> tuple:
        return tuple(f.name for f in fields(cls))

    def to_dict(self) -> dict:
        """The fields as a plain dict (JSON-ready: str, int, float, bool)."""
        return {k: (v.item() if hasattr(v, "item") else v) for k, v in asdict(self).items()}


#: the BPM inversion's fields that only the CUDA backend reads (given to the CPU by name: an OptionError)
BPM_CUDA_ONLY = ("chunk", "fgp", "variant")


@dataclass(frozen=True)
class BpmOptions:
    """How the beam propagation model is inverted (:func:`qora.holo.bpm_reconstruct`; docs/holo.md, "The
    beam propagation model"). The values are checked where they meet the data (the batch against the
    illuminations, the variant against the device), the rest here."""

    iterations: int = 20
    """Proximal-gradient steps (count; 0 returns the start)."""
    tv_weight: float | None = None
    """TV weight on n^2 - n_m^2 (dimensionless, as :attr:`ReconstructionOptions.tv_weight`); None: only x >= 0."""
    tv_inner: int = 20
    """FGP iterations per step of the TV prox (count)."""
    batch: int | None = None
    """Illuminations per step (None: all, with FISTA momentum; a count: cycling batches, no momentum)."""
    step: float = 1.0
    """The step length over the Lipschitz constant (dimensionless, > 0)."""
    n_z: int | None = None
    """Slices along z (None: the field size n)."""
    obliquity: bool = True
    """The wide-angle (obliquity) factor of the slice step's propagator."""
    chunk: int | None = None
    """CUDA only: illuminations propagated together (None: as many as fit)."""
    fgp: str = "fused"
    """CUDA only: the TV prox's FGP kernel (:data:`FGP_VARIANTS`)."""
    variant: str = "auto"
    """CUDA only: the slice step's implementation (:data:`qora.holo.bpm_cuda.VARIANTS`)."""

    def __post_init__(self) -> None:
        from qora.io.validate import integer, nonnegative, positive

        put = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731 (frozen: set once here)
        put("iterations", integer("iterations", self.iterations, low=0))
        put("tv_inner", integer("tv_inner", self.tv_inner, low=1))
        for name in ("batch", "n_z", "chunk"):  # None: the default the field's docstring names
            if getattr(self, name) is not None:
                put(name, integer(name, getattr(self, name), low=1))
        if self.tv_weight is not None:
            put("tv_weight", nonnegative("tv_weight", self.tv_weight))
        put("step", positive("step", self.step))
        if self.fgp not in FGP_VARIANTS:
            raise InputError(f"fgp must be one of {FGP_VARIANTS}, got {self.fgp!r}")
        if not isinstance(self.obliquity, (bool, np.bool_)):
            raise InputError(f"obliquity must be True or False, got {self.obliquity!r}")

    def replace(self, **changes) -> "BpmOptions":
        """A copy with ``changes`` (validated); an unknown name is an OptionError naming it."""
        return with_changes(self, changes, kind=BpmOptions, what="BPM")

    def solver_keywords(self, *, cuda: bool) -> dict:
        """The keywords of :func:`qora.holo.bpm.bpm_reconstruct` (``cuda``: and of its CUDA twin)."""
        keys = [f.name for f in fields(self) if cuda or f.name not in BPM_CUDA_ONLY]
        return {k: getattr(self, k) for k in keys}

    def to_dict(self) -> dict:
        """The fields as a plain dict (JSON-ready)."""
        return asdict(self)
