"""Readers of raw Bragg rocking scans (qora.phase.spec, qora.phase.bragg_readers): SPEC files and TIFF frames built
here, a property test of the SPEC reader, and the real 34-ID-C scan of ../shared/data/cdi where it is present."""

import tarfile

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qora.io.errors import FileFormatError, InputError
from qora.phase.bragg_readers import geometry_34idc, read_34idc, read_tiff_frames
from qora.phase.spec import read_spec_scan, scan_numbers

from bragg_files import rocking_spec, spec_text

def test_spec_scan_header_motors_and_columns(tmp_path):
    path = rocking_spec(tmp_path / "a.spec")
    scan = read_spec_scan(path, 54)
    assert scan.number == 54 and scan.scan_motor == "th" and scan.scan_range() == (-0.28, -0.26, 4)
    assert scan.motor("Lab X") == -0.03 and scan.motor("Delta") == 32.174 and scan.motor("Energy") == 9.0
    np.testing.assert_allclose(scan.columns["Theta"], -0.28 + 0.005 * np.arange(5))
    assert scan.headers["UIMDET"] == "34idcTIM2:" and scan_numbers(path) == [53, 54]
    with pytest.raises(InputError, match=r"no scan 7 \(its scans: 53..54, 2 in all\)"):
        read_spec_scan(path, 7)
    with pytest.raises(InputError, match="records no motor 'Nu'"):
        scan.motor("Nu")
    with pytest.raises(InputError, match="no such SPEC file"):
        read_spec_scan(tmp_path / "missing.spec", 54)


def test_spec_reader_says_what_is_wrong(tmp_path):
    good = rocking_spec(tmp_path / "good.spec").read_text()
    path = tmp_path / "a.spec"
    path.write_text(good.replace("#P0 32.174", "#P0 x32.174"))
    with pytest.raises(FileFormatError, match=r"line \d+: 'x32.174' is not a number"):
        read_spec_scan(path, 54)
    path.write_text(good.replace("#L Theta  ImageTot", "#L Theta  ImageTot  Extra"))
    with pytest.raises(FileFormatError, match="has 3 column labels and rows of \\[2\\] numbers"):
        read_spec_scan(path, 54)
    twice = good + good.split("\n\n", 1)[1].replace("#S 53", "#S 99")
    path.write_text(twice)
    assert read_spec_scan(path, 54).notes == ["scan 54 appears 2 times in the file; the last is read"]


_name = st.text(alphabet="abcdefghXYZ_-0123456789", min_size=1, max_size=6)


@settings(max_examples=40, deadline=None)
@given(names=st.lists(_name, min_size=2, max_size=8, unique=True),
       values=st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=8, max_size=8),
       rows=st.lists(st.lists(st.floats(-1e9, 1e9, allow_nan=False), min_size=2, max_size=2), min_size=1,
                     max_size=6))
def test_spec_round_trip_property(tmp_path_factory, names, values, rows):
    """Any motor names (one word) and positions, any column values: read back as written."""
    path = tmp_path_factory.mktemp("spec") / "p.spec"
    names = (names * 8)[:8] if len(names) < 8 else names
    names = [f"{n}{i}" for i, n in enumerate(names)]
    path.write_text(spec_text([(1, "ascan  th 0 1  3 1", values, ["A", "B"], rows)], names))
    scan = read_spec_scan(path, 1)
    assert scan.motors == dict(zip(names, values))
    np.testing.assert_array_equal(scan.columns["A"], [r[0] for r in rows])


def test_tiff_frames_in_number_order(tmp_path):
    import tifffile

    folder = tmp_path / "S0054"
    folder.mkdir()
    for n in (10, 2, 1):
        tifffile.imwrite(folder / f"scan_{n:05d}.tif", np.full((4, 6), n, np.int32))
    (folder / "notes.txt").write_text("not a frame")
    frames = read_tiff_frames(folder)
    assert frames.shape == (3, 4, 6) and list(frames[:, 0, 0]) == [1, 2, 10]
    tifffile.imwrite(folder / "scan_00011.tif", np.zeros((5, 6), np.int32))
    with pytest.raises(FileFormatError, match="not all 2D of one shape"):
        read_tiff_frames(folder)
    with pytest.raises(InputError, match="no such folder"):
        read_tiff_frames(tmp_path / "none")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="no TIFF frames"):
        read_tiff_frames(tmp_path / "empty")


def test_34idc_geometry_from_spec(tmp_path):
    path = rocking_spec(tmp_path / "a.spec", camdist=600.0, energy=10.0)
    g = geometry_34idc(path, 54, frames=5, roi=(10, 20))
    assert g.rocking == "Theta" and g.angles["Theta"] == -0.28 and g.step_deg == pytest.approx(0.005)
    assert g.energy_ev == 10000.0 and g.distance_m == 0.6 and g.pixel_m == (55e-6, 55e-6)
    assert g.centre == (256 - 10, 256 - 20) and g.angles["Gamma"] == 12.6346 and g.notes["detector"] == "34idcTIM2"
    with pytest.raises(InputError, match="has 5 points and the folder 4 frames"):
        geometry_34idc(path, 54, frames=4)
    with pytest.raises(InputError, match="detector 'pilatus' is not one of 34idcTIM1, 34idcTIM2"):
        geometry_34idc(path, 54, frames=5, detector="pilatus")
    path.write_text(path.read_text().replace("ascan  th", "ascan  delta"))
    with pytest.raises(InputError, match="scans 'delta'; a rocking scan turns one of th, chi, phi"):
        geometry_34idc(path, 54, frames=5)


def test_the_real_34idc_scan(shared_data, tmp_path):
    archive = shared_data / "cdi" / "cohere_34idc_scan54.tar.xz"
    if not archive.is_file():
        pytest.skip(f"the real scan is not here ({archive})")
    with tarfile.open(archive) as tar:
        tar.extractall(tmp_path, filter="data")
    frames, g = read_34idc(tmp_path / "Staff20-1a_S0054", tmp_path / "example.spec", 54)
    assert frames.shape == (201, 256, 256) and g.notes["detector"] == "34idcTIM2"
    assert g.angles["Theta"] == pytest.approx(-0.28, abs=1e-5) and g.step_deg == pytest.approx(0.005, rel=1e-4)
    assert g.energy_ev == 9000.0 and g.distance_m == 0.5
    # the brightest voxel is gold's (111) reflection: d = a / sqrt(3), a = 4.0782 A (gold at room temperature; the
    # file's #G1 holds SPEC's default cell, a = 1.54 A, whose 2 pi / a = 4.080 is a coincidence, not gold's)
    frame, row, col = np.unravel_index(np.argmax(frames), frames.shape)
    d = 2 * np.pi / np.linalg.norm(g.q_sample(frame, row, col))
    assert d == pytest.approx(4.0782 / np.sqrt(3), rel=0.01)  # measured 2.368 A against 2.355
    # which detector axis is which: as the crystal rocks, the peak moves across the frames where the geometry says a
    # fixed reciprocal point meets the Ewald sphere (least squares over the two pixel steps: -(J2'J2)^-1 J2' j_frame)
    w = 12
    window = frames[:, row - w:row + w + 1, col - w:col + w + 1].astype(float)
    near = np.arange(frame - 25, frame + 26)
    total = window[near].sum((1, 2))
    offsets = np.arange(-w, w + 1)
    measured = [np.polyfit(near, (window[near].sum(axis) @ offsets) / total, 1, w=np.sqrt(total))[0]
                for axis in (2, 1)]  # rows: sum over the columns; columns: over the rows
    jacobian = g.reciprocal_basis(frame, row, col, lab=False)
    pixels, rocking = jacobian[:, 1:], jacobian[:, 0]
    predicted = -np.linalg.solve(pixels.T @ pixels, pixels.T @ rocking)
    # measured (-0.088, +0.092) px a frame; the geometry (-0.096, +0.094); with the axes swapped (+0.094, -0.096)
    np.testing.assert_allclose(measured, predicted, atol=0.02)


def _bliss(path, *, sample="PtNP", scan=12, frames=6, detector="mpx1x4", drop=None, eta_rocks=True):
    """An ID01 BLISS file in the layout read_id01 reads: one scan group with frames, positioners and the detector's
    calibration; ``drop`` leaves one entry out."""
    import h5py

    eta = 18.0 + 0.01 * np.arange(frames) if eta_rocks else 18.0
    entries = {f"measurement/{detector}": np.arange(frames * 4 * 5, dtype=np.int32).reshape(frames, 4, 5),
               "instrument/positioners/eta": eta, "instrument/positioners/phi": 2.0,
               "instrument/positioners/nu": 1.2, "instrument/positioners/delta": 36.0,
               "instrument/positioners/mononrj": 8.5, f"instrument/{detector}/distance": 1.1,
               f"instrument/{detector}/x_pixel_size": 55e-6, f"instrument/{detector}/y_pixel_size": 55e-6,
               f"instrument/{detector}/beam_center_x": 250.8, f"instrument/{detector}/beam_center_y": 257.3}
    with h5py.File(path, "w") as f:
        for key, value in entries.items():
            if key != drop:
                f[f"{sample}_{scan}.1/{key}"] = value
    return path


def test_id01_bliss_file(tmp_path):
    from qora.phase import CIRCLES_ID01, read_id01

    frames, g = read_id01(_bliss(tmp_path / "a.h5"), 12)
    assert frames.shape == (6, 4, 5) and g.circles == CIRCLES_ID01 and g.rocking == "eta"
    assert g.angles == {"eta": 18.0, "phi": 2.0, "nu": 1.2, "delta": 36.0} and g.step_deg == pytest.approx(0.01)
    assert g.energy_ev == 8500.0 and g.distance_m == 1.1 and g.centre == (257.3, 250.8) and g.pixel_m == (55e-6,
                                                                                                          55e-6)
    assert g.notes == {"detector": "mpx1x4", "scan": "PtNP_12.1"}
    # at zero detector angles the direct beam's pixel scatters nothing
    g.angles.update(nu=0.0, delta=0.0)
    np.testing.assert_allclose(g.q_lab(257.3, 250.8), 0.0, atol=1e-15)
    with pytest.raises(InputError, match="does not record nu"):
        read_id01(_bliss(tmp_path / "b.h5", drop="instrument/positioners/nu"), 12)
    with pytest.raises(InputError, match="no scan 13"):
        read_id01(tmp_path / "a.h5", 13)
    with pytest.raises(InputError, match="must rock one of eta and phi"):
        read_id01(_bliss(tmp_path / "c.h5", eta_rocks=False), 12)
    with pytest.raises(InputError, match="has detectors none of mpxgaas"):
        read_id01(_bliss(tmp_path / "d.h5", detector="maxipix"), 12)
    with pytest.raises(InputError, match="no such BLISS file"):
        read_id01(tmp_path / "none.h5", 12)


def test_qora_phase_bragg_reads_an_id01_file_and_says_what_it_needs(tmp_path):
    from click.testing import CliRunner

    from qora.cli import cli

    path = _bliss(tmp_path / "a.h5", frames=8)
    run = CliRunner().invoke(cli, ["phase", "bragg", str(path), "--scan", "12", "--spec", str(path),
                                   "--out", str(tmp_path / "r.h5")])
    assert run.exit_code == 2 and "holds its own metadata" in run.output
    (tmp_path / "frames").mkdir()
    run = CliRunner().invoke(cli, ["phase", "bragg", str(tmp_path / "frames"), "--scan", "12", "--out",
                                   str(tmp_path / "r.h5")])
    assert run.exit_code == 2 and "needs its SPEC file" in run.output
    run = CliRunner().invoke(cli, ["phase", "bragg", str(path), "--scan", "13", "--out", str(tmp_path / "r.h5")])
    assert run.exit_code != 0 and "no scan 13" in run.output
