"""Bad input to qora.holo, through the command line and the Python API: each row is a call, the error
class it must raise and a regex of its message. For the CLI rows: exit status 2, exactly one line
starting "Error:", no traceback, no output written, and the input files byte-identical afterwards."""

import hashlib
import types

import h5py
import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qora import holo
from qora.cli import cli
from qora.holo import api
from qora.holo import phantoms as P
from qora.holo import reference as R
from qora.io.errors import FileFormatError, InputError, MemoryNeeded, OutputError

SETTINGS = settings(max_examples=40, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A small Qora hologram file, the same data as .npy stacks, and damaged files."""
    d = tmp_path_factory.mktemp("bad")
    path = d / "h.h5"
    out = CliRunner().invoke(cli, ["holo", "simulate", "--size", "16", "--angles", "4", "--spheres",
                                   "0,0,0,0.4,1.36", "--out", str(path)])
    assert out.exit_code == 0, out.output
    holos, bgs, g, hp, _ = holo.read_holograms(path)
    np.save(d / "h.npy", holos)
    np.save(d / "b.npy", bgs)
    np.save(d / "b_small.npy", bgs[:, :16, :16])
    nan = holos.copy()
    nan[0, 1, 2] = np.nan
    nan[1, 0, 0] = np.inf
    np.save(d / "h_nan.npy", nan)
    np.save(d / "h_complex.npy", holos.astype(complex))
    (d / "empty.h5").write_bytes(b"")
    raw = path.read_bytes()
    (d / "truncated.h5").write_bytes(raw[: len(raw) // 3])
    (d / "garbage.h5").write_bytes(bytes(range(256)) * 8)
    with h5py.File(d / "nodata.h5", "w") as f:
        f.attrs["qora_kind"] = "holo_holograms"
    with h5py.File(d / "other.h5", "w") as f:
        f.attrs["qora_kind"] = "something else"
        f["holograms"] = holos
    with h5py.File(d / "nogeometry.h5", "w") as f:
        f.attrs["qora_kind"] = "holo_holograms"
        f["holograms"], f["backgrounds"] = holos, bgs
    with h5py.File(d / "badgeometry.h5", "w") as f:
        f.attrs["qora_kind"] = "holo_holograms"
        f["holograms"], f["backgrounds"], f["illuminations"] = holos, bgs, g.illuminations
        for k, v in dict(wavelength_um=0.0, medium_index=1.333, pixel_um=0.1, n=16, na_detection=1.2,
                         hologram_pixel_um=0.05).items():
            f.attrs[k] = v
    (d / "afile.zarr").write_text("not a store")
    (d / "folder.h5").mkdir()
    return d


def _hashes(d):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.iterdir()) if p.is_file()}


OPTICS = ["--wavelength", "0.532", "--pixel", "0.1", "--medium-index", "1.333", "--na", "1.2"]

# (arguments ({d}: the files' folder), error message regex)
CLI_ROWS = [
    # data loss: an output that is an input, or a folder
    (["holo", "reconstruct", "{d}/h.h5", "--out", "{d}/h.h5"], r"output .*h\.h5 is the input"),
    (["holo", "reconstruct", "{d}/h.npy", "{d}/b.npy", *OPTICS, "--out", "{d}/b.npy"], r"is the input .*b\.npy"),
    (["holo", "reconstruct", "{d}/h.h5", "--out", "{d}/new.h5", "--plot", "{d}/h.h5"], r"is the input"),
    (["holo", "reconstruct", "{d}/h.h5", "--out", "{d}/folder.h5"], r"folder\.h5 is a folder"),
    (["holo", "reconstruct", "{d}/h.h5", "--out", "{d}/afile.zarr"], r"not a Zarr store"),
    (["holo", "reconstruct", "{d}/h.h5", "--out", "{d}/v.npy"], r"--out.*ending in \.h5"),
    (["holo", "phase", "{d}/h.npy", "{d}/b.npy", "--out", "{d}/b.npy"], r"output .*b\.npy is the input"),
    (["holo", "phase", "{d}/h.npy", "{d}/b.npy", "--out", "{d}/p.tif"], r"ending in \.h5"),
    (["holo", "phase", "{d}/h.npy", "{d}/b.npy", "--out", "{d}/p.h5", "--plot", "{d}/h.npy"], r"is the input"),
    # a Qora file's recorded geometry is not silently replaced
    (["holo", "reconstruct", "{d}/h.h5", "--wavelength", "0.6", "--out", "{d}/v.h5"],
     r"records wavelength 0\.532 um; --wavelength 0\.6 conflicts"),
    (["holo", "reconstruct", "{d}/h.h5", "--pixel", "0.2", "--out", "{d}/v.h5"], r"records pixel 0\.1 um; --pixel"),
    (["holo", "reconstruct", "{d}/h.h5", "--hologram-pixel", "0.1", "--out", "{d}/v.h5"],
     r"records hologram pixel 0\.05 um"),
    (["holo", "reconstruct", "{d}/h.h5", "--geometry", "rotation", "--out", "{d}/v.h5"],
     r"records the scan geometry; --geometry rotation conflicts"),
    (["holo", "reconstruct", "{d}/h.h5", "--angles", "0:360:5", "--out", "{d}/v.h5"], r"--angles 0:360:5 conflicts"),
    (["holo", "reconstruct", "{d}/h.h5", "--na", "1.5", "--out", "{d}/v.h5"], r"na_detection \(1\.5\) cannot exceed"),
    (["holo", "reconstruct", "{d}/h.h5", "--wavelength", "-0.6", "--out", "{d}/v.h5"], r"--wavelength.*range"),
    # non-finite, zero, negative or unphysical values
    (["holo", "reconstruct", "{d}/h.h5", "--method", "tv", "--tv-weight", "nan", "--out", "{d}/v.h5"],
     r"--tv-weight.*not a finite number"),
    (["holo", "reconstruct", "{d}/h.h5", "--method", "bpm", "--tv-weight", "inf", "--out", "{d}/v.h5"],
     r"--tv-weight.*not a finite number"),
    (["holo", "reconstruct", "{d}/h.h5", "--method", "tv", "--tv-weight", "-1", "--out", "{d}/v.h5"],
     r"--tv-weight.*range"),
    (["holo", "reconstruct", "{d}/h.npy", "{d}/b.npy", *OPTICS[:-1], "nan", "--out", "{d}/v.h5"],
     r"--na.*not a finite number"),
    (["holo", "reconstruct", "{d}/h.npy", "{d}/b.npy", *OPTICS[2:], "--wavelength", "0", "--out", "{d}/v.h5"],
     r"--wavelength.*range"),
    (["holo", "reconstruct", "{d}/h.npy", "{d}/b.npy", *OPTICS[:2], *OPTICS[4:], "--pixel", "0", "--medium-index",
      "1.333", "--out", "{d}/v.h5"], r"--pixel.*range"),
    (["holo", "reconstruct", "{d}/h.npy", "{d}/b.npy", *OPTICS[:6], "--na", "1.4", "--out", "{d}/v.h5"],
     r"--na.*exceeds --medium-index 1\.333"),
    (["holo", "reconstruct", "{d}/h.npy", "{d}/b.npy", *OPTICS[:4], "--medium-index", "inf", "--na", "1.2",
      "--out", "{d}/v.h5"], r"--medium-index.*not a finite number"),
    (["holo", "reconstruct", "{d}/h.npy", "{d}/b.npy", *OPTICS, "--hologram-pixel", "1e9", "--out", "{d}/v.h5"],
     r"give fields of .* pixels"),
    # options the method or the geometry would not read
    (["holo", "reconstruct", "{d}/h.h5", "--tv-weight", "1e-3", "--out", "{d}/v.h5"], r"gp does not use --tv-weight"),
    (["holo", "reconstruct", "{d}/h.h5", "--batch", "2", "--out", "{d}/v.h5"], r"does not use --batch"),
    (["holo", "reconstruct", "{d}/h.h5", "--method", "bpm", "--oversample", "2", "--out", "{d}/v.h5"],
     r"bpm does not use --oversample"),
    (["holo", "reconstruct", "{d}/h.h5", "--method", "bpm", "--gridding", "exact", "--out", "{d}/v.h5"],
     r"bpm does not use --gridding"),
    (["holo", "reconstruct", "{d}/h.h5", "--gridding", "linear", "--out", "{d}/v.h5"], r"--gridding"),
    (["holo", "reconstruct", "{d}/h.npy", "{d}/b.npy", *OPTICS, "--angles", "0:360:5", "--out", "{d}/v.h5"],
     r"--geometry rotation"),
    (["holo", "phase", "{d}/b.npy", "{d}/b.npy", "--na", "1.2", "--out", "{d}/p.h5"], r"--na needs --wavelength"),
    (["holo", "phase", "{d}/b.npy", "{d}/b.npy", "--wavelength", "0.5", "--refocus", "1", "--out", "{d}/p.h5"],
     r"need --wavelength and --medium-index"),
    (["holo", "phase", "{d}/h.npy", "{d}/b.npy", "--out", "{d}/p.h5"], r"HOLOGRAM must be one hologram"),
    # damaged or foreign files
    (["holo", "reconstruct", "{d}/empty.h5", "--out", "{d}/v.h5"], r"empty\.h5.*cannot be read"),
    (["holo", "reconstruct", "{d}/truncated.h5", "--out", "{d}/v.h5"], r"truncated\.h5"),
    (["holo", "reconstruct", "{d}/garbage.h5", "--out", "{d}/v.h5"], r"garbage\.h5.*cannot be read"),
    (["holo", "reconstruct", "{d}/nodata.h5", "--out", "{d}/v.h5"], r"nodata\.h5: no dataset 'holograms'"),
    (["holo", "reconstruct", "{d}/other.h5", "--out", "{d}/v.h5"], r"other\.h5: not a qora hologram file"),
    (["holo", "reconstruct", "{d}/nogeometry.h5", "--out", "{d}/v.h5"], r"nogeometry\.h5: the geometry record"),
    (["holo", "reconstruct", "{d}/badgeometry.h5", "--out", "{d}/v.h5"],
     r"badgeometry\.h5: invalid geometry record .*wavelength must be positive"),
    (["holo", "reconstruct", "{d}/h_nan.npy", "{d}/b.npy", *OPTICS, "--out", "{d}/v.h5"],
     r"holograms: 2 non-finite \(NaN or Inf\) values"),
    (["holo", "reconstruct", "{d}/h_complex.npy", "{d}/b.npy", *OPTICS, "--out", "{d}/v.h5"],
     r"h_complex\.npy: holds complex values"),
    (["holo", "reconstruct", "{d}/h.npy", "{d}/b_small.npy", *OPTICS, "--out", "{d}/v.h5"],
     r"of the backgrounds' shape"),
    (["holo", "reconstruct", "{d}/h.npy", "{d}/b.npy", *OPTICS, "--geometry", "rotation", "--angles", "a:b:c",
      "--out", "{d}/v.h5"], r"not START:STOP:COUNT"),
    (["holo", "reconstruct", "{d}/h.npy", "{d}/b.npy", *OPTICS, "--geometry", "rotation", "--angles", "0:360:4",
      "--out", "{d}/v.h5"], r"4 angles for 5 holograms"),
    # simulate
    (["holo", "simulate", "--spheres", "a,b,c", "--out", "{d}/s.h5"], r"--spheres.*z,y,x,radius,index"),
    (["holo", "simulate", "--spheres", "0,0,0,-1,1.36", "--out", "{d}/s.h5"], r"--spheres.*radius must be positive"),
    (["holo", "simulate", "--spheres", "0,0,0,1,nan", "--out", "{d}/s.h5"], r"--spheres.*index must be a finite"),
    (["holo", "simulate", "--na-illumination", "1.5", "--out", "{d}/s.h5"], r"--na-illumination.*range"),
    (["holo", "simulate", "--noise", "nan", "--out", "{d}/s.h5"], r"--noise.*not a finite number"),
    (["holo", "simulate", "--size", "32", "--model", "exact", "--spheres", "0,0,0,1,1.36;1,1,1,1,1.36", "--out",
      "{d}/s.h5"], r"one sphere"),
    (["holo", "simulate", "--out", "{d}/s.zarr"], r"--out.*ending in \.h5"),
    (["holo", "simulate", "--out", "{d}/h.npy"], r"ending in \.h5"),
]


def _invoke(files, args):
    before = _hashes(files)
    names = set(p.name for p in files.iterdir())
    out = CliRunner().invoke(cli, [a.format(d=files) for a in args])
    assert _hashes(files) == before, "an input file changed"
    assert set(p.name for p in files.iterdir()) == names, "an output appeared"
    return out


@pytest.mark.parametrize("args, pattern", CLI_ROWS, ids=[" ".join(r[0][1:4]) + f" #{i}" for i, r in enumerate(CLI_ROWS)])
def test_cli_bad_input(files, args, pattern):
    out = _invoke(files, args)
    assert out.exit_code == 2, out.output
    errors = [line for line in out.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "Traceback" not in out.output, out.output
    assert __import__("re").search(pattern, out.output.replace("\n", " ")), out.output


def test_cli_simulate_too_large_fails_fast(files, monkeypatch):
    import qora.backend.host as host

    monkeypatch.setattr(host, "available_memory", lambda: 4 * 2**30)
    out = _invoke(files, ["holo", "simulate", "--size", "1024", "--out", "{d}/big.h5"])
    assert out.exit_code == 2 and "Traceback" not in out.output
    assert __import__("re").search(r"Error: simulating 49 holograms of 2048\^2 \(born\) needs [\d.]+ GiB of host "
                                   r"memory, 4\.0 GiB available; use a smaller --size", out.output), out.output


def test_cli_overrides_warn_and_agreeing_values_are_accepted(files, tmp_path):
    runner = CliRunner()
    out = runner.invoke(cli, ["holo", "reconstruct", str(files / "h.h5"), "--wavelength", "0.532", "--pixel", "0.1",
                              "--iterations", "3", "--quiet", "--out", str(tmp_path / "a.h5")])
    assert out.exit_code == 0 and "Warning" not in out.output, out.output
    out = runner.invoke(cli, ["holo", "reconstruct", str(files / "h.h5"), "--medium-index", "1.34", "--na", "1.1",
                              "--iterations", "3", "--quiet", "--out", str(tmp_path / "b.h5")])
    assert out.exit_code == 0, out.output
    assert "Warning: --medium-index 1.34 overrides the file's medium index 1.333" in out.output
    assert "Warning: --na 1.1 overrides the file's na detection 1.2" in out.output
    _, g, _ = holo.read_volume(tmp_path / "b.h5")
    assert g.medium_index == 1.34 and g.na_detection == 1.1


def test_cli_zarr_without_a_cluster_writes_a_series_store(files, tmp_path):
    from qora.distributed.holo import SeriesStore

    runner = CliRunner()
    args = ["holo", "reconstruct", str(files / "h.h5"), "--iterations", "3", "--quiet"]
    assert runner.invoke(cli, args + ["--out", str(tmp_path / "v.h5")]).exit_code == 0
    out = runner.invoke(cli, args + ["--out", str(tmp_path / "v.zarr")])
    assert out.exit_code == 0, out.output
    store = SeriesStore(tmp_path / "v.zarr")
    assert store.attrs["qora_kind"] == "holo_series" and list(store.index()) == [0]
    np.testing.assert_array_equal(store.volume(0), holo.read_volume(tmp_path / "v.h5")[0])
    again = runner.invoke(cli, args + ["--out", str(tmp_path / "v.zarr")])  # the same store again: kept
    assert again.exit_code == 0, again.output
    other = runner.invoke(cli, args[:3] + ["--iterations", "4", "--quiet", "--out", str(tmp_path / "v.zarr")])
    assert other.exit_code == 2 and "another geometry or options" in other.output


# -- the API ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def case(files):
    holos, bgs, g, hp, _ = holo.read_holograms(files / "h.h5")
    sideband = holo.find_sideband(bgs[0], hp)
    ratio = holo.ratio_from_holograms(holos, bgs, g, hp)
    return types.SimpleNamespace(holos=holos, bgs=bgs, g=g, hp=hp, sideband=sideband, ratio=ratio)


def _with(a, index, value):
    a = np.array(a)
    a[index] = value
    return a


def _pipe(c, **kw):
    args = dict(sideband=c.sideband, hologram_pixel=c.hp, hologram_n=c.holos.shape[-1], backend="cpu")
    args.update(kw)
    return holo.Pipeline(c.g, **args)


def _background_set(c):
    pipe = _pipe(c)
    pipe.set_background(c.bgs)
    return pipe


G = (R.WAVELENGTH, R.MEDIUM_INDEX, R.PIXEL, 16, R.NA_DETECTION)

API_ROWS = [
    ("Geometry nan wavelength", lambda c: holo.Geometry(np.nan, *G[1:]), InputError, r"wavelength must be finite"),
    ("Geometry zero pixel", lambda c: holo.Geometry(G[0], G[1], 0.0, *G[3:]), InputError, r"pixel must be positive"),
    ("Geometry negative index", lambda c: holo.Geometry(G[0], -1.0, *G[2:]), InputError,
     r"medium_index must be positive"),
    ("Geometry NA > n_m", lambda c: holo.Geometry(*G[:4], 1.5), InputError, r"na_detection \(1\.5\) cannot exceed"),
    ("Geometry inf NA", lambda c: holo.Geometry(*G[:4], np.inf), InputError, r"na_detection must be finite"),
    ("Geometry nan illumination", lambda c: holo.Geometry(*G, illuminations=[[0, np.nan]]), InputError,
     r"illuminations has 1 non-finite"),
    ("Geometry evanescent illumination", lambda c: holo.Geometry(*G, illuminations=[[0, 3.0]]), InputError,
     r"would not propagate"),
    ("Geometry n", lambda c: holo.Geometry(*G[:3], 2.5, G[4]), InputError, r"n \(the volume size\) must be an integer"),
    ("options tv_weight nan", lambda c: holo.ReconstructionOptions(tv_weight=np.nan), InputError, r"tv_weight"),
    ("options oversample inf", lambda c: holo.ReconstructionOptions(oversample=np.inf), InputError, r"oversample"),
    ("options iterations 0", lambda c: holo.ReconstructionOptions(iterations=0), InputError, r"iterations"),
    ("options unknown", lambda c: holo.ReconstructionOptions().replace(bogus=1), InputError, r"unknown"),
    ("reconstruct nan ratio", lambda c: holo.reconstruct(_with(c.ratio, (0, 1, 1), np.nan), c.g), InputError,
     r"ratio: 1 non-finite \(NaN or Inf\) values"),
    ("reconstruct real ratio", lambda c: holo.reconstruct(c.ratio.real, c.g), InputError, r"ratio must be complex"),
    ("reconstruct geometry", lambda c: holo.reconstruct(c.ratio, "scan"), InputError, r"geometry must be"),
    ("extract complex", lambda c: holo.extract_fields(c.holos.astype(complex), c.sideband, hologram_pixel=c.hp, n=16,
                                                      pupil_frequency=1.0), InputError, r"holograms must be real"),
    ("extract nan", lambda c: holo.extract_fields(_with(c.holos, (0, 0, slice(0, 3)), np.inf), c.sideband,
                                                  hologram_pixel=c.hp, n=16, pupil_frequency=1.0), InputError,
     r"holograms: 3 non-finite"),
    ("extract zero pixel", lambda c: holo.extract_fields(c.holos, c.sideband, hologram_pixel=0.0, n=16,
                                                         pupil_frequency=1.0), InputError,
     r"hologram_pixel must be positive"),
    ("extract nan sideband", lambda c: holo.extract_fields(c.holos, (np.nan, 1.0), hologram_pixel=c.hp, n=16,
                                                           pupil_frequency=1.0), InputError, r"sideband"),
    ("Pipeline nan pixel", lambda c: _pipe(c, hologram_pixel=np.nan), InputError, r"hologram_pixel must be finite"),
    ("Pipeline inconsistent size", lambda c: _pipe(c, hologram_n=48), InputError, r"give fields of 24 pixels"),
    ("Pipeline nan background", lambda c: _pipe(c).set_background(_with(c.bgs, (1, 2, 3), np.nan)), InputError,
     r"backgrounds: 1 non-finite"),
    ("Pipeline background shape", lambda c: _pipe(c).set_background(c.bgs[:2]), InputError,
     r"expected holograms of shape .* as the backgrounds"),
    ("Pipeline complex stack", lambda c: _background_set(c).process(c.holos * 1j), InputError,
     r"holograms must be real, got complex.*holograms are real intensities"),
    ("Pipeline nan stack", lambda c: _background_set(c).process(_with(c.holos, (0, 0, 0), -np.inf)), InputError,
     r"holograms: 1 non-finite"),
    ("reconstruct_holograms shapes", lambda c: holo.reconstruct_holograms(
        c.holos, c.bgs[:, :16, :16], c.g, sideband=c.sideband, hologram_pixel=c.hp, backend="cpu"), InputError,
     r"backgrounds \(5, 16, 16\) must have the shape of one hologram stack"),
    ("geometry_from_backgrounds zero pixel", lambda c: holo.geometry_from_backgrounds(
        c.bgs, wavelength=0.532, medium_index=1.333, pixel=0.0, na_detection=1.2), InputError,
     r"pixel must be positive"),
    ("geometry_from_backgrounds NA", lambda c: holo.geometry_from_backgrounds(
        c.bgs, wavelength=0.532, medium_index=1.333, pixel=0.1, na_detection=1.4), InputError, r"cannot exceed"),
    ("field_size zero pixel", lambda c: holo.field_size(32, 0.05, 0.0), InputError, r"pixel must be positive"),
    ("rotation angles length", lambda c: holo.rotation_geometry(np.zeros(3), 5, wavelength=0.532, medium_index=1.333,
                                                                 pixel=0.1, na_detection=1.2, n=16), InputError,
     r"angles: 3 angles for 5 holograms"),
    ("rotation angles nan", lambda c: holo.rotation_geometry([0.0, np.nan], 2, wavelength=0.532, medium_index=1.333,
                                                              pixel=0.1, na_detection=1.2, n=16), InputError,
     r"angles: 1 non-finite"),
    ("parse_angles count", lambda c: holo.parse_angles("0:360:0"), InputError, r"COUNT must be at least 1"),
    ("bpm tv_weight nan", lambda c: holo.bpm_reconstruct(c.ratio, c.g, iterations=1, tv_weight=np.nan), InputError,
     r"tv_weight must be finite"),
    ("bpm step zero", lambda c: holo.bpm_reconstruct(c.ratio, c.g, iterations=1, step=0.0), InputError,
     r"step must be positive"),
    ("bpm batch", lambda c: holo.bpm_reconstruct(c.ratio, c.g, iterations=1, batch=9), InputError,
     r"batch must be at most 5"),
    ("bpm data shape", lambda c: holo.bpm_reconstruct(c.ratio[:2], c.g, iterations=1), InputError,
     r"data must have shape \(5, 16, 16\)"),
    ("Sphere radius", lambda c: holo.Sphere(radius=-1.0), InputError, r"radius must be positive"),
    ("Sphere center", lambda c: holo.Sphere(center=(0, np.inf, 0)), InputError, r"center must be three finite"),
    ("simulation na_illumination", lambda c: holo.simulation_geometry(16, na_illumination=1.4), InputError,
     r"na_illumination must be between 0 and the detection NA"),
    ("simulate noise", lambda c: holo.simulate_holograms([holo.Sphere()], c.g, noise=np.nan), InputError,
     r"noise must be finite"),
    ("quantitative_phase pixel", lambda c: holo.quantitative_phase(c.holos[0], c.bgs[0], hologram_pixel=-1.0),
     InputError, r"hologram_pixel must be positive"),
    ("read_holograms foreign", lambda c: holo.read_holograms(c.files / "other.h5"), FileFormatError,
     r"other\.h5: not a qora hologram file"),
    ("series store over a file", lambda c: __import__("qora.distributed.holo", fromlist=["x"]).write_series(
        c.files / "afile.zarr", np.zeros((1, 16, 16, 16)), c.g, {}), OutputError, r"afile\.zarr exists and is not a Zarr"),
    ("series times", lambda c: __import__("qora.distributed.holo", fromlist=["x"]).write_series(
        c.files / "never.zarr", np.zeros((2, 16, 16, 16)), c.g, {}, times=[1, 1]), InputError, r"distinct"),
    ("read_volume garbage", lambda c: holo.read_volume(c.files / "garbage.h5"), FileFormatError, r"garbage\.h5"),
]


@pytest.mark.parametrize("call, error, pattern", [r[1:] for r in API_ROWS], ids=[r[0] for r in API_ROWS])
def test_api_bad_input(case, files, call, error, pattern):
    case.files = files
    with pytest.raises(error, match=pattern):
        call(case)


def test_simulate_api_checks_memory_first(case, monkeypatch):
    import qora.backend.host as host

    monkeypatch.setattr(host, "available_memory", lambda: 2**10)
    with pytest.raises(MemoryNeeded, match=r"needs [\d.]+ GiB of host memory, 0\.0 GiB available; make the volume"):
        holo.simulate_holograms([holo.Sphere()], case.g)
    with pytest.raises(MemoryNeeded, match=r"\(bpm\) needs"):
        holo.simulate_bpm_holograms([holo.Sphere()], case.g)


def test_cuda_pipeline_refuses_what_the_device_cannot_hold(case, monkeypatch):
    """The device memory is estimated from the geometry before anything is allocated (a stand-in device
    with 1 KiB free: the real CudaPipeline is never reached)."""
    device = types.SimpleNamespace(mem_info=(2**10, 2**30))
    pool = types.SimpleNamespace(free_bytes=lambda: 0)
    fake = types.SimpleNamespace(is_cuda=True, name="cuda",
                                 xp=types.SimpleNamespace(cuda=types.SimpleNamespace(Device=lambda: device),
                                                          get_default_memory_pool=lambda: pool))
    monkeypatch.setattr(api, "resolve", lambda backend: fake)
    with pytest.raises(MemoryNeeded, match=r"the CUDA Pipeline needs [\d.]+ GiB of device memory, 0\.0 GiB "
                                           r"available; .*--backend cpu"):
        _pipe(case, backend="cuda")
    from qora.holo.plans import cuda_pipeline_bytes

    small = cuda_pipeline_bytes(case.g, 32, holo.ReconstructionOptions(oversample=1))
    assert cuda_pipeline_bytes(case.g, 32, holo.ReconstructionOptions(oversample=2)) > 3 * small


# -- progress ---------------------------------------------------------------------------------------------


def test_progress_counts_every_solver_iteration_on_one_count(case):
    pipe = _background_set(case)
    calls = []
    pipe.process(case.holos, progress=lambda s, d, t, m: calls.append((s, d, t)))
    assert [d for _, d, _ in calls] == list(range(0, 53)) + [52] and {t for _, _, t in calls} == {52}
    assert calls[0][0] == "fields" and calls[5][0] == "gp" and calls[-1][0] == "done"
    calls.clear()
    list(pipe.process_series([case.holos, case.holos], progress=lambda s, d, t, m: calls.append((s, d, t))))
    done = [d for _, d, _ in calls]
    assert done == sorted(done) and done[-1] == 104 and {t for _, _, t in calls} == {104}
    assert calls[-2][0] == "stack 2 of 2: gp"
    calls.clear()
    holo.reconstruct(case.ratio, case.g, method="tv", iterations=4, tv_inner=2, backend="cpu",  # CUDA: once, at its end
                     progress=lambda s, d, t, m: calls.append((s, d, t)))
    assert calls == [("rytov", 1, 5)] + [("tv", 1 + i, 5) for i in range(1, 5)]


def test_cli_bpm_progress_covers_the_start_and_the_steps(files, tmp_path, monkeypatch):
    import qora.progress

    seen = []

    class Recorder:
        def __init__(self, **kw):
            pass

        def __call__(self, stage, done, total, metrics):
            seen.append((stage, done, total))

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            pass

    monkeypatch.setattr(qora.progress, "tqdm_progress", Recorder)
    out = CliRunner().invoke(cli, ["holo", "reconstruct", str(files / "h.h5"), "--method", "bpm", "--iterations", "3",
                                   "--backend", "cpu", "--out", str(tmp_path / "v.h5")])
    assert out.exit_code == 0, out.output
    assert [d for _, d, _ in seen] == list(range(1, 25)) and {t for _, _, t in seen} == {24}
    assert seen[0][0].startswith("start (Rytov + GP): ") and seen[-1][0] == "bpm"


# -- readers: random arrays, truncated and garbage files ---------------------------------------------------

DTYPES = st.sampled_from(["float32", "float64", "int16", "uint8", "complex64", "bool", "U3", "float16"])


@SETTINGS
@given(shape=st.lists(st.integers(0, 5), min_size=0, max_size=5), dtype=DTYPES,
       special=st.sampled_from([None, np.nan, np.inf, -np.inf]))
def test_load_stack_random_arrays(tmp_path, shape, dtype, special):
    a = np.zeros(shape, dtype) if dtype == "U3" else (np.arange(int(np.prod(shape))) % 7).reshape(shape).astype(dtype)
    if special is not None and a.size and a.dtype.kind in "fc":
        a.flat[0] = special
    path = tmp_path / "x.npy"
    np.save(path, a)
    try:
        got = holo.load_stack(path)
    except (FileFormatError, InputError) as exc:
        assert str(path) in str(exc)
        return
    assert a.dtype.kind in "biuf" and 2 <= a.ndim <= 4 and a.size
    np.testing.assert_array_equal(got, a.astype(np.float64))


@pytest.fixture(scope="module")
def valid_bytes(files, tmp_path_factory):
    import tifffile

    d = tmp_path_factory.mktemp("valid")
    holos = np.load(files / "h.npy")
    tifffile.imwrite(d / "s.tif", holos.astype(np.float32))
    np.savez(d / "s.npz", holos)
    return {".h5": files / "h.h5", ".npy": files / "h.npy", ".tif": d / "s.tif", ".npz": d / "s.npz"}


@SETTINGS
@given(suffix=st.sampled_from([".h5", ".npy", ".tif", ".npz"]), cut=st.floats(0, 1),
       garbage=st.binary(min_size=0, max_size=64), where=st.floats(0, 1))
def test_damaged_files_are_named_or_read(tmp_path, valid_bytes, suffix, cut, garbage, where):
    raw = valid_bytes[suffix].read_bytes()
    raw = raw[: int(cut * len(raw))]
    at = int(where * len(raw))
    raw = raw[:at] + garbage + raw[at + len(garbage):]
    path = tmp_path / f"damaged{suffix}"
    path.write_bytes(raw)
    readers = [holo.load_stack] + ([holo.read_holograms] if suffix == ".h5" else [])
    for read in readers:
        try:
            read(path)
        except (FileFormatError, InputError) as exc:
            assert str(path) in str(exc), exc


def test_a_ratio_of_the_wrong_size_is_refused_before_padding():
    """A 24^2 ratio for a 32^2 geometry was padded onto the solver's grid and reconstructed without a word."""
    from qora.holo import odt

    g = holo.Geometry(wavelength=0.65, medium_index=1.333, pixel=0.2, n=32, na_detection=1.2,
                      angles=np.linspace(0, 6, 8))
    for call in (lambda r: odt.reconstruct(r, g), lambda r: holo.reconstruct(r, g, method="plain")):
        with pytest.raises(InputError, match=r"shape \(8, 32, 32\)"):
            call(np.ones((8, 24, 24), complex))


def test_reconstruct_stack_makes_the_commands_choices_in_one_call(case):
    """The API call a script makes for what `qora holo reconstruct` runs: the same volume as the chain it wraps
    (the sideband from the first background, one Pipeline; the BPM of the stack's ratios), and what it chose."""
    options = holo.ReconstructionOptions(iterations=4)
    one_call = holo.reconstruct_stack(case.holos, case.bgs, case.g, hologram_pixel=case.hp, options=options,
                                      backend="cpu")
    chain = holo.reconstruct_holograms(case.holos, case.bgs, case.g, sideband=case.sideband, hologram_pixel=case.hp,
                                       options=options, backend="cpu")
    np.testing.assert_array_equal(one_call.index, chain.index)
    assert one_call.info["sideband"] == [float(v) for v in case.sideband] and one_call.geometry == case.g
    bpm = holo.BpmOptions(iterations=2)
    by_stack = holo.reconstruct_stack(case.holos, case.bgs, case.g, hologram_pixel=case.hp, options=bpm, backend="cpu")
    by_ratio = holo.bpm_reconstruct(case.ratio, case.g, bpm, backend="cpu")
    np.testing.assert_array_equal(by_stack.index, by_ratio.index)
    with pytest.raises(InputError, match="the BPM inversion takes one stack"):
        holo.reconstruct_stack(case.holos[None], case.bgs, case.g, hologram_pixel=case.hp, options=bpm, backend="cpu")
