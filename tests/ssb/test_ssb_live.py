"""qora.ssb.live: the detector streams, G built as frames arrive, and the live run end to end over
the Merlin TCP and DECTRIS ZMQ simulators (127.0.0.1, servers bounded in frames and time)."""

import io

import numpy as np
import pytest

from qora.io.errors import FileFormatError, InputError
from qora.ssb import Aberrations, Session, amorphous_slices, crystal_slices, load_data, simulate
from qora.ssb.simulation import film_counts
from qora.ssb.live import (DectrisSimulator, FellBehind, Frames, LiveG, LiveOptions, MemorySource, MerlinSimulator,
                           MibWriter, Placement, open_source, run_live)
from qora.ssb.live import bslz4
from qora.ssb.live.dectris import decode_frame, encode_frame
from qora.ssb.live.fitting import cold_fit
from qora.ssb.live.merlin import message

KV, ALPHA = 300.0, 25.0
AB = Aberrations(C10=-120.0, C12=(20.0, 0.5))


@pytest.fixture(scope="module")
def counts():
    """uint16 counts of a 24 x 24 scan, 32 x 32 detector, as a detector sends them."""
    return film_counts(96, aberrations=AB, alpha_mrad=ALPHA)


def _needs_the_live_extra():
    """The DECTRIS stream's packages (the ``live`` extra: pyzmq, numcodecs), installed by ``make test``."""
    pytest.importorskip("zmq")
    pytest.importorskip("numcodecs")


def _offline(data, step, **kw):
    """The offline session of the same counts, on the CPU unless told (the reference the live G is held to)."""
    return Session(data, kv=KV, alpha_mrad=ALPHA, scan_step=step, **{"backend": "cpu", **kw})


# -- wire formats -----------------------------------------------------------------------------
@pytest.mark.parametrize("dtype, shape", [(np.uint16, (100, 100)), (np.uint32, (37, 29)), (np.uint8, (64, 48))])
def test_bitshuffle_lz4_matches_hdf5plugin_both_ways(dtype, shape, rng):
    """Our decoder reads the chunks hdf5plugin's bitshuffle filter writes, and the filter reads ours
    (37 x 29: a tail of elements after the last multiple of 8, stored as they are)."""
    _needs_the_live_extra()
    h5py = pytest.importorskip("h5py")
    hdf5plugin = pytest.importorskip("hdf5plugin")
    a = rng.poisson(5, (1,) + shape).astype(dtype)
    with h5py.File(io.BytesIO(), "w") as f:
        d = f.create_dataset("x", data=a, chunks=a.shape, **hdf5plugin.Bitshuffle(cname="lz4"))
        _, chunk = d.id.read_direct_chunk((0, 0, 0))
        np.testing.assert_array_equal(bslz4.decompress(chunk, dtype, a.size), a.ravel())
        e = f.create_dataset("y", shape=a.shape, dtype=dtype, chunks=a.shape, **hdf5plugin.Bitshuffle(cname="lz4"))
        e.id.write_direct_chunk((0, 0, 0), bslz4.compress(a))
        np.testing.assert_array_equal(e[()], a)


def test_bitshuffle_lz4_batch_decoder_matches_the_reference(rng):
    """The compiled batch decoder (LZ4 and the 64-bit bit transpose) gives the NumPy reference's
    frames, for each element size and a tail after the last multiple of 8; a damaged blob is named."""
    _needs_the_live_extra()
    from qora.ssb.live.bslz4_numba import decode_batch

    for dtype, shape in ((np.uint16, (48, 40)), (np.uint32, (37, 29)), (np.uint8, (64, 48))):
        frames = [rng.poisson(lam, shape).astype(dtype) for lam in (0.01, 3, 3000 if dtype != np.uint8 else 200)]
        blobs = [bslz4.compress(f) for f in frames]
        out = decode_batch(blobs, dtype, frames[0].size)
        for f, b, o in zip(frames, blobs, out):
            np.testing.assert_array_equal(o, bslz4.decompress(b, dtype, f.size))
            np.testing.assert_array_equal(o, f.ravel())
    broken = blobs[1][:40] + bytes(len(blobs[1]) - 40)
    for bad in (broken, blobs[1][:len(blobs[1]) // 2], blobs[1][:7]):  # damaged, cut short, shorter than a header
        with pytest.raises(ValueError, match="frame 1 of the batch"):
            decode_batch([blobs[0], bad], dtype, frames[0].size)


def test_compiled_bitshuffle_equals_the_numpy_reference():
    """The encoder's compiled bit transpose gives the NumPy reference's bytes for any block (element
    sizes 1-8, 1 to 512 groups of 8 elements, any bytes); hdf5plugin reads what it writes (test above)."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from qora.ssb.live.bslz4_numba import shuffle_block

    @settings(max_examples=60, deadline=None)
    @given(itemsize=st.sampled_from([1, 2, 4, 8]), groups=st.integers(1, 512), seed=st.integers(0, 2**32 - 1))
    def check(itemsize, groups, seed):
        raw = np.random.default_rng(seed).integers(0, 256, 8 * groups * itemsize, dtype=np.uint8)
        np.testing.assert_array_equal(shuffle_block(raw, itemsize), bslz4._shuffle(raw, itemsize))

    check()


@pytest.mark.parametrize("encoding", ["<", "lz4<", "bs16-lz4<"])
def test_dectris_frame_encodings_round_trip(encoding, rng):
    _needs_the_live_extra()
    frame = rng.integers(0, 4000, (24, 40)).astype(np.uint16)
    info, blob = encode_frame(frame, encoding)
    assert info["shape"] == [40, 24]  # [x, y]
    np.testing.assert_array_equal(decode_frame(info, blob), frame)
    with pytest.raises(FileFormatError, match="not supported"):
        decode_frame({**info, "encoding": "zstd"}, blob)


@pytest.mark.parametrize("depth, raw", [(12, False), (24, False), (6, False), (1, False), (1, True)])
def test_merlin_frames_written_live_are_read_by_the_mib_reader(tmp_path, depth, raw):
    """A .mib written frame by frame (the follow mode reads it as it grows) holds the frames that
    rosettasciio (normal frames) and the RAW decoder read back from the finished file."""
    data = np.random.default_rng(0).poisson(3, (3, 4, 16, 16))
    data = (data > 3).astype(np.uint8) if depth in (1, 6) else data.astype(np.uint16 if depth == 12 else np.uint32)
    path = tmp_path / "scan.mib"
    with MibWriter(data, path, fps=2000, counter_depth=depth, raw=raw, timeout=5) as writer:
        got = {}
        with open_source(str(path), follow=True, timeout=5, batch=5) as src:
            assert src.scan_shape == (3, 4) and src.detector_shape == (16, 16)
            for frames in src:
                got.update(zip(frames.index.tolist(), frames.data))
        writer.join()
    flat = data.reshape(-1, 16, 16)
    assert sorted(got) == list(range(12))
    assert all(np.array_equal(got[i], flat[i]) for i in got)
    np.testing.assert_array_equal(np.asarray(load_data(path)[0]), data)


def test_merlin_message_framing_errors():
    assert message(b"HDR,x").startswith(b"MPX,0000000006,")  # the length counts the comma before the body
    with pytest.raises(FileFormatError, match="unknown Merlin pixel format"):
        from qora.ssb.readers import merlin_frame_header

        merlin_frame_header("MQ1,000001,00384,01,0016,0016,F32,   1x1".split(","))


def test_open_source_names(tmp_path):
    assert "Merlin" in type(open_source("tcp://127.0.0.1:6342")).__name__
    assert "Dectris" in type(open_source("zmq://127.0.0.1:9999")).__name__
    assert "Dectris" in type(open_source("tcp://127.0.0.1:9999", protocol="dectris")).__name__
    with pytest.raises(InputError, match="HOST:PORT"):
        open_source("tcp://nohost")
    with pytest.raises(InputError, match="no such file"):
        open_source(str(tmp_path / "missing.mib"))
    with pytest.raises(InputError, match="--follow reads a Merlin .mib"):
        open_source(str(tmp_path / "x.h5"), follow=True)


# -- placement: dropped, late, repeated, out of order ------------------------------------------
def test_placement_reports_every_frame_not_placed():
    p = Placement((4, 5), lag_rows=1)
    keep = p.accept(np.array([0, 1, 3, 2, 2, 4, 99, -1]))  # 2 twice, 99 and -1 beyond the scan
    assert keep.tolist() == [True, True, True, True, False, True, False, False]
    assert p.report.out_of_order == 1 and p.report.repeated == [2] and p.report.out_of_range == [99, -1]
    assert p.rows_to_close() == [0]  # row 0 complete
    p.accept(np.array([5, 6, 8, 9]))  # 7 never comes
    assert p.rows_to_close() == []  # row 1 waits for frames of row 2 (lag 1)
    p.accept(np.array([10, 11]))
    assert p.rows_to_close() == [1] and p.report.dropped == [7]
    keep, late = p.accept(np.array([7, 7]), with_late=True)  # late: row 1 is transformed; then a repeat
    assert keep.tolist() == [True, False] and late.tolist() == [True, False]
    assert p.report.late == [7] and p.report.dropped == [] and p.report.repeated == [2, 7]
    assert p.rows_to_close(end=True) == [2, 3] and p.report.dropped == [12, 13, 14, 15, 16, 17, 18, 19]
    assert p.complete_rows == 4


# -- G built as frames arrive ----------------------------------------------------------------
def test_live_g_equals_the_offline_session(counts, rng):
    """Frames shuffled within each row, in batches of odd sizes: the G, level, disk and bright field
    of the live rows equal the offline session's on the same frames (1e-6 relative)."""
    data, step = counts
    sy, sx = data.shape[:2]
    order = np.concatenate([r * sx + rng.permutation(sx) for r in range(sy)])
    flat = data.reshape((sy * sx,) + data.shape[2:])
    live = LiveG((sy, sx), data.shape[2:], kv=KV, alpha_mrad=ALPHA, scan_step=step, calibration_rows=2)
    for start in range(0, len(order), 37):
        idx = order[start:start + 37]
        live.add(Frames(idx, flat[idx]))
    live.finish()
    got, ref = live.session(), _offline(data, step)
    assert got.detector.center == pytest.approx(ref.detector.center, abs=1e-9)
    np.testing.assert_array_equal(got.bf_index, ref.bf_index)
    assert got.level == pytest.approx(ref.level, rel=1e-12)
    np.testing.assert_allclose(got.G, ref.G, rtol=0, atol=1e-6 * np.abs(ref.G).max())
    np.testing.assert_allclose(got.bright_field, ref.bright_field, rtol=1e-9)
    assert live.report.out_of_order > 0 and not live.report.dropped
    # the live session has every attribute an offline one has (session_from_spectrum sets them)
    assert set(vars(got)) - {"_band_cache"} == set(vars(ref)) - {"_band_cache"}
    # a partial scan is the scan of its rows
    part = live.session(rows=10)
    np.testing.assert_allclose(part.G, _offline(data[:10], step, detector=part.detector, level=part.level).G,
                               atol=1e-9 * np.abs(ref.G).max())


def test_live_g_taper_of_a_partial_scan(counts):
    """The taper's G is the transform of the rows with each pixel's mean out, times the Tukey window."""
    from qora.ssb.live.accumulate import _tukey

    data, step = counts
    live = LiveG(data.shape[:2], data.shape[2:], kv=KV, alpha_mrad=ALPHA, scan_step=step)
    for frames in MemorySource(data[:14], batch=50):  # complete rows close as they fill
        live.add(frames)
    assert live.rows_done == 14
    ref = live.session(rows=12)
    tapered = live.session(rows=12, taper=1.0)
    bf = np.fft.irfft(np.fft.ifft(ref.G, axis=0), n=data.shape[1], axis=1).real  # rows (12, sx, nbf) / level
    w = _tukey(12, 1.0)
    assert w[0] > 0 and w.max() == pytest.approx(1.0, abs=0.02)
    expect = np.fft.fft(np.fft.rfft((bf - bf.mean((0, 1))) * w[:, None, None], axis=1), axis=0)
    np.testing.assert_allclose(tapered.G, expect, atol=1e-9 * np.abs(expect).max())
    # the whole scan is never tapered
    for frames in MemorySource(data, batch=50):
        later = frames.index >= 14 * data.shape[1]
        live.add(Frames(frames.index[later], frames.data[later]))
    live.finish()
    np.testing.assert_array_equal(live.session(taper=1.0).G, live.session().G)


def test_dropped_frames_show_the_mean_pattern_never_another_position(counts):
    """Dropped frames are filled with the mean pattern of those received: G equals the offline
    session of the data with the mean pattern at the dropped positions."""
    data, step = counts
    sy, sx = data.shape[:2]
    dropped = [30, 31, 100]
    flat = data.reshape((sy * sx,) + data.shape[2:])
    keep = np.setdiff1d(np.arange(sy * sx), dropped)
    live = LiveG((sy, sx), data.shape[2:], kv=KV, alpha_mrad=ALPHA, scan_step=step)
    for start in range(0, len(keep), 24):
        idx = keep[start:start + 24]
        live.add(Frames(idx, flat[idx]))
    live.finish()
    assert live.report.dropped == dropped
    filled = flat.astype(np.float64)
    filled[dropped] = flat[keep].mean(0)
    ref = _offline(filled.reshape(data.shape), step)
    np.testing.assert_allclose(live.session().G, ref.G, atol=1e-9 * np.abs(ref.G).max())


# -- end to end over the simulators -------------------------------------------------------------
def _assert_fit_parity(a, b):
    """The parity bounds of the GPU fits: agreement 1e-5 relative, C10 and C12 within 0.1 A."""
    assert b["standard"]["agreement"] == pytest.approx(a["standard"]["agreement"], rel=1e-5)
    for name in ("C10", "C12a", "C12b"):
        assert abs(b["standard"]["parameters"][name] - a["standard"]["parameters"][name]) < 0.1


@pytest.mark.parametrize("protocol", ["merlin", "dectris"])
def test_live_run_over_the_wire_equals_the_offline_session(counts, protocol):
    """The simulator serves the scan at 3,000 frames/s; the live run refreshes the image and fit of
    the rows so far, and its final image and fit equal the offline session's (1e-6 relative)."""
    data, step = counts
    if protocol == "dectris":
        _needs_the_live_extra()
    Sim = MerlinSimulator if protocol == "merlin" else DectrisSimulator
    updates = []
    with Sim(data, fps=3000, timeout=10, time_limit=30) as sim:
        source = open_source(sim.address, protocol=protocol, timeout=10)
        result = run_live(source, kv=KV, alpha_mrad=ALPHA, scan_step=step, rotation=0.0,
                          # a refresh after each batch of frames: with a refresh period, a source that delivers
                          # the whole scan at once (frames buffered while the run starts) leaves none to check
                          options=LiveOptions(refresh_s=1e-9, fit_after=0.4), on_update=updates.append)
        sim.join()
    ref = _offline(data, step)
    np.testing.assert_allclose(result.session.G, ref.G, atol=1e-6 * np.abs(ref.G).max())
    offline_fit = ref.fit(rotation=0.0, tilt=False)  # the cold start's 200 trials find the optimum here
    _assert_fit_parity(offline_fit, result.fit)
    ref.rotation = result.fit["rotation_rad"]
    from qora.ssb import parameters_to_aberrations

    image = ref.image(parameters_to_aberrations(result.fit["standard"]["parameters"]))
    np.testing.assert_allclose(result.image, image, atol=1e-6 * np.abs(image).max())
    assert result.report.placed == data.shape[0] * data.shape[1] and not result.report.dropped
    assert result.statistics["received"] == result.statistics["processed"] == result.report.placed
    assert updates and all(u.image.shape == (u.rows, data.shape[1]) for u in updates)
    assert [u.rows for u in updates] == sorted({u.rows for u in updates})
    assert any(u.fit is not None for u in updates)  # the fit started on a partial scan
    assert result.latency_s >= 0


def test_dropped_and_reordered_frames_over_the_wire(counts):
    """Frames the simulator leaves out are reported dropped; frames it swaps are placed by their
    numbers (reported out of order), so the image is the offline one of the same frames."""
    data, step = counts
    with MerlinSimulator(data, fps=5000, drop=[40], swap=[(100, 101), (200, 205)], timeout=10) as sim:
        result = run_live(open_source(sim.address), kv=KV, alpha_mrad=ALPHA, scan_step=step, rotation=0.0,
                          options=LiveOptions(refresh_s=0, fit=False))
        sim.join()
    assert result.report.dropped == [40] and result.report.out_of_order >= 2 and not result.report.late
    flat = data.reshape((-1,) + data.shape[2:]).astype(np.float64)
    flat[40] = np.delete(flat, 40, axis=0).mean(0)
    ref = _offline(flat.reshape(data.shape), step)
    np.testing.assert_allclose(result.session.G, ref.G, atol=1e-9 * np.abs(ref.G).max())


@pytest.mark.parametrize("method", ["obf", "icom", "wdd"])
def test_live_methods_refresh_and_end_as_offline(counts, method):
    """OBF and iCoM are refreshed from the rows so far and end equal to the offline image; WDD shows SSB while the
    scan runs (the refreshed images are the partial sessions' SSB images) and WDD of the whole scan at the end."""
    data, step = counts
    ab = AB
    shown = "ssb" if method == "wdd" else method  # what the refreshes show
    checked = []

    def check(update):  # each refresh's image is its partial session's image by the method shown
        again = update.session.image(None if shown == "icom" else ab, shown)
        checked.append(float(np.abs(update.image - again).max() / np.abs(again).max()))

    result = run_live(MemorySource(data, batch=48), kv=KV, alpha_mrad=ALPHA, scan_step=step, rotation=0.0,
                      aberrations=ab, options=LiveOptions(refresh_s=1e-9, fit=False, method=method), on_update=check)
    ref = _offline(data, step)
    expected = ref.image(None if method == "icom" else ab, method)
    np.testing.assert_allclose(result.image, expected, atol=1e-6 * np.abs(expected).max())
    assert result.updates and all(u.image.shape == (u.rows, data.shape[1]) for u in result.updates)
    assert len(checked) == len(result.updates) and max(checked) < 1e-12
    with pytest.raises(InputError, match="method must be one of"):
        run_live(MemorySource(data, batch=48), kv=KV, alpha_mrad=ALPHA, scan_step=step, rotation=0.0,
                 options=LiveOptions(method="ptycho"))


def test_a_warm_final_fit_starts_from_the_partial_fit(counts):
    """final_fit "warm": Newton from the last partial-scan fit (no search) - the result is a maximum
    of the whole scan's agreement (Newton from it moves nowhere) and says it was warm-started."""
    from qora.ssb.live.fitting import warm_fit

    data, step = counts
    result = run_live(MemorySource(data, batch=48), kv=KV, alpha_mrad=ALPHA, scan_step=step, rotation=0.0,
                      options=LiveOptions(refresh_s=1e-9, fit_after=0.5, final_fit="warm"))
    assert result.fit["warm_start"] and any(u.fit is not None for u in result.updates)
    again = warm_fit(result.session, result.fit, fit_rotation=False, tilt=False, band=(0.2, 0.9))
    for name in ("C10", "C12a", "C12b"):
        assert again["standard"]["parameters"][name] == pytest.approx(result.fit["standard"]["parameters"][name],
                                                                      abs=0.01)


def test_auto_final_fit_is_warm_only_after_a_fit_of_half_the_rows(counts, monkeypatch):
    """final_fit "auto": warm when the last partial fit saw half the rows and WARM_MIN_ROWS, else the
    search again; a run's choice follows the rows its last partial fit saw."""
    from qora.ssb.live import run as live_run

    assert live_run.warm_final("auto", 256, 512) and not live_run.warm_final("auto", 255, 512)
    assert not live_run.warm_final("auto", 48, 48)  # a small scan: always the search (fewer than 64 rows)
    assert live_run.warm_final("warm", 1, 512) and not live_run.warm_final("cold", 512, 512)
    data, step = counts
    rows = data.shape[0]
    for minimum, warm in ((4, True), (rows + 1, False)):
        monkeypatch.setattr(live_run, "WARM_MIN_ROWS", minimum)
        result = run_live(MemorySource(data, batch=48), kv=KV, alpha_mrad=ALPHA, scan_step=step, rotation=0.0,
                          options=LiveOptions(refresh_s=1e-9, fit_after=0.5))
        seen = max(u.rows for u in result.updates if u.fit is not None)
        assert seen >= rows / 2 and bool(result.fit.get("warm_start")) == warm


def test_processing_that_falls_behind_is_an_error(counts):
    """A receive buffer of 16 frames that stays full for 0.1 s (the refreshes are slowed to 0.5 s each)."""
    import time

    data, step = counts
    source = MemorySource(data, batch=8)
    with pytest.raises(FellBehind, match="fell behind"):
        run_live(source, kv=KV, alpha_mrad=ALPHA, scan_step=step, rotation=0.0,
                 options=LiveOptions(refresh_s=1e-9, fit=False, queue_frames=16, max_wait_s=0.1),
                 on_update=lambda update: time.sleep(0.5))


def test_a_silent_detector_is_an_error_not_a_hang():
    import socket

    server = socket.create_server(("127.0.0.1", 0))
    try:
        source = open_source(f"tcp://127.0.0.1:{server.getsockname()[1]}", timeout=0.3)
        with pytest.raises(InputError, match="no data for 0.3 s"):
            source.open()
        source.close()
    finally:
        server.close()


def test_a_silent_dectris_stream_says_what_to_check():
    pytest.importorskip("zmq")
    import socket

    with socket.socket() as probe:  # a free port: nothing sends there
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    source = open_source(f"zmq://127.0.0.1:{port}", timeout=0.3)
    with pytest.raises(InputError, match=r"no message for 0.3 s; is the detector armed .* --timeout waits longer"):
        source.open()
    source.close()


# -- the fit on a partial scan ------------------------------------------------------------------
@pytest.mark.parametrize("film", ["amorphous", "crystal"])
def test_fit_after_a_quarter_of_the_rows(film):
    """After 25% of the rows (16 of 64) the fitted C10 is within 5 A of the whole scan's fit (the
    issue's bound; measured: 3.3 A on the amorphous film, 0.0 A on the crystal)."""
    slices = (amorphous_slices((256, 256), 0.1, atoms_per_a2=0.1, seed=1) if film == "amorphous"
              else crystal_slices((256, 256), 0.1, period=3.2))
    scan = simulate(slices, pixel=0.1, stride=4, window=32, alpha_mrad=ALPHA, aberrations=AB)
    data = scan.data
    live = LiveG(data.shape[:2], data.shape[2:], kv=KV, alpha_mrad=ALPHA, scan_step=scan.scan_step)
    partial = None
    for frames in MemorySource(data, batch=data.shape[1]):
        live.add(frames)
        if partial is None and live.rows_done == data.shape[0] // 4:
            partial = cold_fit(live.session(), rotation=0.0, tilt=False, band=(0.2, 0.9), trials=64)
    live.finish()
    whole = cold_fit(live.session(), rotation=0.0, tilt=False, band=(0.2, 0.9), trials=64)
    c10 = partial["standard"]["parameters"]["C10"], whole["standard"]["parameters"]["C10"]
    assert abs(c10[0] - c10[1]) < 5.0, c10
    assert abs(c10[1] - AB.get("C10")) < 10.0  # and the whole scan's fit finds the simulated C10


# -- GPU ------------------------------------------------------------------------------------------
@pytest.mark.gpu
def test_live_g_on_the_device_matches_the_cpu(counts):
    """Rows kept on the device (complex64 by default, and complex128): G and the images as the CPU's."""
    data, step = counts
    cpu = _offline(data, step)
    for precision, tol in (("double", 1e-9), ("single", 1e-5)):
        live = LiveG(data.shape[:2], data.shape[2:], kv=KV, alpha_mrad=ALPHA, scan_step=step, backend="cuda",
                     precision=precision)
        for frames in MemorySource(data, batch=50):
            live.add(frames)
        live.finish()
        s = live.session()
        np.testing.assert_allclose(s.G.get(), cpu.G, atol=tol * np.abs(cpu.G).max())
        a, b = s.image(AB), cpu.image(AB)
        np.testing.assert_allclose(a, b, atol=10 * tol * np.abs(b).max())


@pytest.mark.gpu
@pytest.mark.parametrize("protocol", ["merlin", "dectris"])
def test_live_run_on_the_device_over_the_wire(counts, protocol):
    data, step = counts
    if protocol == "dectris":
        _needs_the_live_extra()
    Sim = MerlinSimulator if protocol == "merlin" else DectrisSimulator
    with Sim(data, fps=20000, timeout=10) as sim:
        result = run_live(open_source(sim.address, protocol=protocol), kv=KV, alpha_mrad=ALPHA, scan_step=step,
                          rotation=0.0, backend="cuda", options=LiveOptions(refresh_s=0.01))
        sim.join()
    ref = _offline(data, step, backend="cuda")  # the offline session on the device (complex64 G, as live)
    _assert_fit_parity(ref.fit(rotation=0.0, tilt=False), result.fit)
    assert result.report.placed == data.shape[0] * data.shape[1]


@pytest.mark.gpu
def test_the_wide_rehearsal_takes_cupys_64bit_index_kernels():
    """The premise of the wide film, on the device: CuPy marks an array of more than 2 GiB (and its views) for
    64-bit indexing, a kernel variant of its own; the wide film's G rows, row buffers and session G are so marked,
    as a full scan's are (the rehearsal's small film's are not)."""
    from qora.backend import resolve
    from qora.ssb.live.rehearsal import WIDE_BYTES, rehearse_wide

    flat, detector, step = _rehearsal_film()
    backend = resolve("cuda")
    xp = backend.xp
    assert not xp.zeros(WIDE_BYTES // 4 + 1, np.float32)[:4]._index_32_bits
    assert xp.zeros(WIDE_BYTES // 4, np.float32)._index_32_bits
    live, session = rehearse_wide(backend, flat, detector, step, device_decode=True)
    assert not live.G_rows._index_32_bits and not live._buffer._index_32_bits and not session.G._index_32_bits
    assert len(live.report.late) > 0
    del live, session
    xp.get_default_memory_pool().free_all_blocks()


# -- the command line ------------------------------------------------------------------------------
@pytest.mark.parametrize("final_fit", ["cold", "warm"])
def test_cli_live_over_the_merlin_simulator(counts, tmp_path, final_fit):
    """`qora ssb live tcp://...` against the simulator: the refreshes, the report, the image and the
    fit written; its image is the offline image for the fitted parameters; `--final-fit warm` ends with
    Newton from the last partial fit."""
    import json

    import h5py
    from click.testing import CliRunner

    from qora.cli import cli
    from qora.ssb import parameters_to_aberrations

    data, step = counts
    img, fit = tmp_path / "live.h5", tmp_path / "live.json"
    # a refresh after every batch: where the command's start outlasts the simulator's 0.2 s at 3000 frames/s,
    # the frames wait in the socket and come as three batches within milliseconds
    with MerlinSimulator(data, fps=3000, timeout=10) as sim:
        out = CliRunner().invoke(cli, ["ssb", "live", sim.address, "--kv", str(KV), "--semiangle", str(ALPHA),
                                       "--scan-step", str(step), "--rotation", "0", "--refresh", "0.001",
                                       "--fit-after", "0.4", "--out", str(img), "--fit-out", str(fit),
                                       "--final-fit", final_fit, "--backend", "cpu"])
        sim.join()
    assert out.exit_code == 0, out.output
    assert "rows " in out.output
    assert "576 frames placed (0 of them late, added to their transformed rows), 0 dropped" in out.output
    assert "after the last frame" in out.output
    record = json.loads(fit.read_text())
    assert record["frames"]["placed"] == 576 and record["statistics"]["received"] == 576
    assert bool(record["fit"].get("warm_start")) == (final_fit == "warm")
    ref = _offline(data, step)
    image = ref.image(parameters_to_aberrations(record["fit"]["standard"]["parameters"]))
    with h5py.File(img) as f:
        np.testing.assert_allclose(f["phase"][()], image, atol=1e-6 * np.abs(image).max())


def test_cli_serve_refuses_intensities_and_live_refuses_bad_sources(tmp_path):
    from click.testing import CliRunner

    from qora.cli import cli
    from qora.ssb import write_dataset

    path = tmp_path / "float.h5"
    write_dataset(path, np.full((4, 4, 16, 16), 0.5), kv=KV, alpha_mrad=ALPHA, scan_step=0.4)
    out = CliRunner().invoke(cli, ["ssb", "serve", str(path), "--timeout", "1"])
    assert out.exit_code == 2 and "not counts" in out.output
    counts = tmp_path / "counts.h5"
    write_dataset(counts, np.ones((4, 4, 16, 16)), kv=KV, alpha_mrad=ALPHA, scan_step=0.4)
    out = CliRunner().invoke(cli, ["ssb", "serve", str(counts), "--timeout", "0.5"])  # no client comes
    assert out.exit_code == 1 and "Error: no client read a frame within --timeout 0.5 s: nothing sent" in out.output
    out = CliRunner().invoke(cli, ["ssb", "live", "tcp://127.0.0.1", "--kv", "300", "--semiangle", "25",
                                   "--scan-step", "0.4"])
    assert out.exit_code == 2 and "HOST:PORT" in out.output


def test_a_jump_of_many_rows_closes_the_rows_it_passes(counts):
    """Frames of rows 0 and 9 in one batch (rows 1-8 lost: the ring of row buffers is shorter than
    the jump): row 0 keeps its frames, rows 1-8 are reported dropped, nothing is misplaced."""
    data, step = counts
    sy, sx = data.shape[:2]
    flat = data.reshape((sy * sx,) + data.shape[2:])
    live = LiveG((sy, sx), data.shape[2:], kv=KV, alpha_mrad=ALPHA, scan_step=step, calibration_rows=1)
    head = np.arange(sx)
    live.add(Frames(head, flat[head]))  # row 0: calibrates, closes
    jump = np.concatenate([np.arange(sx, sx + 4), np.arange(9 * sx, 9 * sx + 4)])
    live.add(Frames(jump, flat[jump]))
    rest = np.arange(9 * sx + 4, sy * sx)
    live.add(Frames(rest, flat[rest]))
    live.finish()
    lost = np.setdiff1d(np.arange(sy * sx), np.concatenate([head, jump, rest]))
    assert live.report.dropped == lost.tolist() and live.report.placed == sy * sx - len(lost)
    filled = flat.astype(np.float64)
    filled[lost] = np.delete(flat, lost, axis=0).mean(0)
    ref = _offline(filled.reshape(data.shape), step)
    np.testing.assert_allclose(live.session().G, ref.G, atol=1e-9 * np.abs(ref.G).max())


def test_any_local_order_and_drops_give_the_offline_g(counts):
    """Property: frames arriving in any order in which none comes after a frame a row or more beyond
    it (the arrival order sorts index + noise, noise in [0, cols)), any frames dropped, any batch
    sizes - the dropped ones are reported, none is late, and G is the offline session's of the data
    with the mean pattern at the dropped positions."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    data, step = counts
    sy, sx = data.shape[:2]
    flat = data.reshape((sy * sx,) + data.shape[2:])
    n = sy * sx

    @settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(seed=st.integers(0, 2**32 - 1), spread=st.floats(0.0, 1.0),
           drops=st.sets(st.integers(sx, n - 1), max_size=30), batch=st.integers(1, 80))
    def check(seed, spread, drops, batch):
        noise = np.random.default_rng(seed).uniform(0, spread * (sx - 1), n)
        order = np.argsort(np.arange(n) + noise, kind="stable")
        order = order[~np.isin(order, list(drops))]
        live = LiveG((sy, sx), data.shape[2:], kv=KV, alpha_mrad=ALPHA, scan_step=step)
        for start in range(0, len(order), batch):
            idx = order[start:start + batch]
            live.add(Frames(idx, flat[idx]))
        live.finish()
        assert live.report.dropped == sorted(drops) and not live.report.late
        filled = flat.astype(np.float64)
        if drops:
            filled[sorted(drops)] = np.delete(flat, sorted(drops), axis=0).mean(0)
        ref = _offline(filled.reshape(data.shape), step)
        np.testing.assert_allclose(live.session().G, ref.G, atol=1e-9 * np.abs(ref.G).max())

    check()


def test_late_frames_are_added_to_their_transformed_rows(counts):
    """Frames that come after their row was closed and transformed (a receiver many rows behind the
    others) are placed into the row's transform: G equals the offline session's, nothing is dropped."""
    data, step = counts
    sy, sx = data.shape[:2]
    flat = data.reshape((sy * sx,) + data.shape[2:])
    late = np.array([sx + 3, 2 * sx, 2 * sx + 7, 3 * sx - 1])  # rows 1 and 2, columns at both ends
    order = np.concatenate([np.setdiff1d(np.arange(sy * sx), late), late])  # they come at the end
    for precision in ("double", "single"):
        live = LiveG((sy, sx), data.shape[2:], kv=KV, alpha_mrad=ALPHA, scan_step=step, lag_rows=1,
                     precision=precision)
        for start in range(0, len(order), 37):
            idx = order[start:start + 37]
            live.add(Frames(idx, flat[idx]))
        live.finish()
        assert sorted(live.report.late) == sorted(late.tolist()) and not live.report.dropped
        ref = _offline(data, step)
        rtol = 1e-9 if precision == "double" else 1e-5
        np.testing.assert_allclose(live.session().G, ref.G, atol=rtol * np.abs(ref.G).max())


def test_warm_fit_with_the_rotation_climbs_from_its_start(counts):
    """The warm start with the rotation fitted (the soft-edged band of fit_rotation) and the thick
    branch after it: the agreement at the result is no lower than at the start."""
    from qora.ssb.band import make_band
    from qora.ssb.live.fitting import NAMES, warm_fit

    data, step = counts
    session = _offline(data, step)
    start = session.fit(rotation=0.0, tilt=False, trials=64)
    start = {**start, "rotation_rad": 0.03}
    result = warm_fit(session, start, fit_rotation=True, tilt=True, band=(0.2, 0.9))
    before = make_band(session, NAMES, rotation=0.03).evaluate(start["standard"]["parameters"], order=0)
    assert result["standard"]["agreement"] >= before
    assert result["standard"]["parameter_order"] == ["C10", "C12a", "C12b", "rotation"]
    assert set(result["thick"]["parameters"]) == {"C10", "C12a", "C12b", "thickness", "tilt_y", "tilt_x"}
    assert result["better"] in ("standard", "thick") and result["warm_start"]


# -- the viewer's live mode (server side; the page's script is exercised by the browser tests) -------
def test_viewer_live_mode_builds_up_and_the_sliders_work(counts):
    """The live view swaps in the session of the rows so far at each refresh; /api/ssb/live reports
    the rows, the live fit in the sliders' units and the statistics; previews answer on the rows so
    far and at the end equal the offline session's preview."""
    import json
    import urllib.request

    pytest.importorskip("starlette")
    from qora.viewer import BackgroundServer
    from qora.viewer.app import make_app
    from qora.viewer.views import LiveSsbView

    data, step = counts
    seen = []
    with MerlinSimulator(data, fps=2000, timeout=10) as sim:
        view = LiveSsbView(open_source(sim.address), kv=KV, alpha_mrad=ALPHA, scan_step=step, rotation=0.0,
                           backend="cpu", options=LiveOptions(refresh_s=0.02, fit_after=0.4))
        original = view._swap
        view._swap = lambda session, rows, fit, stats: (seen.append(rows), original(session, rows, fit, stats))
        server = BackgroundServer(make_app(view))
        try:
            status = view.wait(60)
            sim.join()
            assert status["state"] == "done", status
            info = json.loads(urllib.request.urlopen(server.url + "api/info").read())
            assert info["live"] and info["scan"] == list(data.shape[:2])
            live = json.loads(urllib.request.urlopen(server.url + "api/ssb/live").read())
            assert live["rows"] == data.shape[0] and live["statistics"]["dropped"] == 0
            fitted = view.result.fit["standard"]["parameters"]
            assert live["fit"]["C10"] == pytest.approx(fitted["C10"])
            body = json.dumps({"params": {"C10": live["fit"]["C10"], "rotation": 0.0}, "seq": 1}).encode()
            request = urllib.request.Request(server.url + "api/ssb/preview", data=body,
                                             headers={"Content-Type": "application/json"})
            answer = urllib.request.urlopen(request)
            assert answer.status == 200 and answer.read()[:4] == b"\x89PNG"
        finally:
            server.close()
    assert any(rows < data.shape[0] for rows in seen[:-1])  # the image built up over partial scans
    assert seen == sorted(seen)
    ref = _offline(data, step)
    np.testing.assert_allclose(view.session.preview({"C10": -100.0}), ref.preview({"C10": -100.0}),
                               atol=1e-6 * np.abs(ref.preview({"C10": -100.0})).max())


def test_memory_source_paced_at_a_frame_rate(counts):
    """MemorySource(fps=...) yields each batch no sooner than its last frame's time at that rate (the
    bench's final case at a detector's pace); bad rates are refused."""
    import time

    data, _ = counts
    n = data.shape[0] * data.shape[1]
    t0 = time.perf_counter()
    got = sum(len(f.index) for f in MemorySource(data, batch=64, fps=n / 0.2))
    assert got == n and time.perf_counter() - t0 >= 0.2 * (1 - 1e-6)
    with pytest.raises(InputError, match="fps must be positive"):
        MemorySource(data, fps=0)


def test_the_rehearsal_runs_the_live_path_and_its_fits(monkeypatch):
    """What run_live does before a CUDA scan's header (qora.ssb.live.rehearsal), on the CPU backend here: the small
    film's frames placed, dealt between two receivers as a detector deals them (each batch every other frame: the
    indexed write a fresh machine's first scan otherwise compiled during its frames) and in order, its session made
    and fitted cold then warm; the fit finds the film's C10 (-100 A)."""
    from qora.backend import resolve
    from qora.ssb.live.accumulate import LiveG
    from qora.ssb.live.rehearsal import rehearse

    batches = []
    scatter = LiveG._scatter
    monkeypatch.setattr(LiveG, "_scatter", lambda self, index, values: (batches.append(np.diff(index).max()),
                                                                         scatter(self, index, values)))
    fit = rehearse(resolve("cpu"), fit=True, fit_rotation=False, tilt=False, band=(0.2, 0.9), trials=64,
                   device_decode=False)
    assert abs(fit["standard"]["parameters"]["C10"] + 100.0) < 10.0  # measured -95.2 A (noise, a 16 x 16 scan)
    assert batches and min(batches) >= 2  # every batch written in time was a dealt one (the late row's is added)
    assert rehearse(resolve("cpu"), fit=False, fit_rotation=False, tilt=False, band=(0.2, 0.9), trials=64,
                    device_decode=False) is None


def _rehearsal_film():
    """The rehearsal's small film placed (CPU), for the wide film's disk."""
    from qora.ssb import Aberrations
    from qora.ssb.live.rehearsal import _batches, _place_dealt

    data, step = film_counts(64, aberrations=Aberrations(C10=-100.0), alpha_mrad=25.0, film_seed=5, noise_seed=6)
    flat = data.reshape((-1,) + data.shape[2:])
    small = LiveG(data.shape[:2], data.shape[2:], kv=300.0, alpha_mrad=25.0, scan_step=step, backend="cpu",
                  calibration_rows=2, receivers=2)
    _place_dealt(small, _batches(flat, False), len(flat))
    return flat, small.detector(), step


def test_the_wide_rehearsal_reaches_the_asked_extent(monkeypatch):
    """The wide film (qora.ssb.live.rehearsal.rehearse_wide), here on the CPU at a small extent: its G's rows and
    the session's G hold at least the bytes asked (on a GPU: beyond CuPy's 32-bit index width), its frames were
    dealt, some late, the rest of the scan missing and filled by the mean pattern; the CPU's rehearsal never runs
    it (only a GPU's arrays take CuPy's index widths)."""
    from qora.backend import resolve
    from qora.ssb.live import rehearsal

    from qora.ssb.live.accumulate import LiveG

    flat, detector, step = _rehearsal_film()
    transformed, transform = [], LiveG._transform

    def counting(self, rows):
        transformed.append([r for r in rows if self._owner[r % self.ring] == r])  # the rows that had frames
        transform(self, rows)

    monkeypatch.setattr(LiveG, "_transform", counting)
    monkeypatch.setattr(LiveG, "_ring_rows", lambda self, row_bytes: self.scan_shape[0])  # a GPU's: every row
    live, session = rehearsal.rehearse_wide(resolve("cpu"), flat, detector, step, device_decode=False,
                                            bytes_at_least=3 << 20)
    assert live.scan_shape[1] == rehearsal.WIDE_COLS and live.G_rows.nbytes >= 3 << 20 <= session.G.nbytes
    # one transform of several rows with frames, as a scan's receivers close them (its own indexing kernel)
    assert [2, 3] in transformed and all(len(rows) <= 1 for rows in transformed if rows != [2, 3])
    assert len(live.report.late) > 0 and live.report.placed == 4 * rehearsal.WIDE_COLS
    assert np.isfinite(session.G).all() and session.bf_count == live.G_rows.shape[2]
    called = []
    monkeypatch.setattr(rehearsal, "rehearse_wide", lambda *a, **k: called.append(a))
    rehearsal.rehearse(resolve("cpu"), fit=False, fit_rotation=False, tilt=False, band=(0.2, 0.9), trials=64,
                       device_decode=False)
    assert not called


def test_the_cuda_libraries_are_read_ahead(tmp_path):
    """Before a CUDA scan the libraries whose kernels load at first use are asked into the page cache: those a
    process's maps name (cuFFT, cuBLAS and cuBLASLt, NVRTC), not the others, not a file that is gone; no maps, no
    files."""
    from qora.ssb.live.rehearsal import read_ahead_libraries

    names = ["libcufft.so.12", "libcublasLt.so.13", "libnvrtc.so.13.0.48", "libcudart.so.13", "libm.so.6"]
    for name in names:
        (tmp_path / name).write_bytes(b"\0" * 4096)
    lines = [f"7f00-7f10 r-xp 00000000 08:01 1234 {tmp_path / name}" for name in names + ["libcublas.so.13"]]
    maps = tmp_path / "maps"
    maps.write_text("\n".join(lines + ["7f20-7f30 rw-p 00000000 00:00 0 [heap]"]) + "\n")
    asked = read_ahead_libraries(str(maps))
    assert asked == sorted(str(tmp_path / n) for n in ("libcufft.so.12", "libcublasLt.so.13", "libnvrtc.so.13.0.48"))
    assert read_ahead_libraries(str(tmp_path / "no-maps")) == []


@pytest.mark.parametrize("protocol", ["merlin", "dectris"])
def test_the_source_is_connected_before_the_device_is_prepared(counts, monkeypatch, protocol):
    """run_live prepares the device before the header (13 s on a fresh machine's first run): it connects first, so
    that a stream waiting for its receivers (the simulators wait `timeout` s for one) sees them meanwhile; before,
    a simulator with a 10 s timeout gave up and the run waited for a header that never came."""
    import time

    from qora.ssb.live import run as live_run

    if protocol == "dectris":
        _needs_the_live_extra()
    data, step = counts
    monkeypatch.setattr(live_run, "_before_the_scan", lambda *args: time.sleep(2.5) or 2.5)
    Sim = MerlinSimulator if protocol == "merlin" else DectrisSimulator
    with Sim(data, timeout=1.5) as sim:
        result = run_live(open_source(sim.address, protocol=protocol, timeout=10), kv=KV, alpha_mrad=ALPHA,
                          scan_step=step, rotation=0.0, options=LiveOptions(refresh_s=0, fit=False))
        sim.join()
    assert result.report.placed == data.shape[0] * data.shape[1]
    assert result.statistics["prepare_s"] == 2.5
