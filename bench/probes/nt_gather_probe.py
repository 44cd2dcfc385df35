"""Issue 38, step 2: the bright field's gather (``qora.ssb.bright_runs.gather_runs``) with ordinary and with streaming
(non-temporal) stores, on frames in memory, without a device. Ordinary stores read each output line before writing
it (write-allocate): 4.6 GB more host traffic on the ssb-full film; streaming stores do not.

    python bench/probes/nt_gather_probe.py [FRAMES] [BLOCK_FRAMES]

FRAMES 192^2 uint16 frames (the film's 8,741-pixel disk), gathered in blocks of BLOCK_FRAMES frames into two
alternating output blocks, as the stream does (default: 256 MB blocks). Prints each gather's median of 5 and whether
they give the same pixels. On the device the same comparison, from the memory-mapped file and with page-locked
blocks, is ``bench/probes/prepare_floor.py``.
"""
import sys

import numpy as np


def main(nframes=20000, block_frames=0):
    from qora.bench.common import median_wall
    from qora.ssb.bright_runs import STREAMING_STORES, gather_runs, pixel_runs

    side = 192
    yy, xx = np.mgrid[:side, :side]
    rows, cols = np.nonzero((yy - 96) ** 2 + (xx - 96) ** 2 <= 52.8 ** 2)
    runs = pixel_runs(rows, cols)
    npix = len(rows)
    data = np.random.default_rng(0).integers(0, 1000, (nframes, 1, side, side), dtype=np.uint16)
    block = block_frames or max(1, (256 << 20) // (npix * 2))
    outs = [np.empty((block, 1, npix), np.uint16) for _ in range(2)]
    gathered = {}
    for streaming in ((False, True) if STREAMING_STORES else (False,)):
        def gather_all():
            for i, f0 in enumerate(range(0, nframes, block)):
                gather_runs(data, f0, runs, outs[i % 2][:min(block, nframes - f0)], streaming=streaming)
        seconds = median_wall(gather_all, 5, warmup=1)[1]
        gathered[streaming] = np.concatenate([o.copy() for o in outs])
        label = "streaming stores" if streaming else "ordinary stores"
        print(f"{label}: {seconds * 1e3:.1f} ms, {nframes * npix * 2 / seconds / 1e9:.2f} GB/s of pixels", flush=True)
    if len(gathered) == 2:
        print("same pixels:", np.array_equal(gathered[False], gathered[True]), f"({npix} a frame, blocks of {block})")


if __name__ == "__main__":
    main(*map(int, sys.argv[1:]))
