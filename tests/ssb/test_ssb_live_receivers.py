"""qora.ssb.live.receivers: several receiving processes on one DECTRIS stream (the PUSH socket deals
the frames among them), batches staged in shared memory. Checked against the single-process
receiver on the same frames, and frame by frame against the simulator's data."""

import re

import numpy as np
import pytest

from qora.io.errors import InputError
from qora.ssb import Aberrations
from qora.ssb.simulation import film_counts
from qora.ssb.live import (DectrisSimulator, FellBehind, LiveOptions, MerlinSimulator, Placement, open_source,
                           run_live)
from qora.ssb.live.bslz4 import compress
from qora.ssb.live.bslz4_batch import CompressedFrames

KV, ALPHA = 300.0, 25.0


@pytest.fixture(scope="module")
def counts():
    """uint16 counts of a 16 x 16 scan, 32 x 32 detector."""
    pytest.importorskip("zmq")
    pytest.importorskip("numcodecs")
    return film_counts(64, aberrations=Aberrations(C10=-100.0), alpha_mrad=ALPHA, film_seed=5, noise_seed=6)


def _parallel(address, **kw):
    from qora.ssb.live.receivers import ParallelDectrisSource

    return ParallelDectrisSource(address, processes=2, batch=24, slot_bytes=1 << 20, timeout=20, **kw)


def test_two_receivers_deliver_every_frame_once_with_its_number(counts, stream="v2"):
    """Each frame arrives once, with its number and its pixels, through slots reused many times
    (4 slots of at most 24 frames for 255 frames); the left-out frame never arrives; both
    receivers took a share (the simulator waits for both before the series starts). Stream v2
    decoded by the receivers here; v1 and the device's packing in the test below."""
    data, _ = counts
    flat = data.reshape((-1,) + data.shape[2:])
    got = {}
    with DectrisSimulator(data, stream=stream, clients=2, drop=[37], timeout=20, time_limit=60) as sim:
        with _parallel(sim.address) as src:
            assert src.scan_shape == data.shape[:2] and src.detector_shape == data.shape[2:]
            for batch in src:
                assert len(batch.index) <= 24
                for i, frame in zip(batch.index.tolist(), batch.data):
                    assert i not in got
                    got[i] = frame.copy()
                batch.release()
        sim.join()
    assert sorted(got) == sorted(set(range(len(flat))) - {37})
    assert all(np.array_equal(got[i], flat[i]) for i in got)
    shares = src.statistics["per_process"]
    assert sum(shares) == len(flat) - 1 and min(shares) > 0
    assert src.statistics["batches"] > 4 and src.last_received is not None


@pytest.mark.parametrize("stream, decode", [("v2", "device"), ("v1", "host"), ("v1", "device")])
def test_two_receivers_give_the_single_receiver_result(counts, stream, decode):
    """The live run over two receiving processes (frames decoded by them, or packed compressed for
    the device decode, which the CPU backend runs on the host) equals the single-process run on the
    same frames (a frame left out, two swapped): the same G, the dropped frame reported. (Rows wait
    for the whole scan here, ``lag_rows`` 16: on a loaded test machine one receiver can be
    descheduled for longer than the default lag, and its frames would be reported late; the
    closing rule itself is tested on :class:`Placement` below.)"""
    data, step = counts
    options = dict(stream=stream, drop=[40], swap=[(100, 101), (130, 140)], timeout=20, time_limit=60)
    settings = dict(kv=KV, alpha_mrad=ALPHA, scan_step=step, rotation=0.0)
    live = LiveOptions(refresh_s=0, fit=False, lag_rows=16)
    with DectrisSimulator(data, **options) as sim:
        source = open_source(sim.address, protocol="dectris", timeout=20)
        source.decode = decode  # "device": batches of CompressedFrames, decoded by LiveG (here on the host)
        one = run_live(source, options=live, **settings)
        sim.join()
    with DectrisSimulator(data, clients=2, **options) as sim:
        source = _parallel(sim.address)
        source.decode = decode
        two = run_live(source, options=live, **settings)
        sim.join()
    assert two.report.dropped == one.report.dropped == [40]
    assert two.report.placed == one.report.placed == data.shape[0] * data.shape[1] - 1
    np.testing.assert_allclose(two.session.G, one.session.G, rtol=0, atol=1e-9 * np.abs(one.session.G).max())
    s = two.statistics
    assert s["received"] == s["processed"] == data.shape[0] * data.shape[1] - 1
    assert min(s["receivers"]["per_process"]) > 0
    assert s["after_last_frame"]["backlog_frames"] >= 0 and s["after_last_frame"]["queue_s"] >= 0


def test_rows_close_when_every_receiver_has_passed_them():
    """Two receivers dealt alternate frames of a 6 x 4 scan: receiver 0's batch far ahead closes no
    row until receiver 1 has delivered and passed it by lag_rows; complete rows close at once;
    interleaving between receivers is not counted out of order, a swap within one is."""
    p = Placement((6, 4), lag_rows=1, receivers=2)
    p.accept(np.arange(0, 20, 2), receiver=0)  # rows 0-4, even columns
    assert p.rows_to_close() == []  # receiver 1 has delivered nothing: its frames may still come
    p.accept(np.array([1, 3, 5, 7]), receiver=1)  # rows 0 and 1 complete
    assert p.rows_to_close() == [0, 1]
    p.accept(np.array([11]), receiver=1)  # receiver 1 now in row 2, frame 9 still to come
    assert p.rows_to_close() == []  # row 2 waits for frames further on from receiver 1 (lag 1)
    p.accept(np.array([9]), receiver=1)  # a swap within receiver 1's stream: row 2 complete
    assert p.rows_to_close() == [2] and p.report.out_of_order == 1
    p.accept(np.array([13]), receiver=1)  # receiver 1 in row 3, frame 15 not yet come
    assert p.rows_to_close() == []
    p.accept(np.array([17]), receiver=1)  # receiver 1 in row 4: row 3 (frame 15 missing) is passed
    assert p.rows_to_close() == [3] and p.report.dropped == [15]
    assert p.rows_to_close(end=True) == [4, 5] and p.report.dropped == [15, 19, 20, 21, 22, 23]


def test_receivers_that_find_no_free_slot_report_falling_behind(counts):
    """A consumer that keeps every slot (never releases): the receivers wait ``max_wait_s`` for a
    free slot, then the source raises FellBehind instead of losing frames unseen."""
    data, _ = counts
    with DectrisSimulator(data, stream="v2", clients=2, timeout=20, time_limit=60) as sim:
        src = _parallel(sim.address, slots=2, max_wait_s=0.2)
        src.decode = "host"
        with pytest.raises(FellBehind, match="fell behind"):
            with src:
                for _ in src:
                    pass  # the slot is not handed back
        sim.stop()


def test_open_source_takes_receiving_processes_for_dectris_only(tmp_path):
    from qora.ssb.live.receivers import ParallelDectrisSource

    assert isinstance(open_source("zmq://127.0.0.1:9999", processes=3), ParallelDectrisSource)
    assert open_source("zmq://127.0.0.1:9999", processes=3).processes == 3
    with pytest.raises(InputError, match="one connection"):
        open_source("tcp://127.0.0.1:6342", processes=2)
    with pytest.raises(InputError, match="at least 1"):
        open_source("zmq://127.0.0.1:9999", processes=0)
    with pytest.raises(InputError, match="slots must be at least 2"):
        ParallelDectrisSource("tcp://127.0.0.1:9999", slots=1)


def test_a_packed_batch_is_the_blobs_end_to_end():
    """CompressedFrames.from_packed (a receiver's slot) packs and decodes as the same blobs given one
    by one."""
    rng = np.random.default_rng(1)
    frames = rng.poisson(3.0, (5, 16, 24)).astype(np.uint16)
    blobs = [compress(f) for f in frames]
    loose = CompressedFrames(np.arange(5), blobs, np.uint16, (16, 24))
    blob, offsets = loose.pack()
    packed = CompressedFrames.from_packed(np.arange(5), np.concatenate([blob, np.zeros(7, np.uint8)]), offsets,
                                          np.uint16, (16, 24))
    into = np.zeros(blob.size + 3, np.uint8)
    again, again_offsets = packed.pack(into=into)
    np.testing.assert_array_equal(again, blob)
    np.testing.assert_array_equal(again_offsets, offsets)
    np.testing.assert_array_equal(packed.decode(), frames)
    # the blobs, made as they are read (a host decode, a rejected frame), are the loose ones
    assert len(packed.blobs) == 5 and [bytes(b) for b in packed.blobs] == [bytes(b) for b in blobs]
    assert bytes(packed.blobs[-1]) == bytes(blobs[4]) and [bytes(b) for b in packed.blobs[1:3]] == blobs[1:3]
    with pytest.raises(IndexError):
        packed.blobs[5]
    np.testing.assert_array_equal(packed.sizes, [len(b) for b in blobs])
    assert packed.nbytes == blob.size
    with pytest.raises(InputError, match="do not lie in a blob"):
        CompressedFrames.from_packed(np.arange(5), blob[:-1], offsets, np.uint16, (16, 24))


def test_merlin_simulator_serves_a_pool_renumbered():
    """A pool of 3 encoded frames served as a 4 x 5 scan: frame i is pool[i % 3], numbered i + 1."""
    rng = np.random.default_rng(2)
    pool = rng.integers(0, 4000, (3, 16, 16)).astype(np.uint16)
    got = {}
    with MerlinSimulator(pool, scan_shape=(4, 5), timeout=10) as sim:
        with open_source(sim.address, timeout=10) as src:
            for batch in src:
                got.update(zip(batch.index.tolist(), batch.data))
        sim.join()
    assert sorted(got) == list(range(20))
    assert all(np.array_equal(got[i], pool[i % 3]) for i in got)
    assert sim.send_s is not None and sim.sent == 20


def test_a_simulator_sending_from_two_processes_shares_the_frames(counts):
    """Two senders (a benchmark's: each the frames of its parity, on its own port) and a receiver
    connected to each: every frame arrives once, the second header is ignored, the series ends
    when both ends have come."""
    data, _ = counts
    flat = data.reshape((-1,) + data.shape[2:])
    got = {}
    with DectrisSimulator(data, stream="v2", share=(0, 2), timeout=20, time_limit=60) as a, \
            DectrisSimulator(data, stream="v2", share=(1, 2), drop=[51], timeout=20, time_limit=60) as b:
        from qora.ssb.live.receivers import ParallelDectrisSource

        with ParallelDectrisSource([a.address, b.address], processes=2, batch=24, slot_bytes=1 << 20,
                                   timeout=20) as src:
            for batch in src:
                got.update(zip(batch.index.tolist(), batch.data.copy()))
                batch.release()
        a.join()
        b.join()
    assert sorted(got) == sorted(set(range(len(flat))) - {51})
    assert all(np.array_equal(got[i], flat[i]) for i in got)
    assert a.sent == len(flat) // 2 and b.sent == len(flat) // 2 - 1
    with pytest.raises(InputError, match="one for each"):
        ParallelDectrisSource(["tcp://127.0.0.1:1", "tcp://127.0.0.1:2"], processes=1)


def test_cli_live_with_two_receiving_processes(counts):
    """`qora ssb live zmq://... --receivers 2`: the frames dealt between two processes, the dropped
    frame reported, each process's share printed; a Merlin address with --receivers 2 is refused."""
    from click.testing import CliRunner

    from qora.cli import cli

    data, step = counts
    args = ["--kv", str(KV), "--semiangle", str(ALPHA), "--scan-step", str(step), "--rotation", "0", "--refresh", "0",
            "--no-fit", "--backend", "cpu", "--receivers", "2"]
    with DectrisSimulator(data, stream="v2", clients=2, drop=[7], timeout=20, time_limit=60) as sim:
        out = CliRunner().invoke(cli, ["ssb", "live", sim.address.replace("tcp://", "zmq://")] + args)
        sim.join()
    assert out.exit_code == 0, out.output
    # frames of a receiver scheduled late are placed all the same (late, not dropped): only the left-out one is
    assert re.search(rf"{data.shape[0] * data.shape[1] - 1} frames placed \(\d+ of them late, added to their "
                     r"transformed rows\), 1 dropped", out.output)
    assert "frames per receiving process" in out.output
    out = CliRunner().invoke(cli, ["ssb", "live", "tcp://127.0.0.1:1"] + args)
    assert out.exit_code != 0 and "one connection" in out.output


def _assert_same_table(got, want):
    for name in ("starts", "sizes", "tails"):
        a, b = getattr(got, name), getattr(want, name)
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)
    assert (got.block_bytes, got.whole, got.count, got.itemsize) == (want.block_bytes, want.whole, want.count,
                                                                     want.itemsize)


@pytest.mark.parametrize("stream", ["v2", "v1"])
def test_the_block_table_made_by_a_receiver_is_the_consumers(counts, stream):
    """Device-bound batches from two receiving processes carry the bslz4 block table their receiver
    made (stored in the slot after the blob): it equals block_table of the packed batch exactly, on
    stream v2's compiled path and v1's general one, and the frames decode to the simulator's."""
    from qora.ssb.live.bslz4_batch import block_table

    data, _ = counts
    flat = data.reshape((-1,) + data.shape[2:])
    count = flat.shape[1] * flat.shape[2]
    seen = 0
    with DectrisSimulator(data, stream=stream, clients=2, timeout=20, time_limit=60) as sim:
        with _parallel(sim.address) as src:
            src.decode = "device"
            for batch in src:
                assert isinstance(batch, CompressedFrames) and batch.table is not None and not batch.registered
                blob, offsets = batch.pack()
                _assert_same_table(batch.table, block_table(blob, offsets, dtype=batch.dtype, count=count))
                np.testing.assert_array_equal(batch.decode(), flat[batch.index])
                seen += len(batch.index)
                batch.release()
        sim.join()
    assert seen == len(flat)


def test_a_stored_block_table_and_when_a_receiver_leaves_it_to_the_consumer():
    """BlockTable.store / stored give the same table back from a byte buffer; a receiver's
    store_block_table stores it after the blob (aligned) and returns None for a malformed batch (the
    consumer's block_table then names the frame) and where the slot has no room left."""
    from qora.ssb.live.bslz4_batch import BlockTable, block_table, store_block_table
    from qora.ssb.live.receiving import _ALIGN

    rng = np.random.default_rng(2)
    frames = rng.poisson(3.0, (6, 40, 37)).astype(np.uint16)
    blob, offsets = CompressedFrames(np.arange(6), [compress(f) for f in frames], np.uint16, (40, 37)).pack()
    want = block_table(blob, offsets, dtype=np.uint16, count=40 * 37)
    head = 128
    row = np.zeros(head + blob.size + 4096, np.uint8)
    row[head:head + blob.size] = blob
    stored = store_block_table(row, head, blob.size, offsets, np.uint16, 40 * 37)
    assert stored is not None and stored[0] % _ALIGN == 0 and stored[0] >= head + blob.size
    _assert_same_table(BlockTable.stored(row[stored[0]:], stored[1:]), want)
    np.testing.assert_array_equal(row[head:head + blob.size], blob)  # the blob is left as it was
    packed = CompressedFrames.from_packed(np.arange(6), row[head:head + blob.size], offsets, np.uint16, (40, 37),
                                          table=BlockTable.stored(row[stored[0]:], stored[1:]))
    _assert_same_table(packed.table, want)
    with pytest.raises(InputError, match="block table of 6 frames for 5"):
        CompressedFrames.from_packed(np.arange(5), blob, offsets[:6], np.uint16, (40, 37), table=want)
    need = BlockTable.stored_bytes(*want.starts.shape)
    tight = np.zeros(head + blob.size + need - 1, np.uint8)
    tight[head:head + blob.size] = blob
    assert store_block_table(tight, head, blob.size, offsets, np.uint16, 40 * 37) is None
    damaged = row.copy()
    damaged[head + int(offsets[2]) + 8:head + int(offsets[2]) + 12] = 0  # frame 2's block size
    assert store_block_table(damaged, head, blob.size, offsets, np.uint16, 40 * 37) is None
    with pytest.raises(InputError, match="needs"):
        BlockTable.stored(row[:need - 1], stored[1:])


def test_a_receiver_that_cannot_connect_is_an_error_at_once():
    """An endpoint the receivers cannot connect to (zmq:// is open_source's scheme, not ZeroMQ's) stopped them with a
    traceback each and left open() waiting 120 s; now each says why and open() raises within seconds."""
    import time

    pytest.importorskip("zmq")
    from qora.ssb.live.receivers import ParallelDectrisSource

    src = ParallelDectrisSource("zmq://127.0.0.1:9", processes=2, timeout=5)
    t0 = time.perf_counter()
    with pytest.raises(InputError, match="cannot connect to zmq://127.0.0.1:9"):
        src.open()
    assert time.perf_counter() - t0 < 30
    src.close()


def test_images_held_for_the_channel_go_before_the_later_ones():
    """A receiver whose series start went to another receiver holds its first images until the consumer sends the
    channel. Those held images are taken as soon as the channel comes, before any later image: checked with the
    orders only every 256 messages while busy, they came after all the rest, so that every row they belonged to was
    closed first (a third of a 128^2 scan late with 4 receivers and 2 senders)."""
    import queue

    import zmq

    from qora.ssb.live.dectris import encode_stream2_frame, stream2_message
    from qora.ssb.live.receiving import _Receiver

    pytest.importorskip("numcodecs")
    frame = np.arange(64, dtype=np.uint16).reshape(8, 8)
    messages = [stream2_message("image", 1, image_id=i, data={"c": encode_stream2_frame(frame + i)})
                for i in range(300)]
    inbox, outbox, free = queue.Queue(), queue.Queue(), queue.Queue()
    for slot in range(20):
        free.put(slot)
    inbox.put(("mode", "host", 5.0))

    class Socket:  # the stream: the channel comes from the consumer while the 11th image is read
        sent = 0

        def recv(self, flags=0, copy=True):
            if self.sent == len(messages):
                raise zmq.Again()
            if self.sent == 10:
                inbox.put(("channel", b"c", 1))
            self.sent += 1
            return type("Part", (), {"buffer": memoryview(messages[self.sent - 1]), "more": False})()

        def poll(self, timeout):
            inbox.put(("end",))
            return 0

    receiver = _Receiver(0, Socket(), np.zeros((20, 1 << 14), np.uint8), inbox, outbox, free, batch=24)
    receiver.run()
    order = []
    while not outbox.empty():
        kind, worker, *rest = outbox.get()
        if kind == "batch":
            slot, n = rest[0], rest[1]
            order += np.ndarray(n, np.int64, receiver.memory[slot], 0).tolist()
    assert order == list(range(300))
