"""The memory estimates count ``ulimit -v`` (RLIMIT_AS) as well as MemAvailable and cgroups (issue 40): under such a
limit a run that cannot fit is refused by the estimate's message, not by NumPy's "Unable to allocate"."""

import subprocess
import sys

import pytest

resource = pytest.importorskip("resource")

LIMIT = 2_000_000_000  # bytes of address space: enough to import qora and NumPy, not for a 320^3 prism


def _limited():
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT))


def _run(code_or_args, *, cli=False):
    args = [sys.executable, "-m", "qora", *code_or_args] if cli else [sys.executable, "-c", code_or_args]
    return subprocess.run(args, capture_output=True, text=True, timeout=120, preexec_fn=_limited)


def test_the_available_memory_is_at_most_the_address_space_left():
    proc = _run("from qora.backend.host import address_space_room, available_memory\n"
                "print(address_space_room(), available_memory())")
    room, available = (int(v) for v in proc.stdout.split())
    assert 0 < room < 2_000_000_000 and available <= room


def test_a_run_over_the_limit_is_refused_by_the_estimate(tmp_path):
    proc = _run(["phase", "simulate", "--object", "prism", "--size", "320", "--out", str(tmp_path / "p.cxi")], cli=True)
    assert proc.returncode == 2
    assert "needs 1.8 GiB of host memory" in proc.stderr and "Unable to allocate" not in proc.stderr, proc.stderr
    assert list(tmp_path.iterdir()) == []

