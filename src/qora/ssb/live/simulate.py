"""Detector simulators: a recorded or simulated scan served over the Merlin TCP protocol or the
DECTRIS ZeroMQ stream on 127.0.0.1, at a set frame rate, for tests, benchmarks and trying
``qora ssb live`` without a microscope.

Each runs in a thread and stops by itself: after the last frame, after ``timeout`` seconds without
a client, or after ``time_limit`` seconds in all. Frames can be left out (``drop``) or sent in
another order (``swap``: pairs of indices exchanged) to exercise the receiver's checks.
"""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
from pathlib import Path

import numpy as np

from qora.io.errors import InputError
from qora.ssb.live import dectris, merlin

__all__ = ["MerlinSimulator", "DectrisSimulator", "MibWriter"]


class _Simulator:
    """Frames of ``data`` (scan_row, scan_col, det_row, det_col), or of a pool of frames
    (``data`` (n, det_row, det_col) with ``scan_shape``: frame i is ``data[i % n]``, so a benchmark
    serves a full-size scan from a few distinct frames). ``fps``: frames per second (None: as fast
    as the client reads)."""

    def __init__(self, data, *, scan_shape=None, fps: float | None = None, drop=(), swap=(), timeout: float = 10.0,
                 time_limit: float = 120.0) -> None:
        data = np.asarray(data)
        if data.ndim == 4:
            self.scan_shape, self.frames = tuple(data.shape[:2]), data.reshape((-1,) + data.shape[2:])
        elif data.ndim == 3 and scan_shape is not None:
            self.scan_shape, self.frames = tuple(int(v) for v in scan_shape), data
        else:
            raise InputError(f"a simulator serves a 4D scan or a pool of frames (n, det_row, det_col) with scan_shape, "
                             f"got {data.shape}")
        self.total = self.scan_shape[0] * self.scan_shape[1]
        self.fps, self.timeout, self.time_limit = fps, float(timeout), float(time_limit)
        order = np.arange(self.total)
        for a, b in swap:
            order[a], order[b] = order[b], order[a]
        self.order = order[~np.isin(order, np.asarray(list(drop), np.int64))]
        self.sent = 0
        self.send_s = None  # seconds from the first frame sent to the last (the simulator's own rate)
        self.error = None
        self._stop = threading.Event()
        self._thread = None

    def frame(self, index: int) -> np.ndarray:
        return self.frames[index % len(self.frames)]

    def _pace(self, t0: float, i: int) -> bool:
        """Wait for frame i's time; False when the time limit or a stop has come."""
        if self._stop.is_set() or time.perf_counter() - t0 > self.time_limit:
            return False
        if self.fps:
            ahead = t0 + i / self.fps - time.perf_counter()
            if ahead > 0:
                time.sleep(ahead)
        return True

    def start(self):
        self._thread = threading.Thread(target=self._guarded, daemon=True, name=type(self).__name__)
        self._thread.start()
        return self

    def _guarded(self) -> None:
        try:
            self._serve()
        except Exception as error:  # reported by join(), the thread must not die silently
            self.error = error

    def join(self, timeout: float | None = None) -> None:
        """Wait for the simulator to stop; raise what stopped it, if it failed."""
        if self._thread is not None:
            self._thread.join(self.time_limit + self.timeout if timeout is None else timeout)
        if self.error is not None:
            raise self.error

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.timeout + 5)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _check_merlin(counter_depth: int, assembly: str, detector_shape) -> None:
    if counter_depth not in merlin.FORMATS:
        raise InputError(f"counter_depth must be 1, 6, 12 or 24, got {counter_depth}")
    if assembly not in ("1x1", "2x2"):
        raise InputError(f"assembly must be '1x1' (one chip) or '2x2' (a quad), got {assembly!r}")
    if assembly == "2x2" and any(v % 2 for v in detector_shape):
        raise InputError(f"a quad's frame has an even number of rows and columns, got {tuple(detector_shape)}")


class MerlinSimulator(_Simulator):
    """A Merlin's TCP data port on 127.0.0.1 (``port`` 0: a free one, :attr:`port` tells which):
    one client, the acquisition header (one trigger a scan row), then each frame as a message, in
    ``counter_depth`` (1, 6, 12, 24), normal or RAW (``raw``), from a single chip or a quad
    (``assembly`` "2x2", RAW: its chip layout), made a batch of frames at a time."""

    def __init__(self, data, *, port: int = 0, counter_depth: int = 12, raw: bool = False, assembly: str = "1x1",
                 **options) -> None:
        super().__init__(data, **options)
        _check_merlin(counter_depth, assembly, self.frames.shape[1:])
        self.counter_depth, self.raw, self.assembly = counter_depth, raw, assembly
        self._listener = socket.create_server(("127.0.0.1", int(port)))
        self._listener.settimeout(self.timeout)
        self.port = self._listener.getsockname()[1]
        self.address = f"tcp://127.0.0.1:{self.port}"

    def _serve(self) -> None:
        header = merlin.message(merlin.acquisition_header(frames=self.total, frames_per_trigger=self.scan_shape[1],
                                                          counter_depth=self.counter_depth, raw=self.raw,
                                                          assembly=self.assembly))
        try:
            client, _ = self._listener.accept()
        except socket.timeout:
            return
        finally:
            self._listener.close()
        with client:
            client.settimeout(self.timeout)
            client.sendall(header)
            options = dict(counter_depth=self.counter_depth, raw=self.raw, assembly=self.assembly)
            # the distinct frames encoded once where they fit in 256 MB (a benchmark's pool, a test's
            # scan): each batch is then a copy renumbered, so that a benchmark measures the receiver
            # and not the encoding; else messages made a batch at a time (vectorized)
            size = merlin.PREFIX + len(merlin.frame_header(0, *self.frames.shape[1:], **options)) + len(
                merlin.encode_pixels(self.frames[:1], **options)[0])
            encoded = (merlin.frame_messages(np.arange(1, len(self.frames) + 1), self.frames, **options)
                       if len(self.frames) * size <= 256 << 20 else None)
            t0 = time.perf_counter()
            # with a rate, small batches keep the pace smooth
            step = 64 if self.fps else 512
            for n in range(0, len(self.order), step):
                if not self._pace(t0, n):
                    break
                index = self.order[n:n + step]
                if encoded is not None:
                    messages = encoded[index % len(self.frames)]
                    merlin.number_messages(messages, index + 1)
                else:
                    messages = merlin.frame_messages(index + 1, self.frames[index % len(self.frames)], **options)
                client.sendall(messages)
                self.sent += len(index)
            self.send_s = time.perf_counter() - t0


class DectrisSimulator(_Simulator):
    """A DECTRIS detector's ZeroMQ stream on 127.0.0.1 (PUSH, ``port`` 0: a free one), ``stream``
    "v1" (JSON: the global header with the detector configuration, ``ntrigger`` scan rows of
    ``nimages`` frames; each frame as the four-part image message; the series' end) or "v2" (CBOR:
    the ``start`` message with the scan shape in its ``user_data``, one ``image`` message a frame,
    ``end``). Frames in ``encoding`` (v1's names: bitshuffle-LZ4 by default, ``lz4<``, ``<``; in
    v2 the same compression as ``bslz4``, ``lz4``, none). Needs pyzmq."""

    def __init__(self, data, *, port: int = 0, encoding: str | None = None, series: int = 1, stream: str = "v1",
                 clients: int = 1, io_threads: int = 2, share: tuple = (0, 1), **options) -> None:
        import zmq

        super().__init__(data, **options)
        part, parts = (int(v) for v in share)
        if not 0 <= part < parts:
            raise InputError(f"share must be (part, parts) with 0 <= part < parts, got {share}")
        # one of several sending processes (a benchmark's, a detector sends from one): the frames
        # whose index is part mod parts, in order; each sends the start and the end
        self.order = self.order[self.order % parts == part]
        if stream not in ("v1", "v2"):
            raise InputError(f"stream must be 'v1' or 'v2', got {stream!r}")
        if int(clients) < 1 or int(io_threads) < 1:
            raise InputError(f"clients and io_threads must be at least 1, got {clients} and {io_threads}")
        bits = 8 * self.frames.dtype.itemsize
        self.encoding = encoding or f"bs{bits}-lz4<"
        self.series, self.stream, self.clients = series, stream, int(clients)
        # the I/O threads move the bytes to the receivers' connections (several: the connections of
        # several receivers spread over them)
        self._context = zmq.Context(io_threads=int(io_threads))
        self._socket = self._context.socket(zmq.PUSH)
        if self.clients > 1:  # see every receiver connected before the series starts
            self._monitor = self._socket.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED)
        self._socket.setsockopt(zmq.LINGER, int(self.timeout * 1000))
        self._socket.setsockopt(zmq.SNDTIMEO, int(self.timeout * 1000))
        self._socket.setsockopt(zmq.SNDHWM, 100000)
        if port:
            self._socket.bind(f"tcp://127.0.0.1:{int(port)}")
            self.port = int(port)
        else:
            self.port = self._socket.bind_to_random_port("tcp://127.0.0.1")
        self.address = f"tcp://127.0.0.1:{self.port}"

    def _pool(self, encode) -> list:
        """``(index, encoded frame)`` in the order sent, each distinct frame encoded once."""
        pool, encoded = {}, []
        for i in self.order:
            key = int(i) if len(self.frames) >= self.total else int(i) % len(self.frames)
            if key not in pool:
                pool[key] = encode(self.frame(int(i)))
            encoded.append((int(i), pool[key]))
        return encoded

    def _wait_for_clients(self) -> bool:
        """Wait (up to ``timeout``) until ``clients`` receivers have connected: a PUSH socket deals
        messages only to the peers connected when each is sent, so a series started earlier would
        go to the first receiver alone (a detector is armed after its receivers connect)."""
        if self.clients == 1:
            return True
        from zmq.utils.monitor import recv_monitor_message

        seen, deadline = 0, time.perf_counter() + self.timeout
        try:
            while seen < self.clients:
                left = deadline - time.perf_counter()
                if left <= 0 or self._stop.is_set() or not self._monitor.poll(int(left * 1000)):
                    return False
                recv_monitor_message(self._monitor)
                seen += 1
            return True
        finally:
            self._socket.disable_monitor()
            self._monitor.close(0)

    def _serve(self) -> None:
        import zmq

        try:
            if not self._wait_for_clients():
                return
            if self.stream == "v2":
                self._serve_v2()
            else:
                self._serve_v1()
        except zmq.Again:
            return  # no client within the timeout: stop
        finally:
            self._socket.close()
            self._context.term()

    def _serve_v1(self) -> None:
        rows, cols = self.frames.shape[1:]
        config = {"description": "Dectris simulator (qora)", "x_pixels_in_detector": cols, "y_pixels_in_detector": rows,
                  "nimages": self.scan_shape[1], "ntrigger": self.scan_shape[0],
                  "bit_depth_image": 8 * self.frames.dtype.itemsize, "compression": self.encoding}

        def encode(frame):
            info, blob = dectris.encode_frame(frame, self.encoding)
            return json.dumps(info).encode(), blob

        encoded = self._pool(encode)
        times = json.dumps({"htype": "dconfig-1.0", "start_time": 0, "stop_time": 0, "real_time": 0}).encode()
        self._socket.send_multipart([json.dumps({"htype": "dheader-1.0", "series": self.series,
                                                 "header_detail": "basic"}).encode(), json.dumps(config).encode()])
        t0 = time.perf_counter()
        for n, (i, (info, blob)) in enumerate(encoded):
            if not self._pace(t0, n):
                break
            head = json.dumps({"htype": "dimage-1.0", "series": self.series, "frame": i, "hash": ""}).encode()
            self._socket.send_multipart([head, info, blob, times], copy=False)
            self.sent += 1
        self.send_s = time.perf_counter() - t0
        self._socket.send_multipart([json.dumps({"htype": "dseries_end-1.0", "series": self.series}).encode()])

    def _serve_v2(self) -> None:
        rows, cols = self.frames.shape[1:]
        compression = {"<": "none", "lz4<": "lz4"}.get(self.encoding, "bslz4")
        start = dectris.stream2_message(
            "start", self.series, detector_description="Dectris simulator (qora)", image_size_x=cols,
            image_size_y=rows, number_of_images=self.total, channels=["threshold_1"],
            image_dtype=self.frames.dtype.name, user_data={"scan_shape": list(self.scan_shape)})
        # each distinct frame's message encoded once, its image_id written as a 4-byte integer (valid
        # CBOR, if not the shortest) that is patched per frame: the simulator's Python per frame stays
        # small, so that a benchmark measures the receiver, not the sender
        marker = struct.pack(">BI", 0x1A, 0xFFFFFFFF)

        def encode(frame):
            message = bytearray(dectris.stream2_message(
                "image", self.series, image_id=0xFFFFFFFF, real_time=[1, 1000], start_time=[0, 1000],
                stop_time=[1, 1000], data={"threshold_1": dectris.encode_stream2_frame(frame, compression)}))
            return message, message.index(b"\x68image_id" + marker) + 10

        encoded = self._pool(encode)
        self._socket.send(start)
        t0 = time.perf_counter()
        pack = struct.Struct(">I").pack_into
        send = self._socket.send
        for n, (i, (message, at)) in enumerate(encoded):
            if not self._pace(t0, n):
                break
            pack(message, at, i)
            # copied into the message by ZeroMQ (one memcpy): a zero-copy send of a bytes copy cost more
            send(message, copy=True)
            self.sent += 1
        self.send_s = time.perf_counter() - t0
        self._socket.send(dectris.stream2_message("end", self.series))


class MibWriter(_Simulator):
    """A Merlin acquisition written to ``path`` (``.mib`` and its ``.hdr``) at a set frame rate,
    as the detector software writes it: for the follow mode. The ``.hdr`` is written first."""

    def __init__(self, data, path, *, counter_depth: int = 12, raw: bool = False, assembly: str = "1x1",
                 **options) -> None:
        super().__init__(data, **options)
        _check_merlin(counter_depth, assembly, self.frames.shape[1:])
        self.path = Path(path)
        self.counter_depth, self.raw, self.assembly = counter_depth, raw, assembly

    def _serve(self) -> None:
        hdr = merlin.acquisition_header(frames=self.total, frames_per_trigger=self.scan_shape[1],
                                        counter_depth=self.counter_depth, raw=self.raw, assembly=self.assembly)
        self.path.with_suffix(".hdr").write_bytes(hdr.rstrip(b" ") + b"\n")
        t0 = time.perf_counter()
        with open(self.path, "wb") as f:
            for n, i in enumerate(self.order):
                if not self._pace(t0, n):
                    break
                f.write(merlin.frame_message(int(i) + 1, self.frame(int(i)), counter_depth=self.counter_depth,
                                             raw=self.raw, assembly=self.assembly))
                f.flush()
                self.sent += 1
