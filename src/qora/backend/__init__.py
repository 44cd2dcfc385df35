"""The one place in Qora that knows NumPy from CuPy.

Use :func:`resolve` to turn ``"auto" | "cpu" | "cuda"`` into a :class:`Backend`,
and :func:`xp_of` to find the array module of arrays already made. CuPy is
imported only by :mod:`qora.backend._cupy`, lazily and guarded, so the CPU path
works where CuPy is absent; ``QORA_DISABLE_CUDA=1`` forces it.
"""

from __future__ import annotations

from qora.backend.core import (
    DEFAULT_BACKEND,
    Backend,
    BackendUnavailable,
    has_cuda,
    resolve,
    xp_of,
    is_device_array,
)
from qora.backend._cupy import probe_error as cuda_note
from qora.backend._cupy import require as require_cupy
from qora.backend._cupy import submodule as cupy_submodule
from qora.backend.host import cpu_count

__all__ = ["DEFAULT_BACKEND", "Backend", "BackendUnavailable", "has_cuda", "resolve", "xp_of", "is_device_array", "require_cupy",
           "cupy_submodule", "cuda_note", "cpu_count"]
