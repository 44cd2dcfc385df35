"""Bad input to qora.phase, through the command line and the Python API: each row gives the call,
the error class and a regex of the message. A CLI row must end with exit status 2, exactly one
"Error:" line and no traceback, write no output, and leave every input byte-identical."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

from qora.cli import cli
from qora.io.errors import FileFormatError, InputError, MemoryNeeded, OutputError
from qora.io.patterns import load_mask, load_pattern
from qora.phase import Recipe, RecipeError, Solver, objects, reconstruct
from qora.phase.files import write_pattern
from qora.testing import error_line

OBJ, INTENSITY = objects.simulate("triangle", 32)
SUPPORT = objects.support_of(OBJ)


def _files(d: Path) -> dict:
    """Good and bad inputs, written once."""
    f = {}
    f["data"] = d / "pattern.cxi"
    write_pattern(f["data"], INTENSITY, truth=OBJ)
    f["other"] = d / "sub" / "pattern.cxi"  # the same name in another folder
    f["other"].parent.mkdir()
    write_pattern(f["other"], INTENSITY)
    np.save(d / "support.npy", SUPPORT)
    f["support"] = d / "support.npy"
    np.save(d / "zero_support.npy", np.zeros_like(SUPPORT))
    f["zero_support"] = d / "zero_support.npy"
    np.save(d / "half_support.npy", SUPPORT * 0.5)
    f["half_support"] = d / "half_support.npy"
    np.save(d / "small_mask.npy", np.zeros((8, 8), bool))
    f["small_mask"] = d / "small_mask.npy"
    (d / "empty.npy").write_bytes(b"")
    f["empty"] = d / "empty.npy"
    f["truncated"] = d / "truncated.cxi"
    f["truncated"].write_bytes(f["data"].read_bytes()[:1000])
    (d / "garbage.h5").write_bytes(b"not an HDF5 file at all")
    f["garbage_h5"] = d / "garbage.h5"
    with h5py.File(d / "nodata.h5", "w") as h:
        h["foo/bar"] = np.ones(3)
    f["nodata"] = d / "nodata.h5"
    with h5py.File(d / "rank1.h5", "w") as h:
        h["entry_1/data_1/data"] = np.ones(16)
    f["rank1"] = d / "rank1.h5"
    np.save(d / "complex.npy", np.sqrt(INTENSITY) * np.exp(1j))
    f["complex"] = d / "complex.npy"
    np.save(d / "text.npy", np.array([["a", "b"], ["c", "d"]]))
    f["text"] = d / "text.npy"
    np.save(d / "boolean.npy", INTENSITY > INTENSITY.mean())  # a mask in the pattern's place
    f["boolean"] = d / "boolean.npy"
    nan = INTENSITY.copy()
    nan[3, 4] = np.nan
    np.save(d / "nan.npy", nan)
    f["nan"] = d / "nan.npy"
    np.save(d / "negative.npy", -INTENSITY)
    f["negative"] = d / "negative.npy"
    for suffix in ("npz", "tif", "edf"):
        f[f"garbage_{suffix}"] = d / f"garbage.{suffix}"
        f[f"garbage_{suffix}"].write_bytes(b"\x00garbage bytes, not the format" * 3)
    f["dir"] = d / "a_folder"
    f["dir"].mkdir()
    f["file_out"] = d / "existing.txt"
    f["file_out"].write_text("keep me")
    return f


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return _files(tmp_path_factory.mktemp("phase_bad"))


def _hashes(d: Path) -> dict:
    return {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.rglob("*")) if p.is_file()}


RUN = ["phase", "run", "--backend", "cpu", "--recipe", "ER**3", "--starts", "1", "--quiet"]

# (name, args with {key} naming files of the fixture and {out} a fresh output path, regex)
CLI_ROWS = [
    ("out is the input", RUN + ["{data}", "--out", "{data}"], r"output .*pattern\.cxi is the input"),
    ("out is the input via ..", RUN + ["{data}", "--out", "{dir}/../pattern.cxi"], r"is the input"),
    ("out is a folder", RUN + ["{data}", "--out", "{dir}"], r"a_folder is a folder"),
    ("zarr out refused", RUN + ["{data}", "--out", "{out}.zarr"], r"written as a CXI/HDF5 file"),
    ("plot not png", RUN + ["{data}", "--out", "{out}.cxi", "--plot", "{out}.jpg"], r"--plot .*PNG"),
    ("several files into a file", RUN + ["{data}", "{support}", "--out", "{file_out}"], r"existing\.txt is a file"),
    ("two results of one name", RUN + ["{data}", "{other}", "--out", "{out}"], r"would both be written"),
    ("empty file", RUN + ["{empty}", "--out", "{out}.cxi"], r"empty\.npy: the file is empty"),
    ("truncated cxi", RUN + ["{truncated}", "--out", "{out}.cxi"], r"truncated\.cxi: cannot be read.*truncated"),
    ("not hdf5", RUN + ["{garbage_h5}", "--out", "{out}.cxi"], r"garbage\.h5: not an HDF5 file"),
    ("no dataset", RUN + ["{nodata}", "--out", "{out}.cxi"], r"nodata\.h5: no pattern found.*holds foo/bar"),
    ("wrong rank", RUN + ["{rank1}", "--out", "{out}.cxi"], r"rank1\.h5: the pattern has shape \(16,\).*2D or 3D"),
    ("complex pattern", RUN + ["{complex}", "--out", "{out}.cxi"], r"complex\.npy: .*complex.*abs\(x\)\*\*2"),
    ("text pattern", RUN + ["{text}", "--out", "{out}.cxi"], r"text\.npy: .*must hold numbers"),
    ("boolean pattern", RUN + ["{boolean}", "--out", "{out}.cxi"], r"boolean\.npy: the pattern is boolean"),
    ("garbage npz", RUN + ["{garbage_npz}", "--out", "{out}.cxi"], r"garbage\.npz: not an \.npz archive"),
    ("garbage tif", RUN + ["{garbage_tif}", "--out", "{out}.cxi"], r"garbage\.tif: cannot be read"),
    ("garbage edf", RUN + ["{garbage_edf}", "--out", "{out}.cxi"], r"garbage\.edf: cannot be read"),
    ("NaN measured", RUN + ["{nan}", "--out", "{out}.cxi"], r"1 non-finite .* mask them"),
    ("negative", RUN + ["{negative}", "--out", "{out}.cxi"], r"negative values"),
    ("bad recipe", RUN + ["{data}", "--recipe", "HIO**", "--out", "{out}.cxi"], r"cannot parse recipe"),
    ("NaN beta", RUN + ["{data}", "--recipe", "HIO(beta=nan)**5", "--out", "{out}.cxi"], r"beta"),
    ("mask shape", RUN + ["{data}", "--mask", "{small_mask}", "--out", "{out}.cxi"], r"mask shape \(8, 8\)"),
    ("empty support", RUN + ["{data}", "--support", "{zero_support}", "--out", "{out}.cxi"], r"support is empty"),
    ("fractional support", RUN + ["{data}", "--support", "{half_support}", "--out", "{out}.cxi"],
     r"half_support\.npy: the support must be boolean"),
    ("cpu has no graph", RUN + ["{data}", "--variant", "graph", "--out", "{out}.cxi"], r"variant"),
    ("batch zero", RUN + ["{data}", "--batch", "0", "--out", "{out}.cxi"], r"--batch.*at least 1"),
    ("starts zero", RUN + ["{data}", "--starts", "0", "--out", "{out}.cxi"], r"--starts"),
    ("simulate 4096^3 prism", ["phase", "simulate", "--object", "prism", "--size", "4096", "--out", "{out}.cxi"],
     r"needs [\d.]+ GiB of host memory, [\d.]+ GiB available; a smaller size \(--size"),
    ("simulate zarr", ["phase", "simulate", "--out", "{out}.zarr"], r"CXI/HDF5"),
    ("simulate NaN photons", ["phase", "simulate", "--photons", "nan", "--out", "{out}.cxi"], r"photons must be finite"),
    ("compare a pattern as result", ["phase", "compare", "{data}", "{data}"], r"not a qora phase result"),
    ("compare garbage", ["phase", "compare", "{garbage_h5}", "{data}"], r"garbage\.h5"),
]


def _invoke(args, files, out):
    names = {k: str(v) for k, v in files.items()}
    args = [a.format(out=out, **names) for a in args]
    return CliRunner().invoke(cli, args)


def _one_error(result, pattern):
    line = error_line(result)
    assert re.search(pattern, line), line


@pytest.mark.parametrize("name,args,pattern", CLI_ROWS, ids=[r[0] for r in CLI_ROWS])
def test_cli_bad_input(files, tmp_path, name, args, pattern):
    root = files["data"].parent
    before = _hashes(root)
    out = tmp_path / "result"
    _one_error(_invoke(args, files, out), pattern)
    assert not list(tmp_path.iterdir()), "an output appeared"
    assert _hashes(root) == before, "an input changed (or an output appeared beside it)"


def test_cli_run_that_cannot_fit_the_host_stops_before_work(files, tmp_path, monkeypatch):
    import qora.backend.host as host

    monkeypatch.setattr(host, "available_memory", lambda: 2**10)  # 1 KiB free
    before = _hashes(files["data"].parent)
    out = tmp_path / "r.cxi"
    result = _invoke(RUN + ["{data}", "--batch", "2", "--starts", "4", "--out", "{out}"], files, out)
    _one_error(result, r"needs [\d.]+ GiB of host memory, 0\.0 GiB available; fewer starts iterated together "
                       r"shrink it \(--batch.*--starts")
    assert not out.exists() and _hashes(files["data"].parent) == before


def test_one_bad_file_fails_alone_with_a_true_summary(files, tmp_path):
    good = tmp_path / "in" / "good.cxi"
    good.parent.mkdir()
    good.write_bytes(files["data"].read_bytes())
    bad = tmp_path / "in" / "broken.cxi"
    bad.write_bytes(files["truncated"].read_bytes())
    later = tmp_path / "in" / "later.npy"
    np.save(later, INTENSITY)
    before = _hashes(tmp_path / "in")
    result = CliRunner().invoke(cli, RUN + [str(good), str(bad), str(later), "--out", str(tmp_path / "out")])
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    assert re.search(r"FAILED broken: FileFormatError: .*broken\.cxi: cannot be read", result.output)
    summary = next(line for line in result.output.splitlines() if " done, " in line)
    assert re.match(r"2 done, 1 failed in \d+\.\d s in this process, one file after another; results in ", summary)
    assert "0 workers" not in result.output
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["good.cxi", "later.cxi"]
    assert _hashes(tmp_path / "in") == before


# --- the Python API ----------------------------------------------------------------------

def _run(**kw):
    intensity = kw.pop("intensity", INTENSITY)
    return lambda: reconstruct(intensity, backend="cpu", recipe=kw.pop("recipe", "ER**2"), **kw)


API_ROWS = [
    ("starts 0", _run(starts=0), InputError, r"starts must be at least 1"),
    ("starts NaN", _run(starts=float("nan")), InputError, r"starts must be an integer"),
    ("starts 2.5", _run(starts=2.5), InputError, r"starts must be an integer"),
    ("seed negative", _run(seed=-1), InputError, r"seed must be at least 0"),
    ("batch 0", _run(batch=0), InputError, r"batch"),
    ("batch True", _run(batch=True), InputError, r"batch"),
    ("sync_every 0", _run(sync_every=0), InputError, r"sync_every must be at least 1"),
    ("rank", _run(rank="best"), InputError, r"rank must be one of"),
    ("variant", _run(variant="gpu"), InputError, r"variant must be one of"),
    ("complex intensity", _run(intensity=INTENSITY + 0j), InputError, r"abs\(x\)\*\*2"),
    ("NaN intensity", _run(intensity=np.where(INTENSITY > 1, np.nan, INTENSITY)), InputError, r"non-finite"),
    ("Inf intensity", _run(intensity=np.full((8, 8), np.inf)), InputError, r"non-finite"),
    ("negative intensity", _run(intensity=-INTENSITY), InputError, r"negative"),
    ("zero intensity", _run(intensity=np.zeros((8, 8))), InputError, r"zero everywhere"),
    ("1D intensity", _run(intensity=np.ones(8)), InputError, r"2D or 3D"),
    ("text intensity", _run(intensity=np.full((4, 4), "x")), InputError, r"numbers"),
    ("mask shape", _run(mask=np.zeros((8, 8), bool)), InputError, r"mask shape \(8, 8\)"),
    ("mask complex", _run(mask=np.zeros((32, 32), complex)), InputError, r"mask must be boolean"),
    ("mask everything", _run(mask=np.ones((32, 32), bool)), InputError, r"hides every pixel"),
    ("support shape", _run(support=np.ones((8, 9), bool)), InputError, r"support shape \(8, 9\)"),
    ("support float", _run(support=SUPPORT * 0.5), InputError, r"support must be boolean"),
    ("support all zero", _run(support=np.zeros((32, 32), bool)), InputError, r"support is empty"),
    ("recipe", _run(recipe="HIO**"), RecipeError, r"cannot parse recipe"),
    ("recipe type", lambda: Recipe.parse(5), RecipeError, r"recipe must be a string"),
    ("recipe NaN beta", lambda: Recipe.parse("HIO(beta=nan)**3"), RecipeError, r"beta"),
    ("recipe Inf sigma", lambda: Recipe.parse("HIO(sw=5, sigma=inf)**30"), RecipeError, r"sigma must be a finite"),
    ("recipe zero iterations", lambda: Recipe.parse("ER**0"), RecipeError, r"iterations must be a positive"),
    ("Solver free_fraction NaN", lambda: Solver(INTENSITY, backend="cpu", free_fraction=float("nan")), InputError,
     r"free_fraction must be finite"),
    ("Solver free_fraction 0.7", lambda: Solver(INTENSITY, backend="cpu", free_fraction=0.7), InputError,
     r"free_fraction must be in \[0, 0\.5\)"),
    ("Solver batch -1", lambda: Solver(INTENSITY, backend="cpu", batch=-1), InputError, r"batch must be at least 1"),
    ("Solver first_start", lambda: Solver(INTENSITY, backend="cpu").run(recipe="ER**1", first_start=-2), InputError,
     r"first_start"),
    ("Solver free_llk without free", lambda: Solver(INTENSITY, backend="cpu").run(recipe="ER**1", rank="free_llk"),
     InputError, r"held-out pixels"),
    ("simulate name", lambda: objects.simulate("sphere"), InputError, r"object must be one of"),
    ("simulate n 0", lambda: objects.simulate("triangle", 0), InputError, r"n \(the size\) must be at least"),
    ("simulate n NaN", lambda: objects.simulate("triangle", float("nan")), InputError, r"must be an integer"),
    ("simulate photons", lambda: objects.simulate("triangle", 32, photons=-1), InputError, r"photons must be positive"),
    ("simulate photons NaN", lambda: objects.simulate("triangle", 32, photons=float("nan")), InputError,
     r"photons must be finite"),
    ("simulate too large", lambda: objects.simulate("cut_prism", 4096), MemoryNeeded, r"needs .*GiB.*--size"),
]


@pytest.mark.parametrize("name,call,error,pattern", API_ROWS, ids=[r[0] for r in API_ROWS])
def test_api_bad_input(name, call, error, pattern):
    with pytest.raises(error, match=pattern):
        call()


@pytest.mark.parametrize("key,error,pattern", [
    ("empty", FileFormatError, r"empty"), ("truncated", FileFormatError, r"truncated"),
    ("garbage_h5", FileFormatError, r"not an HDF5"), ("nodata", FileFormatError, r"holds foo/bar \(3,\)"),
    ("rank1", FileFormatError, r"2D or 3D"), ("complex", InputError, r"abs\(x\)\*\*2"),
    ("boolean", InputError, r"boolean \(a mask or a support\?\)"),
    ("text", FileFormatError, r"numbers"), ("garbage_npz", FileFormatError, r"npz"),
    ("garbage_tif", FileFormatError, r"cannot be read"), ("garbage_edf", FileFormatError, r"cannot be read"),
    ("dir", FileFormatError, r"is a folder"),
])
def test_readers_name_the_file(files, key, error, pattern):
    with pytest.raises(error, match=pattern) as info:
        load_pattern(files[key])
    assert str(files[key]) in str(info.value)


def test_mask_file_of_the_wrong_shape_and_an_hdf5_mask(files, tmp_path):
    with pytest.raises(InputError, match=r"mask shape \(8, 8\) \(.*small_mask\.npy\) differs"):
        load_pattern(files["data"], mask=files["small_mask"])
    path = tmp_path / "mask.h5"  # a mask file holding only a CXI mask path
    with h5py.File(path, "w") as h:
        h["entry_1/instrument_1/detector_1/mask"] = np.eye(4, dtype=np.uint8)
    np.testing.assert_array_equal(load_mask(path), np.eye(4, dtype=bool))


def test_the_device_estimate_names_batch_and_starts():
    from qora.phase.checks import check_run_memory, run_bytes

    class FakeCuda:  # the check reads the GPU's free memory through the backend object
        is_cuda = True

        class xp:
            class cuda:
                class Device:
                    mem_info = (10 * 2**30, 80 * 2**30)

            @staticmethod
            def get_default_memory_pool():
                class Pool:
                    def free_bytes(self):
                        return 0
                return Pool()

    with pytest.raises(MemoryNeeded, match=r"graph reconstruction of a 1024x1024x1024 pattern \(8 starts at a time\) "
                                           r"needs 148\.5 GiB of device memory, 10\.0 GiB available; fewer starts "
                                           r"iterated together shrink it \(--batch.*--starts\); one at a time needs "
                                           r"about 29\.5 GiB"):
        check_run_memory(FakeCuda(), "graph", (1024,) * 3, 8, default_support=False)
    with pytest.raises(MemoryNeeded, match=r"too large for it.*--backend cpu"):
        check_run_memory(FakeCuda(), "graph", (1024,) * 3, 1, default_support=False)
    check_run_memory(FakeCuda(), "graph", (256,) * 3, 8, default_support=True)  # 2.3 GiB: fits
    assert run_bytes("graph", (512,) * 3, 1, default_support=False) / 512**3 == 29.5  # the measured whole run


def test_progress_counts_the_whole_run_as_iterations_complete():
    seen = []

    def progress(stage, done, total, metrics):
        seen.append((stage, done, total))

    reconstruct(INTENSITY, support=SUPPORT, recipe="HIO**20 ER**10", starts=3, backend="cpu", sync_every=10,
                progress=progress)
    assert [s[1] for s in seen] == list(range(10, 91, 10)) and {s[2] for s in seen} == {90}
    assert [s[0] for s in seen[:4]] == ["start 1 of 3: HIO", "start 1 of 3: HIO", "start 1 of 3: ER",
                                        "start 2 of 3: HIO"]
    seen.clear()
    reconstruct(INTENSITY, support=SUPPORT, recipe="ER**10", starts=3, batch=2, backend="cpu", progress=progress)
    assert [s[:2] for s in seen] == [("starts 1-2 of 3: ER", 20), ("start 3 of 3: ER", 30)]  # 10 iterations of 2


def test_quiet_is_documented_in_the_long_commands():
    for command in (["phase", "run"],):
        out = CliRunner().invoke(cli, [*command, "--help"])
        assert "--quiet" in out.output and "No progress bar" in out.output


def test_what_the_starts_keep_is_checked_against_the_memory_before_any_work(monkeypatch):
    """Issue 40: 10,000 kept 256^2 starts (about 6 GB) ran until an allocation inside FFTW aborted the process; the
    real-object search holds all its starts at once. Both are refused first, saying what to change."""
    from qora.phase import checks, reconstruct
    from qora.phase.detector import Detector, lithograph, record

    monkeypatch.setattr(checks, "available_memory", lambda: 2**27)  # 128 MiB
    _, intensity = objects.simulate("triangle", 64, photons=1e8, seed=0)
    with pytest.raises(MemoryNeeded, match=r"keeping 5000 starts of a 64x64 pattern .*no --keep-all"):
        reconstruct(intensity, starts=5000, keep_all=True, recipe="HIO**2", backend="cpu")
    counts, mask = record(lithograph(128), Detector(photons=1e8))
    with pytest.raises(MemoryNeeded, match=r"4000 starts of a 128x128 pattern .*fewer starts"):
        reconstruct(counts, mask=mask, starts=4000, backend="cpu", progress=lambda *a: pytest.fail("it ran"))
    assert reconstruct(intensity, starts=2, keep_all=True, recipe="HIO**2", backend="cpu").objects.shape[0] == 2
    # on a host backend the kept results and one start's search share the memory: room for the results alone is
    # not enough (10,000 kept 512^2 starts passed a check that counted only the results, 23.7 of 24 GB)
    from qora.phase import envelope

    pixels = 128 * 128
    kept = 40 * (envelope.ITERATIONS * 8.0 + checks.KEPT_BYTES_PER_PIXEL * pixels)
    monkeypatch.setattr(checks, "available_memory", lambda: kept + 0.5 * checks.ENVELOPE_BYTES_PER_PIXEL * pixels)
    with pytest.raises(MemoryNeeded, match=r"40 starts of a 128x128 pattern"):
        reconstruct(counts, mask=mask, starts=40, backend="cpu", progress=lambda *a: pytest.fail("it ran"))
