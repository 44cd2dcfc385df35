"""Step 2's bright field read by the device straight from the memory-mapped file (issue 38: step 2 at 0.225-0.234 s on
H100 hosts against the seed's 0.17 s, bound by the host's memory traffic; docs/ssb-performance.md, sections 27, 29).

    python bench/probes/mapped_gather.py /tmp/qora-ssb-full

The host path moves ~20 GB through the host's memory (the lines read, the page-locked blocks written, read for
ownership and read again by the copy engine). Here the file's pages are registered with CUDA (cudaHostRegister,
read-only and mapped), and a kernel gathers the bright-field pixels over PCIe into device memory: the host's memory
sees only the 6.35 GB of lines the kernel touches, once. Prints the registration's time (paid once per file, while
the pages stay resident), the gather's (median of 3, CUDA events), its rate in GB/s of pixels and of PCIe lines,
the unregistration's, and a check of 64 frames against the host's gather. Nothing here is wired into qora.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

_SOURCE = r"""
extern "C" __global__ void gather_mapped(const unsigned short* __restrict__ frames, const int* __restrict__ index,
                                         unsigned short* __restrict__ out, long long nframes, int frame_px, int nbf)
{
    // one block a frame (grid-strided over frames), its threads along the bright field's pixels: a warp's
    // pixels are mostly one run of a detector row, so its reads are a few contiguous PCIe requests
    for (long long f = blockIdx.x; f < nframes; f += gridDim.x) {
        const unsigned short* frame = frames + f * (long long)frame_px;
        unsigned short* dst = out + f * (long long)nbf;
        for (int j = threadIdx.x; j < nbf; j += blockDim.x)
            dst[j] = frame[index[j]];
    }
}
"""

REGISTER_MAPPED, REGISTER_READ_ONLY = 0x02, 0x08  # cudaHostRegister flags
CAN_USE_HOST_POINTER, HOST_REGISTER_READ_ONLY_SUPPORTED = 91, 113  # cudaDeviceAttr values (CuPy names neither)


def _register(cp, data):
    """(host pointer, bytes, seconds) of the page-aligned span that holds ``data``, registered with CUDA."""
    page = 4096
    start = data.ctypes.data // page * page  # numpy maps from an aligned offset at or below the array's start
    end = -(-(data.ctypes.data + data.nbytes) // page) * page
    t0 = time.perf_counter()
    cp.cuda.runtime.hostRegister(start, end - start, REGISTER_MAPPED | REGISTER_READ_ONLY)
    return start, end - start, time.perf_counter() - t0


def main(directory: str) -> None:
    import cupy as cp

    from qora.bench.ssb_full import ALPHA, KV, dataset
    from qora.ssb import Session, fit_detector

    path, meta = dataset(Path(directory))
    data = np.load(path, mmap_mode="r")
    session = Session(data, kv=KV, alpha_mrad=ALPHA, scan_step=meta["scan_step_a"],
                      detector=fit_detector(data, ALPHA, rows=32), backend="cuda")
    index = np.asarray(session.bf_index, np.int32)
    del session
    cp.get_default_memory_pool().free_all_blocks()
    sy, sx, dy, dx = data.shape
    nframes, nbf = sy * sx, index.size
    useful = nframes * nbf * 2
    cols = index % dx
    rows = index // dx
    lines = 0
    for r in np.unique(rows):
        c = cols[rows == r]
        lines += ((r * dx + c.max()) * 2 // 64) - ((r * dx + c.min()) * 2 // 64) + 1
    print(f"{path.name}: {nbf} bright-field pixels, {useful / 1e9:.2f} GB of them, {nframes * lines * 64 / 1e9:.2f} GB "
          f"of 64-byte lines", flush=True)
    attribute = cp.cuda.runtime.deviceGetAttribute
    print(f"read-only registration supported: {bool(attribute(HOST_REGISTER_READ_ONLY_SUPPORTED, 0))}, host pointers "
          f"usable on the device: {bool(attribute(CAN_USE_HOST_POINTER, 0))}", flush=True)
    try:
        host, nbytes, t_reg = _register(cp, data)
    except Exception as err:  # noqa: BLE001 - a probe: say why and stop
        print(f"cudaHostRegister of the file's mapping failed: {err!r}", flush=True)
        return
    print(f"registered {nbytes / 1e9:.2f} GB of the mapping in {t_reg:.3f} s", flush=True)
    try:
        frames = np.uint64(data.ctypes.data)  # under unified addressing the registered pointer is the device's too
        kernel = cp.RawKernel(_SOURCE, "gather_mapped")
        out = cp.empty(nframes * nbf, cp.uint16)
        index_d = cp.asarray(index)
        sms = cp.cuda.Device().attributes["MultiProcessorCount"]
        grid = (sms * 16,)
        args = (frames, index_d, out, np.int64(nframes), np.int32(dy * dx), np.int32(nbf))
        times = []
        for _ in range(4):
            start, stop = cp.cuda.Event(), cp.cuda.Event()
            start.record()
            kernel(grid, (256,), args)
            stop.record()
            stop.synchronize()
            times.append(cp.cuda.get_elapsed_time(start, stop) / 1e3)
        t = float(np.median(times[1:]))
        print(f"mapped gather: {t:.3f} s (runs {', '.join(f'{x:.3f}' for x in times)}; the first one cold), "
              f"{useful / t / 1e9:.1f} GB/s of pixels, {nframes * lines * 64 / t / 1e9:.1f} GB/s of lines", flush=True)
        pick = np.random.default_rng(0).choice(nframes, 64, replace=False)
        flat = data.reshape(nframes, dy * dx)
        expect = np.stack([flat[f][index] for f in pick])
        got = out.reshape(nframes, nbf)[cp.asarray(pick)].get()
        print(f"64 frames against the host's gather: {'equal' if np.array_equal(got, expect) else 'DIFFERENT'}",
              flush=True)
    finally:
        t0 = time.perf_counter()
        cp.cuda.runtime.hostUnregister(host)
        print(f"unregistered in {time.perf_counter() - t0:.3f} s", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
