"""DECTRIS frames decoded on the device (bslz4.cu): bit-exact against the kernel's host twin and the
frames themselves, batch after batch through the double buffer; LiveG fed by the device decode equals
LiveG fed by the host path; a damaged block is an error naming the frame."""

import numpy as np
import pytest

from qora.io.errors import FileFormatError
from qora.ssb.live import DectrisSimulator, Frames, LiveG, LiveOptions, MemorySource, open_source, run_live
from qora.ssb.live import bslz4
from qora.ssb.live.bslz4_batch import CompressedFrames, block_table, gather_host, slot_map

pytestmark = pytest.mark.gpu

KV, ALPHA = 300.0, 25.0


def _frames(rng, dtype, shape, n):
    top = np.iinfo(dtype).max
    yy, xx = np.indices(shape)
    disk = np.hypot(yy - shape[0] / 2, xx - shape[1] / 2) < min(shape) / 3
    f = (rng.poisson(20.0, (n,) + shape) * disk + rng.poisson(0.05, (n,) + shape)).astype(dtype)
    f[1] = 0
    f[2] = rng.integers(0, top, shape, dtype=dtype, endpoint=True)
    return f


@pytest.mark.parametrize("dtype, shape", [(np.uint16, (100, 100)), (np.uint32, (37, 29)), (np.uint8, (64, 67)),
                                          (np.uint16, (192, 192))])
@pytest.mark.parametrize("real", [np.float32, np.float64])
def test_device_decode_equals_the_host_twin_bit_for_bit(dtype, shape, real, rng):
    """Three batches of odd sizes through the two buffers: the gathered pixels and the sums equal the
    twin's and the frames' exactly."""
    from qora.backend import resolve
    from qora.ssb.live.bslz4_device import DeviceDecoder

    be = resolve("cuda")
    count = shape[0] * shape[1]
    gathered = np.sort(rng.choice(count, count // 4, replace=False))
    decoder = DeviceDecoder(be, shape=shape, gathered=gathered, real=real)
    host_sums = np.zeros(count, np.uint64)
    outs = []
    for n in (37, 5, 70):
        frames = _frames(rng, dtype, shape, n)
        batch = CompressedFrames(np.arange(n), [bslz4.compress(f) for f in frames], dtype, shape)
        outs.append((decoder.decode(batch), frames, batch))
    for got, frames, batch in outs:
        blob, offsets = batch.pack()
        table = block_table(blob, offsets, dtype=dtype, count=count)
        twin = np.zeros((len(frames), len(gathered)), real)
        gather_host(blob, table, slot_map(gathered, count), out=twin, sums=host_sums)
        np.testing.assert_array_equal(got.get(), twin)
        np.testing.assert_array_equal(twin, frames.reshape(len(frames), -1)[:, gathered].astype(real))
    np.testing.assert_array_equal(decoder.sums.get(), host_sums)
    assert decoder.frames == 112


def test_a_damaged_block_on_the_device_is_named(rng):
    from qora.backend import resolve
    from qora.ssb.live.bslz4_device import DeviceDecoder

    frames = _frames(rng, np.uint16, (64, 64), 4)
    blobs = [bslz4.compress(f) for f in frames]
    damaged = bytearray(blobs[2])
    # sizes intact (the host's table passes); the first token's literal length 15 + 39 * 255 runs past
    # the block's 8192 bytes whatever the frame (24 bytes of 0xff left frame 2, incompressible, valid:
    # its stored literal run keeps its length and only the ignored match nibble changed)
    damaged[16:56] = b"\xff" * 40
    batch = CompressedFrames(np.arange(100, 104), blobs[:2] + [bytes(damaged)] + blobs[3:], np.uint16, (64, 64))
    blob, offsets = batch.pack()
    with pytest.raises(FileFormatError, match="frame 2 of the batch has a malformed LZ4 block"):  # the twin
        gather_host(blob, block_table(blob, offsets, dtype=np.uint16, count=4096), slot_map(np.arange(4096), 4096),
                    out=np.zeros((4, 4096), np.float32), sums=np.zeros(4096, np.uint64))
    decoder = DeviceDecoder(resolve("cuda"), shape=(64, 64), gathered=np.arange(0, 4096, 3))
    decoder.decode(batch)
    with pytest.raises(FileFormatError, match="frame 102 has a malformed LZ4 block"):
        decoder.synchronize()


@pytest.fixture(scope="module")
def counts(gpu_module):
    from qora.ssb import Aberrations
    from qora.ssb.simulation import film_counts

    return film_counts(96, aberrations=Aberrations(C10=-120.0), alpha_mrad=ALPHA)


def _batches(data, batch, order=None):
    flat = data.reshape((-1,) + data.shape[2:])
    order = np.arange(len(flat)) if order is None else order
    for start in range(0, len(order), batch):
        idx = order[start:start + batch]
        yield idx, flat[idx]


@pytest.mark.parametrize("precision", ["single", "double"])
def test_live_g_fed_by_the_device_decode_equals_the_host_path(counts, precision, rng):
    """Frames shuffled within rows, a repeated frame (rejected by the placement, taken back out of
    the device's sums) and a late one (added to its transformed row), batches of 45: the rows of G
    and the mean pattern equal those of LiveG fed the decoded frames on the same device."""
    data, step = counts
    sy, sx = data.shape[:2]
    order = np.concatenate([r * sx + rng.permutation(sx) for r in range(sy)])
    order = np.insert(order, 300, order[100])  # a repeat
    order = np.insert(order, 500, 2 * sx + 3)  # late: its row closed long before
    kw = dict(kv=KV, alpha_mrad=ALPHA, scan_step=step, backend="cuda", precision=precision, calibration_rows=2)
    host = LiveG((sy, sx), data.shape[2:], decode="host", **kw)
    device = LiveG((sy, sx), data.shape[2:], decode="device", **kw)
    for idx, frames in _batches(data, 45, order):
        host.add(Frames(idx, frames))
        device.add(CompressedFrames(idx, [bslz4.compress(f) for f in frames], np.uint16, data.shape[2:]))
    host.finish()
    device.finish()
    assert device._decoder is not None and device._decoder.frames > 0
    np.testing.assert_array_equal(device.G_rows.get(), host.G_rows.get())
    np.testing.assert_array_equal(device._mean_pattern(), host._mean_pattern())
    assert device.frames_summed == host.frames_summed
    assert device.report.repeated == host.report.repeated and device.report.late == host.report.late
    a, b = device.session(), host.session()
    np.testing.assert_array_equal(a.G.get(), b.G.get())
    assert a.level == b.level


@pytest.mark.parametrize("stream", ["v1", "v2"])
def test_live_run_over_dectris_with_the_device_decode(counts, stream):
    """The DECTRIS simulator's stream on CUDA: 'auto' decodes on the device, and the final G equals the
    host-decode run's."""
    pytest.importorskip("zmq")
    pytest.importorskip("numcodecs")
    data, step = counts
    results = {}
    for decode in ("auto", "host"):
        with DectrisSimulator(data, stream=stream, fps=20000, timeout=10) as sim:
            src = open_source(sim.address, protocol="dectris")
            results[decode] = run_live(src, kv=KV, alpha_mrad=ALPHA, scan_step=step, rotation=0.0, backend="cuda",
                                       options=LiveOptions(refresh_s=0, fit=False, decode=decode))
            sim.join()
        assert src.decode == ("device" if decode == "auto" else "host")
    a, b = results["auto"], results["host"]
    assert a.report.placed == b.report.placed == data.shape[0] * data.shape[1]
    np.testing.assert_array_equal(a.session.G.get(), b.session.G.get())


def test_memory_batches_through_run_live_on_the_device(counts):
    """MemorySource frames (decoded already) take the host path beside a device-decoding LiveG."""
    data, step = counts
    out = run_live(MemorySource(data, batch=64), kv=KV, alpha_mrad=ALPHA, scan_step=step, rotation=0.0,
                   backend="cuda", options=LiveOptions(refresh_s=0, fit=False))
    assert out.report.placed == data.shape[0] * data.shape[1]


def test_the_bench_case_of_the_device_decode():
    """`qora bench ssb-live --backend cuda` at a tiny size has the memory-to-G case with the device decode."""
    pytest.importorskip("zmq")  # the bench's host stages read DECTRIS messages (the live extra)
    pytest.importorskip("numcodecs")
    from qora.bench import ssb_live

    r = ssb_live.run(backend="cuda", scan=8, detector=32, pool=8, protocols=(), write=False, echo=lambda *_: None)
    case = r.cases["memory_to_G_device_decode/8x32"]
    assert case["frames_per_s"] > 0 and case["compressed_bytes_per_frame"] > 0
    assert case["frames_decoded_on_device"] == 32  # the 4 rows after the 4 calibration rows (host-decoded)
