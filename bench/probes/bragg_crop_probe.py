"""The 34-ID-C Bragg scan (scan 54: 201 rocking frames of 256^2 counts) cropped to 128^3 about its brightest voxel,
reconstructed by the default and by other recipes (issue 37: the default's final error against cohere's recipe).

The crop: the raw frames (dark 0.017 counts a pixel on average: not subtracted; the whitefield is of the 512^2
detector and the frames' region of it is not recorded: not applied), the 128^3 box centred on the brightest voxel
(frame 99, pixel (126, 127)), which holds 98.3% of the scan's 4.6e7 counts.

    PYTHONPATH=src python bench/probes/bragg_crop_probe.py (SCAN.tar.xz | CROP.npy) [BACKEND] [STARTS] [RECIPE ...]

RECIPE "default" is the default as a user runs it, "cohere" cohere's example recipe (:data:`COHERE`); anything
else a recipe string or name. Prints, per recipe, each
start's final Fourier error, the best's, its support size, the coherence check's width and the starts' agreement.
"""

import sys
import tarfile
import tempfile
import time
from pathlib import Path

import numpy as np

SIDE = 128
# cohere's example recipe in our notation: 3 x (ER 20, HIO 180) then ER 20, shrinkwrap every iteration at 0.1 of the
# blurred maximum with a 1 px blur (bench/peers/phase_cohere.py's PARAMS)
_SW = "sw=1, sigma=1, sigma_min=1, threshold=0.1"
COHERE = " ".join([f"ER({_SW})**20 HIO({_SW})**180"] * 3 + [f"ER({_SW})**20"])


def named(recipe: str):
    """A recipe by a short name: "default" (None: the default as a user runs it, with its coherence check),
    "cohere", "stages" (the default's stage list alone), "stages-T" (that list with the shrinkwrap threshold T),
    "stages-rms-T" (with PyNX's rms rule at T), else the recipe itself."""
    from qora.phase.recipe import DEFAULT_RECIPE

    if recipe == "default":
        return None
    if recipe == "cohere":
        return COHERE
    if recipe.startswith("stages"):
        rest = recipe[len("stages"):].lstrip("-")
        rule = ""  # the maximum (the default statistic)
        if rest.startswith("rms-"):
            rule, rest = ", stat=rms", rest[4:]
        return DEFAULT_RECIPE.replace("threshold=0.25", f"threshold={rest or '0.25'}{rule}")
    return recipe


def load_crop(path) -> np.ndarray:
    path = Path(path)
    if path.suffix == ".npy":
        return np.load(path).astype(np.float64)
    import tifffile

    with tempfile.TemporaryDirectory() as tmp, tarfile.open(path) as tar:
        tar.extractall(tmp, filter="data")
        frames = sorted(Path(tmp).glob("*_S0054/*.tif"))
        stack = np.stack([tifffile.imread(f) for f in frames]).astype(np.float64)
    peak = np.unravel_index(int(stack.argmax()), stack.shape)
    box = tuple(slice(p - SIDE // 2, p + SIDE // 2) for p in peak)
    return stack[box]


def main(argv):
    from qora.phase import reconstruct

    counts = load_crop(argv[0])
    backend = argv[1] if len(argv) > 1 else "auto"
    starts = int(argv[2]) if len(argv) > 2 else 4
    recipes = argv[3:] or ["default"]
    print(f"crop {counts.shape}, {counts.sum():.3e} counts, peak at {np.unravel_index(int(counts.argmax()), counts.shape)}",
          flush=True)
    for recipe in recipes:
        t0 = time.perf_counter()
        given = named(recipe)
        result = reconstruct(counts, recipe=given, starts=starts, backend=backend)
        seconds = time.perf_counter() - t0
        print(f"{recipe}: ran {result.recipe}{' (' + result.choice + ')' if result.choice else ''}; final errors "
              f"{np.round(result.final_errors, 4).tolist()}, best {result.fourier_error:.4f}; support "
              f"{int(result.support.sum())} voxels; coherence width {result.coherence_width}; "
              f"{len(result.support_log)} guarded shrinkwraps; {result.agreement['message'] if result.agreement else ''}; "
              f"{seconds:.1f} s", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
