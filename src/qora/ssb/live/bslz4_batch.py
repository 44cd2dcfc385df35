"""Bitshuffle-LZ4 frames kept compressed as they arrive, for the device to decode
(:mod:`qora.ssb.live.bslz4_device`, the kernel ``qora/ssb/kernels/bslz4.cu``).

- :class:`CompressedFrames`: a batch of a DECTRIS receiver's frames as their blobs (what a source
  yields with ``decode="device"``), packed end to end into one byte array on demand.
- :func:`block_table`: the host's share of the decoding, a scan of each blob's header and block
  sizes (Numba, over the batch), giving each LZ4 block's offset and size; it checks the headers,
  so that the device decodes only blocks that lie inside their frame.
- :func:`gather_host`: the kernel's algorithm in Numba, written in its warps and lanes (a CTA per
  LZ4 block index and group of frames, 32 lanes that split each copy, eight elements a lane in
  the bit transpose, the sums kept as the kernel keeps them), so that its indexing is tested on a
  machine without a GPU against the NumPy decoder (:mod:`qora.ssb.live.bslz4`) and an independent
  encoder (hdf5plugin's); on the CPU backend it is also the decode of a device-bound batch.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass, field

import numba
import numpy as np

from qora.io.errors import FileFormatError, InputError
from qora.ssb.live.bslz4_numba import big_endian, lz4_length

__all__ = ["CompressedFrames", "BlockTable", "block_table", "store_block_table", "gather_host", "slot_map", "WARPS",
           "LANES"]

WARPS = 4  # warps a CTA (WARPS in bslz4.cu)
LANES = 32
HEADER = 12  # bytes: total (big-endian u64), block size (big-endian u32)


@dataclass
class CompressedFrames:
    """A batch of bitshuffle-LZ4 frames as received: ``index`` (n,) their acquisition indices,
    ``blobs`` n byte buffers (each a frame's blob with its 12-byte header; memoryviews of the
    received messages, not copied), ``dtype`` the pixels' (little-endian counts), ``shape``
    (det_row, det_col). ``release``, ``receiver``: as :class:`~qora.ssb.live.Frames`' (a
    receiver's slot handed back once read; which receiving process took them). ``table``: the
    batch's :class:`BlockTable` where the receiving process made it (None: the decoder makes it);
    ``registered``: the packed blob lies in page-locked memory (a receiver's shared-memory slot
    registered with the device), so the decoder copies it to the device from where it is."""

    index: np.ndarray
    blobs: list
    dtype: np.dtype
    shape: tuple
    release: object = field(default=None, repr=False, compare=False)
    receiver: int = 0
    table: object = field(default=None, repr=False, compare=False)
    registered: bool = False

    def __post_init__(self) -> None:
        self.index = np.asarray(self.index, np.int64).reshape(-1)
        self.dtype = np.dtype(self.dtype).newbyteorder("=")
        self.shape = tuple(int(v) for v in self.shape)
        if len(self.blobs) != len(self.index):
            raise InputError(f"CompressedFrames: {len(self.blobs)} blobs for {len(self.index)} indices")
        if self.dtype not in (np.dtype(np.uint8), np.dtype(np.uint16), np.dtype(np.uint32)):
            raise InputError(f"CompressedFrames: counts of uint8, uint16 or uint32, got {self.dtype}")
        self._packed = None
        if isinstance(self.blobs, _PackedBlobs):
            self.sizes = np.diff(self.blobs.offsets)
        else:
            self.sizes = np.fromiter((memoryview(b).nbytes for b in self.blobs), np.int64, len(self.blobs))

    @classmethod
    def from_packed(cls, index, blob: np.ndarray, offsets: np.ndarray, dtype, shape, *, release=None,
                    receiver: int = 0, table: "BlockTable | None" = None, registered: bool = False
                    ) -> "CompressedFrames":
        """A batch already packed end to end (``blob`` uint8, ``offsets`` (n + 1,) int64, as
        :meth:`pack` gives them; a receiver process packs its batch into shared memory): its
        :meth:`pack` is then one copy. ``table``, ``registered``: as the class's."""
        offsets = np.asarray(offsets, np.int64)
        if len(offsets) != len(index) + 1 or offsets[0] != 0 or offsets[-1] > blob.size or (np.diff(offsets) < 0).any():
            raise InputError(f"CompressedFrames.from_packed: offsets {len(offsets)} for {len(index)} frames do not "
                             f"lie in a blob of {blob.size} bytes")
        if table is not None and (table.starts.shape[0] != len(index) or len(table.tails) != len(index)):
            raise InputError(f"CompressedFrames.from_packed: a block table of {table.starts.shape[0]} frames for "
                             f"{len(index)}")
        # the blobs as slices made only when asked for (a host decode, a rejected frame): a list of
        # 1,024 memoryviews cost the consuming process 0.3-0.6 ms a batch, under the interpreter lock
        frames = cls(index, _PackedBlobs(blob, offsets), dtype, shape, release, receiver, table, bool(registered))
        frames._packed = (blob[:int(offsets[-1])], offsets)
        return frames

    @property
    def nbytes(self) -> int:
        """The blobs' bytes in all (what goes to the device)."""
        return int(self.sizes.sum())

    def pack(self, into: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``(blob, offsets)``: the blobs end to end in ``into`` (uint8, at least :attr:`nbytes`;
        page-locked memory on the way to the device) or a new array, and their offsets (n + 1,)."""
        if self._packed is not None:
            blob, offsets = self._packed
            if into is None:
                return blob, offsets
            if into.size < blob.size:
                raise InputError(f"CompressedFrames.pack: {into.size} bytes given for {blob.size}")
            np.copyto(into[:blob.size], blob)
            return into[:blob.size], offsets
        offsets = np.zeros(len(self.blobs) + 1, np.int64)
        np.cumsum(self.sizes, out=offsets[1:])
        total = int(offsets[-1])
        if into is None:
            into = np.empty(total, np.uint8)
        elif into.size < total:
            raise InputError(f"CompressedFrames.pack: {into.size} bytes given for {total}")
        view = memoryview(into)
        # memoryview slices: the copy is the cost, not the Python (a NumPy slice assignment a blob
        # took twice the time, docs/ssb-performance.md)
        for b, lo, hi in zip(self.blobs, offsets[:-1].tolist(), offsets[1:].tolist()):
            view[lo:hi] = b
        return into[:total], offsets

    def decode(self) -> np.ndarray:
        """The frames (n, det_row, det_col) decoded on the host (Numba, in parallel)."""
        from qora.ssb.live.bslz4_numba import decode_batch

        try:
            flat = decode_batch(self.blobs, self.dtype, self.shape[0] * self.shape[1])
        except ValueError as error:
            raise FileFormatError(f"a DECTRIS image: {error}") from None
        return flat.reshape((len(self.index),) + self.shape).astype(self.dtype, copy=False)


class _PackedBlobs(Sequence):
    """The blobs of a packed batch (``blob``, ``offsets``) as a sequence of memoryview slices, each
    made when it is read."""

    def __init__(self, blob: np.ndarray, offsets: np.ndarray) -> None:
        self.view, self.offsets = memoryview(blob), offsets

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        i = operator.index(i)
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(f"blob {i} of a batch of {len(self)}")
        return self.view[int(self.offsets[i]):int(self.offsets[i + 1])]


@dataclass
class BlockTable:
    """Where each LZ4 block of a batch lies: ``starts`` (n, nblocks) int64 offsets of its data in
    the packed blob, ``sizes`` (n, nblocks) int32 compressed bytes, ``tails`` (n,) int64 offsets of
    each frame's raw last ``count % 8`` elements; ``block_bytes`` the header's block size, ``whole``
    the elements in blocks (``count`` rounded down to a multiple of 8)."""

    starts: np.ndarray
    sizes: np.ndarray
    tails: np.ndarray
    block_bytes: int
    whole: int
    count: int
    itemsize: int

    @property
    def nblocks(self) -> int:
        return self.starts.shape[1]

    @staticmethod
    def stored_bytes(n: int, nblocks: int) -> int:
        """Bytes :meth:`store` writes for ``n`` frames of ``nblocks`` blocks (starts, tails, sizes)."""
        return 8 * n * nblocks + 8 * n + 4 * n * nblocks

    def store(self, into: np.ndarray) -> tuple:
        """Write the arrays into ``into`` (uint8, 8-byte aligned, :meth:`stored_bytes` long; a
        receiver's shared-memory slot); returns what :meth:`stored` needs to view them again
        (plain integers, to pass between processes)."""
        n, nblocks = self.starts.shape
        starts, tails, sizes = _stored_views(into, n, nblocks)
        starts[...], tails[...], sizes[...] = self.starts, self.tails, self.sizes
        return (n, nblocks, self.block_bytes, self.whole, self.count, self.itemsize)

    @classmethod
    def stored(cls, buffer: np.ndarray, meta: tuple) -> "BlockTable":
        """The table :meth:`store` wrote into ``buffer`` (views, not copies), from its ``meta``."""
        n, nblocks, block_bytes, whole, count, itemsize = (int(v) for v in meta)
        starts, tails, sizes = _stored_views(buffer, n, nblocks)
        return cls(starts, sizes, tails, block_bytes, whole, count, itemsize)


def _stored_views(buffer: np.ndarray, n: int, nblocks: int):
    """starts (n, nblocks) int64, tails (n,) int64, sizes (n, nblocks) int32 laid end to end in
    ``buffer`` (the 8-byte arrays first, so that each stays aligned)."""
    need = BlockTable.stored_bytes(n, nblocks)
    if buffer.size < need:
        raise InputError(f"a block table of {n} frames x {nblocks} blocks needs {need} bytes, {buffer.size} given")
    starts = np.ndarray((n, nblocks), np.int64, buffer, 0)
    tails = np.ndarray(n, np.int64, buffer, 8 * n * nblocks)
    sizes = np.ndarray((n, nblocks), np.int32, buffer, 8 * n * nblocks + 8 * n)
    return starts, tails, sizes


@numba.njit(cache=True, nogil=True, parallel=True)
def _scan(blob, offsets, count, itemsize, block_bytes, starts, sizes, tails, status):
    n, nblocks = starts.shape
    whole = (count // 8) * 8 * itemsize
    for f in numba.prange(n):
        lo, hi = offsets[f], offsets[f + 1]
        if hi - lo < 12:
            status[f] = 1
            continue
        total = big_endian(blob, lo, 8)
        block = big_endian(blob, lo + 8, 4)
        if total != count * itemsize or block != block_bytes:
            status[f] = 1
            continue
        pos = lo + 12
        for k in range(nblocks):
            if pos + 4 > hi:
                status[f] = 2
                break
            size = big_endian(blob, pos, 4)
            if size > hi - pos - 4:
                status[f] = 2
                break
            starts[f, k] = pos + 4
            sizes[f, k] = size
            pos += 4 + size
        if status[f] == 0 and pos + total - whole > hi:
            status[f] = 2
        tails[f] = pos


def block_table(blob: np.ndarray, offsets: np.ndarray, *, dtype, count: int) -> BlockTable:
    """The :class:`BlockTable` of a packed batch (``blob``, ``offsets`` from
    :meth:`CompressedFrames.pack`) of frames of ``count`` elements of ``dtype``. Every frame must
    hold ``count`` elements in blocks of the first frame's block size; raises
    :class:`FileFormatError` naming the first frame that does not (or whose blocks run past it)."""
    itemsize = np.dtype(dtype).itemsize
    n = len(offsets) - 1
    if n < 1:
        raise InputError("block_table: an empty batch")
    if offsets[1] - offsets[0] < HEADER:
        raise FileFormatError("frame 0 of the batch is shorter than a bitshuffle-LZ4 header")
    block_bytes = int(big_endian(blob, int(offsets[0]) + 8, 4))
    if block_bytes == 0 or block_bytes % (8 * itemsize) or block_bytes > 1 << 16:
        raise FileFormatError(f"a bitshuffle-LZ4 block size of {block_bytes} bytes: expected a multiple of "
                              f"{8 * itemsize} up to 65536")
    whole = (count // 8) * 8
    nblocks = -(-whole * itemsize // block_bytes)
    starts = np.zeros((n, nblocks), np.int64)
    sizes = np.zeros((n, nblocks), np.int32)
    tails = np.zeros(n, np.int64)
    status = np.zeros(n, np.int8)
    _scan(blob, offsets, count, itemsize, block_bytes, starts, sizes, tails, status)
    if status.any():
        bad = int(np.flatnonzero(status)[0])
        what = "header" if status[bad] == 1 else "block sizes"
        raise FileFormatError(f"frame {bad} of the batch is not a bitshuffle-LZ4 blob of {count} {np.dtype(dtype)} "
                              f"values in blocks of {block_bytes} bytes ({what})")
    return BlockTable(starts, sizes, tails, block_bytes, whole, count, itemsize)


def store_block_table(row: np.ndarray, head: int, nbytes: int, offsets: np.ndarray, dtype, count: int, *,
                      align: int = 64):
    """The :class:`BlockTable` of the batch packed in slot ``row`` (uint8; its blob at ``head``,
    ``nbytes`` long, ``offsets`` (n + 1,) within the blob), stored after the blob at the next
    multiple of ``align`` bytes. Returns what the consumer needs to view it (the byte offset, then
    :meth:`BlockTable.stored`'s meta), or None where the batch is malformed (the consumer makes
    the table again and names the frame) or the slot has no room left.

    Why a receiver calls it: the table is a pass over every frame's header and block sizes (0.1-0.3
    us a frame) that the one reconstructing process would otherwise make for all the receivers;
    each receiver makes its share, in parallel (docs/ssb-performance.md, "Live: several receiving
    processes")."""
    try:
        table = block_table(row[head:head + nbytes], offsets, dtype=dtype, count=count)
    except (FileFormatError, InputError):
        return None
    at = (head + nbytes + align - 1) // align * align
    need = BlockTable.stored_bytes(*table.starts.shape)
    if at + need > row.size:
        return None
    return (at,) + table.store(row[at:at + need])


def slot_map(gathered: np.ndarray, count: int) -> np.ndarray:
    """(count,) int32: the column of the gathered pixels each flat detector index goes to, or -1."""
    slot = np.full(count, -1, np.int32)
    slot[np.asarray(gathered, np.int64)] = np.arange(len(gathered), dtype=np.int32)
    return slot


# -- the kernel's host twin ------------------------------------------------------------------------
@numba.njit(cache=True, nogil=True)
def _lz4_warp(src, start, csize, dst, size):
    """lz4_warp of bslz4.cu: the token parse (every lane's, the same), each copy split over the 32
    lanes in the kernel's order (lane t takes bytes t, t + 32, ...). Returns True when the block
    decodes to exactly ``size`` bytes."""
    i, o = 0, 0
    while i < csize:
        token = src[start + i]
        i += 1
        lit, i = lz4_length(src, np.int64(start) + i, np.int64(start) + csize, token >> 4)
        i -= np.int64(start)
        if lit < 0 or o + lit > size or i + lit > csize:
            return False
        for lane in range(LANES):
            for t in range(lane, lit, LANES):
                dst[o + t] = src[start + i + t]
        i += lit
        o += lit
        if i >= csize:
            break
        if i + 2 > csize:
            return False
        offset = src[start + i] | (src[start + i + 1] << 8)
        i += 2
        match, i = lz4_length(src, np.int64(start) + i, np.int64(start) + csize, token & 15)
        i -= np.int64(start)
        if match < 0:
            return False
        match += 4
        if offset == 0 or offset > o or o + match > size:
            return False
        # the lanes read only bytes before o: the kernel's lanes run in any order, and so may these
        for lane in range(LANES - 1, -1, -1):
            for t in range(lane, match, LANES):
                dst[o + t] = dst[o - offset + (t % offset)]
        o += match
    return o == size


_M1, _M2, _M3 = np.uint64(0x00AA00AA00AA00AA), np.uint64(0x0000CCCC0000CCCC), np.uint64(0x00000000F0F0F0F0)


@numba.njit(cache=True, nogil=True)
def _transpose8(x):
    t = (x ^ (x >> np.uint64(7))) & _M1
    x = x ^ t ^ (t << np.uint64(7))
    t = (x ^ (x >> np.uint64(14))) & _M2
    x = x ^ t ^ (t << np.uint64(14))
    t = (x ^ (x >> np.uint64(28))) & _M3
    return x ^ t ^ (t << np.uint64(28))


@numba.njit(cache=True, nogil=True, parallel=True)
def _gather(blob, starts, sizes, tails, slot, block_bytes, whole, count, itemsize, frames_per_cta, out, sums,
            status):
    n, nblocks = starts.shape
    per_block = block_bytes // itemsize
    kblocks = max(nblocks, 1)
    ctas_y = (n + frames_per_cta - 1) // frames_per_cta
    # each CTA's sums apart (the kernel's shared array), added into ``sums`` after the parallel loop
    partial = np.zeros((kblocks * ctas_y, per_block), np.uint64)
    tail_sums = np.zeros((ctas_y, 8), np.uint64)
    for cta in numba.prange(kblocks * ctas_y):
        k, y = cta % kblocks, cta // kblocks  # blockIdx.x, blockIdx.y
        f0, f1 = y * frames_per_cta, min(n, (y + 1) * frames_per_cta)
        acc = partial[cta]  # (e, q): element 8 q + e at e nb + q
        buf = np.empty(block_bytes, np.uint8)  # a warp's shared buffer (one warp at a time here)
        if k < nblocks:
            first = k * per_block
            m = min(per_block, whole - first)
            nb = m // 8
            size = m * itemsize
            for warp in range(WARPS):
                for f in range(f0 + warp, f1, WARPS):
                    if not _lz4_warp(blob, starts[f, k], sizes[f, k], buf, size):
                        status[f] = 2
                        continue
                    for lane in range(LANES):
                        for q in range(lane, nb, LANES):
                            v = np.zeros(8, np.uint64)
                            for b in range(itemsize):
                                x = np.uint64(0)
                                for j in range(8):
                                    x |= np.uint64(buf[(8 * b + j) * nb + q]) << np.uint64(8 * j)
                                x = _transpose8(x)
                                for e in range(8):
                                    v[e] |= ((x >> np.uint64(8 * e)) & np.uint64(255)) << np.uint64(8 * b)
                            for e in range(8):
                                acc[e * nb + q] += v[e]
                                s = slot[first + 8 * q + e]
                                if s >= 0:
                                    out[f, s] = v[e]
        if k == kblocks - 1:  # the raw last elements
            rest = count - whole
            for f in range(f0, f1):
                for lane in range(rest):
                    at = tails[f] + lane * itemsize
                    v = np.uint64(0)
                    for b in range(itemsize):
                        v |= np.uint64(blob[at + b]) << np.uint64(8 * b)
                    tail_sums[y, lane] += v
                    s = slot[whole + lane]
                    if s >= 0:
                        out[f, s] = v
    return partial, tail_sums


def gather_host(blob: np.ndarray, table: BlockTable, slot: np.ndarray, *, out: np.ndarray, sums: np.ndarray,
                frames_per_cta: int = 32) -> None:
    """The kernel ``bslz4_gather`` on the host: the gathered pixels of each frame of the packed
    batch into ``out`` (n, gathered) float (the columns ``slot`` names), the frames' pixels added
    into ``sums`` (count,) uint64. Raises :class:`FileFormatError` naming a malformed frame."""
    n = table.starts.shape[0]
    status = np.zeros(n, np.int8)
    partial, tails = _gather(blob, table.starts, table.sizes, table.tails, slot, table.block_bytes, table.whole,
                             table.count, table.itemsize, int(frames_per_cta), out, sums, status)
    if status.any():
        raise FileFormatError(f"frame {int(np.flatnonzero(status)[0])} of the batch has a malformed LZ4 block")
    kblocks = max(table.nblocks, 1)
    per_block = table.block_bytes // table.itemsize
    for k in range(table.nblocks):  # the kernel's flush: (e, q) back to element 8 q + e
        m = min(per_block, table.whole - k * per_block)
        nb = m // 8
        block = partial[k::kblocks, :m].sum(0, dtype=np.uint64)
        sums[k * per_block:k * per_block + m] += block.reshape(8, nb).T.reshape(-1)
    rest = table.count - table.whole
    sums[table.whole:] += tails.sum(0, dtype=np.uint64)[:rest]
