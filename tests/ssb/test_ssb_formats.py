"""load_data on the formats there is no real test file of here, each written by the format's own
writer (rosettasciio's, h5py + hdf5plugin for a DECTRIS master in its documented NeXus layout,
zarr): lazy 4D data in Qora's layout with the calibration mapped, or a FileFormatError that names
the file and what it holds (docs/ssb.md, "Detector files")."""

import h5py
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qora.io.errors import FileFormatError
from qora.ssb import load_data, wavelength
from qora.ssb.readers import Layout

rng = np.random.default_rng(7)
SCAN = rng.integers(0, 4000, (3, 5, 16, 12)).astype(np.uint16)  # (scan_row, scan_col, det_row, det_col)


def _signal(data, *, scan=(0.5, 0.25), scan_units="nm", det=0.02, det_units="1/nm", kv=200.0, alpha=21.0):
    """A rosettasciio signal dict of 4D data: navigation (y, x), signal (ky, kx), with calibration."""
    names = ["y", "x", "ky", "kx"]
    scales = [scan[0], scan[1], det, det]
    units = [scan_units, scan_units, det_units, det_units]
    axes = [{"name": n, "size": s, "scale": sc, "offset": 0.0, "units": u, "navigate": i < 2}
            for i, (n, s, sc, u) in enumerate(zip(names, data.shape, scales, units))]
    md = {"General": {"title": "scan"}, "Signal": {"signal_type": "electron_diffraction"},
          "Acquisition_instrument": {"TEM": {"beam_energy": kv, "convergence_angle": alpha}}}
    return {"data": data, "axes": axes, "metadata": md, "original_metadata": {}, "tmp_parameters": {},
            "attributes": {"_lazy": False}, "package_info": {"name": "qora-tests", "version": "0"},
            "learning_results": {}, "models": {}}


def _lazy_and_equal(data, expected):
    assert not isinstance(data, np.ndarray)  # a dask array (or a memory map read on demand)
    np.testing.assert_array_equal(np.asarray(data), expected)


@pytest.mark.parametrize("suffix, module", [(".hspy", "rsciio.hspy"), (".emd", "rsciio.emd")])
def test_rosettasciio_writers(tmp_path, suffix, module):
    """HSPY and EMD (NCEM's, rosettasciio's writer) with their calibrations; NCEM's EMD keeps no
    microscope settings."""
    import importlib

    path = tmp_path / f"scan{suffix}"
    importlib.import_module(module).file_writer(str(path), _signal(SCAN))
    data, meta = load_data(path)
    _lazy_and_equal(data, SCAN)
    if suffix == ".hspy":
        assert meta["kv"] == 200.0 and meta["alpha_mrad"] == 21.0
    assert meta["scan_step_a"] == pytest.approx((5.0, 2.5))  # nm to A, (step_y, step_x): they differ
    assert meta["detector_pixel_inv_a"] == pytest.approx(0.002)  # 1/nm to 1/A


def test_rosettasciio_angles_and_isotropic_steps(tmp_path):
    from rsciio.hspy import file_writer

    file_writer(str(tmp_path / "a.hspy"), _signal(SCAN, scan=(0.4, 0.4), scan_units="Å", det=0.9, det_units="mrad"))
    _, meta = load_data(tmp_path / "a.hspy")
    assert meta["scan_step_a"] == 0.4 and meta["detector_pixel_mrad"] == 0.9
    file_writer(str(tmp_path / "b.hspy"), _signal(SCAN, det=1.0, det_units="<undefined>"))
    assert "detector_pixel_mrad" not in load_data(tmp_path / "b.hspy")[1]  # pixels: nothing said


def test_tvips_series_needs_its_scan_shape(tmp_path):
    from rsciio.tvips import file_writer

    frames = SCAN.reshape(15, 16, 12)
    stack = {"data": frames, "axes": [{"name": "frame", "size": 15, "navigate": True, "scale": 1, "offset": 0,
                                       "units": ""},
                                      {"name": "ky", "size": 16, "navigate": False, "scale": 0.02, "offset": 0,
                                       "units": "1/nm"},
                                      {"name": "kx", "size": 12, "navigate": False, "scale": 0.02, "offset": 0,
                                       "units": "1/nm"}],
             "metadata": {"General": {"title": "t"}, "Signal": {}, "Acquisition_instrument": {"TEM": {"beam_energy": 300.0}}},
             "original_metadata": {}, "tmp_parameters": {}, "attributes": {"_lazy": False}}
    file_writer(str(tmp_path / "s.tvips"), stack, show_progressbar=False)
    written = sorted(tmp_path.glob("*.tvips"))
    assert written
    with pytest.raises(FileFormatError, match="give the scan shape") as err:
        load_data(written[0])
    assert written[0].name in str(err.value)
    data, meta = load_data(written[0], scan_shape=(3, 5))
    _lazy_and_equal(data, SCAN)
    assert meta["kv"] == 300.0 and "scan_step_a" not in meta  # a TVIPS file records no scan step


def test_layout_on_a_rosettasciio_file_moves_its_steps(tmp_path):
    from rsciio.hspy import file_writer

    file_writer(str(tmp_path / "xy.hspy"), _signal(np.ascontiguousarray(SCAN.transpose(1, 0, 3, 2)), scan=(0.25, 0.5)))
    data, meta = load_data(tmp_path / "xy.hspy", layout=Layout(axis_order="x,y"))
    _lazy_and_equal(data, SCAN)
    assert meta["scan_step_a"] == pytest.approx((5.0, 2.5))


def test_no_reader_and_unknown_formats(tmp_path):
    (tmp_path / "a.seq").write_bytes(b"\0" * 64)
    with pytest.raises(FileFormatError, match=r"a\.seq: DE/StreamPix \.seq: rosettasciio 0\.15 has no reader"):
        load_data(tmp_path / "a.seq")
    (tmp_path / "a.xyz").write_bytes(b"\0" * 64)
    with pytest.raises(FileFormatError, match=r"unknown 4D-STEM format '\.xyz'"):
        load_data(tmp_path / "a.xyz")


def test_a_file_that_is_not_4d_names_what_it_holds(tmp_path):
    from rsciio.hspy import file_writer

    image = {"data": np.zeros((16, 12), np.float32), "axes": [
        {"name": "y", "size": 16, "navigate": False, "scale": 1, "offset": 0, "units": ""},
        {"name": "x", "size": 12, "navigate": False, "scale": 1, "offset": 0, "units": ""}],
        "metadata": {"General": {"title": "survey"}, "Signal": {}}, "original_metadata": {}, "tmp_parameters": {},
        "attributes": {"_lazy": False}, "package_info": {"name": "qora-tests", "version": "0"},
            "learning_results": {}, "models": {}}
    file_writer(str(tmp_path / "i.hspy"), image)
    with pytest.raises(FileFormatError, match=r"i\.hspy: holds no 4D data .* it holds 'survey' \(16, 12\) float32"):
        load_data(tmp_path / "i.hspy")
    with h5py.File(tmp_path / "other.h5", "w") as f:
        f["images/stack"] = np.zeros((4, 8, 8))
    with pytest.raises(FileFormatError, match=r"other\.h5: not a qora 4D-STEM dataset .* it holds images/stack "
                                              r"\(4, 8, 8\) float64"):
        load_data(tmp_path / "other.h5")


# -- Zarr ------------------------------------------------------------------------------------------

def test_zarr_array_and_group(tmp_path):
    import zarr

    a = zarr.create_array(str(tmp_path / "a.zarr"), shape=SCAN.shape, chunks=(1, 5, 16, 12), dtype=SCAN.dtype)
    a[...] = SCAN
    a.attrs.update(kv=300.0, alpha_mrad=20.0, scan_step_a=0.4, detector_pixel_mrad=1.1)
    data, meta = load_data(tmp_path / "a.zarr")
    _lazy_and_equal(data, SCAN)
    assert meta == {"kv": 300.0, "alpha_mrad": 20.0, "scan_step_a": 0.4, "detector_pixel_mrad": 1.1}
    g = zarr.open_group(str(tmp_path / "g.zarr"), mode="w")
    g.attrs["kv"] = 200.0
    g.create_array("frames", shape=(15, 16, 12), dtype="u2")
    g.create_array("scan", shape=SCAN.shape, dtype="u2")[...] = SCAN
    data, meta = load_data(tmp_path / "g.zarr")
    _lazy_and_equal(data, SCAN)
    assert meta == {"kv": 200.0}
    nested = zarr.open_group(str(tmp_path / "n.zarr"), mode="w")  # as a .zspy store nests its data
    nested.create_group("Experiments/scan").create_array("data", shape=SCAN.shape, dtype="u2")[...] = SCAN
    _lazy_and_equal(load_data(tmp_path / "n.zarr")[0], SCAN)
    g.create_array("other", shape=SCAN.shape, dtype="u2")
    with pytest.raises(FileFormatError, match=r"g\.zarr: a Zarr group must hold one 4D array .*it holds"):
        load_data(tmp_path / "g.zarr")
    (tmp_path / "empty.zarr").mkdir()
    with pytest.raises(FileFormatError, match=r"empty\.zarr: not a Zarr array or group"):
        load_data(tmp_path / "empty.zarr")


# -- DECTRIS / Arina masters -----------------------------------------------------------------------

def _dectris(folder, frames, *, per_file=6, mask=None, wavelength_a=None, distance=0.2, pixel=75e-6,
             missing=False):
    """A DECTRIS-like master ``scan_master.h5`` in the documented NeXus layout: ``entry/data/data_00000N``
    external links to ``scan_data_00000N.h5`` (``entry/data/data``, bitshuffle/LZ4 through hdf5plugin),
    ``entry/instrument/detector/{x,y}_pixel_size`` (m), ``detector_distance`` (m), ``bit_depth_image``,
    ``detectorSpecific/pixel_mask`` and ``entry/instrument/beam/incident_wavelength`` (A)."""
    import hdf5plugin

    master = folder / "scan_master.h5"
    with h5py.File(master, "w") as f:
        for i, start in enumerate(range(0, len(frames), per_file), 1):
            name = f"scan_data_{i:06d}.h5"
            if not (missing and i == 2):
                with h5py.File(folder / name, "w") as d:
                    d.create_dataset("entry/data/data", data=frames[start:start + per_file],
                                     chunks=(1,) + frames.shape[1:], **hdf5plugin.Bitshuffle(nelems=0, cname="lz4"))
            f[f"entry/data/data_{i:06d}"] = h5py.ExternalLink(name, "entry/data/data")
        det = f.create_group("entry/instrument/detector")
        det["description"] = b"Dectris ARINA Si"
        det["x_pixel_size"] = pixel
        det["y_pixel_size"] = pixel
        det["detector_distance"] = distance
        det["bit_depth_image"] = np.uint32(16)
        det["count_time"] = 1e-4
        if mask is not None:
            det["detectorSpecific/pixel_mask"] = mask.astype(np.uint32)
        if wavelength_a is not None:  # NeXus: a number and its units (DECTRIS writes angstrom)
            f["entry/instrument/beam/incident_wavelength"] = wavelength_a * 0.1
            f["entry/instrument/beam/incident_wavelength"].attrs["units"] = "nm"
    return master


def test_dectris_master(tmp_path):
    frames = SCAN.reshape(15, 16, 12)
    mask = np.zeros((16, 12), bool)
    mask[3, 4] = mask[10, 0] = True
    master = _dectris(tmp_path, frames, mask=mask, wavelength_a=wavelength(300.0))
    with pytest.raises(FileFormatError, match=r"scan_master\.h5: 4D-STEM data must be .* \(15, 16, 12\) uint16; "
                                              r"a series of frames: give the scan shape"):
        load_data(master)
    data, meta = load_data(master, scan_shape=(3, 5))
    expected = SCAN.copy()
    expected[:, :, mask] = 0  # masked pixels (dead, hot, gaps) read 0
    _lazy_and_equal(data, expected)
    assert meta["kv"] == pytest.approx(300.0, abs=1e-6)
    assert meta["camera_length_m"] == 0.2 and meta["detector_pixel_mrad"] == pytest.approx(75e-6 / 0.2 * 1e3)
    assert meta["detector"] == {"name": "Dectris ARINA Si", "pixel_size_m": 75e-6, "bit_depth": 16,
                                "count_time_s": 1e-4, "masked_pixels": 2}
    data, _ = load_data(master, scan_shape=(3, 5), layout=Layout(transpose_detector=True))
    _lazy_and_equal(data, expected.transpose(0, 1, 3, 2))


def test_dectris_master_missing_data_file(tmp_path):
    master = _dectris(tmp_path, SCAN.reshape(15, 16, 12), missing=True)
    with pytest.raises(FileFormatError, match=r"entry/data/data_000002 links to scan_data_000002\.h5, which is "
                                              r"missing") as err:
        load_data(master, scan_shape=(3, 5))
    assert "scan_master.h5" in str(err.value)


@settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cut=st.floats(0.0, 1.0), which=st.sampled_from(["master", "data"]), garbage=st.binary(min_size=1, max_size=32),
       mode=st.sampled_from(["truncate", "overwrite"]))
def test_damaged_dectris_files(tmp_path, cut, which, garbage, mode):
    """A master or a data file cut short or overwritten: the frames back as written, or a
    FileFormatError naming a file, never another exception (a damaged data file is found when its
    frames are read)."""
    import shutil

    folder = tmp_path / "d"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    master = _dectris(folder, SCAN.reshape(15, 16, 12), per_file=15)
    target = master if which == "master" else folder / "scan_data_000001.h5"
    raw = target.read_bytes()
    at = int(cut * len(raw))
    target.write_bytes(raw[:at] if mode == "truncate" else raw[:at] + garbage + raw[at + len(garbage):])
    try:
        data, _ = load_data(master, scan_shape=(3, 5))
        values = np.asarray(data)
    except FileFormatError as exc:
        assert "scan_master.h5" in str(exc) or "scan_data_000001.h5" in str(exc), exc
        return
    except (OSError, ValueError, KeyError) as exc:  # h5py's own, from a damaged chunk read later
        pytest.fail(f"not a FileFormatError: {type(exc).__name__}: {exc}")
    assert values.shape == SCAN.shape


def test_a_runtime_error_of_our_own_stays_a_bug_and_named_reads_read_as_the_array(tmp_path):
    """Only a RuntimeError raised inside h5py (HDF5's report of a damaged structure) becomes a FileFormatError; one
    raised in our own code is a bug and stays what it is. NamedReads reads as the array it wraps."""
    from qora.io.errors import NamedReads, naming_file

    master = _dectris(tmp_path, SCAN.reshape(15, 16, 12), per_file=15)
    with pytest.raises(RuntimeError, match="ours"):
        with naming_file(master):
            raise RuntimeError("ours")
    with h5py.File(master, "r") as f:
        data = f["entry/data/data_000001"]
        wrapped = NamedReads(data, master)
        assert (wrapped.shape, wrapped.dtype, wrapped.ndim) == (data.shape, data.dtype, 3)
        np.testing.assert_array_equal(wrapped[2:4], SCAN.reshape(15, 16, 12)[2:4])


@pytest.mark.parametrize("which", ["master", "data"])
def test_every_offset_of_a_dectris_file_overwritten_is_read_or_refused_by_name(tmp_path, which):
    """A sweep of damages over the whole file (the random test's 25 examples passed or failed by the run: HDF5 writes
    the time into a file, so one offset hits other bytes each run): each load and read gives the frames or a
    FileFormatError naming a file, never HDF5's RuntimeError or a chunk's OSError (9 kinds escaped before). Each
    damage in a folder of its own: HDF5 keeps a file it has open, and would read the earlier bytes again."""
    import shutil

    clean = tmp_path / "clean"
    clean.mkdir()
    _dectris(clean, SCAN.reshape(15, 16, 12), per_file=15)
    name = "scan_master.h5" if which == "master" else "scan_data_000001.h5"
    raw = (clean / name).read_bytes()
    outcomes = {"read": 0, "refused": 0}
    for k, at in enumerate(range(0, len(raw), 53)):
        for j, garbage in enumerate((b"\xff" * 16, bytes(range(7, 23)))):
            folder = tmp_path / f"d{k}_{j}"
            shutil.copytree(clean, folder)
            (folder / name).write_bytes(raw[:at] + garbage + raw[at + len(garbage):])
            try:
                np.asarray(load_data(folder / "scan_master.h5", scan_shape=(3, 5))[0])
                outcomes["read"] += 1
            except FileFormatError as exc:
                assert "scan_master.h5" in str(exc) or "scan_data_000001.h5" in str(exc), exc
                outcomes["refused"] += 1
    assert outcomes["read"] > 0 and outcomes["refused"] > 0, outcomes


def test_every_offset_of_a_qora_dataset_overwritten_is_read_or_refused_by_name(tmp_path):
    """The same sweep over our own dataset file (read lazily: a damaged chunk shows only when read; two kinds of
    chunk OSError escaped a 300-damage sweep before the lazy reads named their file)."""
    from qora.ssb import write_dataset

    data = np.random.default_rng(4).integers(0, 4000, (6, 7, 16, 12)).astype(np.float32)
    clean = tmp_path / "clean.h5"
    write_dataset(clean, data, kv=300.0, alpha_mrad=20.0, scan_step=0.4)
    raw = clean.read_bytes()
    outcomes = {"read": 0, "refused": 0}
    for k, at in enumerate(range(0, len(raw), 41)):
        damaged = tmp_path / f"d{k}.h5"  # a name of its own: HDF5 keeps a file it has open
        damaged.write_bytes(raw[:at] + bytes(range(7, 23)) + raw[at + 16:])
        try:
            np.asarray(load_data(damaged)[0])
            outcomes["read"] += 1
        except FileFormatError as exc:
            assert damaged.name in str(exc), exc
            outcomes["refused"] += 1
    assert outcomes["read"] > 0 and outcomes["refused"] > 0, outcomes
