"""Several receiving processes on CUDA: batches packed in shared memory (CompressedFrames.from_packed)
go through the device decode exactly as loose blobs do, and the live run over two receiving
processes equals the single-process run on the device (and the CPU run)."""

import numpy as np
import pytest

from qora.ssb import Aberrations
from qora.ssb.simulation import film_counts
from qora.ssb.live import DectrisSimulator, LiveG, LiveOptions, open_source, run_live
from qora.ssb.live import bslz4
from qora.ssb.live.bslz4_batch import CompressedFrames

pytestmark = pytest.mark.gpu

KV, ALPHA = 300.0, 25.0


@pytest.fixture(scope="module")
def counts():
    return film_counts(64, aberrations=Aberrations(C10=-100.0), alpha_mrad=ALPHA, film_seed=5, noise_seed=6)


def test_packed_batches_decode_on_the_device_as_loose_ones(counts):
    """The same frames as loose blobs and as packed batches (a receiver's slot): the rows of G and the
    mean pattern on the device are identical."""
    data, step = counts
    sy, sx = data.shape[:2]
    flat = data.reshape((-1,) + data.shape[2:])
    kw = dict(kv=KV, alpha_mrad=ALPHA, scan_step=step, backend="cuda", calibration_rows=2, decode="device")
    loose, packed = LiveG((sy, sx), data.shape[2:], **kw), LiveG((sy, sx), data.shape[2:], **kw)
    for start in range(0, len(flat), 40):
        idx = np.arange(start, min(len(flat), start + 40))
        batch = CompressedFrames(idx, [bslz4.compress(f) for f in flat[idx]], np.uint16, data.shape[2:])
        blob, offsets = batch.pack()
        loose.add(batch)
        packed.add(CompressedFrames.from_packed(idx, blob.copy(), offsets.copy(), np.uint16, data.shape[2:]))
    loose.finish()
    packed.finish()
    assert packed._decoder is not None and packed._decoder.frames > 0
    np.testing.assert_array_equal(packed.G_rows.get(), loose.G_rows.get())
    np.testing.assert_array_equal(packed._mean_pattern(), loose._mean_pattern())


@pytest.mark.parametrize("stream", ["v1", "v2"])
def test_two_receiving_processes_on_the_device_equal_one(counts, stream):
    """run_live on CUDA over two receiving processes (the device decode, 'auto') equals the
    single-process run on CUDA and the CPU run, with a dropped frame reported."""
    pytest.importorskip("zmq")
    pytest.importorskip("numcodecs")
    data, step = counts
    settings = dict(kv=KV, alpha_mrad=ALPHA, scan_step=step, rotation=0.0)
    options = LiveOptions(refresh_s=0, fit=False, lag_rows=16)
    results = {}
    for name, processes, backend in (("one", 1, "cuda"), ("two", 2, "cuda"), ("cpu", 2, "cpu")):
        with DectrisSimulator(data, stream=stream, clients=processes, drop=[40], timeout=20, time_limit=60) as sim:
            src = open_source(sim.address, protocol="dectris", timeout=20, processes=processes,
                              batch=24 if processes > 1 else 256)
            results[name] = run_live(src, backend=backend, options=options, **settings)
            sim.join()
        if backend == "cuda":
            assert src.decode == "device"
    one, two, cpu = results["one"], results["two"], results["cpu"]
    assert one.report.dropped == two.report.dropped == cpu.report.dropped == [40]
    np.testing.assert_allclose(two.session.G.get(), one.session.G.get(), rtol=0,
                               atol=1e-6 * float(np.abs(one.session.G.get()).max()))
    ref = cpu.session.G
    np.testing.assert_allclose(two.session.G.get(), ref, rtol=0, atol=1e-5 * np.abs(ref).max())


def test_a_registered_shared_memory_slot_decodes_as_loose_blobs(counts):
    """A batch packed in a shared-memory block registered page-locked (cudaHostRegister), with its
    block table given: the device decode copies it from there and gives the loose blobs' pixels
    and sums bit for bit; the slot is released once, after decode returns; unregistered at the end."""
    from multiprocessing import shared_memory

    from qora.backend import resolve
    from qora.ssb.live.bslz4_batch import block_table
    from qora.ssb.live.bslz4_device import DeviceDecoder

    data, _ = counts
    flat = data.reshape((-1,) + data.shape[2:])
    shape, count = data.shape[2:], data.shape[2] * data.shape[3]
    gathered = np.arange(0, count, 3)
    be = resolve("cuda")
    shm = shared_memory.SharedMemory(create=True, size=4 << 20)
    try:
        memory = np.ndarray(shm.size, np.uint8, shm.buf)
        assert be.host_register(memory)
        loose_decoder = DeviceDecoder(be, shape=shape, gathered=gathered)
        slot_decoder = DeviceDecoder(be, shape=shape, gathered=gathered)
        released = []
        for start in range(0, len(flat), 50):
            idx = np.arange(start, min(len(flat), start + 50))
            loose = CompressedFrames(idx, [bslz4.compress(f) for f in flat[idx]], np.uint16, shape)
            blob, offsets = loose.pack()
            memory[4096:4096 + blob.size] = blob
            packed = CompressedFrames.from_packed(idx, memory[4096:4096 + blob.size], offsets, np.uint16, shape,
                                                  table=block_table(blob, offsets, dtype=np.uint16, count=count),
                                                  registered=True, release=lambda s=start: released.append(s))
            want = loose_decoder.decode(loose).get()
            got = slot_decoder.decode(packed)
            packed.release()  # waits for the copy from the slot, which is overwritten next
            np.testing.assert_array_equal(got.get(), want)
        assert released == list(range(0, len(flat), 50))
        np.testing.assert_array_equal(slot_decoder.mean_sum(), loose_decoder.mean_sum())
        be.host_unregister(memory)
        del memory, packed
    finally:
        try:
            shm.close()
        except BufferError:  # a failed assertion left views of it: the name goes all the same
            pass
        shm.unlink()


def test_run_live_registers_the_receivers_slots(counts, monkeypatch):
    """run_live on CUDA with two receiving processes registers their slots page-locked (batches
    then copied to the device from the slots, with the receivers' block tables), unregisters them
    at the end, and gives the CPU run's G."""
    pytest.importorskip("zmq")
    pytest.importorskip("numcodecs")
    from qora.ssb.live import receivers

    data, step = counts
    settings = dict(kv=KV, alpha_mrad=ALPHA, scan_step=step, rotation=0.0)
    options = LiveOptions(refresh_s=0, fit=False, lag_rows=16)
    seen = {"registered": [], "tables": 0, "batches": 0}
    register, batch = receivers.ParallelDectrisSource.register_slots, receivers.ParallelDectrisSource._batch

    def spy_register(self, backend):
        seen["registered"].append(register(self, backend))
        return seen["registered"][-1]

    def spy_batch(self, *args):
        frames = batch(self, *args)
        seen["batches"] += 1
        # decoded frames (the CPU run) carry no table
        seen["tables"] += getattr(frames, "table", None) is not None and bool(getattr(frames, "registered", False))
        return frames

    monkeypatch.setattr(receivers.ParallelDectrisSource, "register_slots", spy_register)
    monkeypatch.setattr(receivers.ParallelDectrisSource, "_batch", spy_batch)
    results = {}
    for backend in ("cuda", "cpu"):
        with DectrisSimulator(data, stream="v2", clients=2, timeout=20, time_limit=60) as sim:
            src = open_source(sim.address, protocol="dectris", timeout=20, processes=2, batch=24)
            results[backend] = run_live(src, backend=backend, options=options, **settings)
            sim.join()
        assert src._registered == []
    assert seen["registered"][0] is True and seen["tables"] > 0
    assert results["cuda"].statistics["receivers"]["register_s"] > 0
    assert "register_s" not in results["cpu"].statistics["receivers"]
    ref = results["cpu"].session.G
    np.testing.assert_allclose(results["cuda"].session.G.get(), ref, rtol=0, atol=1e-5 * np.abs(ref).max())


def test_the_modules_and_the_slots_are_ready_before_the_header(counts):
    """Issue 38: a fresh machine's first scan paid NVRTC's compiles and the slots' page-locking after its first
    frame. run_live compiles the live path's modules and pins the receivers' slots before it awaits the header:
    the kernels are fetched (memoized) and register_s is recorded by open(), before the LiveG exists."""
    pytest.importorskip("zmq")
    pytest.importorskip("numcodecs")
    from qora.backend import kernels as loader
    from qora.ssb import kernels

    data, step = counts
    opened = {}
    with DectrisSimulator(data, stream="v2", clients=2, timeout=20, time_limit=60) as sim:
        src = open_source(sim.address, protocol="dectris", timeout=20, processes=2, batch=24)
        original = src.open

        def open_and_look():
            original()
            opened["registered"] = bool(src._registered)
            opened["fetched"] = {key[3] for key in loader._functions}

        src.open = open_and_look
        out = run_live(src, backend="cuda", options=LiveOptions(refresh_s=0, fit=False), kv=KV, alpha_mrad=ALPHA,
                       scan_step=step, rotation=0.0)
        sim.join()
    assert opened["registered"] and out.statistics["prepare_s"] > 0
    for filename in ("ssb.cu", "band.cu", "bslz4.cu"):
        assert set(kernels._MODULES[filename]) <= opened["fetched"], filename
    assert out.report.placed == data.shape[0] * data.shape[1]
