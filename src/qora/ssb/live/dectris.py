"""The DECTRIS detector stream (SIMPLON API, stream version 1) over ZeroMQ: the detector PUSHes,
Qora PULLs (port 9999 by default).

A series is a global header, image messages, and an end message, each a multipart ZeroMQ message
whose first part is JSON with its ``htype``:

- ``dheader-1.0`` (``series``, ``header_detail``): with detail "basic" or "all" a second part holds
  the detector configuration (JSON: ``x_pixels_in_detector``, ``y_pixels_in_detector``,
  ``nimages``, ``ntrigger``, ``bit_depth_image``, ...); "all" adds flat-field, pixel-mask and
  count-rate parts, skipped here.
- ``dimage-1.0`` (``series``, ``frame`` from 0), then ``dimage_d-1.0`` (``shape`` [x, y],
  ``type``, ``encoding``: ``<`` raw little-endian, ``lz4<`` an LZ4 block, ``bs8-lz4<``,
  ``bs16-lz4<``, ``bs32-lz4<`` bitshuffle-LZ4 with its 12-byte header), the frame's bytes, and
  ``dconfig-1.0`` (its times).
- ``dseries_end-1.0`` (``series``).

Frame n is scan index n (row-major). The scan shape is the caller's, else ``ntrigger`` rows of
``nimages`` frames (one trigger a scan row, as the simulator sends).
"""

from __future__ import annotations

import json
import struct

import numpy as np

from qora.io.errors import FileFormatError, InputError, MissingExtra
from qora.ssb.live import bslz4
from qora.ssb.live.frames import Frames, Source

__all__ = ["DectrisZMQSource", "decode_frame", "decode_frames", "encode_frame", "DATA_PORT"]

DATA_PORT = 9999


def decode_frame(info: dict, blob: bytes) -> np.ndarray:
    """A frame (rows, cols) from its ``dimage_d-1.0`` part and its bytes."""
    try:
        cols, rows = (int(v) for v in info["shape"])
        dtype = np.dtype(info["type"]).newbyteorder("<")
        encoding = info["encoding"]
    except (KeyError, TypeError, ValueError) as error:
        raise FileFormatError(f"a DECTRIS image part without a valid shape, type or encoding: {info!r} "
                              f"({error})") from None
    count = rows * cols
    if encoding == "<":
        flat = np.frombuffer(blob, dtype, count)
    elif encoding == "lz4<":
        raw = bslz4.lz4_codec().decode(struct.pack("<I", count * dtype.itemsize) + bytes(blob))
        flat = np.frombuffer(raw, dtype, count)
    elif encoding.startswith("bs") and encoding.endswith("-lz4<"):
        if int(encoding[2:-5]) != 8 * dtype.itemsize:
            raise FileFormatError(f"DECTRIS encoding {encoding} does not match the type {info['type']}")
        flat = bslz4.decompress(bytes(blob), dtype, count)
    else:
        raise FileFormatError(f"DECTRIS encoding {encoding!r} is not supported (<, lz4<, bs<bits>-lz4<)")
    return flat.reshape(rows, cols)


def decode_frames(infos: list, blobs: list) -> np.ndarray:
    """Frames (n, rows, cols) of a batch of image messages: bitshuffle-LZ4 frames of one shape and
    type are decoded together in parallel (:mod:`qora.ssb.live.bslz4_numba`), others one by one."""
    first = infos[0]
    encoding = first.get("encoding", "")
    same = all(i.get("shape") == first.get("shape") and i.get("type") == first.get("type")
               and i.get("encoding") == encoding for i in infos)
    if same and encoding.startswith("bs") and encoding.endswith("-lz4<") and len(infos) > 1:
        from qora.ssb.live.bslz4_numba import decode_batch

        cols, rows = (int(v) for v in first["shape"])
        dtype = np.dtype(first["type"])
        if int(encoding[2:-5]) != 8 * dtype.itemsize:
            raise FileFormatError(f"DECTRIS encoding {encoding} does not match the type {first['type']}")
        try:
            return decode_batch(blobs, dtype, rows * cols).reshape(len(blobs), rows, cols)
        except ValueError as error:
            raise FileFormatError(f"a DECTRIS image: {error}") from None
    return np.stack([decode_frame(i, b) for i, b in zip(infos, blobs)])


def encode_frame(frame: np.ndarray, encoding: str = "bs16-lz4<") -> tuple[dict, bytes]:
    """A frame's ``dimage_d-1.0`` part and bytes (the simulator's encoder)."""
    frame = np.ascontiguousarray(frame)
    little = frame.astype(frame.dtype.newbyteorder("<"))
    if encoding == "<":
        blob = little.tobytes()
    elif encoding == "lz4<":
        blob = bslz4.lz4_codec().encode(little.tobytes())[4:]
    elif encoding.startswith("bs") and encoding.endswith("-lz4<"):
        blob = bslz4.compress(little)
    else:
        raise InputError(f"encoding must be '<', 'lz4<' or 'bs<bits>-lz4<', got {encoding!r}")
    info = {"htype": "dimage_d-1.0", "shape": [frame.shape[1], frame.shape[0]], "type": frame.dtype.name,
            "encoding": encoding, "size": len(blob)}
    return info, blob


class DectrisZMQSource(Source):
    """Frames from a DECTRIS detector's ZeroMQ stream at ``endpoint`` (``tcp://host:port``).

    ``scan_shape`` (rows, cols) when given, else from the header's ``ntrigger`` x ``nimages``.
    Frames come in batches of up to ``batch``; ``timeout`` (s) bounds each wait (a silent stream
    is an error). The stream ends with the series' end message. Needs ``pyzmq`` (the ``live`` extra).
    """

    def __init__(self, endpoint: str = f"tcp://127.0.0.1:{DATA_PORT}", *, scan_shape=None, batch: int = 256,
                 timeout: float = 10.0) -> None:
        super().__init__()
        self.endpoint = endpoint
        self.scan_shape = None if scan_shape is None else tuple(int(v) for v in scan_shape)
        self.batch, self.timeout = int(batch), float(timeout)
        self._context = self._socket = None
        self._first = None

    def __repr__(self) -> str:
        return f"DectrisZMQSource({self.endpoint})"

    def _recv(self):
        if not self._socket.poll(int(self.timeout * 1000)):
            raise InputError(f"{self!r}: no message for {self.timeout:g} s")
        parts = self._socket.recv_multipart(copy=False)
        try:
            head = json.loads(bytes(parts[0].buffer))
        except ValueError:
            raise FileFormatError(f"{self!r}: a message whose first part is not JSON") from None
        return head, parts

    def open(self) -> None:
        if self._socket is not None:
            return
        try:
            import zmq
        except ImportError:
            raise MissingExtra("the DECTRIS stream needs pyzmq: pip install 'qora[live]'") from None
        self._context = zmq.Context()
        self._socket = self._context.socket(zmq.PULL)
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.setsockopt(zmq.RCVHWM, 10000)
        self._socket.connect(self.endpoint)
        head, parts = self._recv()
        while head.get("htype") != "dheader-1.0":  # images of a series already running: wait for the next
            if head.get("htype") not in ("dimage-1.0", "dseries_end-1.0"):
                raise FileFormatError(f"{self!r}: unexpected message {head.get('htype')!r} before the header")
            head, parts = self._recv()
        self.series = head.get("series")
        config = json.loads(bytes(parts[1].buffer)) if len(parts) > 1 else {}
        self.metadata = {"detector": {"name": config.get("description", "DECTRIS"), "config": config}}
        if self.scan_shape is None:
            ntrigger, nimages = int(config.get("ntrigger", 0) or 0), int(config.get("nimages", 0) or 0)
            if ntrigger < 2 or nimages < 2:
                raise InputError(f"{self!r}: the header's ntrigger {ntrigger} x nimages {nimages} is no scan shape; "
                                 "give it (scan_shape=(rows, cols), --scan-shape ROWS COLS)")
            self.scan_shape = (ntrigger, nimages)
        if "y_pixels_in_detector" in config:
            self.detector_shape = (int(config["y_pixels_in_detector"]), int(config["x_pixels_in_detector"]))
        else:  # no configuration part: the first image tells
            self._first = self._recv()
            if self._first[0].get("htype") == "dimage-1.0":
                cols, rows = json.loads(bytes(self._first[1][1].buffer))["shape"]
                self.detector_shape = (int(rows), int(cols))

    def __iter__(self):
        self.open()
        index, infos, blobs = [], [], []
        while True:
            head, parts = self._first if self._first is not None else self._recv()
            self._first = None
            kind = head.get("htype")
            if kind == "dseries_end-1.0":
                break
            if kind != "dimage-1.0":
                raise FileFormatError(f"{self!r}: unexpected message {kind!r} inside the series")
            if len(parts) < 3:
                raise FileFormatError(f"{self!r}: image message of {len(parts)} parts (expected 4)")
            index.append(int(head["frame"]))
            infos.append(json.loads(bytes(parts[1].buffer)))
            blobs.append(parts[2].buffer)
            if len(index) >= self.batch:
                yield Frames(np.array(index), decode_frames(infos, blobs))
                index, infos, blobs = [], [], []
        if index:
            yield Frames(np.array(index), decode_frames(infos, blobs))

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close(0)
            self._context.term()
            self._socket = self._context = None
