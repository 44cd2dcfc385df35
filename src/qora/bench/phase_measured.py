"""Success from the pattern alone on a measured pattern: the ESRF ID10 logo (``qora bench phase-success --cases
esrf_logo``).

A measured pattern has no true object to align to, only the makers' true support. A start succeeds when its object
fits the counts as well as a known-support run nearly does and its support is the logo's:

- amplitude R-factor (:func:`qora.phase.analysis.amplitude_rfactor`) at most :data:`LOGO_R_BOUND` (the true support
  gives 0.110, PyNX from a support made by blurring the true one 0.139-0.160), and
- support overlap with the true logo (:func:`qora.phase.analysis.support_iou`, best translation and twin) at least
  :data:`LOGO_IOU_BOUND`: a collapsed support or one swollen over the speckled blob a stagnated search leaves scores
  below it, and the R-factor alone does not tell them apart (a blob fits the counts to R 0.12; docs/phase.md,
  "The ESRF logo").

The data are read from the folder ``QORA_CDI_DATA`` (else ``QORA_SHARED_DATA``/cdi, else ``shared/data/cdi`` beside
the checkout), with the
default options a user's ``qora phase run`` takes: the pattern, its unmeasured mask, nothing else.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from qora.bench.common import shared_data_folder
from qora.io.errors import InputError
from qora.phase import analysis

__all__ = ["MEASURED_CASES", "LOGO_R_BOUND", "LOGO_IOU_BOUND", "cdi_data_folder", "load_logo", "run_logo_case"]

LOGO_R_BOUND = 0.13
LOGO_IOU_BOUND = 0.55
MEASURED_CASES = ("esrf_logo",)
LOGO_FILES = ("esrf_logo_id10.edf", "esrf_logo_id10_unmeasured.npy", "esrf_logo_id10_support.edf")


def cdi_data_folder() -> Path:
    """Where the measured CDI files are: ``QORA_CDI_DATA``, else ``QORA_SHARED_DATA``/cdi, else ``shared/data/cdi``
    next to the checkout."""
    return shared_data_folder("cdi", "QORA_CDI_DATA")


def load_logo(folder=None):
    """The logo's pattern (float64, detector layout), its unmeasured mask and the makers' true support."""
    from qora.io.patterns import load_pattern

    folder = Path(folder) if folder is not None else cdi_data_folder()
    missing = [name for name in LOGO_FILES if not (folder / name).exists()]
    if missing:
        raise InputError(f"the ESRF logo case needs {', '.join(missing)} in {folder} (set QORA_CDI_DATA)")
    intensity, _ = load_pattern(folder / LOGO_FILES[0])
    mask = np.load(folder / LOGO_FILES[1])
    support, _ = load_pattern(folder / LOGO_FILES[2])
    return np.asarray(intensity, np.float64), mask.astype(bool), np.asarray(support) > 0


def run_logo_case(*, starts: int, recipe=None, backend="auto", seed: int = 0, folder=None) -> dict:
    """The default run (or ``recipe``) on the logo from ``starts`` starts: each start's R-factor and support overlap,
    how many meet both bounds, whether the start ranked first does, the starts' agreement report and the time."""
    from qora.phase import reconstruct

    intensity, mask, truth = load_logo(folder)
    t0 = time.perf_counter()
    result = reconstruct(intensity, mask=mask, recipe=recipe, starts=starts, backend=backend, seed=seed, keep_all=True)
    seconds = time.perf_counter() - t0
    r = [analysis.amplitude_rfactor(o, intensity, mask) for o in result.objects]
    iou = [analysis.support_iou(s, truth) for s in result.supports]
    ok = [ri <= LOGO_R_BOUND and ii >= LOGO_IOU_BOUND for ri, ii in zip(r, iou)]
    return {"success": float(np.mean(ok)), "succeeded": int(sum(ok)), "starts": starts, "r_factor": r,
            "support_iou": iou, "support_px": [int(s.sum()) for s in result.supports], "best_start": result.best,
            "best_start_succeeded": bool(ok[result.best]), "median_r": float(np.median(r)),
            "median_iou": float(np.median(iou)), "s_per_start": seconds / starts, "seconds": seconds,
            "recipe": result.recipe, "agreement": result.agreement["message"],
            "coherence_width": result.coherence_width, "retunes": len(result.support_log),
            "bound": f"R <= {LOGO_R_BOUND} and IoU >= {LOGO_IOU_BOUND}"}
