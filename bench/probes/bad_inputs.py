"""Issue 40's classes of bad input, run as a new user would (the CLI in a subprocess, a fresh folder each):
every case should end in one line that says what to change (exit 2), or, for a signal, 130/143 with
nothing lost. Prints a table: the exit status, the seconds, a traceback, an internal error, the lines of
output that are not progress bars, and the files left behind; the last line counts the failures.

    python bench/probes/bad_inputs.py [OUT.md]

The disk-full cases need root (a 64 KiB tmpfs); without it they are skipped and say so.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

QORA = [sys.executable, "-m", "qora"]
LIMIT = 120  # seconds before a case counts as a hang
STOP = 1.0  # seconds a signalled command may take to stop (the tests allow more on a loaded CI machine)


def _npy(folder, name, array):
    path = folder / name
    np.save(path, array)
    return str(path)


def _pattern(folder, scale=1.0, size=128):
    y, x = np.mgrid[-32:32, -32:32]
    obj = ((abs(y) < 6) & (abs(x) < 8)).astype(float)
    pattern = np.abs(np.fft.fftshift(np.fft.fft2(np.pad(obj, (size - 64) // 2)))) ** 2
    return _npy(folder, f"pattern_{scale:g}_{size}.npy", pattern * scale)


def _lying_npy(folder):
    path = folder / "huge.npy"
    header = "{'descr': '<f8', 'fortran_order': False, 'shape': (100000, 100000), }"
    header += " " * (118 - len(header)) + "\n"
    path.write_bytes(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode() + b"\0" * 64)
    return str(path)


def _random(folder, name, size=4096):
    path = folder / name
    path.write_bytes(np.random.default_rng(0).integers(0, 256, size, dtype=np.uint8).tobytes())
    return str(path)


def _readonly(folder):
    ro = folder / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    return str(ro / "x.h5")


def cases(folder: Path) -> list:
    """(class, name, argv, expected: 'refuse' | 'interrupt' | 'term', a signal delay in s or None)."""
    f = folder
    sim = ["ssb", "simulate", "--scan", "192", "--window", "64"]
    small = ["ssb", "simulate", "--scan", "64", "--window", "32"]
    img = ["--kv", "300", "--semiangle", "20", "--scan-step", "0.5", "--out", str(f / "i.h5")]
    run = ["--out", str(f / "r.cxi")]
    return [
        ("signal", "ssb simulate, Ctrl-C mid-run (an existing --out kept)", [*sim, "--out", str(f / "keep.h5")],
         "interrupt", 2.0),
        ("signal", "ssb simulate, Ctrl-C while the command line loads", [*sim, "--out", str(f / "early.h5")],
         "interrupt", 0.2),
        ("signal", "ssb simulate, SIGTERM mid-run", [*sim, "--out", str(f / "term.h5")], "term", 2.0),
        ("signal", "phase run, Ctrl-C mid-run", ["phase", "run", _pattern(f), "--starts", "50", "--out",
                                                  str(f / "p.cxi")], "interrupt", 3.0),
        *([] if os.geteuid() == 0 else  # root writes into a read-only folder
          [("checked late", "ssb simulate into a read-only folder", [*sim, "--out", _readonly(f)], "refuse", None)]),
        ("checked late", "phase simulate into a file for a folder",
         ["phase", "simulate", "--out", str(Path(_pattern(f)) / "x.cxi")], "refuse", None),
        ("silent", "phase run on boolean intensities", ["phase", "run", _npy(f, "b.npy", np.ones((64, 64), bool)), *run],
         "refuse", None),
        ("silent", "ssb simulate --c30 1e30", [*small, "--c30", "1e30", "--out", str(f / "c.h5")], "refuse", None),
        ("silent", "ssb simulate --step 1e-9", [*small, "--step", "1e-9", "--out", str(f / "s.h5")], "refuse", None),
        ("silent", "ssb image --rotation 1e308", ["ssb", "image", _npy(f, "d.npy", np.ones((8, 8, 16, 16))), *img,
                                                  "--rotation", "1e308"], "refuse", None),
        ("unbounded", "phase run on a .npy whose header claims 80 GB", ["phase", "run", _lying_npy(f), *run], "refuse",
         None),
        ("unbounded", "phase run --recipe 'HIO**10000000000'", ["phase", "run", _pattern(f), "--recipe",
                                                                "HIO**10000000000", *run], "refuse", None),
        ("unbounded", "phase run --starts 10000 --keep-all, 1024^2", ["phase", "run", _pattern(f, size=1024),
                                                                     "--starts", "10000", "--keep-all", *run],
         "refuse", None),
        ("internal", "phase run on intensities x 1e-300", ["phase", "run", _pattern(f, 1e-300), *run], "refuse", None),
        ("internal", "ssb image on random bytes named .dm4", ["ssb", "image", _random(f, "r.dm4"), *img], "refuse",
         None),
        ("internal", "ssb image on random bytes named .mib", ["ssb", "image", _random(f, "r.mib"), *img], "refuse",
         None),
        ("internal", "ssb image on random bytes named .h5", ["ssb", "image", _random(f, "r.h5"), *img], "refuse",
         None),
        ("misleading", "ssb simulate --semiangle 1e6", [*small, "--semiangle", "1e6", "--out", str(f / "a.h5")],
         "refuse", None),
        ("misleading", "ssb simulate --kv 1e9", [*small, "--kv", "1e9", "--out", str(f / "k.h5")], "refuse", None),
        # found 2026-12-04 by a run of the classes as a new user: simulated, then imaged blank with exit 0
        ("silent", "ssb simulate --kv 1e-9", [*small, "--kv", "1e-9", "--out", str(f / "k9.h5")], "refuse", None),
        ("unbounded", "ssb simulate --step 1e4", [*small, "--step", "1e4", "--out", str(f / "s4.h5")], "refuse",
         None),
        ("input", "phase run on a missing file", ["phase", "run", str(f / "missing.npy"), *run], "refuse", None),
        ("input", "phase run on a 3-pixel pattern", ["phase", "run", _npy(f, "tiny.npy", np.ones((3, 3))), *run],
         "refuse", None),
        ("input", "phase run on NaN intensities", ["phase", "run", _npy(f, "nan.npy", np.full((64, 64), np.nan)), *run],
         "refuse", None),
        ("input", "ssb image on a 2D array", ["ssb", "image", _npy(f, "two.npy", np.ones((16, 16))), *img], "refuse",
         None),
        *holo_cases(f),
        ("input", "holo reconstruct on a missing file", ["holo", "reconstruct", str(f / "missing.h5"), "--out", str(f / "v.h5")],
         "refuse",
         None),
    ]


def holo_cases(f: Path) -> list:
    """Hologram stacks without metadata: NaN, shapes that do not match, unphysical optics, angles miscounted."""
    rng = np.random.default_rng(0)
    stack = _npy(f, "holos.npy", rng.random((8, 64, 64)) + 1)
    nan = rng.random((8, 64, 64)) + 1
    nan[2, 3, 4] = np.nan
    optics = ["--wavelength", "0.5", "--pixel", "0.1", "--medium-index", "1.33", "--na", "1.2", "--geometry",
              "rotation", "--angles", "0:360:8", "--out", str(f / "v.h5")]
    return [
        ("input", "holo reconstruct on NaN holograms", ["holo", "reconstruct", _npy(f, "nan_holos.npy", nan), stack,
                                                         *optics], "refuse", None),
        ("input", "holo reconstruct, one 2D hologram for a stack", ["holo", "reconstruct",
                                                                   _npy(f, "one.npy", np.ones((64, 64))), stack,
                                                                   *optics], "refuse", None),
        ("silent", "holo reconstruct --na 5 (above the medium's index)", ["holo", "reconstruct", stack, stack,
                                                                          *optics, "--na", "5"], "refuse", None),
        ("silent", "holo reconstruct, 5 angles for 8 holograms", ["holo", "reconstruct", stack, stack, *optics,
                                                                  "--angles", "0:360:5"], "refuse", None),
        ("input", "holo reconstruct on noise without a sideband", ["holo", "reconstruct", stack,
                                                                   _npy(f, "noise.npy", rng.random((8, 64, 64))),
                                                                   *optics], "refuse", None),
        ("internal", "holo phase on random bytes named .h5", ["holo", "phase", _random(f, "rh.h5"),
                                                              _random(f, "rb.h5"), "--out", str(f / "p.h5")],
         "refuse", None),
    ]


def silent_detector() -> int:
    """A Merlin-like peer that accepts and sends nothing; its port."""
    import socket
    import threading

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    held = []  # the accepted connections stay open, silent
    threading.Thread(target=lambda: [held.append(server.accept()) for _ in range(100)], daemon=True).start()
    return server.getsockname()[1]


def live_cases(f: Path) -> list:
    """`ssb live` against a detector that never sends: Ctrl-C while it waits (24 s to stop once), and an
    output that cannot be written, refused before the scan (the scan's result was lost after it)."""
    source = f"tcp://127.0.0.1:{silent_detector()}"
    live = ["ssb", "live", source, "--kv", "300", "--semiangle", "20", "--scan-step", "0.5"]
    cases = [("signal", "ssb live, Ctrl-C while the detector is silent", [*live, "--out", str(f / "live.h5")],
              "interrupt", 2.0)]
    ro = f / "ro_mount"
    ro.mkdir()
    if os.geteuid() == 0 and subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(ro)],
                                            capture_output=True).returncode == 0:
        cases.append(("checked late", "ssb live --out on a read-only file system", [*live, "--out", str(ro / "x.h5")],
                      "refuse", None))
    return cases


def stale_case(f: Path) -> list:
    """A temporary left by a killed run (SIGKILL: no handler runs) in the output's folder: the next run removes it."""
    folder = f / "stale"
    folder.mkdir()
    dead = subprocess.Popen(["true"])
    dead.wait()  # a PID no process holds now
    (folder / f".s.h5.{dead.pid}.tmp").write_bytes(b"partial")
    return [("signal", "ssb simulate after a killed run's temporary", ["ssb", "simulate", "--scan", "16", "--window",
                                                                      "16", "--out", str(folder / "s.h5")],
             "write", None)]


def disk_full_cases(folder: Path) -> list:
    full = folder / "full"
    full.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(full)],
                                           capture_output=True).returncode != 0:
        return []
    return [
        ("disk full", "ssb simulate onto a full disk", ["ssb", "simulate", "--scan", "32", "--out",
                                                         str(full / "s.h5")], "refuse", None),
        ("disk full", "phase simulate onto a full disk", ["phase", "simulate", "--size", "512", "--out",
                                                           str(full / "p.cxi")], "refuse", None),
        ("disk full", "phase run onto a full disk", ["phase", "run", _pattern(folder), "--starts", "2", "--out",
                                                      str(full / "r.cxi")], "refuse", None),
        ("disk full", "holo reconstruct onto a full disk", ["holo", "reconstruct", _holograms(folder), "--out",
                                                             str(full / "v.h5")], "refuse", None),
    ]


def _holograms(folder: Path) -> str:
    path = folder / "sim_holos.h5"
    subprocess.run(QORA + ["holo", "simulate", "--size", "48", "--angles", "4", "--out", str(path)], check=True,
                   capture_output=True)
    return str(path)


def _as_from_a_terminal(argv, **kwargs):
    """Popen with Ctrl-C reaching the command as from a terminal: an ignored SIGINT (nohup, a background job, a test
    runner's worker after some library ignored it) is inherited across exec, and Python then never raises
    KeyboardInterrupt, so the Ctrl-C cases would run to their end. A handler (not SIG_IGN) becomes SIG_DFL in the
    child."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return subprocess.Popen(argv, **kwargs)
    finally:
        signal.signal(signal.SIGINT, previous)


def run_case(argv, expected, delay, cwd):
    keep = Path(cwd).parent / "keep.h5"
    if expected == "interrupt" and str(keep) in argv:
        keep.write_text("an existing result")
    before = set(os.listdir(cwd))
    t0 = time.perf_counter()
    proc = _as_from_a_terminal(QORA + argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if delay is not None:
        time.sleep(delay)
        proc.send_signal(signal.SIGINT if expected == "interrupt" else signal.SIGTERM)
        t0 = time.perf_counter()
    try:
        out, _ = proc.communicate(timeout=LIMIT)
        hang = False
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        hang = True
    seconds = time.perf_counter() - t0
    lines = [ln for ln in out.replace("\r", "\n").splitlines() if ln.strip() and "|" not in ln]
    left = sorted(set(os.listdir(cwd)) - before)
    out_path = Path(argv[argv.index("--out") + 1]) if "--out" in argv else None
    folders = {Path(cwd)} | ({out_path.parent} if out_path is not None and out_path.parent.is_dir() else set())
    hidden = [n for d in folders for n in os.listdir(d) if n.startswith(".") and n.endswith(".tmp")]
    if expected == "write" and (out_path is None or not out_path.exists()):
        hidden.append("no output written")
    kept = keep.read_text() == "an existing result" if keep.exists() and keep.stat().st_size < 100 else None
    return dict(code=proc.returncode, seconds=seconds, traceback="Traceback" in out,
                internal="internal error" in out.lower(), lines=lines, hang=hang, left=left + hidden, kept=kept)


def verdict(expected, r) -> str:
    want = {"refuse": 2, "interrupt": 130, "term": 143, "write": 0}[expected]
    problems = []
    if r["hang"]:
        problems.append("hang")
    if r["traceback"]:
        problems.append("traceback")
    if r["internal"]:
        problems.append("internal error")
    if r["code"] == 0 and expected != "write":
        problems.append("silent")
    elif r["code"] != want:
        problems.append(f"exit {r['code']}")
    errors = [ln for ln in r["lines"] if ln.startswith("Error:")]
    if expected == "refuse" and len(errors) != 1:  # click's usage lines may precede it (qora.testing.error_line)
        problems.append(f"{len(errors)} Error: lines")
    if r["left"]:
        problems.append("left " + ", ".join(r["left"]))
    if r["kept"] is False:
        problems.append("existing file replaced")
    if expected in ("interrupt", "term") and r["seconds"] > STOP:
        problems.append(f"stopped after {r['seconds']:.1f} s")
    return "ok" if not problems else "; ".join(problems)


def main(out: str | None = None) -> int:
    rows, failures = [], 0
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        for i, (kind, name, argv, expected, delay) in enumerate(cases(base) + live_cases(base) + stale_case(base) + disk_full_cases(base)):
            cwd = base / f"case{i}"
            cwd.mkdir()
            r = run_case(argv, expected, delay, cwd)
            v = verdict(expected, r)
            failures += v != "ok"
            message = next((ln for ln in r["lines"] if ln.startswith("Error:")), r["lines"][-1] if r["lines"] else "")
            rows.append(f"| {kind} | {name} | {r['code']} | {r['seconds']:.1f} | {v} | {message[:150]} |")
            print(rows[-1], flush=True)
        for mount in (base / "full", base / "ro_mount"):
            if mount.is_mount():
                subprocess.run(["umount", str(mount)])
    table = ["| class | case | exit | s | verdict | last line |", "|---|---|---|---|---|---|", *rows,
             f"\n{len(rows)} cases, {failures} with a problem"]
    print(table[-1])
    if out:
        Path(out).write_text("\n".join(table) + "\n")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
