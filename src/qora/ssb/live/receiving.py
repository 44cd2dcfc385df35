"""The receiving process of :class:`qora.ssb.live.receivers.ParallelDectrisSource`: it PULLs its share
of a DECTRIS stream, parses each message, and stages the frames in batches into its ring of
shared-memory slots (the layout is described in :mod:`qora.ssb.live.receivers`); orders (the
channel, the decoding place, the end, a stop) come on its inbox.

Works with the ``spawn`` start method: the process imports only this module's dependencies.
"""

from __future__ import annotations

import contextlib
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
    receiver = _Receiver(worker, sock, np.ndarray((slots, slot_bytes), np.uint8, shm.buf), inbox, outbox, free,
                         batch=batch)
    try:
        _warm_receiver()
        receiver.cpu0 = time.process_time()  # the batches report the CPU seconds from here
        outbox.put(("ready", worker))
        receiver.run()
    except Exception as error:  # the consumer raises it
        outbox.put(("error", worker, type(error).__name__, f"{error}\n{traceback.format_exc(limit=4)}"))
    finally:
        sock.close(0)
        context.term()
        receiver.release()  # the mapping's views dropped before it is closed
        with contextlib.suppress(BufferError):  # a view still held (a failed batch): the exit unmaps it anyway
            shm.close()


class _Receiver:
    """One receiving process's work: the consumer's orders (:meth:`orders`), the slots (:meth:`free_slot`), the
    image messages (:meth:`image`) staged by one of two paths (the device's walk straight into a slot,
    :meth:`fast_take`; the general one, :meth:`take`, packed or decoded by :meth:`flush`), and the loop over
    the socket (:meth:`run`). ``memory``: the (slots, slot_bytes) shared slots."""

    def __init__(self, worker: int, sock, memory: np.ndarray, inbox, outbox, free, *, batch: int) -> None:
        from qora.ssb.live.stream2 import _scan

        self.worker, self.sock, self.memory = worker, sock, memory
        self.inbox, self.outbox, self.free = inbox, outbox, free
        self.slots, self.slot_bytes = memory.shape
        self.batch, self.head = batch, _header_bytes(batch)
        self.walk = _scan
        self.channel = self.series = self.mode = None
        self.max_wait_s = 10.0
        self.ending = self.stop = False
        self.held: list = []  # v2 images that came before the channel was known
        self.staged = _Staged()
        self.known: dict = {}
        self.scratch = np.empty(11, np.int64)
        self.received = 0
        self.waited = 0.0  # seconds spent waiting for a free slot: the consumer's back-pressure on this receiver
        self.cpu0 = time.process_time()
        # the device's path for stream v2 (the one that must take ~30,000 frames/s a process): each
        # bitshuffle-LZ4 frame's bytes copied from the message straight into the slot as it comes, by
        # the compiled walk's offsets, with no object made per frame (ImageFields, the part tuples and
        # the later pack cost 3 times the walk itself: docs/ssb-performance.md)
        self.fast: dict = {"slot": None}

    def release(self) -> None:
        self.memory = None
        self.fast.clear()

    def orders(self, block: float = 0.0) -> None:
        try:
            while True:
                order = self.inbox.get(timeout=block) if block else self.inbox.get_nowait()
                block = 0.0
                kind = order[0]
                if kind == "channel":
                    self.channel, self.series = np.frombuffer(order[1], np.uint8), order[2]
                elif kind == "mode":
                    self.mode, self.max_wait_s = order[1], order[2]
                elif kind == "end":
                    self.ending = True
                elif kind == "stop":
                    self.stop = True
        except queue.Empty:  # no more orders now: back to the stream
            pass

    def free_slot(self):
        """A free slot (None after a stop): waited for ``max_wait_s``, then FellBehind."""
        t = time.perf_counter()
        try:
            return self.free.get(timeout=self.max_wait_s)
        except queue.Empty:
            self.outbox.put(("error", self.worker, "FellBehind",
                             f"processing fell behind the detector: receiver {self.worker}'s {self.slots} slots stayed "
                             f"full for {self.max_wait_s:g} s; use a faster backend (--backend cuda), more slots, or "
                             "a slower scan"))
            self.stop = True
            return None
        finally:
            self.waited += time.perf_counter() - t

    def _announce(self, slot: int, n: int, announce: tuple, t_first: float, t_last: float, table) -> None:
        # the process's CPU seconds so far (all its threads: ZeroMQ's I/O, Numba's): its cost per
        # frame, whatever share of the cores it was given
        self.outbox.put(("batch", self.worker, slot, n) + announce
                        + (t_first, t_last, time.process_time() - self.cpu0, self.waited, table))

    def fast_flush(self) -> None:
        f = self.fast
        if f["slot"] is None:
            return
        n, nbytes = f["n"], int(f["offsets"][f["n"]])
        table = store_block_table(self.memory[f["slot"]], self.head, nbytes, f["offsets"][:n + 1], f["dtype"],
                                  f["shape"][0] * f["shape"][1])
        self._announce(f["slot"], n, ("compressed", f["dtype"], f["shape"], nbytes), f["t_first"], f["t_last"], table)
        f["slot"] = None

    def fast_take(self, buf, out) -> bool:
        """Stage the image ``out`` describes (the walk's fields of ``buf``); False when it is not a
        bitshuffle-LZ4 frame of unsigned counts (the general path takes it)."""
        key = (out[3], out[4], out[5], out[7])
        f = self.fast
        if f["slot"] is not None and key != f["key"]:
            self.fast_flush()
        if f["slot"] is None:
            from qora.ssb.live import cbor

            dtype = cbor.typed_array_dtype(int(out[5]))
            if out[6] != 1 or dtype.kind != "u" or dtype.itemsize != out[7]:
                return False
            self.flush()  # a batch of the general path goes first: batches keep their frames' order
            slot = self.free_slot()
            if slot is None:
                return True
            row = self.memory[slot]
            f.update(slot=slot, n=0, key=key, dtype=dtype.str, shape=(int(out[3]), int(out[4])),
                     index=np.ndarray(self.batch, np.int64, row, 0),
                     offsets=np.ndarray(self.batch + 1, np.int64, row, 8 * self.batch),
                     payload=row[self.head:], t_first=time.perf_counter())
            f["offsets"][0] = 0
        n, lo, size = f["n"], f["offsets"][f["n"]], out[9]
        if lo + size > f["payload"].size:
            if n == 0:
                raise InputError(f"a frame of {size} bytes is larger than a shared-memory slot ({f['payload'].size})")
            self.fast_flush()
            return self.fast_take(buf, out)
        f["payload"][lo:lo + size] = buf[out[8]:out[8] + size]
        f["index"][n] = out[2]
        f["offsets"][n + 1] = lo + size
        f["n"] = n + 1
        f["t_last"] = time.perf_counter()
        self.received += 1
        if n + 1 == self.batch:
            self.fast_flush()
        return True

    def flush(self) -> None:
        self.fast_flush()
        staged = self.staged
        if not len(staged):
            return
        while self.mode is None and not self.stop:  # the consumer says where frames are decoded
            self.orders(block=0.05)
        if self.stop:
            return
        slot = self.free_slot()
        if slot is None:
            return
        n, row = len(staged), self.memory[slot]
        np.ndarray(n, np.int64, row, 0)[:] = staged.index
        payload = row[self.head:]
        item = None
        if self.mode == "device":
            item = (_compressed_v1(staged.index, staged.v1_infos, staged.blobs) if staged.version == 1
                    else _compressed_parts(staged.index, staged.blobs))
        if item is not None:
            blob, offsets = item.pack(into=payload)
            np.ndarray(n + 1, np.int64, row, 8 * self.batch)[:] = offsets
            nbytes = int(offsets[-1])
            table = store_block_table(row, self.head, nbytes, offsets, item.dtype, item.shape[0] * item.shape[1])
            announce = ("compressed", item.dtype.str, item.shape, nbytes)
        else:
            frames = (decode_frames(staged.v1_infos, staged.blobs) if staged.version == 1
                      else _decode_parts(staged.blobs))
            if frames.nbytes > payload.size:  # a batch is flushed before its frames could overflow
                raise InputError(f"a batch of {n} frames ({frames.nbytes} bytes) past a slot's {payload.size}")
            np.ndarray(frames.shape, frames.dtype, payload).reshape(frames.shape)[...] = frames
            announce = ("frames", frames.dtype.str, frames.shape[1:], frames.nbytes)
            table = None
        self._announce(slot, n, announce, staged.t_first, staged.t_last, table)
        self.staged = _Staged()

    def take(self, message_index: int, version: int, info, blob, frame_bytes: int) -> None:
        staged = self.staged
        if len(staged) and (staged.version != version or len(staged) >= self.batch
                            or staged.nbytes + frame_bytes > self.slot_bytes - self.head):
            self.flush()
            staged = self.staged
        now = time.perf_counter()
        if not len(staged):
            staged.t_first, staged.version = now, version
        staged.t_last = now
        staged.index.append(message_index)
        staged.v1_infos.append(info)
        staged.blobs.append(blob)
        staged.nbytes += frame_bytes
        self.received += 1

    def image(self, parts) -> bool:
        """Take an image message; False for any other message (forwarded to the consumer)."""
        if len(parts) == 1:  # stream v2: one CBOR part
            return self._image_v2(parts[0].buffer)
        fast = v1_image(parts, self.known)
        if fast is None:
            return False
        frame, info = fast
        try:
            cols, rows = (int(v) for v in info["shape"])
            size = rows * cols * np.dtype(info["type"]).itemsize
        except (KeyError, TypeError, ValueError):
            return False  # the consumer's parser says what is wrong
        self.take(frame, 1, info, parts[2].buffer, max(size, len(parts[2].buffer)))
        return True

    def _image_v2(self, buffer) -> bool:
        if self.channel is None:
            return False
        scratch = self.scratch
        if self.mode == "device":
            buf = np.frombuffer(buffer, np.uint8)
            self.walk(buf, self.channel, scratch)
            if scratch[10]:
                if scratch[1] != self.series:
                    raise FileFormatError(f"an image of series {scratch[1]} inside series {self.series}")
                if not len(self.staged) and self.fast_take(buf, scratch):
                    return True
        from qora.ssb.live.stream2 import scan_image

        fields = scan_image(buffer, self.channel, scratch)
        if fields is None:
            return False
        part = _scanned_part(fields)
        dtype, shape = part[0], part[1]
        # what the slot holds: the blob (device) or the decoded frame (host), whichever is larger
        self.take(fields.image_id, 2, None, part, max(len(fields.payload), dtype.itemsize * shape[0] * shape[1]))
        return True

    def _forward(self, parts) -> None:
        self.outbox.put(("message", self.worker, [(bytes(p.buffer), p.more) for p in parts]))

    def _idle(self) -> str:
        """The stream idle here: what is staged goes now (the end's latency), then the orders, the held images.
        Returns "stop" when drained after the end, "again" when held images were taken, else "poll"."""
        self.flush()
        self.orders()
        if self.ending:
            self.idle_since = self.idle_since or time.perf_counter()
            # drained: the end was sent after every frame, those dealt to this receiver are
            # in its socket by now (the consumer stops sooner when the whole scan has come)
            if time.perf_counter() - self.idle_since > DRAIN_S:
                return "stop"
        if self.held and self.channel is not None:
            self._take_held()
            return "again"
        return "poll"

    def _take_held(self) -> None:
        """The images held until the channel came, taken in their order, before any later image: left until the
        stream idled (the scan's end when it never does), they came after the rest of this receiver's frames, so
        that their rows were closed and every one of them late (a third of a 128^2 scan's frames with 4 receivers
        and 2 senders, each sender's start message reaching one of its two receivers)."""
        pending, self.held[:] = list(self.held), []
        for p in pending:
            if not self.image(p):
                self._forward(p)

    def _message(self) -> list | None:
        import zmq

        try:
            parts = [self.sock.recv(zmq.NOBLOCK, copy=False)]
            while parts[-1].more:
                parts.append(self.sock.recv(copy=False))
        except zmq.Again:
            return None
        return parts

    def run(self) -> None:
        """Receive until stopped or drained after the end; then the last batch and "done"."""
        self.idle_since = None
        count = 0
        while not self.stop:
            parts = self._message()
            if parts is None:
                step = self._idle()
                if step == "stop":
                    break
                if step == "poll":
                    self.sock.poll(5)
                continue
            self.idle_since = None
            count += 1
            if self.channel is None or count % 256 == 0:
                self.orders()  # a stop while the stream is busy; the channel, as soon as it comes
                if self.held and self.channel is not None:
                    self._take_held()
            if self.image(parts):
                continue
            if len(parts) == 1 and self.channel is None and parts[0].buffer[:1] != b"{" and _is_v2_image(parts):
                self.held.append(parts)  # the start went to another receiver: its channel will come
                continue
            self.flush()  # the messages around the images keep their place after them
            self._forward(parts)
        self.flush()
        self.outbox.put(("done", self.worker, self.received))


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
