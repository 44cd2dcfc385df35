"""qora ssb simulate / image, the files they write, and bad input."""

import h5py
import numpy as np
import pytest
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
    assert out.exit_code == 2 and "scan_row" in out.output  # a user error: status 2 since the one-line errors
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
                              "--trials", "96", "--seed", "1", "--backend", "cpu", "--quiet"])
    assert out.exit_code == 0, out.output
    assert "+-" in out.output  # the standard errors are printed
    result = json.loads(fit.read_text())
    p = result["standard"]["parameters"]
    assert abs(p["C10"] + 100) < 2 and abs(np.hypot(p["C12a"], p["C12b"]) - 20) < 1
    assert set(result["standard"]["uncertainty"]) == {"C10", "C12a", "C12b"}
    assert result["better"] == "standard"  # a single thin slice: the thick model adds nothing
    assert "thick" in result and "thickness" in result["thick"]["uncertainty"]
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_empad_raw_is_read_lazily_and_gives_the_same_session(tmp_path):
    """An EMPAD .raw/.xml pair (128 x 130 float32 frames, two footer rows) through rosettasciio:
    the data stay a lazy, memory-mapped array and the session equals the one of the array."""
    pytest.importorskip("rsciio")
    from qora.ssb import Aberrations, Session, amorphous_slices, load_data, simulate

    sim = simulate(amorphous_slices((128, 128), 0.3, seed=2), pixel=0.3, stride=8, window=128, alpha_mrad=20.0,
                   aberrations=Aberrations(C10=80.0))
    data = sim.data.astype(np.float32)
    raw = np.zeros(data.shape[:2] + (130, 128), np.float32)
    raw[:, :, :128] = data
    sy, sx = data.shape[:2]
    name = f"scan_x{sx}_y{sy}"
    raw.tofile(tmp_path / f"{name}.raw")
    (tmp_path / f"{name}.xml").write_text(f'<root><raw_file filename="{name}.raw"/><pix_x>{sx}</pix_x>'
                                          f'<pix_y>{sy}</pix_y></root>')
    lazy, meta = load_data(tmp_path / f"{name}.raw")
    assert not isinstance(lazy, np.ndarray) and lazy.shape == data.shape  # dask over a memory map
    kw = dict(kv=sim.kv, alpha_mrad=sim.alpha_mrad, scan_step=sim.scan_step, chunk=50, backend="cpu")
    a, b = Session(lazy, **kw), Session(data, **kw)
    assert a.detector == b.detector
    np.testing.assert_allclose(a.G, b.G, rtol=1e-10, atol=1e-10 * np.abs(b.G).max())
    np.testing.assert_allclose(a.image(Aberrations(C10=80.0)), b.image(Aberrations(C10=80.0)), atol=1e-10)


def test_merlin_mib_with_its_hdr_is_read_lazily(tmp_path):
    """A Quantum Detectors .mib (384-byte frame headers, big-endian U16 frames) with its .hdr giving
    the scan shape: lazy 4D data, rows flipped as rosettasciio presents Merlin frames."""
    pytest.importorskip("rsciio")
    from qora.ssb import load_data

    sy, sx, n = 3, 4, 32
    frames = np.random.default_rng(0).integers(0, 1000, (sy, sx, n, n)).astype(np.uint16)
    with open(tmp_path / "scan.mib", "wb") as f:
        for i, frame in enumerate(frames.reshape(-1, n, n)):
            head = (f"MQ1,{i + 1:06d},00384,01,{n:04d},{n:04d},U16,   1x1,01,2026-11-30 00:00:{i:02d}.000000,"
                    f"1.000000,0,0,0,1.0E+1,0.0E+0,0.0E+0,0.0E+0,0.0E+0,0.0E+0,0.0E+0,0.0E+0,3RX,MQ1A,"
                    f"2026-11-30T00:00:{i:02d}.000000000Z,1000000ns,12,")
            f.write(head.encode().ljust(384, b" "))
            f.write(frame.astype(">u2").tobytes())
    (tmp_path / "scan.hdr").write_text(f"HDR,\t\nFrames in Acquisition (Number):\t{sy * sx}\n"
                                       f"Frames per Trigger (Number):\t{sx}\nEnd\t\n")
    lazy, _ = load_data(tmp_path / "scan.mib")
    assert not isinstance(lazy, np.ndarray) and lazy.shape == (sy, sx, n, n)
    np.testing.assert_array_equal(np.asarray(lazy), frames[:, :, ::-1])


def test_fit_finds_and_names_the_detector_orientation_and_branch(tmp_path):
    """A transposed detector (the abTEM film fixture): `qora ssb fit` finds the orientation, prints it
    with the runner-up, the branch and C12 with its azimuth; --detector-orientation and --branch
    take them as given (issue 23)."""
    import json
    from pathlib import Path

    with np.load(Path(__file__).parent / "fixtures" / "abtem_weak_phase.npz") as f:
        data, kv, alpha, step = f["data"], float(f["kv"]), float(f["alpha_mrad"]), float(f["scan_step"])
    npy = tmp_path / "t.npy"
    np.save(npy, np.ascontiguousarray(data.astype(np.float32).transpose(0, 1, 3, 2)))
    runner = CliRunner()
    common = [str(npy), "--kv", str(kv), "--semiangle", str(alpha), "--scan-step", str(step), "--rotation", "0",
              "--no-tilt", "--trials", "16", "--starts", "1", "--quiet"]
    fit = tmp_path / "fit.json"
    out = runner.invoke(cli, ["ssb", "fit", *common, "--out", str(fit)])
    assert out.exit_code == 0, out.output
    assert "detector orientation transpose (centre-of-mass curl" in out.output and "runner-up" in out.output
    assert "C12 " in out.output and " A at " in out.output  # magnitude and azimuth
    result = json.loads(fit.read_text())
    assert result["orientation"]["orientation"] == "transpose" and result["branch"]["skewness"] > 0
    assert abs(result["standard"]["parameters"]["C10"] - 80.0) < 4.0
    # given, and the other branch by hand: the orientation turns by 180 degrees and C changes sign
    out = runner.invoke(cli, ["ssb", "fit", *common, "--detector-orientation", "transpose", "--branch", "flipped",
                              "--out", str(fit)])
    assert out.exit_code == 0, out.output
    result = json.loads(fit.read_text())
    assert result["orientation"]["orientation"] == "antitranspose" and result["branch"]["flipped"]
    assert abs(result["standard"]["parameters"]["C10"] + 80.0) < 4.0
    out = runner.invoke(cli, ["ssb", "fit", *common, "--detector-orientation", "sideways", "--out", str(fit)])
    assert out.exit_code == 2 and "sideways" in out.output
    # the search and the starts on a thinned band (--coarse-rows), finished on the whole band: the same fit
    out = runner.invoke(cli, ["ssb", "fit", *common, "--detector-orientation", "transpose", "--coarse-rows", "20",
                              "--out", str(fit)])
    assert out.exit_code == 0, out.output
    result = json.loads(fit.read_text())
    assert result["passes"]["standard_coarse"]["stride"] > 1
    assert abs(result["standard"]["parameters"]["C10"] - 80.0) < 4.0
    out = runner.invoke(cli, ["ssb", "fit", *common, "--coarse-rows", "0", "--out", str(fit)])
    assert out.exit_code == 2 and "coarse-rows" in out.output


# -- the data-layout and calibration options (docs/ssb.md, "Detector files") ---------------------------

@pytest.fixture(scope="module")
def film_h5(tmp_path_factory):
    """A simulated film (24 x 24 scan, 48 x 48 detector, C10 120 A) written by `qora ssb simulate`."""
    folder = tmp_path_factory.mktemp("film")
    out = CliRunner().invoke(cli, ["ssb", "simulate", "--scan", "24", "--window", "48", "--c10", "120",
                                   "--out", str(folder / "d.h5"), "--quiet"])
    assert out.exit_code == 0, out.output
    return folder / "d.h5"


def _image(runner, data, out, *options):
    result = runner.invoke(cli, ["ssb", "image", str(data), "--c10", "120", "--backend", "cpu", "--out", str(out),
                                 "--kv", "300", "--semiangle", "20", "--scan-step", "0.4", *options])
    assert result.exit_code == 0, result.output
    with h5py.File(out) as f:
        return f["phase"][...], result.output


@pytest.mark.parametrize("options, rearrange", [
    (["--axis-order", "x,y"], lambda d: d.transpose(1, 0, 3, 2)),  # abTEM's (scan_x, scan_y, k_x, k_y)
    (["--axis-order", "det-det-scan-scan"], lambda d: d.transpose(2, 3, 0, 1)),
    (["--transpose-detector"], lambda d: d.transpose(0, 1, 3, 2)),
    (["--flip-detector-rows", "--flip-scan-cols"], lambda d: d[:, ::-1, ::-1]),
    (["--axis-order", "scan_y,scan_x,det_x,det_y", "--flip-detector-cols", "--flip-scan-rows"],
     lambda d: d[::-1, :, :, ::-1].transpose(0, 1, 3, 2)),
])
def test_layout_options_undo_the_files_layout(tmp_path, film_h5, options, rearrange):
    """The film's data stored in another layout and read back with the options that say so give the
    image of the film itself; read as Qora's layout they do not (so the check can fail)."""
    from qora.ssb import read_dataset

    data, _ = read_dataset(film_h5)
    np.save(tmp_path / "other.npy", np.ascontiguousarray(rearrange(data)))
    np.save(tmp_path / "qora.npy", data)  # the same data with no metadata: the detector fitted alike
    runner = CliRunner()
    ref, _ = _image(runner, tmp_path / "qora.npy", tmp_path / "ref.h5")
    phase, output = _image(runner, tmp_path / "other.npy", tmp_path / "other.h5", *options)
    np.testing.assert_allclose(phase, ref, atol=1e-5 * np.abs(ref).max())
    assert "data: scan 24 x 24, detector 48 x 48 (axes" in output
    if options != ["--axis-order", "det-det-scan-scan"]:  # that one would not even be 4D-STEM as it stands
        plain, _ = _image(runner, tmp_path / "other.npy", tmp_path / "plain.h5")
        assert abs(np.corrcoef(plain.ravel(), ref.ravel())[0, 1]) < 0.9


def test_a_file_without_axis_labels_says_which_order_it_assumed(tmp_path, film_h5):
    """A .npy records no axes, and the data cannot tell an abTEM-ordered array from its mirror image
    (test_ssb_abtem.py): the command names the order it read and the option; given the order, or for a
    file that records it, it says nothing."""
    from qora.ssb import read_dataset

    data, _ = read_dataset(film_h5)
    np.save(tmp_path / "d.npy", data)
    runner = CliRunner()
    _, output = _image(runner, tmp_path / "d.npy", tmp_path / "a.h5")
    assert "d.npy does not record its axes: read as (scan_y, scan_x, k_y, k_x)" in output
    assert "--axis-order x,y" in output
    for source, options in ((tmp_path / "d.npy", ("--axis-order", "scan_y,scan_x,det_y,det_x")), (film_h5, ())):
        _, output = _image(runner, source, tmp_path / "b.h5", *options)
        assert "does not record its axes" not in output


def test_settings_and_calibration_printed_and_taken_from_the_file(tmp_path, film_h5):
    runner = CliRunner()
    out = runner.invoke(cli, ["ssb", "image", str(film_h5), "--c10", "120", "--backend", "cpu",
                              "--out", str(tmp_path / "a.h5")])
    assert out.exit_code == 0, out.output
    # the simulated dataset records its detector's 1/A per pixel: that calibration is used
    assert "300 kV, 20 mrad, scan step 0.4 A; detector" in out.output and "d.h5's calibration" in out.output
    mrad = float(out.output.split("detector ")[2].split(" mrad per pixel")[0])
    from qora.ssb import read_dataset, wavelength

    meta = read_dataset(film_h5)[1]
    assert mrad == pytest.approx(meta["detector_pixel_inv_a"] * wavelength(300) * 1e3, rel=1e-3)
    out = runner.invoke(cli, ["ssb", "image", str(film_h5), "--c10", "120", "--backend", "cpu",
                              "--detector-pixel-mrad", "3", "--out", str(tmp_path / "b.h5")])
    assert out.exit_code == 0 and "warning: 3 mrad per pixel (--detector-pixel-mrad)" in out.output
    out = runner.invoke(cli, ["ssb", "image", str(film_h5), "--c10", "120", "--backend", "cpu",
                              "--scan-step-x", "0.2", "--out", str(tmp_path / "c.h5")])
    assert out.exit_code == 0 and "scan step (0.4, 0.2) A (y, x)" in out.output
    assert "warning: --scan-step-x 0.2 A replaces the 0.4 A that d.h5 records" in out.output


def test_scan_shape_and_bad_layout_options(tmp_path, film_h5):
    from qora.ssb import read_dataset

    data, _ = read_dataset(film_h5)
    np.save(tmp_path / "frames.npy", data.reshape(-1, 48, 48))
    runner = CliRunner()
    base = ["ssb", "image", str(tmp_path / "frames.npy"), "--kv", "300", "--semiangle", "20", "--scan-step", "0.4",
            "--backend", "cpu", "--out", str(tmp_path / "i.h5")]
    out = runner.invoke(cli, base)
    assert out.exit_code == 2 and "give the scan shape" in out.output
    out = runner.invoke(cli, base + ["--scan-shape", "24x24"])
    assert out.exit_code == 0 and "data: scan 24 x 24" in out.output
    out = runner.invoke(cli, base + ["--scan-shape", "20x24"])
    assert out.exit_code == 2 and "576 frames of 48x48; the scan shape 20x24 given needs 480" in out.output
    out = runner.invoke(cli, base + ["--scan-shape", "24by24"])
    assert out.exit_code == 2 and "ROWSxCOLS" in out.output
    out = runner.invoke(cli, base + ["--scan-shape", "24x24", "--axis-order", "scan_x,scan_x,det_y,det_x"])
    assert out.exit_code == 2 and "axis order" in out.output


def test_descan_option(tmp_path, film_h5):
    """A descan put on the film's patterns (a plane up to 0.8 px) is found and taken out by --descan plane:
    the image is the film's again (to 0.87 here: the sub-pixel resampling is what is left)."""
    from qora.ssb import read_dataset

    data, _ = read_dataset(film_h5)
    sy, sx = data.shape[:2]
    y, x = np.meshgrid(np.linspace(-1, 1, sy), np.linspace(-1, 1, sx), indexing="ij")
    shifts = np.stack([0.6 * y + 0.2, -0.6 * x], -1)
    ky, kx = np.fft.fftfreq(48)[:, None], np.fft.fftfreq(48)[None, :]
    ramp = np.exp(-2j * np.pi * (shifts[..., 0, None, None] * ky + shifts[..., 1, None, None] * kx))
    np.save(tmp_path / "drift.npy", np.fft.ifft2(np.fft.fft2(data, axes=(2, 3)) * ramp, axes=(2, 3)).real)
    np.save(tmp_path / "qora.npy", data)
    runner = CliRunner()
    ref, _ = _image(runner, tmp_path / "qora.npy", tmp_path / "ref.h5")
    drifted, _ = _image(runner, tmp_path / "drift.npy", tmp_path / "a.h5")
    fixed, output = _image(runner, tmp_path / "drift.npy", tmp_path / "b.h5", "--descan", "plane")
    assert "descan (plane): up to 0.8" in output
    # what is left is the resampling of the hard-edged disk by a sub-pixel shift (docs/ssb.md, "Descan")
    assert np.corrcoef(fixed.ravel(), ref.ravel())[0, 1] > 0.8 > 0.5 > np.corrcoef(drifted.ravel(), ref.ravel())[0, 1]


def test_fit_incoherent_depth_model_writes_its_depth_sections(tmp_path):
    """`qora ssb fit --depth-model incoherent --sections-out`: the amorphous film's depth sections as
    an image stack with their depths, the incoherent branch in the JSON and the printed summary."""
    import json

    import h5py

    runner = CliRunner()
    data = tmp_path / "film.h5"
    out = runner.invoke(cli, ["ssb", "simulate", "--scan", "24", "--step", "0.5", "--window", "32", "--semiangle",
                              "25", "--c10", "-100", "--slices", "8", "--thickness", "120", "--quiet",
                              "--out", str(data)])
    assert out.exit_code == 0, out.output
    fit, sections = tmp_path / "fit.json", tmp_path / "sections.h5"
    common = ["ssb", "fit", str(data), "--rotation", "0", "--detector-orientation", "identity", "--thick-starts", "1",
              "--trials", "32", "--backend", "cpu", "--quiet", "--out", str(fit)]
    png = tmp_path / "fit.png"
    out = runner.invoke(cli, [*common, "--depth-model", "incoherent", "--sections", "3", "--sections-out",
                              str(sections), "--plot", str(png)])
    assert out.exit_code == 0, out.output
    assert "incoherent (3 depth sections)" in out.output and "depth model: incoherent (given)" in out.output
    result = json.loads(fit.read_text())
    assert result["incoherent"]["sections"] == 3 and result["depth_model"]["chosen"] == "incoherent"
    assert result["better"] == "incoherent"
    assert png.read_bytes()[:4] == b"\x89PNG"  # the incoherent branch's image and agreement curves
    with h5py.File(sections) as f:
        assert f["phase"].shape == (3, 24, 24) and f.attrs["method"] == "depth-sections"
        np.testing.assert_allclose(f["depth_a"][:], result["incoherent"]["section_depths_a"])
    out = runner.invoke(cli, [*common, "--depth-model", "columnar", "--sections-out", str(sections)])
    assert out.exit_code == 2 and "--sections-out" in out.output


def test_thin_film_sections_out_writes_the_one_section(tmp_path):
    """A film thinner than the depth of field: `auto` keeps the columnar model (one depth section, where the
    incoherent model is the columnar one) and --sections-out writes that one section, the thick fit's image (the
    SSB image with the thick Gamma, an independent path through Session.image), instead of a KeyError after
    the fit."""
    import json

    import h5py

    from qora.ssb import Session, load_data, parameters_to_aberrations

    runner = CliRunner()
    data = tmp_path / "thin.h5"
    out = runner.invoke(cli, ["ssb", "simulate", "--scan", "24", "--step", "0.5", "--window", "32", "--semiangle",
                              "25", "--c10", "-100", "--quiet", "--out", str(data)])
    assert out.exit_code == 0, out.output
    fit, sections = tmp_path / "fit.json", tmp_path / "sections.h5"
    out = runner.invoke(cli, ["ssb", "fit", str(data), "--rotation", "0", "--detector-orientation", "identity",
                              "--thick-starts", "1", "--trials", "32", "--backend", "cpu", "--quiet", "--out",
                              str(fit), "--sections-out", str(sections)])
    assert out.exit_code == 0, out.output
    result = json.loads(fit.read_text())
    assert result["depth_model"]["chosen"] == "columnar" and "incoherent" not in result
    assert "one depth section: thinner than the depth of field" in out.output
    with h5py.File(sections) as f:
        section = f["phase"][()]
        assert section.shape == (1, 24, 24) and list(f["depth_a"][:]) == [0.0]
    p = result["thick"]["parameters"]
    stack, meta = load_data(data)
    session = Session(stack, kv=meta["kv"], alpha_mrad=meta["alpha_mrad"], scan_step=meta["scan_step_a"])
    thick = session.image(parameters_to_aberrations(p), method="thick", thickness=p["thickness"])
    r = np.corrcoef(section[0].ravel(), thick.ravel())[0, 1]
    assert r > 0.95


def test_one_truthful_report_of_a_fit(tmp_path):
    """The thin film's fit with the rotation fitted: no standard error for a parameter reported as not determined
    (the JSON's uncertainty is None for the tilt), no "+- 0.0" before a wider bracket, "better" with both agreements
    and the margin, every branch's C12 printed with its errors, and the plot's agreement curves passing through the
    printed agreement at the fit (one number everywhere; the rotation's soft-edged band gave 0.9503 against the
    printed 0.9456 on the benchmark's film)."""
    import json
    import re

    from qora.ssb import Session
    from qora.ssb.files import agreement_curves
    from qora.ssb.fitting import BETTER_MARGIN

    runner = CliRunner()
    data = tmp_path / "thin.h5"
    out = runner.invoke(cli, ["ssb", "simulate", "--scan", "24", "--step", "0.5", "--window", "32", "--semiangle",
                              "25", "--c10", "-100", "--quiet", "--out", str(data)])
    assert out.exit_code == 0, out.output
    fit = tmp_path / "fit.json"
    out = runner.invoke(cli, ["ssb", "fit", str(data), "--detector-orientation", "identity", "--thick-starts", "1",
                              "--trials", "32", "--backend", "cpu", "--quiet", "--out", str(fit)])
    assert out.exit_code == 0, out.output
    result = json.loads(fit.read_text())
    for branch in ("standard", "thick"):
        for name, entry in result[branch]["identifiability"]["parameters"].items():
            assert (result[branch]["uncertainty"][name] is None) == (not entry["determined"]), (branch, name)
    assert "+- 0.0 " not in out.output and "+- 0.0[" not in out.output
    for label in ("rotation", "thick:"):  # every branch's C12 with its C12a/b errors (the thick line printed it bare)
        line = next(line for line in out.output.splitlines() if line.startswith(label))
        assert re.search(r"\(C12a/b (\+- |\(not determined\)).*/(\+- |\(not determined\))", line), line
    better = next(line for line in out.output.splitlines() if line.startswith("better: "))
    assert f"{result['thick']['agreement']:.4f}" in better and f"margin {BETTER_MARGIN:g}" in better
    from qora.cli.ssb_data import DataOptions, load_for_session

    stack, _, kv, semiangle, step, detector = load_for_session(data, kv=None, semiangle=None, scan_step=None,
                                                               source=DataOptions())
    session = Session(stack, kv=kv, alpha_mrad=semiangle, scan_step=step, detector=detector)  # the CLI's session
    curves = agreement_curves(session, result)
    best = result["better"]
    assert "rotation" in curves
    for name, (xs, ys) in curves.items():
        centre = len(xs) // 2
        assert ys[centre] == pytest.approx(result[best]["agreement"], abs=1e-6), name


def test_image_from_a_fit_that_chose_a_transposed_detector(tmp_path):
    """`qora ssb image --fit FIT.json`: the detector orientation, rotation and aberrations come from the fit,
    unrounded. On data whose detector axes are transposed, the fit chooses "transpose" and the image from the
    fit matches the simulated phase; the same image by hand needs --detector-orientation, and without it the
    image is wrong. Options the fit provides are refused beside it."""
    import json

    from qora.ssb import load_data, write_dataset

    runner = CliRunner()
    plain = tmp_path / "film.h5"
    out = runner.invoke(cli, ["ssb", "simulate", "--scan", "32", "--step", "0.5", "--window", "32", "--semiangle",
                              "25", "--c10", "-120", "--c12", "20", "--c12-angle", "30", "--quiet", "--out", str(plain)])
    assert out.exit_code == 0, out.output
    stack, meta = load_data(plain)
    turned = tmp_path / "turned.h5"
    write_dataset(turned, np.ascontiguousarray(stack.transpose(0, 1, 3, 2)), kv=meta["kv"], alpha_mrad=meta["alpha_mrad"],
                  scan_step=meta["scan_step_a"], detector_pixel=meta["detector_pixel_inv_a"], truth=meta["truth"])
    fit = tmp_path / "fit.json"
    out = runner.invoke(cli, ["ssb", "fit", str(turned), "--no-tilt", "--trials", "64", "--backend", "cpu", "--quiet",
                              "--out", str(fit)])
    assert out.exit_code == 0, out.output
    result = json.loads(fit.read_text())
    assert result["orientation"]["orientation"] == "transpose"

    def correlation(*args):
        image = tmp_path / "image.h5"
        got = runner.invoke(cli, ["ssb", "image", str(turned), "--backend", "cpu", "--out", str(image), *args])
        assert got.exit_code == 0, got.output
        return float(got.output.split("correlation with the simulated phase: ")[1].split()[0])

    from_fit = correlation("--fit", str(fit))
    p = result["standard"]["parameters"]
    c12 = float(np.hypot(p["C12a"], p["C12b"]))
    angle = float(np.rad2deg(np.arctan2(p["C12b"], p["C12a"]) / 2))
    by_hand = ["--c10", str(p["C10"]), "--c12", str(c12), "--c12-angle", str(angle), "--rotation",
               str(result["rotation_deg"])]
    assert from_fit > 0.9
    assert correlation(*by_hand, "--detector-orientation", "transpose") == pytest.approx(from_fit, abs=2e-3)
    assert correlation(*by_hand) < from_fit - 0.2  # the detector left as read: the wrong frame
    bad = runner.invoke(cli, ["ssb", "image", str(turned), "--fit", str(fit), "--c10", "5", "--out",
                              str(tmp_path / "x.h5")])
    assert bad.exit_code == 2 and "--c10 comes from --fit" in bad.output
