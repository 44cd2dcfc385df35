"""The support of a real, non-negative object from its pattern alone: a complex envelope, then positivity.

The recipe ``"real-envelope"`` (``reconstruct(recipe="real-envelope")``, ``qora phase run --recipe
real-envelope``). It recovers the ESRF ID10 logo, where 57% of the object's intensity lies behind the beamstop
and the default's shrinkwrap collapses (docs/phase.md, "The ESRF logo"). Why each step is there:

1. *Friedel completion.* A real object's pattern is centrosymmetric, I(q) = I(-q): a pixel is measured where
   it or its mirror about q = 0 (index n//2) is, with the mirror's value (2,720 -> 2,618 unmeasured on the logo).
2. *The envelope* (complex object, the rms shrinkwrap of PyNX: blurred |x| above 0.25 of its rms over the
   support, blur 2 -> 0.5 px): from the autocorrelation above 1% of its peak, HIO 200, the twin removed by
   keeping the support's half above its centre of mass along the first axis, then 20 x (HIO 40, ER 5,
   shrinkwrap). It ends on a speckled blob whose outline holds 87-92% of the object.
3. *Positivity, twice.* The blob's holes filled and grown by ``GROW`` px (it then holds the whole object:
   positivity reaches the data's floor only from a support that does); a fresh real random object; HIO with
   positivity (Fienup's feedback where outside the support or negative) 1000, then 10 x (HIO 40, ER 5,
   shrinkwrap at 0.15 of the rms, blur 1 -> 0.5 px). The unmeasured Fourier values are damped by ``DAMPING``
   at each projection: the missing low frequencies otherwise grow a smooth positive bump that fills holes of
   the object at no cost in the fit.
4. *Refinement:* holes filled, grown by 1 px, no damping, HIO with positivity 500, ER 200.
5. *Ranking:* the smallest support among the starts within 5% of the lowest amplitude R-factor (a swollen
   support fits a noisy pattern's inconsistencies slightly better; the object does not).

Only for real, non-negative objects (a centrosymmetric pattern says the object is real: :mod:`qora.phase.symmetry`).
Every start is iterated at once, arrays (starts, *shape) on the backend (NumPy or CuPy): the support steps below
are the same lines on both; the iterations run as array code, the CPU's fused loops or the GPU's kernels and
graphs (:mod:`qora.phase.envelope_iterate`). Measured: docs/phase.md, docs/phase-performance.md.
"""

from __future__ import annotations

import time

import numpy as np
import scipy.ndimage

from qora.backend import fft as backend_fft
from qora.phase.analysis import COMPACT_NEAR
from qora.phase.envelope_iterate import STAGE, ArrayIterations, FastCpuIterations, Pattern, friedel_complete

__all__ = ["NAME", "GROW", "DAMPING", "ITERATIONS", "friedel_complete", "search", "reconstruct"]

NAME = STAGE  # recipe.ENVELOPE_RECIPE
GROW = 10  # px the envelope is grown by before each positivity pass (7-10 px worked on the logo; 6 and 14 did not)
DAMPING = 0.99  # factor on the unmeasured Fourier values at each projection of the positivity passes
ENVELOPE = (200, 20, 40, 5)  # first HIO, then cycles of (HIO, ER) each followed by a shrinkwrap
POSITIVE = (1000, 10, 40, 5)
REFINE = (500, 200)  # HIO and ER with positivity on the final support
NEAR = COMPACT_NEAR  # ranking: starts within 5% of the lowest R-factor compete on support size (analysis.compact_best)
ITERATIONS = (ENVELOPE[0] + ENVELOPE[1] * (ENVELOPE[2] + ENVELOPE[3])
              + 2 * (POSITIVE[0] + POSITIVE[1] * (POSITIVE[2] + POSITIVE[3])) + sum(REFINE))


class _Supports:
    """The support steps on a batch of starts (arrays (starts, *shape)): no step couples two starts."""

    def __init__(self, xp, ndi, ndim: int) -> None:
        self.xp, self.ndi = xp, ndi
        self.spatial = tuple(range(1, ndim + 1))
        cross = np.zeros((3,) * (ndim + 1), bool)  # nearest neighbours within a start, none across starts
        cross[1] = scipy.ndimage.generate_binary_structure(ndim, 1)
        self.cross = xp.asarray(cross)

    def shrinkwrap(self, x, support, sigma: float, threshold: float):
        """PyNX's rule per start: blurred |x| above ``threshold`` times its rms over that start's support."""
        xp = self.xp
        blurred = xp.abs(x).astype(xp.float32)
        for ax in self.spatial:  # gaussian_filter's passes, none along the starts
            blurred = self.ndi.gaussian_filter1d(blurred, sigma, axis=ax)
        inside = support.astype(xp.float32)
        rms = xp.sqrt(xp.sum(blurred**2 * inside, axis=self.spatial) / xp.maximum(xp.sum(inside, axis=self.spatial), 1))
        return blurred > threshold * rms.reshape((-1,) + (1,) * len(self.spatial))

    def filled(self, support):
        """Each start's support with its holes filled: every background region that does not touch the array's
        edge. (Written with ``label`` because CuPy's ``binary_fill_holes`` needs the iterated dilation it lacks.)"""
        xp = self.xp
        labels, _ = self.ndi.label(~support, structure=self.cross)
        edge = xp.zeros(support.shape, bool)
        for ax in self.spatial:
            index = [slice(None)] * support.ndim
            for end in (0, -1):
                index[ax] = end
                edge[tuple(index)] = True
        outside = xp.unique(labels[edge & ~support])
        return support | ~xp.isin(labels, outside)

    def grown(self, support, px: int):
        """The supports, holes filled, grown by ``px`` pixels (``brute_force``: CuPy iterates no other way)."""
        return self.ndi.binary_dilation(self.filled(support), structure=self.cross, iterations=px, brute_force=True)


def _filled(support, xp, ndi):
    """One support with its holes filled (:meth:`_Supports.filled` on a batch of one)."""
    return _Supports(xp, ndi, support.ndim).filled(support[None])[0]


def _sigmas(first, last, count):
    return [first * (last / first) ** (k / max(count - 1, 1)) for k in range(count)]


def _autocorrelation(pattern, level=0.01):
    xp = pattern.xp
    measured = xp.where(pattern.measured, pattern.intensity, 0)
    ac = xp.abs(xp.fft.fftshift(backend_fft.ifftn(xp.fft.ifftshift(measured))))
    return ac > level * ac.max()


def _twin_half(support, xp, ndi):
    """The part of the autocorrelation support above its centre of mass along the first axis: the object and its
    twin are the two halves, so keeping one removes the twin."""
    centre = float(ndi.center_of_mass(support.astype(xp.float32))[0])  # CuPy sums bool slowly (and warns)
    rows = xp.arange(support.shape[0]).reshape((-1,) + (1,) * (support.ndim - 1))
    return support & (rows < centre)


def search(pattern, rngs, run, ndi):
    """Every start at once (start k draws from ``rngs[k]``): the envelope, two positivity passes, the refinement.
    Returns (objects, supports), arrays (starts, *shape)."""
    xp, shape = pattern.xp, pattern.shape
    steps = _Supports(xp, ndi, len(shape))
    draw = lambda make: xp.asarray(np.stack([make(r) for r in rngs]))  # noqa: E731
    start = _autocorrelation(pattern)
    x = draw(lambda r: (r.random(shape) * np.exp(2j * np.pi * r.random(shape))).astype(np.complex64)) * start
    support = xp.broadcast_to(start, x.shape)
    first, cycles, hio, er = ENVELOPE
    x = run.complex(x, support, first, hio=True)
    support = xp.broadcast_to(_twin_half(start, xp, ndi), x.shape)
    x = x * support
    for sigma in _sigmas(2.0, 0.5, cycles):
        x = run.complex(run.complex(x, support, hio, hio=True), support, er, hio=False)
        support = steps.shrinkwrap(x, support, sigma, 0.25)
    for _ in range(2):
        support = steps.grown(support, GROW)
        x, support = positive_pass(run, steps, draw(lambda r: r.random(shape).astype(np.float32)) * support, support)
    support = steps.grown(support, 1)
    x = run.positive(x * support, support, REFINE[0], hio=True, damp=1.0)
    return run.positive(x, support, REFINE[1], hio=False, damp=1.0), support


def positive_pass(run, steps, x, support, *, threshold: float = 0.15, edit=None, after=None):
    """One positivity pass of the search from ``x`` on ``support``: :data:`POSITIVE`'s first HIO, then its cycles of
    HIO and ER, each followed by a shrinkwrap at ``threshold``. Returns (x, support). For the probes that vary the
    pass (bench/probes/binned_*): ``edit(x)`` returns the iterate the shrinkwrap reads, ``after(cycle, x, support)``
    is called after each shrinkwrap (cycle -1: after the first HIO) and may return a new support."""
    first, cycles, hio, er = POSITIVE
    x = run.positive(x, support, first, hio=True, damp=DAMPING)
    if after is not None:
        support = _or(after(-1, x, support), support)
    for cycle, sigma in enumerate(_sigmas(1.0, 0.5, cycles)):
        x = run.positive(run.positive(x, support, hio, hio=True, damp=DAMPING), support, er, hio=False, damp=DAMPING)
        if edit is not None:
            x = edit(x)
        support = steps.shrinkwrap(x, support, sigma, threshold)
        if after is not None:
            support = _or(after(cycle, x, support), support)
    return x, support


def _or(value, default):
    return default if value is None else value


def iterations_for(pattern: Pattern, backend, starts: int, *, progress=None, total: int = 0, reference=False,
                   offset: int = 0):
    """The fastest provider on ``backend`` (``reference``: the array code); ``offset`` iterations times starts done
    before it (earlier groups), for the progress."""
    if reference:
        cls = ArrayIterations
    elif backend.is_cuda:
        from qora.phase.envelope_cuda import CudaIterations

        cls = CudaIterations
    else:
        from qora.phase import envelope_cpu

        cls = FastCpuIterations if envelope_cpu.available() else ArrayIterations
    return cls(pattern, starts, progress, total, offset)


def group_size(backend, shape, starts: int, *, reserved: float = 0.0) -> int:
    """How many starts are iterated together: all of them where they fit in half the memory the backend has free
    (:data:`qora.phase.checks.ENVELOPE_BYTES_PER_PIXEL` a pixel and start) less ``reserved`` bytes (on the host,
    every start's result kept there), else as many as do (at least one)."""
    from qora.backend.device import free_memory
    from qora.phase.checks import ENVELOPE_BYTES_PER_PIXEL

    free = free_memory(backend)
    if free is None:
        return starts
    per_start = ENVELOPE_BYTES_PER_PIXEL * float(np.prod(shape))
    return max(1, min(starts, int(0.5 * max(free - reserved, 0.0) // per_start)))


def _ndimage(be):
    """scipy.ndimage on the host; on the GPU cupyx's with the support steps' filter and dilation compiled once
    (:class:`qora.phase.envelope_cuda.SupportNdimage`)."""
    if be.is_cuda:
        from qora.phase.envelope_cuda import SupportNdimage

        return SupportNdimage()
    import scipy.ndimage

    return scipy.ndimage


def reconstruct(intensity, *, mask=None, starts: int = 1, seed: int = 0, backend="auto", progress=None,
                keep_all: bool = False, reference: bool = False, reason: str = "", first_start: int = 0):
    """The ``real-envelope`` recipe on ``starts`` starts (start k from ``PCG64(seed + first_start + k)``: starts split
    over workers keep their numbers), all iterated at once;
    a :class:`~qora.phase.result.PhaseResult` ranked as the module says (``rank`` "fourier" names the score
    reported per start; the choice among near-equal ones is the smallest support). ``reference``: the array
    code's iterations (the fused paths' reference). ``reason``: why the recipe was chosen (the result's
    ``choice``, printed by the CLI)."""
    from qora.backend import resolve
    from qora.phase import analysis
    from qora.phase.result import PhaseResult
    from qora.provenance import versions

    be = resolve(backend)
    t0 = time.perf_counter()
    pattern = Pattern(intensity, mask, be.xp)
    # every start's object and support, filled group by group (no joined copy: at 10,000 starts they are most of
    # the memory), on the host, where a CPU backend's groups must leave room for them
    stack_o = np.empty((starts,) + tuple(pattern.shape), np.complex64)
    stack_s = np.empty((starts,) + tuple(pattern.shape), bool)
    histories = []
    group = group_size(be, pattern.shape, starts, reserved=0.0 if be.is_cuda else stack_o.nbytes + stack_s.nbytes)
    for first in range(0, starts, group):  # the starts that fit in memory at once, iterated together
        count = min(group, starts - first)
        run = iterations_for(pattern, be, count, progress=progress, total=starts * ITERATIONS, reference=reference,
                             offset=first * ITERATIONS)
        rngs = [np.random.default_rng(seed + first_start + first + k) for k in range(count)]
        x, s = search(pattern, rngs, run, _ndimage(be))
        stack_o[first:first + count] = be.to_host(x)
        stack_s[first:first + count] = be.to_host(s)
        histories.append(run.history())
        del x, s, run  # the group's arrays freed before the next group's
    t_search = time.perf_counter() - t0
    # the report on the device where the search ran (where the starts fit in a GiB and need no coarsening): its
    # transforms took 0.26 s of the 0.7 s the agreement report of the logo's 10 starts took on an H100's host, 0.02 s
    # on the device (bench/probes/agreement_timing.py; docs/phase-performance.md)
    on_device = be.is_cuda and stack_o.nbytes <= 2**30 and stack_o[0].size <= analysis.AGREE_MOST_VOXELS
    objects = be.xp.asarray(stack_o) if on_device else stack_o
    unmeasured = None if mask is None else np.asarray(mask, bool)
    pattern_host = np.asarray(be.to_host(pattern.intensity))
    where = (pattern.intensity, None if mask is None else be.xp.asarray(unmeasured)) if on_device else (
        pattern_host, unmeasured)
    r = np.array([analysis.amplitude_rfactor(o, *where) for o in objects])
    support_px = [int(v.sum()) for v in stack_s]
    best = analysis.compact_best(r, support_px, NEAR)
    errors = np.concatenate(histories, axis=1)
    result = PhaseResult(
        object=stack_o[best], support=stack_s[best], errors=errors, final_errors=errors[-1].copy(),
        llk=np.full(starts, np.nan), free_llk=np.full(starts, np.nan), best=best, rank="fourier", recipe=NAME,
        seed=seed, starts=starts, backend=be.name, variant="array" if reference else "fused", first_start=first_start,
        timings={"run_s": time.perf_counter() - t0}, versions=versions(),
        objects=stack_o if keep_all else None, supports=stack_s if keep_all else None)
    first = np.where(np.arange(starts) == best, -np.inf, r)  # the report aligns every start to the one ranked first
    result.agreement = analysis.agreement(objects, stack_s, first, intensity=pattern_host)
    result.convergence = analysis.convergence(errors[:, best])
    result.timings.update(rfactor=[float(v) for v in r], support_px=support_px)  # what merge_results ranks by
    result.timings.update(search_s=t_search, report_s=time.perf_counter() - t0 - t_search)
    result.choice = reason
    return result
