"""The Bragg crop's final error by model (issue 37): which part of the default's partial-coherence rerun costs it
the error its coherent stage list reaches.

    PYTHONPATH=src python bench/probes/bragg_models_probe.py CROP.npy [BACKEND] [STARTS] [SEED] [RUN ...]

RUN names (each a recipe string built here, run with ``reconstruct``):
  default        the default as a user runs it (its coherence check and rule)
  stages         the default's coherent stage list with the 3D grown ending
  sharp          the rerun the check makes for a 0.4 px fit (sharpened search, psf refined by Richardson-Lucy every 5
                 iterations) with the grown ending
  sharp-fixed    the same with the fitted Gaussian kept (psf_every=0: no Richardson-Lucy)
  sharp-free     the sharpened search, then the refinement and the grown ending without the psf model
  sharp-width    the psf's Gaussian width stepped every 20 iterations (psf_fit=width) instead of Richardson-Lucy
For each, the starts' final errors and, for the best object, its amplitude error against the counts under a
Gaussian blur of 0 and of the width that fits best (model scaled to the measured total), and the Poisson deviance
a voxel at that width. Prints one line per run; with $QORA_SAVE_OBJECTS (a folder) set, saves the best objects there.
"""

import os
import sys
import time

import numpy as np


def runs(width: float = 0.4) -> dict:
    from dataclasses import replace

    from qora.phase.recipe import DEFAULT_RECIPE, Recipe, Stage, partial_coherence_recipe, with_grown_finish

    sharp = partial_coherence_recipe(width)
    search, refine = sharp.stages[:-1], sharp.stages[-1]
    fixed = Recipe(search + (replace(refine, psf_every=0),))
    free = Recipe(search + (Stage("ER", refine.iterations),))
    width_fit = Recipe(search + (replace(refine, psf_every=20, psf_fit="width"),))
    return {"default": None, "stages": with_grown_finish(Recipe.parse(DEFAULT_RECIPE)),
            "sharp": with_grown_finish(sharp), "sharp-fixed": with_grown_finish(fixed),
            "sharp-free": with_grown_finish(free), "sharp-width": with_grown_finish(width_fit)}


def blurred_fit(obj, counts, widths=(0.0, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6)):
    """(width, amplitude error, deviance a voxel) for each width: the object's coherent intensity blurred by a
    Gaussian of that std, scaled to the counts' total."""
    from qora.phase.coherence import blur_deviance, kernel_profile

    obs = np.fft.ifftshift(counts)
    y = np.fft.fftn(obj, norm="ortho")
    coherent = np.abs(y) ** 2
    deviance = blur_deviance(obj, counts, widths=widths)
    out = []
    for width, dev in zip(widths, deviance):
        model = coherent
        if width > 0:
            kernel = kernel_profile(counts.shape, sigma=width, xp=np, dtype=np.float64)
            model = np.maximum(np.fft.irfftn(np.fft.rfftn(coherent) * np.fft.rfftn(kernel), s=counts.shape,
                                                   axes=tuple(range(counts.ndim))), 0)
        model = model * (obs.sum() / model.sum())
        err = np.sqrt(np.sum((np.sqrt(model) - np.sqrt(obs)) ** 2) / obs.sum())
        out.append((width, float(err), float(dev)))
    return out


def main(argv):
    from qora.phase import reconstruct

    counts = np.load(argv[0]).astype(np.float64)
    backend = argv[1] if len(argv) > 1 else "auto"
    starts = int(argv[2]) if len(argv) > 2 else 4
    seed = int(argv[3]) if len(argv) > 3 else 0
    table = runs()
    out = os.environ.get("QORA_SAVE_OBJECTS")
    for name in argv[4:] or list(table):
        t0 = time.perf_counter()
        result = reconstruct(counts, recipe=table[name], starts=starts, seed=seed, backend=backend)
        seconds = time.perf_counter() - t0
        fit = blurred_fit(np.asarray(result.object), counts)
        best = min(fit, key=lambda f: f[2])
        print(f"{name}: final errors {np.round(result.final_errors, 4).tolist()}, best {result.fourier_error:.4f}; "
              f"support {int(result.support.sum())}; {result.choice or ''}; "
              f"{result.agreement['message'] if result.agreement else ''}; unblurred amplitude error "
              f"{fit[0][1]:.4f} (deviance {fit[0][2]:.4f}); best blur {best[0]} px: amplitude error {best[1]:.4f}, "
              f"deviance {best[2]:.4f}; {seconds:.1f} s", flush=True)
        if out:
            np.save(os.path.join(out, f"bragg-{name}-object.npy"), np.asarray(result.object))


if __name__ == "__main__":
    main(sys.argv[1:])
