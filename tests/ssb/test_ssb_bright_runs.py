"""The bright-field pixels copied run by run (qora.ssb.bright_runs), what G's streaming sends to the
device, against NumPy's fancy indexing of the same frames."""

import numpy as np
import pytest

from qora.ssb.bright_runs import gather_runs, pixel_runs
from qora.ssb.detector import DetectorFit, bright_field_pixels


def test_runs_of_a_disk_are_one_per_row_and_cover_every_pixel():
    index, _ = bright_field_pixels((40, 36), DetectorFit((19.3, 17.6), 11.2, 0.5), 5.6, 300.0)
    rows, cols = np.unravel_index(index, (40, 36))
    runs = pixel_runs(rows, cols)
    assert len(runs) == len(np.unique(rows))
    assert runs[:, 2].sum() == len(index) and runs[0, 3] == 0
    np.testing.assert_array_equal(runs[1:, 3], np.cumsum(runs[:-1, 2]))


@pytest.mark.parametrize("dtype", [np.uint16, np.uint32, np.float32])
def test_gathered_runs_equal_fancy_indexing(tmp_path, dtype):
    rng = np.random.default_rng(3)
    data = rng.integers(0, 4000, (7, 5, 24, 22)).astype(dtype)
    np.save(tmp_path / "d.npy", data)
    mapped = np.asarray(np.load(tmp_path / "d.npy", mmap_mode="r"))
    index, _ = bright_field_pixels((24, 22), DetectorFit((11.4, 10.2), 7.3, 1.0), 7.3, 300.0)
    rows, cols = np.unravel_index(index, (24, 22))
    odd = np.array([0, 3, 4, 5, 9])  # runs broken inside a row, rows skipped
    for r, c in ((rows, cols), (rows[odd], cols[odd])):
        out = np.empty((4, 5, len(r)), dtype)
        gather_runs(mapped, 2, pixel_runs(r, c), out)
        np.testing.assert_array_equal(out, data[2:6][:, :, r, c])


def test_pixel_runs_refuse_what_is_not_a_list_of_pixels():
    with pytest.raises(ValueError, match="pixels"):
        pixel_runs([], [])
    with pytest.raises(ValueError, match="pixels"):
        pixel_runs([1, 2], [3])


def test_gather_runs_refuses_a_strided_view():
    data = np.zeros((4, 4, 8, 8), np.uint16)
    runs = pixel_runs([1, 1], [2, 3])
    with pytest.raises(ValueError, match="C-contiguous"):
        gather_runs(data[:, :, ::-1], 0, runs, np.empty((2, 4, 2), np.uint16))
