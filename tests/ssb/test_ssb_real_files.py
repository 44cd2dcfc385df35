"""load_data on real detector files (GPL-3.0, read from the shared data folder, never copied here):
Merlin .mib (+ .hdr) and fpd HDF5. Each file loads as (scan_row, scan_col, det_row, det_col) or is
refused with a FileFormatError that names it and says what it holds (docs/ssb.md, "Detector files")."""

import warnings
import zipfile
from pathlib import Path

import numpy as np
import pytest

from qora.io.errors import FileFormatError
from qora.ssb import load_data



@pytest.fixture(scope="module")
def DATA(shared_data):
    """The 4D-STEM files of the shared data folder."""
    return shared_data / "4dstem"
warnings.filterwarnings("ignore", category=UserWarning)


@pytest.fixture(scope="module")
def merlin(tmp_path_factory, DATA):
    root = tmp_path_factory.mktemp("merlin")
    for name in ("Merlin_Single_Quad", "Merlin_navigation4x2_ROI", "Merlin_navigation4x2_signalNx256_ROI"):
        with zipfile.ZipFile(DATA / f"{name}.zip") as z:
            z.extractall(root)
    return {p.name: p for p in root.rglob("*.mib")}


def test_data_folder_is_there(DATA):
    assert DATA.is_dir() and (DATA / "FPD_HDF5.hdf5").is_file()


@pytest.mark.parametrize("chips", ["Single", "Quad"])
@pytest.mark.parametrize("depth", ["1", "6", "12", "24", "1_RAW"])
def test_single_frame_is_refused(merlin, chips, depth):
    name = f"{chips}_1_Frame_CounterDepth_{depth.replace('_RAW', '')}_Rows_256{'RAW' if 'RAW' in depth else ''}.mib"
    side = 256 if chips == "Single" else 512
    expected = f"1 frame of {side}x{side}: a single diffraction pattern"
    with pytest.raises(FileFormatError, match=expected) as err:
        load_data(merlin[name])
    assert name in str(err.value)


@pytest.mark.parametrize("name", ["Single_9_Frame_CounterDepth_1_Rows_256.mib", "Single_9_Frame_CounterDepth_6_Rows_256.mib",
                                  "Single_9_Frame_CounterDepth_12_Rows_256.mib", "Single_9_Frame_CounterDepth_24_Rows_256.mib",
                                  "Single_9_Frame_CounterDepth_1_Rows_256RAW.mib",
                                  "Quad_9_Frame_CounterDepth_1_Rows_256.mib", "Quad_9_Frame_CounterDepth_6_Rows_256.mib",
                                  "Quad_9_Frame_CounterDepth_12_Rows_256.mib", "Quad_9_Frame_CounterDepth_24_Rows_256.mib",
                                  "Quad_9_Frame_CounterDepth_1_Rows_256RAW.mib"])
def test_frame_series_needs_a_scan_shape(merlin, name):
    side = 256 if name.startswith("Single") else 512
    with pytest.raises(FileFormatError, match=f"9 frames of {side}x{side} with no scan shape.*give the scan shape") as err:
        load_data(merlin[name])
    assert name in str(err.value)
    data, meta = load_data(merlin[name], scan_shape=(3, 3))
    depth = int(name.split("CounterDepth_")[1].split("_")[0])
    assert data.shape == (3, 3, side, side)
    assert np.dtype(data.dtype).itemsize == {1: 1, 6: 1, 12: 2, 24: 4}[depth]
    det = meta["detector"]
    assert det["counter_depth"] == depth and det["assembly"] == ("1x1" if side == 256 else "2x2")
    assert det["raw"] == name.endswith("RAW.mib") and det["chip"] == "Medipix 3RX"
    assert int(np.asarray(data[0, 0]).max()) <= 2 ** depth - 1
    with pytest.raises(FileFormatError, match="scan shape 2x2 given needs 4"):
        load_data(merlin[name], scan_shape=(2, 2))


def test_quad_raw_decoder_agrees_with_rosettasciio(merlin):
    """The RAW quad (its header: four chips side by side, 1024 x 256) assembled into the 512 x 512
    frame rosettasciio reads from the normal quad file of the same detector: frame by frame 99.9%
    of the pixels equal, each chip's mean pattern correlated above 0.99; the lower chips not turned,
    or the upper two swapped, would not agree (docs/ssb.md, "Merlin RAW frames")."""
    raw, meta = load_data(merlin["Quad_9_Frame_CounterDepth_1_Rows_256RAW.mib"], scan_shape=(3, 3))
    ref, _ = load_data(merlin["Quad_9_Frame_CounterDepth_1_Rows_256.mib"], scan_shape=(3, 3))
    a, b = np.asarray(raw), np.asarray(ref)
    assert a.shape == b.shape == (3, 3, 512, 512) and meta["detector"]["assembly"] == "2x2"
    assert (a == b).mean() > 0.999
    m, r, h = a.mean((0, 1)), b.mean((0, 1)), 256
    for chip in ((slice(0, h), slice(0, h)), (slice(0, h), slice(h, None)), (slice(h, None), slice(0, h)),
                 (slice(h, None), slice(h, None))):
        assert np.corrcoef(m[chip].ravel(), r[chip].ravel())[0, 1] > 0.99
    unturned = m.copy()
    unturned[h:, :h], unturned[h:, h:] = m[h:, :h][::-1, ::-1], m[h:, h:][::-1, ::-1]
    swapped = m.copy()
    swapped[:h, :h], swapped[:h, h:] = m[:h, h:], m[:h, :h]
    for wrong in (unturned, swapped):
        assert np.corrcoef(wrong.ravel(), r.ravel())[0, 1] < 0.8


def test_raw_decoder_agrees_with_rosettasciio(merlin):
    """Our RAW 1-bit decoder against rosettasciio's normal 1-bit frames of the same detector: the same
    orientation and the same counts (different acquisitions, so the mean patterns, not pixel by pixel)."""
    raw, _ = load_data(merlin["Single_9_Frame_CounterDepth_1_Rows_256RAW.mib"], scan_shape=(3, 3))
    ref, _ = load_data(merlin["Single_9_Frame_CounterDepth_1_Rows_256.mib"], scan_shape=(3, 3))
    a, b = np.asarray(raw).mean((0, 1)), np.asarray(ref).mean((0, 1))
    assert set(np.unique(np.asarray(raw))) <= {0, 1}
    assert np.corrcoef(a.ravel(), b.ravel())[0, 1] > 0.99
    assert np.corrcoef(a.ravel(), b[::-1].ravel())[0, 1] < 0.6  # flipped would not agree
    assert abs(a.mean() - b.mean()) < 0.01 * b.mean()


@pytest.mark.parametrize("name, rows, dtype, depth", [
    ("001_4x2_6bit.mib", 256, np.uint8, 6),
    ("002_4x2_6bit_roi128.mib", 128, np.uint8, 6),
    ("002_merlin_test_roi_sig256x128_nav4x2_hot_pixel_52x_39y.mib", 128, np.dtype(">u2"), 12),
    ("003_merlin_test_roi_sig256x64_nav4x2_hot_pixel_52x_39y.mib", 64, np.dtype(">u2"), 12)])
def test_navigation_scans(merlin, name, rows, dtype, depth):
    data, meta = load_data(merlin[name])
    assert data.shape == (2, 4, rows, 256) and data.dtype == dtype  # 4 columns by 2 rows; ROI 256 wide
    assert meta["detector"]["counter_depth"] == depth
    if "hot_pixel" in name:  # x 52, y 39 counted from the file's first row; rows flipped as rosettasciio does
        total = np.asarray(data).sum((0, 1))
        assert np.unravel_index(total.argmax(), total.shape) == (rows - 1 - 39, 52)


def test_fpd_hdf5(tmp_path, DATA):
    import h5py

    data, meta = load_data(DATA / "FPD_HDF5.hdf5")
    assert isinstance(data, h5py.Dataset)  # lazy: nothing read yet
    assert data.shape == (16, 16, 256, 256) and data.dtype == np.dtype(">u2")
    assert meta["kv"] == 200.0 and meta["camera_length_m"] == 0.6
    assert meta["scan_step_a"] == pytest.approx(54.826, abs=1e-3)
    assert meta["detector"]["counter_depth"] == 12
    pattern = np.asarray(data[::4, ::4]).astype(float).sum((0, 1))
    disk = pattern > 3 * pattern.mean()  # the bright-field disk, about 37 px across, near the centre
    assert 25 < 2 * np.sqrt(disk.sum() / np.pi) < 45
    cy, cx = np.argwhere(disk).mean(0)
    assert abs(cy - 128) < 30 and abs(cx - 128) < 30


def test_fpd_renamed_emd_keeps_its_axes(tmp_path, DATA):
    (tmp_path / "fpd.emd").symlink_to(DATA / "FPD_HDF5.hdf5")
    data, meta = load_data(tmp_path / "fpd.emd")
    assert data.shape == (16, 16, 256, 256) and meta["kv"] == 200.0


# -- every Merlin test file, table-driven: its shape and metadata, or the error; its virtual bright field

def _frames_by_hand(path: Path) -> np.ndarray:
    """The file's frames decoded here from the documented .mib layout, independently of the reader:
    each frame a text header (its size in the third field) and then the pixels, big-endian; RAW 1-bit:
    pixel p is bit p % 8 (least significant first) of byte 8 (p // 64) + 7 - (p % 64) // 8. Rows
    flipped to the reader's convention (row 0 at the top, as rosettasciio shows Merlin frames)."""
    raw = path.read_bytes()
    head = raw[:768].decode("latin-1").split(",")
    header, cols, rows, fmt = int(head[2]), int(head[4]), int(head[5]), head[6]
    if fmt == "R64":
        payload = rows * cols // 8
        n = len(raw) // (header + payload)
        body = np.frombuffer(raw, np.uint8).reshape(n, header + payload)[:, header:]
        p = np.arange(rows * cols)
        byte = 8 * (p // 64) + 7 - (p % 64) // 8
        frames = (body[:, byte] >> (p % 8).astype(np.uint8)) & 1
        if head[7].strip() == "2x2":  # each line the four chips' rows: 3 top left, 2 top right, 1 and 0 turned
            lines = frames.reshape(n, rows, 4, cols // 4)
            top = np.concatenate([lines[:, :, 3], lines[:, :, 2]], axis=2)
            bottom = np.concatenate([lines[:, ::-1, 1, ::-1], lines[:, ::-1, 0, ::-1]], axis=2)
            frames, rows, cols = np.concatenate([top, bottom], axis=1), 2 * rows, cols // 2
    else:
        dtype = np.dtype({"U08": ">u1", "U16": ">u2", "U32": ">u4"}[fmt])
        n = len(raw) // (header + rows * cols * dtype.itemsize)
        body = np.frombuffer(raw, np.uint8).reshape(n, -1)[:, header:]
        frames = np.frombuffer(body.tobytes(), dtype)
    return frames.reshape(n, rows, cols)[:, ::-1]


SINGLE_FRAME = "1 frame of {side}x{side}: a single diffraction pattern, not a 4D-STEM scan"
SERIES = "9 frames of {side}x{side} with no scan shape"
# name: (loads as (shape, depth) with the scan shape given / found, or the error without one)
MERLIN = {}
for _chips, _side in (("Single", 256), ("Quad", 512)):
    for _depth in ("1", "6", "12", "24", "1RAW"):
        _d, _raw = int(_depth.replace("RAW", "")), _depth.endswith("RAW")
        _base = f"{_chips}_{{n}}_Frame_CounterDepth_{_d}_Rows_256{'RAW' if _raw else ''}.mib"
        MERLIN[_base.format(n=1)] = (None, _d, SINGLE_FRAME.format(side=_side))
        MERLIN[_base.format(n=9)] = ((3, 3, _side, _side), _d, SERIES.format(side=_side))
MERLIN.update({"001_4x2_6bit.mib": ((2, 4, 256, 256), 6, None), "002_4x2_6bit_roi128.mib": ((2, 4, 128, 256), 6, None),
               "002_merlin_test_roi_sig256x128_nav4x2_hot_pixel_52x_39y.mib": ((2, 4, 128, 256), 12, None),
               "003_merlin_test_roi_sig256x64_nav4x2_hot_pixel_52x_39y.mib": ((2, 4, 64, 256), 12, None)})


def test_the_table_holds_every_merlin_file(merlin):
    assert set(MERLIN) == set(merlin) and len(MERLIN) == 24


@pytest.mark.parametrize("name", sorted(MERLIN))
def test_every_merlin_file(merlin, name):
    """Each file: refused with its own message (what it holds) when it is not a scan as it stands;
    loaded with the right shape, counter depth, assembly and RAW flag with the scan shape (given for a
    series, found for the navigation scans); its virtual bright field, read lazily through the loader,
    equal to the one of the frames decoded by hand."""
    from qora.ssb.detector import virtual_bright_field

    shape, depth, error = MERLIN[name]
    path = merlin[name]
    if error is not None:
        with pytest.raises(FileFormatError, match=error) as err:
            load_data(path)
        assert name in str(err.value)
    if shape is None:
        return
    data, meta = load_data(path, scan_shape=shape[:2] if error else None)
    assert not isinstance(data, np.ndarray) and data.shape == shape
    det = meta["detector"]
    assert det["counter_depth"] == depth and det["raw"] == name.endswith("RAW.mib")
    assert det["assembly"] == ("2x2" if shape[-1] == 512 else "1x1")
    frames = _frames_by_hand(path).reshape(shape)
    assert int(frames.max()) <= 2 ** depth - 1
    center, radius = (shape[2] / 2, shape[3] / 2), min(shape[2:]) / 4
    rows, cols = np.indices(shape[2:])
    disk = np.hypot(rows - center[0], cols - center[1]) <= radius
    expected = frames[:, :, disk].sum(-1, dtype=np.float64)
    vbf = virtual_bright_field(data, center=center, radius=radius, rows=1)
    np.testing.assert_array_equal(vbf, expected)
    # the whole frame as the virtual detector: every count of every pattern, and there are counts
    whole = virtual_bright_field(data, center=center, radius=float(np.hypot(*shape[2:])), rows=2)
    np.testing.assert_array_equal(whole, frames.sum((2, 3), dtype=np.float64))
    assert vbf.shape == shape[:2] and whole.min() > 0


def test_fpd_virtual_bright_field_and_axes(DATA):
    """The fpd file's virtual bright field (its disk fitted on the mean pattern): an image of the
    AuPd specimen, the scan axes the file's (scanY, scanX): a transposed read would transpose it."""
    import h5py

    from qora.ssb.detector import virtual_bright_field

    data, _ = load_data(DATA / "FPD_HDF5.hdf5")
    with h5py.File(DATA / "FPD_HDF5.hdf5") as f:
        raw = f["fpd_expt/fpd_data/data"][...].astype(np.float64)
    vbf = virtual_bright_field(data, rows=4)
    mean = raw.mean((0, 1))
    level = np.median(mean[mean > 0.5 * mean.max()])
    w = np.clip(mean / level, 0, 1)
    r, c = np.indices(mean.shape)
    cy, cx = (w * r).sum() / w.sum(), (w * c).sum() / w.sum()
    disk = np.hypot(r - cy, c - cx) <= np.sqrt(w.sum() / np.pi)
    np.testing.assert_allclose(vbf, raw[:, :, disk].sum(-1), rtol=1e-12)
    assert vbf.std() > 0.01 * vbf.mean()  # contrast: a specimen, not a flat field
    assert not np.allclose(vbf, vbf.T, rtol=1e-3)  # the two scan axes are told apart
