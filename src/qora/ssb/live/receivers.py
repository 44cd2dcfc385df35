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

Works with the ``spawn`` start method (the receiving processes run :mod:`qora.ssb.live.receiving`).
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import shutil
import time

import numpy as np

from qora.io.errors import FileFormatError, InputError
from qora.ssb.live.bslz4_batch import BlockTable, CompressedFrames
from qora.ssb.live.dectris import SILENT_HINT, DectrisZMQSource
from qora.ssb.live.frames import Frames
from qora.ssb.live.receiving import _ALIGN, _header_bytes, _receive

__all__ = ["ParallelDectrisSource", "RECEIVER_BATCH", "SLOT_BYTES"]

SLOT_BYTES = 64 << 20  # a slot: ~5,500 compressed 192^2 frames, or ~900 decoded uint16 ones
# frames a receiver's batch holds at most (fewer where the slot fills first: decoded frames). Measured on
# the H200 (512^2 scan, 192^2 frames, 4 receivers, docs/ssb-performance.md): 2,048 gave 151-164k frames/s
# into G in every run, fresh process or not; 1,024 gave 84-142k (its ring of rows spans half as many rows, so more
# frames come after their row closed and take the slower late path)
RECEIVER_BATCH = 2048


class _Part:
    """A forwarded message part, as :func:`receive_parts` gives them (``buffer``, ``more``)."""

    __slots__ = ("buffer", "more")

    def __init__(self, data: bytes, more: bool) -> None:
        self.buffer, self.more = memoryview(data), more


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
        self.pin_for = None  # a CUDA backend: open() page-locks the slots for it before the header (run_live sets it)
        self.last_received = None  # perf_counter (CLOCK_MONOTONIC: one clock for all processes) of the last frame
        self.statistics = {"batches": 0, "per_process": [0] * self.processes,
                           # each receiver's CPU seconds since it was ready, and its seconds waiting for a free slot
                           "cpu_s": [0.0] * self.processes, "slot_wait_s": [0.0] * self.processes}

    def __repr__(self) -> str:
        return f"ParallelDectrisSource({','.join(self.endpoints)}, processes={self.processes})"

    def connect(self) -> None:
        """The receiving processes started and their sockets connected (each said "ready"), no message read."""
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
            self._headless = True
        except BaseException:
            self.close()
            raise

    def open(self) -> None:
        if not self._header_to_read(bool(self._workers)):
            return
        try:
            if self.pin_for is not None:  # page-locked now, before the scan's header, not during the scan
                self.register_slots(self.pin_for)
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
        """Page-lock the receivers' slots for ``backend``'s device (once they exist: in :meth:`open`, before the
        header, where :attr:`pin_for` is set, else after it): the device
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
        """The receivers' next message; an error once ``timeout`` s pass without one, or at once (within half a
        second) when a receiver has stopped without one: a receiver that died waited out the whole timeout."""
        deadline = time.perf_counter() + timeout
        while True:
            try:
                return self._outbox.get(timeout=min(0.5, max(1e-3, deadline - time.perf_counter())))
            except queue.Empty:
                dead = [p.name for p, _, _ in self._workers if not p.is_alive()]
                if dead or time.perf_counter() >= deadline:
                    raise InputError(f"{self!r}: no message for {timeout:g} s{SILENT_HINT}" if not dead else
                                     f"{self!r}: receivers {dead} have stopped") from None

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
