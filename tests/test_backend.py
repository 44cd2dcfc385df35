import os
import subprocess
import sys

import numpy as np
import pytest

from qora.backend import Backend, BackendUnavailable, has_cuda, is_device_array, resolve, xp_of


def test_resolve_cpu_is_numpy_and_cached():
    be = resolve("cpu")
    assert be.name == "cpu" and be.xp is np
    assert resolve("cpu") is be
    assert resolve(be) is be


@pytest.mark.parametrize("bad", ["gpu", "CUDA", "", None, 3])
def test_resolve_rejects_unknown_names(bad):
    with pytest.raises(ValueError, match="backend must be one of"):
        resolve(bad)


def test_disable_cuda_forces_cpu(monkeypatch):
    monkeypatch.setenv("QORA_DISABLE_CUDA", "1")
    assert not has_cuda()
    assert resolve("auto").name == "cpu"
    with pytest.raises(BackendUnavailable, match="QORA_DISABLE_CUDA"):
        resolve("cuda")


def test_auto_matches_has_cuda():
    assert resolve("auto").name == ("cuda" if has_cuda() else "cpu")


def test_import_qora_does_not_import_cupy():
    code = (
        "import sys, qora, qora.backend, qora.testing, qora.bench.common, qora.cli; "
        "from qora.backend import resolve; resolve('cpu'); "
        "print('cupy' in sys.modules)"
    )
    env = dict(os.environ, QORA_DISABLE_CUDA="1")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == "False"


def test_cupy_is_imported_in_one_module_only():
    from pathlib import Path

    import qora

    root = Path(qora.__file__).parent
    importers = sorted(
        str(p.relative_to(root)) for p in root.rglob("*.py")
        if any(line.strip().startswith(("import cupy", "from cupy", "import cupyx", "from cupyx"))
               for line in p.read_text().splitlines())
    )
    assert importers == ["backend/_cupy.py"]


def test_xp_of_host_arrays_is_numpy():
    assert xp_of(np.zeros(3), np.ones(2)) is np
    assert xp_of() is np
    assert not is_device_array(np.zeros(1))


def test_roundtrip_and_timer(be):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    d = be.asarray(a)
    assert xp_of(d) is be.xp
    assert is_device_array(d) == be.is_cuda
    with be.timer() as t:
        d = d * 2
    be.synchronize()
    np.testing.assert_array_equal(be.to_host(d), 2 * a)
    assert t.ms >= 0.0 and np.isfinite(t.ms)
    assert isinstance(be, Backend) and repr(be) == f"Backend({be.name!r})"
