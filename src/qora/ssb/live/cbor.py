"""A minimal CBOR (RFC 8949) decoder and encoder: what the DECTRIS stream v2 messages use, so that
the live path needs no CBOR package.

Decoded: unsigned and negative integers, byte and text strings, arrays, maps (definite and
indefinite lengths), tags, false/true/null/undefined, half, single and double floats. Tags kept
as objects for the stream's reader to interpret:

- 55799 (self-described CBOR, RFC 8949 3.4.6): dropped, its content returned;
- 40 and 1040 (multi-dimensional arrays, row- and column-major, RFC 8746): :class:`NDArray`;
- 64-87 (typed arrays, RFC 8746): :class:`TypedArray`, the element type from the tag number
  (``0b010_f_s_e_ll``: float, signed, little-endian, log2 of the byte length);
- 56500 (DECTRIS compressed byte string: [algorithm, element size, bytes]): :class:`Compressed`;
- any other: :class:`Tag`.

Byte strings are returned as ``memoryview`` slices of the message (no copy of a frame's bytes).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from qora.io.errors import FileFormatError

__all__ = ["loads", "dumps", "Tag", "NDArray", "TypedArray", "Compressed", "typed_array_tag"]

SELF_DESCRIBED = 55799
ROW_MAJOR, COLUMN_MAJOR = 40, 1040
COMPRESSED = 56500


@dataclass
class Tag:
    tag: int
    value: object


@dataclass
class TypedArray:
    """A typed array's element ``dtype`` and its ``data``: bytes, or a :class:`Compressed`."""

    dtype: np.dtype
    data: object


@dataclass
class NDArray:
    """A multi-dimensional array: ``shape``, its ``content`` (a :class:`TypedArray` or a list) and
    its ``order`` ("C" for tag 40, "F" for 1040)."""

    shape: tuple
    content: object
    order: str = "C"


@dataclass
class Compressed:
    """A DECTRIS compressed byte string: ``algorithm`` ("bslz4", "lz4"), ``element_size`` (the
    bitshuffle element size in bytes; 0 for lz4) and the compressed ``data``."""

    algorithm: str
    element_size: int
    data: object


def typed_array_dtype(tag: int) -> np.dtype:
    """The element type of the RFC 8746 typed-array tag ``tag`` (64-87)."""
    bits = tag - 64
    floating, signed, little, size = (bits >> 4) & 1, (bits >> 3) & 1, (bits >> 2) & 1, 1 << (bits & 3)
    if floating:
        if signed:
            raise FileFormatError(f"CBOR tag {tag} is not a typed array")
        size = {1: 2, 2: 4, 4: 8, 8: 16}[size]  # float16, 32, 64, 128
        if size == 16:
            raise FileFormatError("CBOR typed arrays of 128-bit floats are not supported")
        return np.dtype(f"{'<' if little else '>'}f{size}")
    if tag == 68:  # uint8 clamped: the same bytes
        return np.dtype(np.uint8)
    return np.dtype(f"{'<' if little else '>'}{'i' if signed else 'u'}{size}")


def typed_array_tag(dtype) -> int:
    """The RFC 8746 tag of a typed array of ``dtype`` as it is stored (its byte order)."""
    dtype = np.dtype(dtype)
    little = dtype.byteorder == "<" or (dtype.byteorder == "=" and np.little_endian) or dtype.itemsize == 1
    if dtype.kind == "f":
        ll = {2: 0, 4: 1, 8: 2}[dtype.itemsize]
        return 64 + (1 << 4) + (int(little) << 2) + ll
    ll = {1: 0, 2: 1, 4: 2, 8: 3}[dtype.itemsize]
    if dtype.itemsize == 1:
        return 72 if dtype.kind == "i" else 64
    return 64 + ((dtype.kind == "i") << 3) + (int(little) << 2) + ll


_FLOAT = {25: (2, ">e"), 26: (4, ">f"), 27: (8, ">d")}
_SIMPLE = {20: False, 21: True, 22: None, 23: None}


def _item(view, pos: int):
    """The item at ``view[pos]``: ``(value, next position)``. One function, locals only: a stream2
    image message is ~35 items, decoded per frame (docs/ssb-performance.md, "Live: the host's stages")."""
    initial = view[pos]
    pos += 1
    major, info = initial >> 5, initial & 31
    if info < 24:
        arg = info
    elif info < 28:
        width = 1 << (info - 24)
        arg = int.from_bytes(view[pos:pos + width], "big")
        if len(view) < pos + width:
            raise IndexError("the message ends inside an item's head")
        pos += width
    elif info == 31 and major in (2, 3, 4, 5):
        arg = None  # indefinite length
    elif major == 7 and info == 31:
        raise FileFormatError("CBOR: a break outside an indefinite-length item")
    else:
        raise FileFormatError(f"CBOR: reserved additional information {info}")
    if major == 0:
        return arg, pos
    if major == 1:
        return -1 - arg, pos
    if major == 2 or major == 3:
        if arg is None:  # chunks until the break
            chunks = []
            while view[pos] != 0xFF:
                chunk, pos = _item(view, pos)
                chunks.append(bytes(chunk) if major == 2 else chunk)
            return (b"".join(chunks) if major == 2 else "".join(chunks)), pos + 1
        end = pos + arg
        if end > len(view):
            raise IndexError(f"the message ends inside a string ({len(view)} bytes, {end} needed)")
        return (view[pos:end] if major == 2 else str(view[pos:end], "utf-8")), end
    if major == 4:
        out = []
        if arg is None:
            while view[pos] != 0xFF:
                value, pos = _item(view, pos)
                out.append(value)
            return out, pos + 1
        for _ in range(arg):
            value, pos = _item(view, pos)
            out.append(value)
        return out, pos
    if major == 5:
        out = {}
        if arg is None:
            while view[pos] != 0xFF:
                key, pos = _item(view, pos)
                out[key], pos = _item(view, pos)
            return out, pos + 1
        for _ in range(arg):
            key, pos = _item(view, pos)
            out[key], pos = _item(view, pos)
        return out, pos
    if major == 6:
        value, pos = _item(view, pos)
        return _tag(arg, value), pos
    # major 7: simple values and floats (the argument above was the float's bits)
    if info in _SIMPLE:
        return _SIMPLE[info], pos
    if info in _FLOAT:
        width, fmt = _FLOAT[info]
        return struct.unpack(fmt, int.to_bytes(arg, width, "big"))[0], pos
    return Tag(-1, arg), pos  # an unassigned simple value


def _tag(tag: int, value):
    if tag == SELF_DESCRIBED:
        return value
    if tag in (ROW_MAJOR, COLUMN_MAJOR):
        if not (isinstance(value, list) and len(value) == 2 and isinstance(value[0], list)):
            raise FileFormatError(f"CBOR tag {tag} (a multi-dimensional array) must hold [dimensions, array]")
        return NDArray(tuple(int(v) for v in value[0]), value[1], "C" if tag == ROW_MAJOR else "F")
    if 64 <= tag <= 87:
        if not isinstance(value, (memoryview, bytes, Compressed)):
            raise FileFormatError(f"CBOR typed array (tag {tag}) of a {type(value).__name__}, not a byte string")
        return TypedArray(typed_array_dtype(tag), value)
    if tag == COMPRESSED:
        if not (isinstance(value, list) and len(value) == 3 and isinstance(value[0], str)):
            raise FileFormatError("CBOR tag 56500 (DECTRIS compression) must hold [algorithm, element size, bytes]")
        return Compressed(value[0], int(value[1]), value[2])
    return Tag(tag, value)


def loads(data):
    """The item a CBOR message ``data`` (bytes-like) holds; raises FileFormatError on a malformed
    or truncated message, or bytes left after the item."""
    view = memoryview(data).cast("B") if not isinstance(data, bytes) else memoryview(data)
    try:
        item, pos = _item(view, 0)
    except (IndexError, UnicodeDecodeError, struct.error) as error:
        raise FileFormatError(f"a malformed CBOR message: it ends inside an item or holds bad text ({error})") from None
    if pos != len(view):
        raise FileFormatError(f"a CBOR message with {len(view) - pos} bytes after its item")
    return item


# -- encoding (the simulator's) ----------------------------------------------------------------------
def _head(major: int, n: int) -> bytes:
    if n < 24:
        return bytes([major << 5 | n])
    for info, fmt, limit in ((24, ">B", 1 << 8), (25, ">H", 1 << 16), (26, ">I", 1 << 32), (27, ">Q", 1 << 64)):
        if n < limit:
            return bytes([major << 5 | info]) + struct.pack(fmt, n)
    raise ValueError(f"CBOR: an argument of {n} does not fit in 64 bits")


def _encode(item, out: list) -> None:
    if item is None:
        out.append(b"\xf6")
    elif item is True or item is False:
        out.append(b"\xf5" if item else b"\xf4")
    elif isinstance(item, (int, np.integer)):
        item = int(item)
        out.append(_head(0, item) if item >= 0 else _head(1, -1 - item))
    elif isinstance(item, (float, np.floating)):
        out.append(b"\xfb" + struct.pack(">d", float(item)))
    elif isinstance(item, (bytes, bytearray, memoryview)):
        raw = bytes(item)
        out.append(_head(2, len(raw)))
        out.append(raw)
    elif isinstance(item, str):
        raw = item.encode("utf-8")
        out.append(_head(3, len(raw)))
        out.append(raw)
    elif isinstance(item, (list, tuple)):
        out.append(_head(4, len(item)))
        for v in item:
            _encode(v, out)
    elif isinstance(item, dict):
        out.append(_head(5, len(item)))
        for k, v in item.items():
            _encode(k, out)
            _encode(v, out)
    elif isinstance(item, Tag):
        out.append(_head(6, item.tag))
        _encode(item.value, out)
    elif isinstance(item, Compressed):
        _encode(Tag(COMPRESSED, [item.algorithm, item.element_size, item.data]), out)
    elif isinstance(item, TypedArray):
        _encode(Tag(typed_array_tag(item.dtype), item.data), out)
    elif isinstance(item, NDArray):
        _encode(Tag(ROW_MAJOR if item.order == "C" else COLUMN_MAJOR, [list(item.shape), item.content]), out)
    else:
        raise TypeError(f"CBOR: cannot encode a {type(item).__name__}")


def dumps(item, *, self_described: bool = True) -> bytes:
    """``item`` (None, bool, int, float, bytes, str, list, dict, :class:`Tag`, :class:`NDArray`,
    :class:`TypedArray`, :class:`Compressed`) as CBOR, behind the self-described tag by default."""
    out: list = [b"\xd9\xd9\xf7"] if self_described else []
    _encode(item, out)
    return b"".join(out)
