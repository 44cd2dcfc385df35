import h5py
import numpy as np
import pytest
from click.testing import CliRunner

from qora.cli import cli
from qora.holo import reference as R
from qora.holo.files import read_holograms, read_volume, write_volume, write_volume_tiff


@pytest.fixture(scope="module")
def simulated(tmp_path_factory):
    d = tmp_path_factory.mktemp("holo")
    path = d / "h.h5"
    out = CliRunner().invoke(cli, ["holo", "simulate", "--size", "48", "--angles", "12",
                                   "--spheres", "0,0,0,1.0,1.35;0,0.8,-1.2,0.4,1.38", "--out", str(path)])
    assert out.exit_code == 0, out.output
    return d, path


def test_simulate_writes_holograms_with_geometry(simulated):
    _, path = simulated
    holos, bgs, g, hp, truth = read_holograms(path)
    assert holos.shape == bgs.shape == (13, 96, 96) and g.n == 48 and hp == pytest.approx(R.PIXEL / 2)
    assert truth.shape == (48, 48, 48) and truth.max() == pytest.approx(1.38, abs=1e-3)


def test_reconstruct_from_the_file_and_from_plain_stacks(simulated):
    d, path = simulated
    runner = CliRunner()
    vol = d / "v.h5"
    out = runner.invoke(cli, ["holo", "reconstruct", str(path), "--iterations", "10", "--out", str(vol),
                              "--plot", str(d / "s.png"), "--quiet"])
    assert out.exit_code == 0, out.output
    index, g, attrs = read_volume(vol)
    assert index.shape == (48, 48, 48) and attrs["method"] == "gp" and g.count == 13
    assert (d / "s.png").read_bytes()[:4] == b"\x89PNG"
    rmse = float(out.output.split("RMSE against the simulated truth ")[1].split()[0])
    assert rmse < 5e-3
    # the same data as .npy stacks, geometry from the options and illuminations from the backgrounds
    holos, bgs, g, hp, _ = read_holograms(path)
    np.save(d / "h.npy", holos)
    np.save(d / "b.npy", bgs)
    out = runner.invoke(cli, ["holo", "reconstruct", str(d / "h.npy"), str(d / "b.npy"), "--wavelength",
                              str(R.WAVELENGTH), "--pixel", str(R.PIXEL), "--medium-index", str(R.MEDIUM_INDEX),
                              "--na", str(R.NA_DETECTION), "--iterations", "10", "--out", str(d / "v2.h5"),
                              "--quiet"])
    assert out.exit_code == 0, out.output
    index2, g2, _ = read_volume(d / "v2.h5")
    np.testing.assert_allclose(g2.illuminations, g.illuminations, atol=1e-5)
    np.testing.assert_allclose(index2, index, atol=1e-5)
    out = runner.invoke(cli, ["holo", "reconstruct", str(d / "h.npy"), str(d / "b.npy"), "--out", str(d / "x.h5")])
    assert out.exit_code != 0 and "--wavelength" in out.output
    # a time series of two stacks streams through one Pipeline
    np.save(d / "series.npy", np.stack([holos, holos[:, ::-1]]))
    opts = ["--wavelength", str(R.WAVELENGTH), "--pixel", str(R.PIXEL), "--medium-index", str(R.MEDIUM_INDEX),
            "--na", str(R.NA_DETECTION), "--iterations", "10", "--backend", "cpu"]
    out = runner.invoke(cli, ["holo", "reconstruct", str(d / "series.npy"), str(d / "b.npy"), *opts,
                              "--out", str(d / "series.h5"), "--plot", str(d / "series.png")])
    assert out.exit_code == 0, out.output
    series, _, _ = read_volume(d / "series.h5")
    assert series.shape == (2, 48, 48, 48)
    np.testing.assert_allclose(series[0], index2, atol=1e-6)
    assert np.abs(series[1] - series[0]).max() > 1e-3  # the flipped holograms are another object
    out = runner.invoke(cli, ["holo", "reconstruct", str(d / "series.npy"), str(d / "b.npy"), *opts,
                              "--out", str(d / "series.tif")])
    assert out.exit_code != 0 and "series" in out.output


def test_phase_command(simulated):
    d, path = simulated
    holos, bgs, _, hp, _ = read_holograms(path)
    np.save(d / "one.npy", holos[0])
    np.save(d / "bg.npy", bgs[0])
    out = CliRunner().invoke(cli, ["holo", "phase", str(d / "one.npy"), str(d / "bg.npy"), "--pixel", str(hp),
                                   "--out", str(d / "p.h5"), "--plot", str(d / "p.png")])
    assert out.exit_code == 0, out.output
    half = CliRunner().invoke(cli, ["holo", "phase", str(d / "one.npy"), str(d / "bg.npy"), "--pixel", str(hp),
                                    "--half-sampling", "--out", str(d / "half.h5")])
    assert half.exit_code == 0, half.output
    with h5py.File(d / "half.h5") as f:
        assert f["phase"].shape == (48, 48)
    with h5py.File(d / "p.h5") as f:
        assert f["phase"].shape == (96, 96) and f["phase"][()].max() > 0.3  # the hologram's own sampling


def test_volume_tiff_and_round_trip(tmp_path):
    import tifffile

    g = R.geometry(16)
    vol = np.random.default_rng(0).random((16, 16, 16)).astype(np.float32)
    write_volume(tmp_path / "v.h5", vol, g, method="gp")
    back, g2, attrs = read_volume(tmp_path / "v.h5")
    np.testing.assert_array_equal(back, vol)
    assert g2.pixel == g.pixel and attrs["qora_kind"] == "holo_volume"
    write_volume_tiff(tmp_path / "v.tif", vol, g)
    np.testing.assert_array_equal(tifffile.imread(tmp_path / "v.tif"), vol)
    with pytest.raises(ValueError, match="not a qora volume"):
        with h5py.File(tmp_path / "bad.h5", "w") as f:
            f.attrs["qora_kind"] = "other"
        read_volume(tmp_path / "bad.h5")


def test_bad_sphere_spec():
    out = CliRunner().invoke(cli, ["holo", "simulate", "--spheres", "1,2,3", "--out", "/tmp/never.h5"])
    assert out.exit_code != 0 and "z,y,x,radius,index" in out.output


def test_rotation_geometry_through_the_cli(tmp_path):
    runner = CliRunner()
    path = tmp_path / "rot.h5"
    out = runner.invoke(cli, ["holo", "simulate", "--size", "48", "--angles", "36", "--geometry", "rotation",
                              "--spheres", "0.5,0,-1.0,0.8,1.36", "--out", str(path)])
    assert out.exit_code == 0, out.output
    out = runner.invoke(cli, ["holo", "reconstruct", str(path), "--iterations", "10", "--out",
                              str(tmp_path / "v.h5"), "--quiet"])
    assert out.exit_code == 0, out.output
    _, g, _ = read_volume(tmp_path / "v.h5")
    assert g.geometry == "rotation" and g.count == 36
    assert float(out.output.split("RMSE against the simulated truth ")[1].split()[0]) < 3e-3
    holos, bgs, _, _, _ = read_holograms(path)
    np.save(tmp_path / "h.npy", holos)
    np.save(tmp_path / "b.npy", bgs)
    base = ["holo", "reconstruct", str(tmp_path / "h.npy"), str(tmp_path / "b.npy"), "--wavelength",
            str(R.WAVELENGTH), "--pixel", str(R.PIXEL), "--medium-index", str(R.MEDIUM_INDEX), "--na",
            str(R.NA_DETECTION), "--geometry", "rotation", "--out", str(tmp_path / "v2.h5"), "--quiet"]
    out = runner.invoke(cli, base + ["--angles", "0:360:36", "--iterations", "10"])
    assert out.exit_code == 0, out.output
    np.testing.assert_allclose(read_volume(tmp_path / "v2.h5")[0], read_volume(tmp_path / "v.h5")[0], atol=1e-5)
    out = runner.invoke(cli, base + ["--angles", "0:360:35"])
    assert out.exit_code != 0 and "35 angles for 36 holograms" in out.output
    # the specimen turns in a fixed beam: one background hologram serves every angle
    np.testing.assert_array_equal(bgs, np.broadcast_to(bgs[0], bgs.shape))
    np.save(tmp_path / "b1.npy", bgs[0])
    one = [str(tmp_path / "b1.npy") if a == str(tmp_path / "b.npy") else a for a in base]
    out = runner.invoke(cli, [*one[:-3], "--out", str(tmp_path / "v3.h5"), "--quiet", "--angles", "0:360:36",
                              "--iterations", "10"])
    assert out.exit_code == 0, out.output
    np.testing.assert_allclose(read_volume(tmp_path / "v3.h5")[0], read_volume(tmp_path / "v2.h5")[0], atol=1e-6)


def test_exact_model_through_the_cli(tmp_path):
    out = CliRunner().invoke(cli, ["holo", "simulate", "--size", "32", "--angles", "6", "--model", "exact",
                                   "--spheres", "0,0,0,0.8,1.34", "--out", str(tmp_path / "e.h5")])
    assert out.exit_code == 0, out.output
    out = CliRunner().invoke(cli, ["holo", "simulate", "--size", "32", "--model", "exact",
                                   "--spheres", "0,0,0,0.8,1.34;1,0,0,0.3,1.35", "--out", str(tmp_path / "x.h5")])
    assert out.exit_code != 0 and "one sphere" in out.output


def test_fit_axis_through_the_cli(tmp_path, simulated):
    runner = CliRunner()
    path = tmp_path / "rot.h5"
    out = runner.invoke(cli, ["holo", "simulate", "--size", "32", "--angles", "36", "--geometry", "rotation",
                              "--spheres", "0.8,0.5,-1,1,1.36;-0.7,-0.6,0.9,0.8,1.35", "--out", str(path)])
    assert out.exit_code == 0, out.output
    out = runner.invoke(cli, ["holo", "reconstruct", str(path), "--fit-axis", "--method", "plain", "--quiet",
                              "--out", str(tmp_path / "v.h5")])
    assert out.exit_code == 0, out.output
    line = next(s for s in out.output.splitlines() if s.startswith("axis fitted to the data"))
    tilt = float(line.split("(")[1].split(" rad")[0])
    assert abs(tilt) <= 0.05  # made about the y axis; either determined there or reported as not determined
    out = runner.invoke(cli, ["holo", "reconstruct", str(path), "--fit-axis", "--axis-tilt", "5", "--out",
                              str(tmp_path / "w.h5")])
    assert out.exit_code == 2 and "not both" in out.output
    _, scan = simulated  # the scanning geometry has no axis to fit
    out = runner.invoke(cli, ["holo", "reconstruct", str(scan), "--fit-axis", "--out", str(tmp_path / "s.h5")])
    assert out.exit_code == 2 and "--geometry rotation" in out.output
