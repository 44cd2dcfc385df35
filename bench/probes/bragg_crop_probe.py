"""The 34-ID-C Bragg scan (scan 54: 201 rocking frames of 256^2 counts) cropped to 128^3 about its brightest voxel,
reconstructed by the default and by other recipes (issue 37: the default's final error against cohere's recipe).

The crop: the raw frames (dark 0.017 counts a pixel on average: not subtracted; the whitefield is of the 512^2
detector and the frames' region of it is not recorded: not applied), the 128^3 box centred on the brightest voxel
(frame 99, pixel (126, 127)), which holds 98.3% of the scan's 4.6e7 counts.

    PYTHONPATH=src python bench/probes/bragg_crop_probe.py (SCAN.tar.xz | CROP.npy) [BACKEND] [STARTS] [RECIPE ...]

With QORA_BRAGG_PREP=cohere the crop is cohere's own preparation of the scan (:func:`cohere_prepared`).

RECIPE "default" is the default as a user runs it, "cohere" cohere's example recipe (:data:`COHERE`); anything
else a recipe string or name. Prints, per recipe, each
start's final Fourier error, the best's, its support size, the coherence check's width and the starts' agreement.
"""

import os
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


# cohere's own preparation of this scan (cohere-ui, example_workspace/scan_54/conf: config_prep's roi [0, 256, 0,
# 256] of the 512^2 detector, config_data's intensity_threshold 2 and adjust_dimensions [-60, -60, -60, -60, -30,
# -30]; its 34idcTIM2 detector correction: frame / whitefield * 1e5 with the whitefield's pixels under 100 made
# 1e20, the darkfield's pixels above 1 zeroed), then each side padded to the next 2-3-5 smooth even size and the
# brightest voxel moved to the centre, as cohere's standard preprocessing does
COHERE_ROI = (slice(0, 256), slice(0, 256))
COHERE_CROP = ((60, 60), (60, 60), (30, 30))  # voxels cut from each end of (row, column, frame)
COHERE_THRESHOLD = 2.0


def _smooth_even(n: int) -> int:
    m = n + (n % 2)
    while True:
        k = m
        for f in (2, 3, 5):
            while k % f == 0:
                k //= f
        if k == 1:
            return m
        m += 2


def cohere_prepared(stack, dark, white) -> np.ndarray:
    """``stack`` (row, column, frame) as cohere prepares it for phasing (the constants above)."""
    white = np.where(white < 100, 1e20, white)[COHERE_ROI]
    frames = stack / white[..., None] * 1e5
    frames = np.where((dark[COHERE_ROI] > 1)[..., None], 0.0, frames)
    frames = np.where(np.isfinite(frames) & (frames >= COHERE_THRESHOLD), frames, 0.0)
    frames = frames[tuple(slice(a, n - b) for (a, b), n in zip(COHERE_CROP, frames.shape))]
    padded = np.zeros(tuple(_smooth_even(n) for n in frames.shape))
    padded[tuple(slice(0, n) for n in frames.shape)] = frames
    peak = np.unravel_index(int(padded.argmax()), padded.shape)
    return np.roll(padded, [n // 2 - p for n, p in zip(padded.shape, peak)], axis=(0, 1, 2))


def load_crop(path, prep: str = "raw") -> np.ndarray:
    """The crop from the scan's archive (or a saved .npy): ``prep`` "raw" the raw frames' 128^3 box about the
    brightest voxel; "cohere" cohere's own preparation (:func:`cohere_prepared`)."""
    path = Path(path)
    if path.suffix == ".npy":
        return np.load(path).astype(np.float64)
    import tifffile

    with tempfile.TemporaryDirectory() as tmp, tarfile.open(path) as tar:
        tar.extractall(tmp, filter="data")
        frames = sorted(Path(tmp).glob("*_S0054/*.tif"))
        stack = np.stack([tifffile.imread(f) for f in frames], axis=-1).astype(np.float64)  # (row, column, frame)
        dark, white = (tifffile.imread(next(Path(tmp).rglob(n))).astype(np.float64) for n in ("dark.tif",
                                                                                             "whitefield.tif"))
    if prep == "cohere":
        return cohere_prepared(stack, dark, white)
    stack = np.moveaxis(stack, -1, 0)  # (frame, row, column): the raw crop's order
    peak = np.unravel_index(int(stack.argmax()), stack.shape)
    box = tuple(slice(p - SIDE // 2, p + SIDE // 2) for p in peak)
    return stack[box]


def main(argv):
    from qora.phase import reconstruct

    counts = load_crop(argv[0], os.environ.get("QORA_BRAGG_PREP", "raw"))
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
