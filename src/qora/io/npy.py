"""A ``.npy`` file's header checked against the file before it is loaded.

``np.load`` trusts the header: a 200-byte file whose header claims an 80 GB array makes it allocate
80 GB (or, memory-mapped, fail with NumPy's "mmap length is greater than file size"). Here the
header is read with :func:`numpy.lib.format.read_magic` and ``read_array_header_1_0``/``2_0``, the
array's size it declares (shape times item size) is set against the bytes the file holds after the
header, and a file that holds fewer is refused, naming the file and both sizes, before anything is
allocated or mapped.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np

from qora.io.errors import FileFormatError

__all__ = ["npy_header", "check_npy", "check_npz_member"]


def _size(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n} bytes ({n / scale:.1f} {unit})"
    return f"{n} bytes"


def npy_header(path) -> tuple:
    """``(shape, fortran_order, dtype, offset)`` of a ``.npy`` file's header, ``offset`` the bytes
    before the array; a file that is not a ``.npy`` file (no magic, a damaged or oversized header)
    is a FileFormatError naming it."""
    path = Path(path)
    with open(path, "rb") as f:
        return _header(f, path)


def _header(f, path) -> tuple:
    from numpy.lib import format as npformat

    try:
        version = npformat.read_magic(f)
        if version == (1, 0):
            shape, fortran, dtype = npformat.read_array_header_1_0(f)
        elif version == (2, 0):
            shape, fortran, dtype = npformat.read_array_header_2_0(f)
        elif version == (3, 0):  # 2.0's layout, the header in UTF-8 (NumPy has no public reader of it)
            shape, fortran, dtype = _read_header_3_0(f)
        else:
            raise ValueError(f"unknown .npy format version {version}")
    except (ValueError, EOFError, SyntaxError, TypeError, OverflowError, MemoryError, RecursionError) as exc:
        raise FileFormatError(f"{path}: cannot be read as .npy (its header: {' '.join(str(exc).split())})") from None
    offset = f.tell()
    if not isinstance(shape, tuple) or any(not isinstance(n, int) or n < 0 for n in shape):
        raise FileFormatError(f"{path}: cannot be read: its .npy header declares the shape {shape!r}, not one of "
                              "whole numbers")
    return tuple(shape), bool(fortran), np.dtype(dtype), offset


def _read_header_3_0(f) -> tuple:
    import ast
    import struct

    from numpy.lib import format as npformat

    raw = f.read(4)
    if len(raw) != 4:
        raise EOFError("the header's length is cut short")
    (length,) = struct.unpack("<I", raw)
    if length > 100_000:  # NumPy's own bound on what it parses (max_header_size)
        raise ValueError(f"a header of {length} bytes (more than 100000: not a .npy header)")
    text = f.read(length)
    if len(text) != length:
        raise EOFError("the header is cut short")
    header = ast.literal_eval(text.decode("utf-8"))
    if not isinstance(header, dict) or set(header) != {"descr", "fortran_order", "shape"}:
        raise ValueError(f"a header without descr, fortran_order and shape: {str(header)[:100]}")
    if not isinstance(header["shape"], tuple) or not isinstance(header["fortran_order"], bool):
        raise ValueError(f"a header with shape {header['shape']!r} and fortran_order {header['fortran_order']!r}")
    return header["shape"], header["fortran_order"], npformat.descr_to_dtype(header["descr"])


def _check_size(where, shape, dtype, held, holder: str = "the file") -> None:
    if dtype.hasobject:
        raise FileFormatError(f"{where}: a .npy array of Python objects ({dtype}), which is not read (it would run "
                              "pickled code); save the data as numbers")
    declared = math.prod(shape) * dtype.itemsize
    if held < declared:
        what = "x".join(map(str, shape)) or "scalar"
        raise FileFormatError(f"{where}: cannot be read: its .npy header declares a {what} {dtype} array of "
                              f"{_size(declared)}, {holder} holds {_size(max(held, 0))} after its header (truncated, "
                              "or not the file its header says)")


def check_npz_member(path, npz, key: str) -> None:
    """The array ``key`` of an open ``.npz`` archive (``np.load``'s NpzFile) checked as
    :func:`check_npy` checks a file, against the size the archive records for it: NumPy allocates
    what a member's header declares before it reads the member."""
    name = key if key in npz.zip.namelist() else f"{key}.npy"
    try:
        info = npz.zip.getinfo(name)
    except KeyError:
        return  # NumPy says what is missing
    with npz.zip.open(name) as f:
        shape, _, dtype, offset = _header(f, f"{path} ({key})")
    _check_size(f"{path} (its array {key!r})", shape, dtype, info.file_size - offset, "the archive's member")


def check_npy(path) -> tuple:
    """The header of a ``.npy`` file (:func:`npy_header`) once the array it declares is known to be
    in the file: a file that holds fewer bytes after its header than the shape and dtype declare
    (truncated, or a header that lies) is a FileFormatError naming the file and both sizes. Call it
    before ``np.load`` (memory-mapped or not)."""
    path = Path(path)
    shape, fortran, dtype, offset = npy_header(path)
    _check_size(path, shape, dtype, os.path.getsize(path) - offset)
    return shape, fortran, dtype, offset
