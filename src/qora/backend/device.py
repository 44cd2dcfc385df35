"""Facts about the device a backend runs on, and its memory use.

:func:`device_facts` reads the device attributes (name, multiprocessors, clock,
L2 size, memory clock and bus width, hence the peak DRAM bandwidth) and, with
``measure=True``, times a large device-to-device copy: the bandwidth that
benchmarks use as their floor. :class:`PeakMemory` measures the high-water mark
of memory use of a block of code (CuPy's pool on the GPU, ``tracemalloc`` on the
host, which sees NumPy's allocations).
"""

from __future__ import annotations

import platform
import tracemalloc
from dataclasses import asdict, dataclass, field

from qora.backend import host
from qora.backend.host import cpu_count

__all__ = ["DeviceFacts", "device_facts", "copy_bandwidth", "PeakMemory", "PeakPoolUse", "pool_stats"]

# cudaDeviceAttr values (stable since CUDA 5); CUDA 13 dropped clockRate and
# memoryClockRate from cudaDeviceProp, so we read attributes, not properties.
_ATTR = {
    "clock_khz": 13,
    "sm_count": 16,
    "memory_clock_khz": 36,
    "bus_width_bits": 37,
    "l2_bytes": 38,
    "cc_major": 75,
    "cc_minor": 76,
}


@dataclass
class DeviceFacts:
    """What a benchmark records about the machine.

    Bandwidths are in GB/s (1e9 bytes per second), counting bytes read plus
    bytes written; ``peak_dram_gbs`` is 2 x memory clock x bus width / 8 (double
    data rate), the datasheet-style number the attributes imply.
    """

    backend: str
    name: str
    sm_count: int = 0
    clock_mhz: float = 0.0
    l2_bytes: int = 0
    memory_clock_mhz: float = 0.0
    bus_width_bits: int = 0
    peak_dram_gbs: float = 0.0
    total_memory_bytes: int = 0
    compute_capability: str = ""
    cpu_cores: int = 0
    copy_gbs: float | None = None
    copy_detail: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return asdict(self)


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def device_facts(backend, *, measure: bool = False) -> DeviceFacts:
    """Facts about ``backend``'s device; ``measure=True`` adds the measured copy bandwidth."""
    if not backend.is_cuda:
        facts = DeviceFacts(backend="cpu", name=_cpu_name(), cpu_cores=cpu_count())
        if measure:
            facts.copy_gbs, facts.copy_detail = copy_bandwidth(backend)
        return facts
    cupy = backend.xp
    rt = cupy.cuda.runtime
    dev = rt.getDevice()
    attr = {k: rt.deviceGetAttribute(v, dev) for k, v in _ATTR.items()}
    props = rt.getDeviceProperties(dev)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    facts = DeviceFacts(
        backend="cuda",
        name=name,
        sm_count=int(attr["sm_count"]),
        clock_mhz=attr["clock_khz"] / 1e3,
        l2_bytes=int(attr["l2_bytes"]),
        memory_clock_mhz=attr["memory_clock_khz"] / 1e3,
        bus_width_bits=int(attr["bus_width_bits"]),
        peak_dram_gbs=2.0 * attr["memory_clock_khz"] * 1e3 * attr["bus_width_bits"] / 8 / 1e9,
        total_memory_bytes=int(props["totalGlobalMem"]),
        compute_capability=f"{attr['cc_major']}.{attr['cc_minor']}",
        cpu_cores=cpu_count(),
    )
    if measure:
        facts.copy_gbs, facts.copy_detail = copy_bandwidth(backend)
    return facts


def copy_bandwidth(backend, *, nbytes: int | None = None, repeats: int = 20) -> tuple[float, dict]:
    """Measured copy bandwidth in GB/s (bytes read + written), and the detail per method.

    On the GPU, two methods over ``nbytes`` (default 2 GiB, far past the L2):
    ``cudaMemcpyAsync`` device to device and the 16-byte-per-thread copy kernel of
    ``backend/kernels/stream.cu``; the floor is the faster of the two, median of
    ``repeats`` after a warm-up. On the CPU, ``numpy.copyto`` over 512 MiB.
    """
    import numpy as np

    if not backend.is_cuda:
        import time

        n = (nbytes or 512 * 2**20) // 8
        a = np.ones(n)
        b = np.empty_like(a)
        times = []
        for _ in range(max(3, repeats // 4)):
            t0 = time.perf_counter()
            np.copyto(b, a)
            times.append(time.perf_counter() - t0)
        gbs = 2 * a.nbytes / float(np.median(times)) / 1e9
        return gbs, {"numpy_copyto": gbs, "bytes": int(a.nbytes)}

    from qora.backend.kernels import get_kernel

    cupy = backend.xp
    nbytes = nbytes or 2 * 2**30
    n4 = nbytes // 16
    a = cupy.ones(n4 * 4, dtype=cupy.float32)
    b = cupy.empty_like(a)
    stream = cupy.cuda.get_current_stream()
    kernel = get_kernel("qora.backend", "stream.cu", "copy_float4")
    sms = cupy.cuda.runtime.deviceGetAttribute(_ATTR["sm_count"], cupy.cuda.runtime.getDevice())

    def memcpy():
        cupy.cuda.runtime.memcpyAsync(b.data.ptr, a.data.ptr, a.nbytes, 3, stream.ptr)

    def kern():
        kernel((sms * 8,), (512,), (a, b, cupy.int64(n4)))

    detail = {"bytes": int(a.nbytes)}
    for label, fn in (("memcpy", memcpy), ("kernel_float4", kern)):
        fn()
        times = []
        for _ in range(repeats):
            with backend.timer() as t:
                fn()
            times.append(t.ms)
        detail[label] = 2 * a.nbytes / (float(np.median(times)) * 1e-3) / 1e9
    if not bool((b[:: max(1, b.size // 4096)] == 1).all()):
        raise RuntimeError("copy bandwidth measurement: the copy did not write its output")
    del a, b
    cupy.get_default_memory_pool().free_all_blocks()
    return max(detail["memcpy"], detail["kernel_float4"]), detail


def pool_stats(backend) -> dict:
    """Bytes held and used by CuPy's default pool (zeros on the CPU)."""
    if not backend.is_cuda:
        return {"total_bytes": 0, "used_bytes": 0}
    pool = backend.xp.get_default_memory_pool()
    return {"total_bytes": int(pool.total_bytes()), "used_bytes": int(pool.used_bytes())}


class PeakMemory:
    """High-water mark of the memory a ``with`` block adds, in bytes (``.peak_bytes``).

    Memory already held on entry is not counted. GPU: CuPy's default pool is
    emptied of free blocks on entry; as the pool only grows, its growth by the
    exit is the peak the block held (cuFFT work areas included, since CuPy
    allocates them from the pool). CPU: ``tracemalloc``'s peak, which
    counts NumPy's array buffers.
    """

    def __init__(self, backend) -> None:
        self.backend = backend
        self.peak_bytes = 0

    def __enter__(self) -> "PeakMemory":
        if self.backend.is_cuda:
            self.backend.synchronize()
            self._pool = self.backend.xp.get_default_memory_pool()
            self._pool.free_all_blocks()
            self._base = self._pool.total_bytes()
        else:
            self._started = not tracemalloc.is_tracing()
            if self._started:
                tracemalloc.start()
            tracemalloc.reset_peak()
            self._base = tracemalloc.get_traced_memory()[0]
        return self

    def __exit__(self, *exc) -> None:
        if self.backend.is_cuda:
            self.backend.synchronize()
            self.peak_bytes = int(self._pool.total_bytes() - self._base)
        else:
            self.peak_bytes = int(tracemalloc.get_traced_memory()[1] - self._base)
            if self._started:
                tracemalloc.stop()


class PeakPoolUse:
    """High-water mark of the bytes in use in CuPy's default pool during a ``with`` block
    (``.peak_bytes``, counting what was in use on entry), exact: a memory hook sees every
    allocation and free, so steps that free their blocks in between do not hide a peak. Zero on
    the CPU."""

    def __init__(self, backend) -> None:
        self.backend = backend
        self.peak_bytes = 0
        self._hook = None

    def __enter__(self) -> "PeakPoolUse":
        if not self.backend.is_cuda:
            return self
        cupy = self.backend.xp
        self.backend.synchronize()
        tracker = self
        tracker._used = int(cupy.get_default_memory_pool().used_bytes())
        tracker.peak_bytes = tracker._used

        class _Hook(cupy.cuda.MemoryHook):
            name = "qora_peak_pool_use"

            def malloc_postprocess(self, **kw):
                tracker._used += int(kw["mem_size"])
                tracker.peak_bytes = max(tracker.peak_bytes, tracker._used)

            def free_postprocess(self, **kw):
                tracker._used -= int(kw["mem_size"])

        self._hook = _Hook()
        self._hook.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self._hook is not None:
            self.backend.synchronize()
            self._hook.__exit__(*exc)
            self._hook = None


def free_memory(backend) -> float | None:
    """Bytes a computation on ``backend`` can still allocate: on the GPU the device's free memory plus
    the free blocks CuPy's pool holds (it reuses them); on the CPU the host's available memory. None
    when it cannot be told (then nothing should be refused on its account)."""
    if not backend.is_cuda:
        return host.available_memory()  # through the module: tests replace it there
    try:
        xp = backend.xp
        return float(xp.cuda.Device().mem_info[0]) + float(xp.get_default_memory_pool().free_bytes())
    except Exception:  # noqa: BLE001 - no figure: nothing is checked
        return None
