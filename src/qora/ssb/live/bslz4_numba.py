"""Bitshuffle-LZ4 decoded in Numba: the LZ4 block format and the bit transpose of
:mod:`qora.ssb.live.bslz4` (its NumPy code is the reference), compiled, and a batch of frames
decoded in parallel threads without the GIL (the DECTRIS receiver's hot loop).

LZ4 block format (lz4's "LZ4 Block Format Description"): sequences of a token (literal length in
the high nibble, match length - 4 in the low one, each extended by bytes of 255 while they last),
the literals, a 2-byte little-endian offset back into the output, and the match copied from there
(it may overlap what it writes); the last sequence has literals only.
"""

from __future__ import annotations

import numba
import numpy as np

from qora.backend.host import numba_threads

__all__ = ["decode_batch", "lz4_block", "shuffle_block"]


@numba.njit(cache=True, nogil=True)
def big_endian(blob, at, width):
    """The unsigned big-endian integer of ``width`` bytes at ``blob[at]`` (bitshuffle's header and block
    sizes); shared with the batch table of :mod:`qora.ssb.live.bslz4_batch`."""
    value = 0
    for k in range(width):
        value = (value << 8) | blob[at + k]
    return value


@numba.njit(cache=True, nogil=True)
def lz4_length(src, i, stop, length):
    """A sequence's literal or match length from its token nibble ``length``: at 15 it goes on in the
    bytes from ``src[i]``, each added, until one is below 255. Returns (length, the index after them),
    or (-1, stop) when the block ends inside them (malformed). Shared with the kernel's host twin
    (:mod:`qora.ssb.live.bslz4_batch`)."""
    # int64 throughout: callers index with uint64 table entries, and uint64 + int64 is float64 in Numba
    i, stop, length = np.int64(i), np.int64(stop), np.int64(length)
    if length != 15:
        return length, i
    while i < stop:
        b = src[i]
        i += 1
        length += b
        if b != 255:
            return length, i
    return -1, stop


@numba.njit(cache=True, nogil=True)
def _lz4_block(src, start, stop, dst, out0, out_size):
    """Decode the LZ4 block src[start:stop] into dst[out0:out0 + out_size]; returns the bytes
    written, or -1 on a malformed block."""
    i, o, end = start, out0, out0 + out_size
    while i < stop:
        token = src[i]
        i += 1
        lit, i = lz4_length(src, i, stop, token >> 4)
        if lit < 0 or o + lit > end or i + lit > stop:
            return -1
        for k in range(lit):
            dst[o + k] = src[i + k]
        i += lit
        o += lit
        if i >= stop:
            break
        if i + 2 > stop:
            return -1
        offset = src[i] | (src[i + 1] << 8)
        i += 2
        match, i = lz4_length(src, i, stop, token & 15)
        if match < 0:
            return -1
        match += 4
        if offset == 0 or o - offset < out0 or o + match > end:
            return -1
        for k in range(match):  # byte by byte: the source may overlap the bytes written
            dst[o + k] = dst[o - offset + k]
        o += match
    return o - out0


lz4_block = _lz4_block  # also the HDF5 LZ4 framing's block decoder (qora.ssb.live.dectris)

_M1, _M2, _M3 = np.uint64(0x00AA00AA00AA00AA), np.uint64(0x0000CCCC0000CCCC), np.uint64(0x00000000F0F0F0F0)
_S7, _S14, _S28, _S8 = np.uint64(7), np.uint64(14), np.uint64(28), np.uint64(8)


@numba.njit(cache=True, nogil=True, inline="always")
def _transpose8(x):
    """The 8 x 8 bit matrix in the 64-bit word ``x`` (row r: byte r) transposed, by three masked swaps
    (Warren, Hacker's Delight, section 7-3); its own inverse."""
    t = (x ^ (x >> _S7)) & _M1
    x = x ^ t ^ (t << _S7)
    t = (x ^ (x >> _S14)) & _M2
    x = x ^ t ^ (t << _S14)
    t = (x ^ (x >> _S28)) & _M3
    return x ^ t ^ (t << _S28)


@numba.njit(cache=True, nogil=True)
def _unshuffle(shuffled, s0, count, itemsize, out, o0):
    """The bit transpose of one block of ``count`` elements (a multiple of 8): row 8 b + j of
    ``shuffled[s0:]`` holds bit j of byte b of every element, element e at bit e % 8 of byte e // 8.
    Eight elements' byte b is the transpose of an 8 x 8 bit matrix (row j: the byte of bit plane j),
    done on a 64-bit word (:func:`_transpose8`)."""
    nb = count // 8
    for b in range(itemsize):
        for q in range(nb):
            x = np.uint64(0)
            for j in range(8):
                x |= np.uint64(shuffled[s0 + (8 * b + j) * nb + q]) << np.uint64(8 * j)
            x = _transpose8(x)
            for e in range(8):
                out[o0 + (8 * q + e) * itemsize + b] = np.uint8((x >> np.uint64(8 * e)) & np.uint64(255))


@numba.njit(cache=True, nogil=True)
def _shuffle(raw, count, itemsize, out):
    """The inverse of :func:`_unshuffle` for one block of ``count`` elements (a multiple of 8) at
    the start of ``raw``: the same 8 x 8 bit-matrix transposes (a transpose is its own inverse),
    gathered from the elements' bytes and scattered into the bit-plane rows of ``out``."""
    nb = count // 8
    for b in range(itemsize):
        for q in range(nb):
            x = np.uint64(0)
            for e in range(8):
                x |= np.uint64(raw[(8 * q + e) * itemsize + b]) << np.uint64(8 * e)
            x = _transpose8(x)
            for j in range(8):
                out[(8 * b + j) * nb + q] = np.uint8((x >> np.uint64(8 * j)) & np.uint64(255))


def shuffle_block(raw: np.ndarray, itemsize: int) -> np.ndarray:
    """The bitshuffle of one block of bytes ``raw`` (a whole number of 8-element groups), compiled:
    the encoder's half of the bit transpose (:func:`qora.ssb.live.bslz4._shuffle` is its NumPy
    reference; 1 ms a 192^2 uint16 frame there, the simulators' encoding time)."""
    raw = np.ascontiguousarray(raw, np.uint8)
    out = np.empty_like(raw)
    _shuffle(raw, raw.size // itemsize, itemsize, out)
    return out


@numba.njit(cache=True, nogil=True, parallel=True)
def _decode_frames(blobs, offsets, count, itemsize, out, status):
    n = len(offsets) - 1
    for f in numba.prange(n):
        start, stop = offsets[f], offsets[f + 1]  # every read stays inside this frame's blob
        if stop - start < 12:
            status[f] = 1
            continue
        total = big_endian(blobs, start, 8)
        block = big_endian(blobs, start + 8, 4)
        if total != count * itemsize or block == 0 or block % (8 * itemsize) != 0:
            status[f] = 1
            continue
        scratch = np.empty(block, np.uint8)
        whole = (count // 8) * 8 * itemsize
        pos, done = start + 12, 0
        while done < whole:
            size = min(block, whole - done)
            if pos + 4 > stop:
                status[f] = 2
                break
            nbytes = 0
            for k in range(4):
                nbytes = (nbytes << 8) | blobs[pos + k]
            if pos + 4 + nbytes > stop:
                status[f] = 2
                break
            got = _lz4_block(blobs, pos + 4, pos + 4 + nbytes, scratch, 0, size)
            if got != size:
                status[f] = 2
                break
            _unshuffle(scratch, 0, size // itemsize, itemsize, out[f], done)
            pos += 4 + nbytes
            done += size
        if status[f] == 0 and pos + total - done > stop:
            status[f] = 2
        if status[f] == 0:
            for k in range(total - done):  # the last count % 8 elements, as they are
                out[f, done + k] = blobs[pos + k]


def decode_batch(blobs: list, dtype, count: int) -> np.ndarray:
    """Frames (n, count) of ``dtype`` from their bitshuffle-LZ4 blobs (each with its 12-byte header),
    decoded in parallel; raises ValueError naming the first frame that is malformed."""
    dtype = np.dtype(dtype)
    sizes = np.fromiter((len(b) for b in blobs), np.int64, len(blobs))
    offsets = np.zeros(len(blobs) + 1, np.int64)
    np.cumsum(sizes, out=offsets[1:])
    # one buffer of all the blobs: join takes memoryviews as they are (no copy of each first)
    joined = np.frombuffer(b"".join(blobs), np.uint8)
    out = np.empty((len(blobs), count * dtype.itemsize), np.uint8)
    status = np.zeros(len(blobs), np.int8)
    numba_threads()  # the host's thread setting for this parallel loop
    _decode_frames(joined, offsets, count, dtype.itemsize, out, status)
    if status.any():
        bad = int(np.flatnonzero(status)[0])
        raise ValueError(f"frame {bad} of the batch is not a valid bitshuffle-LZ4 blob of {count} {dtype} values "
                         f"({'header' if status[bad] == 1 else 'LZ4 block'})")
    return out.view(dtype.newbyteorder("<"))
