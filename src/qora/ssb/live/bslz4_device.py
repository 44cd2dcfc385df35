"""DECTRIS frames decoded on the device: the compressed blobs of each batch go over PCIe (about
6.5x fewer bytes than the frames) and the kernel ``bslz4_gather`` (``qora/ssb/kernels/bslz4.cu``)
decodes them into the gathered bright-field pixels and the mean pattern's sums, so that the
receiving host only parses messages and copies the compressed bytes once (docs/ssb-performance.md,
"Live: the frames decoded on the device").

Double buffering: batch k's blobs are packed into page-locked buffer k % 2 (or, packed already in a
receiver's shared-memory slot registered as page-locked, copied from there), copied on stream k % 2
and decoded there; batch k + 1's copy (on the other stream) overlaps batch k's decode. The caller's
stream waits for the decode (an event), so the scatter into the rows that follows needs no host
synchronisation; the host waits only before reusing a buffer, for the batch two back.
"""

from __future__ import annotations

import numpy as np

from qora.io.errors import FileFormatError, InputError
from qora.ssb.live.bslz4_batch import CompressedFrames, block_table, slot_map

__all__ = ["DeviceDecoder", "SHARED_LIMIT"]

SHARED_LIMIT = 227 * 1024  # dynamic shared memory a CTA may opt into (H100 / H200)


def _device_empty(xp, size: int, dtype, stream):
    """A device array from ``stream``'s share of CuPy's memory pool. The pool hands a block freed on
    a stream to that stream's next allocation at once (stream-ordered reuse): allocated on the
    caller's stream, a buffer could still be in use by the caller's queued kernels when ``stream``
    copies into it (the copies do not wait for the caller's stream, so that they overlap)."""
    with stream:
        return xp.empty(size, dtype)


class _Staged:
    """A page-locked host array and its device twin, grown as needed, for one of the two slots."""

    def __init__(self, backend, dtype) -> None:
        self.backend, self.dtype = backend, np.dtype(dtype)
        self.host = self.device = None

    def put(self, values: np.ndarray, stream):
        """``values`` through the page-locked array to the device on ``stream`` (asynchronous):
        the device view, of ``values``' shape."""
        size = values.size
        if self.host is None or self.host.size < size:
            size_alloc = max(size, 2 * (0 if self.host is None else self.host.size))
            self.host = self.backend.host_empty(size_alloc, self.dtype)
            self.device = _device_empty(self.backend.xp, size_alloc, self.dtype, stream)
        self.host[:size] = values.reshape(-1)
        self.device[:size].set(self.host[:size], stream=stream)
        return self.device[:size].reshape(values.shape)


class DeviceDecoder:
    """Decode batches of :class:`CompressedFrames` of ``shape`` (det_row, det_col) on the CUDA
    ``backend`` into their pixels at ``gathered`` (flat detector indices, sorted) as ``real``
    (float32 or float64), summing every pixel of every frame into :attr:`sums` (det_row * det_col,)
    uint64 on the device."""

    def __init__(self, backend, *, shape, gathered: np.ndarray, real=np.float32, frames_per_cta: int = 32) -> None:
        if not backend.is_cuda:
            raise InputError("frames are decoded on the device on the CUDA backend only (decode='host' on the CPU)")
        self.backend = backend
        xp = self.xp = backend.xp
        self.shape = tuple(shape)
        self.count = self.shape[0] * self.shape[1]
        self.gathered = len(gathered)
        self.real = np.dtype(real)
        # a CTA sums its frames' counts per pixel in 32 bits before the 64-bit flush: 65,537 frames of
        # 16-bit counts could overflow it; far more than a CTA should take anyway
        if not 1 <= int(frames_per_cta) <= 4096:
            raise InputError(f"frames_per_cta must be in [1, 4096], got {frames_per_cta}")
        self.frames_per_cta = int(frames_per_cta)
        self.slot = xp.asarray(slot_map(gathered, self.count))
        self.sums = xp.zeros(self.count, np.uint64)
        self.frames = 0  # frames decoded (summed)
        self._streams = [xp.cuda.Stream(non_blocking=True) for _ in range(2)]
        self._blob = [_Staged(backend, np.uint8) for _ in range(2)]
        self._starts = [_Staged(backend, np.int64) for _ in range(2)]
        self._sizes = [_Staged(backend, np.int32) for _ in range(2)]
        self._tails = [_Staged(backend, np.int64) for _ in range(2)]
        self._status = [None, None]
        self._index = [None, None]  # each slot's frames' acquisition indices, for the error message
        self._done = [None, None]
        self._next = 0
        self.bytes_in = 0  # compressed bytes sent to the device

    def decode(self, frames: CompressedFrames):
        """The gathered pixels (n, gathered) of ``frames`` on the device, ready on the current
        stream (the copy and decode run on a stream of their own, asynchronous to the host)."""
        from qora.ssb.kernels import bslz4_gather, bslz4_shared_bytes

        if frames.shape != self.shape:
            raise InputError(f"frames of {frames.shape} pixels, the decoder's detector is {self.shape}")
        xp = self.xp
        i = self._next
        self._next ^= 1
        self._wait(i)
        stream = self._streams[i]
        direct = bool(frames.registered and frames._packed is not None)
        if direct:  # already packed in page-locked memory (a registered slot): copied from there
            blob, offsets = frames.pack()
            d_blob = self._device_blob(i, blob.size, stream)
        else:
            blob, offsets = frames.pack(into=self._pinned_blob(i, frames.nbytes, stream))
            d_blob = self._blob[i].device[:blob.size]
        table = frames.table
        if table is None:
            table = block_table(blob, offsets, dtype=frames.dtype, count=self.count)
        elif ((table.count, table.itemsize, table.starts.shape[0])
              != (self.count, frames.dtype.itemsize, len(offsets) - 1)):
            raise InputError(f"a block table of {table.starts.shape[0]} frames of {table.count} x {table.itemsize} "
                             f"bytes for {len(offsets) - 1} frames of {self.count} x {frames.dtype.itemsize}")
        shared = bslz4_shared_bytes(block_bytes=table.block_bytes, itemsize=table.itemsize)
        if shared > SHARED_LIMIT:
            raise FileFormatError(f"bitshuffle-LZ4 blocks of {table.block_bytes} bytes need {shared} bytes of shared "
                                  f"memory a CTA on the device (at most {SHARED_LIMIT}); decode on the host "
                                  "(decode='host')")
        n = len(frames.index)
        current = xp.cuda.get_current_stream()
        out = xp.empty((n, self.gathered), self.real)  # on the caller's stream, which uses it
        ready = current.record()  # out's memory is free on the caller's stream from here
        d_blob.set(blob, stream=stream)
        if direct:
            # the slot goes back to its receiver (which overwrites it) only once this copy is done:
            # the consumer calls release after decode returns, and waits here for the copy alone
            copied = stream.record()
            release = frames.release

            def after_copy(copied=copied, release=release) -> None:
                copied.synchronize()
                if release is not None:
                    release()

            frames.release = after_copy
        starts = self._starts[i].put(table.starts, stream)
        sizes = self._sizes[i].put(table.sizes, stream)
        tails = self._tails[i].put(table.tails, stream)
        with stream:
            status = self._status[i] = xp.zeros(n, np.int32)
            stream.wait_event(ready)
            bslz4_gather(blob=d_blob, starts=starts, sizes=sizes, tails=tails, slot=self.slot,
                         block_bytes=table.block_bytes, whole=table.whole, count=self.count, itemsize=table.itemsize,
                         out=out, sums=self.sums, status=status, frames_per_cta=self.frames_per_cta)
            self._done[i] = stream.record()
        self._index[i] = frames.index
        current.wait_event(self._done[i])
        self.frames += n
        self.bytes_in += blob.size
        return out

    def _device_blob(self, i: int, nbytes: int, stream):
        """Buffer ``i``'s device array for ``nbytes`` of blob (no page-locked twin: the blob is
        copied from registered memory where it lies)."""
        staged = self._blob[i]
        if staged.device is None or staged.device.size < nbytes:
            size = max(nbytes, 2 * (0 if staged.device is None else staged.device.size))
            staged.device = _device_empty(self.xp, size, np.uint8, stream)
        return staged.device[:nbytes]

    def _pinned_blob(self, i: int, nbytes: int, stream) -> np.ndarray:
        staged = self._blob[i]
        if staged.host is None or staged.host.size < nbytes:
            size = max(nbytes, 2 * (0 if staged.host is None else staged.host.size))
            staged.host = self.backend.host_empty(size, np.uint8)
            staged.device = _device_empty(self.xp, size, np.uint8, stream)
        return staged.host

    def _wait(self, i: int) -> None:
        """Wait for slot ``i``'s last batch (its buffers are reused next); raise if it was malformed."""
        if self._done[i] is None:
            return
        self._done[i].synchronize()
        self._done[i] = None
        status = self._status[i].get()
        if status.any():
            bad = int(np.flatnonzero(status)[0])
            raise FileFormatError(f"the DECTRIS frame {int(self._index[i][bad])} has a malformed LZ4 block (decoded "
                                  "on the device)")

    def synchronize(self) -> None:
        """Wait for every batch handed to the device; raise for a malformed one."""
        for i in (0, 1):
            self._wait(i)

    def mean_sum(self) -> np.ndarray:
        """The sums of the frames decoded so far, (det_row, det_col) float64 on the host."""
        self.synchronize()
        return self.sums.get().astype(np.float64).reshape(self.shape)
