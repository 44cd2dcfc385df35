"""The phase kernels' launchers (qora.phase.kernels): one per kernel of phase.cu, envelope.cu and support.cu, each with its
reference named, and none of the engines launching a kernel by hand (issue 41: phase launched from dicts of
positional tuples). Runs without a GPU."""

import re
from importlib.resources import files
from pathlib import Path

from qora.phase import kernels as K

HELPERS = {"kernel", "per_start_grid", "flat_grid", "get_kernel", "multiprocessors"}


def _kernels(name: str) -> set:
    source = files("qora.phase").joinpath("kernels", name).read_text()
    return set(re.findall(r"__global__\s+void\s+(?:__launch_bounds__\([^)]*\)\s+)?(\w+)\s*\(", source))


def test_every_kernel_has_one_launcher_with_its_reference():
    names = _kernels("phase.cu") | _kernels("envelope.cu") | _kernels("support.cu")
    launchers = {n for n in dir(K) if not n.startswith("_") and callable(getattr(K, n))} - HELPERS
    assert len(names) == 12 and names == launchers
    for name in names:
        assert "Reference:" in getattr(K, name).__doc__, name


def test_no_engine_launches_a_kernel_by_hand():
    package = Path(K.__file__).parents[1]
    for module in ("cuda.py", "cuda_base.py", "envelope_cuda.py"):
        text = (package / module).read_text()
        assert "get_function(" not in text and "_kernels[" not in text, module


def test_the_grids_follow_the_devices_multiprocessor_count(monkeypatch):
    """One SM count for every engine's launchers (qora.backend.kernels.multiprocessors, read once per device; the
    holo and phase launchers each had their own copy), here from a stand-in device of 100 multiprocessors."""
    import types

    from qora.backend import _cupy, kernels as backend_kernels
    from qora.holo import kernels as holo_kernels

    reads = []

    def device(d):
        reads.append(d)
        return types.SimpleNamespace(attributes={"MultiProcessorCount": 100})

    fake = types.SimpleNamespace(cuda=types.SimpleNamespace(runtime=types.SimpleNamespace(getDevice=lambda: 7),
                                                            Device=device))
    monkeypatch.setattr(_cupy, "require", lambda what: fake)
    backend_kernels._multiprocessors.cache_clear()
    try:
        assert K.per_start_grid(10**9, 4) == (K.PER_SM * 100 // 4, 4)
        assert K.per_start_grid(300, 4) == (2, 4)  # fewer items than the limit: one block per 256
        assert K.flat_grid(10**9) == (K.FLAT_PER_SM * 100,)
        assert holo_kernels.grid_limit(16) == 1600
        assert reads == [7]  # read once for the device
    finally:
        backend_kernels._multiprocessors.cache_clear()
