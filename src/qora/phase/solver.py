"""The public API of qora.phase: :func:`reconstruct` and the :class:`Solver` behind it."""

from __future__ import annotations

import time

import numpy as np

from qora.backend import fft
from qora.io import validate
from qora.io.errors import InputError
from qora.progress import report
from qora.provenance import versions as software_versions
from qora.phase.checks import (check_bool_array, check_choice, check_intensity, check_run_memory,
                               check_starts_memory)
from qora.phase.physics import native_amplitude
from qora.phase.options import PhaseOptions
from qora.phase.result import PhaseResult
from qora.phase.scores import final_scores, slabs, unitary_in_place
from qora.phase.stage_kinds import STAGE_KINDS
from qora.phase.symmetry import choose_recipe
from qora.phase.recipe import (default_recipe, is_default, is_envelope, looks_like_counts, named_recipe,
                               photons_per_speckle, with_grown_finish)
from qora.phase.support import autocorrelation_estimate, grow_supports, halve_supports, size_range_for

__all__ = ["reconstruct", "Solver", "PhaseResult", "random_start", "check_intensity"]

VARIANTS_CPU = ("cpu",)
VARIANTS_CUDA = ("naive", "fused", "graph", "batched", "half", "mixed", "callback", "fused_fft")
# variant="auto" on the GPU (docs/phase-performance.md, "The auto policy"): graph is the fastest
# variant that keeps fp32 accuracy at every measured size (fused pays a host round trip (1.02-6x), callback
# is 1.4-2.6x slower on the H200, naive 6-58x; half and mixed lose fp32 accuracy), and several
# starts run batched, up to AUTO_BATCH at a time, where that measured faster per start: up to
# 2^20 pixels (0.22x of looped at 256^2, 0.91x at 1024^2; 1.09x at 128^3, so not above).
AUTO_CUDA_VARIANT = "graph"
# ... except on an H100/H200 with every extent in FUSED_FFT_SIZES[ndim]: fused_fft ran at 0.75-0.89x of graph from
# 128^3 to 512^3 and 0.92-0.93x at 2048^2 and 4096^2; below, graph batches starts (0.22x per start at 256^2)
FUSED_FFT_SIZES = {3: (128, 256, 512), 2: (2048, 4096)}
AUTO_BATCH = 8
AUTO_BATCH_MAX_PIXELS = 2**20


def auto_batch(backend, variant: str, shape, starts: int) -> int:
    """How many starts ``reconstruct(..., batch="auto")`` iterates together."""
    if backend.is_cuda and variant in ("auto", "graph", "batched") and int(np.prod(shape)) <= AUTO_BATCH_MAX_PIXELS:
        return max(1, min(starts, AUTO_BATCH))
    return 1


def _pick_variant(backend, variant: str, shape=()) -> str:
    if backend.is_cuda:
        if variant == "auto":
            sizes = FUSED_FFT_SIZES.get(len(shape), ())
            if sizes and all(s in sizes for s in shape) and backend.device_facts().compute_capability.startswith("9."):
                return "fused_fft"
            return AUTO_CUDA_VARIANT
        if variant not in VARIANTS_CUDA:
            raise InputError(f"variant must be 'auto' or one of {VARIANTS_CUDA} on the GPU, got {variant!r}")
        return variant
    if variant == "auto":
        return "cpu"
    if variant not in VARIANTS_CPU:
        raise InputError(f"variant must be 'auto' or one of {VARIANTS_CPU} on the CPU, got {variant!r}")
    return variant


def start_phases(seed: int, start: int, shape) -> np.ndarray:
    """The random phases (rad, float32) of start ``start``: ``Generator(PCG64(seed + start))``
    on the host, so every backend and variant starts from the same numbers."""
    rng = np.random.Generator(np.random.PCG64(seed + start))
    return rng.uniform(-np.pi, np.pi, size=tuple(shape)).astype(np.float32)


def random_start(amp_native, support, seed: int, start: int, xp=np):
    """Start ``start``: the measured moduli with random phases, back-transformed, inside the support.

    The plain-array reference of :func:`fill_random_starts`; the transform runs on ``xp``'s
    device (NumPy or CuPy: the starts then agree to float rounding).
    """
    phase = xp.asarray(start_phases(seed, start, amp_native.shape))
    amp = xp.asarray(amp_native)
    spec = xp.where(amp >= 0, amp, np.float32(0)) * xp.exp(1j * phase).astype(np.complex64)
    x = fft.ifftn(spec, norm="ortho")
    return xp.where(xp.asarray(support), x, 0).astype(np.complex64)


def fill_random_starts(engine, seed: int, ids) -> None:
    """Write the random starts ``ids`` into the engine's own x (and zeros past them), in place.

    The same start as :func:`random_start`, built slab by slab in x itself and transformed
    in place, so the device needs only a slab's temporaries beyond the engine's buffers
    (a whole 512^3 run then stays near the engine's 23 bytes per voxel).
    """
    xp = engine.backend.xp
    x = engine.x
    for k in range(engine.batch):
        if k >= len(ids):
            x[k].fill(0)
            continue
        phase = start_phases(seed, ids[k], engine.shape)
        for sl in slabs(engine.shape[0]):
            x[k][sl] = xp.exp(1j * xp.asarray(phase[sl]))
            x[k][sl] *= xp.maximum(engine.amp[sl], np.float32(0))
    unitary_in_place(engine, inverse=True)
    for k in range(engine.batch):
        for sl in slabs(engine.shape[0]):
            x[k][sl] *= engine.support[k][sl]
    engine.x_written()


class Solver:
    """Plans and buffers for one pattern, kept between runs.

    Parameters
    ----------
    intensity : ndarray (2D or 3D)
        Measured intensities (photon counts, any non-negative scale), detector layout (q = 0 at index
        n//2), finite where measured.
    mask : bool ndarray, optional
        True where a pixel was not measured.
    backend : {"auto", "cpu", "cuda"}
    variant : str
        The engine; ``"auto"`` picks the default for the backend.
    batch : int
        Starts iterated together (one batched transform); 1 loops over starts.
    free_fraction : float
        Fraction of measured pixels held out of the iteration to compute the free LLK.
    """

    def __init__(self, intensity, *, mask=None, backend="auto", variant="auto", batch: int = 1,
                 free_fraction: float = 0.0, seed: int = 0) -> None:
        from qora.backend import resolve

        t0 = time.perf_counter()
        self.batch = validate.integer("batch", batch, low=1)
        free_fraction = validate.number("free_fraction", free_fraction)
        if not 0.0 <= free_fraction < 0.5:
            raise InputError(f"free_fraction must be in [0, 0.5), got {free_fraction:g}")
        self.free_fraction, self.free_seed = free_fraction, validate.integer("seed", seed, low=0)
        self.backend = resolve(backend)
        self.variant = _pick_variant(self.backend, check_choice("variant", variant, ("auto",) + VARIANTS_CPU
                                                                + VARIANTS_CUDA), np.shape(intensity))
        self.shape = None
        self._engine = None
        self.set_intensity(intensity, mask=mask)
        self.timings = {"construct_s": time.perf_counter() - t0}

    def set_intensity(self, intensity, *, mask=None) -> None:
        """Take a new pattern of the same shape, keeping the engine (plans, device buffers): a worker
        holds one Solver per shape and feeds it pattern after pattern (``qora.distributed``). A run
        after this equals a run of a Solver made for the new pattern."""
        intensity, mask = check_intensity(intensity, mask)
        if self.shape is not None and intensity.shape != self.shape:
            raise InputError(f"pattern shape {intensity.shape} differs from the solver's {self.shape}")
        self.intensity, self.mask, self.shape = intensity, mask, intensity.shape
        measured = ~self.mask if self.mask is not None else np.ones(self.shape, bool)
        self.free = np.zeros(self.shape, bool)
        if self.free_fraction > 0:
            rng = np.random.Generator(np.random.PCG64(self.free_seed + 2**31))
            # hold out pixels in centro-symmetric pairs: I(q) = I(-q) for a real-space object is not
            # assumed, but a lone held-out pixel next to its measured twin would leak its value
            self.free = measured & (rng.random(self.shape) < self.free_fraction)
        used_mask = ~measured | self.free
        self.amp = native_amplitude(self.intensity, used_mask if used_mask.any() else None)
        self._free_llk = None
        if self._engine is not None:
            self._engine.set_amplitude(self.amp)

    def _engine_for(self, support):
        if self._engine is None:
            if self.backend.is_cuda:
                from qora.phase.cuda import make_engine

                self._engine = make_engine(self.variant, self.amp, support, self.batch)
            else:
                from qora.phase.cpu import CpuEngine

                self._engine = CpuEngine(self.amp, support, batch=self.batch)
        else:
            self._engine.set_support(support)
        return self._engine

    def default_support(self) -> np.ndarray:
        """The autocorrelation support (centre-origin), computed on the solver's device, with the
        threshold chosen from the data (:func:`qora.phase.support.autocorrelation_estimate`; the
        threshold used is kept in ``self.autocorrelation_threshold``)."""
        xp = self.backend.xp
        support, self.autocorrelation_threshold = autocorrelation_estimate(xp.asarray(self.intensity), mask=self.mask,
                                                                           xp=xp)
        return self.backend.to_host(support)

    def run(self, *, support=None, recipe=None, starts: int = 1, seed: int = 0, rank: str = "fourier",
            keep_all: bool = False, progress=None, sync_every: int = 50, first_start: int = 0) -> PhaseResult:
        """Reconstruct from ``starts`` random starts; see :func:`reconstruct`. The starts are numbered
        from ``first_start`` (start s is drawn from ``PCG64(seed + s)``), so that starts split over
        several runs (``qora.distributed``) are the ones a single run would make."""
        first_start = validate.integer("first_start", first_start, low=0)
        pick_default = is_default(recipe)
        recipe = named_recipe(recipe)
        check_choice("rank", rank, ("fourier", "free_llk"))
        if rank == "free_llk" and not self.free.any():
            raise InputError("rank='free_llk' needs held-out pixels: make the Solver with free_fraction > 0")
        if recipe.needs_free_pixels and not self.free.any():
            raise InputError("a recipe stage with switch= ends on the free LLK, which needs held-out pixels: "
                             "make the Solver with free_fraction > 0 (reconstruct() holds out 5% by default then)")
        starts = validate.integer("starts", starts, low=1)
        seed = validate.integer("seed", seed, low=0)
        sync_every = validate.integer("sync_every", sync_every, low=1)
        if support is not None:
            support = check_bool_array("support", support, self.shape, what="True inside the object")
            if not support.any():
                raise InputError("the support is empty (all False): it must hold the object")
        if self._engine is None:
            check_run_memory(self.backend, self.variant, self.shape, self.batch, default_support=support is None)
        if support is None:
            support = self.default_support()
            if not support.any():
                raise InputError("the support is empty: the autocorrelation support found nothing; give a support")
            # the size guards of shrinkwrap are fractions of the object volume the autocorrelation implies
            self._autocorrelation_pixels = int(support.sum())
        else:
            # a given support is taken as the object's size estimate (A / 2^d = its size)
            self._autocorrelation_pixels = int(support.sum()) * 2 ** support.ndim
        self.photons_per_speckle = None
        if pick_default and looks_like_counts(self.intensity, self.mask):
            # the default recipe by the photon count (docs/phase.md, "Few photons")
            measured = self.intensity if self.mask is None else np.where(self.mask, 0.0, self.intensity)
            self.photons_per_speckle = photons_per_speckle(float(measured.sum()),
                                                           self._autocorrelation_pixels / 2**len(self.shape))
            recipe = default_recipe(photons_per_speckle=self.photons_per_speckle)
        if pick_default:
            recipe = self._default_ending(recipe)
        result = self._run_starts(engine_support=support, recipe=recipe, starts=starts, seed=seed, rank=rank,
                                  keep_all=keep_all, progress=progress, sync_every=sync_every, first_start=first_start)
        self.coherence_width = None
        if pick_default and not result.stopped_early:
            result = self._coherence_check(result, support=support, starts=starts, seed=seed, rank=rank,
                                           keep_all=keep_all, progress=progress, sync_every=sync_every,
                                           first_start=first_start)
        return result

    def _default_ending(self, recipe):
        """The default for this pattern: in 3D it ends on its support grown (``recipe.with_grown_finish``)."""
        return with_grown_finish(recipe) if len(self.shape) == 3 else recipe

    def _coherence_check(self, result, **run) -> PhaseResult:
        """The default recipe's check for a partially coherent beam (docs/phase.md, "Partial coherence from the
        data"): the Gaussian blur that best fits the counts to the best start's coherent intensity
        (:func:`qora.phase.coherence.blur_deviance`). When a blur of at least
        :data:`~qora.phase.coherence.PARTIAL_COHERENCE_WIDTH` fits better than none
        (:func:`~qora.phase.coherence.partially_coherent`), the starts run again with
        :func:`~qora.phase.recipe.partial_coherence_recipe`, kept unless its best object fits the counts worse than
        the coherent one (each under its best blur; a note in ``choice``); ``coherence_width`` is kept either way."""
        from qora.phase.coherence import BLUR_WIDTHS, blur_deviance, partially_coherent
        from qora.phase.recipe import partial_coherence_recipe

        xp = self.backend.xp
        unused = self.free if self.mask is None else (self.mask | self.free)
        unused = unused if unused.any() else None
        deviance = blur_deviance(xp.asarray(result.object), self.intensity, unused, xp=xp)
        width = float(BLUR_WIDTHS[int(np.argmin(deviance))])
        self.coherence_width = result.coherence_width = width
        if not partially_coherent(deviance):
            return result
        first_seconds = result.timings.get("run_s", 0.0)
        again = self._run_starts(engine_support=run.pop("support"), recipe=self._default_ending(
            partial_coherence_recipe(width)), **run)
        again.coherence_width = width
        # one model for both runs, each object under its best blur: their final errors do not compare (docs/phase.md)
        rerun = float(np.min(blur_deviance(xp.asarray(again.object), self.intensity, unused, xp=xp)))
        coherent = float(np.min(deviance))
        if rerun > coherent:
            result.timings.update(partial_coherence_run_s=again.timings["run_s"],
                                  run_s=first_seconds + again.timings["run_s"])
            note = (f"coherence check: the partial-coherence rerun (blur {width:.2f} px) fits the counts worse "
                    f"(deviance {rerun:.4g} against {coherent:.4g} a pixel, each under its best blur): kept the "
                    "coherent run")
            result.choice = f"{result.choice}; {note}" if result.choice else note
            return result
        again.timings["coherent_run_s"] = first_seconds  # the first, coherent run's share of run_s
        again.timings["run_s"] += first_seconds
        return again

    def _run_starts(self, *, engine_support, recipe, starts, seed, rank, keep_all, progress, sync_every,
                    first_start) -> PhaseResult:
        """Every start of ``recipe`` from ``engine_support``, ranked: the body of :meth:`run`."""
        support = engine_support
        self._support_log = []
        t0 = time.perf_counter()
        all_x, all_s, all_err, all_llk, all_psf = [], [], [], ([], []), []
        stopped = False
        total = recipe.iterations * starts
        for group in range(0, starts, self.batch):
            ids = list(range(group, min(starts, group + self.batch)))
            engine = self._engine_for(support)
            fill_random_starts(engine, seed, [first_start + i for i in ids])
            self._coherence = None  # psf stages make it; each group of starts has kernels of its own
            label = (f"start {ids[0] + 1} of {starts}" if len(ids) == 1
                     else f"starts {ids[0] + 1}-{ids[-1] + 1} of {starts}")
            errs, stopped = self._run_recipe(engine, recipe, group * recipe.iterations, total, progress, sync_every,
                                             label, len(ids), ids)
            all_x.append(engine.get_x()[: len(ids)])
            all_s.append(engine.get_support()[: len(ids)])
            if self._coherence is not None:
                all_psf.extend(self._coherence.kernel_detector_layout(k, self.backend.to_host) for k in range(len(ids)))
            psf = self._coherence if recipe.stages[-1].psf else None  # the model the last stage fitted
            final, group_llk, group_free = final_scores(engine, len(ids), intensity=self.intensity, mask=self.mask,
                                                        free=self.free, psf=psf)  # last: it transforms x
            all_err.append((errs[:, : len(ids)], final))
            all_llk[0].extend(group_llk)
            all_llk[1].extend(group_free)
            if stopped:
                break
        objects = np.concatenate(all_x)
        supports = np.concatenate(all_s)
        errors = np.concatenate([e for e, _ in all_err], axis=1)
        final_errors = np.concatenate([f for _, f in all_err])
        llk, free_llk = np.array(all_llk[0]), np.array(all_llk[1])
        scores = final_errors if rank == "fourier" else free_llk
        best = int(np.nanargmin(scores))
        from qora.phase.analysis import agreement, convergence

        report_t0 = time.perf_counter()
        agreed = agreement(objects, supports, scores, intensity=self.intensity)
        agreement_s = time.perf_counter() - report_t0
        return PhaseResult(
            object=objects[best], support=supports[best], errors=errors, final_errors=final_errors, llk=llk,
            free_llk=free_llk, best=best, rank=rank, recipe=str(recipe), seed=seed, starts=len(objects),
            backend=self.backend.name, variant=self.variant,
            timings={**self.timings, "run_s": time.perf_counter() - t0, "agreement_s": agreement_s},
            versions=software_versions(), first_start=first_start, agreement=agreed,
            convergence=convergence(errors[:, best]),
            objects=objects if keep_all else None, supports=supports if keep_all else None, stopped_early=stopped,
            support_log=self._support_log, psf=all_psf[best] if len(all_psf) == len(objects) else None,
        )

    def _run_recipe(self, engine, recipe, done0, total, progress, sync_every, label="", count=1, ids=None):
        """The recipe's stages on the engine's ``count`` starts; reports ``done`` of the whole run's
        ``total`` iterations (of all starts: a chunk of k iterations of a batch of ``count`` starts is
        k * count) after each chunk of ``sync_every`` (one graph replay on the GPU), as the stage
        "start 3 of 8: HIO"."""
        history = []
        done = done0
        for stage in recipe.stages:
            a, b = stage.coefficients
            self._stage_amplitude(engine, stage.masked, stage.sharpen)
            if stage.switch:
                self._free_likelihood().reset()
            updates = stage.iterations // stage.sw if stage.sw else 0
            if stage.detwin:
                halve_supports(engine.support, xp=engine.backend.xp)
            if stage.grow:
                grow_supports(engine.support, stage.grow, xp=engine.backend.xp)
            k = 0
            update = 0
            averaged_from = stage.iterations - stage.average
            mean = None
            while k < stage.iterations:
                chunk = min(sync_every, stage.iterations - k)
                if k < averaged_from:  # a chunk ends where the averaged iterations start
                    chunk = min(chunk, averaged_from - k)
                if stage.sw:
                    chunk = min(chunk, stage.sw - (k % stage.sw))
                if stage.switch:
                    chunk = min(chunk, stage.switch - (k % stage.switch))
                chunk, a, b = self._settled(stage, k, chunk, update < updates)
                if stage.average and k >= averaged_from:
                    from qora.phase.average import IterateMean, average_iterate

                    mean = mean or IterateMean(engine)
                    history.append(average_iterate(engine, mean, chunk, a, b, stage.constraint))
                else:
                    history.append(STAGE_KINDS[stage.kind](self, engine, stage, chunk, a, b))
                k += chunk
                done += chunk * count
                if stage.sw and k % stage.sw == 0 and update < updates:
                    self._shrinkwrap(engine, stage, update, updates, (done - done0) // count, ids or [0])
                    update += 1
                name = f"{label}: {stage.algorithm}" if label else stage.algorithm
                last = float(history[-1][-1].min())
                if (stage.switch and k % stage.switch == 0 and k < stage.iterations
                        and self._free_likelihood().check(engine, count)):
                    # the free LLK stopped improving for every start: the stage ends here; skipped iterations are NaN
                    skipped = stage.iterations - k
                    history.append(np.full((skipped, history[-1].shape[1]), np.nan))
                    for start in ids or [0]:
                        self._support_log.append({"start": int(start), "iteration": int((done - done0) // count),
                                                  "status": "switched"})
                    done += skipped * count
                    k = stage.iterations
                if mean is not None and k >= stage.iterations:
                    mean.write_mean(engine)  # the stage ends on the mean of its averaged iterates
                if not report(progress, name, done, total, {"fourier_error": last}):
                    self._stage_amplitude(engine)
                    return np.concatenate(history), True
        self._stage_amplitude(engine)  # the scores and the next run see the measured counts only
        return np.concatenate(history), False

    @staticmethod
    def _settled(stage, k: int, chunk: int, update_follows: bool) -> tuple[int, float, float]:
        """The chunk length and update coefficients at iteration ``k`` of ``stage``: with ``settle``, the last
        ``settle`` iterations before a support update are ER (a = b = 0), so the chunks split where they start."""
        a, b = stage.coefficients
        if not (stage.settle and update_follows):
            return chunk, a, b
        start = stage.sw - stage.settle
        position = k % stage.sw
        if position < start:
            return min(chunk, start - position), a, b
        return min(chunk, stage.sw - position), 0.0, 0.0

    def _stage_amplitude(self, engine, masked: str = "free", sharpen: float = 0.0) -> None:
        """The engine's amplitude for a stage's ``masked`` and ``sharpen`` options
        (:func:`qora.phase.unmeasured.stage_amplitude`); no options: the measured counts."""
        from qora.phase.unmeasured import stage_amplitude

        stage_amplitude(engine, masked=masked, sharpen=sharpen, intensity=self.intensity, mask=self.mask,
                        free=self.free, measured_amp=self.amp)

    def _free_likelihood(self):
        """The held-out pixels on the solver's device, made at the first stage that needs them."""
        from qora.phase.llk import FreeLikelihood

        if getattr(self, "_free_llk", None) is None:
            self._free_llk = FreeLikelihood(self.intensity, self.free, self.backend.xp)
        return self._free_llk

    def _coherence_for(self, engine, stage):
        """The psf kernels of the engine's starts: kept from the previous psf stage when its options match.
        ``psf_sigma=0``: each start's first kernel is a Gaussian of the width that best fits its current object's
        intensity to the counts (:func:`qora.phase.coherence.blur_width`, at least the grid's first nonzero width)."""
        from qora.phase.coherence import BLUR_WIDTHS, Coherence, blur_width

        state = getattr(self, "_coherence", None)
        if state is None or not state.matches(stage.psf, stage.psf_sigma, stage.psf_eta):
            sigmas = None
            if stage.psf_sigma == 0:
                xp = self.backend.xp
                unused = self.free if self.mask is None else (self.mask | self.free)
                x = engine.get_x()
                sigmas = [max(BLUR_WIDTHS[1], blur_width(xp.asarray(x[k]), self.intensity,
                                                         unused if unused.any() else None, xp=xp))
                          for k in range(engine.batch)]
            state = self._coherence = Coherence(engine, model=stage.psf, sigma=stage.psf_sigma or 1.0,
                                                 eta=stage.psf_eta, amp=self.amp, sigmas=sigmas)
            state.sigma = float(stage.psf_sigma)  # what matches() compares: the option as written
        state.every, state.fit = stage.psf_every, stage.psf_fit  # shared kernel; the stage says how it is refined
        return state

    def _shrinkwrap(self, engine, stage, update, updates, iteration, ids) -> None:
        """One support update of the engine's starts; retunes by the size guard go to the support log."""
        options = {"statistic": stage.stat, "shape": stage.shape, "phase_range": stage.prange}
        if stage.smin or stage.smax:
            low, high = size_range_for(self._autocorrelation_pixels, len(self.shape), low=stage.smin,
                                       high=stage.smax or 1e12)
            options["size_range"] = (low, min(high, int(np.prod(self.shape))))
        statuses = engine.shrinkwrap(stage.sigma_at(update, updates), stage.threshold, **options)
        for start, status in zip(ids, statuses):
            if status != "ok":
                self._support_log.append({"start": int(start), "iteration": int(iteration), "status": status})



def reconstruct(intensity, options: PhaseOptions | None = None, *, support=None, mask=None, backend="auto",
                progress=None, **changes) -> PhaseResult:
    """Reconstruct a complex object from a far-field diffraction pattern.

    The options' fields (:class:`~qora.phase.options.PhaseOptions`): ``recipe``, e.g. ``"HIO**400 ER**100"``, or a
    name (``"default"``, ``"few-photons"``, ``"pynx-rule"``); by default (None or ``"default"``)
    :func:`default_recipe`, which for count data (whole numbers) below 1000 photons per speckle is the
    few-photon recipe (``Solver.photons_per_speckle``). ``starts``: random starts, the best by ``rank`` returned.
    ``rank``: "fourier" (final Fourier error) or "free_llk" (Poisson deviance on held-out pixels: 5% of the
    measured pixels unless ``free_fraction`` says otherwise). ``sync_every``: iterations between progress
    reports (and, on the GPU, host reads). ``batch``: starts iterated together in one batched transform; "auto"
    batches up to 8 on the GPU for patterns of at most 2^20 pixels, where that was measured faster, else 1.
    ``keep_all``: every start's object and support kept in the result. ``variant``, ``seed``.

    Parameters
    ----------
    intensity : ndarray (N1, N2) or (N1, N2, N3)
        Measured intensities (photon counts; any non-negative scale is accepted), detector layout:
        q = 0 at index n//2 on every axis.
    options : PhaseOptions, optional
        The choices above (default: their defaults).
    support : bool ndarray, optional
        Centre-origin support; by default the thresholded autocorrelation.
    mask : bool ndarray, optional
        True where a pixel was not measured (its modulus is left free).
    backend : {"auto", "cpu", "cuda"}
        Where it runs ("auto": the GPU where CuPy sees one).
    progress : callable, optional
        ``progress(stage, done, total, metrics)``; return False to stop early.
    **changes
        Fields of ``options`` to override (``reconstruct(intensity, recipe="HIO**400 ER**100", starts=4)``).

    Returns
    -------
    PhaseResult

    Notes
    -----
    Each iteration is ``x <- P_S-update(x, P_M x)`` with the modulus projection
    ``P_M x = F^-1 [a F x / |F x|]`` (unitary F; masked pixels keep ``F x``) and
    the update ``P_M x`` inside the support, ``a x + b P_M x`` outside (ER:
    a = b = 0; HIO: 1, -beta; RAAR: beta, 1 - 2 beta).

    References
    ----------
    J. R. Fienup, "Phase retrieval algorithms: a comparison", Appl. Opt. 21,
    2758 (1982), doi:10.1364/AO.21.002758. D. R. Luke, "Relaxed averaged
    alternating reflections for diffraction imaging", Inverse Problems 21, 37
    (2005), doi:10.1088/0266-5611/21/1/004. S. Marchesini et al., "X-ray image
    reconstruction from a diffraction pattern alone", Phys. Rev. B 68, 140101
    (2003), doi:10.1103/PhysRevB.68.140101.
    """
    o = PhaseOptions.made(options, **changes)
    recipe, starts, variant, seed, rank, batch = o.recipe, o.starts, o.variant, o.seed, o.rank, o.batch
    keep_all, free_fraction, sync_every = o.keep_all, o.free_fraction, o.sync_every
    recipe, reason = choose_recipe(intensity, mask, recipe=recipe, support=support, variant=variant, rank=rank)
    from qora.backend import resolve

    if is_envelope(recipe):  # a search of its own (qora.phase.envelope), not a stage list
        from qora.phase import envelope

        intensity, mask = check_intensity(intensity, mask)
        check_starts_memory(resolve(backend), np.shape(intensity), starts, keep_all=keep_all,
                            iterations=envelope.ITERATIONS, envelope=True)
        return envelope.reconstruct(intensity, mask=mask, starts=starts, seed=seed, backend=backend,
                                    progress=progress, keep_all=keep_all, reason=reason)
    if free_fraction is None:
        free_fraction = 0.05 if rank == "free_llk" or named_recipe(recipe).needs_free_pixels else 0.0
    check_starts_memory(resolve(backend), np.shape(intensity), starts, keep_all=keep_all,
                        iterations=named_recipe(recipe).iterations)

    if batch == "auto":
        batch = starts if variant == "batched" else auto_batch(resolve(backend), variant, np.shape(intensity), starts)
    elif variant == "batched" and batch == 1:
        batch = starts  # all starts in one batched plan unless told otherwise
    solver = Solver(intensity, mask=mask, backend=backend, variant=variant, batch=min(batch, starts),
                    free_fraction=free_fraction, seed=seed)
    return solver.run(support=support, recipe=recipe, starts=starts, seed=seed, rank=rank, keep_all=keep_all,
                      progress=progress, sync_every=sync_every)
