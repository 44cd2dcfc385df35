import h5py
import numpy as np
import pytest
from click.testing import CliRunner

from qora.cli import cli
from qora.io.patterns import load_pattern
from qora.phase import objects, reconstruct
from qora.phase import plot_result, read_result, read_truth, write_pattern, write_result


def _pattern():
    obj, intensity = objects.simulate("triangle", 32)
    mask = np.zeros(intensity.shape, bool)
    mask[15:17, 15:17] = True
    return obj, intensity, mask


def test_beamline_style_cxi_is_read(tmp_path):
    """A CXI file as beamline software writes it: a stack of one frame, the mask on the detector."""
    _, intensity, mask = _pattern()
    path = tmp_path / "scan.cxi"
    with h5py.File(path, "w") as f:
        f.attrs["cxi_version"] = 150
        f.create_dataset("entry_1/data_1/data", data=intensity[None].astype(np.float32))
        f.create_dataset("entry_1/instrument_1/detector_1/mask", data=mask.astype(np.uint32) * 0x2)
        f["entry_1/instrument_1/detector_1/data"] = h5py.SoftLink("/entry_1/data_1/data")
    data, m = load_pattern(path)
    np.testing.assert_allclose(data, intensity.astype(np.float32))
    np.testing.assert_array_equal(m, mask)


@pytest.mark.parametrize("suffix", [".npy", ".npz", ".tif", ".edf", ".h5"])
def test_pattern_round_trips(tmp_path, suffix):
    _, intensity, mask = _pattern()
    path = tmp_path / f"pattern{suffix}"
    if suffix == ".npy":
        np.save(path, intensity)
    elif suffix == ".npz":
        np.savez(path, intensity=intensity, mask=mask)
    elif suffix == ".tif":
        import tifffile

        tifffile.imwrite(path, intensity.astype(np.float32))
    elif suffix == ".edf":
        import fabio

        fabio.edfimage.EdfImage(data=intensity.astype(np.float32)).write(str(path))
    else:
        write_pattern(path, intensity, mask=mask)
    mask_file = tmp_path / "mask.npy"
    np.save(mask_file, mask.astype(np.uint8))
    data, m = load_pattern(path, mask=None if suffix in (".npz", ".h5") else mask_file)
    np.testing.assert_allclose(data, intensity, rtol=1e-6)
    np.testing.assert_array_equal(m, mask)


def test_missing_and_unknown_files(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_pattern(tmp_path / "nope.cxi")
    (tmp_path / "x.txt").write_text("1 2 3")
    with pytest.raises(ValueError, match="unknown pattern format"):
        load_pattern(tmp_path / "x.txt")
    np.save(tmp_path / "p.npy", np.ones((8, 8)))
    with pytest.raises(ValueError, match="mask shape"):
        load_pattern(tmp_path / "p.npy", mask=np.zeros((4, 4), bool))


def test_result_round_trip_and_plot(tmp_path):
    obj, intensity, _ = _pattern()
    r = reconstruct(intensity, support=objects.support_of(obj), recipe="HIO**20 ER**5", starts=2, backend="cpu",
                    keep_all=True)
    write_result(tmp_path / "r.cxi", r)
    back = read_result(tmp_path / "r.cxi")
    np.testing.assert_array_equal(back.object, r.object)
    np.testing.assert_array_equal(back.errors, r.errors)
    assert back.recipe == r.recipe and back.best == r.best and back.objects.shape == r.objects.shape
    with h5py.File(tmp_path / "r.cxi") as f:
        assert f.attrs["qora_kind"] == "phase_result"
    plot_result(tmp_path / "r.png", r)
    assert (tmp_path / "r.png").read_bytes()[:4] == b"\x89PNG"
    assert not list(tmp_path.glob(".*.tmp"))
    with pytest.raises(ValueError, match="not a qora phase result"):
        write_pattern(tmp_path / "p.cxi", intensity)
        read_result(tmp_path / "p.cxi")
    assert back.psf is None


def test_result_keeps_why_the_default_chose_its_recipe(tmp_path):
    from qora.phase.detector import Detector, lithograph, record

    counts, mask = record(lithograph(128), Detector(photons=1e8))
    r = reconstruct(counts, mask=mask, starts=1, backend="cpu")
    assert r.choice.startswith("the pattern is centrosymmetric")
    write_result(tmp_path / "r.cxi", r)
    back = read_result(tmp_path / "r.cxi")
    assert back.choice == r.choice and back.recipe == "real-envelope"
    write_result(tmp_path / "given.cxi", reconstruct(counts, mask=mask, recipe="HIO**4", backend="cpu"))
    assert read_result(tmp_path / "given.cxi").choice == ""


def test_result_keeps_the_partial_coherence_kernel(tmp_path):
    obj, intensity, _ = _pattern()
    r = reconstruct(intensity, support=objects.support_of(obj), recipe="HIO**10 ER(psf=gaussian, psf_every=2)**6",
                    backend="cpu")
    assert r.psf is not None and r.psf.sum() == pytest.approx(1.0, rel=1e-5)
    write_result(tmp_path / "r.cxi", r)
    np.testing.assert_array_equal(read_result(tmp_path / "r.cxi").psf, r.psf)


def test_cli_simulate_run_compare(tmp_path):
    runner = CliRunner()
    pattern, result, png = tmp_path / "p.cxi", tmp_path / "r.cxi", tmp_path / "r.png"
    out = runner.invoke(cli, ["phase", "simulate", "--size", "48", "--out", str(pattern)])
    assert out.exit_code == 0, out.output
    support = tmp_path / "support.npy"
    np.save(support, objects.support_of(read_truth(pattern)))
    out = runner.invoke(cli, ["phase", "run", str(pattern), "--support", str(support), "--recipe",
                              "HIO**200 ER**100", "--starts", "2", "--backend", "cpu", "--out", str(result),
                              "--plot", str(png), "--quiet"])
    assert out.exit_code == 0, out.output
    out = runner.invoke(cli, ["phase", "compare", str(result), str(pattern)])
    assert out.exit_code == 0, out.output
    err = float(out.output.split("relative object error ")[1].split()[0])
    assert err < 1e-5
    out = runner.invoke(cli, ["phase", "run", str(pattern), "--recipe", "HIO**", "--out", str(result)])
    assert out.exit_code == 2 and "cannot parse" in out.output  # a user error: status 2 (qora.cli.errors)
    out = runner.invoke(cli, ["phase", "run", str(pattern), "--backend", "cpu", "--variant", "graph", "--out",
                              str(result)])
    assert out.exit_code == 2 and "variant" in out.output
    out = runner.invoke(cli, ["phase", "run", str(pattern), "--batch", "zero", "--out", str(result)])
    assert out.exit_code == 2 and "--batch" in out.output
