"""What a phase reconstruction is asked: :class:`PhaseOptions`, checked once when made (the data, the
support and the mask are arguments of :func:`qora.phase.reconstruct`, not options)."""

from __future__ import annotations

import dataclasses
import numbers
from dataclasses import dataclass

from qora.io import validate
from qora.io.errors import InputError
from qora.io.options import with_changes
from qora.phase.checks import check_choice

__all__ = ["PhaseOptions", "RANKS"]

RANKS = ("fourier", "free_llk")  # how the best start is chosen


@dataclass(frozen=True)
class PhaseOptions:
    """The choices of :func:`qora.phase.reconstruct` (its docstring says what each does).

    recipe : str, Recipe or None
        Stages (``"HIO**400 ER**100"``), a recipe's name, or None / "default" for the default's choice.
    starts : int
        Random starts (count, at least 1).
    variant : str
        The engine: "auto", or a CUDA variant (:data:`qora.phase.cuda.CUDA_VARIANTS`) on the GPU.
    seed : int
        Start i is drawn from ``PCG64(seed + i)``.
    rank : {"fourier", "free_llk"}
    sync_every : int
        Iterations between progress reports and host reads (count).
    batch : int or "auto"
        Starts iterated together.
    keep_all : bool
        Keep every start's object and support.
    free_fraction : float or None
        Measured pixels held out for the free LLK (0 to below 0.5; None: 5% where the rank or recipe needs them).
    """

    recipe: object = None
    starts: int = 1
    variant: str = "auto"
    seed: int = 0
    rank: str = "fourier"
    sync_every: int = 50
    batch: int | str = "auto"
    keep_all: bool = False
    free_fraction: float | None = None

    def __post_init__(self) -> None:
        put = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731 (frozen: set once here)
        check_choice("rank", self.rank, RANKS)
        put("starts", validate.integer("starts", self.starts, low=1))
        put("seed", validate.integer("seed", self.seed, low=0))
        put("sync_every", validate.integer("sync_every", self.sync_every, low=1))
        if self.batch != "auto" and (isinstance(self.batch, bool) or not isinstance(self.batch, numbers.Integral)
                                     or self.batch < 1):
            raise InputError(f"batch must be 'auto' or a positive integer, got {self.batch!r}")
        if not isinstance(self.variant, str):
            raise InputError(f"variant must be a name, got {self.variant!r}")
        if self.free_fraction is not None:
            put("free_fraction", validate.number("free_fraction", self.free_fraction))
            if not 0.0 <= self.free_fraction < 0.5:
                raise InputError(f"free_fraction must be in [0, 0.5), got {self.free_fraction:g}")
        put("keep_all", bool(self.keep_all))

    @classmethod
    def made(cls, options: PhaseOptions | None = None, **changes) -> PhaseOptions:
        """``options`` (default: the defaults) with ``changes``; an unknown name is an OptionError."""
        return with_changes(options, changes, kind=cls, what="phase")

    def to_dict(self) -> dict:
        """The fields, JSON-ready (a Recipe as its text)."""
        out = dataclasses.asdict(self)
        out["recipe"] = None if self.recipe is None else str(self.recipe)
        return out
