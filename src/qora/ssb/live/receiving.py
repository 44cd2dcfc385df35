"""The receiving process of :class:`qora.ssb.live.receivers.ParallelDectrisSource`: it PULLs its share
of a DECTRIS stream, parses each message, and stages the frames in batches into its ring of
shared-memory slots (the layout is described in :mod:`qora.ssb.live.receivers`); orders (the
channel, the decoding place, the end, a stop) come on its inbox.

Works with the ``spawn`` start method: the process imports only this module's dependencies.
"""

from __future__ import annotations

import queue
import time
import traceback

import numpy as np

from qora.io.errors import FileFormatError, InputError
from qora.ssb.live.bslz4_batch import store_block_table
from qora.ssb.live.dectris import _compressed_parts, _compressed_v1, _decode_parts, _scanned_part, decode_frames, \
    v1_image

DRAIN_S = 0.1  # seconds a receiver's socket stays idle after the series' end before it stops
_ALIGN = 64


def _header_bytes(batch: int) -> int:
    """Bytes at a slot's start for a batch's frame numbers and offsets (int64 each), aligned."""
    need = 8 * (2 * batch + 1)
    return (need + _ALIGN - 1) // _ALIGN * _ALIGN


class _Staged:
    """A receiver's batch being collected: the frames' numbers and what the decoding needs."""

    def __init__(self) -> None:
        self.index: list = []
        self.v1_infos: list = []
        self.blobs: list = []  # v1: the blobs; v2: (dtype, shape, payload) parts
        self.nbytes = 0
        self.t_first = self.t_last = 0.0
        self.version = None

    def __len__(self) -> int:
        return len(self.index)


def _pull_socket(context, endpoint: str, hwm: int, worker: int, outbox):
    """A receiver's PULL socket connected to ``endpoint``; None where it cannot connect, the reason put on
    ``outbox`` (the building process raises it at once: the receiver died with a traceback and left it waiting)."""
    import zmq

    sock = context.socket(zmq.PULL)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVHWM, hwm)
    try:
        sock.connect(endpoint)
    except zmq.ZMQError as error:
        outbox.put(("error", worker, "InputError", f"cannot connect to {endpoint}: {error}"))
        sock.close(0)
        return None
    return sock


def _receive(worker: int, endpoint: str, shm_name: str, slots: int, slot_bytes: int, batch: int, threads: int,
             hwm: int, inbox, outbox, free) -> None:
    """A receiving process: PULL from ``endpoint``, stage batches into the slots of ``shm_name``,
    announce them on ``outbox``; orders (the channel, the decoding place, the end) on ``inbox``."""
    from multiprocessing import shared_memory

    import zmq

    try:
        import numba

        numba.set_num_threads(max(1, min(threads, numba.config.NUMBA_NUM_THREADS)))
    except (ImportError, ValueError):  # no Numba, or a count it refuses: the host decoder runs with what it has
        pass
    context = zmq.Context()
    sock = _pull_socket(context, endpoint, hwm, worker, outbox)
    if sock is None:  # it could not connect, and said so
        return context.term()
    shm = shared_memory.SharedMemory(name=shm_name)
    memory = np.ndarray((slots, slot_bytes), np.uint8, shm.buf)
    head = _header_bytes(batch)
    from qora.ssb.live.stream2 import _scan as walk

    state = {"channel": None, "series": None, "mode": None, "max_wait_s": 10.0, "ending": False, "stop": False}
    held: list = []  # v2 images that came before the channel was known
    staged = _Staged()
    known: dict = {}
    scratch = np.empty(11, np.int64)
    received = 0

    def orders(block: float = 0.0) -> None:
        try:
            while True:
                order = inbox.get(timeout=block) if block else inbox.get_nowait()
                block = 0.0
                kind = order[0]
                if kind == "channel":
                    state["channel"], state["series"] = np.frombuffer(order[1], np.uint8), order[2]
                elif kind == "mode":
                    state["mode"], state["max_wait_s"] = order[1], order[2]
                elif kind == "end":
                    state["ending"] = True
                elif kind == "stop":
                    state["stop"] = True
        except queue.Empty:  # no more orders now: back to the stream
            pass

    waited = [0.0]  # seconds spent waiting for a free slot: the consumer's back-pressure on this receiver

    def free_slot():
        """A free slot (None after a stop): waited for ``max_wait_s``, then FellBehind."""
        t = time.perf_counter()
        try:
            return free.get(timeout=state["max_wait_s"])
        except queue.Empty:
            outbox.put(("error", worker, "FellBehind",
                        f"processing fell behind the detector: receiver {worker}'s {slots} slots stayed full for "
                        f"{state['max_wait_s']:g} s; use a faster backend (--backend cuda), more slots, or a "
                        "slower scan"))
            state["stop"] = True
            return None
        finally:
            waited[0] += time.perf_counter() - t

    # the device's path for stream v2 (the one that must take ~30,000 frames/s a process): each
    # bitshuffle-LZ4 frame's bytes copied from the message straight into the slot as it comes, by
    # the compiled walk's offsets, with no object made per frame (ImageFields, the part tuples and
    # the later pack cost 3 times the walk itself: docs/ssb-performance.md)
    fast = {"slot": None}

    def fast_flush() -> None:
        f = fast
        if f["slot"] is None:
            return
        n, nbytes = f["n"], int(f["offsets"][f["n"]])
        table = store_block_table(memory[f["slot"]], head, nbytes, f["offsets"][:n + 1], f["dtype"],
                             f["shape"][0] * f["shape"][1])
        outbox.put(("batch", worker, f["slot"], n, "compressed", f["dtype"], f["shape"], nbytes,
                    f["t_first"], f["t_last"], time.process_time() - cpu0, waited[0], table))
        fast["slot"] = None

    def fast_take(buf, out) -> bool:
        """Stage the image ``out`` describes (the walk's fields of ``buf``); False when it is not a
        bitshuffle-LZ4 frame of unsigned counts (the general path takes it)."""
        nonlocal received
        key = (out[3], out[4], out[5], out[7])
        f = fast
        if f["slot"] is not None and key != f["key"]:
            fast_flush()
        if f["slot"] is None:
            from qora.ssb.live import cbor

            dtype = cbor.typed_array_dtype(int(out[5]))
            if out[6] != 1 or dtype.kind != "u" or dtype.itemsize != out[7]:
                return False
            flush()  # a batch of the general path goes first: batches keep their frames' order
            slot = free_slot()
            if slot is None:
                return True
            f.update(slot=slot, n=0, key=key, dtype=dtype.str, shape=(int(out[3]), int(out[4])),
                     index=np.ndarray(batch, np.int64, memory[slot], 0),
                     offsets=np.ndarray(batch + 1, np.int64, memory[slot], 8 * batch),
                     payload=memory[slot, head:], t_first=time.perf_counter())
            f["offsets"][0] = 0
        n, lo, size = f["n"], f["offsets"][f["n"]], out[9]
        if lo + size > f["payload"].size:
            if n == 0:
                raise InputError(f"a frame of {size} bytes is larger than a shared-memory slot ({f['payload'].size})")
            fast_flush()
            return fast_take(buf, out)
        f["payload"][lo:lo + size] = buf[out[8]:out[8] + size]
        f["index"][n] = out[2]
        f["offsets"][n + 1] = lo + size
        f["n"] = n + 1
        f["t_last"] = time.perf_counter()
        received += 1
        if n + 1 == batch:
            fast_flush()
        return True

    def flush() -> None:
        nonlocal staged
        fast_flush()
        if not len(staged):
            return
        while state["mode"] is None and not state["stop"]:  # the consumer says where frames are decoded
            orders(block=0.05)
        if state["stop"]:
            return
        slot = free_slot()
        if slot is None:
            return
        n = len(staged)
        index = np.ndarray(n, np.int64, memory[slot], 0)
        index[:] = staged.index
        payload = memory[slot, head:]
        item = None
        if state["mode"] == "device":
            item = (_compressed_v1(staged.index, staged.v1_infos, staged.blobs) if staged.version == 1
                    else _compressed_parts(staged.index, staged.blobs))
        if item is not None:
            blob, offsets = item.pack(into=payload)
            np.ndarray(n + 1, np.int64, memory[slot], 8 * batch)[:] = offsets
            nbytes = int(offsets[-1])
            table = store_block_table(memory[slot], head, nbytes, offsets, item.dtype, item.shape[0] * item.shape[1])
            announce = ("compressed", item.dtype.str, item.shape, nbytes)
        else:
            frames = (decode_frames(staged.v1_infos, staged.blobs) if staged.version == 1
                      else _decode_parts(staged.blobs))
            if frames.nbytes > payload.size:  # a batch is flushed before its frames could overflow
                raise InputError(f"a batch of {n} frames ({frames.nbytes} bytes) past a slot's {payload.size}")
            np.ndarray(frames.shape, frames.dtype, payload).reshape(frames.shape)[...] = frames
            announce = ("frames", frames.dtype.str, frames.shape[1:], frames.nbytes)
            table = None
        # the process's CPU seconds so far (all its threads: ZeroMQ's I/O, Numba's): its cost per
        # frame, whatever share of the cores it was given
        outbox.put(("batch", worker, slot, n) + announce
                   + (staged.t_first, staged.t_last, time.process_time() - cpu0, waited[0], table))
        staged = _Staged()

    def take(message_index: int, version: int, info, blob, frame_bytes: int) -> None:
        nonlocal received
        if len(staged) and (staged.version != version or len(staged) >= batch
                            or staged.nbytes + frame_bytes > slot_bytes - head):
            flush()
        now = time.perf_counter()
        if not len(staged):
            staged.t_first, staged.version = now, version
        staged.t_last = now
        staged.index.append(message_index)
        staged.v1_infos.append(info)
        staged.blobs.append(blob)
        staged.nbytes += frame_bytes
        received += 1

    def image(parts) -> bool:
        """Take an image message; False for any other message (forwarded to the consumer)."""
        if len(parts) == 1:  # stream v2: one CBOR part
            if state["channel"] is None:
                return False
            if state["mode"] == "device":
                buf = np.frombuffer(parts[0].buffer, np.uint8)
                walk(buf, state["channel"], scratch)
                if scratch[10]:
                    if scratch[1] != state["series"]:
                        raise FileFormatError(f"an image of series {scratch[1]} inside series {state['series']}")
                    if not len(staged) and fast_take(buf, scratch):
                        return True
            from qora.ssb.live.stream2 import scan_image

            fields = scan_image(parts[0].buffer, state["channel"], scratch)
            if fields is None:
                return False
            part = _scanned_part(fields)
            dtype, shape = part[0], part[1]
            # what the slot holds: the blob (device) or the decoded frame (host), whichever is larger
            take(fields.image_id, 2, None, part, max(len(fields.payload), dtype.itemsize * shape[0] * shape[1]))
            return True
        fast = v1_image(parts, known)
        if fast is None:
            return False
        frame, info = fast
        try:
            cols, rows = (int(v) for v in info["shape"])
            size = rows * cols * np.dtype(info["type"]).itemsize
        except (KeyError, TypeError, ValueError):
            return False  # the consumer's parser says what is wrong
        take(frame, 1, info, parts[2].buffer, max(size, len(parts[2].buffer)))
        return True

    try:
        _warm_receiver()
        cpu0 = time.process_time()  # the staging functions above report the CPU seconds from here
        outbox.put(("ready", worker))
        idle_since = None
        count = 0
        while not state["stop"]:
            try:
                parts = [sock.recv(zmq.NOBLOCK, copy=False)]
                while parts[-1].more:
                    parts.append(sock.recv(copy=False))
            except zmq.Again:
                parts = None
            if parts is None:
                # the stream is idle here: what is staged goes now (the end's latency), then the orders
                flush()
                orders()
                if state["ending"]:
                    idle_since = idle_since or time.perf_counter()
                    # drained: the end was sent after every frame, those dealt to this receiver are
                    # in its socket by now (the consumer stops sooner when the whole scan has come)
                    if time.perf_counter() - idle_since > DRAIN_S:
                        break
                if held and state["channel"] is not None:
                    pending, held[:] = list(held), []
                    for p in pending:
                        if not image(p):
                            outbox.put(("message", worker, [(bytes(x.buffer), x.more) for x in p]))
                    continue
                sock.poll(5)
                continue
            idle_since = None
            count += 1
            if count % 256 == 0:
                orders()  # a stop while the stream is busy
            if image(parts):
                continue
            if len(parts) == 1 and state["channel"] is None and parts[0].buffer[:1] != b"{" and _is_v2_image(parts):
                held.append(parts)  # the start went to another receiver: its channel will come
                continue
            flush()  # the messages around the images keep their place after them
            outbox.put(("message", worker, [(bytes(p.buffer), p.more) for p in parts]))
        flush()
        outbox.put(("done", worker, received))
    except Exception as error:  # the consumer raises it
        outbox.put(("error", worker, type(error).__name__, f"{error}\n{traceback.format_exc(limit=4)}"))
    finally:
        sock.close(0)
        context.term()
        memory = None  # the mapping's views dropped before it is closed
        fast.clear()
        try:
            shm.close()
        except BufferError:  # a view still held (a failed batch): the process exits and unmaps it anyway
            pass


def _is_v2_image(parts) -> bool:
    """A stream v2 message that is (by its bytes) an image message: its ``type`` is "image"."""
    return b"\x64type\x65image" in bytes(parts[0].buffer[:64])


def _warm_receiver() -> None:
    """The compiled stages loaded before the receiver says it is ready: a receiver still loading
    them while the others take frames would fall a second behind them (its frames late)."""
    from qora.ssb.live import cbor
    from qora.ssb.live.dectris import encode_stream2_frame, stream2_message
    from qora.ssb.live.stream2 import scan_image

    frame = np.arange(64, dtype=np.uint16).reshape(8, 8)
    message = stream2_message("image", 1, image_id=0, data={"c": encode_stream2_frame(frame)})
    cbor.loads(message)
    packed = np.zeros(1 << 12, np.uint8)
    # Numba compiles a function once per argument type, and a read-only buffer (bytes) is another type than a
    # writable one (a ZeroMQ frame's): warmed with bytes alone, a fresh machine's receivers compiled the stream's
    # scanners again at their first frames (1.3 CPU s each; 10k frames/s where 54k came warm, 2-core machine)
    for buffer in (message, bytearray(message)):
        for channel in (b"c", np.frombuffer(b"c", np.uint8).copy()):
            fields = scan_image(memoryview(buffer), channel)
            parts = [_scanned_part(fields)] * 2
            _decode_parts(parts)
            item = _compressed_parts([0, 1], parts)
            if item is not None:  # the block table's compiled scan, as a device-bound batch runs it
                blob, offsets = item.pack(into=packed)
                store_block_table(packed, 0, blob.size, offsets, item.dtype, frame.size)
