"""The bitshuffle-LZ4 decode kernel alone (issue 25, qora/ssb/kernels/bslz4.cu): frames/s of
``bslz4_gather`` at batch sizes 256 to 4096 frames of the bench's 192^2 uint16 pool (a Poisson disk,
a sparse dark field; ~11.4 kB a frame compressed), timed with CUDA events (the kernel only, the
blobs already on the device), beside the copy of the batch's blobs from page-locked memory and the
host's share (pack into page-locked memory, the block table). Also one row per CTA size
(``frames_per_cta``). On the GPU machine:

    PYTHONPATH=src python bench/probes/bslz4_device_probe.py [--detector 192] [--repeats 20]

Prints one JSON line per batch size (docs/ssb-performance.md, "Live: the frames decoded on the device").
"""
import argparse
import json
import time

import numpy as np

from qora.backend import resolve
from qora.bench.ssb_live import _pool
from qora.ssb import kernels
from qora.ssb.live import bslz4
from qora.ssb.live.bslz4_batch import CompressedFrames, block_table, slot_map


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--detector", type=int, default=192)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    be = resolve("cuda")
    xp = be.xp
    det = args.detector
    pool = _pool(det, 256)
    blobs = [bslz4.compress(f) for f in pool]
    count = det * det
    yy, xx = np.indices((det, det))
    gathered = np.flatnonzero(np.hypot(yy - det / 2, xx - det / 2) < det * 56 / 192)  # the disk and a margin
    slot = xp.asarray(slot_map(gathered, count))
    sums = xp.zeros(count, np.uint64)
    for n in (256, 512, 1024, 2048, 4096):
        batch = CompressedFrames(np.arange(n), [blobs[i % len(blobs)] for i in range(n)], np.uint16, (det, det))
        pinned = be.host_empty(batch.nbytes, np.uint8)
        t = time.perf_counter()
        blob, offsets = batch.pack(into=pinned)
        table = block_table(blob, offsets, dtype=np.uint16, count=count)
        host_s = time.perf_counter() - t
        d_blob = xp.asarray(blob)
        starts, sizes, tails = xp.asarray(table.starts), xp.asarray(table.sizes), xp.asarray(table.tails)
        out = xp.empty((n, len(gathered)), np.float32)
        status = xp.zeros(n, np.int32)
        row = {"frames": n, "compressed_bytes_per_frame": batch.nbytes / n, "gathered": len(gathered),
               "host_pack_and_table_us_per_frame": host_s / n * 1e6}
        for per_cta in (8, 32, 128):
            def launch():
                kernels.bslz4_gather(blob=d_blob, starts=starts, sizes=sizes, tails=tails, slot=slot,
                                     block_bytes=table.block_bytes, whole=table.whole, count=count, itemsize=2,
                                     out=out, sums=sums, status=status, frames_per_cta=per_cta)
            launch()
            be.synchronize()
            with be.timer() as timer:
                for _ in range(args.repeats):
                    launch()
            seconds = timer.ms / 1e3 / args.repeats
            row[f"kernel_fps_cta{per_cta}"] = n / seconds
            row[f"kernel_compressed_GBps_cta{per_cta}"] = batch.nbytes / seconds / 1e9
        assert not int(status.sum()), "a block failed to decode"
        np.testing.assert_array_equal(out[:len(pool)].get(), pool.reshape(len(pool), -1)[:, gathered][:n])
        with be.timer() as timer:
            for _ in range(args.repeats):
                d_blob.set(blob)
        row["h2d_pinned_fps"] = n / (timer.ms / 1e3 / args.repeats)
        print(json.dumps({k: (round(v, 1) if isinstance(v, float) else v) for k, v in row.items()}), flush=True)


if __name__ == "__main__":
    main()
