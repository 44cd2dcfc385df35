"""Where a result came from: the versions of the software that made it and the state of the checkout.

Every result file (phase CXI, benchmark JSON) records these, so that a number can be traced to
the code and libraries behind it.
"""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path

import numpy as np

__all__ = ["versions", "git_state"]


def versions() -> dict:
    """Versions of Python, NumPy, SciPy, Qora, the host FFT libraries (ducc0, pyFFTW: "not installed" when
    missing; ``host_fft`` the one plans run on) and, when imported, CuPy/CUDA/cuFFT."""
    import scipy

    import qora

    out = {"python": platform.python_version(), "numpy": np.__version__, "scipy": scipy.__version__,
           "qora": qora.__version__, "platform": platform.platform()}
    # the optional host FFT libraries: a missing one is written down ("not installed"), never left out
    from qora.backend.fft import cpu_libraries

    libs = cpu_libraries()
    out.update({name: libs[name] or "not installed" for name in ("ducc0", "pyfftw")})
    out["host_fft"] = libs["used"]
    from qora.backend import cupy_submodule, has_cuda, require_cupy

    if has_cuda():
        cupy = require_cupy("CUDA versions")
        out["cupy"] = cupy.__version__
        try:
            out["cuda_runtime"] = cupy.cuda.runtime.runtimeGetVersion()
            out["cuda_driver"] = cupy.cuda.runtime.driverGetVersion()
            out["cufft"] = cupy_submodule("cupy.cuda.cufft").getVersion()
        except Exception as exc:  # version queries are informative only
            out["cuda_version_error"] = str(exc)
    return out


def git_state(repo: Path | None = None) -> dict:
    """The commit and whether the tree was clean; ``QORA_COMMIT`` / ``QORA_TREE_CLEAN`` override.

    The device machine receives a copy of the working tree without ``.git``, so a
    benchmark run there is told its commit through the environment.
    """
    commit = os.environ.get("QORA_COMMIT")
    clean = os.environ.get("QORA_TREE_CLEAN")
    repo = repo or Path.cwd()
    if commit is None:
        try:
            commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True,
                                    check=True).stdout.strip()
            status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=repo,
                                    capture_output=True, text=True, check=True).stdout
            clean = "1" if not status.strip() else "0"
        except (OSError, subprocess.CalledProcessError):
            commit, clean = "unknown", None
    return {"commit": commit, "clean": None if clean is None else clean in ("1", "true", "True")}
