"""DECTRIS frames kept compressed for the device (issue 25): the block table, the kernel's host twin
(the same warps and lanes as bslz4.cu, so its indexing is checked without a GPU) against an
independent encoder (hdf5plugin's bitshuffle filter) and the NumPy decoder, the LZ4 format's corners,
and the wiring (source option, LiveG, run_live) on the CPU. The GPU parity is in the _cuda file."""

import io

import numpy as np
import pytest

from qora.io.errors import FileFormatError, InputError
from qora.ssb.live import DectrisSimulator, LiveG, LiveOptions, MemorySource, open_source, run_live
from qora.ssb.live import bslz4
from qora.ssb.live.bslz4_batch import CompressedFrames, block_table, gather_host, slot_map

KV, ALPHA = 300.0, 25.0


def _hdf5plugin_blobs(frames: np.ndarray, *, nelems: int = 0) -> list:
    """Each frame's chunk as hdf5plugin's bitshuffle-LZ4 filter writes it (block of ``nelems``
    elements, 0: the filter's default 8 kB)."""
    h5py = pytest.importorskip("h5py")
    hdf5plugin = pytest.importorskip("hdf5plugin")
    with h5py.File(io.BytesIO(), "w") as f:
        d = f.create_dataset("x", data=frames, chunks=(1,) + frames.shape[1:],
                             **hdf5plugin.Bitshuffle(nelems=nelems, cname="lz4"))
        return [bytes(d.id.read_direct_chunk((i, 0, 0))[1]) for i in range(len(frames))]


def _frames(rng, dtype, shape, n=6) -> np.ndarray:
    """Detector-like frames (a Poisson disk on a sparse dark field), one all-zero frame, one
    incompressible (uniform over the type's range), one of high counts."""
    top = np.iinfo(dtype).max
    yy, xx = np.indices(shape)
    disk = np.hypot(yy - shape[0] / 2, xx - shape[1] / 2) < min(shape) / 3
    f = (rng.poisson(20.0, (n,) + shape) * disk + rng.poisson(0.05, (n,) + shape)).astype(dtype)
    f[1] = 0
    f[2] = rng.integers(0, top, shape, dtype=dtype, endpoint=True)
    f[3] = np.minimum(rng.poisson(min(3000, top // 2), shape), top).astype(dtype)
    return f


def _twin(blobs, dtype, shape, gathered, *, real=np.float32, frames_per_cta=2):
    count = shape[0] * shape[1]
    blob, offsets = CompressedFrames(np.arange(len(blobs)), blobs, dtype, shape).pack()
    table = block_table(blob, offsets, dtype=dtype, count=count)
    out = np.full((len(blobs), len(gathered)), np.nan, real)
    sums = np.zeros(count, np.uint64)
    gather_host(blob, table, slot_map(gathered, count), out=out, sums=sums, frames_per_cta=frames_per_cta)
    return out, sums, table


@pytest.mark.parametrize("dtype, shape, nelems", [
    (np.uint16, (48, 40), 0),      # 3840 elements: blocks of 4096 (one, partial)
    (np.uint16, (100, 100), 0),    # 10000: two full blocks and a partial one
    (np.uint32, (37, 29), 0),      # 1073: a tail of 1 element stored raw
    (np.uint8, (64, 67), 0),       # 4288 uint8 = 8 kB full block + a partial one
    (np.uint8, (5, 3), 0),         # 15 elements: one block of 8 and a tail of 7
    (np.uint8, (1, 5), 0),         # fewer than 8 elements: no block, only the tail
    (np.uint16, (61, 67), 512),    # small blocks (1 kB): many a frame, the last rounded down to 8
])
def test_host_twin_decodes_hdf5plugin_chunks(dtype, shape, nelems, rng):
    """The kernel's host twin gathers from hdf5plugin's chunks exactly the frames' pixels and sums
    every pixel, for detector-like, all-zero, incompressible and high-count frames."""
    frames = _frames(rng, dtype, shape)
    blobs = _hdf5plugin_blobs(frames, nelems=nelems)
    count = frames[0].size
    gathered = np.sort(rng.choice(count, max(1, count // 3), replace=False))
    flat = frames.reshape(len(frames), -1)
    for real, per_cta in ((np.float32, 2), (np.float64, 32)):
        out, sums, table = _twin(blobs, dtype, shape, gathered, real=real, frames_per_cta=per_cta)
        np.testing.assert_array_equal(out, flat[:, gathered].astype(real))
        np.testing.assert_array_equal(sums, flat.sum(0, dtype=np.uint64))
    assert table.block_bytes == (nelems or 8192 // np.dtype(dtype).itemsize) * np.dtype(dtype).itemsize
    # the reference decoder and the host batch decoder agree on these blobs
    for f, b in zip(frames, blobs):
        np.testing.assert_array_equal(bslz4.decompress(b, dtype, count), f.ravel())
    np.testing.assert_array_equal(CompressedFrames(np.arange(len(blobs)), blobs, dtype, shape).decode(), frames)


def test_every_pixel_gathered_is_the_whole_frame(rng):
    """Gathering every pixel gives back the whole frames (each block, each lane's eight elements,
    the raw tail: nothing skipped, nothing written twice to a wrong column)."""
    frames = _frames(rng, np.uint16, (33, 35))
    blobs = [bslz4.compress(f) for f in frames]
    out, _, _ = _twin(blobs, np.uint16, (33, 35), np.arange(33 * 35))
    np.testing.assert_array_equal(out, frames.reshape(len(frames), -1).astype(np.float32))


def _sequence(literals: bytes, offset: int, match: int) -> bytes:
    """One LZ4 sequence by the block format: token, literal length extension, literals, offset, match
    length extension (match >= 4)."""
    def nibble(n: int) -> tuple:
        if n < 15:
            return n, b""
        n -= 15
        return 15, b"\xff" * (n // 255) + bytes([n % 255])

    lit_n, lit_ext = nibble(len(literals))
    m_n, m_ext = nibble(match - 4)
    return bytes([(lit_n << 4) | m_n]) + lit_ext + literals + offset.to_bytes(2, "little") + m_ext


def test_lz4_corners_by_the_block_format():
    """Blocks written by hand from the format: literal and match lengths of 15 + 255 + n (extension
    bytes), a match overlapping itself (offset 1 and 3, a run and a period), an offset reaching the
    block's start, and the last sequence of literals only; decoded by the twin's warp decode as the
    expected bytes, and by the host's serial decoder (qora.ssb.live.bslz4_numba) the same."""
    from qora.ssb.live.bslz4_batch import _lz4_warp
    from qora.ssb.live.bslz4_numba import lz4_block

    lits = bytes((7 + i) % 256 for i in range(15 + 255 + 3))  # 273 literals: 15, one 255 and a 3
    expected = bytearray(lits)
    block = _sequence(lits, 1, 4 + 15 + 255 + 255 + 9)  # a run of the last byte, 538 long
    expected += bytes([lits[-1]]) * (4 + 15 + 255 + 255 + 9)
    block += _sequence(b"abc", 3, 100)  # "abc" repeated by an overlapping match
    expected += b"abc" + (b"abc" * 34)[:100]
    block += _sequence(b"", len(expected), 40)  # back to the block's first byte
    expected += expected[:40]
    tail = b"the last literals"
    block += bytes([0xF0, len(tail) - 15]) + tail  # 17 literals: 15 and an extension byte of 2
    expected += tail
    src = np.frombuffer(block, np.uint8)
    dst = np.zeros(len(expected), np.uint8)
    assert _lz4_warp(src, 0, len(src), dst, len(expected))
    assert dst.tobytes() == bytes(expected)
    serial = np.zeros(len(expected), np.uint8)
    assert lz4_block(src, 0, len(src), serial, 0, len(expected)) == len(expected)
    np.testing.assert_array_equal(serial, dst)
    # malformed: an offset past the start, a match past the end, a block cut inside its literals
    for bad, size in ((_sequence(b"ab", 3, 4), 6), (_sequence(b"ab", 1, 40) + bytes([0x10]) + b"x", 20),
                      (block[:100], len(expected)), (block, len(expected) - 1)):
        assert not _lz4_warp(np.frombuffer(bad, np.uint8), 0, len(bad), np.zeros(size + 64, np.uint8), size)


def test_malformed_batches_are_named(rng):
    """A header of another size or block size, block sizes past the blob, and a damaged LZ4 block:
    each an error naming the frame."""
    frames = _frames(rng, np.uint16, (40, 40), n=4)[:3]
    blobs = [bslz4.compress(f) for f in frames]
    gathered = np.arange(0, 1600, 7)

    def run(batch):
        return _twin(batch, np.uint16, (40, 40), gathered)

    with pytest.raises(FileFormatError, match="frame 1 of the batch.*header"):
        run([blobs[0], bslz4.compress(frames[1][:20]), blobs[2]])
    with pytest.raises(FileFormatError, match="frame 2 of the batch.*block sizes"):
        run([blobs[0], blobs[1], blobs[2][:len(blobs[2]) // 2]])
    with pytest.raises(FileFormatError, match="frame 0 of the batch is shorter"):
        run([blobs[0][:5]])
    damaged = bytearray(blobs[1])
    damaged[16:40] = b"\xff" * 24  # the first block's tokens: lengths past the block
    with pytest.raises(FileFormatError, match="frame 1 of the batch has a malformed LZ4 block"):
        run([blobs[0], bytes(damaged), blobs[2]])
    with pytest.raises(InputError, match="uint8, uint16 or uint32"):
        CompressedFrames(np.arange(1), blobs[:1], np.int16, (40, 40))


def test_the_first_token_damaged_past_the_block_is_malformed_for_every_frame_kind(rng):
    """The damage the device test makes (the first token and 39 extension bytes 0xff: a literal
    length past the block) is malformed for detector-like, all-zero, incompressible and high-count
    frames alike; 24 bytes were not: an incompressible frame's block is one stored literal run,
    whose length bytes are already 0xff, and a changed match nibble of its last (only) sequence is
    ignored by the format."""
    frames = _frames(rng, np.uint16, (64, 64))
    blobs = [bslz4.compress(f) for f in frames]
    gathered = np.arange(0, 4096, 3)
    for k in range(len(blobs)):
        for width, malformed in ((40, True), (24, k != 2)):
            damaged = bytearray(blobs[k])
            damaged[16:16 + width] = b"\xff" * width
            batch = blobs[:k] + [bytes(damaged)] + blobs[k + 1:]
            if malformed:
                with pytest.raises(FileFormatError, match=f"frame {k} of the batch has a malformed LZ4 block"):
                    _twin(batch, np.uint16, (64, 64), gathered)
            else:  # frame 2 (incompressible) decodes: the damage changed nothing that counts
                out, _, _ = _twin(batch, np.uint16, (64, 64), gathered)
                np.testing.assert_array_equal(out, frames.reshape(len(frames), -1)[:, gathered].astype(np.float32))


class _Event:
    def __init__(self) -> None:
        self.stream = None

    def synchronize(self) -> None:
        assert self.stream is not None, "an event synchronized before it was recorded"


class _Stream:
    """A CuPy stream as DeviceDecoder uses it: a context (the current stream), record, wait_event."""

    def __init__(self, cuda, non_blocking: bool = False) -> None:
        self.cuda, self.waited = cuda, []

    def __enter__(self):
        self.cuda.stack.append(self)
        return self

    def __exit__(self, *exc) -> None:
        self.cuda.stack.pop()

    def record(self, event=None):
        event = _Event() if event is None else event
        event.stream = self
        return event

    def wait_event(self, event) -> None:
        assert isinstance(event, _Event) and event.stream is not None, "wait_event takes a recorded Event"
        self.waited.append(event)


class _Cuda:
    def __init__(self) -> None:
        self.null = _Stream(self)
        self.stack = [self.null]

    def Stream(self, non_blocking: bool = False):  # noqa: N802 (CuPy's name)
        return _Stream(self, non_blocking)

    def get_current_stream(self):
        return self.stack[-1]


def _emulated_cuda_backend():
    """A backend on the emulated device (qora.testing.DeviceXp) with CuPy's stream API; each device
    array remembers the stream it was allocated on (CuPy's pool keeps an arena per stream)."""
    from qora.testing import DeviceXp

    class Xp(DeviceXp):
        def __init__(self) -> None:
            super().__init__()
            self.cuda, self.arenas = _Cuda(), []

        def _allocated(self, a):
            self.arenas.append((a.a, self.cuda.get_current_stream()))
            return a

        def empty(self, shape, dtype=float):
            return self._allocated(super().__getattr__("empty")(shape, dtype))

        def zeros(self, shape, dtype=float):
            return self._allocated(super().__getattr__("zeros")(shape, dtype))

        def arena_of(self, a):
            return next(s for base, s in self.arenas if np.shares_memory(base, a.a))

    class Backend:
        is_cuda = True
        xp = Xp()

        def host_empty(self, shape, dtype):
            return np.empty(shape, dtype)

    return Backend()


def _emulated_launch(backend):
    """bslz4_gather on the emulated device: the launcher's argument types checked against the kernel's
    signature, the stream rules checked (a launch on a stream of its own that waited for the caller's
    stream, its staged inputs from that stream's arena), then the host twin frame by frame (status 2
    for a malformed one, as the kernel sets it)."""
    from qora.ssb.live.bslz4_batch import BlockTable
    from qora.testing import DeviceArray

    xp = backend.xp

    def launch(*, blob, starts, sizes, tails, slot, block_bytes, whole, count, itemsize, out, sums, status,
               frames_per_cta=32):
        n = len(starts)
        for a, dtype, shape in ((blob, np.uint8, None), (starts, np.int64, (n, starts.shape[1])),
                                (sizes, np.int32, starts.shape), (tails, np.int64, (n,)), (slot, np.int32, (count,)),
                                (out, out.dtype, (n, out.shape[1])), (sums, np.uint64, (count,)),
                                (status, np.int32, (n,))):
            assert isinstance(a, DeviceArray) and a.a.flags.c_contiguous and a.dtype == dtype
            assert shape is None or a.shape == shape
        assert out.dtype in (np.float32, np.float64) and frames_per_cta > 0
        stream = xp.cuda.get_current_stream()
        assert stream is not xp.cuda.null and any(e.stream is xp.cuda.null for e in stream.waited)
        for a in (blob, starts, sizes, tails, status):  # stream-ordered reuse of the pool's blocks
            assert xp.arena_of(a) is stream
        for f in range(n):
            table = BlockTable(starts.a[f:f + 1], sizes.a[f:f + 1], tails.a[f:f + 1], block_bytes, whole, count,
                               itemsize)
            try:
                gather_host(blob.a, table, slot.a, out=out.a[f:f + 1], sums=sums.a)
            except FileFormatError:
                status.a[f] = 2

    return launch


def test_device_decoder_on_the_emulated_device(rng, monkeypatch):
    """DeviceDecoder's bookkeeping without a GPU: batches of odd sizes through the two buffers (a
    grown one included) give the frames' gathered pixels and sums; the kernel's arguments have its
    signature's types; the staged buffers come from the copy stream's arena; a damaged frame is
    named by its acquisition index when its buffer is next waited for."""
    from qora.ssb import kernels
    from qora.ssb.live.bslz4_device import DeviceDecoder

    backend = _emulated_cuda_backend()
    monkeypatch.setattr(kernels, "bslz4_gather", _emulated_launch(backend))
    for dtype, shape, real in ((np.uint16, (40, 37), np.float32), (np.uint8, (24, 50), np.float64)):
        count = shape[0] * shape[1]
        gathered = np.sort(rng.choice(count, count // 4, replace=False))
        decoder = DeviceDecoder(backend, shape=shape, gathered=gathered, real=real)
        total = np.zeros(count, np.uint64)
        for n in (7, 3, 12, 5):
            frames = _frames(rng, dtype, shape, n=max(n, 4))[:n]
            batch = CompressedFrames(np.arange(n), [bslz4.compress(f) for f in frames], dtype, shape)
            got = decoder.decode(batch)
            np.testing.assert_array_equal(got.get(), frames.reshape(n, -1)[:, gathered].astype(real))
            total += frames.reshape(n, -1).sum(0, dtype=np.uint64)
        np.testing.assert_array_equal(decoder.mean_sum(), total.reshape(shape).astype(np.float64))
        assert decoder.frames == 27
    frames = _frames(rng, np.uint16, (40, 37), n=4)
    blobs = [bslz4.compress(f) for f in frames]
    damaged = bytearray(blobs[1])
    damaged[16:56] = b"\xff" * 40
    decoder = DeviceDecoder(backend, shape=(40, 37), gathered=np.arange(0, 1480, 5))
    decoder.decode(CompressedFrames(np.arange(50, 54), [blobs[0], bytes(damaged)] + blobs[2:], np.uint16, (40, 37)))
    with pytest.raises(FileFormatError, match="the DECTRIS frame 51 has a malformed LZ4 block"):
        decoder.synchronize()
    with pytest.raises(InputError, match="the decoder's detector"):
        decoder.decode(CompressedFrames(np.arange(1), blobs[:1], np.uint16, (37, 40)))


def test_device_decoder_takes_the_receivers_table_and_copies_from_a_registered_slot(rng, monkeypatch):
    """A batch packed in a (registered) slot with the receiver's block table: the decoder makes no
    table of its own, copies the blob from where it lies (no page-locked twin is made), and the
    slot's release waits for the copy's event before handing the slot back; the pixels and sums
    are those of the batch given as loose blobs. A table of another detector is refused."""
    from qora.ssb import kernels
    from qora.ssb.live import bslz4_device
    from qora.ssb.live.bslz4_device import DeviceDecoder

    backend = _emulated_cuda_backend()
    monkeypatch.setattr(kernels, "bslz4_gather", _emulated_launch(backend))
    shape, count = (40, 37), 40 * 37
    gathered = np.sort(rng.choice(count, count // 4, replace=False))
    frames = _frames(rng, np.uint16, shape, n=9)
    loose = CompressedFrames(np.arange(9), [bslz4.compress(f) for f in frames], np.uint16, shape)
    blob, offsets = loose.pack()
    table = block_table(blob, offsets, dtype=np.uint16, count=count)
    reference = DeviceDecoder(backend, shape=shape, gathered=gathered)
    want = reference.decode(loose).get()

    def no_table(*args, **kw):
        raise AssertionError("the decoder made a block table the batch carried")

    monkeypatch.setattr(bslz4_device, "block_table", no_table)
    released = []
    decoder = DeviceDecoder(backend, shape=shape, gathered=gathered)
    for k in range(3):  # both buffers, then the first again
        batch = CompressedFrames.from_packed(np.arange(9), blob.copy(), offsets, np.uint16, shape, table=table,
                                             registered=True, release=lambda k=k: released.append(k))
        got = decoder.decode(batch)
        np.testing.assert_array_equal(got.get(), want)
        assert released == list(range(k))  # not yet: the consumer releases after decode
        event = batch.release.__defaults__[0]  # the copy's event, recorded on the copy stream
        assert event.stream is decoder._streams[k % 2]
        batch.release()
        assert released == list(range(k + 1))
    assert decoder._blob[0].host is None and decoder._blob[1].host is None  # no page-locked twin
    np.testing.assert_array_equal(decoder.mean_sum(), 3 * reference.mean_sum())
    other = block_table(blob, offsets, dtype=np.uint16, count=count)
    other.count = count + 8
    with pytest.raises(InputError, match="block table"):
        decoder.decode(CompressedFrames.from_packed(np.arange(9), blob, offsets, np.uint16, shape, table=other))


@pytest.fixture(scope="module")
def counts():
    from qora.ssb import Aberrations
    from qora.ssb.simulation import film_counts

    return film_counts(64, aberrations=Aberrations(C10=-100.0), window=24, alpha_mrad=ALPHA)


def _compressed_batches(data, batch):
    for frames in MemorySource(data, batch=batch):
        yield CompressedFrames(frames.index, [bslz4.compress(f) for f in frames.data], data.dtype, data.shape[2:])


def test_live_g_takes_compressed_frames_on_the_cpu(counts):
    """On the CPU a compressed batch is decoded on the host: LiveG then holds exactly the rows and
    mean pattern of the decoded frames' path; decode='device' needs CUDA."""
    data, step = counts
    kw = dict(kv=KV, alpha_mrad=ALPHA, scan_step=step, calibration_rows=2)
    a = LiveG(data.shape[:2], data.shape[2:], **kw)
    b = LiveG(data.shape[:2], data.shape[2:], **kw)
    for frames in MemorySource(data, batch=40):
        a.add(frames)
    for frames in _compressed_batches(data, 40):
        b.add(frames)
    a.finish()
    b.finish()
    np.testing.assert_array_equal(b.G_rows, a.G_rows)
    np.testing.assert_array_equal(b._mean_pattern(), a._mean_pattern())
    assert not b.decode_on_device
    with pytest.raises(InputError, match="decode='device' needs the CUDA backend"):
        LiveG(data.shape[:2], data.shape[2:], decode="device", **kw)
    with pytest.raises(InputError, match="decode must be"):
        LiveG(data.shape[:2], data.shape[2:], decode="gpu", **kw)
    with pytest.raises(InputError, match="the stream's detector"):
        b.add(CompressedFrames(np.arange(1), [bslz4.compress(data[0, 0, :5])], np.uint16, (1, 5)))


@pytest.mark.parametrize("stream", ["v1", "v2"])
def test_dectris_source_keeps_bslz4_frames_compressed(counts, stream):
    """decode='device': the receiver yields the blobs as received (no decode), which decode to the
    frames sent; run_live on the CPU settles 'auto' to the host and gives the host path's result."""
    pytest.importorskip("zmq")
    pytest.importorskip("numcodecs")
    data, step = counts
    flat = data.reshape((-1,) + data.shape[2:])
    with DectrisSimulator(data, stream=stream, timeout=10) as sim:
        src = open_source(sim.address, protocol="dectris")
        src.decode = "device"
        got = list(src)
        src.close()
        sim.join()
    assert all(isinstance(b, CompressedFrames) for b in got)
    index = np.concatenate([b.index for b in got])
    np.testing.assert_array_equal(np.concatenate([b.decode() for b in got]), flat[index])
    count = flat[0].size
    for b in got[:2]:  # the received blobs, packed for the device, through the kernel's twin
        blob, offsets = b.pack()
        out = np.zeros((len(b.index), count), np.float32)
        gather_host(blob, block_table(blob, offsets, dtype=np.uint16, count=count), slot_map(np.arange(count), count),
                    out=out, sums=np.zeros(count, np.uint64))
        np.testing.assert_array_equal(out, flat[b.index].reshape(len(b.index), -1))
    with DectrisSimulator(data, stream=stream, timeout=10) as sim:
        src = open_source(sim.address, protocol="dectris")
        assert src.decode == "auto"
        out = run_live(src, kv=KV, alpha_mrad=ALPHA, scan_step=step, rotation=0.0,
                       options=LiveOptions(refresh_s=0, fit=False))
        sim.join()
    assert src.decode == "host" and out.report.placed == len(flat)
    with pytest.raises(InputError, match="decode must be"):
        open_source("zmq://127.0.0.1:1").__class__("tcp://127.0.0.1:1", decode="cpu")
    with DectrisSimulator(data, stream=stream, timeout=10) as sim:
        with pytest.raises(InputError, match="decode='device' needs the CUDA backend"):
            run_live(open_source(sim.address, protocol="dectris"), kv=KV, alpha_mrad=ALPHA, scan_step=step,
                     rotation=0.0, options=LiveOptions(refresh_s=0, fit=False, decode="device"))


class _Part:
    """A received ZeroMQ frame as the receiver sees it (its bytes as ``buffer``)."""

    def __init__(self, data: bytes) -> None:
        self.buffer = memoryview(data)


def test_v1_image_messages_read_without_their_json():
    """The v1 image message's frame number and image part, read by pattern, equal json.loads' on the
    layouts a DCU or json.dumps write; any other message or layout is left to the JSON parser (None);
    the image part is parsed once per layout, whatever each frame's size."""
    import json

    from qora.ssb.live.dectris import v1_image

    detail = {"htype": "dimage_d-1.0", "shape": [40, 30], "type": "uint16", "encoding": "bs16-lz4<"}
    known: dict = {}
    for frame, size, dumps in ((0, 1234, json.dumps), (17, 99, lambda d: json.dumps(d, separators=(",", ":"))),
                               (123456, 5, lambda d: json.dumps(d, indent=1))):
        # a string holding what looks like the key comes first: JSON escapes its quotes, so it is no key
        head = dumps({"htype": "dimage-1.0", "series": 3, "hash": 'a,"frame": 9}', "frame": frame})
        got = v1_image([_Part(head.encode()), _Part(dumps({**detail, "size": size}).encode()), _Part(b"x")], known)
        assert got is not None and got[0] == frame and got[1] == {**detail, "size": got[1]["size"]}
        assert got[0] == json.loads(head)["frame"]
    assert len(known) == 3  # one entry per layout (three writers), not per size
    again = v1_image([_Part(b'{"htype": "dimage-1.0", "frame": 5}'),
                      _Part(json.dumps({**detail, "size": 777}).encode()), _Part(b"x")], known)
    assert again[0] == 5 and len(known) == 3
    image = json.dumps(detail).encode()
    for head in (b'{"series": 1, "htype": "dimage-1.0", "frame": 2}',  # htype not first: the parser reads it
                 b'{"htype": "dseries_end-1.0", "series": 1}', b'{"htype": "dimage-1.0", "frame": -1}',
                 b'{"htype": "dimage-1.0", "frame": "2"}'):
        assert v1_image([_Part(head), _Part(image), _Part(b"x")], {}) is None
    assert v1_image([_Part(b'{"htype": "dimage-1.0", "frame": 2}'), _Part(b"{not json"), _Part(b"x")], {}) is None
    assert v1_image([_Part(b'{"htype": "dimage-1.0", "frame": 2}'), _Part(b'{"htype": "dconfig-1.0"}'),
                     _Part(b"x")], {}) is None
    assert v1_image([_Part(b'{"htype": "dimage-1.0", "frame": 2}')], {}) is None


def test_cli_live_decode_option(counts):
    """`qora ssb live --decode`: host on the CPU runs to the end over the DECTRIS simulator; device on
    the CPU backend is a clear error; an unknown choice is refused."""
    pytest.importorskip("zmq")
    pytest.importorskip("numcodecs")
    from click.testing import CliRunner

    from qora.cli import cli

    data, step = counts
    common = ["--kv", str(KV), "--semiangle", str(ALPHA), "--scan-step", str(step), "--rotation", "0", "--no-fit",
              "--refresh", "0", "--timeout", "10", "--protocol", "dectris"]
    with DectrisSimulator(data, stream="v2", timeout=10) as sim:
        out = CliRunner().invoke(cli, ["ssb", "live", sim.address, *common, "--decode", "host"])
        sim.join()
    assert out.exit_code == 0, out.output
    with DectrisSimulator(data, stream="v2", timeout=10) as sim:
        out = CliRunner().invoke(cli, ["ssb", "live", sim.address, *common, "--decode", "device"])
    assert out.exit_code != 0 and "needs the CUDA backend" in out.output
    out = CliRunner().invoke(cli, ["ssb", "live", "zmq://127.0.0.1:1", *common, "--decode", "gpu"])
    assert out.exit_code == 2 and "--decode" in out.output
