"""What a reconstruction returns: :class:`PhaseResult` (made by :class:`qora.phase.solver.Solver`)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["PhaseResult", "merge_results", "read_result"]


@dataclass
class PhaseResult:
    """What a reconstruction returns; everything needed to repeat it is kept.

    Attributes
    ----------
    object : ndarray, complex64
        The best start's object, centre-origin, the shape of the pattern; its amplitude in sqrt(counts)
        (the transform is unitary: sum |object|^2 = sum of the intensities), its phase in rad.
    support : ndarray, bool
        Its final support.
    errors : ndarray (iterations, starts)
        Fourier error of every iterate of every start (relative, dimensionless:
        sqrt(sum (|F x| - a)^2 / sum a^2) over the measured pixels; in a psf stage |F x|^2 is blurred by the
        kernel).
    final_errors : ndarray (starts,)
        Fourier error of each start's final object (dimensionless), of the model its last stage fitted: blurred
        by its kernel when that stage had ``psf`` (:attr:`blurred_model`, :mod:`qora.phase.scores`).
    llk, free_llk : ndarray (starts,)
        Poisson deviance per pixel on the measured pixels used, and on the
        held-out pixels (NaN when none were held out).
    best : int
        Index of the best start by ``rank``.
    objects, supports : ndarray or None
        All starts, when ``keep_all=True``.
    first_start : int
        The number of the first start (starts are drawn from ``PCG64(seed + number)``).
    support_log : list of dict
        Every shrinkwrap that did not simply apply: ``{"start", "iteration", "status"}`` with status
        "kept" (a collapse refused), "retuned_small" or "retuned_large" (the size guard moved the
        threshold so the support has the allowed size), in the order they happened.
    pixel_size : tuple of float or None
        The object's pixel size per axis, m (:func:`qora.phase.raw_frames.object_pixel_size`), when the
        geometry was given.
    preprocessing : dict or None
        What :func:`qora.phase.raw_frames.preprocess` did to the raw frames, when it ran.
    psf : ndarray or None
        The best start's partial-coherence kernel (detector layout: origin at n//2, sum 1), when the
        recipe has ``psf`` stages (:mod:`qora.phase.coherence`).
    coherence_width : float or None
        The default recipe's check for a partially coherent beam: the Gaussian blur (std, detector pixels) of
        the coherent run's best intensity that fits the counts best (:func:`qora.phase.coherence.blur_width`;
        0: none). When a blur of at least :data:`~qora.phase.coherence.PARTIAL_COHERENCE_WIDTH` fitted better than
        none, the starts were run again with the partial-coherence model (``recipe`` says which ran). None when
        the recipe was given.
    agreement : dict or None
        Did the starts find the same object? Every start aligned to the best
        (:func:`qora.phase.analysis.agreement`): each one's object error and support overlap against the best,
        how many agree, ``reproducible`` and a one-line ``message`` ("not reproducible: 2 of 10 starts agree
        with the best ..."), and the PRTF of the agreeing starts. None for results merged from parts whose
        objects were not kept.
    convergence : dict or None
        Was the best start still improving when the recipe ended? (:func:`qora.phase.analysis.convergence`):
        the relative fall of its Fourier error over the last iterations, ``converged`` and a ``message``.
    choice : str
        Why the default took the recipe it ran, when it chose one by the pattern (e.g. the real-object search for
        a centrosymmetric pattern, :func:`qora.phase.symmetry.centrosymmetry`); "" when the recipe was given.
    """

    object: np.ndarray
    support: np.ndarray
    errors: np.ndarray
    final_errors: np.ndarray
    llk: np.ndarray
    free_llk: np.ndarray
    best: int
    rank: str
    recipe: str
    seed: int
    starts: int
    backend: str
    variant: str
    timings: dict = field(default_factory=dict)
    versions: dict = field(default_factory=dict)
    objects: np.ndarray | None = None
    supports: np.ndarray | None = None
    stopped_early: bool = False
    first_start: int = 0
    support_log: list = field(default_factory=list)
    pixel_size: tuple | None = None
    preprocessing: dict | None = None
    psf: np.ndarray | None = None
    coherence_width: float | None = None
    agreement: dict | None = None
    convergence: dict | None = None
    choice: str = ""

    @property
    def fourier_error(self) -> float:
        return float(self.final_errors[self.best])

    @property
    def blurred_model(self) -> bool:
        """Whether the run ended on a psf stage, so that its final errors and deviances are of the intensity
        blurred by the fitted kernel (``psf``)."""
        from qora.phase.recipe import Recipe, RecipeError

        try:
            return self.psf is not None and Recipe.parse(self.recipe).stages[-1].psf is not None
        except RecipeError:  # a search that is not a list of stages (the real-object envelope)
            return False

    def widget(self):
        """A notebook widget showing the amplitude, phase or support (and, in 3D, any plane) of the
        best start: :func:`qora.phase.display.result_widget` (needs the ``notebook`` extra)."""
        from qora.phase.display import result_widget

        return result_widget(self)

    def save(self, path):
        """Write the result file (CXI/HDF5, :func:`qora.phase.files.write_result`); :meth:`load` reads it."""
        from qora.phase.files import write_result

        write_result(path, self)
        return path

    @classmethod
    def load(cls, path) -> "PhaseResult":
        """The result a result file holds (:meth:`save`, ``qora phase run --out F.cxi``)."""
        from qora.phase.files import result_fields

        return cls(**result_fields(path))


def merge_results(parts) -> PhaseResult:
    """One result from runs of the same pattern over consecutive ranges of starts (``first_start``):
    the result a single run of all the starts gives, with the best chosen the same way (the first
    of the lowest scores). Objects of every start are kept only if every part kept them."""
    parts = sorted(parts, key=lambda r: r.first_start)
    if not parts:
        raise ValueError("no results to merge")
    first = parts[0]
    for r in parts[1:]:
        if (r.rank, r.recipe, r.seed, r.object.shape) != (first.rank, first.recipe, first.seed, first.object.shape):
            raise ValueError("results of different runs (rank, recipe, seed or shape differ) cannot be merged")
    final_errors = np.concatenate([r.final_errors for r in parts])
    free_llk = np.concatenate([r.free_llk for r in parts])
    scores = final_errors if first.rank == "fourier" else free_llk
    best = int(np.nanargmin(scores))
    timings = {"run_s": float(sum(r.timings.get("run_s", 0.0) for r in parts)), "parts": len(parts)}
    if all("support_px" in r.timings for r in parts):  # the real-object search's parts: its own ranking
        from qora.phase.analysis import compact_best

        timings.update(rfactor=[v for r in parts for v in r.timings["rfactor"]],
                       support_px=[v for r in parts for v in r.timings["support_px"]])
        best = compact_best(timings["rfactor"], timings["support_px"])
        scores = np.where(np.arange(len(scores)) == best, -np.inf, np.asarray(timings["rfactor"]))
    offsets = np.cumsum([0] + [r.starts for r in parts])
    owner = int(np.searchsorted(offsets, best, side="right") - 1)
    keep_all = all(r.objects is not None for r in parts)
    objects = np.concatenate([r.objects for r in parts]) if keep_all else None
    supports = np.concatenate([r.supports for r in parts]) if keep_all else None
    agreed = None
    if keep_all:  # without every start's object the parts' own reports cannot be joined
        from qora.phase.analysis import agreement

        agreed = agreement(objects, supports, scores)
    return PhaseResult(
        object=parts[owner].object, support=parts[owner].support,
        errors=np.concatenate([r.errors for r in parts], axis=1), final_errors=final_errors,
        llk=np.concatenate([r.llk for r in parts]), free_llk=free_llk, best=best, rank=first.rank,
        recipe=first.recipe, seed=first.seed, starts=int(offsets[-1]), backend=first.backend, variant=first.variant,
        timings=timings, versions=first.versions, choice=first.choice,
        objects=objects, supports=supports, agreement=agreed, convergence=parts[owner].convergence,
        stopped_early=any(r.stopped_early for r in parts), first_start=first.first_start)


def read_result(path) -> PhaseResult:
    """Read a result file back into a :class:`PhaseResult` (:meth:`PhaseResult.load`)."""
    return PhaseResult.load(path)
