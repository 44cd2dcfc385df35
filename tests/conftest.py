"""Shared fixtures: the ``backend`` parametrisation with a ``gpu``-marked CUDA case.

GPU tests are skipped where CuPy sees no device, and fail instead when
``QORA_REQUIRE_GPU=1`` (set it on the GPU machine so that a broken CUDA setup
cannot pass as a run of skips).
"""

from __future__ import annotations

import os
import signal
import threading

import numpy as np
import pytest

from qora.backend import has_cuda, resolve
from qora.backend._cupy import probe_error


def _require_gpu() -> bool:
    return os.environ.get("QORA_REQUIRE_GPU", "") not in ("", "0")


def _gate() -> None:
    if not has_cuda():
        if _require_gpu():
            pytest.fail(f"QORA_REQUIRE_GPU=1 but no usable GPU: {probe_error()}")
        pytest.skip(f"needs a GPU: {probe_error()}")


@pytest.fixture(autouse=True)
def _gpu_gate(request):
    if request.node.get_closest_marker("gpu") is not None:
        _gate()


@pytest.fixture(autouse=True)
def _ctrl_c_reaches_children():
    """Each test starts with SIGINT handled as a terminal's Python handles it. Under pytest-xdist a worker's SIGINT
    was found ignored after some tests (after the Dask local cluster's module and in the phase tests; a pytest plugin
    logging the disposition after every test found it, 2026-12-05). An ignored SIGINT is inherited by every child
    process, and Python then never raises KeyboardInterrupt there, so the tests that press Ctrl-C on a command (the
    bad-input table, the silent live detector) saw it run to its end, depending on which tests ran before them."""
    ignored = signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    if ignored and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="module")
def gpu_module():
    """The same gate for module-scoped GPU fixtures (they are set up before the per-test one)."""
    _gate()


@pytest.fixture(params=["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def backend(request):
    """The backend name, "cpu" or "cuda" (the latter marked ``gpu``)."""
    return request.param


@pytest.fixture
def be(backend):
    """The resolved :class:`qora.backend.Backend` of the ``backend`` parameter."""
    return resolve(backend)


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def _shared_data_dir():
    """The shared data folder (../shared/data/README.md): QORA_SHARED_DATA, else beside this checkout, else
    beside the checkout this one was cloned from (a CI clone made in a temporary folder)."""
    import subprocess
    from pathlib import Path

    if os.environ.get("QORA_SHARED_DATA"):
        return Path(os.environ["QORA_SHARED_DATA"])
    root = Path(__file__).resolve().parents[1]
    candidates = [root.parent / "shared" / "data"]
    origin = subprocess.run(["git", "config", "--get", "remote.origin.url"], cwd=root, capture_output=True,
                            text=True).stdout.strip()
    if origin and "://" not in origin:
        candidates.append(Path(origin).resolve().parent / "shared" / "data")
    return next((c for c in candidates if c.is_dir()), candidates[0])


@pytest.fixture(scope="session")
def shared_data():
    """The real instrument files' folder (tests that read them; docs: ../shared/data/README.md)."""
    return _shared_data_dir()
