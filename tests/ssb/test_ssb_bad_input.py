"""Bad input to qora.ssb, from the command line and the Python API: each row is the call, the error
class it must raise and a regex of its message. The command line gives exit status 2, one line
starting "Error:", no traceback; no output file appears and the input files are unchanged."""

import hashlib
import json
import math
import re

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

from qora.cli import cli
from qora.io.errors import FileFormatError, InputError, MemoryNeeded, OutputError
from qora.ssb import (Aberrations, DetectorFit, Session, amorphous_slices, fit, load_data, plot_fit, read_dataset,
                      simulate, wavelength, write_dataset)
from qora.testing import error_line


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    """A small dataset (16 x 16 scan, 32 x 32 detector, C10 = 100 A, C12 = 20 A at 25 deg) and damaged files."""
    folder = tmp_path_factory.mktemp("bad")
    ab = Aberrations(C10=100.0, C12=(20.0, math.radians(25.0)))
    sim = simulate(amorphous_slices((32, 32), 0.2, seed=1), pixel=0.2, stride=2, window=32, aberrations=ab)
    good = folder / "good.h5"
    write_dataset(good, sim.data, kv=300.0, alpha_mrad=20.0, scan_step=sim.scan_step, aberrations=ab)
    (folder / "empty.h5").write_bytes(b"")
    (folder / "truncated.h5").write_bytes(good.read_bytes()[:3000])
    (folder / "garbage.h5").write_bytes(b"not an HDF5 file at all" * 40)
    with h5py.File(folder / "other.h5", "w") as f:
        f["frames"] = np.zeros((3, 4))
        f["meta/x"] = np.zeros(5)
    with h5py.File(folder / "three.h5", "w") as f:
        f.attrs["qora_kind"] = "ssb_dataset"
        f["data"] = np.zeros((3, 4, 5))
    with h5py.File(folder / "nodata.h5", "w") as f:
        f.attrs["qora_kind"] = "ssb_dataset"
    with h5py.File(folder / "badkv.h5", "w") as f:
        f.attrs.update(qora_kind="ssb_dataset", kv=-300.0, alpha_mrad=20.0, scan_step_a=0.4, aberrations="{}")
        f["data"] = sim.data.astype(np.float32)
    np.save(folder / "three.npy", np.ones((4, 16, 16), np.float32))
    np.save(folder / "complex.npy", sim.data.astype(np.complex64))
    np.save(folder / "zeros.npy", np.zeros((8, 8, 16, 16), np.float32))
    nan = sim.data.copy()
    nan[0, 0, 16, 16] = np.nan
    nan[3, 2, 15, 16] = np.inf
    nan[5, 5, 16, 15] = np.nan
    np.save(folder / "nan.npy", nan)
    (folder / "truncated.npy").write_bytes((folder / "complex.npy").read_bytes()[:500])
    (folder / "empty.npy").write_bytes(b"")
    (folder / "folder").mkdir()
    return folder, sim


SETTINGS = ["--kv", "300", "--semiangle", "20", "--scan-step", "0.4"]

CLI_ROWS = [
    # outputs that would replace an input, or are folders, or the wrong format: refused before any work
    (["ssb", "image", "{good.h5}", "--out", "{good.h5}"], r"the output .*good\.h5 is the input"),
    (["ssb", "fit", "{good.h5}", "--out", "{good.h5}"], r"the output .*good\.h5 is the input"),
    (["ssb", "fit", "{good.h5}", "--out", "x.json", "--plot", "{good.h5}"], r"is the input"),
    (["ssb", "image", "{good.h5}", "--out", "x.h5", "--plot", "{good.h5}"], r"is the input"),
    (["ssb", "image", "{good.h5}", "--out", "{folder}"], r"is a (directory|folder)"),
    (["ssb", "fit", "{good.h5}", "--out", "{folder}"], r"is a (directory|folder)"),
    (["ssb", "image", "{good.h5}", "--out", "x.zarr"], r"--out x\.zarr: this output is written as \.h5"),
    (["ssb", "fit", "{good.h5}", "--out", "x.h5"], r"written as \.json"),
    (["ssb", "image", "{good.h5}", "--out", "x.h5", "--plot", "x.h5"], r"is the input|same file"),
    (["ssb", "simulate", "--scan", "8", "--window", "16", "--out", "{folder}"], r"is a (directory|folder)"),
    # damaged files and files that are not 4D-STEM data: named, with what they hold
    (["ssb", "image", "{empty.h5}", "--out", "x.h5"], r"empty\.h5: cannot be read"),
    (["ssb", "image", "{truncated.h5}", "--out", "x.h5"], r"truncated\.h5: cannot be read.*truncated"),
    (["ssb", "fit", "{garbage.h5}", "--out", "x.json"], r"garbage\.h5: cannot be read"),
    (["ssb", "image", "{other.h5}", "--out", "x.h5"], r"other\.h5: not a qora 4D-STEM dataset.*frames \(3, 4\)"),
    (["ssb", "image", "{three.h5}", "--out", "x.h5"], r"three\.h5: .*4D dataset 'data'.*\(3, 4, 5\)"),
    (["ssb", "fit", "{nodata.h5}", "--out", "x.json"], r"nodata\.h5: .*found no dataset 'data'.*no dataset"),
    (["ssb", "image", "{three.npy}", "--out", "x.h5", *SETTINGS], r"three\.npy: 4D-STEM data must be .*\(4, 16, 16\)"),
    (["ssb", "image", "{truncated.npy}", "--out", "x.h5", *SETTINGS], r"truncated\.npy: cannot be read"),
    (["ssb", "image", "{empty.npy}", "--out", "x.h5", *SETTINGS], r"empty\.npy: cannot be read"),
    (["ssb", "image", "{complex.npy}", "--out", "x.h5", *SETTINGS], r"complex\.npy: .*real numbers.*complex64"),
    (["ssb", "image", "{zeros.npy}", "--out", "x.h5", *SETTINGS], r"zeros\.npy: .*zero"),
    (["ssb", "fit", "{nan.npy}", "--out", "x.json", *SETTINGS], r"nan\.npy: data has 3 non-finite .* of 262144"),
    (["ssb", "image", "{badkv.h5}", "--out", "x.h5"], r"kv recorded in .*badkv\.h5.* must be positive kV"),
    # options out of their physical range, NaN, Inf
    (["ssb", "image", "{good.h5}", "--out", "x.h5", "--kv", "0"], r"--kv.*0 is not >= 1 .*accelerate"),
    (["ssb", "image", "{good.h5}", "--out", "x.h5", "--kv", "-300"], r"--kv.*-300 is not >= 1 "),
    (["ssb", "image", "{good.h5}", "--out", "x.h5", "--semiangle", "nan"], r"--semiangle.*not a finite number"),
    (["ssb", "image", "{good.h5}", "--out", "x.h5", "--scan-step", "0"], r"--scan-step.*0 is not >= 0\.01"),
    (["ssb", "fit", "{good.h5}", "--out", "x.json", "--scan-step", "-1"], r"--scan-step.*-1 is not >= 0\.01"),
    (["ssb", "image", "{good.h5}", "--out", "x.h5", "--c10", "inf"], r"--c10.*not a finite number"),
    (["ssb", "image", "{good.h5}", "--out", "x.h5", "--rotation", "nan"], r"--rotation.*not a finite number"),
    (["ssb", "fit", "{good.h5}", "--out", "x.json", "--rotation", "inf"], r"--rotation.*not a finite number"),
    (["ssb", "simulate", "--kv", "0", "--out", "x.h5"], r"--kv.*0 is not >= 1 "),
    (["ssb", "simulate", "--step", "nan", "--out", "x.h5"], r"--step.*not a finite number"),
    (["ssb", "simulate", "--dose", "-1", "--out", "x.h5"], r"--dose.*not > 0"),
    (["ssb", "simulate", "--thickness", "-5", "--out", "x.h5"], r"--thickness.*not >= 0"),
    # finite but absurd: refused with the physical reason (an angle modulo 360 deg, no lens, no probe)
    (["ssb", "image", "{good.h5}", "--out", "x.h5", "--rotation", "1e308"],
     r"--rotation.*1e\+308 is not <= 1e\+06.*modulo 360 deg"),
    (["ssb", "fit", "{good.h5}", "--out", "x.json", "--rotation", "-2e6"], r"--rotation.*is not >= -1e\+06"),
    (["ssb", "image", "{good.h5}", "--out", "x.h5", "--c12-angle", "1e300"], r"--c12-angle.*modulo 360 deg"),
    (["ssb", "simulate", "--c30", "1e30", "--out", "x.h5"], r"--c30.*1e\+30 is not <= 1e\+10.*no electron lens"),
    (["ssb", "image", "{good.h5}", "--out", "x.h5", "--c10", "-1e12"], r"--c10.*no electron lens"),
    (["ssb", "image", "{good.h5}", "--out", "x.h5", "--c12", "1e11"], r"--c12.*no electron lens"),
    (["ssb", "simulate", "--step", "1e-9", "--out", "x.h5"], r"--step.*1e-09 is not >= 0\.01.*below any probe"),
    (["ssb", "fit", "{good.h5}", "--out", "x.json", "--scan-step", "1e-9"], r"--scan-step.*below any probe"),
    (["ssb", "image", "{good.h5}", "--out", "x.h5", "--scan-step-x", "1e-5"], r"--scan-step-x.*below any probe"),
    (["ssb", "live", "tcp://127.0.0.1:9", "--kv", "300", "--semiangle", "25", "--scan-step", "0.4", "--rotation",
      "1e308"], r"--rotation.*modulo 360 deg"),
    (["ssb", "live", "tcp://127.0.0.1:9", "--kv", "300", "--semiangle", "25", "--scan-step", "0.4", "--c30",
      "1e30"], r"--c30.*no electron lens"),
    # the electron optics' physical ranges (issue 40: --kv 1e-9 was simulated at 1.9e6 mrad per pixel)
    (["ssb", "simulate", "--kv", "1e-9", "--out", "x.h5"], r"--kv.*1e-09 is not >= 1 .*accelerate from ~1 kV"),
    (["ssb", "simulate", "--semiangle", "1e-9", "--out", "x.h5"], r"--semiangle.*is not >= 0\.1 .*microns wide"),
    (["ssb", "image", "{good.h5}", "--out", "x.h5", "--kv", "1e6"], r"--kv.*is not <= 5000"),
    (["ssb", "fit", "{good.h5}", "--out", "x.json", "--semiangle", "1e4"], r"--semiangle.*is not <= 500"),
    # a coarse step: the sampling refused before the slices (it was numpy's "Unable to allocate 610 GiB")
    (["ssb", "simulate", "--scan", "16", "--window", "32", "--step", "1e4", "--out", "x.h5"],
     r"the aperture .* reaches beyond 2/3 of the sampling's Nyquist frequency .*--semiangle"),
    # a step too coarse for any double-overlap pixel: the image would be 0 (it was a blank image and exit 0)
    (["ssb", "image", "{good.h5}", "--out", "x.h5", "--scan-step", "1e7"],
     r"no scan frequency has a detector pixel where the two disks overlap singly.*--scan-step"),
    # too large: said before any work, with the option that shrinks it
    (["ssb", "simulate", "--scan", "1024", "--detector", "1024", "--out", "x.h5"],
     r"needs 8192\.0 GiB of host memory, [0-9.]+ GiB available; a smaller scan \(--scan\) or window \(--window\)"),
]


def _hashes(folder):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.iterdir() if p.is_file()}


def _fill(args, folder):
    return [re.sub(r"\{(.+?)\}", lambda m: str(folder if m[1] == "folder" else folder / m[1]), a) for a in args]


def _one_error_line(result, pattern):
    line = error_line(result)
    assert re.search(pattern, line), line


@pytest.mark.parametrize("args, pattern", CLI_ROWS, ids=[" ".join(r[0][:2] + r[0][2:3]) for r in CLI_ROWS])
def test_cli_refuses_with_one_line(case, args, pattern, monkeypatch):
    folder, _ = case
    monkeypatch.chdir(folder)
    before_names = sorted(p.name for p in folder.iterdir())
    before = _hashes(folder)
    result = CliRunner().invoke(cli, _fill(args, folder))
    _one_error_line(result, pattern)
    assert sorted(p.name for p in folder.iterdir()) == before_names  # no output, no temporary file
    assert _hashes(folder) == before  # the inputs are byte-identical


def test_simulate_refuses_an_output_larger_than_the_free_disk(tmp_path, monkeypatch):
    import shutil
    from collections import namedtuple

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(10**6, 10**6 - 1000, 1000))
    result = CliRunner().invoke(cli, ["ssb", "simulate", "--scan", "8", "--window", "16", "--out",
                                      str(tmp_path / "x.h5")])
    # in the unit that shows the sizes (it printed "0.0 GiB ..., 0.0 GiB available")
    _one_error_line(result, r"needs up to 64 KiB of disk in .*, 1000 bytes available; a smaller scan \(--scan\)")
    assert not list(tmp_path.iterdir())


def test_an_interrupt_during_the_write_removes_the_partial_file_and_exits_130(tmp_path, monkeypatch):
    from qora.progress import tqdm_progress

    real = tqdm_progress.__call__
    seen = []

    def interrupted(self, stage, done, total, metrics):
        seen.append((stage, done, total))
        if stage == "write":  # the first block is in the file: Ctrl-C now
            raise KeyboardInterrupt
        return real(self, stage, done, total, metrics)

    monkeypatch.setattr(tqdm_progress, "__call__", interrupted)
    monkeypatch.setattr("qora.ssb.files.np.prod", lambda shape: 10**9)  # blocks of one scan row
    out = tmp_path / "x.h5"
    result = CliRunner().invoke(cli, ["ssb", "simulate", "--scan", "8", "--window", "16", "--quiet", "--out",
                                      str(out)])
    assert result.exit_code == 130, result.output
    assert "Traceback" not in result.output
    assert [line for line in result.output.splitlines() if line.strip()] == [
        f"Interrupted: nothing written to {out} (the partial file was removed)"]
    assert not list(tmp_path.iterdir())  # neither the file nor its temporary
    assert seen[-1][0] == "write" and seen[-1][1] < seen[-1][2]  # it stopped in the middle of the write
    # one count for the run: the simulation's positions, then the write's, of one total
    assert {t for _, _, t in seen} == {2 * 64} and seen[:2] == [("simulate", 0, 128), ("simulate", 64, 128)]


# -- the Python API ---------------------------------------------------------------------------

def _session(sim, **kw):
    options = dict(kv=300.0, alpha_mrad=20.0, scan_step=sim.scan_step, backend="cpu")
    options.update(kw)
    data = options.pop("data", sim.data)
    return Session(data, **options)


def _nan_data(sim):
    data = sim.data.copy()
    data[1, 2, 16, 16] = np.nan
    data[2, 2, 0, 0] = np.inf
    return data


API_ROWS = [
    (lambda s: _session(s, kv=float("nan")), InputError, r"kv .* must be finite, got nan"),
    (lambda s: _session(s, kv=float("inf")), InputError, r"kv .* must be finite"),
    (lambda s: _session(s, kv=-300.0), InputError, r"kv .* must be positive kV, got -300"),
    (lambda s: _session(s, kv=0), InputError, r"kv .* must be positive kV, got 0"),
    (lambda s: _session(s, kv="300"), InputError, r"kv .* must be a number kV, got '300'"),
    (lambda s: _session(s, alpha_mrad=0.0), InputError, r"alpha_mrad .* must be positive mrad"),
    (lambda s: _session(s, alpha_mrad=float("nan")), InputError, r"alpha_mrad .* must be finite"),
    (lambda s: _session(s, scan_step=0.0), InputError, r"scan_step must be positive A, got 0"),
    (lambda s: _session(s, scan_step=-0.4), InputError, r"scan_step must be positive A"),
    (lambda s: _session(s, scan_step=float("inf")), InputError, r"scan_step must be finite"),
    (lambda s: _session(s, rotation=float("nan")), InputError, r"rotation must be finite"),
    (lambda s: _session(s, chunk=0), InputError, r"chunk must be at least 1"),
    (lambda s: _session(s, data=s.data.astype(np.complex64)), InputError, r"data must be real .*complex64"),
    (lambda s: _session(s, data=s.data[0]), InputError, r"must be \(scan_row, scan_col, det_row, det_col\), got "
                                                        r"shape \(16, 32, 32\)"),
    (lambda s: _session(s, data=s.data[:, :0]), InputError, r"data is empty"),
    (lambda s: _session(s, data=np.zeros_like(s.data)), InputError, r"mean diffraction pattern is zero"),
    (lambda s: _session(s, data=-s.data), InputError, r"zero \(or negative\)"),
    (lambda s: _session(s, data=_nan_data(s)), InputError, r"data has 2 non-finite \(NaN or Inf\) values of 262144"),
    (lambda s: _session(s, data=_nan_data(s), detector=DetectorFit((16.0, 16.0), 6.5, 3.0)), InputError,
     r"bright field holds NaN or Inf \(2 non-finite values of 262144\)"),
    (lambda s: _session(s, data=s.data.astype(object)), InputError, r"must hold numbers"),
    (lambda s: _session(s, detector=DetectorFit((200.0, 16.0), 6.5, 3.0)), InputError,
     r"detector\.center \(200, 16\) lies outside the detector's frame of 32 x 32"),
    (lambda s: _session(s, detector=DetectorFit((16.0, -40.0), 6.5, 3.0)), InputError, r"outside the detector's frame"),
    (lambda s: DetectorFit((16.0, 16.0), -6.5, 3.0), InputError, r"detector\.radius must be positive pixels"),
    (lambda s: DetectorFit((16.0, 16.0), 6.5, 0.0), InputError, r"detector\.mrad_per_pixel must be positive"),
    (lambda s: DetectorFit((float("nan"), 16.0), 6.5, 3.0), InputError, r"detector\.center must be two finite"),
    (lambda s: DetectorFit((1.0,), 6.5, 3.0), InputError, r"detector\.center must be two finite"),
    (lambda s: _session(s, detector="auto"), InputError, r"detector must be a DetectorFit"),
    (lambda s: wavelength(float("nan")), InputError, r"kv .* must be finite"),
    (lambda s: Aberrations(C10=float("nan")), InputError, r"C10 must be finite"),
    (lambda s: Aberrations(C99=1.0), InputError, r"unknown aberration 'C99'"),
    (lambda s: Aberrations(C12="big"), InputError, r"C12 must be a number or \(magnitude A, angle rad\)"),
    (lambda s: Aberrations.from_cartesian(C12=(1.0, 2.0, 3.0)), InputError, r"C12 must be cartesian \(a, b\)"),
    (lambda s: simulate(np.zeros((32, 32)), pixel=float("nan"), stride=2, window=32), InputError,
     r"pixel must be finite"),
    (lambda s: simulate(np.zeros((32, 32)), pixel=0.2, stride=2, window=32, kv=-1), InputError, r"kv .* positive"),
    (lambda s: simulate(np.zeros((32, 32)), pixel=0.2, stride=0, window=32), InputError, r"stride must be at least 1"),
    (lambda s: simulate(np.zeros((32, 32)), pixel=0.2, stride=2, window=32, dose=0.0), InputError,
     r"dose must be positive"),
    (lambda s: simulate(np.zeros((32, 32)), pixel=0.2, stride=2, window=32, thickness=-1.0), InputError,
     r"thickness must not be negative"),
    (lambda s: simulate(np.zeros((32, 32)), pixel=0.2, stride=2, window=32, tilt=(0.0, float("inf"))), InputError,
     r"tilt\[1\] must be finite"),
    (lambda s: simulate(np.zeros((32, 32)) + 0j, pixel=0.2, stride=2, window=32), InputError, r"real phases"),
    (lambda s: simulate(np.full((32, 32), np.nan), pixel=0.2, stride=2, window=32), InputError, r"finite phases"),
    (lambda s: simulate(np.broadcast_to(np.zeros(1), (400_000, 400_000)), pixel=0.2, stride=2, window=64),
     MemoryNeeded, r"needs [0-9.]+ GiB of host memory, [0-9.]+ GiB available; a smaller scan"),
]


@pytest.fixture(scope="module")
def session(case):
    return _session(case[1])


SESSION_ROWS = [
    (lambda s: fit(s, rotation=float("nan")), InputError, r"rotation must be finite"),
    (lambda s: fit(s, rotation=0.0, trials=4), InputError, r"trials must be at least 8"),
    (lambda s: fit(s, rotation=0.0, batch=0), InputError, r"batch must be at least 1"),
    (lambda s: fit(s, rotation=0.0, seed=-1), InputError, r"seed must be at least 0"),
    (lambda s: fit(s, rotation=0.0, band=(0.9, 0.2)), InputError, r"band must be \(low, high\) with low < high"),
    (lambda s: fit(s, rotation=0.0, band=(0.2, float("nan"))), InputError, r"band high must be finite"),
    (lambda s: fit(s, rotation=0.0, band=0.5), InputError, r"band must be \(low, high\)"),
    (lambda s: s.image(Aberrations(), "bad"), ValueError,
     r"method must be one of 'ssb', 'thick', 'parallax', 'icom', 'obf', 'wdd'"),
    (lambda s: s.image(Aberrations(), "thick", thickness=float("nan")), ValueError, r"thickness must be non-negative"),
]


@pytest.mark.parametrize("call, error, pattern", API_ROWS)
def test_api_refuses(case, call, error, pattern):
    with pytest.raises(error, match=pattern):
        call(case[1])


@pytest.mark.parametrize("call, error, pattern", SESSION_ROWS)
def test_session_api_refuses(session, call, error, pattern):
    with pytest.raises(error, match=pattern):
        call(session)


@pytest.mark.parametrize("name, pattern", [
    ("empty.h5", r"empty\.h5: cannot be read"), ("truncated.h5", r"truncated\.h5: cannot be read"),
    ("garbage.h5", r"garbage\.h5: cannot be read"), ("other.h5", r"other\.h5: not a qora 4D-STEM dataset"),
    ("three.h5", r"three\.h5: .*\(3, 4, 5\)"), ("nodata.h5", r"nodata\.h5: .*no dataset 'data'"),
    ("three.npy", r"three\.npy: .*\(4, 16, 16\)"), ("truncated.npy", r"truncated\.npy: cannot be read"),
    ("empty.npy", r"empty\.npy: cannot be read"), ("complex.npy", r"complex\.npy: .*real numbers"),
])
def test_readers_name_the_file(case, name, pattern):
    with pytest.raises(FileFormatError, match=pattern):
        load_data(case[0] / name)


def test_an_unknown_format_and_a_missing_file(case, tmp_path):
    (tmp_path / "scan.xyz").write_bytes(b"1234")
    with pytest.raises(FileFormatError, match=r"scan\.xyz: unknown 4D-STEM format '\.xyz'"):
        load_data(tmp_path / "scan.xyz")
    with pytest.raises(FileNotFoundError, match="no such file"):
        load_data(tmp_path / "absent.h5")


# -- the plot of a fit, every branch combination (the fitted rotation once raised KeyError) ----

def _result(rotation_fitted: bool, better: str):
    std = {"C10": 100.0, "C12a": 5.0, "C12b": 18.0}
    order = ["C10", "C12a", "C12b"] + (["rotation"] if rotation_fitted else [])
    err = {n: 1.0 for n in std}
    if rotation_fitted:
        err["rotation"] = 0.002
    thick = {**std, "thickness": 40.0, "tilt_y": 0.001, "tilt_x": -0.001}
    terr = {**{n: 1.0 for n in std}, "thickness": 5.0, "tilt_y": 1e-4, "tilt_x": 1e-4}
    return {"rotation_rad": 0.02 if rotation_fitted else 0.0,
            "standard": {"parameters": std, "agreement": 0.5, "parameter_order": order, "uncertainty": err},
            "thick": {"parameters": thick, "agreement": 0.51, "parameter_order": list(thick), "uncertainty": terr},
            "better": better}


@pytest.mark.parametrize("rotation_fitted", [True, False], ids=["rotation-fitted", "rotation-given"])
@pytest.mark.parametrize("better", ["standard", "thick"])
def test_plot_fit_for_every_branch_combination(session, tmp_path, rotation_fitted, better):
    result = _result(rotation_fitted, better)
    plot_fit(tmp_path / "fit.png", session, result)
    assert (tmp_path / "fit.png").read_bytes()[:4] == b"\x89PNG"
    assert session.rotation == 0.0  # restored
    assert "rotation" not in result["standard"]["parameters"]  # the result is not changed


def test_a_fit_with_the_rotation_fitted_plots(session, monkeypatch, tmp_path):
    """What fit_session returns with the rotation fitted ('rotation' in the parameter order, not in the
    parameters: the shape the synthetic results above copy) plots; the rotation search itself is
    stubbed (its cost is the core tests')."""
    import sys

    monkeypatch.setattr(sys.modules["qora.ssb.fitting"], "fit_rotation",
                        lambda s, names, **kw: (0.0, {"C10": 100.0, "C12a": 5.0, "C12b": 18.0}, 0.5))
    result = fit(session, tilt=False)
    assert result["standard"]["parameter_order"][-1] == "rotation"
    assert "rotation" not in result["standard"]["parameters"]
    plot_fit(tmp_path / "fit.png", session, result)  # raised KeyError: 'rotation'
    assert (tmp_path / "fit.png").read_bytes()[:4] == b"\x89PNG"


# -- progress: one count over the whole fit, reported as the work goes -------------------------

def test_fit_reports_the_search_and_newton_as_they_happen(session):
    reports = []
    fit(session, rotation=0.0, trials=24, progress=lambda stage, done, total, m: reports.append((stage, done, total)))
    totals = {t for _, _, t in reports}
    # one bar: trials, then Newton's steps at most of each start of each branch (4 + 1 standard, 3 thick,
    # 1 incoherent: depth_model "auto" counts it, and a film too thin for it jumps to the end)
    assert totals == {24 + 20 * 5 + 60 * 3 + 60}
    done = [d for _, d, _ in reports]
    assert done == sorted(done) and done[0] == 0 and done[-1] == 364
    stages = [s for s, _, _ in reports]
    assert [d for s, d, _ in reports if s == "search"] == [0, 8, 16, 24]  # every pass of the search
    assert "newton (standard)" in stages and "newton (thick)" in stages
    assert len([s for s in stages if s.startswith("newton")]) >= 4  # Newton's steps, not one jump


def test_fit_prints_c12_with_its_angle(case, tmp_path):
    folder, _ = case
    out = tmp_path / "fit.json"
    result = CliRunner().invoke(cli, ["ssb", "fit", str(folder / "good.h5"), "--rotation", "0", "--no-tilt",
                                      "--trials", "16", "--backend", "cpu", "--quiet", "--out", str(out)])
    assert result.exit_code == 0, result.output
    p = json.loads(out.read_text())["standard"]["parameters"]
    angle = math.degrees(math.atan2(p["C12b"], p["C12a"]) / 2)
    shown = re.search(r"C12 ([0-9.]+) A at (-?[0-9.]+) deg", result.output)
    assert shown, result.output
    assert float(shown[1]) == pytest.approx(math.hypot(p["C12a"], p["C12b"]), abs=0.05)
    assert float(shown[2]) == pytest.approx(angle, abs=0.05)


def test_an_option_beside_the_files_value_is_applied_with_a_warning(case, tmp_path):
    folder, _ = case
    result = CliRunner().invoke(cli, ["ssb", "image", str(folder / "good.h5"), "--kv", "200", "--out",
                                      str(tmp_path / "i.h5")])
    assert result.exit_code == 0, result.output
    assert "warning: --kv 200 kV replaces the 300 kV that good.h5 records" in result.output
    with h5py.File(tmp_path / "i.h5") as f:
        assert f.attrs["kv"] == 200.0


def test_read_dataset_gives_back_what_was_written(case):
    folder, sim = case
    data, meta = read_dataset(folder / "good.h5")
    np.testing.assert_array_equal(data, sim.data.astype(np.float32))
    assert meta["aberrations"].values["C12"][0] == pytest.approx(20.0)


def test_the_electron_optics_ranges_hold_in_the_library_too():
    """The library refuses what the CLI's options refuse (a script, or a file recording kv 1e-9), with the reason;
    a pixel too coarse for the aperture is refused before any atom is placed, and a field that would need more
    atoms than memory holds is a MemoryNeeded, not numpy's allocation error."""
    from qora.io.errors import InputError, MemoryNeeded
    from qora.ssb import amorphous_slices, wavelength
    from qora.ssb.optics import semiangle
    from qora.ssb.simulation import check_sampling

    with pytest.raises(InputError, match=r"kv \(the accelerating voltage\) 1e-09 kV is outside 1-5000 kV: electron"):
        wavelength(1e-9)
    with pytest.raises(InputError, match=r"outside 0\.1-500 mrad"):
        semiangle(1e-9)
    assert wavelength(300.0) == pytest.approx(0.019687, rel=1e-4)  # 300 kV: 1.9687 pm
    with pytest.raises(InputError, match="Nyquist"):
        check_sampling(5000.0, 300.0, 20.0)
    assert check_sampling(0.2, 300.0, 20.0) == pytest.approx(wavelength(300.0))
    with pytest.raises(MemoryNeeded, match="atoms a slice"):
        amorphous_slices((32, 32), 5e6)  # 1.3e15 atoms
