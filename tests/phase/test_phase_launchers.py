"""The phase kernels' launchers (qora.phase.kernels): one per kernel of phase.cu and envelope.cu, each with its
reference named, and none of the engines launching a kernel by hand (issue 41: phase launched from dicts of
positional tuples). Runs without a GPU."""

import re
from importlib.resources import files
from pathlib import Path

from qora.phase import kernels as K

HELPERS = {"kernel", "per_start_grid", "flat_grid", "get_kernel"}


def _kernels(name: str) -> set:
    source = files("qora.phase").joinpath("kernels", name).read_text()
    return set(re.findall(r"__global__\s+void\s+(?:__launch_bounds__\([^)]*\)\s+)?(\w+)\s*\(", source))


def test_every_kernel_has_one_launcher_with_its_reference():
    names = _kernels("phase.cu") | _kernels("envelope.cu")
    launchers = {n for n in dir(K) if not n.startswith("_") and callable(getattr(K, n))} - HELPERS
    assert len(names) == 10 and names == launchers
    for name in names:
        assert "Reference:" in getattr(K, name).__doc__, name


def test_no_engine_launches_a_kernel_by_hand():
    package = Path(K.__file__).parents[1]
    for module in ("cuda.py", "cuda_base.py", "envelope_cuda.py"):
        text = (package / module).read_text()
        assert "get_function(" not in text and "_kernels[" not in text, module
