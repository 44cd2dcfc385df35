"""Nothing lost on a full disk (issue 40): every output goes through qora.io.atomic; a full disk is one error line, the
temporary removed, an existing file of that name kept, and no crash at exit (HDF5's failing writes used to print
tracebacks from its teardown and end the process with a segfault, exit 139).

A real full disk where the tests run as root (a 64 KiB tmpfs mounted under the test's folder); an injected ENOSPC
otherwise."""

import errno
import os
import subprocess
import sys

import numpy as np
import pytest

from qora.io import atomic
from qora.io.atomic import DiskFullError, atomic_path, hdf5_output


@pytest.fixture
def tiny_disk(tmp_path):
    """A 64 KiB file system with a 40 KiB file on it (the file a failed write must keep)."""
    mount = tmp_path / "tiny"
    mount.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)],
                                           capture_output=True).returncode != 0:
        pytest.skip("mounting a tiny tmpfs needs root (the injected-ENOSPC tests run instead)")
    (mount / "kept.h5").write_bytes(b"k" * 40_000)
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], capture_output=True)


def _write(path, size=256):
    with hdf5_output(path, nbytes=8 * size * size) as f:
        f.create_dataset("data", data=np.random.default_rng(0).random((size, size)))


@pytest.mark.parametrize("in_place", [False, True])
def test_a_full_disk_is_one_error_and_keeps_the_existing_file(tiny_disk, monkeypatch, in_place):
    if in_place:  # the in-place path of data too large to build in memory
        monkeypatch.setattr(atomic, "IN_MEMORY_BYTES", 0)
    target = tiny_disk / "kept.h5"
    with pytest.raises(DiskFullError, match="the disk is full") as caught:
        _write(target)
    assert caught.value.filename == str(target) and caught.value.errno == errno.ENOSPC
    assert target.read_bytes() == b"k" * 40_000
    assert sorted(p.name for p in tiny_disk.iterdir()) == ["kept.h5"]  # no temporary left


@pytest.mark.parametrize("in_place", ["0", "1"])
def test_the_process_ends_cleanly_after_a_full_disk(tiny_disk, in_place):
    code = ("import sys; from qora.io import atomic; from qora.io.atomic import DiskFullError\n"
            f"atomic.IN_MEMORY_BYTES = 0 if {in_place} else atomic.IN_MEMORY_BYTES\n"
            "sys.path.insert(0, sys.argv[2]); from test_disk_full import _write\n"
            "try:\n    _write(sys.argv[1] + '/new.h5')\nexcept DiskFullError as e:\n    print('caught', e.errno)\n")
    proc = subprocess.run([sys.executable, "-c", code, str(tiny_disk), os.path.dirname(__file__)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]  # was 139 (a segfault in HDF5's teardown)
    assert proc.stdout.strip() == f"caught {errno.ENOSPC}"
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr, proc.stderr[-2000:]


def test_the_cli_refuses_an_output_without_room_before_the_work(tiny_disk):
    proc = subprocess.run([sys.executable, "-m", "qora", "phase", "simulate", "--size", "256", "--out",
                           str(tiny_disk / "kept.h5")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "of disk in" in lines[0] and "KiB available" in lines[0], proc.stderr
    assert (tiny_disk / "kept.h5").read_bytes() == b"k" * 40_000


@pytest.mark.parametrize("argv", [
    ["phase", "simulate", "--size", "256", "--out", "{out}/p.cxi"],
    ["phase", "run", "{pattern}", "--starts", "2", "--keep-all", "--out", "{out}/r.cxi"],
    ["holo", "reconstruct", "{holograms}", "--out", "{out}/v.h5"],
])
def test_each_writer_checks_its_disk_before_the_work(tmp_path, monkeypatch, argv):
    """Issue 40: `holo reconstruct` computed the volumes and then met the full disk; every command now compares
    its output's size with the folder's free space first (here a folder reported nearly full, any user)."""
    import shutil

    from click.testing import CliRunner

    from qora.cli import cli

    pattern = tmp_path / "pattern.npy"
    np.save(pattern, np.abs(np.fft.fft2(np.pad(np.ones((8, 8)), 28))) ** 2)
    holograms = tmp_path / "holos.h5"
    assert CliRunner().invoke(cli, ["holo", "simulate", "--size", "16", "--angles", "2", "--out",
                                    str(holograms)]).exit_code == 0
    out = tmp_path / "nearly_full"
    out.mkdir()
    usage = shutil.disk_usage(out)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage._replace(free=1000))
    args = [a.format(out=out, pattern=pattern, holograms=holograms) for a in argv]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, result.output
    # the estimate's words ("needs up to ... available"), not the writer's ("the disk is full") after the work
    assert "needs up to" in result.output and "1000 bytes available" in result.output, result.output
    assert list(out.iterdir()) == []


def _no_space(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


def test_an_injected_enospc_is_the_same_error(tmp_path, monkeypatch):
    target = tmp_path / "kept.h5"
    target.write_bytes(b"old")
    monkeypatch.setattr(atomic.os, "replace", _no_space)
    with pytest.raises(DiskFullError, match="nothing written"):
        _write(target, size=8)
    with pytest.raises(DiskFullError):
        with atomic_path(tmp_path / "other.png") as tmp:
            tmp.write_bytes(b"png")
    assert target.read_bytes() == b"old" and sorted(p.name for p in tmp_path.iterdir()) == ["kept.h5"]


def test_other_errors_pass_through_unchanged(tmp_path):
    with pytest.raises(ZeroDivisionError):
        with hdf5_output(tmp_path / "x.h5") as f:
            f.attrs["a"] = 1
            1 / 0
    assert list(tmp_path.iterdir()) == []
