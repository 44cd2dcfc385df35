"""The holo Pipeline's host copies (issue 43: from a pageable array 1.33x its model at 256^3 on an H100, ~5 ms above
its page-locked buffer's run) against the ways a pageable array can reach the device and come back:

    python bench/probes/host_staging.py [MB ...]      (default: 51.4 67.1 205.5 536.9, the 256^3 and 512^3 stacks
                                                       and volumes)

For each size, medians of 5 wall times (ms) after one untimed, each ending with the copy on the host done:
- in, through the buffer: the threads' copy into the page-locked buffer, then its upload (the Pipeline today);
- in, registered: cudaHostRegister of the array where it lies, its upload, cudaHostUnregister;
- in, pageable: cudaMemcpy straight from the pageable array (the driver's own staging);
- out, through the buffer: the download into the page-locked buffer, then the threads' copy into an array whose
  pages are mapped (the Pipeline today, its touch made while the device computes and not timed here);
- out, in chunks: the download in 8 parts, each part copied out while the next comes down;
- out, registered: the mapped array registered, the download into it, unregistered;
- out, pageable: cudaMemcpy straight into the mapped pageable array.
Also the registration and unregistration alone, and both buffers' copies by non-temporal stores (Numba, 32-bit
MOVNTI: qora.backend.streaming): the copy into the input buffer leaves its lines dirty in the host's caches, which the
upload may wait on (in_buffer_nt, out_buffer_nt).
"""

from __future__ import annotations

import sys

import numpy as np


def _median_ms(fn, repeats=5):
    from qora.bench.common import median_wall

    return 1e3 * median_wall(fn, repeats, warmup=1)[1]


def _cases(cp, nbytes, pool):
    from qora.backend.host import copy_parts, touched_empty

    rt = cp.cuda.runtime
    count = nbytes // 4
    rows = 64
    shape = (rows, count // rows)
    host = touched_empty(shape, np.float32, pool=pool)
    host[...] = 1.0
    out = touched_empty(shape, np.float32, pool=pool)
    pinned = np.frombuffer(cp.cuda.alloc_pinned_memory(host.nbytes), np.float32, host.size).reshape(shape)
    dev = cp.empty(shape, cp.float32)
    stream = cp.cuda.Stream(non_blocking=True)
    size = host.nbytes

    def upload(src):
        rt.memcpyAsync(dev.data.ptr, src.ctypes.data, size, 1, stream.ptr)
        stream.synchronize()

    def download(dst):
        rt.memcpyAsync(dst.ctypes.data, dev.data.ptr, size, 2, stream.ptr)
        stream.synchronize()

    def registered(array, move):
        rt.hostRegister(array.ctypes.data, size, 0)
        move(array)
        rt.hostUnregister(array.ctypes.data)

    def chunks_out(parts=8):
        events = []
        step = rows // parts
        for k in range(parts):
            lo = k * step
            rt.memcpyAsync(pinned[lo].ctypes.data, dev[lo].data.ptr, step * pinned[0].nbytes, 2, stream.ptr)
            e = cp.cuda.Event()
            e.record(stream)
            events.append(e)
        for k, e in enumerate(events):
            e.synchronize()
            lo = k * step
            copy_parts(out[lo:lo + step], pinned[lo:lo + step], pool=pool)

    from qora.backend.streaming import copy_streaming as nt_copy

    rows_ms = {
        "in_buffer": _median_ms(lambda: (copy_parts(pinned, host, pool=pool), upload(pinned))),
        "in_buffer_copy_only": _median_ms(lambda: copy_parts(pinned, host, pool=pool)),
        "in_pinned_upload_only": _median_ms(lambda: upload(pinned)),
        "in_registered": _median_ms(lambda: registered(host, upload)),
        "in_pageable": _median_ms(lambda: upload(host)),
        "out_buffer": _median_ms(lambda: (download(pinned), copy_parts(out, pinned, pool=pool))),
        "out_pinned_download_only": _median_ms(lambda: download(pinned)),
        "out_chunks8": _median_ms(chunks_out),
        "out_registered": _median_ms(lambda: registered(out, download)),
        "out_pageable": _median_ms(lambda: download(out)),
        "register_only": _median_ms(lambda: registered(host, lambda a: None)),
        "in_buffer_nt": _median_ms(lambda: (nt_copy(pinned, host), upload(pinned))),
        "in_buffer_nt_copy_only": _median_ms(lambda: nt_copy(pinned, host)),
        "out_buffer_nt": _median_ms(lambda: (download(pinned), nt_copy(out, pinned))),
    }
    ok = np.array_equal(out, host)
    return rows_ms, ok


def main(argv):
    import cupy as cp
    from concurrent.futures import ThreadPoolExecutor

    from qora.backend.host import num_threads

    sizes = [float(a) for a in argv] or [51.4, 67.1, 205.5, 536.9]
    print(f"host threads {num_threads()}; {cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}")
    with ThreadPoolExecutor(num_threads()) as pool:
        for mb in sizes:
            nbytes = int(mb * 1e6) // 256 * 256
            rows_ms, ok = _cases(cp, nbytes, pool)
            print(f"{mb:7.1f} MB: " + ", ".join(f"{k} {v:.2f}" for k, v in rows_ms.items()) + f"; data ok {ok}")


if __name__ == "__main__":
    main(sys.argv[1:])
