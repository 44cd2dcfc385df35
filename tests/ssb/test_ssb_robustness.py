"""What a user, a damaged file or a network peer can hand Qora's 4D-STEM readers: a scan shape that
disagrees with the stream, a .npy whose header lies about its size, random bytes under a detector
format's name, Merlin frames and messages whose declared lengths are absurd. Each is one
FileFormatError or InputError naming what is wrong (the command line: one ``Error:`` line, exit 2),
never an allocation of what a header claims, never another exception."""

import re
import socket
import threading
import tracemalloc
from contextlib import contextmanager

import numpy as np
import pytest
from click.testing import CliRunner

from qora.cli import cli
from qora.io.errors import FileFormatError, InputError
from qora.ssb import load_data, write_dataset
from qora.ssb.live import MerlinSimulator, open_source
from qora.ssb.live.merlin import acquisition_header, decode_frame, frame_message, message
from qora.ssb.readers import merlin_frame_header
from qora.testing import error_line

LIVE = ["--kv", "300", "--semiangle", "25", "--scan-step", "0.4", "--rotation", "0", "--no-fit", "--backend", "cpu",
        "--timeout", "3"]


def _one_error_line(result, pattern):
    line = error_line(result)
    assert re.search(pattern, line), line


def _peak_bytes(call):
    """Run ``call`` under tracemalloc; its peak of traced memory is kept in ``_peak_bytes.last`` even when it raises."""
    tracemalloc.start()
    try:
        return call()
    finally:
        _peak_bytes.last = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()


def _counts(scan=(16, 16), det=16, seed=0):
    return np.random.default_rng(seed).poisson(5, scan + (det, det)).astype(np.uint16)


@contextmanager
def merlin_peer(payload: bytes):
    """A peer on 127.0.0.1 that sends ``payload`` to the first client and then closes: its address."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(10)

    def serve():
        try:
            conn, _ = server.accept()
        except OSError:
            return
        with conn:
            try:
                conn.sendall(payload)
            except OSError:
                pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"tcp://127.0.0.1:{server.getsockname()[1]}"
    finally:
        server.close()
        thread.join(5)


def _header(frames=256, per_trigger=16, **kw) -> bytes:
    return message(acquisition_header(frames=frames, frames_per_trigger=per_trigger, **kw))


# -- 1. a scan shape that disagrees with the stream's header or the file ---------------------------

def test_cli_live_refuses_a_scan_shape_that_disagrees_with_the_stream_header():
    """The stream's header says 16 x 16 = 256 frames; --scan-shape 8 8 once used 64 and dropped 192 (exit 0)."""
    with MerlinSimulator(_counts(), fps=5000, timeout=5) as sim:
        out = CliRunner().invoke(cli, ["ssb", "live", sim.address, "--scan-shape", "8", "8", *LIVE])
        try:
            sim.join()
        except Exception:  # noqa: BLE001 - the simulator's client left: not what is tested
            pass
    line = error_line(out)
    assert re.search(r"scan shape given, 8 x 8 = 64 frames, disagrees with the acquisition header's 256 frames "
                     r"\(16 x 16\); give a scan shape of 256 frames \(--scan-shape ROWS COLS\)", line), line


def test_a_scan_shape_that_agrees_with_the_header_is_taken():
    with merlin_peer(_header(256, 16) + message(frame_message(1, np.zeros((16, 16), np.uint16)))) as address:
        with open_source(address, scan_shape=(32, 8), timeout=3) as src:  # 256 frames: another grid, allowed
            assert src.scan_shape == (32, 8)


def test_a_scan_shape_that_disagrees_with_a_file_is_refused(tmp_path):
    path = tmp_path / "scan.h5"
    write_dataset(path, _counts((4, 4)), kv=300.0, alpha_mrad=25.0, scan_step=0.4)
    with pytest.raises(InputError, match=r"scan shape given, 2 x 2 = 4 frames, disagrees with the file's 16 frames "
                                         r"\(4 x 4\)"):
        open_source(str(path), scan_shape=(2, 2))


def test_follow_refuses_a_scan_shape_that_disagrees_with_the_hdr(tmp_path):
    path = tmp_path / "scan.mib"
    path.with_suffix(".hdr").write_bytes(acquisition_header(frames=256, frames_per_trigger=16).rstrip(b" ") + b"\n")
    path.write_bytes(b"".join(frame_message(i + 1, np.zeros((16, 16), np.uint16)) for i in range(4)))
    src = open_source(str(path), follow=True, scan_shape=(8, 8), timeout=1)
    with pytest.raises(InputError, match=r"8 x 8 = 64 frames, disagrees with the scan\.hdr's 256 frames"):
        src.open()
    src.close()


def test_dectris_refuses_a_scan_shape_that_disagrees_with_the_stream_header():
    from qora.ssb.live import DectrisZMQSource

    src = DectrisZMQSource("tcp://127.0.0.1:9", scan_shape=(8, 8))
    with pytest.raises(InputError, match=r"8 x 8 = 64 frames, disagrees with the stream's header's 256 frames"):
        src._open_v2({"type": "start", "ntrigger": 16, "nimages": 16, "image_size_x": 16, "image_size_y": 16})
    src = DectrisZMQSource("tcp://127.0.0.1:9", scan_shape=(8, 8))
    with pytest.raises(InputError, match=r"disagrees with the stream's header's 100 frames \(10 x 10\)"):
        src._open_v2({"type": "start", "user_data": {"scan_shape": [10, 10]}, "image_size_x": 16,
                      "image_size_y": 16})
    src = DectrisZMQSource("tcp://127.0.0.1:9")  # none given: a header's absurd scan is refused before it is used
    with pytest.raises(InputError, match=r"scan of 100000 x 100000 frames"):
        src._open_v2({"type": "start", "ntrigger": 100000, "nimages": 100000, "image_size_x": 16,
                      "image_size_y": 16})


# -- 3. a .npy whose header declares more than the file holds ------------------------------------

def _lying_npy(path, shape=(100, 100, 1000, 2000), data_bytes=72):
    """A .npy of ~200 bytes whose header claims an array of shape ``shape`` float32 (80 GB by default)."""
    from numpy.lib import format as npformat

    with open(path, "wb") as f:
        npformat.write_array_header_1_0(f, {"descr": "<f4", "fortran_order": False, "shape": tuple(shape)})
        f.write(b"\0" * data_bytes)
    return path


def test_load_data_refuses_a_npy_whose_header_claims_80_gb(tmp_path):
    path = _lying_npy(tmp_path / "lie.npy")
    assert path.stat().st_size == 200
    with pytest.raises(FileFormatError, match=r"lie\.npy: cannot be read: its \.npy header declares a "
                                              r"100x100x1000x2000 float32 array of 80000000000 bytes \(74\.5 GiB\), "
                                              r"the file holds 72 bytes after its header"):
        load_data(path)


def test_load_pattern_refuses_a_npy_whose_header_claims_more_without_allocating_it(tmp_path):
    from qora.io.patterns import load_pattern

    path = _lying_npy(tmp_path / "lie.npy", shape=(40000, 40000))  # 6.4 GB declared
    with pytest.raises(FileFormatError, match=r"lie\.npy: .*declares a 40000x40000 float32 array of 6400000000 "
                                              r"bytes .*the file holds 72 bytes"):
        _peak_bytes(lambda: load_pattern(path))
    assert _peak_bytes.last < 50 << 20


@pytest.mark.parametrize("version", [(1, 0), (2, 0), (3, 0)])
def test_npy_of_every_format_version_is_read_and_checked(tmp_path, version):
    from numpy.lib import format as npformat

    path = tmp_path / "v.npy"
    data = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5)
    with open(path, "wb") as f:
        npformat.write_array(f, data, version=version)
    np.testing.assert_array_equal(np.asarray(load_data(path)[0]), data)
    path.write_bytes(path.read_bytes()[:150])
    with pytest.raises(FileFormatError, match=r"v\.npy: cannot be read: .*480 bytes, the file holds 22 bytes"):
        load_data(path)


def test_load_pattern_refuses_an_npz_member_whose_header_claims_more(tmp_path):
    import io
    import zipfile

    from numpy.lib import format as npformat

    from qora.io.patterns import load_pattern

    member = io.BytesIO()
    npformat.write_array_header_1_0(member, {"descr": "<f4", "fortran_order": False, "shape": (40000, 40000)})
    member.write(b"\0" * 72)
    path = tmp_path / "lie.npz"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("intensity.npy", member.getvalue())
    with pytest.raises(FileFormatError, match=r"lie\.npz \(its array 'intensity'\): .*6400000000 bytes .*member "
                                              r"holds 72 bytes"):
        _peak_bytes(lambda: load_pattern(path))
    assert _peak_bytes.last < 50 << 20


def test_cli_refuses_a_lying_npy_with_one_line(tmp_path, monkeypatch):
    path = _lying_npy(tmp_path / "lie.npy")
    monkeypatch.chdir(tmp_path)
    out = CliRunner().invoke(cli, ["ssb", "image", str(path), "--out", "x.h5", "--kv", "300", "--semiangle", "20",
                                   "--scan-step", "0.4"])
    line = error_line(out)
    assert re.search(r"lie\.npy: .*80000000000 bytes .*72 bytes", line), line


def test_npy_header_against_file_size_property(tmp_path_factory):
    """Any declared shape and any number of data bytes: refused exactly when the file holds fewer
    bytes than declared, with a FileFormatError; a file that holds them is read."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from qora.io.npy import check_npy

    folder = tmp_path_factory.mktemp("npy")

    @settings(max_examples=60, deadline=None)
    @given(shape=st.lists(st.integers(0, 10**7), min_size=0, max_size=4).map(tuple),
           held=st.integers(0, 256), dtype=st.sampled_from(["<u2", "<f4", "<f8", "|u1"]),
           version=st.sampled_from([1, 2]))
    def check(shape, held, dtype, version):
        path = folder / "x.npy"
        from numpy.lib import format as npformat

        write = npformat.write_array_header_1_0 if version == 1 else npformat.write_array_header_2_0
        with open(path, "wb") as f:
            write(f, {"descr": dtype, "fortran_order": False, "shape": shape})
            f.write(b"\1" * held)
        declared = int(np.prod(shape, dtype=object)) * np.dtype(dtype).itemsize
        if held < declared:
            with pytest.raises(FileFormatError, match=rf"x\.npy: cannot be read: .*{declared} bytes"):
                check_npy(path)
        else:
            assert check_npy(path)[0] == shape
            if len(shape) != 4:
                with pytest.raises(FileFormatError):
                    load_data(path)

    check()


# -- 4. random bytes under a detector format's name; malformed Merlin frames ---------------------

@pytest.mark.parametrize("suffix", [".dm4", ".dm3"])
def test_random_bytes_under_a_dm_name_are_a_file_format_error(tmp_path, suffix, monkeypatch):
    pytest.importorskip("rsciio")
    path = tmp_path / f"random{suffix}"
    path.write_bytes(np.random.default_rng(1).bytes(4000))
    with pytest.raises(FileFormatError, match=rf"random\{suffix}: cannot be read as \{suffix} .*damaged, or not a"):
        load_data(path)
    monkeypatch.chdir(tmp_path)
    out = CliRunner().invoke(cli, ["ssb", "fit", str(path), "--out", "x.json", "--kv", "300", "--semiangle", "20",
                                   "--scan-step", "0.4"])
    _one_error_line(out, rf"random\{suffix}: cannot be read as \{suffix}")


def test_a_merlin_frame_shorter_than_its_header_declares():
    body = frame_message(1, np.zeros((16, 16), np.uint16))
    with pytest.raises(FileFormatError, match=r"scan\.mib: frame 1 declares 384 bytes of header and 512 of pixels "
                                              r"\(16x16 U16\), its record holds 400 bytes"):
        decode_frame(body[:400], (16, 16), where="scan.mib")


def test_follow_names_a_frame_whose_header_lies(tmp_path):
    """Frame 3 of a .mib says its header is 999 bytes: numpy's "buffer is smaller than requested size" before."""
    path = tmp_path / "scan.mib"
    path.with_suffix(".hdr").write_bytes(acquisition_header(frames=16, frames_per_trigger=4).rstrip(b" ") + b"\n")
    frames = [frame_message(i + 1, np.zeros((16, 16), np.uint16)) for i in range(16)]
    frames[2] = frames[2].replace(b",00384,", b",00999,", 1)
    path.write_bytes(b"".join(frames))
    with open_source(str(path), follow=True, timeout=1) as src:
        with pytest.raises(FileFormatError, match=r"scan\.mib: frame 3 declares 999 bytes of header and 512 of "
                                                  r"pixels .*holds 896 bytes"):
            list(src)


@pytest.mark.parametrize("fields, pattern", [
    ("MQ1,000001,99999999,01,0016,0016,U16,   1x1", r"declares itself 99999999 bytes long"),
    ("MQ1,000001,00384,01,8000,8000,U32,   1x1", r"8000 x 8000 U32 pixels, 256000000 bytes: more than a Merlin"),
    ("MQ1,000001,00384,01,0000,0016,U16,   1x1", r"declares 16 x 0 pixels"),
    ("MQ1,000001,-0001,01,0016,0016,U16,   1x1", r"non-numeric fields"),
    ("MQ1,000001,00384,01,0003,0003,R64,   1x1,x,x,x,x,x,x,x,x,x,x,x,x,x,x,x,x,x,MQ1A,t,1ns,1",
     r"not a whole number of 64-bit words"),
    ("MQ1,000001,00384,01,0018,0016,R64,   2x2,x,x,x,x,x,x,x,x,x,x,x,x,x,x,x,x,x,MQ1A,t,1ns,12", r"of four chips"),
])
def test_merlin_frame_headers_with_absurd_fields(fields, pattern):
    with pytest.raises(FileFormatError, match=pattern):
        merlin_frame_header(fields.split(","))


def test_merlin_frame_header_and_decode_of_any_bytes_raise_only_file_format_errors():
    """Any MQ1 header fields (numbers, text, huge values) and any bytes after them: the header
    parser and the frame decoder return a frame or raise FileFormatError, nothing else."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    number = st.one_of(st.integers(-10, 10**12).map(str), st.text(max_size=8))
    field = st.one_of(number, st.sampled_from(["U08", "U16", "U32", "R64", "1x1", "2x2", "MQ1A", "12", "1", "24"]),
                      st.text(max_size=12))

    @settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(fields=st.lists(field, min_size=0, max_size=30), fmt=st.sampled_from(["U08", "U16", "U32", "R64", "F32"]),
           rows=number, cols=number, size=number, tail=st.binary(max_size=2048), depth=st.sampled_from([None, 1, 12]))
    def check(fields, fmt, rows, cols, size, tail, depth):
        head = ["MQ1", "000001", size, "01", cols, rows, fmt, "   1x1"] + fields
        text = ",".join(head)
        try:
            merlin_frame_header(text.split(","), counter_depth=depth)
        except FileFormatError:
            pass
        body = text.encode("latin-1", "replace") + b"," + tail
        try:
            index, frame = decode_frame(body, (16, 16), where="peer", counter_depth=depth)
        except FileFormatError as error:
            assert str(error).startswith("peer: ")
        else:
            assert frame.shape == (16, 16)

    check()

    @settings(max_examples=200, deadline=None)
    @given(st.binary(max_size=1024))
    def random_bytes(data):
        try:
            merlin_frame_header(data.decode("latin-1").split(","))
        except FileFormatError:
            pass

    random_bytes()


# -- 5. lengths a Merlin peer declares -------------------------------------------------------------

def test_a_merlin_peer_declaring_a_9_gib_header_is_refused_without_allocating_it():
    with merlin_peer(b"MPX,9999999999,HDR,") as address:
        src = open_source(address, timeout=3)
        with pytest.raises(FileFormatError, match=r"a message declares 9999999998 bytes, an acquisition header "
                                                  r"\(HDR\) is 1 to 1048576 bytes .*the stream is ended"):
            _peak_bytes(src.open)
        src.close()
    assert _peak_bytes.last < 100 << 20


def test_a_merlin_frame_message_longer_than_the_detector_sends_is_refused():
    """After the first frame (16 x 16 U16: 896 bytes a message), a message declaring 1 GB ends the stream."""
    first = message(frame_message(1, np.zeros((16, 16), np.uint16)))
    with merlin_peer(_header(256, 16) + first + b"MPX,1000000000,MQ1,") as address:
        with open_source(address, timeout=3) as src:
            with pytest.raises(FileFormatError, match=r"a message declares 999999999 bytes, a frame is 1 to 1049088 "
                                                      r"bytes"):
                list(src)


def test_a_merlin_first_frame_declaring_a_huge_frame_is_refused():
    head = b"MQ1,000001,00384,01,8000,8000,U32,   1x1,".ljust(384, b"\0")
    with merlin_peer(_header(256, 16) + message(head)) as address:
        src = open_source(address, timeout=3)
        with pytest.raises(FileFormatError, match=r"the first frame: .*256000000 bytes: more than a Merlin frame"):
            src.open()
        src.close()


def test_a_merlin_header_declaring_an_absurd_scan_is_refused():
    with merlin_peer(_header(10**10, 10**5)) as address:
        src = open_source(address, timeout=3)
        with pytest.raises(InputError, match=r"declares a scan of 100000 x 100000 frames"):
            src.open()
        src.close()
    with merlin_peer(message(b"HDR,\nFrames in Acquisition (Number):\t1e9\nEnd")) as address:
        src = open_source(address, timeout=3)
        with pytest.raises(FileFormatError, match=r"'Frames in Acquisition \(Number\)' is '1e9', not a whole number"):
            src.open()
        src.close()


def test_cli_live_against_a_lying_merlin_peer_is_one_error_line():
    with merlin_peer(b"MPX,9999999999,HDR,") as address:
        out = CliRunner().invoke(cli, ["ssb", "live", address, *LIVE])
    line = error_line(out)
    assert re.search(r"a message declares 9999999998 bytes.*the stream is ended", line), line


def test_a_merlin_stream_of_random_bytes_ends_with_a_file_format_or_input_error():
    """Whatever a peer sends after a valid acquisition header (random bytes, or frames with random
    lengths), the receiver yields frames or raises FileFormatError / InputError."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    first = message(frame_message(1, np.zeros((16, 16), np.uint16)))

    @settings(max_examples=25, deadline=None)
    @given(tail=st.one_of(st.binary(max_size=600),
                          st.builds(lambda n, rest: b"MPX,%010d," % n + rest, st.integers(0, 9999999999),
                                    st.binary(max_size=64))),
           with_first=st.booleans())
    def check(tail, with_first):
        with merlin_peer(_header(16, 4) + (first if with_first else b"") + tail) as address:
            src = open_source(address, timeout=2)
            try:
                for _ in src:
                    pass
            except (FileFormatError, InputError):
                pass
            finally:
                src.close()

    check()


def test_dectris_frames_declaring_another_size_are_refused_before_decoding():
    """A DECTRIS peer's frame part declaring 100000 x 100000 pixels (20 GB decoded) on a 16 x 16
    detector, or a header declaring such a detector: refused before anything is allocated."""
    from qora.ssb.live import DectrisZMQSource
    from qora.ssb.live.dectris import encode_frame

    src = DectrisZMQSource("tcp://127.0.0.1:9", scan_shape=(4, 4), decode="host")
    src._open_v2({"type": "start", "ntrigger": 4, "nimages": 4, "image_size_x": 16, "image_size_y": 16})
    info, blob = encode_frame(np.zeros((16, 16), np.uint16))
    assert src._batch_v1([0], [info], [blob]).data.shape == (1, 16, 16)
    with pytest.raises(FileFormatError, match=r"a frame declares 100000 x 100000 pixels, the stream's detector is "
                                              r"16 x 16: the stream is ended"):
        _peak_bytes(lambda: src._batch_v1([1], [{**info, "shape": [100000, 100000]}], [blob]))
    assert _peak_bytes.last < 50 << 20
    with pytest.raises(FileFormatError, match=r"pixels of type object"):
        src._batch_v1([1], [{**info, "type": "object"}], [blob])
    src = DectrisZMQSource("tcp://127.0.0.1:9", scan_shape=(4, 4))
    with pytest.raises(FileFormatError, match=r"declares a detector of 100000 x 100000 pixels"):
        src._open_v2({"type": "start", "ntrigger": 4, "nimages": 4, "image_size_x": 100000, "image_size_y": 100000})


# rosettasciio's readers leave the file open when they fail on it (its ResourceWarning, not Qora's)
@pytest.mark.filterwarnings("ignore::ResourceWarning", "ignore::pytest.PytestUnraisableExceptionWarning")
def test_random_bytes_under_any_detector_format_name_raise_only_qora_errors(tmp_path_factory):
    """Any bytes under the name of a format rosettasciio or the Merlin reader reads: load_data
    returns data or raises a QoraError (FileFormatError, or MissingExtra for a reader's missing
    dependency), never the reader's own NotImplementedError, IndexError, struct.error, ..."""
    pytest.importorskip("rsciio")
    import logging

    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from qora.io.errors import QoraError

    folder = tmp_path_factory.mktemp("random")

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(suffix=st.sampled_from([".dm3", ".dm4", ".mrc", ".blo", ".emd", ".hspy", ".tvips", ".mib"]),
           magic=st.sampled_from([b"", b"\x00\x00\x00\x03", b"\x00\x00\x00\x04", b"MQ1,000001,00384,01,0016,0016,"]),
           data=st.binary(max_size=4096))
    def check(suffix, magic, data):
        path = folder / f"x{suffix}"
        path.write_bytes(magic + data)
        try:
            load_data(path)
        except QoraError:
            pass

    logging.disable(logging.CRITICAL)  # rosettasciio's warnings about the files
    try:
        check()
    finally:
        logging.disable(logging.NOTSET)


@pytest.mark.parametrize("rows,block", [(512, 29), (29, 29), (30, 29), (10, 29), (64, 8), (5, 1), (1, 1)])
def test_g_is_streamed_in_blocks_that_end_small(rows, block):
    """Every scan row once, in order, no block over the pinned buffers' rows, and the last block at most
    an eighth of a full one (so little is sent and transformed after the last read)."""
    from qora.ssb.stream import row_blocks

    blocks = row_blocks(rows, block)
    assert blocks[0][0] == 0 and blocks[-1][1] == rows
    assert all(a[1] == b[0] for a, b in zip(blocks, blocks[1:]))
    assert all(0 < b - a <= block for a, b in blocks)
    assert blocks[-1][1] - blocks[-1][0] <= max(1, block // 8)
