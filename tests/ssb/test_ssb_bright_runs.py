"""The bright-field pixels copied run by run (qora.ssb.bright_runs), what G's streaming sends to the
device, against NumPy's fancy indexing of the same frames."""

import numpy as np
import pytest

from qora.ssb.bright_runs import STREAMING_STORES, gather_runs, pixel_runs
from qora.ssb.detector import DetectorFit, bright_field_pixels


def test_runs_of_a_disk_are_one_per_row_and_cover_every_pixel():
    index, _ = bright_field_pixels((40, 36), DetectorFit((19.3, 17.6), 11.2, 0.5), 5.6, 300.0)
    rows, cols = np.unravel_index(index, (40, 36))
    runs = pixel_runs(rows, cols)
    assert len(runs) == len(np.unique(rows))
    assert runs[:, 2].sum() == len(index) and runs[0, 3] == 0
    np.testing.assert_array_equal(runs[1:, 3], np.cumsum(runs[:-1, 2]))


STREAMING = [False, True] if STREAMING_STORES else [False]


@pytest.mark.parametrize("streaming", STREAMING)
@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.uint32, np.float32])
def test_gathered_runs_equal_fancy_indexing(tmp_path, dtype, streaming):
    """Both gathers (ordinary and streaming stores), an even and an odd number of frames (the streaming gather
    writes frames in pairs, the odd one last), a disk and a broken set of pixels."""
    if streaming and dtype == np.uint8:
        pytest.skip("streaming stores write 2- or 4-byte pixels (uint8 is refused: tested below)")
    rng = np.random.default_rng(3)
    data = rng.integers(0, 250, (7, 5, 24, 22)).astype(dtype)
    np.save(tmp_path / "d.npy", data)
    mapped = np.asarray(np.load(tmp_path / "d.npy", mmap_mode="r"))
    index, _ = bright_field_pixels((24, 22), DetectorFit((11.4, 10.2), 7.3, 1.0), 7.3, 300.0)
    rows, cols = np.unravel_index(index, (24, 22))
    odd = np.array([0, 3, 4, 5, 9])  # runs broken inside a row, rows skipped
    for r, c in ((rows, cols), (rows[odd], cols[odd])):
        for n in (4, 3):  # 20 frames, 15 frames
            out = np.empty((n, 5, len(r)), dtype)
            gather_runs(mapped, 2, pixel_runs(r, c), out, streaming=streaming)
            np.testing.assert_array_equal(out, data[2:2 + n][:, :, r, c])


@pytest.mark.skipif(not STREAMING_STORES, reason="streaming stores are written for x86-64 hosts")
def test_streaming_gather_refuses_what_it_cannot_write_as_words():
    data = np.zeros((4, 4, 8, 8), np.uint8)
    runs = pixel_runs([1, 1, 1], [2, 3, 4])
    with pytest.raises(ValueError, match="streaming stores need"):
        gather_runs(data, 0, runs, np.empty((2, 4, 3), np.uint8), streaming=True)
    unaligned = np.empty(2 * 4 * 3 * 2 + 1, np.uint8)[1:].view(np.uint16).reshape(2, 4, 3)
    with pytest.raises(ValueError, match="aligned"):
        gather_runs(data.astype(np.uint16), 0, runs, unaligned, streaming=True)
    gather_runs(data.astype(np.uint16), 0, runs, unaligned)  # the default (ordinary stores) writes it


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


@pytest.mark.skipif(not STREAMING_STORES, reason="streaming stores need an x86-64 host")
@pytest.mark.parametrize("block_bytes,threads,streams", [(64 << 20, 8, True), (64 << 20, 2, False),
                                                          ((64 << 20) - 4, 16, False)])
def test_the_default_streams_only_large_blocks_on_many_threads(monkeypatch, block_bytes, threads, streams):
    """streaming=None takes the streaming stores for an output block beyond the last cache on a host of many threads
    (where they saved 6-10% of step 2 on two H100 hosts), the ordinary ones for a cached block or a few threads
    (where they cost)."""
    from qora.ssb import bright_runs

    taken = []
    monkeypatch.setattr(bright_runs, "numba_threads", lambda: threads)
    monkeypatch.setattr(bright_runs, "_gather", lambda *a: taken.append("ordinary"))
    monkeypatch.setattr(bright_runs, "_gather_streaming", lambda *a: taken.append("streaming"))
    out = np.empty((1, 2, block_bytes // 4), np.uint16)  # two frames: one pair of whole words
    gather_runs(np.zeros((3, 2, 4, 4), np.uint16), 0, pixel_runs(np.array([0]), np.array([1])), out)
    assert taken == ["streaming" if streams else "ordinary"]
