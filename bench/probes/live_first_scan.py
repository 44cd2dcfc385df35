"""What a live run's first scan on a fresh machine pays during its frames (issue 38: run 1 of five, 93.7k frames/s
into G where runs 2-5 of the same machine gave 142-184k; its gather 1.64 s and row transforms 0.80 s against
0.44-1.08 and 0.09-0.12 s later).

Runs ``qora bench ssb-live`` (its arguments after ``--``) in this process with two watches on every live run:
- CuPy's kernel cache listed when the run's preparation ends (:func:`qora.ssb.live.run._before_the_scan`) and when
  its scan ends (:func:`qora.ssb.live.run._finish`): the files made between are NVRTC compiles paid during the
  frames; their kernels' names are read from the sources CuPy keeps beside them (``CUPY_CACHE_SAVE_CUDA_SOURCE``);
- the bytes this process read from storage (``/proc/self/io`` read_bytes) over the same span: shared libraries
  (cuFFT's kernels are loaded lazily, at first launch) read from a cold disk during the scan show there.

    python3 bench/probes/live_first_scan.py -- --backend cuda --scan 512 --detector 192 --protocol dectris2 \\
        --receivers 4 --senders 2
"""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

os.environ.setdefault("CUPY_CACHE_SAVE_CUDA_SOURCE", "1")
CACHE = Path(os.environ.get("CUPY_CACHE_DIR", Path.home() / ".cupy" / "kernel_cache"))


def _storage_bytes() -> int:
    with open("/proc/self/io") as f:
        return int(next(line for line in f if line.startswith("read_bytes")).split()[1])


def _listing() -> set[str]:
    return {p.name for p in CACHE.glob("*")} if CACHE.is_dir() else set()


def _jit_cache() -> tuple[int, int]:
    """Files and bytes in the driver's PTX JIT cache (kernels shipped without the device's SASS compile there)."""
    files = [p for p in (Path.home() / ".nv" / "ComputeCache").rglob("*") if p.is_file()]
    return len(files), sum(p.stat().st_size for p in files)


def _cuda_libraries() -> dict[str, int]:
    """The CUDA libraries mapped into this process, with their sizes (bytes)."""
    with open("/proc/self/maps") as f:
        paths = {line.split()[-1] for line in f if ".so" in line and "/" in line}
    return {p: os.path.getsize(p) for p in sorted(paths)
            if re.search(r"lib(cufft|cublas|cudart|nvrtc|nvJitLink|cusparse|curand|cusolver)", p)}


def _kernel_names(name: str) -> list[str]:
    """The __global__ functions of a cached module's saved source (CuPy saves it as the binary's name + .cu)."""
    source = CACHE / (name + ".cu")
    if not source.exists():
        return []
    text = source.read_text(errors="replace")
    names = re.findall(r"__global__\s+void\s+(\w+)", text) or [text[:300].replace("\n", " ")]
    # the index width CuPy chose (issue 38): CArray<T, ndim, c_contiguous, 32-bit> of the kernel's parameters
    return names + sorted(set(re.findall(r"CArray<[^>]*>", text)))[:6]


def main() -> None:
    import qora.ssb.live.run as live_run

    marks, shown = {}, []
    before, finish = live_run._before_the_scan, live_run._finish

    def prepared(*args, **kwargs):
        seconds = before(*args, **kwargs)
        marks.update(files=_listing(), bytes=_storage_bytes(), jit=_jit_cache(), t=time.perf_counter())
        if not shown:
            shown.append(True)
            for path, size in _cuda_libraries().items():
                print(f"[probe] mapped before the scan: {path} {size / 1e6:.0f} MB", flush=True)
        return seconds

    def finished(source, live, *args, **kwargs):
        files, read = _listing(), _storage_bytes()
        if marks:
            new = sorted(files - marks["files"])
            compiled = [n for n in new if not n.endswith(".cu")]
            jit = _jit_cache()
            print(f"[probe] scan of {time.perf_counter() - marks['t']:.2f} s: {len(compiled)} modules compiled during "
                  f"it, {(read - marks['bytes']) / 1e6:.1f} MB read from storage, the driver's JIT cache "
                  f"{marks['jit'][0]} -> {jit[0]} files ({(jit[1] - marks['jit'][1]) / 1e6:+.1f} MB); timings "
                  + ", ".join(f"{k} {v:.3f}" for k, v in live.timings.items() if isinstance(v, float)), flush=True)
            for name in compiled:
                print(f"[probe]   compiled during the scan: {name} {_kernel_names(name)}", flush=True)
        out = finish(source, live, *args, **kwargs)
        after = sorted(n for n in _listing() - files if not n.endswith(".cu"))
        print(f"[probe] after the last frame (last rows, slow axis, final fit and image): {len(after)} modules "
              "compiled", flush=True)
        for name in after:
            print(f"[probe]   compiled after the last frame: {name} {_kernel_names(name)}", flush=True)
        marks.clear()
        return out

    live_run._before_the_scan, live_run._finish = prepared, finished
    from qora.__main__ import main as qora_main

    args = sys.argv[sys.argv.index("--") + 1:] if "--" in sys.argv else sys.argv[1:]
    group = []  # ``qora bench``'s own option, before the command
    if "--out" in args:
        at = args.index("--out")
        group, args = args[at:at + 2], args[:at] + args[at + 2:]
    qora_main(["bench"] + group + ["ssb-live"] + args)


if __name__ == "__main__":
    main()
