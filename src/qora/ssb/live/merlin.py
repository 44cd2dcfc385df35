"""The Quantum Detectors Merlin TCP data stream (the data port, 6342 by default).

Wire format (MerlinEM manual, "TCP/IP data"): every message is ``MPX,`` then its length as 10
decimal digits, then the message; the length counts the message and the comma before it (so
``length - 1`` bytes follow the 15-byte prefix). The first message of an acquisition is the
acquisition header, ``HDR,`` and the text of the ``.hdr`` file (``key:<tab>value`` lines, ending
with ``End``). Each frame is one message: its frame header (``MQ1,<number>,<header bytes>,...``,
the same header a ``.mib`` frame starts with, :func:`qora.ssb.readers.merlin_frame_header`)
then its pixels: big-endian U08/U16/U32 for the counter depths 1 and 6, 12, 24, or RAW (R64) of
those depths, single chip or quad (:func:`qora.ssb.readers.decode_raw`). Frames are numbered from
1 in an acquisition: frame n is scan index n - 1.
The detector rows are flipped as the ``.mib`` reader flips them, so a stream and the file of one
acquisition give the same arrays.
"""

from __future__ import annotations

import socket
import time

import numpy as np

from qora.io.errors import FileFormatError, InputError
from qora.ssb.live.frames import Frames, Source, bound_scan, check_scan_shape
from qora.ssb.readers import (MAX_FRAME_BYTES, MAX_FRAME_HEADER, MERLIN_DTYPES, check_raw, decode_raw, header_fields,
                               header_number, merlin_frame_header)

__all__ = ["MerlinTCPSource", "decode_frame", "decode_pixels", "frame_numbers", "encode_pixels", "encode_raw",
           "frame_header", "frame_message", "frame_messages", "number_messages", "acquisition_header", "message",
           "DATA_PORT"]

DATA_PORT = 6342
PREFIX = 15  # b"MPX," + 10 digits + b","
BATCH_BYTES = 8 << 20  # a receive batch's bytes at most
MAX_HEADER_BYTES = 1 << 20  # an acquisition header (HDR): the .hdr text, 2 KB from a Merlin
FORMATS = {1: "U08", 6: "U08", 12: "U16", 24: "U32"}  # counter depth -> normal frame pixel format


def message(body: bytes) -> bytes:
    """One message on the wire: ``MPX,<length>,`` and ``body`` (the length counts the comma)."""
    return b"MPX,%010d," % (len(body) + 1) + body


def acquisition_header(*, frames: int, frames_per_trigger: int, counter_depth: int = 12, raw: bool = False,
                       assembly: str = "1x1", trigger: str = "Rising Edge") -> bytes:
    """An acquisition header's message body (``HDR,`` and the ``.hdr`` text): a scan of
    ``frames`` frames, one trigger a scan row of ``frames_per_trigger`` (the simulator's)."""
    lines = ["HDR,\t", "Time and Date Stamp (day, mnth, yr, hr, min, s):\t01/01/2026 00:00:00",
             "Chip ID:\tW000_X00, - , - , -", "Chip Type (Medipix 3.0, Medipix 3.1, Medipix 3RX):\tMedipix 3RX",
             f"Assembly Size (NX1, 2X2):\t{assembly}", "Chip Mode  (SPM, CSM, CM, CSCM):\tSPM",
             f"Counter Depth (number):\t{counter_depth}", "Gain:\tSLGM", "Active Counters:\tAlternating",
             "Thresholds (keV):\t1.0E+1,5.1E+2,0.0E+0,0.0E+0,0.0E+0,0.0E+0,0.0E+0,0.0E+0",
             f"Frames in Acquisition (Number):\t{frames}", f"Frames per Trigger (Number):\t{frames_per_trigger}",
             f"Trigger Start (Positive, Negative, Internal):\t{trigger}",
             "Trigger Stop (Positive, Negative, Internal):\tInternal", "Sensor Bias (V):\t120 V",
             "Sensor Polarity (Positive, Negative):\tPositive", "Temperature (C):\tBoard Temp 0.0 Deg C",
             f"Raw:\t{'R64' if raw else 'MIB'}", "End\t"]
    return "\n".join(lines).encode("latin-1").ljust(2048, b" ")


def frame_header(number: int, rows: int, cols: int, *, counter_depth: int = 12, raw: bool = False,
                 assembly: str = "1x1") -> bytes:
    """A 384-byte MQ1 frame header (a single chip, or a quad: ``assembly`` "2x2"); the last fields
    (extended time stamp, exposure in ns, counter depth) are where the ``.mib`` readers look for them."""
    fmt = "R64" if raw else FORMATS[counter_depth]
    chips = 4 if assembly == "2x2" else 1
    if raw and assembly == "2x2":  # a RAW quad's header gives the chips side by side, as they are sent
        rows, cols = rows // 2, cols * 2
    head = (f"MQ1,{number:06d},00384,{chips:02d},{cols:04d},{rows:04d},{fmt},{assembly:>6},01,"
            "2026-01-01 00:00:00.000000,"
            f"1.000000,0,0,0,1.000000E+1,5.110000E+2,0.000000E+0,0.000000E+0,0.000000E+0,0.000000E+0,"
            f"0.000000E+0,0.000000E+0,3RX,MQ1A,2026-01-01T00:00:00.000000000Z,1000000ns,{counter_depth},")
    return head.encode("latin-1").ljust(384, b"\0")


def encode_raw(frames: np.ndarray, *, counter_depth: int = 1, assembly: str = "1x1") -> np.ndarray:
    """Frames (n, det_row, det_col) as :func:`qora.ssb.readers.decode_raw` returns them, as their
    RAW payloads (n, bytes) uint8: the inverse of that layout (the simulators' encoder)."""
    frames = np.asarray(frames)[:, ::-1]
    n, rows, cols = frames.shape
    if assembly == "2x2":
        h, w = rows // 2, cols // 2
        strips = np.empty((n, h, 4, w), frames.dtype)
        strips[:, :, 3], strips[:, :, 2] = frames[:, :h, :w], frames[:, :h, w:]
        strips[:, :, 1], strips[:, :, 0] = frames[:, h:, :w][:, ::-1, ::-1], frames[:, h:, w:][:, ::-1, ::-1]
        pixels = strips.reshape(n, -1)
    elif assembly == "1x1":
        pixels = frames.reshape(n, -1)
    else:
        raise InputError(f"RAW frames are written for a 1x1 or 2x2 assembly, not {assembly!r}")
    if counter_depth == 1:
        words = np.packbits(pixels.astype(bool), axis=-1, bitorder="little")
    elif counter_depth == 6:
        words = pixels.astype(np.uint8)
    elif counter_depth == 12:
        words = pixels.astype("<u2").view(np.uint8)
    elif counter_depth == 24:
        wide = pixels.astype(np.uint32)
        words = np.concatenate([(wide >> 12).astype("<u2"), (wide & 0xFFF).astype("<u2")], axis=1).view(np.uint8)
    else:
        raise InputError(f"RAW counter depth {counter_depth}: 1, 6, 12 or 24")
    return np.ascontiguousarray(words.reshape(n, -1, 8)[:, :, ::-1]).reshape(n, -1)


def encode_pixels(frames: np.ndarray, *, counter_depth: int = 12, raw: bool = False,
                  assembly: str = "1x1") -> np.ndarray:
    """Frames (n, det_row, det_col) as the reader returns them, as their pixel bytes on the wire
    (n, payload) uint8: rows flipped back, big-endian, or RAW (:func:`encode_raw`)."""
    if raw:
        return encode_raw(frames, counter_depth=counter_depth, assembly=assembly)
    stored = np.asarray(frames)[:, ::-1]
    n = stored.shape[0]
    return np.ascontiguousarray(stored, dtype=MERLIN_DTYPES[FORMATS[counter_depth]]).view(np.uint8).reshape(n, -1)


def frame_message(number: int, frame: np.ndarray, *, counter_depth: int = 12, raw: bool = False,
                  assembly: str = "1x1") -> bytes:
    """A frame's message body (or its record in a ``.mib`` file): its MQ1 header and pixels, of a
    frame (det_row, det_col) as the ``.mib`` reader returns it."""
    rows, cols = frame.shape
    return (frame_header(number, rows, cols, counter_depth=counter_depth, raw=raw, assembly=assembly)
            + encode_pixels(frame[None], counter_depth=counter_depth, raw=raw, assembly=assembly).tobytes())


def frame_messages(numbers, frames: np.ndarray, *, counter_depth: int = 12, raw: bool = False,
                   assembly: str = "1x1") -> np.ndarray:
    """Whole messages (``MPX,`` prefix, header, pixels) of many frames at once, (n, bytes) uint8:
    the header is a template whose six digits of frame number are written per row (numbers from
    1 to 999,999, the header's field width)."""
    numbers = np.asarray(numbers, np.int64)
    n, rows, cols = frames.shape
    pixels = encode_pixels(frames, counter_depth=counter_depth, raw=raw, assembly=assembly)
    head = np.frombuffer(frame_header(0, rows, cols, counter_depth=counter_depth, raw=raw, assembly=assembly), np.uint8)
    prefix = np.frombuffer(b"MPX,%010d," % (len(head) + pixels.shape[1] + 1), np.uint8)
    out = np.empty((n, PREFIX + len(head) + pixels.shape[1]), np.uint8)
    out[:, :PREFIX] = prefix
    out[:, PREFIX:PREFIX + len(head)] = head
    number_messages(out, numbers)
    out[:, PREFIX + len(head):] = pixels
    return out


def number_messages(messages: np.ndarray, numbers) -> None:
    """Write the frame ``numbers`` (1 to 999,999) into whole messages (n, bytes) uint8 in place:
    the six digits of each MQ1 header (a simulator serves a pool of encoded frames renumbered)."""
    numbers = np.asarray(numbers, np.int64)
    for j in range(6):
        messages[:, PREFIX + 4 + j] = 48 + (numbers // 10 ** (5 - j)) % 10


_POOL = None  # threads for the byte swap of large batches (NumPy's copy releases the GIL)


def _copy_parallel(out: np.ndarray, view: np.ndarray) -> None:
    """``out[...] = view`` (a cast: byte swap and row flip) split over the host's threads by frames."""
    from qora.backend.host import map_parts, num_threads

    global _POOL
    if _POOL is None or _POOL._max_workers < num_threads():  # kept: the frames arrive batch after batch
        from concurrent.futures import ThreadPoolExecutor

        _POOL = ThreadPoolExecutor(num_threads(), thread_name_prefix="qora-merlin-decode")
    map_parts(lambda lo, hi: np.copyto(out[lo:hi], view[lo:hi]), len(out), least=32, pool=_POOL)


def decode_pixels(pixels: np.ndarray, head: dict) -> np.ndarray:
    """Pixel bytes (n, payload) uint8 of frames with the header ``head`` as (n, det_row, det_col)
    in native byte order, rows flipped as the ``.mib`` reader flips them: one pass (the byte swap
    and the flip together), over the host's threads for a large batch."""
    rows, cols = head["rows"], head["cols"]
    if head["pixel_format"] == "R64":
        return decode_raw(pixels, rows, cols, counter_depth=head["counter_depth"], assembly=head["assembly"])
    big = pixels.view(MERLIN_DTYPES[head["pixel_format"]]).reshape(-1, rows, cols)[:, ::-1]
    out = np.empty(big.shape, big.dtype.newbyteorder("="))
    _copy_parallel(out, big)
    return out


def decode_frame(body, detector_shape, *, where: str = "Merlin", counter_depth: int | None = None):
    """``(index, frame)`` of a frame's bytes (its MQ1 header and pixels, from a message or a
    ``.mib`` file): the scan index (frame number - 1) and the pixels (det_row, det_col).
    ``counter_depth``: the acquisition header's, for RAW frames whose header does not say."""
    try:
        head = merlin_frame_header(bytes(body[:768]).decode("latin-1").split(","), counter_depth=counter_depth)
    except FileFormatError as error:
        raise FileFormatError(f"{where}: {error}") from None
    if head["header_size"] + head["payload"] > len(body):
        raise FileFormatError(f"{where}: frame {head['number']} declares {head['header_size']} bytes of header and "
                              f"{head['payload']} of pixels ({head['rows']}x{head['cols']} {head['pixel_format']}), "
                              f"its {'message' if where.startswith('Merlin') else 'record'} holds {len(body)} bytes")
    if (head["rows"], head["cols"]) != tuple(detector_shape):
        raise FileFormatError(f"{where}: frame {head['number']} is {head['rows']}x{head['cols']}, the stream's "
                              f"frames are {detector_shape[0]}x{detector_shape[1]}")
    pixels = np.frombuffer(body, np.uint8, head["payload"], head["header_size"])
    return head["number"] - 1, decode_pixels(pixels[None], head)[0]


def frame_numbers(messages: np.ndarray, template: np.ndarray):
    """The frame numbers of whole messages (n, bytes) uint8 laid side by side that have the layout
    of ``template`` (a message: the same prefix and header up to the six digits of the frame
    number), up to the first that differs; None when the first differs. One NumPy pass over the
    headers' first bytes, no per-frame Python."""
    same = ((messages[:, :PREFIX + 4] == template[:PREFIX + 4]).all(1)
            & (messages[:, PREFIX + 10] == template[PREFIX + 10]))
    if not same[0]:
        return None
    count = len(messages) if same.all() else int(np.argmin(same))
    digits = messages[:count, PREFIX + 4:PREFIX + 10].astype(np.int64) - 48
    if (digits < 0).any() or (digits > 9).any():
        return None
    return digits @ (10 ** np.arange(5, -1, -1))


class MerlinTCPSource(Source):
    """Frames from a Merlin's TCP data port (``host``, ``port``).

    The scan shape is ``scan_shape`` (rows, cols) when given, else the acquisition header's
    frames in acquisition over frames per trigger (one trigger a scan row). Frames come in batches
    of up to ``batch``; ``timeout`` (s) bounds each wait on the socket (a silent detector is an
    error, not a hang); a batch is what arrives within ``batch_wait_s`` (s) of its first frame, up
    to ``batch`` frames. The stream ends when the detector closes the connection or every frame of
    the scan has come.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = DATA_PORT, *, scan_shape=None, batch: int = 256,
                 timeout: float = 10.0, batch_wait_s: float = 0.005) -> None:
        super().__init__()
        self.batch_wait_s = float(batch_wait_s)
        self.address = (host, int(port))
        self.scan_shape = None if scan_shape is None else tuple(int(v) for v in scan_shape)
        self.batch, self.timeout = int(batch), float(timeout)
        self._sock = None
        self._buf = np.empty(1 << 22, np.uint8)  # received bytes not yet taken: _buf[:_end]
        self._end = 0
        # the most bytes a frame message may declare: any Merlin frame until the first has come, then
        # one of the stream's detector (its pixels, with room for a frame header)
        self._frame_limit = MAX_FRAME_HEADER + MAX_FRAME_BYTES

    def __repr__(self) -> str:
        return f"MerlinTCPSource(tcp://{self.address[0]}:{self.address[1]})"

    def connect(self) -> None:
        """Connected to the detector's data port, nothing read (the detector sees its client from here)."""
        if self._sock is not None:
            return
        try:
            self._sock = socket.create_connection(self.address, timeout=self.timeout)
        except OSError as error:
            raise InputError(f"cannot connect to the Merlin data port tcp://{self.address[0]}:{self.address[1]}: "
                             f"{error}") from None
        self._headless = True

    def open(self) -> None:
        if not self._header_to_read(self._sock is not None):
            return
        try:
            self._read_header()
        except BaseException:
            self.close()  # a refused or damaged header leaves no connection open
            raise

    def _read_header(self) -> None:
        """The acquisition header and the first frame (the detector's shape), from the connection."""
        body = self._message(MAX_HEADER_BYTES, "an acquisition header (HDR)")
        if body is None or not body.startswith(b"HDR,"):
            raise FileFormatError(f"{self!r}: the stream does not start with an acquisition header (HDR)")
        self.header = header_fields(body[4:].decode("latin-1"))
        self.metadata = {"detector": {"name": "Quantum Detectors Merlin", "header": self.header}}
        frames = header_number(self.header, "Frames in Acquisition (Number)", repr(self))
        per_trigger = header_number(self.header, "Frames per Trigger (Number)", repr(self))
        shape = (frames // per_trigger, per_trigger) if 1 < per_trigger < frames and frames % per_trigger == 0 else None
        check_scan_shape(repr(self), self.scan_shape, frames, shape=shape)
        if self.scan_shape is None:
            if not (1 < per_trigger < frames and frames % per_trigger == 0):
                raise InputError(f"{self!r}: the acquisition header gives {frames} frames, {per_trigger} per trigger: "
                                 "no scan shape; give it (scan_shape=(rows, cols), --scan-shape ROWS COLS)")
            self.scan_shape = bound_scan(repr(self), (frames // per_trigger, per_trigger))
        self._first = self._message()  # the first frame tells the detector's shape
        if self._first is None:
            raise FileFormatError(f"{self!r}: the stream ended after its acquisition header")
        self.counter_depth = header_number(self.header, "Counter Depth (number)", repr(self)) or None
        try:
            head = merlin_frame_header(self._first[:768].decode("latin-1").split(","),
                                       counter_depth=self.counter_depth)
        except FileFormatError as error:
            raise FileFormatError(f"{self!r}: the first frame: {error}") from None
        self.detector_shape = (head["rows"], head["cols"])
        self._frame_limit = MAX_FRAME_HEADER + head["payload"]
        if head["pixel_format"] == "R64":
            check_raw(self.header, head["assembly"], repr(self), counter_depth=head["counter_depth"])

    def _reserve(self, size: int) -> None:
        if size > len(self._buf):
            grown = np.empty(max(size, 2 * len(self._buf)), np.uint8)
            grown[:self._end] = self._buf[:self._end]
            self._buf = grown

    def _fill(self, need: int) -> bool:
        """Receive until the buffer holds ``need`` bytes (False when the connection closed first)."""
        self._reserve(need)
        view = memoryview(self._buf)
        while self._end < need:
            try:
                got = self._sock.recv_into(view[self._end:])
            except socket.timeout:
                raise InputError(f"{self!r}: no data for {self.timeout:g} s") from None
            if not got:
                return False
            self._end += got
        return True

    def _take(self, n: int) -> bytes:
        out = self._buf[:n].tobytes()
        self._consume(n)
        return out

    def _consume(self, n: int) -> None:
        """Drop the first ``n`` bytes of the buffer (the rest, a part of one message, moves to the front)."""
        self._buf[:self._end - n] = self._buf[n:self._end].copy()
        self._end -= n

    def _message(self, limit: int | None = None, what: str = "a frame"):
        """The next message's body, or None when the connection has closed. ``limit``: the most
        bytes its body may have (what the peer declares is checked before anything is received
        or allocated for it); default: a frame of the stream's detector, once the first frame has
        told its size, else :data:`MAX_FRAME_HEADER` + :data:`MAX_FRAME_BYTES`."""
        if not self._fill(PREFIX):
            if self._end:
                raise FileFormatError(f"{self!r}: the connection closed inside a message")
            return None
        prefix = self._buf[:PREFIX].tobytes()
        if prefix[:4] != b"MPX," or prefix[14:15] != b"," or not prefix[4:14].isdigit():
            raise FileFormatError(f"{self!r}: lost the message framing (expected MPX,<10 digits>, got {prefix!r})")
        length = int(prefix[4:14])
        if limit is None:
            limit = self._frame_limit
        if not 2 <= length <= limit + 1:
            raise FileFormatError(f"{self!r}: a message declares {length - 1} bytes, {what} is 1 to {limit} bytes "
                                  "(a damaged stream, or not a Merlin's): the stream is ended")
        size = PREFIX + length - 1
        if not self._fill(size):
            raise FileFormatError(f"{self!r}: the connection closed inside a message")
        return self._take(size)[PREFIX:]

    def _decode(self, body: bytes):
        return decode_frame(body, self.detector_shape, where=repr(self), counter_depth=self.counter_depth)

    def _whole_frames(self, template: np.ndarray, head: dict):
        """The frames at the start of the buffer that have the first frame's layout (the same
        prefix and header up to its frame number): ``(numbers, frames)``, taken from the buffer;
        None when the next message differs (it is read by the general path)."""
        size = len(template)
        count = self._end // size
        if not count:
            return None
        rows = self._buf[:count * size].reshape(count, size)
        numbers = frame_numbers(rows, template)
        if numbers is None:
            return None
        start = PREFIX + head["header_size"]
        frames = decode_pixels(rows[:len(numbers), start:start + head["payload"]], head)  # a copy: the buffer is reused
        self._consume(len(numbers) * size)
        return numbers, frames

    def _drain(self, want: int) -> None:
        """Receive up to ``want`` bytes into the buffer: what has arrived, and what comes within
        ``batch_wait_s`` more (a batch's latency bound). Whole batches, not what one ``recv``
        happens to return, are parsed at once: at a high rate the per-batch Python (the parse, the
        hand-off, G's placement) is then paid once per ``batch`` frames."""
        self._reserve(want)
        view = memoryview(self._buf)
        deadline = time.perf_counter() + self.batch_wait_s
        try:
            while self._end < want:
                left = deadline - time.perf_counter()
                if left > 0:
                    self._sock.settimeout(left)
                else:
                    self._sock.setblocking(False)
                got = self._sock.recv_into(view[self._end:want])
                if not got:
                    break
                self._end += got
        except (BlockingIOError, socket.timeout):  # nothing more within the bound: parse what came
            pass
        finally:
            self._sock.settimeout(self.timeout)

    def __iter__(self):
        self.open()
        total = self.scan_shape[0] * self.scan_shape[1]
        body, self._first = self._first, None
        if body is None:
            return
        head = merlin_frame_header(body[:768].decode("latin-1").split(","), counter_depth=self.counter_depth)
        template = np.frombuffer(b"MPX,%010d," % (len(body) + 1) + body, np.uint8)
        size = len(template)
        i, frame = self._decode(body)
        yield Frames(np.array([i]), frame[None])
        seen, last = 1, i
        # the scan ends with its last frame (what is still missing was dropped) or when the detector
        # closes the connection
        while last < total - 1 or self._end:
            # a batch of at most ~8 MB: received, parsed and decoded while it is still in the cache
            # (a 75 MB buffer of 1,024 192^2 frames cost more CPU a frame than small ones)
            want = min(self.batch, max(1, BATCH_BYTES // size), max(1, total - seen)) * size
            if not self._fill(min(want, size)) and self._end == 0:
                break
            self._drain(want)
            fast = self._whole_frames(template, head)
            if fast is not None:
                numbers, frames = fast
            else:  # another layout: one message by the general path
                body = self._message()
                if body is None:
                    break
                if not body.startswith(b"MQ1,"):
                    raise FileFormatError(f"{self!r}: a message that is not a frame ({body[:8]!r}) inside the "
                                          "acquisition")
                number, frame = self._decode(body)
                numbers, frames = np.array([number + 1]), frame[None]
            seen += len(numbers)
            last = max(last, int(numbers.max()) - 1)
            yield Frames(numbers - 1, frames)

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        self._end = 0  # what was received on the closed connection is not part of another
