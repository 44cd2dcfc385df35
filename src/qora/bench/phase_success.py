"""Success rates of phase retrieval from the pattern alone (``qora bench phase-success``).

Each case is an object recorded as a detector records it (:mod:`qora.phase.detector`: Poisson counts, a
beamstop, gaps, optionally partial coherence) and reconstructed from ``starts`` random starts with a
recipe and no support. A start succeeds when its object error against the truth after alignment
(sub-pixel shift, global phase, twin; both scaled to unit norm) is below the case's bound,
``max(SUCCESS_BOUND, REFERENCE_FACTOR x the known-support reference error)`` (:func:`success_bound`).

Why 0.2: a start that has found the support and the object differs from the truth by edge ringing and
noise only (0.01-0.15 on the cases here, depending on how sharp the edges are and how many photons),
while a start that has not is a different object (0.5-1.0); see docs/phase.md, "Success rates".

Why relative to a reference: where the data themselves limit the object (few photons, partial
coherence), the same pattern with the true support given already ends near 0.1-0.2, and a fixed 0.2
would count a start that found everything the data hold as a failure. The reference is computed in the
same run (:func:`reference_error`): error reduction from the TRUE OBJECT with the true support, which
ends at the fixed point of the data nearest the truth, what a perfect search would end at. It has no
random start, so it does not swing from run to run (random known-support starts did, 0.03-0.19 on the
few-photon case: HIO lands on different fixed points). A start within 1.5 times it has found the
support (edge pixels of a shrinkwrapped support cost up to that much on these cases), and a start that
did not is still far above it. The fixed-bound share is reported beside it.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from qora.backend import resolve
from qora.bench.common import BenchResult
from qora.io.errors import InputError
from qora.phase import analysis, objects
from qora.phase import detector as beamline

BEAMLINE_BOXES, Detector, record = beamline.BEAMLINE_BOXES, beamline.Detector, beamline.record
crystal, featured, lithograph = beamline.crystal, beamline.featured, beamline.lithograph

__all__ = ["CASES", "QUICK", "SUCCESS_BOUND", "REFERENCE_FACTOR", "REFERENCE_ITERATIONS", "Case", "aligned_error",
           "success_bound", "known_support_er", "reference_error", "run_case", "run"]

SUCCESS_BOUND = 0.2
# A start within this factor of the known-support reference error has found the support (see above).
REFERENCE_FACTOR = 1.5
# The reference: coherent error reduction from the true object on the true support, this many iterations.
REFERENCE_ITERATIONS = 300


def success_bound(reference: float | None) -> float:
    """The object-error bound of a case: max(0.2, 1.5 x the known-support reference error); 0.2 without one."""
    if reference is None:
        return SUCCESS_BOUND
    if not reference >= 0:
        raise InputError(f"the reference error must be a number >= 0, got {reference!r}")
    return max(SUCCESS_BOUND, REFERENCE_FACTOR * float(reference))


def known_support_er(truth, counts, mask, *, iterations: int = REFERENCE_ITERATIONS, backend="auto") -> np.ndarray:
    """Error reduction in float64 from the true object ``truth`` (centre-origin) on its support |truth| > 0.

    The start is ``truth`` scaled to the measured counts; each iteration replaces the modulus of the
    unitary transform by sqrt(counts) on the measured pixels (``mask`` False; unmeasured ones keep the
    model's) and zeroes the object outside the support. Deterministic: no random numbers. Runs on
    ``backend``'s arrays (NumPy or CuPy, the same code). Returns the centre-origin object on the host
    (complex128, the shape of ``truth``).
    """
    from qora.backend import fft

    truth = np.asarray(truth, np.complex128)
    counts = np.asarray(counts, np.float64)
    if counts.shape != truth.shape:
        raise InputError(f"counts {counts.shape} and truth {truth.shape} must have the same shape")
    if iterations < 1:
        raise InputError(f"iterations must be >= 1, got {iterations}")
    be = resolve(backend)
    xp = be.xp
    axes = tuple(range(truth.ndim))
    measured = np.ones(truth.shape, bool) if mask is None else ~np.asarray(mask, bool)
    measured = xp.asarray(np.fft.ifftshift(measured, axes=axes))
    amp = xp.asarray(np.sqrt(np.maximum(np.fft.ifftshift(counts, axes=axes), 0.0)))
    x = xp.asarray(np.fft.ifftshift(truth, axes=axes))
    outside = x == 0
    model = xp.abs(fft.fftn(x, norm="ortho")) ** 2
    # scale the truth to the counts so that the first projection is not also a rescaling
    x *= xp.sqrt((amp[measured] ** 2).sum() / xp.maximum(model[measured].sum(), 1e-300))
    for _ in range(iterations):
        y = fft.fftn(x, norm="ortho")
        modulus = xp.abs(y)
        y = xp.where(measured, amp * y / xp.where(modulus > 0, modulus, 1.0), y)
        x = fft.ifftn(y, norm="ortho")
        x[outside] = 0
    return np.fft.fftshift(be.to_host(x), axes=axes)


def reference_error(truth, counts, mask, *, backend="auto") -> float:
    """The object error of :func:`known_support_er` (:data:`REFERENCE_ITERATIONS` iterations from the truth on
    the true support, on ``backend``) on these counts: the data's own floor, what a search that found the
    support and the object ends near. Stable by construction (no random start)."""
    return aligned_error(known_support_er(truth, counts, mask, backend=backend), truth)


@dataclass(frozen=True)
class Case:
    """One benchmark case: an object factory, its size and how it is recorded."""

    make: object
    n: int
    detector: Detector

    def object(self) -> np.ndarray:
        return self.make(self.n)


CASES = {
    "triangle_256": Case(objects.triangle, 256, Detector(photons=1e8)),
    "triangle_256_1e6": Case(objects.triangle, 256, Detector(photons=1e6, beamstop=4)),
    "featured_256": Case(featured, 256, Detector(photons=1e8)),
    "featured_256_psf": Case(featured, 256, Detector(photons=1e8, coherence_sigma=0.7)),
    "featured_512": Case(featured, 512, Detector(photons=1e9)),
    "prism_48": Case(objects.prism, 48, Detector(photons=1e8, gap=0)),
    "featured3d_64": Case(lambda n: featured(n, ndim=3), 64, Detector(photons=1e8)),
    "crystal_128": Case(lambda n: crystal(n, size=50), 128, Detector(photons=1e9, beamstop=3, gap=0)),
    # a lithographic pattern's fine structure behind the ESRF ID10 logo pattern's beamstop and gap boxes
    "lithograph_256_box": Case(lithograph, 256, Detector(photons=2.5e8, beamstop=0, gap=0, boxes=BEAMLINE_BOXES)),
    "lithograph_512_box": Case(lithograph, 512, Detector(photons=1e9, beamstop=0, gap=0, boxes=BEAMLINE_BOXES)),
}
# The default selection: small enough to run in minutes on two shared cores.
QUICK = ("triangle_256", "featured_256", "prism_48")


def aligned_error(x, truth) -> float:
    """Object error after alignment (shift, phase, twin) with both scaled to unit norm (dimensionless)."""
    x = np.asarray(x, np.complex128)
    t = np.asarray(truth, np.complex128)
    return analysis.object_error(x / np.linalg.norm(x), t / np.linalg.norm(t))


# Below this mean count per pixel a shell of |q| no longer fixes its speckles' moduli (Poisson noise as large as
# the signal): the resolution the counts hold (:func:`count_cutoff`).
RESOLVED_COUNT = 1.0


def count_cutoff(counts, mask=None, *, level: float = RESOLVED_COUNT) -> float:
    """The |q| (cycles per pixel) of the first one-pixel-wide shell, outwards from q = 0, whose mean measured count
    is below ``level`` photons per pixel: the resolution the counts hold; 0.5 (the array's edge) if none is.

    Why counts and not the PRTF of the starts at 1/e: with the 5-10 starts of the benchmark, phases that agree
    nowhere still average to about 1/sqrt(K) (0.3-0.45), around the 1/e criterion, and the starts that did not
    find the object would move the cut-off; the counts are the same for every recipe.
    """
    counts = np.asarray(counts, float)
    measured = np.ones(counts.shape, bool) if mask is None else ~np.asarray(mask, bool)
    grids = np.meshgrid(*[np.arange(n) - n // 2 for n in counts.shape], indexing="ij")
    radius = np.sqrt(sum(g.astype(float) ** 2 for g in grids))
    shell = np.floor(radius).astype(int)
    sums = np.bincount(shell[measured], weights=counts[measured], minlength=shell.max() + 1)
    pixels = np.bincount(shell[measured], minlength=shell.max() + 1)
    edge = min(counts.shape) // 2
    for r in range(edge):
        if pixels[r] and sums[r] / pixels[r] < level:
            return float(r / min(counts.shape))
    return 0.5


def resolved_error(x, truth, cutoff: float) -> float:
    """The object error of :func:`aligned_error` at the resolution ``cutoff`` (cycles per pixel): the object is
    aligned to the truth (shift, phase, twin) as there, then both are low-passed to |q| < ``cutoff`` (a sharp
    sphere in q) and scaled to unit norm in that band before the relative distance is taken. Reported beside the
    plain error, never instead of it (docs/phase.md, "Few photons")."""
    x = np.asarray(x, np.complex128)
    t = np.asarray(truth, np.complex128)
    aligned, _ = analysis.align(x / np.linalg.norm(x), t / np.linalg.norm(t))
    grids = np.meshgrid(*[np.fft.fftfreq(n) for n in t.shape], indexing="ij")
    keep = np.sqrt(sum(g**2 for g in grids)) < cutoff
    a = np.fft.fftn(aligned, norm="ortho")[keep]
    b = np.fft.fftn(t, norm="ortho")[keep]
    a, b = a / np.linalg.norm(a), b / np.linalg.norm(b)
    return float(np.linalg.norm(a - b))


def _scores(errors, reference) -> dict:
    """Success shares of per-start ``errors``: against the case's bound and against the fixed 0.2."""
    bound = success_bound(reference)
    ok = [e < bound for e in errors]
    return {"success": float(np.mean(ok)), "succeeded": int(sum(ok)), "bound": bound,
            "reference_error": reference, "success_fixed": float(np.mean([e < SUCCESS_BOUND for e in errors])),
            "median_error": float(np.median(errors)), "best_error": float(min(errors)), "errors": errors}


def run_case(case: Case, *, starts: int, recipe=None, backend="auto", seed: int = 0, reference: bool = True,
             consensus: int = 0, figure=None, resolved: bool = False) -> dict:
    """Reconstruct one case from ``starts`` starts; the per-start errors, the success shares (against the
    case's bound, and against the fixed 0.2 as ``success_fixed``) and the time. ``reference=False`` skips the
    known-support reference run (the bound is then 0.2).

    ``consensus`` > 1 adds the agreement of that many best starts (by Fourier error, as a user without
    the truth would rank them; :func:`qora.phase.analysis.consensus`): ``consensus_median``,
    ``consensus_max`` and the matrix ``consensus_errors``. ``figure``: a PNG path for
    :func:`slices_figure` of the best start against the truth. ``resolved``: also each start's error at the
    resolution the counts hold (:func:`resolved_error` at :func:`count_cutoff`), ``resolved_errors``, with
    ``resolved_cutoff`` and the share below the bound at that resolution, beside the plain ones.
    """
    from qora.phase import reconstruct

    truth = case.object()
    counts, mask = record(truth, case.detector, seed=seed)
    t0 = time.perf_counter()
    # the recipe by name or notation as given: "default" lets the solver pick by the photon count
    result = reconstruct(counts, mask=mask, recipe=recipe, starts=starts, backend=backend, seed=seed,
                         keep_all=True)
    seconds = time.perf_counter() - t0
    errors = [aligned_error(o, truth) for o in result.objects]
    ref = reference_error(truth, counts, mask, backend=backend) if reference else None
    row = {**_scores(errors, ref), "starts": starts, "s_per_start": seconds / starts,
           "retunes": len(result.support_log), "shape": list(truth.shape), "photons": case.detector.photons,
           "recipe": result.recipe, "best_start": result.best, "best_start_error": errors[result.best],
           # the default's check for a partially coherent beam (None when a recipe was given)
           "coherence_width": result.coherence_width}
    if resolved:
        cutoff = count_cutoff(counts, mask)
        low = [resolved_error(o, truth, cutoff) for o in result.objects]
        row.update(resolved_cutoff=cutoff, resolved_errors=low, resolved_median=float(np.median(low)),
                   resolved_succeeded=int(sum(e < row["bound"] for e in low)))
    if consensus > 1:
        agreement = analysis.consensus(result.objects, result.final_errors, keep=consensus)
        row.update(consensus_starts=agreement["starts"], consensus_errors=agreement["errors"].tolist(),
                   consensus_median=agreement["median"], consensus_max=agreement["max"])
    if figure is not None:
        slices_figure(result.object, truth, figure)
    return row


def slices_figure(found, truth, path, *, title: str = "") -> None:
    """A PNG of the central slice (first axis at n//2 in 3D) of amplitude and phase: the truth above,
    ``found`` aligned to it (shift, phase, twin) below, cropped to the object with a margin; phase shown
    where the truth's amplitude exceeds a tenth of its maximum (elsewhere it is noise's), on a scale
    a quarter wider than the truth's phase range."""
    from qora.plot import save_png, subplots

    truth = np.asarray(truth, np.complex128)
    aligned, info = analysis.align(np.asarray(found, np.complex128) / np.linalg.norm(found),
                                   truth / np.linalg.norm(truth))
    aligned *= np.linalg.norm(truth)
    centre = tuple(n // 2 for n in truth.shape[:-2])
    inside = np.abs(truth[centre]) > 0.1 * np.abs(truth).max()
    rows, cols = np.nonzero(inside)
    margin = max(4, int(0.15 * max(np.ptp(rows), np.ptp(cols))))
    crop = (slice(max(0, rows.min() - margin), rows.max() + margin + 1),
            slice(max(0, cols.min() - margin), cols.max() + margin + 1))
    span = 1.25 * float(np.abs(np.angle(truth[centre][inside])).max()) or np.pi
    fig, axes = subplots(2, 2, figsize=(6.4, 6.0))
    for row, (label, obj) in enumerate((("truth", truth), ("best start" + (" (twin)" if info["twin"] else ""),
                                                           aligned))):
        plane = obj[centre][crop]
        amp = axes[row, 0].imshow(np.abs(plane), cmap="gray", vmin=0, vmax=np.abs(truth).max() * 1.2)
        phase = axes[row, 1].imshow(np.where(inside[crop], np.angle(plane), np.nan), cmap="coolwarm",
                                    vmin=-span, vmax=span)
        axes[row, 0].set_title(f"{label}: amplitude", fontsize=9)
        axes[row, 1].set_title(f"{label}: phase (rad)", fontsize=9)
        fig.colorbar(amp, ax=axes[row, 0], shrink=0.8)
        fig.colorbar(phase, ax=axes[row, 1], shrink=0.8)
    for ax in axes.ravel():
        ax.set_xticks([])
        ax.set_yticks([])
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    save_png(fig, path, dpi=72)


def cohere_python() -> Path:
    """The cohere environment's interpreter: ``QORA_COHERE_PYTHON``, else ``.cohere/bin/python`` of the checkout
    (make it with ``python3 -m venv .cohere && .cohere/bin/pip install cohere-core``)."""
    env = os.environ.get("QORA_COHERE_PYTHON")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[3] / ".cohere" / "bin" / "python"


def run_cohere_case(case: Case, *, starts: int, seed: int = 0, device: int = -1) -> dict:
    """cohere-core's reconstruction (its example configuration, ``peers/phase_cohere.py``) of the same
    recorded pattern, in cohere's own interpreter; scored as :func:`run_case` scores ours."""
    py = cohere_python()
    if not py.exists():
        raise RuntimeError(f"the cohere peer needs its environment: set QORA_COHERE_PYTHON (looked for {py})")
    truth = case.object()
    counts, mask = record(truth, case.detector, seed=seed)
    script = Path(__file__).with_name("peers") / "phase_cohere.py"
    with tempfile.TemporaryDirectory() as tmp:
        pattern, out = Path(tmp) / "pattern.npz", Path(tmp) / "out.npz"
        np.savez(pattern, counts=counts, mask=mask)
        args = [str(py), str(script), str(pattern), str(out), "--starts", str(starts), "--device", str(device)]
        if device >= 0:
            args += ["--pkg", "cp"]
        proc = subprocess.run(args, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"the cohere peer failed: {proc.stderr.strip()[-2000:]}")
        data = np.load(out)
        found, seconds = data["objects"], data["seconds"]
    errors = [aligned_error(o, truth) for o in found]
    ref = reference_error(truth, counts, mask, backend="cuda" if device >= 0 else "cpu")
    return {**_scores(errors, ref), "starts": starts, "s_per_start": float(np.mean(seconds)), "retunes": 0,
            "shape": list(truth.shape), "photons": case.detector.photons,
            "recipe": json.dumps(_cohere_params(script))}


def _cohere_params(script: Path) -> dict:
    """The configuration the peer script passes to cohere (read from the script, which cannot import qora)."""
    text = script.read_text()
    start = text.index("PARAMS = {")
    return ast.literal_eval(text[start + len("PARAMS = "): text.index("}", start) + 1])


def _measured_row(run_measured, *, starts: int, recipe, backend) -> dict:
    """A measured case's row. On a GPU it runs twice: a process's first run also pays CUDA's context, the FFT
    libraries' loading and the kernels' loading from the disk cache (0.5 s of a 1-2 s row on the H100s,
    docs/phase.md), which a second run in the same process (a user's next pattern) does not. The row is the second
    run's; ``cold_seconds`` and ``cold_succeeded`` are the first's. On the CPU one run (its start-up is a small
    share of a minute)."""
    row = run_measured(starts=starts, recipe=recipe, backend=backend.name)
    if not backend.is_cuda:
        return row
    warm = run_measured(starts=starts, recipe=recipe, backend=backend.name)
    return {**warm, "cold_seconds": row["seconds"], "cold_succeeded": row["succeeded"]}


def run(*, cases=QUICK, starts: int = 3, recipe=None, backend="auto", write=True, echo=print,
        label: str = "default", peer: str | None = None, consensus: int = 0, figures=None,
        resolved: bool = False) -> BenchResult:
    """The success rate of ``recipe`` (None: the default recipe), or of ``peer="cohere"``, on each of ``cases``;
    ``consensus`` and ``figures`` (a folder for ``<case>.png``) as in :func:`run_case` (ours only)."""
    from qora.bench.phase_measured import MEASURED_CASES, run_logo_case

    unknown = [c for c in cases if c not in CASES and c not in MEASURED_CASES]
    if unknown:
        raise InputError(f"unknown case(s) {unknown}; expected some of {sorted(CASES) + list(MEASURED_CASES)}")
    be = resolve(backend)
    facts = be.device_facts()
    result = BenchResult("phase-success", be.name, facts.as_dict(),
                         columns=("success", "success_fixed", "bound", "s_per_start", "median_error", "retunes"))
    result.notes["success_bound"] = (f"max({SUCCESS_BOUND}, {REFERENCE_FACTOR} x reference_error); "
                                     f"success_fixed: below {SUCCESS_BOUND}")
    result.notes["reference"] = f"ER**{REFERENCE_ITERATIONS} from the true object on the true support (float64)"
    result.notes["recipe_label"] = label
    if peer not in (None, "cohere"):
        raise InputError(f"peer must be None or 'cohere', got {peer!r}")
    if peer:
        label = peer
    for name in cases:
        if name in MEASURED_CASES:
            if peer:
                raise InputError(f"the measured case {name} runs Qora only")
            row = _measured_row(run_logo_case, starts=starts, recipe=recipe, backend=be)
            result.add(f"{name}/{label}", **row)
            echo(f"  {name}: {row['succeeded']}/{starts} with {row['bound']} (median R {row['median_r']:.3f}, "
                 f"IoU {row['median_iou']:.2f}); start ranked first "
                 f"{'succeeded' if row['best_start_succeeded'] else 'failed'}; {row['agreement']}; "
                 f"{row['seconds']:.2f} s ({row['s_per_start']:.2f} s per start)"
                 + (f"; first in its process {row['cold_seconds']:.2f} s ({row['cold_succeeded']}/{starts})"
                    if "cold_seconds" in row else ""))
            continue
        if peer == "cohere":
            row = run_cohere_case(CASES[name], starts=starts, device=0 if be.is_cuda else -1)
        else:
            figure = None if figures is None else Path(figures) / f"{name}.png"
            row = run_case(CASES[name], starts=starts, recipe=recipe, backend=be.name, consensus=consensus,
                           figure=figure, resolved=resolved)
        result.add(f"{name}/{label}", **row)
        echo(f"  {name}: {row['succeeded']}/{starts} below {row['bound']:.3f} (= max({SUCCESS_BOUND}, "
             f"{REFERENCE_FACTOR} x reference {row['reference_error']:.3f})), "
             f"{round(row['success_fixed'] * starts)}/{starts} below {SUCCESS_BOUND} "
             f"(median error {row['median_error']:.3f}), {row['s_per_start']:.1f} s per start")
        if "resolved_cutoff" in row:
            echo(f"    at the resolution the counts hold (mean count >= {RESOLVED_COUNT:g} per pixel up to |q| = "
                 f"{row['resolved_cutoff']:.3f} cycles/px): {row['resolved_succeeded']}/{starts} below the bound, "
                 f"median {row['resolved_median']:.3f} (beside the plain error, not instead of it)")
        if row.get("coherence_width") is not None:
            echo(f"    blur fitted to the coherent run's best start: {row['coherence_width']:.2f} px"
                 + (" (partial coherence: ran the psf recipe)" if "psf=" in row["recipe"] else ""))
        if "consensus_median" in row:
            kept = len(row["consensus_starts"])
            echo(f"    consensus of the best {kept} starts: median {row['consensus_median']:.3f}, "
                 f"max {row['consensus_max']:.3f}")
    if write:
        echo(f"result written to {result.write()}")
    echo(result.table())
    return result
