"""Bitshuffle-LZ4, the compression of DECTRIS frames (``bs16-lz4<``, ``bs32-lz4<`` in the stream,
filter 32008 in HDF5), decoded in NumPy with the LZ4 block codec of ``numcodecs``.

Layout (the bitshuffle HDF5 filter's, which the stream's frames share): a 12-byte header, the
uncompressed size (bytes, big-endian uint64) and the block size (bytes, big-endian uint32), then
each block as its compressed size (big-endian uint32) and an LZ4 block. A block of n elements
(n a multiple of 8) is bit-transposed: bit j of byte b of every element, element i at bit i % 8
of byte i // 8, forms row 8 b + j of the block. The elements after the last multiple of 8 follow
as they are.
"""

from __future__ import annotations

import struct

import numpy as np

from qora.io.errors import FileFormatError, MissingExtra

__all__ = ["decompress", "compress", "lz4_codec"]


def lz4_codec():
    """numcodecs' LZ4 block codec (its own 4-byte little-endian size header before each block)."""
    try:
        from numcodecs import LZ4
    except ImportError:
        raise MissingExtra("LZ4-compressed DECTRIS frames need numcodecs: pip install 'qora[live]'") from None
    return LZ4()


def _unshuffle(block: np.ndarray, itemsize: int) -> np.ndarray:
    n = block.size * 8 // (8 * itemsize)  # elements
    bits = np.unpackbits(block.reshape(8 * itemsize, n // 8), axis=1, bitorder="little")  # (8 b + j, n)
    planes = np.packbits(bits.reshape(itemsize, 8, n), axis=1, bitorder="little")[:, 0]  # (byte b, n)
    return np.ascontiguousarray(planes.T).reshape(-1)


def _shuffle(raw: np.ndarray, itemsize: int) -> np.ndarray:
    n = raw.size // itemsize
    planes = raw.reshape(n, itemsize).T  # (byte b, n)
    bits = np.unpackbits(planes[:, None, :], axis=1, bitorder="little")  # (b, j, n)
    return np.packbits(bits.reshape(8 * itemsize, n), axis=1, bitorder="little").reshape(-1)


def decompress(blob: bytes, dtype, count: int) -> np.ndarray:
    """``count`` elements of ``dtype`` from a bitshuffle-LZ4 ``blob`` (with its 12-byte header)."""
    dtype = np.dtype(dtype)
    itemsize = dtype.itemsize
    if len(blob) < 12:
        raise FileFormatError(f"a bitshuffle-LZ4 frame of {len(blob)} bytes: shorter than its header")
    total, block_bytes = struct.unpack(">QI", blob[:12])
    if total != count * itemsize or block_bytes % (8 * itemsize):
        raise FileFormatError(f"a bitshuffle-LZ4 frame of {total} bytes in blocks of {block_bytes}: expected "
                              f"{count * itemsize} bytes of {dtype}")
    codec = lz4_codec()
    out = np.empty(total, np.uint8)
    pos, done = 12, 0
    whole = (count // 8) * 8 * itemsize  # bytes in shuffled blocks
    while done < whole:
        size = min(block_bytes, whole - done)
        (nbytes,) = struct.unpack(">I", blob[pos:pos + 4])
        raw = codec.decode(struct.pack("<I", size) + blob[pos + 4:pos + 4 + nbytes])
        out[done:done + size] = _unshuffle(np.frombuffer(raw, np.uint8), itemsize)
        pos, done = pos + 4 + nbytes, done + size
    out[done:] = np.frombuffer(blob, np.uint8, total - done, pos)  # the last count % 8 elements, as they are
    return out.view(dtype.newbyteorder("<") if dtype.byteorder == "=" else dtype)


def compress(data: np.ndarray, *, block_bytes: int = 8192) -> bytes:
    """``data`` (little-endian) as a bitshuffle-LZ4 blob with its header (the simulator's encoder)."""
    data = np.ascontiguousarray(data)
    itemsize = data.dtype.itemsize
    raw = data.view(np.uint8).reshape(-1)
    count = data.size
    codec = lz4_codec()
    parts = [struct.pack(">QI", raw.size, block_bytes)]
    whole = (count // 8) * 8 * itemsize
    # the compiled bit transpose (a 192^2 frame's encoding 0.28 ms against 1.93 ms); NumPy's where Numba is missing
    try:
        from qora.ssb.live.bslz4_numba import shuffle_block
    except ImportError:
        shuffle_block = _shuffle
    for start in range(0, whole, block_bytes):
        block = shuffle_block(raw[start:min(whole, start + block_bytes)], itemsize)
        packed = codec.encode(block.tobytes())[4:]  # numcodecs' own 4-byte size header off
        parts.append(struct.pack(">I", len(packed)) + packed)
    parts.append(raw[whole:].tobytes())
    return b"".join(parts)
