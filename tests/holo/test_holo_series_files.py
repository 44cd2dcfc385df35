"""Field-series readers: a qpimage file written by qpimage itself (fixtures/make_qpimage_fixture.py),
phase/amplitude TIFF stacks and folders, ODTbrain's example-archive layouts, angle files; the volume's
voxel size; square padding of rectangular fields."""

import io
import lzma
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import pytest
import tifffile

from qora.holo import fields as F
from qora.holo import series_files as S
from qora.holo.files import write_volume
from qora.holo.geometry import Geometry
from qora.io.errors import FileFormatError, InputError

FIXTURES = Path(__file__).with_name("fixtures")


def test_qpimage_series_written_by_qpimage():
    series = S.read_qpimage_series(FIXTURES / "qpimage_series.h5")
    with np.load(FIXTURES / "qpimage_series_expected.npz") as z:
        expected = z["amplitude"] * np.exp(1j * z["phase"])
        angles = z["angles"]
    assert series.fields.shape == (3, 32, 40)
    np.testing.assert_allclose(series.fields, expected, atol=1e-6)  # the second's background applied
    np.testing.assert_allclose(series.angles, angles)
    assert series.wavelength == pytest.approx(0.633) and series.pixel == pytest.approx(0.107)
    assert series.medium_index == pytest.approx(1.335)
    assert S.is_qpimage_file(FIXTURES / "qpimage_series.h5")
    assert S.read_field_series(FIXTURES / "qpimage_series.h5").fields.shape == (3, 32, 40)


def test_phase_amplitude_tiffs_file_and_folder(tmp_path):
    rng = np.random.default_rng(0)
    phase = rng.uniform(-3, 3, (4, 10, 12)).astype(np.float32)
    amplitude = rng.uniform(0.5, 1.5, (4, 10, 12)).astype(np.float32)
    tifffile.imwrite(tmp_path / "phase.tif", phase, photometric="minisblack")
    folder = tmp_path / "amp"
    folder.mkdir()
    for i, a in enumerate(amplitude):
        tifffile.imwrite(folder / f"a_{i:03d}.tif", a)
    series = S.read_phase_amplitude(tmp_path / "phase.tif", folder)
    np.testing.assert_allclose(series.fields, amplitude * np.exp(1j * phase.astype(float)), rtol=1e-6)
    assert np.allclose(np.abs(S.read_phase_amplitude(tmp_path / "phase.tif").fields), 1)
    with pytest.raises(InputError, match="differ in shape"):
        S.read_phase_amplitude(tmp_path / "phase.tif", _one(tmp_path))
    tifffile.imwrite(folder / "a_999.tif", np.zeros((3, 3), np.float32))
    with pytest.raises(FileFormatError, match="differ in shape"):
        S.read_phase_amplitude(folder)


def _one(tmp_path):
    tifffile.imwrite(tmp_path / "one.tif", np.ones((5, 5), np.float32))
    return tmp_path / "one.tif"


def _tar_lzma(path, members: dict):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    path.write_bytes(lzma.compress(buf.getvalue()))


def _text(a) -> bytes:
    out = io.BytesIO()
    np.savetxt(out, a)
    return out.getvalue()


def test_odtbrain_fdtd_archive(tmp_path):
    rng = np.random.default_rng(1)
    fields = rng.normal(size=(3, 8, 8)) + 1j * rng.normal(size=(3, 8, 8))
    phantom = 1.333 + 0.01 * rng.random((8, 8, 8))
    members = {"fdtd_info.txt": b"res = 4.5\nnm = 1.333\nlD = 2\nsome text line\n"}
    for i, f in enumerate(fields):
        members[f"field_{i:03d}_real.txt"] = _text(f.real)
        members[f"field_{i:03d}_imag.txt"] = _text(f.imag)
    for i, sl in enumerate(phantom):  # named as in ODTbrain's FDTD archives: "real" too, yet not a field
        members[f"phantom_{i}_real.txt"] = _text(sl)
    members["field_10_real.txt"], members["field_10_imag.txt"] = _text(fields[2].real), _text(fields[2].imag)
    del members["field_002_real.txt"], members["field_002_imag.txt"]  # unpadded numbers sort as numbers
    _tar_lzma(tmp_path / "fdtd_3d_sino_A3.tar.lzma", members)
    series = S.read_field_series(tmp_path / "fdtd_3d_sino_A3.tar.lzma", wavelength=0.5)
    np.testing.assert_allclose(series.fields, fields)
    np.testing.assert_allclose(series.phantom, phantom)
    np.testing.assert_allclose(series.angles, [0, 2 * np.pi / 3, 4 * np.pi / 3])
    assert series.pixel == pytest.approx(0.5 / 4.5) and series.medium_index == 1.333
    assert series.detector_distance == pytest.approx(1.0)  # lD = 2 wavelengths of 0.5 um
    with pytest.raises(InputError, match="wavelength"):
        S.read_field_series(tmp_path / "fdtd_3d_sino_A3.tar.lzma")


def test_odtbrain_mie_zip_and_qlsi_tar(tmp_path):
    field = np.exp(0.3j * np.ones((6, 6)))
    with zipfile.ZipFile(tmp_path / "mie.zip", "w") as z:
        z.writestr("mie_sphere_real.txt", _text(field.real))
        z.writestr("mie_sphere_imag.txt", _text(field.imag))
        z.writestr("mie_info.txt", "nm = 1.0\nres = 3\nlD = 20\n")
    mie = S.read_field_series(tmp_path / "mie.zip", wavelength=0.5)
    np.testing.assert_allclose(mie.fields[0], field)
    assert mie.angles is None and mie.pixel == pytest.approx(0.5 / 3) and mie.detector_distance == pytest.approx(10)
    angles = np.array([0.0, 0.5, 1.7])
    _tar_lzma(tmp_path / "qlsi.tar.lzma", {"series.h5": (FIXTURES / "qpimage_series.h5").read_bytes(),
                                           "angles.txt": _text(angles)})
    qlsi = S.read_field_series(tmp_path / "qlsi.tar.lzma")
    np.testing.assert_allclose(qlsi.angles, angles)  # the text file's, not the images' metadata
    assert qlsi.fields.shape == (3, 32, 40)
    (tmp_path / "bad.zip").write_bytes(b"not a zip")
    with pytest.raises(FileFormatError, match="bad.zip"):
        S.read_field_series(tmp_path / "bad.zip")


def test_angles_file(tmp_path):
    (tmp_path / "a.txt").write_text("# angles\n0, 90\n180\n270.5\n")
    np.testing.assert_allclose(S.read_angles(tmp_path / "a.txt", unit="deg"), np.deg2rad([0, 90, 180, 270.5]))
    (tmp_path / "b.txt").write_text("0 0.1 x\n")
    with pytest.raises(FileFormatError, match="b.txt"):
        S.read_angles(tmp_path / "b.txt")
    with pytest.raises(InputError, match="unit"):
        S.read_angles(tmp_path / "a.txt", unit="grad")


def test_volume_records_its_voxel_size_in_um(tmp_path):
    import h5py

    g = Geometry(0.532, 1.333, 0.125, 8, 1.0, angles=np.zeros(2))
    write_volume(tmp_path / "v.h5", np.ones((8, 8, 8)), g)
    with h5py.File(tmp_path / "v.h5") as f:
        np.testing.assert_allclose(f["index"].attrs["element_size_um"], [0.125] * 3)
        np.testing.assert_allclose(f.attrs["voxel_size_um"], [0.125] * 3)


def test_square_fields_pad_with_the_background():
    u = np.full((2, 6, 9), 0.5 + 0.5j)
    u[:, 2:4, 3:6] = 2.0
    out = F.square_fields(u)
    assert out.shape == (2, 10, 10)  # 10 = the fast length of at least 9
    np.testing.assert_allclose(out[:, 2:8, 0:9], u)
    assert np.allclose(out[:, :2], 0.5 + 0.5j) and np.allclose(out[:, 8:], 0.5 + 0.5j)
