"""qora ssb simulate / image, the files they write, and bad input."""

import h5py
import numpy as np
from click.testing import CliRunner

from qora.cli import cli


def test_simulate_then_image_both_methods(tmp_path):
    runner = CliRunner()
    data = tmp_path / "d.h5"
    out = runner.invoke(cli, ["ssb", "simulate", "--scan", "24", "--window", "48", "--c10", "120",
                              "--out", str(data)])
    assert out.exit_code == 0, out.output
    for method, floor in (("ssb", 0.9), ("parallax", 0.8)):
        img, png = tmp_path / f"{method}.h5", tmp_path / f"{method}.png"
        out = runner.invoke(cli, ["ssb", "image", str(data), "--c10", "120", "--method", method, "--out", str(img),
                                  "--plot", str(png)])
        assert out.exit_code == 0, out.output
        r = float(out.output.split("correlation with the simulated phase: ")[1].split()[0])
        assert r >= floor
        with h5py.File(img) as f:
            assert f.attrs["qora_kind"] == "ssb_image" and f["phase"].shape == (24, 24)
        assert png.stat().st_size > 0


def test_image_needs_the_microscope_settings_for_bare_arrays(tmp_path):
    runner = CliRunner()
    npy = tmp_path / "d.npy"
    np.save(npy, np.ones((4, 4, 16, 16), np.float32))
    out = runner.invoke(cli, ["ssb", "image", str(npy), "--out", str(tmp_path / "i.h5")])
    assert out.exit_code != 0 and "--kv" in out.output
    np.save(npy, np.ones((4, 16, 16), np.float32))
    out = runner.invoke(cli, ["ssb", "image", str(npy), "--kv", "300", "--semiangle", "20", "--scan-step", "1",
                              "--out", str(tmp_path / "i.h5")])
    assert out.exit_code == 1 and "scan_row" in out.output
    assert not (tmp_path / "i.h5").exists()


def test_fit_writes_both_branches_as_json(tmp_path):
    import json

    runner = CliRunner()
    data = tmp_path / "d.h5"
    out = runner.invoke(cli, ["ssb", "simulate", "--scan", "32", "--window", "48", "--c10", "-100", "--c12", "20",
                              "--c12-angle", "25", "--out", str(data)])
    assert out.exit_code == 0, out.output
    fit, png = tmp_path / "fit.json", tmp_path / "fit.png"
    out = runner.invoke(cli, ["ssb", "fit", str(data), "--rotation", "0", "--out", str(fit), "--plot", str(png),
                              "--quiet"])
    assert out.exit_code == 0, out.output
    result = json.loads(fit.read_text())
    p = result["standard"]["parameters"]
    assert abs(p["C10"] + 100) < 2 and abs(np.hypot(p["C12a"], p["C12b"]) - 20) < 1
    assert result["better"] == "standard"  # a single thin slice: the thick model adds nothing
    assert "thick" in result and png.stat().st_size > 0
