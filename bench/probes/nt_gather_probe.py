"""Issue 38, step 2: the bright field's gather (``qora.ssb.bright_runs.gather_runs``) with ordinary and with streaming
(non-temporal) stores, at the data's width and as bytes, on frames in memory, without a device. Ordinary stores read each output line before writing
it (write-allocate): 4.6 GB more host traffic on the ssb-full film; streaming stores do not.

    python bench/probes/nt_gather_probe.py [FRAMES] [BLOCK_FRAMES]

FRAMES 192^2 uint16 frames (the film's 8,741-pixel disk, counts below 200), gathered in blocks of BLOCK_FRAMES
frames into two alternating output blocks, as the stream does (default: 256 MB blocks). Prints each gather's median of
5 and whether they give the same pixels, then each loop's speed on 40 frames in the caches. On the device the same comparison, from the memory-mapped file and with page-locked
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
    data = np.random.default_rng(0).integers(0, 200, (nframes, 1, side, side), dtype=np.uint16)  # counts fit bytes
    block = block_frames or max(1, (256 << 20) // (npix * 2))
    for width in (np.uint16, np.uint8):
        outs = [np.empty((block, 1, npix), width) for _ in range(2)]
        gathered = {}
        for streaming in ((False, True) if STREAMING_STORES else (False,)):
            def gather_all():
                for i, f0 in enumerate(range(0, nframes, block)):
                    assert gather_runs(data, f0, runs, outs[i % 2][:min(block, nframes - f0)], streaming=streaming)
            seconds = median_wall(gather_all, 5, warmup=1)[1]
            gathered[streaming] = np.concatenate([o.copy() for o in outs])
            label = ("streaming stores" if streaming else "ordinary stores") + f", into {np.dtype(width).name}"
            print(f"{label}: {seconds * 1e3:.1f} ms, {nframes * npix * 2 / seconds / 1e9:.2f} GB/s of pixels read",
                  flush=True)
        if len(gathered) == 2:
            print("same pixels:", np.array_equal(gathered[False], gathered[True]), f"({npix} a frame, blocks of {block})")
    cached(data[:40], runs, npix)


def cached(frames, runs, npix):
    """Each gather on 40 frames (6 MB, in the caches) repeated: the loop's own speed, apart from memory."""
    import time

    from qora.ssb.bright_runs import gather_runs

    for width in (np.uint16, np.uint8):
        out = np.empty((len(frames), 1, npix), width)
        gather_runs(frames, 0, runs, out, streaming=False)
        times = []
        for _ in range(7):
            t0 = time.perf_counter()
            for _ in range(50):
                gather_runs(frames, 0, runs, out, streaming=False)
            times.append((time.perf_counter() - t0) / 50)
        print(f"in cache, ordinary stores, into {np.dtype(width).name}: {np.median(times) / len(frames) * 1e6:.2f} us a "
              f"frame", flush=True)


if __name__ == "__main__":
    main(*map(int, sys.argv[1:]))
