"""qora.ssb.live: the wire formats added for issue 25 (Merlin RAW of every counter depth, single chip
and quad; the DECTRIS stream v2 in CBOR) and the host's ingest pass, each against an independent
reference: bytes laid out by hand from the documented layout, RFC 8949's own examples, NumPy."""

import numpy as np
import pytest

from qora.io.errors import FileFormatError, InputError
from qora.ssb import Aberrations, Session, load_data
from qora.ssb.simulation import film_counts
from qora.ssb.live import (DectrisSimulator, Frames, LiveG, LiveOptions, MerlinSimulator, MibWriter, cbor, open_source,
                           run_live)
from qora.ssb.live.ingest import Staging, ingest
from qora.ssb.live.merlin import encode_raw
from qora.ssb.readers import decode_raw

KV, ALPHA = 300.0, 25.0


@pytest.fixture(scope="module")
def counts():
    """uint16 counts of a 12 x 12 scan, 32 x 32 detector."""
    return film_counts(48, aberrations=Aberrations(C10=-100.0), alpha_mrad=ALPHA, film_seed=2, noise_seed=4)


def _zmq():
    pytest.importorskip("zmq")
    pytest.importorskip("numcodecs")


# -- Merlin RAW ---------------------------------------------------------------------------------------
def _raw_by_hand(chip_pixels: list[int], depth: int) -> bytes:
    """One chip's pixels (reading order) as RAW bytes, written from the layout's rule one 64-bit word
    at a time: its pixels packed into an integer, the first in the least significant bits, whose
    bytes are then sent most significant first (the reversed byte order the decoder undoes)."""
    bits = {1: 1, 6: 8, 12: 16}[depth]
    per_word = 64 // bits
    out = bytearray()
    for w in range(0, len(chip_pixels), per_word):
        word = 0
        for k, v in enumerate(chip_pixels[w:w + per_word]):
            word |= int(v) << (k * bits)
        out += word.to_bytes(8, "big")
    return bytes(out)


@pytest.mark.parametrize("depth", [1, 6, 12, 24])
def test_merlin_raw_single_chip_pixel_exact(depth):
    """A RAW frame laid out by hand decodes to the frame, rows flipped (row 0 at the top)."""
    rng = np.random.default_rng(depth)
    rows, cols = 8, 16
    top = {1: 2, 6: 64, 12: 4096, 24: 1 << 24}[depth]
    frame = rng.integers(0, top, (rows, cols))
    stored = frame[::-1].ravel().tolist()  # the chip's reading order is the flipped frame's
    if depth == 24:  # two 12-bit frames: the high counter's first
        blob = _raw_by_hand([v >> 12 for v in stored], 12) + _raw_by_hand([v & 0xFFF for v in stored], 12)
    else:
        blob = _raw_by_hand(stored, depth)
    block = np.frombuffer(blob, np.uint8)[None]
    got = decode_raw(block, rows, cols, counter_depth=depth)
    np.testing.assert_array_equal(got[0], frame)
    np.testing.assert_array_equal(encode_raw(frame[None], counter_depth=depth), block)


@pytest.mark.parametrize("depth", [1, 12])
def test_merlin_raw_quad_chip_layout(depth):
    """A quad: each chip filled with its own value, the strips of every row sent by hand in the
    order 3 = top left, 2 = top right, 1 = bottom left, 0 = bottom right (the lower two turned by
    180 degrees: a marker pixel at a chip's first sent pixel lands at the chip's far corner)."""
    h = w = 8
    value = {"tl": 1, "tr": 0, "bl": 1, "br": 0} if depth == 1 else {"tl": 11, "tr": 22, "bl": 33, "br": 44}
    chips = {k: np.full((h, w), v) for k, v in value.items()}
    marker = 1 if depth == 1 else 99
    for k in ("bl", "br"):
        chips[k][0, 0] = marker if depth != 1 else 1 - chips[k][0, 0]  # the first pixel each lower chip sends
    # before the rows' flip: the MIB-oriented frame
    order = [chips["br"], chips["bl"], chips["tr"], chips["tl"]]  # strips 0, 1, 2, 3
    stream = []
    for r in range(h):
        for chip in order:
            stream += chip[r].tolist()
    blob = _raw_by_hand(stream, depth)
    got = decode_raw(np.frombuffer(blob, np.uint8)[None], 2 * h, 2 * w, counter_depth=depth, assembly="2x2")[0]
    mib = got[::-1]  # undo the flip: the frame as the chips see it
    np.testing.assert_array_equal(mib[:h, :w], chips["tl"])
    np.testing.assert_array_equal(mib[:h, w:], chips["tr"])
    np.testing.assert_array_equal(mib[h:, :w], chips["bl"][::-1, ::-1])
    np.testing.assert_array_equal(mib[h:, w:], chips["br"][::-1, ::-1])
    assert mib[2 * h - 1, w - 1] == chips["bl"][0, 0] and mib[2 * h - 1, 2 * w - 1] == chips["br"][0, 0]


@pytest.mark.parametrize("depth, assembly", [(1, "2x2"), (6, "1x1"), (12, "2x2"), (24, "1x1"), (24, "2x2")])
def test_merlin_raw_over_tcp_and_in_a_mib_file(tmp_path, depth, assembly):
    """RAW frames served over the TCP protocol and written to a .mib: the stream and the file reader
    (the shared parser) give the frames back pixel-exact."""
    rng = np.random.default_rng(depth)
    top = {1: 2, 6: 64, 12: 4096, 24: 1 << 24}[depth]
    data = rng.integers(0, top, (3, 4, 16, 16)).astype(np.uint8 if depth in (1, 6) else np.uint32)
    flat = data.reshape(-1, 16, 16)
    with MerlinSimulator(data, counter_depth=depth, raw=True, assembly=assembly, timeout=5) as sim:
        got = {}
        with open_source(sim.address, batch=5, timeout=5) as src:
            assert src.scan_shape == (3, 4) and src.detector_shape == (16, 16)
            for frames in src:
                got.update(zip(frames.index.tolist(), frames.data))
        sim.join()
    assert sorted(got) == list(range(12)) and all(np.array_equal(got[i], flat[i]) for i in got)
    path = tmp_path / "raw.mib"
    with MibWriter(data, path, counter_depth=depth, raw=True, assembly=assembly, timeout=5) as writer:
        writer.join()
    np.testing.assert_array_equal(np.asarray(load_data(path)[0]), data)


def test_merlin_raw_refusals():
    with pytest.raises(FileFormatError, match="counter depth"):
        decode_raw(np.zeros((1, 32), np.uint8), 16, 16, counter_depth=8)
    with pytest.raises(FileFormatError, match="assembly"):
        decode_raw(np.zeros((1, 32), np.uint8), 16, 16, counter_depth=1, assembly="4x1")
    from qora.ssb.readers import merlin_frame_header

    with pytest.raises(FileFormatError, match="counter depth"):  # a RAW header that says no depth
        merlin_frame_header("MQ1,000001,00384,01,0016,0016,R64,   1x1".split(","))


def test_dropped_and_reordered_raw_quad_frames_are_reported(counts):
    """RAW 12-bit quad frames with a frame left out and two swapped: reported, and G is the offline
    one of the same frames (the dropped one as the mean pattern)."""
    data, step = counts
    with MerlinSimulator(data, counter_depth=12, raw=True, assembly="2x2", drop=[17], swap=[(30, 31)],
                         timeout=10) as sim:
        result = run_live(open_source(sim.address), kv=KV, alpha_mrad=ALPHA, scan_step=step, rotation=0.0,
                          options=LiveOptions(refresh_s=0, fit=False))
        sim.join()
    assert result.report.dropped == [17] and result.report.out_of_order >= 1
    flat = data.reshape((-1,) + data.shape[2:]).astype(np.float64)
    flat[17] = np.delete(flat, 17, axis=0).mean(0)
    ref = Session(flat.reshape(data.shape), kv=KV, alpha_mrad=ALPHA, scan_step=step)
    np.testing.assert_allclose(result.session.G, ref.G, atol=1e-9 * np.abs(ref.G).max())


# -- CBOR and the DECTRIS stream v2 ---------------------------------------------------------------------
@pytest.mark.parametrize("hex_bytes, value", [
    ("00", 0), ("17", 23), ("1818", 24), ("1903e8", 1000), ("1a000f4240", 1000000),
    ("1b000000e8d4a51000", 1000000000000), ("20", -1), ("3903e7", -1000), ("f93c00", 1.0), ("f93e00", 1.5),
    ("fa47c35000", 100000.0), ("fb3ff199999999999a", 1.1), ("f4", False), ("f5", True), ("f6", None),
    ("4401020304", b"\x01\x02\x03\x04"), ("6449455446", "IETF"), ("83010203", [1, 2, 3]),
    ("8301820203820405", [1, [2, 3], [4, 5]]), ("a26161016162820203", {"a": 1, "b": [2, 3]}),
    ("5f42010243030405ff", b"\x01\x02\x03\x04\x05"), ("7f657374726561646d696e67ff", "streaming"),
    ("9f018202039f0405ffff", [1, [2, 3], [4, 5]]), ("bf61610161629f0203ffff", {"a": 1, "b": [2, 3]}),
])
def test_cbor_decodes_the_rfc_examples(hex_bytes, value):
    """RFC 8949 Appendix A's examples (definite and indefinite lengths)."""
    got = cbor.loads(bytes.fromhex(hex_bytes))
    assert (bytes(got) if isinstance(got, memoryview) else got) == value


def test_cbor_typed_arrays_and_the_dectris_tags():
    # RFC 8746: tag 69 = uint16 little-endian, tag 65 = uint16 big-endian; tag 40 = [dims, array]
    item = cbor.loads(bytes.fromhex("d82882820102" "d845" "44" "01000200"))
    assert isinstance(item, cbor.NDArray) and item.shape == (1, 2)
    assert item.content.dtype == np.dtype("<u2") and np.frombuffer(item.content.data, "<u2").tolist() == [1, 2]
    assert cbor.loads(bytes.fromhex("d841420102")).dtype == np.dtype(">u2")
    assert cbor.loads(bytes.fromhex("d85542" "0000")).dtype == np.dtype("<f4")  # 85 = float32 little-endian
    compressed = cbor.loads(bytes.fromhex("d9dcb4" "83" "6562736c7a34" "02" "43616263"))  # 56500(["bslz4", 2, "abc"])
    assert compressed == cbor.Compressed("bslz4", 2, compressed.data) and bytes(compressed.data) == b"abc"
    assert cbor.loads(bytes.fromhex("d9d9f7" "01")) == 1  # the self-described tag is dropped
    for dtype in ("<u2", ">u2", "<u4", "u1", "<f4", "<i2"):
        tagged = cbor.loads(cbor.dumps(cbor.TypedArray(np.dtype(dtype), b"\0" * 8)))
        assert tagged.dtype == np.dtype(dtype)
    message = {"type": "image", "n": -5, "x": 2.5, "ok": True, "none": None, "list": [1, "a", b"\x00"]}
    back = cbor.loads(cbor.dumps(message))
    back["list"][2] = bytes(back["list"][2])
    assert back == message
    with pytest.raises(FileFormatError, match="ends inside"):
        cbor.loads(bytes.fromhex("1903"))
    with pytest.raises(FileFormatError, match="after its item"):
        cbor.loads(bytes.fromhex("0101"))


@pytest.mark.parametrize("encoding", [None, "lz4<", "<"])
def test_dectris_stream2_round_trip_pixel_exact(encoding):
    """The stream v2 (CBOR) simulator and receiver: told apart from v1 by the first message, the
    scan shape from the start message's user data, every frame pixel-exact (bslz4, lz4, none)."""
    _zmq()
    rng = np.random.default_rng(5)
    data = rng.poisson(40, (3, 5, 24, 16)).astype(np.uint16)
    data[0, 0, 0, 0] = 65535  # every bit of the type used
    with DectrisSimulator(data, stream="v2", encoding=encoding, timeout=5) as sim:
        got = {}
        with open_source(f"zmq://127.0.0.1:{sim.port}", batch=4, timeout=5) as src:
            assert src.scan_shape == (3, 5) and src.detector_shape == (24, 16)
            for frames in src:
                assert frames.data.dtype == np.uint16
                got.update(zip(frames.index.tolist(), frames.data))
            assert src.stream == "v2" and src.metadata["detector"]["stream"] == "v2"
        sim.join()
    flat = data.reshape(-1, 24, 16)
    assert sorted(got) == list(range(15)) and all(np.array_equal(got[i], flat[i]) for i in got)


@pytest.mark.parametrize("decode", ["host", "device"])
def test_the_receivers_warm_up_compiles_what_the_stream_runs(decode):
    """Issue 38: a fresh machine's receivers compiled the stream's Numba scanners again at their first frames
    (the warm-up passed bytes, read-only; a ZeroMQ frame's buffer is writable: another type), 1.3 CPU s each, 10k
    frames/s where 54k came warm. After the warm-up a real stream adds no compiled signature."""
    _zmq()
    from qora.ssb.live import stream2
    from qora.ssb.live.receiving import _warm_receiver

    _warm_receiver()
    compiled = [stream2._scan]  # the scanner (its helpers are compiled into it)
    before = [len(f.signatures) for f in compiled]
    assert all(before)
    data = np.random.default_rng(2).poisson(40, (2, 4, 24, 16)).astype(np.uint16)
    with DectrisSimulator(data, stream="v2", timeout=5) as sim:
        with open_source(f"zmq://127.0.0.1:{sim.port}", batch=4, timeout=5) as src:
            src.decode = decode
            placed = sum(len(frames.index) for frames in src)
        sim.join()
    assert placed == 8
    assert [len(f.signatures) for f in compiled] == before


def test_dectris_stream2_dropped_and_reordered_frames_are_reported(counts):
    _zmq()
    data, step = counts
    with DectrisSimulator(data, stream="v2", drop=[5, 60], swap=[(20, 23)], timeout=10) as sim:
        result = run_live(open_source(sim.address, protocol="dectris"), kv=KV, alpha_mrad=ALPHA, scan_step=step,
                          rotation=0.0, options=LiveOptions(refresh_s=0, fit=False))
        sim.join()
    assert result.report.dropped == [5, 60] and result.report.out_of_order >= 1 and not result.report.late
    flat = data.reshape((-1,) + data.shape[2:]).astype(np.float64)
    flat[[5, 60]] = np.delete(flat, [5, 60], axis=0).mean(0)
    ref = Session(flat.reshape(data.shape), kv=KV, alpha_mrad=ALPHA, scan_step=step)
    np.testing.assert_allclose(result.session.G, ref.G, atol=1e-9 * np.abs(ref.G).max())


def test_dectris_stream2_damaged_frames_are_named():
    from qora.ssb.live.dectris import decode_stream2_frames, encode_stream2_frame

    frame = np.arange(64, dtype=np.uint16).reshape(8, 8)
    good = encode_stream2_frame(frame)
    bad = encode_stream2_frame(frame)
    bad.content.data = cbor.Compressed("bslz4", 2, bytes(good.content.data.data)[:20])
    with pytest.raises(FileFormatError, match="frame 1 of the batch"):
        decode_stream2_frames([good, bad])
    with pytest.raises(FileFormatError, match="not supported"):
        decode_stream2_frames([cbor.NDArray((8, 8), cbor.TypedArray(np.dtype("<u2"), cbor.Compressed("zstd", 0, b"")))])
    with pytest.raises(FileFormatError, match="needs 128"):
        decode_stream2_frames([cbor.NDArray((8, 8), cbor.TypedArray(np.dtype("<u2"), b"\0" * 10))])


# -- the host's ingest pass ------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.uint32])
def test_ingest_sums_and_gathers_as_numpy(dtype):
    rng = np.random.default_rng(0)
    frames = rng.integers(0, np.iinfo(dtype).max, (13, 20, 24)).astype(dtype)
    index = np.sort(rng.choice(20 * 24, 57, replace=False)).astype(np.int64)
    mean_sum = np.full((20, 24), 7.0)
    out = np.empty((13, 57), dtype)
    ingest(frames, index, mean_sum, out)
    np.testing.assert_array_equal(mean_sum, 7.0 + frames.sum(0, dtype=np.float64))
    np.testing.assert_array_equal(out, frames.reshape(13, -1)[:, index])


def test_staging_is_reused_and_host_memory_on_the_cpu():
    from qora.backend import resolve

    staging = Staging(resolve("cpu"))
    a = staging.array(10, 7, np.uint16)
    b = staging.array(5, 7, np.uint16)
    assert isinstance(a, np.ndarray) and np.shares_memory(a, b) and b.shape == (5, 7)
    assert staging.array(5, 7, np.uint32).dtype == np.uint32


@pytest.mark.gpu
def test_ingest_into_page_locked_staging_and_the_device_rows_match_the_cpu(counts):
    """CUDA: the gathered pixels staged in page-locked memory, the rows on the device: G as the CPU's."""
    data, step = counts
    from qora.backend import resolve

    cuda = resolve("cuda")
    pinned = Staging(cuda).array(8, 5, np.uint16)
    assert pinned.flags.c_contiguous and pinned.base is not None  # a view of CuPy's pinned allocation
    out = {}
    for backend in ("cpu", "cuda"):
        live = LiveG(data.shape[:2], data.shape[2:], kv=KV, alpha_mrad=ALPHA, scan_step=step, backend=backend,
                     precision="double")
        flat = data.reshape((-1,) + data.shape[2:])
        for start in range(0, len(flat), 12):
            idx = np.arange(start, min(len(flat), start + 12))
            if start % 24:  # every other batch in reverse: the scatter by index, not the block copy
                idx = idx[::-1]
            live.add(Frames(idx, flat[idx]))
        live.finish()
        out[backend] = resolve(backend).to_host(live.session().G)
    np.testing.assert_allclose(out["cuda"], out["cpu"], atol=1e-9 * np.abs(out["cpu"]).max())


# -- the command line ------------------------------------------------------------------------------------
@pytest.mark.parametrize("protocol, options", [("dectris", ["--stream", "v2"]),
                                               ("merlin", ["--raw", "--counter-depth", "12", "--assembly", "2x2"])])
def test_cli_serve_speaks_the_new_formats(tmp_path, protocol, options):
    """`qora ssb serve` as a DECTRIS stream v2 and as a Merlin sending RAW quad frames: a receiver
    gets the recorded counts back pixel-exact."""
    import socket
    import threading

    from click.testing import CliRunner

    from qora.cli import cli
    from qora.ssb import write_dataset

    if protocol == "dectris":
        _zmq()
    data = np.random.default_rng(3).poisson(20, (3, 4, 16, 16)).astype(np.uint16)
    path = tmp_path / "counts.h5"
    write_dataset(path, data, kv=KV, alpha_mrad=ALPHA, scan_step=0.4)
    with socket.socket() as s:  # a free port for the server to take
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = {}
    server = threading.Thread(target=lambda: result.setdefault("out", CliRunner().invoke(
        cli, ["ssb", "serve", str(path), "--protocol", protocol, "--port", str(port), "--fps", "2000",
              "--timeout", "10", *options])))
    server.start()
    scheme = "zmq" if protocol == "dectris" else "tcp"
    got = {}
    for attempt in range(50):  # the server binds its port once the file is read
        try:
            with open_source(f"{scheme}://127.0.0.1:{port}", timeout=10) as src:
                for frames in src:
                    got.update(zip(frames.index.tolist(), frames.data))
            break
        except InputError:  # connection refused: the server has not bound its port yet
            if attempt == 49:
                raise
            import time

            time.sleep(0.2)
    server.join(30)
    assert result["out"].exit_code == 0, result["out"].output
    assert "sent 12 frames" in result["out"].output
    flat = data.reshape(-1, 16, 16)
    assert sorted(got) == list(range(12)) and all(np.array_equal(got[i], flat[i]) for i in got)


def test_the_compiled_stream2_walk_agrees_with_the_cbor_decoder():
    """scan_image (one Numba walk) finds what the CBOR decoder finds, whatever the key order, with
    other channels and keys of nested items around, indefinite lengths; other layouts are left to
    the decoder (None), never misread."""
    from qora.ssb.live.dectris import encode_stream2_frame
    from qora.ssb.live.stream2 import scan_image

    rng = np.random.default_rng(7)
    frame = rng.poisson(9, (12, 20)).astype(np.uint16)
    for compression in ("bslz4", "lz4", "none"):
        array = encode_stream2_frame(frame, compression)
        other = encode_stream2_frame(frame[::-1].copy(), compression)
        fields = [("type", "image"), ("series_id", 3), ("image_id", 70000), ("real_time", [1, 1000]),
                  ("user_data", {"a": [1, {"b": b"\x00" * 30}], "c": cbor.Tag(1, 1.5e9), "d": None, "e": -2.5}),
                  ("data", {"threshold_2": other, "threshold_1": array})]
        for trial in range(4):
            order = rng.permutation(len(fields))
            message = cbor.dumps(dict(fields[i] for i in order), self_described=bool(trial % 2))
            got = scan_image(message, b"threshold_1")
            full = cbor.loads(message)
            ref = full["data"]["threshold_1"]
            payload = ref.content.data.data if isinstance(ref.content.data, cbor.Compressed) else ref.content.data
            assert (got.series_id, got.image_id, got.shape) == (3, 70000, ref.shape)
            assert bytes(got.payload) == bytes(payload) and got.tag == cbor.typed_array_tag(ref.content.dtype)
            assert got.algorithm == (None if compression == "none" else compression)
    # an indefinite-length map (0xbf ... 0xff) around the same items
    body = cbor.dumps({"type": "image", "series_id": 1, "image_id": 5, "data": {"threshold_1": array}},
                      self_described=False)
    indefinite = b"\xbf" + body[1:] + b"\xff"
    assert scan_image(indefinite, b"threshold_1").image_id == 5
    # other layouts: left to the decoder
    column_major = cbor.NDArray(frame.shape, cbor.TypedArray(np.dtype("<u2"), frame.tobytes()), "F")
    for data in ({"threshold_1": column_major}, {"threshold_2": array}):
        assert scan_image(cbor.dumps({"type": "image", "series_id": 1, "image_id": 5, "data": data}),
                          b"threshold_1") is None
    for message in (cbor.dumps({"type": "end", "series_id": 1}), b"\x01", b"", message[:-3]):
        assert scan_image(message, b"threshold_1") is None
