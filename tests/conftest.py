"""Shared fixtures: the ``backend`` parametrisation with a ``gpu``-marked CUDA case.

GPU tests are skipped where CuPy sees no device, and fail instead when
``QORA_REQUIRE_GPU=1`` (set it on the GPU machine so that a broken CUDA setup
cannot pass as a run of skips).
"""

from __future__ import annotations

import os

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
