"""The Quantum Detectors Merlin TCP data stream (the data port, 6342 by default).

Wire format (MerlinEM manual, "TCP/IP data"): every message is ``MPX,`` then its length as 10
decimal digits, then the message; the length counts the message and the comma before it (so
``length - 1`` bytes follow the 15-byte prefix). The first message of an acquisition is the
acquisition header, ``HDR,`` and the text of the ``.hdr`` file (``key:<tab>value`` lines, ending
with ``End``). Each frame is one message: its frame header (``MQ1,<number>,<header bytes>,...``,
the same header a ``.mib`` frame starts with, :func:`qora.ssb.readers.merlin_frame_header`)
then its pixels: big-endian U08/U16/U32 for the counter depths 1 and 6, 12, 24, or RAW 1-bit
(R64, single chip). Frames are numbered from 1 in an acquisition: frame n is scan index n - 1.
The detector rows are flipped as the ``.mib`` reader flips them, so a stream and the file of one
acquisition give the same arrays.
"""

from __future__ import annotations

import socket

import numpy as np

from qora.io.errors import FileFormatError, InputError
from qora.ssb.live.frames import Frames, Source
from qora.ssb.readers import (MERLIN_DTYPES, check_raw, decode_raw_1bit, header_fields, merlin_frame_header)

__all__ = ["MerlinTCPSource", "decode_frame", "acquisition_header", "frame_message", "message", "DATA_PORT"]

DATA_PORT = 6342
PREFIX = 15  # b"MPX," + 10 digits + b","
FORMATS = {1: "U08", 6: "U08", 12: "U16", 24: "U32"}  # counter depth -> normal frame pixel format


def message(body: bytes) -> bytes:
    """One message on the wire: ``MPX,<length>,`` and ``body`` (the length counts the comma)."""
    return b"MPX,%010d," % (len(body) + 1) + body


def acquisition_header(*, frames: int, frames_per_trigger: int, counter_depth: int = 12, raw: bool = False,
                       assembly: str = "1x1", trigger: str = "Rising Edge") -> bytes:
    """An acquisition header's message body (``HDR,`` and the ``.hdr`` text): a scan of
    ``frames`` frames, one trigger a scan row of ``frames_per_trigger`` (the simulator's)."""
    lines = ["HDR,\t", "Time and Date Stamp (day, mnth, yr, hr, min, s):\t01/01/2026 00:00:00",
             f"Chip ID:\tW000_X00, - , - , -", "Chip Type (Medipix 3.0, Medipix 3.1, Medipix 3RX):\tMedipix 3RX",
             f"Assembly Size (NX1, 2X2):\t{assembly}", "Chip Mode  (SPM, CSM, CM, CSCM):\tSPM",
             f"Counter Depth (number):\t{counter_depth}", "Gain:\tSLGM", "Active Counters:\tAlternating",
             "Thresholds (keV):\t1.0E+1,5.1E+2,0.0E+0,0.0E+0,0.0E+0,0.0E+0,0.0E+0,0.0E+0",
             f"Frames in Acquisition (Number):\t{frames}", f"Frames per Trigger (Number):\t{frames_per_trigger}",
             f"Trigger Start (Positive, Negative, Internal):\t{trigger}",
             "Trigger Stop (Positive, Negative, Internal):\tInternal", "Sensor Bias (V):\t120 V",
             "Sensor Polarity (Positive, Negative):\tPositive", "Temperature (C):\tBoard Temp 0.0 Deg C",
             f"Raw:\t{'R64' if raw else 'MIB'}", "End\t"]
    return "\n".join(lines).encode("latin-1").ljust(2048, b" ")


def frame_message(number: int, frame: np.ndarray, *, counter_depth: int = 12, raw: bool = False) -> bytes:
    """A frame's message body: its MQ1 header (384 bytes, single chip) and pixels, of a frame
    (det_row, det_col) as the ``.mib`` reader returns it (the rows are flipped back for the wire)."""
    rows, cols = frame.shape
    stored = np.asarray(frame)[::-1]
    if raw:
        if counter_depth != 1:
            raise InputError("RAW frames are written here for counter depth 1 only")
        bits = np.packbits(stored.reshape(-1, 8, 8).astype(bool), axis=-1, bitorder="little")  # (words, 8)
        pixels, fmt = bits[:, ::-1].tobytes(), "R64"
    else:
        fmt = FORMATS[counter_depth]
        pixels, fmt = stored.astype(MERLIN_DTYPES[fmt]).tobytes(), fmt
    # the fields of a single chip's header; the last ones (extended time stamp, exposure in ns,
    # counter depth) are where the .mib readers look for them
    head = (f"MQ1,{number:06d},00384,01,{cols:04d},{rows:04d},{fmt},   1x1,01,2026-01-01 00:00:00.000000,"
            f"1.000000,0,0,0,1.000000E+1,5.110000E+2,0.000000E+0,0.000000E+0,0.000000E+0,0.000000E+0,"
            f"0.000000E+0,0.000000E+0,3RX,MQ1A,2026-01-01T00:00:00.000000000Z,1000000ns,{counter_depth},")
    return head.encode("latin-1").ljust(384, b"\0") + pixels


def decode_frame(body, detector_shape, *, where: str = "Merlin"):
    """``(index, frame)`` of a frame's bytes (its MQ1 header and pixels, from a message or a
    ``.mib`` file): the scan index (frame number - 1) and the pixels (det_row, det_col), rows
    flipped as the ``.mib`` reader flips them."""
    head = merlin_frame_header(bytes(body[:768]).decode("latin-1").split(","))
    if (head["rows"], head["cols"]) != tuple(detector_shape):
        raise FileFormatError(f"{where}: frame {head['number']} is {head['rows']}x{head['cols']}, the stream's "
                              f"frames are {detector_shape[0]}x{detector_shape[1]}")
    pixels = np.frombuffer(body, np.uint8, head["payload"], head["header_size"])
    if head["pixel_format"] == "R64":
        frame = decode_raw_1bit(pixels[None], head["rows"], head["cols"])[0]
    else:
        frame = pixels.view(MERLIN_DTYPES[head["pixel_format"]]).reshape(head["rows"], head["cols"])[::-1]
    return head["number"] - 1, frame


class MerlinTCPSource(Source):
    """Frames from a Merlin's TCP data port (``host``, ``port``).

    The scan shape is ``scan_shape`` (rows, cols) when given, else the acquisition header's
    frames in acquisition over frames per trigger (one trigger a scan row). Frames come in batches
    of up to ``batch``; ``timeout`` (s) bounds each wait on the socket (a silent detector is an
    error, not a hang). The stream ends when the detector closes the connection or every frame of
    the scan has come.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = DATA_PORT, *, scan_shape=None, batch: int = 256,
                 timeout: float = 10.0) -> None:
        super().__init__()
        self.address = (host, int(port))
        self.scan_shape = None if scan_shape is None else tuple(int(v) for v in scan_shape)
        self.batch, self.timeout = int(batch), float(timeout)
        self._sock = None
        self._buffer = bytearray()

    def __repr__(self) -> str:
        return f"MerlinTCPSource(tcp://{self.address[0]}:{self.address[1]})"

    def open(self) -> None:
        if self._sock is not None:
            return
        try:
            self._sock = socket.create_connection(self.address, timeout=self.timeout)
        except OSError as error:
            raise InputError(f"cannot connect to the Merlin data port tcp://{self.address[0]}:{self.address[1]}: "
                             f"{error}") from None
        body = self._message()
        if body is None or not body.startswith(b"HDR,"):
            raise FileFormatError(f"{self!r}: the stream does not start with an acquisition header (HDR)")
        self.header = header_fields(body[4:].decode("latin-1"))
        self.metadata = {"detector": {"name": "Quantum Detectors Merlin", "header": self.header}}
        frames = int(self.header.get("Frames in Acquisition (Number)", "0") or 0)
        per_trigger = int(self.header.get("Frames per Trigger (Number)", "0") or 0)
        if self.scan_shape is None:
            if not (1 < per_trigger < frames and frames % per_trigger == 0):
                raise InputError(f"{self!r}: the acquisition header gives {frames} frames, {per_trigger} per trigger: "
                                 "no scan shape; give it (scan_shape=(rows, cols), --scan-shape ROWS COLS)")
            self.scan_shape = (frames // per_trigger, per_trigger)
        self._first = self._message()  # the first frame tells the detector's shape
        if self._first is None:
            raise FileFormatError(f"{self!r}: the stream ended after its acquisition header")
        head = merlin_frame_header(self._first[:768].decode("latin-1").split(","))
        self.detector_shape = (head["rows"], head["cols"])
        if head["pixel_format"] == "R64":
            check_raw(self.header, head["assembly"], repr(self))

    def _recv_exact(self, n: int):
        while len(self._buffer) < n:
            try:
                chunk = self._sock.recv(max(1 << 20, n - len(self._buffer)))
            except socket.timeout:
                raise InputError(f"{self!r}: no data for {self.timeout:g} s") from None
            if not chunk:
                return None
            self._buffer += chunk
        out = bytes(self._buffer[:n])
        del self._buffer[:n]
        return out

    def _message(self):
        """The next message's body, or None when the connection has closed."""
        prefix = self._recv_exact(PREFIX)
        if prefix is None:
            return None
        if prefix[:4] != b"MPX," or prefix[14:15] != b",":
            raise FileFormatError(f"{self!r}: lost the message framing (expected MPX,<10 digits>, got {prefix!r})")
        body = self._recv_exact(int(prefix[4:14]) - 1)
        if body is None:
            raise FileFormatError(f"{self!r}: the connection closed inside a message")
        return body

    def _decode(self, body: bytes):
        return decode_frame(body, self.detector_shape, where=repr(self))

    def __iter__(self):
        self.open()
        total = self.scan_shape[0] * self.scan_shape[1]
        body, self._first = self._first, None
        index, frames, seen = [], [], 0
        while body is not None:
            if not body.startswith(b"MQ1,"):
                raise FileFormatError(f"{self!r}: a message that is not a frame ({body[:8]!r}) inside the acquisition")
            i, frame = self._decode(body)
            index.append(i)
            frames.append(frame)
            seen += 1
            if len(index) >= self.batch:
                yield Frames(np.array(index), np.stack(frames))
                index, frames = [], []
            if i + 1 >= total and seen >= total:
                break
            body = self._message()
        if index:
            yield Frames(np.array(index), np.stack(frames))

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
