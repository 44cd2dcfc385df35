"""The validation layer (qora.io.validate): every check names what it checks and refuses what it must,
on values drawn at random as well as on the cases a careless user types."""

import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from qora.io import validate as V
from qora.io.errors import InputError, MemoryNeeded, OutputError, QoraError

FAST = settings(max_examples=60, deadline=None, derandomize=True)


@pytest.mark.parametrize("bad", [0, -1.0, -1e-300, math.nan, math.inf, -math.inf, "1", None, True, 1j])
def test_positive_refuses_what_is_not_a_positive_finite_number(bad):
    with pytest.raises(InputError, match="wavelength"):
        V.positive("wavelength", bad, unit="um")


@FAST
@given(st.floats(min_value=1e-300, max_value=1e300))
def test_positive_keeps_every_positive_float(x):
    assert V.positive("pixel", x) == x


@FAST
@given(st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-10**6, 10**6)))
def test_in_range_agrees_with_the_comparison(x):
    ok = isinstance(x, int) or math.isfinite(x)
    ok = ok and 0.1 <= x <= 1.4
    if ok:
        assert V.in_range("na", x, 0.1, 1.4) == float(x)
    else:
        with pytest.raises(InputError, match=r"na must"):
            V.in_range("na", x, 0.1, 1.4)


@pytest.mark.parametrize("value, expected", [(3, 3), (3.0, 3), (np.int64(7), 7)])
def test_integer_takes_whole_numbers(value, expected):
    assert V.integer("starts", value, low=1) == expected


@pytest.mark.parametrize("bad", [2.5, "3", True, math.nan, 0])
def test_integer_refuses_fractions_strings_bools_and_small_values(bad):
    with pytest.raises(InputError, match="starts"):
        V.integer("starts", bad, low=1)


@FAST
@given(hnp.arrays(dtype=st.sampled_from([np.float32, np.float64, np.int16, np.uint16]),
                  shape=hnp.array_shapes(min_dims=1, max_dims=4, max_side=6)))
def test_real_array_refuses_or_masks_exactly_the_bad_values(a):
    finite = np.isfinite(a.astype(np.float64))
    negative = finite & (a.astype(np.float64) < 0)
    bad = int((~finite).sum() + negative.sum())
    if bad == 0:
        out, mask = V.real_array("pattern", a, negative="refuse")
        assert mask is None and np.array_equal(out, a.astype(np.float64))
        return
    with pytest.raises(InputError, match=r"pattern has \d+ (non-finite|negative)"):
        V.real_array("pattern", a, negative="refuse")
    if bad == a.size:
        with pytest.raises(InputError, match="every value is masked"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            V.real_array("pattern", a, nonfinite="mask", negative="mask")
        return
    with pytest.warns(UserWarning, match="masked"):
        out, mask = V.real_array("pattern", a, nonfinite="mask", negative="mask")
    assert int(mask.sum()) == bad and np.all(out[mask] == 0) and np.all(np.isfinite(out))


def test_real_array_refuses_complex_with_the_fix_in_the_message():
    with pytest.raises(InputError, match=r"complex.*abs\(x\)\*\*2"):
        V.real_array("intensity", np.ones((4, 4), np.complex64))


@pytest.mark.parametrize("a, ndim, match", [(np.ones(5), (2, 3), "2D or 3D"), (np.ones((0, 4)), 2, "empty"),
                                            (np.array(["a", "b"]), 1, "numbers")])
def test_real_array_names_the_shape_or_dtype_fault(a, ndim, match):
    with pytest.raises(InputError, match=match):
        V.real_array("intensity", a, ndim=ndim)


def test_real_array_checks_the_mask_shape():
    with pytest.raises(InputError, match="mask"):
        V.real_array("intensity", np.ones((4, 4)), mask=np.zeros((3, 4), bool))


def test_an_output_equal_to_an_input_is_refused(tmp_path):
    data = tmp_path / "data.h5"
    data.write_bytes(b"precious")
    for out in (data, tmp_path / "." / "data.h5", tmp_path / "sub" / ".." / "data.h5"):
        (tmp_path / "sub").mkdir(exist_ok=True)
        with pytest.raises(OutputError, match="is the input"):
            V.outputs_apart([out], [data])
    link = tmp_path / "link.h5"
    link.symlink_to(data)
    with pytest.raises(OutputError, match="is the input"):
        V.outputs_apart([link], [data])
    with pytest.raises(OutputError, match="folder"):
        V.outputs_apart([tmp_path], [data])
    V.outputs_apart([tmp_path / "result.h5"], [data])
    assert data.read_bytes() == b"precious"


def test_memory_needed_says_how_much_and_what_to_change():
    V.memory_needed(1e9, "the simulation", available=2e9)
    V.memory_needed(1e12, "the simulation", available=None)
    with pytest.raises(MemoryNeeded, match=r"needs 512\.0 GiB of host memory, 2\.0 GiB available; use --size"):
        V.memory_needed(512 * 2**30, "the simulation", available=2 * 2**30, hint="use --size")
    assert issubclass(MemoryNeeded, MemoryError) and issubclass(MemoryNeeded, QoraError)


def test_an_output_folder_that_takes_no_file_is_refused_before_any_work(tmp_path, monkeypatch):
    """The folder of every output is tried with a temporary file first: a parent that is a file, and an
    injected write error (a read-only mount, a full quota), are one OutputError naming the folder; the check
    leaves nothing behind."""
    import tempfile

    from qora.io.errors import OutputError
    from qora.io.validate import outputs_apart

    outputs_apart([tmp_path / "ok.h5"], [])
    assert list(tmp_path.iterdir()) == []
    blocker = tmp_path / "file"
    blocker.write_text("x")
    outputs_apart([tmp_path / "new" / "out.h5"], [])  # a folder not there yet: the command's own to make
    with pytest.raises(OutputError, match="does not take new files"):
        outputs_apart([blocker / "out.h5"], [])  # the "folder" is a file

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tempfile, "NamedTemporaryFile", refuse)
    with pytest.raises(OutputError, match=r"its folder .* does not take new files \(Permission denied\)"):
        outputs_apart([tmp_path / "out.h5"], [])


def test_cli_refuses_an_unwritable_output_folder_before_the_work(tmp_path, monkeypatch):
    """`qora phase simulate` and `qora ssb live` (whose result was lost after a whole scan) stop at once."""
    import tempfile

    from click.testing import CliRunner

    from qora.cli.root import cli

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tempfile, "NamedTemporaryFile", refuse)
    runner = CliRunner()
    out = runner.invoke(cli, ["phase", "simulate", "--size", "32", "--out", str(tmp_path / "p.cxi")])
    assert out.exit_code != 0 and "does not take new files" in out.output
    out = runner.invoke(cli, ["ssb", "live", "tcp://127.0.0.1:9", "--scan-shape", "4", "4", "--kv", "300",
                              "--semiangle", "20", "--scan-step", "0.5", "--out", str(tmp_path / "live.h5")])
    assert out.exit_code != 0 and "does not take new files" in out.output, out.output


def test_a_dead_writers_temporary_is_removed_by_the_next_write(tmp_path):
    """SIGTERM/SIGKILL mid-write left .NAME.PID.tmp that no later run removed (issue 40); a live process's stays."""
    import os
    import subprocess
    import sys

    from qora.io.atomic import atomic_path

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(dead.stdout)
    stale = tmp_path / f".out.h5.{dead_pid}.tmp"
    live = tmp_path / f".out.h5.{os.getppid()}.tmp"  # the parent process runs
    other = tmp_path / f".other.h5.{dead_pid}.tmp"  # another target's: not this write's business
    for p in (stale, live, other):
        p.write_bytes(b"partial")
    with atomic_path(tmp_path / "out.h5") as tmp:
        tmp.write_bytes(b"done")
    assert (tmp_path / "out.h5").read_bytes() == b"done"
    assert not stale.exists() and live.exists() and other.exists()


def test_sigterm_mid_write_removes_the_temporary_and_exits_143(tmp_path):
    """Issue 40: SIGTERM mid-write left a hidden temporary and the process died without cleaning up."""
    import subprocess
    import sys

    script = ("import os, signal\n"
              "from qora.cli.root import stop_on_sigterm\n"
              "from qora.io.atomic import atomic_path\n"
              "stop_on_sigterm()\n"
              "with atomic_path('out.h5') as tmp:\n"
              "    tmp.write_bytes(b'half')\n"
              "    os.kill(os.getpid(), signal.SIGTERM)\n"
              "    tmp.write_bytes(b'never')\n")
    (tmp_path / "out.h5.keep").write_bytes(b"")
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 143, proc.stderr
    assert not (tmp_path / "out.h5").exists() and not list(tmp_path.glob(".*.tmp"))


def test_ctrl_c_on_a_live_scan_waiting_for_a_silent_detector_exits_130_at_once(tmp_path):
    """Issue 40: Ctrl-C on `ssb live` waiting for a silent detector took 24 s and ended with click's "Aborted!"
    and status 1; now it stops within a second with 130 (128 + SIGINT) and one line."""
    import signal
    import socket
    import subprocess
    import sys
    import time

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        port = server.getsockname()[1]
        proc = subprocess.Popen([sys.executable, "-m", "qora", "ssb", "live", f"tcp://127.0.0.1:{port}", "--kv", "300",
                                 "--semiangle", "20", "--scan-step", "0.4", "--scan-shape", "16", "16", "--out",
                                 str(tmp_path / "live.h5")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        peer, _ = server.accept()  # connected, and silent
        with peer:
            time.sleep(1.0)
            sent = time.perf_counter()
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=30)
            stopped = time.perf_counter() - sent
    assert proc.returncode == 130, err
    assert stopped < 2.0, stopped
    assert err.strip().splitlines()[-1].startswith("Interrupted") and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []
