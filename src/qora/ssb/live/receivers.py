"""Several receiving processes on one DECTRIS stream: each PULLs, parses and stages frames in
batches into shared memory; the process that builds G takes the batches from there.

Why (docs/ssb-performance.md, "Live: several receiving processes"): one Python process spends
most of its time per frame in the interpreter around the compiled stages (the receive, the
message walk, the packing), so it cannot take 120,000 frames/s alone, and threads share one
interpreter lock. A DECTRIS detector PUSHes its stream on one ZeroMQ socket, and a PUSH socket
deals its messages round-robin to every PULL socket connected to it (ZeroMQ guide, "Divide and
Conquer"; the DECTRIS SIMPLON API manual's stream interface is a PUSH socket): N processes that
each connect a PULL socket each get about 1/N of the frames. The frames carry their numbers, so
the order in which the batches reach G does not matter (:class:`qora.ssb.live.Placement` places
each by its number and reports what is dropped, repeated or late).

Layout: each receiving process owns a ring of ``slots`` batch slots in one
:class:`multiprocessing.shared_memory.SharedMemory` block (made and unlinked by the consuming
process). A slot holds a batch's frame numbers, then (device decoding) the frames' bitshuffle-LZ4
blobs packed end to end with their offsets and, after them, their block table (made here, so the
consumer does not), or (host decoding) the decoded frames. A filled slot is
announced on one queue shared by all receivers; the consumer hands it back on that receiver's
queue of free slots once G has taken the frames (``Frames.release``). A receiver that finds no free
slot for ``max_wait_s`` seconds reports :class:`qora.ssb.live.FellBehind`.

The stream's other messages (v1's global header and series end, v2's ``start`` and ``end``) reach
one receiver each, which forwards them to the consumer; the consumer reads the header as the
single-process source does (:class:`qora.ssb.live.DectrisZMQSource`) and tells every receiver the
channel (stream v2), the decoding place and, at the end message, to stop once its socket is idle.

Works with the ``spawn`` start method (the receivers import only this module's dependencies).
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import shutil
import time
import traceback

import numpy as np

from qora.io.errors import FileFormatError, InputError
from qora.ssb.live.bslz4_batch import BlockTable, CompressedFrames, store_block_table
from qora.ssb.live.dectris import (DectrisZMQSource, _compressed_parts, _compressed_v1, _decode_parts, _scanned_part,
                                   _warm_receiver, decode_frames, v1_image)
from qora.ssb.live.frames import Frames

__all__ = ["ParallelDectrisSource", "RECEIVER_BATCH", "SLOT_BYTES"]

SLOT_BYTES = 64 << 20  # a slot: ~5,500 compressed 192^2 frames, or ~900 decoded uint16 ones
# frames a receiver's batch holds at most (fewer where the slot fills first: decoded frames). Measured on
# the H200 (512^2 scan, 192^2 frames, 4 receivers, docs/ssb-performance.md): 2,048 gave 151-164k frames/s
# into G in every run, fresh process or not; 1,024 gave 84-142k (a batch's fixed costs taken twice as often)
RECEIVER_BATCH = 2048
DRAIN_S = 0.1  # seconds a receiver's socket stays idle after the series' end before it stops
_ALIGN = 64


class _Part:
    """A forwarded message part, as :func:`receive_parts` gives them (``buffer``, ``more``)."""

    __slots__ = ("buffer", "more")

    def __init__(self, data: bytes, more: bool) -> None:
        self.buffer, self.more = memoryview(data), more


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


def _receive(worker: int, endpoint: str, shm_name: str, slots: int, slot_bytes: int, batch: int, threads: int,
             hwm: int, inbox, outbox, free) -> None:
    """A receiving process: PULL from ``endpoint``, stage batches into the slots of ``shm_name``,
    announce them on ``outbox``; orders (the channel, the decoding place, the end) on ``inbox``."""
    from multiprocessing import shared_memory

    import zmq

    try:
        import numba

        numba.set_num_threads(max(1, min(threads, numba.config.NUMBA_NUM_THREADS)))
    except Exception:  # the host decoder runs with what it has
        pass
    shm = shared_memory.SharedMemory(name=shm_name)
    context = zmq.Context()
    sock = context.socket(zmq.PULL)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVHWM, hwm)
    sock.connect(endpoint)
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


class ParallelDectrisSource(DectrisZMQSource):
    """A DECTRIS stream (v1 or v2) received by ``processes`` receiving processes at once (the
    module's text): the same frames, batches and header as :class:`DectrisZMQSource`, in another
    order. ``slots`` batch slots of ``slot_bytes`` bytes a process (shared memory); ``batch``
    frames at most a slot. ``timeout`` (s): a stream silent that long is an error. ``decode``:
    "host" (the receivers decode), "device" (they pack the compressed frames for the GPU) or "auto"
    (set by :func:`qora.ssb.live.run_live`; iterated directly, "host"). Use as a context manager
    (or :meth:`close`): it ends the processes and frees the shared memory."""

    def __init__(self, endpoint, *, processes: int = 2, scan_shape=None, batch: int = RECEIVER_BATCH,
                 timeout: float = 10.0,
                 stream: str = "auto", decode: str = "auto", slots: int = 4, slot_bytes: int = SLOT_BYTES,
                 max_wait_s: float = 10.0) -> None:
        # several endpoints: a simulator serving from several processes, each its share of the
        # frames in order (receiver k connects to endpoint k mod their number); a detector has one
        self.endpoints = [endpoint] if isinstance(endpoint, str) else list(endpoint)
        super().__init__(self.endpoints[0], scan_shape=scan_shape, batch=batch, timeout=timeout, stream=stream,
                         decode=decode)
        if int(processes) < max(1, len(self.endpoints)):
            raise InputError(f"processes must be at least 1 and one for each of the {len(self.endpoints)} endpoints, "
                             f"got {processes}")
        if int(slots) < 2:
            raise InputError(f"slots must be at least 2 (one filled while another is read), got {slots}")
        self.processes, self.slots, self.max_wait_s = int(processes), int(slots), float(max_wait_s)
        self.slot_bytes = int(slot_bytes)
        if self.slot_bytes < _header_bytes(self.batch) + (1 << 16):
            raise InputError(f"slot_bytes {slot_bytes} leaves no room for frames after a batch's numbers")
        self._workers: list = []
        self._memory: list = []
        self._control: list = []  # messages of the stream forwarded before open() read the header
        self._early_batches: list = []  # batches announced before it
        self._registered: list = []  # (backend, array): slots page-locked for the device's copies
        self.last_received = None  # perf_counter (CLOCK_MONOTONIC: one clock for all processes) of the last frame
        self.statistics = {"batches": 0, "per_process": [0] * self.processes,
                           # each receiver's CPU seconds since it was ready, and its seconds waiting for a free slot
                           "cpu_s": [0.0] * self.processes, "slot_wait_s": [0.0] * self.processes}

    def __repr__(self) -> str:
        return f"ParallelDectrisSource({','.join(self.endpoints)}, processes={self.processes})"

    def open(self) -> None:
        if self._workers:
            return
        import importlib.util

        if importlib.util.find_spec("zmq") is None:
            from qora.io.errors import MissingExtra

            raise MissingExtra("the DECTRIS stream needs pyzmq: pip install 'qora[live]'")
        from multiprocessing import shared_memory

        need = self.processes * self.slots * self.slot_bytes
        free = shutil.disk_usage("/dev/shm").free if os.path.isdir("/dev/shm") else need
        if need > 0.8 * free:
            # smaller slots where /dev/shm is small (a container's default is 64 MB): a batch then ends
            # when its slot is full; below 4 MB a slot (~350 compressed 192^2 frames) it is an error
            fit = int(0.8 * free) // (self.processes * self.slots) // _ALIGN * _ALIGN
            if fit < max(4 << 20, _header_bytes(self.batch) + (1 << 16)):
                raise InputError(f"{self!r}: {need / 2**20:.0f} MiB of shared memory wanted ({self.processes} "
                                 f"processes x {self.slots} slots x {self.slot_bytes / 2**20:.0f} MiB), /dev/shm has "
                                 f"{free / 2**20:.0f} MiB free: fewer processes, or a larger /dev/shm "
                                 "(docker run --shm-size)")
            self.slot_bytes = fit
        ctx = multiprocessing.get_context("spawn")
        self._outbox = ctx.Queue()
        threads = max(1, (os.cpu_count() or 1) // self.processes)
        try:
            for k in range(self.processes):
                shm = shared_memory.SharedMemory(create=True, size=self.slots * self.slot_bytes)
                self._memory.append(shm)
                inbox, free_slots = ctx.Queue(), ctx.Queue()
                for s in range(self.slots):
                    free_slots.put(s)
                proc = ctx.Process(target=_receive, name=f"qora-live-receiver-{k}", daemon=True,
                                   args=(k, self.endpoints[k % len(self.endpoints)], shm.name, self.slots,
                                         self.slot_bytes, self.batch, threads, 10000, inbox, self._outbox,
                                         free_slots))
                proc.start()
                self._workers.append((proc, inbox, free_slots))
            ready = 0
            while ready < self.processes:  # every socket connected before the series' header is awaited
                kind, *rest = self._next(120.0)
                if kind == "ready":
                    ready += 1
                else:
                    self._early(kind, rest)
            self._context = self._socket = None
            head, parts = self._recv()
            if self.stream == "v2":
                self._open_v2(head)
                if self.channel is not None:
                    for _, inbox, _ in self._workers:
                        inbox.put(("channel", str(self.channel).encode(), self.series))
            else:
                if len(parts) > 1 and "y_pixels_in_detector" not in str(bytes(parts[1].buffer)):
                    raise FileFormatError(f"{self!r}: a v1 header without the detector configuration: several "
                                          "receiving processes need header_detail 'basic' or 'all'")
                self._open_v1(head, parts)
        except BaseException:
            self.close()
            raise

    def register_slots(self, backend) -> bool:
        """Page-lock the receivers' slots for ``backend``'s device (after :meth:`open`): the device
        decode copies each batch from its slot, with no copy into a pinned buffer first. True if
        done (False on the CPU, or where the driver refuses: batches are copied as before); the
        seconds it took in ``statistics["register_s"]`` (the slots' pages are faulted in and pinned)."""
        if self._registered or not self._memory or not getattr(backend, "is_cuda", False):
            return bool(self._registered)
        t0 = time.perf_counter()
        for shm in self._memory:
            array = np.ndarray(self.slots * self.slot_bytes, np.uint8, shm.buf)
            if not backend.host_register(array):
                self._unregister()
                return False
            self._registered.append((backend, array))
        self.statistics["register_s"] = time.perf_counter() - t0
        return True

    def _unregister(self) -> None:
        registered, self._registered = self._registered, []
        for backend, array in registered:
            backend.host_unregister(array)

    def _early(self, kind, rest) -> None:
        if kind == "message":
            self._control.append(rest[1])
        elif kind == "error":
            self._raise(rest)
        else:
            raise FileFormatError(f"{self!r}: a receiver sent {kind!r} before the stream's header")

    def _next(self, timeout: float):
        try:
            return self._outbox.get(timeout=timeout)
        except queue.Empty:
            dead = [p.name for p, _, _ in self._workers if not p.is_alive()]
            raise InputError(f"{self!r}: no message for {timeout:g} s"
                             + (f" (receivers {dead} have stopped)" if dead else "")) from None

    def _raise(self, rest) -> None:
        from qora.ssb.live.run import FellBehind

        worker, name, text = rest
        error = {"FellBehind": FellBehind, "FileFormatError": FileFormatError}.get(name, InputError)
        raise error(f"{self!r}, receiver {worker}: {text}")

    def _parts(self):
        """The next of the stream's messages other than images (forwarded by a receiver)."""
        deadline = time.perf_counter() + self.timeout
        while not self._control:
            kind, *rest = self._next(max(0.0, deadline - time.perf_counter()) or 1e-3)
            if kind == "message":
                self._control.append(rest[1])
            elif kind == "error":
                self._raise(rest)
            elif kind == "batch":  # an image before the header was read: it waits in its slot
                self._early_batches.append(rest)
            else:
                raise FileFormatError(f"{self!r}: a receiver sent {kind!r} before the stream's header")
        return [_Part(data, more) for data, more in self._control.pop(0)]

    def _batch(self, worker: int, slot: int, n: int, kind: str, dtype: str, shape, nbytes: int, t_first: float,
               t_last: float, cpu_s: float, wait_s: float = 0.0, table=None):
        memory = np.ndarray((self.slots, self.slot_bytes), np.uint8, self._memory[worker].buf)[slot]
        head = _header_bytes(self.batch)
        index = np.ndarray(n, np.int64, memory, 0)
        free = self._workers[worker][2]

        def release(free=free, slot=slot) -> None:
            free.put(slot)

        self.last_received = t_last if self.last_received is None else max(self.last_received, t_last)
        self.statistics["batches"] += 1
        self.statistics["per_process"][worker] += n
        self.statistics["cpu_s"][worker] = cpu_s
        self.statistics["slot_wait_s"][worker] = wait_s
        if kind == "compressed":
            offsets = np.ndarray(n + 1, np.int64, memory, 8 * self.batch)
            if table is not None:  # made by the receiver, stored after the blob
                table = BlockTable.stored(memory[table[0]:], table[1:])
            return CompressedFrames.from_packed(index, memory[head:head + nbytes], offsets, np.dtype(dtype), shape,
                                                release=release, receiver=worker, table=table,
                                                registered=bool(self._registered))
        data = np.ndarray((n,) + tuple(shape), np.dtype(dtype), memory, head)
        return Frames(index, data, release, worker)

    def __iter__(self):
        self.open()
        mode = self.decode if self.decode in ("host", "device") else "host"
        for _, inbox, _ in self._workers:
            inbox.put(("mode", mode, self.max_wait_s))
        done, received = 0, 0
        self._ends = 0
        total = self.scan_shape[0] * self.scan_shape[1]
        early, self._early_batches = self._early_batches, []
        for rest in early:
            received += rest[2]
            yield self._batch(*rest)
        # messages forwarded while the header was awaited (a short series' end can be among them)
        pending, self._control = self._control, []
        for message in pending:
            self._series_message(message)
        while done < self.processes and received < total:  # the whole scan has come: no wait for the drain
            kind, *rest = self._next(self.timeout)
            if kind == "batch":
                received += rest[2]
                yield self._batch(*rest)
            elif kind == "message":
                self._series_message(rest[1])
            elif kind == "done":
                done += 1
            elif kind == "error":
                self._raise(rest)
        if self._ends < len(self.endpoints) and received < total:
            raise FileFormatError(f"{self!r}: the receivers stopped before the series' end")

    def _series_message(self, message) -> None:
        """A message of the series other than an image: its end (once from every endpoint, every
        receiver is told to stop when drained), or another endpoint's copy of the header."""
        head = self._decode([_Part(data, more) for data, more in message])
        name = head.get("type") if self.stream == "v2" else head.get("htype")
        series = head.get("series_id") if self.stream == "v2" else head.get("series")
        if name in ("start", "dheader-1.0") and len(self.endpoints) > 1 and series == self.series:
            return
        if name not in ("end", "dseries_end-1.0"):
            raise FileFormatError(f"{self!r}: unexpected message {name!r} inside the series")
        self._ends += 1
        if self._ends >= len(self.endpoints):
            for _, inbox, _ in self._workers:
                inbox.put(("end",))

    def close(self) -> None:
        for proc, inbox, _ in self._workers:
            if proc.is_alive():
                inbox.put(("stop",))
        for proc, _, _ in self._workers:
            proc.join(5)
            if proc.is_alive():  # a receiver stuck in a system call: ended, its memory is freed below
                proc.terminate()
                proc.join(5)
        self._workers = []
        self._unregister()  # before the memory is unmapped
        for shm in self._memory:
            try:
                shm.close()
            except BufferError:  # frames yielded still view it: the mapping goes with them, the name now
                pass
            shm.unlink()
        self._memory = []
