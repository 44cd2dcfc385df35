"""The DECTRIS detector stream over ZeroMQ, both versions: the detector PUSHes, Qora PULLs.

**Stream v1** (SIMPLON API ``stream`` interface, port 9999): a series is a global header, image
messages and an end message, each a multipart ZeroMQ message whose first part is JSON with its
``htype``:

- ``dheader-1.0`` (``series``, ``header_detail``): with detail "basic" or "all" a second part holds
  the detector configuration (JSON: ``x_pixels_in_detector``, ``y_pixels_in_detector``,
  ``nimages``, ``ntrigger``, ``bit_depth_image``, ...); "all" adds flat-field, pixel-mask and
  count-rate parts, skipped here.
- ``dimage-1.0`` (``series``, ``frame`` from 0), then ``dimage_d-1.0`` (``shape`` [x, y],
  ``type``, ``encoding``: ``<`` raw little-endian, ``lz4<`` an LZ4 block, ``bs8-lz4<``,
  ``bs16-lz4<``, ``bs32-lz4<`` bitshuffle-LZ4 with its 12-byte header), the frame's bytes, and
  ``dconfig-1.0`` (its times).
- ``dseries_end-1.0`` (``series``).

**Stream v2** (``stream2``, port 31001): each message is one ZeroMQ part, a CBOR map (behind the
self-described tag 55799) whose ``type`` is ``start`` (``series_id``, ``series_unique_id``,
``image_size_x``, ``image_size_y``, ``number_of_images``, ``channels``, ``user_data``, ...),
``image`` (``series_id``, ``image_id`` from 0, ``data``: a map from channel name to the frame) or
``end``. A frame is a multi-dimensional array (tag 40: [[rows, cols], typed array]) whose typed
array (RFC 8746 tags 64-87: the element type) holds the pixels, or a DECTRIS compressed byte
string (tag 56500: ["bslz4", element size, bytes] or ["lz4", 0, bytes], both in their HDF5
filters' framing). An image message is read by one compiled walk (:mod:`qora.ssb.live.stream2`),
every other message (and any layout the walk does not know) by :mod:`qora.ssb.live.cbor`; the
first channel is used (the ``start`` message's first, i.e. ``threshold_1``).

The version is told by the first message (JSON starts with ``{``; CBOR with its tag or a map), or
given (``stream``). Frame n is scan index n (row-major). The scan shape is the caller's, else
from the header: v1 ``ntrigger`` rows of ``nimages`` frames (one trigger a scan row, as the
simulator sends); v2 the ``start`` message's ``user_data`` ``{"scan_shape": [rows, cols]}`` (the
simulator's; a microscope's control software can set the detector's user data the same way),
else its ``ntrigger`` and ``nimages`` where the detector sends them.
"""

from __future__ import annotations

import json
import re
import struct

import numpy as np

from qora.io.errors import FileFormatError, InputError, MissingExtra
from qora.ssb.live import bslz4, cbor
from qora.ssb.live.bslz4_batch import CompressedFrames
from qora.ssb.live.frames import (Frames, Source, bound_detector, bound_scan, check_declared_frames,
                                  check_header_scan)

__all__ = ["DectrisZMQSource", "receive_parts", "v1_image", "decode_frame", "decode_frames", "encode_frame", "decode_stream2_frames",
           "encode_stream2_frame", "stream2_message", "DATA_PORT", "STREAM2_PORT"]

DATA_PORT = 9999
STREAM2_PORT = 31001


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


# -- stream v2 ------------------------------------------------------------------------------------
def _hdf5_lz4(blob, nbytes: int) -> np.ndarray:
    """The HDF5 LZ4 filter's framing (a big-endian uint64 of the bytes in all, a uint32 block
    size, then each block as its big-endian uint32 compressed size and an LZ4 block, or the block
    as it is when that size equals the block's): ``nbytes`` bytes."""
    from qora.ssb.live.bslz4_numba import lz4_block

    src = np.frombuffer(blob, np.uint8)
    if len(src) < 12:
        raise FileFormatError(f"an LZ4 (HDF5 framing) frame of {len(src)} bytes: shorter than its header")
    total, block = struct.unpack(">QI", src[:12].tobytes())
    if total != nbytes or block == 0:
        raise FileFormatError(f"an LZ4 (HDF5 framing) frame of {total} bytes in blocks of {block}: expected {nbytes}")
    out = np.empty(total, np.uint8)
    pos, done = 12, 0
    while done < total:
        size = min(block, total - done)
        if pos + 4 > len(src):
            raise FileFormatError("an LZ4 (HDF5 framing) frame cut short")
        (packed,) = struct.unpack(">I", src[pos:pos + 4].tobytes())
        pos += 4
        if pos + packed > len(src):
            raise FileFormatError("an LZ4 (HDF5 framing) frame cut short")
        if packed == size:
            out[done:done + size] = src[pos:pos + size]
        elif lz4_block(src, pos, pos + packed, out, done, size) != size:
            raise FileFormatError("an LZ4 (HDF5 framing) frame with a malformed block")
        pos, done = pos + packed, done + size
    return out


def _stream2_frame(array) -> tuple[np.dtype, tuple, object]:
    """``(dtype, shape, payload)`` of a frame of an image message's ``data`` (payload: the raw
    bytes or a :class:`cbor.Compressed`)."""
    if not isinstance(array, cbor.NDArray) or not isinstance(array.content, cbor.TypedArray):
        raise FileFormatError(f"a DECTRIS stream2 frame that is not a multi-dimensional typed array: "
                              f"{type(array).__name__}")
    if len(array.shape) != 2 or array.order != "C":
        raise FileFormatError(f"a DECTRIS stream2 frame of shape {array.shape} ({array.order} order): expected a "
                              "row-major 2D array")
    return array.content.dtype, array.shape, array.content.data


def _stream2_pixels(dtype: np.dtype, shape: tuple, payload) -> np.ndarray:
    count = shape[0] * shape[1]
    if isinstance(payload, cbor.Compressed):
        if payload.algorithm == "bslz4":
            if payload.element_size != dtype.itemsize:
                raise FileFormatError(f"a bslz4 frame of element size {payload.element_size} holding {dtype}")
            flat = bslz4.decompress(bytes(payload.data), dtype, count)
        elif payload.algorithm == "lz4":
            flat = _hdf5_lz4(payload.data, count * dtype.itemsize).view(dtype)
        else:
            raise FileFormatError(f"DECTRIS compression {payload.algorithm!r} is not supported (bslz4, lz4)")
    else:
        if len(payload) != count * dtype.itemsize:
            raise FileFormatError(f"a DECTRIS stream2 frame of {len(payload)} bytes: {shape} {dtype} needs "
                                  f"{count * dtype.itemsize}")
        flat = np.frombuffer(payload, dtype, count)
    return flat.reshape(shape).astype(dtype.newbyteorder("="), copy=False)


def decode_stream2_frames(arrays: list) -> np.ndarray:
    """Frames (n, rows, cols) native-endian of a batch of stream2 frames (each the
    multi-dimensional array of an image message's channel): bitshuffle-LZ4 frames of one shape and
    type are decoded together in parallel (:mod:`qora.ssb.live.bslz4_numba`), others one by one."""
    return _decode_parts([_stream2_frame(a) for a in arrays])


def _scanned_part(fields) -> tuple:
    """``(dtype, shape, payload)`` of a frame found by :func:`qora.ssb.live.stream2.scan_image`."""
    payload = fields.payload
    if fields.algorithm is not None:
        payload = cbor.Compressed(fields.algorithm, fields.element_size, payload)
    return cbor.typed_array_dtype(fields.tag), fields.shape, payload


def _decode_parts(parts: list) -> np.ndarray:
    dtype, shape, payload = parts[0]
    batch = (len(parts) > 1 and all(d == dtype and s == shape and isinstance(p, cbor.Compressed)
                                    and p.algorithm == "bslz4" and p.element_size == dtype.itemsize
                                    for d, s, p in parts))
    if batch:
        from qora.ssb.live.bslz4_numba import decode_batch

        try:
            flat = decode_batch([p.data for _, _, p in parts], dtype, shape[0] * shape[1])
        except ValueError as error:
            raise FileFormatError(f"a DECTRIS stream2 image: {error}") from None
        return flat.reshape((len(parts),) + shape).astype(dtype.newbyteorder("="), copy=False)
    return np.stack([_stream2_pixels(*p) for p in parts])


def _compressed_parts(index: list, parts: list) -> CompressedFrames | None:
    """A stream2 batch kept compressed, when every frame is bitshuffle-LZ4 of one shape and type
    (else None: the batch is decoded on the host)."""
    dtype, shape, payload = parts[0]
    if not all(d == dtype and s == shape and isinstance(p, cbor.Compressed) and p.algorithm == "bslz4"
               and p.element_size == dtype.itemsize for d, s, p in parts) or dtype.kind != "u":
        return None
    return CompressedFrames(np.array(index), [p.data for _, _, p in parts], dtype, shape)


def _compressed_v1(index: list, infos: list, blobs: list) -> CompressedFrames | None:
    """A v1 batch kept compressed, when every frame is bitshuffle-LZ4 of one shape and type."""
    first = infos[0]
    encoding = str(first.get("encoding", ""))
    if not (encoding.startswith("bs") and encoding.endswith("-lz4<")) or any(
            i.get("shape") != first.get("shape") or i.get("type") != first.get("type")
            or i.get("encoding") != encoding for i in infos):
        return None
    try:
        cols, rows = (int(v) for v in first["shape"])
        dtype = np.dtype(first["type"])
    except (KeyError, TypeError, ValueError):
        return None  # the host's decoder says what is wrong
    if dtype.kind != "u" or int(encoding[2:-5]) != 8 * dtype.itemsize:
        return None
    return CompressedFrames(np.array(index), list(blobs), dtype, (rows, cols))


def encode_stream2_frame(frame: np.ndarray, compression: str = "bslz4") -> cbor.NDArray:
    """A frame as stream2 carries it (the simulator's encoder): ``compression`` "bslz4", "lz4"
    (HDF5 framing, one block) or "none"."""
    frame = np.ascontiguousarray(frame)
    little = frame.astype(frame.dtype.newbyteorder("<"))
    if compression == "bslz4":
        data = cbor.Compressed("bslz4", little.dtype.itemsize, bslz4.compress(little))
    elif compression == "lz4":
        raw = little.tobytes()
        packed = bslz4.lz4_codec().encode(raw)[4:]
        data = cbor.Compressed("lz4", 0, struct.pack(">QI", len(raw), len(raw)) + struct.pack(">I", len(packed))
                               + packed)
    elif compression == "none":
        data = little.tobytes()
    else:
        raise InputError(f"stream2 compression must be 'bslz4', 'lz4' or 'none', got {compression!r}")
    return cbor.NDArray(frame.shape, cbor.TypedArray(little.dtype, data))


def stream2_message(kind: str, series_id: int, **fields) -> bytes:
    """A stream2 message (``kind`` "start", "image", "end") as CBOR."""
    return cbor.dumps({"type": kind, "series_id": int(series_id), "series_unique_id": f"qora-{series_id}", **fields})


_V1_IMAGE = re.compile(rb'\A\s*\{\s*"htype"\s*:\s*"dimage-1\.0"\s*,')
_V1_FRAME = re.compile(rb'[{,]\s*"frame"\s*:\s*(\d+)\s*[,}]')
_V1_SIZE = re.compile(rb'[{,]\s*"size"\s*:\s*\d+\s*(?=[,}])')


def v1_image(parts, known: dict):
    """``(frame, info)`` of a stream v1 image message read without parsing its JSON, or None for
    any other message (or a layout this does not know: the caller parses it). The first part must
    begin with its ``htype`` "dimage-1.0" (as the DCU writes it) and hold an integer ``frame``;
    the ``dimage_d-1.0`` part (shape, type, encoding, and the frame's ``size``, the one field that
    changes from frame to frame) is parsed once per layout: ``known`` keeps it by its bytes with the
    size left out. Two ``json.loads`` a frame cost 3 to 4 times this (docs/ssb-performance.md)."""
    if len(parts) < 3:
        return None
    head = parts[0].buffer
    if not _V1_IMAGE.match(head):
        return None
    frame = _V1_FRAME.search(head)
    if frame is None:
        return None
    detail = parts[1].buffer
    key = _V1_SIZE.sub(b"", detail)
    info = known.get(key)
    if info is None:
        try:
            info = json.loads(bytes(detail))
        except ValueError:
            return None
        if not isinstance(info, dict) or info.get("htype") != "dimage_d-1.0":
            return None
        if len(known) < 64:
            known[key] = info
    return int(frame.group(1)), info


def receive_parts(socket, timeout: float):
    """The next message's parts on a pyzmq ``socket`` (zmq frames, not copied), or None after
    ``timeout`` s of silence. A message already queued is taken without a poll, part by part while
    the frame says more follow: the poll and ``recv_multipart`` cost 3 to 4 times the receive of a
    one-part stream2 message (docs/ssb-performance.md, "Live: the frames decoded on the device")."""
    import zmq

    try:
        first = socket.recv(zmq.NOBLOCK, copy=False)
    except zmq.Again:
        if not socket.poll(int(timeout * 1000)):
            return None
        first = socket.recv(copy=False)
    parts = [first]
    while parts[-1].more:  # the parts of one message arrive together
        parts.append(socket.recv(copy=False))
    return parts


# what a user should check when a stream stays silent (said with every such error)
SILENT_HINT = ("; is the detector armed and sending to this address (or `qora ssb serve` running), and is "
               "the port the detector's stream port? --timeout waits longer")


class DectrisZMQSource(Source):
    """Frames from a DECTRIS detector's ZeroMQ stream at ``endpoint`` (``tcp://host:port``), stream
    v1 (JSON) or v2 (CBOR): ``stream`` "v1", "v2", or "auto" (told by the first message).

    ``scan_shape`` (rows, cols) when given, else from the header (the module's text). Frames come
    in batches of up to ``batch``; ``timeout`` (s) bounds each wait (a silent stream is an error).
    The stream ends with the series' end message. Needs ``pyzmq`` (the ``live`` extra).

    ``decode``: where bitshuffle-LZ4 frames are decoded. "host" (the batch decoded here, in
    parallel Numba threads: the source yields :class:`Frames`); "device" (the receiver only parses
    the messages: a batch of bitshuffle-LZ4 frames of one shape and type is yielded as
    :class:`~qora.ssb.live.bslz4_batch.CompressedFrames`, its blobs as received, for
    :class:`~qora.ssb.live.LiveG` to decode on the GPU; any other encoding is decoded here);
    "auto" (default): "device" when :func:`~qora.ssb.live.run_live` runs on CUDA, else "host"
    (run_live settles it; iterated directly, "auto" yields decoded frames).
    """

    def __init__(self, endpoint: str = f"tcp://127.0.0.1:{DATA_PORT}", *, scan_shape=None, batch: int = 256,
                 timeout: float = 10.0, stream: str = "auto", decode: str = "auto") -> None:
        super().__init__()
        if stream not in ("auto", "v1", "v2"):
            raise InputError(f"stream must be 'auto', 'v1' or 'v2', got {stream!r}")
        if decode not in ("auto", "device", "host"):
            raise InputError(f"decode must be 'auto', 'device' or 'host', got {decode!r}")
        self.decode = decode
        self.endpoint = endpoint
        self.scan_shape = None if scan_shape is None else tuple(int(v) for v in scan_shape)
        self.batch, self.timeout = int(batch), float(timeout)
        self.stream = stream
        self._context = self._socket = None
        self._first = None

    def __repr__(self) -> str:
        return f"DectrisZMQSource({self.endpoint})"

    def _parts(self):
        parts = receive_parts(self._socket, self.timeout)
        if parts is None:
            raise InputError(f"{self!r}: no message for {self.timeout:g} s{SILENT_HINT}")
        return parts

    def _recv(self):
        """The next message: ``(head, parts)``; head the first part as a dict (v1 JSON, v2 CBOR)."""
        parts = self._parts()
        return self._decode(parts), parts

    def _decode(self, parts) -> dict:
        """The first part of a message as a dict (v1 JSON, v2 CBOR)."""
        first = parts[0].buffer
        if self.stream == "auto":
            self.stream = "v1" if bytes(first[:1]) == b"{" else "v2"
        try:
            head = json.loads(bytes(first)) if self.stream == "v1" else cbor.loads(first)
        except (ValueError, FileFormatError) as error:
            raise FileFormatError(f"{self!r}: a message that is not {'JSON' if self.stream == 'v1' else 'CBOR'} "
                                  f"(stream {self.stream}): {error}") from None
        if not isinstance(head, dict):
            raise FileFormatError(f"{self!r}: a message that is not a map ({type(head).__name__})")
        return head

    def connect(self) -> None:
        """The PULL socket connected, no message read: a stream that waits for its receivers (a detector's, a
        simulator's) sees this one from here, while :func:`qora.ssb.live.run_live` prepares the device."""
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
        self._headless = True

    def open(self) -> None:
        if not self._header_to_read(self._socket is not None):
            return
        head, parts = self._recv()
        if self.stream == "v2":
            self._open_v2(head)
        else:
            self._open_v1(head, parts)

    def _open_v1(self, head: dict, parts) -> None:
        while head.get("htype") != "dheader-1.0":  # images of a series already running: wait for the next
            if head.get("htype") not in ("dimage-1.0", "dseries_end-1.0"):
                raise FileFormatError(f"{self!r}: unexpected message {head.get('htype')!r} before the header")
            head, parts = self._recv()
        self.series = head.get("series")
        config = json.loads(bytes(parts[1].buffer)) if len(parts) > 1 else {}
        self.metadata = {"detector": {"name": config.get("description", "DECTRIS"), "config": config, "stream": "v1"}}
        check_header_scan(self, self.scan_shape, config.get("ntrigger"), config.get("nimages"))
        if self.scan_shape is None:
            self.scan_shape = self._scan_from(config.get("ntrigger"), config.get("nimages"))
        if "y_pixels_in_detector" in config:
            self.detector_shape = bound_detector(self, config.get("y_pixels_in_detector"),
                                                  config.get("x_pixels_in_detector"))
        else:  # no configuration part: the first image tells
            self._first = self._recv()
            if self._first[0].get("htype") == "dimage-1.0":
                cols, rows = json.loads(bytes(self._first[1][1].buffer))["shape"]
                self.detector_shape = bound_detector(self, rows, cols)

    def _scan_from(self, ntrigger, nimages) -> tuple:
        ntrigger, nimages = int(ntrigger or 0), int(nimages or 0)
        if ntrigger < 2 or nimages < 2:
            raise InputError(f"{self!r}: the header's ntrigger {ntrigger} x nimages {nimages} is no scan shape; "
                             "give it (scan_shape=(rows, cols), --scan-shape ROWS COLS)")
        return bound_scan(repr(self), (ntrigger, nimages), "stream's header")

    def _open_v2(self, head: dict) -> None:
        while head.get("type") != "start":  # images of a series already running: wait for the next
            if head.get("type") not in ("image", "end"):
                raise FileFormatError(f"{self!r}: unexpected stream2 message {head.get('type')!r} before the start")
            head, _ = self._recv()
        self.series = head.get("series_id")
        config = {k: v for k, v in head.items() if not isinstance(v, (cbor.NDArray, cbor.TypedArray, memoryview))}
        self.metadata = {"detector": {"name": head.get("detector_description", "DECTRIS"), "config": config,
                                      "stream": "v2"}}
        channels = head.get("channels") or []
        self.channel = channels[0] if channels else None
        self._channel_bytes = None if self.channel is None else np.frombuffer(str(self.channel).encode(), np.uint8)
        user = head.get("user_data")
        shape = user.get("scan_shape") if isinstance(user, dict) else None
        check_header_scan(self, self.scan_shape, head.get("ntrigger"), head.get("nimages"),
                          shape if isinstance(shape, (list, tuple)) and len(shape) == 2 else None)
        if self.scan_shape is None:
            if shape is not None:
                try:
                    shape = tuple(int(v) for v in shape)
                except (TypeError, ValueError):
                    shape = ()
                if len(shape) != 2:
                    raise FileFormatError(f"{self!r}: the start message's user_data scan_shape "
                                          f"{user.get('scan_shape')!r} is not (rows, cols)")
                self.scan_shape = bound_scan(repr(self), shape, "start message's user_data")
            else:
                self.scan_shape = self._scan_from(head.get("ntrigger"), head.get("nimages"))
        if "image_size_y" not in head or "image_size_x" not in head:
            raise FileFormatError(f"{self!r}: a stream2 start message without image_size_x / image_size_y")
        self.detector_shape = bound_detector(self, head["image_size_y"], head["image_size_x"])

    def __iter__(self):
        self.open()
        yield from (self._iter_v2() if self.stream == "v2" else self._iter_v1())

    def _iter_v1(self):
        index, infos, blobs = [], [], []
        known: dict = {}  # image parts seen, their size left out, parsed
        while True:
            if self._first is None:
                parts = self._parts()
                fast = v1_image(parts, known)
                if fast is not None:  # an image message, read without json.loads
                    index.append(fast[0])
                    infos.append(fast[1])
                    blobs.append(parts[2].buffer)
                    if len(index) >= self.batch:
                        yield self._batch_v1(index, infos, blobs)
                        index, infos, blobs = [], [], []
                    continue
                head = self._decode(parts)
            else:
                head, parts = self._first
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
                yield self._batch_v1(index, infos, blobs)
                index, infos, blobs = [], [], []
        if index:
            yield self._batch_v1(index, infos, blobs)

    def _batch_v1(self, index, infos, blobs):
        declared = set()
        for info in infos:
            try:
                cols, rows = (int(v) for v in info["shape"])
                declared.add(((rows, cols), np.dtype(info["type"])))
            except (KeyError, TypeError, ValueError) as error:
                raise FileFormatError(f"{self!r}: an image part without a valid shape or type: {str(info)[:200]} "
                                      f"({error})") from None
        check_declared_frames(self, declared, self.detector_shape)
        if self.decode == "device":
            compressed = _compressed_v1(index, infos, blobs)
            if compressed is not None:
                return compressed
        return Frames(np.array(index), decode_frames(infos, blobs))

    def _iter_v2(self):
        from qora.ssb.live.stream2 import scan_image

        index, parts, scratch = [], [], np.empty(11, np.int64)
        while True:
            raw = self._parts()
            # an image message is read by one compiled walk; any other message, or a layout the walk
            # does not know, by the CBOR decoder
            fields = None if self.channel is None else scan_image(raw[0].buffer, self._channel_bytes, scratch)
            if fields is not None:
                if fields.series_id != self.series:
                    raise FileFormatError(f"{self!r}: an image of series {fields.series_id} inside series "
                                          f"{self.series}")
                index.append(fields.image_id)
                parts.append(_scanned_part(fields))
                if len(index) >= self.batch:
                    yield self._batch_v2(index, parts)
                    index, parts = [], []
                continue
            head = self._decode(raw)
            kind = head.get("type")
            if kind == "end":
                break
            if kind != "image":
                raise FileFormatError(f"{self!r}: unexpected stream2 message {kind!r} inside the series")
            if head.get("series_id") != self.series:
                raise FileFormatError(f"{self!r}: an image of series {head.get('series_id')} inside series "
                                      f"{self.series}")
            data = head.get("data")
            if not isinstance(data, dict) or not data:
                raise FileFormatError(f"{self!r}: a stream2 image message without data")
            if self.channel is None:
                self.channel = next(iter(data))
                self._channel_bytes = np.frombuffer(str(self.channel).encode(), np.uint8)
            if self.channel not in data:
                raise FileFormatError(f"{self!r}: a stream2 image without the channel {self.channel!r} "
                                      f"(it has {sorted(data)})")
            index.append(int(head["image_id"]))
            parts.append(_stream2_frame(data[self.channel]))
            if len(index) >= self.batch:
                yield self._batch_v2(index, parts)
                index, parts = [], []
        if index:
            yield self._batch_v2(index, parts)

    def _batch_v2(self, index, parts):
        check_declared_frames(self, {(tuple(int(v) for v in shape), np.dtype(dtype)) for dtype, shape, _ in parts},
                              self.detector_shape)
        if self.decode == "device":
            compressed = _compressed_parts(index, parts)
            if compressed is not None:
                return compressed
        return Frames(np.array(index), _decode_parts(parts))

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close(0)
            self._context.term()
            self._socket = self._context = None

