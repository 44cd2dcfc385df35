"""The DECTRIS stream v2 image message read by one compiled call: the fields a frame needs
(``type``, ``series_id``, ``image_id``, and the channel's frame in ``data``: its shape, typed-array
tag, compression and the offset and length of its bytes) found by walking the CBOR once in Numba,
every other item skipped without building it.

Why (docs/ssb-performance.md, "Live: the host's stages"): the Python decoder
(:mod:`qora.ssb.live.cbor`) builds ~35 objects a message, 3.6 memcpys of a 192^2 frame a frame, on
the one receiving thread; this walk builds none. A message it does not recognise (another layout,
a column-major or 3D array, a tag it does not expect) is reported and read by the Python decoder,
so the two agree by construction on every message the walk accepts (tested on the simulator's).
"""

from __future__ import annotations

import numba
import numpy as np

__all__ = ["scan_image", "ImageFields", "KIND_IMAGE", "ALGORITHM"]

KIND_OTHER, KIND_IMAGE = 0, 1
ALGORITHM = {0: None, 1: "bslz4", 2: "lz4"}  # codes of the compression found (0: none)

_TYPE = np.frombuffer(b"type", np.uint8)
_IMAGE = np.frombuffer(b"image", np.uint8)
_IMAGE_ID = np.frombuffer(b"image_id", np.uint8)
_SERIES_ID = np.frombuffer(b"series_id", np.uint8)
_DATA = np.frombuffer(b"data", np.uint8)
_BSLZ4 = np.frombuffer(b"bslz4", np.uint8)
_LZ4 = np.frombuffer(b"lz4", np.uint8)


@numba.njit(cache=True, nogil=True)
def _head(buf, pos, end):
    """(major, argument, next position) of the item head at ``pos``; argument -1: indefinite
    length; major -1: malformed or cut short."""
    if pos >= end:
        return np.int64(-1), np.int64(0), pos
    initial = np.int64(buf[pos])
    pos += 1
    major, info = initial >> 5, initial & 31
    if info < 24:
        return major, info, pos
    if info <= 27:
        width = 1 << (info - 24)
        if pos + width > end:
            return np.int64(-1), np.int64(0), pos
        if width == 8 and buf[pos] >= 128:  # past int64: a double with its sign set is skipped, else refused
            return (major, np.int64(0), pos + 8) if major == 7 else (np.int64(-1), np.int64(0), pos)
        value = np.int64(0)
        for k in range(width):
            value = (value << 8) | buf[pos + k]
        return major, value, pos + width
    if info == 31 and (2 <= major <= 5 or major == 7):
        return major, np.int64(-1), pos
    return np.int64(-1), np.int64(0), pos


@numba.njit(cache=True, nogil=True)
def _equal(buf, pos, length, word):
    if length != len(word):
        return False
    for k in range(length):
        if buf[pos + k] != word[k]:
            return False
    return True


@numba.njit(cache=True, nogil=True)
def _skip(buf, pos, end):
    """The position after the item at ``pos`` (nested items skipped with a stack of the items left
    at each level; -1 for an indefinite level), or -1 when malformed or deeper than 32."""
    left = np.zeros(33, np.int64)
    depth = 0
    left[0] = 1
    while True:
        while left[depth] == 0:
            if depth == 0:
                return pos
            depth -= 1
        if left[depth] == -1:
            if pos >= end:
                return -1
            if buf[pos] == 0xFF:  # the break of an indefinite level
                pos += 1
                left[depth] = 0
                continue
        else:
            left[depth] -= 1
        major, arg, pos = _head(buf, pos, end)
        if major < 0:
            return -1
        if major == 2 or major == 3:
            if arg >= 0:
                pos += arg
                if pos > end:
                    return -1
                continue
            depth += 1  # indefinite string: chunks until the break
        elif major == 4 or major == 5 or major == 6:
            depth += 1
        else:
            continue  # integers, simple values, floats: their head was all
        if depth > 32:
            return -1
        if major == 6:
            left[depth] = 1  # a tag's content
        elif arg < 0:
            left[depth] = -1
        else:
            left[depth] = arg if major != 5 else 2 * arg


@numba.njit(cache=True, nogil=True)
def _frame(buf, pos, end, out):
    """The frame at ``pos``: tag 40 [[rows, cols], typed array of bytes or of tag 56500 [algorithm,
    element size, bytes]]. Fills out[3:10]; returns the next position, or -1 for another layout."""
    major, arg, pos = _head(buf, pos, end)
    if major != 6 or arg != 40:
        return -1
    major, arg, pos = _head(buf, pos, end)
    if major != 4 or arg != 2:
        return -1
    major, arg, pos = _head(buf, pos, end)
    if major != 4 or arg != 2:
        return -1
    for k in range(2):
        major, arg, pos = _head(buf, pos, end)
        if major != 0:
            return -1
        out[3 + k] = arg  # rows, cols
    major, arg, pos = _head(buf, pos, end)
    if major != 6 or arg < 64 or arg > 87:
        return -1
    out[5] = arg  # the typed array's tag
    major, arg, pos = _head(buf, pos, end)
    if major == 2 and arg >= 0:
        out[6], out[7] = 0, 0
    elif major == 6 and arg == 56500:
        major, arg, pos = _head(buf, pos, end)
        if major != 4 or arg != 3:
            return -1
        major, arg, pos = _head(buf, pos, end)
        if major != 3 or arg < 0 or pos + arg > end:
            return -1
        if _equal(buf, pos, arg, _BSLZ4):
            out[6] = 1
        elif _equal(buf, pos, arg, _LZ4):
            out[6] = 2
        else:
            return -1
        pos += arg
        major, arg, pos = _head(buf, pos, end)
        if major != 0:
            return -1
        out[7] = arg  # element size
        major, arg, pos = _head(buf, pos, end)
        if major != 2 or arg < 0:
            return -1
    else:
        return -1
    if pos + arg > end:
        return -1
    out[8], out[9] = pos, arg
    return pos + arg


@numba.njit(cache=True, nogil=True)
def _scan(buf, channel, out):
    """out: [kind, series_id, image_id, rows, cols, typed-array tag, algorithm, element size,
    offset, length, ok]; ok 0 when the message is not an image message of the layout walked."""
    end = len(buf)
    out[:] = 0
    pos = 0
    if end >= 3 and buf[0] == 0xD9 and buf[1] == 0xD9 and buf[2] == 0xF7:
        pos = 3  # the self-described tag
    major, count, pos = _head(buf, pos, end)
    if major != 5:
        return
    seen = 0
    found = 0
    while True:
        if count < 0:
            if pos >= end:
                return
            if buf[pos] == 0xFF:
                pos += 1
                break
        elif seen == count:
            break
        seen += 1
        major, length, pos = _head(buf, pos, end)
        if major != 3 or length < 0 or pos + length > end:
            return
        key = pos
        pos += length
        if _equal(buf, key, length, _TYPE):
            major, arg, pos = _head(buf, pos, end)
            if major != 3 or arg < 0 or pos + arg > end:
                return
            if _equal(buf, pos, arg, _IMAGE):
                out[0] = KIND_IMAGE
            pos += arg
        elif _equal(buf, key, length, _SERIES_ID) or _equal(buf, key, length, _IMAGE_ID):
            major, arg, pos = _head(buf, pos, end)
            if major != 0:
                return
            out[1 if length == 9 else 2] = arg
            found += 1
        elif _equal(buf, key, length, _DATA):
            major, entries, pos = _head(buf, pos, end)
            if major != 5:
                return
            taken = 0
            while True:
                if entries < 0:
                    if pos >= end:
                        return
                    if buf[pos] == 0xFF:
                        pos += 1
                        break
                elif taken == entries:
                    break
                taken += 1
                major, klen, pos = _head(buf, pos, end)
                if major != 3 or klen < 0 or pos + klen > end:
                    return
                mine = _equal(buf, pos, klen, channel)
                pos += klen
                if mine:
                    pos = _frame(buf, pos, end, out)
                    found += 1
                else:
                    pos = _skip(buf, pos, end)
                if pos < 0:
                    return
        else:
            pos = _skip(buf, pos, end)
            if pos < 0:
                return
    if pos == end and out[0] == KIND_IMAGE and found == 3:
        out[10] = 1


class ImageFields:
    """What :func:`scan_image` found: ``series_id``, ``image_id``, ``shape`` (rows, cols), the
    typed array's ``tag`` (RFC 8746), ``algorithm`` (None, "bslz4", "lz4"), ``element_size`` and
    ``payload``: the frame's bytes (a view of the message)."""

    __slots__ = ("series_id", "image_id", "shape", "tag", "algorithm", "element_size", "payload")

    def __init__(self, out, message) -> None:
        self.series_id, self.image_id = int(out[1]), int(out[2])
        self.shape = (int(out[3]), int(out[4]))
        self.tag, self.algorithm, self.element_size = int(out[5]), ALGORITHM[int(out[6])], int(out[7])
        self.payload = message[int(out[8]):int(out[8]) + int(out[9])]


def scan_image(message, channel, out: np.ndarray | None = None) -> ImageFields | None:
    """The fields of a stream2 ``image`` message (bytes-like) whose ``data`` holds ``channel``
    (bytes, or their uint8 array) as a row-major 2D typed array (compressed or not); None for any
    other message or layout (read it with :func:`qora.ssb.live.cbor.loads`). ``out``: an (11,)
    int64 scratch array to reuse."""
    view = memoryview(message).cast("B")
    out = np.empty(11, np.int64) if out is None else out
    if not isinstance(channel, np.ndarray):
        channel = np.frombuffer(channel, np.uint8)
    _scan(np.frombuffer(view, np.uint8), channel, out)
    return ImageFields(out, view) if out[10] else None
