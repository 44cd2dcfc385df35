"""Frames as they arrive from a detector: batches of frames with their acquisition indices, the
placement of each on the scan (row-major: index = row * scan_cols + col), and the bookkeeping that
detects dropped, repeated, late and out-of-order frames instead of misplacing them.

A source (:class:`Source`) yields :class:`Frames`; :class:`Placement` checks each batch's indices.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from qora.io.errors import FileFormatError, InputError

__all__ = ["Frames", "Source", "MemorySource", "Placement", "FrameReport", "check_scan_shape", "bound_scan",
           "MAX_SCAN_FRAMES", "bound_detector", "check_declared_frames", "check_header_scan", "MAX_FRAME_PIXELS"]


@dataclass
class Frames:
    """A batch of frames: ``index`` (n,) int64, each frame's acquisition index from 0 (the
    detector's own frame number, so a gap is a dropped frame); ``data`` (n, det_row, det_col) counts.
    ``release``: None, or a callable the consumer calls once it has read ``data`` (a view of a
    receiver's shared-memory slot, :mod:`qora.ssb.live.receivers`: the call hands the slot back);
    who keeps such frames longer must copy them. ``receiver``: which of several receiving
    processes took them (0 for a single receiver): each one's frames come in the detector's order,
    the receivers' batches interleave (:class:`Placement`)."""

    index: np.ndarray
    data: np.ndarray
    release: object = field(default=None, repr=False, compare=False)
    receiver: int = 0

    def __post_init__(self) -> None:
        self.index = np.asarray(self.index, np.int64).reshape(-1)
        if self.data.ndim != 3 or self.data.shape[0] != len(self.index):
            raise InputError(f"Frames: data must be (frames, det_row, det_col) with one index per frame, got data "
                             f"{self.data.shape} and {len(self.index)} indices")


def check_scan_shape(where: str, given, frames: int, *, header: str = "acquisition header", shape=None) -> None:
    """Refuse a scan shape ``given`` (rows, cols) that disagrees with the ``frames`` a stream's
    header (or a file) says the scan has: its frames would be placed on the wrong grid and the rest
    dropped without a word (there is no crop option: a scan shape must cover the whole acquisition).
    ``frames`` 0 or None: the header does not say (nothing to check); ``shape``: the header's own
    (rows, cols), named in the message where known."""
    if given is None or not frames or int(frames) <= 0:
        return
    rows, cols = (int(v) for v in given)
    if rows * cols != int(frames):
        own = f" ({int(shape[0])} x {int(shape[1])})" if shape is not None else ""
        raise InputError(f"{where}: the scan shape given, {rows} x {cols} = {rows * cols} frames, disagrees with the "
                         f"{header}'s {int(frames)} frames{own}; give a scan shape of {int(frames)} frames "
                         "(--scan-shape ROWS COLS), or none to take the header's")


MAX_SCAN_FRAMES = 1 << 26  # an 8192 x 8192 scan: four times the largest 4D-STEM scans recorded (4096 x 4096)


def bound_scan(where: str, shape, header: str = "acquisition header") -> tuple:
    """``shape`` (rows, cols) from a stream's header (a peer on the network declares it), refused
    beyond :data:`MAX_SCAN_FRAMES` frames before the scan's bookkeeping is allocated for it."""
    rows, cols = (int(v) for v in shape)
    if rows < 1 or cols < 1 or rows * cols > MAX_SCAN_FRAMES:
        raise InputError(f"{where}: the {header} declares a scan of {rows} x {cols} frames; a scan is 1 to "
                         f"{MAX_SCAN_FRAMES} frames (8192 x 8192): a damaged header, or give the scan shape "
                         "(--scan-shape ROWS COLS)")
    return rows, cols


class Source:
    """A stream of :class:`Frames` of one scan: iterate it (the iteration ends with the scan or
    when the stream stops); ``scan_shape`` (rows, cols) and ``detector_shape`` (det_row, det_col)
    are known once the stream's header is read (:meth:`open`), ``metadata`` holds what the header
    says. Use as a context manager, or call :meth:`close`."""

    scan_shape: tuple | None = None
    detector_shape: tuple | None = None

    def __init__(self) -> None:
        self.metadata: dict = {}

    def open(self) -> None:
        """Connect and read the stream's header (scan and detector shape)."""

    def _header_to_read(self, connected: bool) -> bool:
        """:meth:`open`'s first step for a source with a ``connect()`` (the connection made apart from the
        header: :func:`qora.ssb.live.run_live` connects, prepares the device, then opens): False when the source
        is open already, else connected now if it was not and True (its header is to be read)."""
        if connected and not getattr(self, "_headless", False):
            return False
        self.connect()
        self._headless = False
        return True

    def __iter__(self):
        raise NotImplementedError(f"{type(self).__name__} must yield Frames batches (each source does)")

    def close(self) -> None:
        """Release the connection or file."""

    def __enter__(self):
        self.open()
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class MemorySource(Source):
    """Frames from memory, for scripts and tests: ``data`` (scan_row, scan_col, det_row, det_col)
    sent in acquisition order ``batch`` frames at a time, or ``frames``, an iterable of
    ``(index, frame)`` pairs or :class:`Frames` (then ``scan_shape`` and ``detector_shape`` must be
    given). ``fps``: ``data`` sent at that many frames per second (a detector's pace; None: as
    fast as it is taken)."""

    def __init__(self, data=None, *, frames=None, scan_shape=None, detector_shape=None, batch: int = 64,
                 fps: float | None = None) -> None:
        super().__init__()
        if (data is None) == (frames is None):
            raise InputError("MemorySource takes data (a 4D array) or frames (an iterable), one of them")
        if fps is not None and not fps > 0:
            raise InputError(f"fps must be positive (frames per second) or None, got {fps}")
        self.batch, self.fps = int(batch), fps
        if data is not None:
            data = np.asarray(data) if not hasattr(data, "shape") else data
            if data.ndim != 4:
                raise InputError(f"MemorySource: data must be (scan_row, scan_col, det_row, det_col), got {data.shape}")
            self.scan_shape, self.detector_shape = tuple(data.shape[:2]), tuple(data.shape[2:])
        else:
            if scan_shape is None or detector_shape is None:
                raise InputError("MemorySource(frames=...) needs scan_shape and detector_shape")
            self.scan_shape, self.detector_shape = tuple(scan_shape), tuple(detector_shape)
        self._data, self._frames = data, frames

    def __iter__(self):
        if self._data is not None:
            flat = self._data.reshape((-1,) + self.detector_shape)
            t0 = time.perf_counter()
            for start in range(0, flat.shape[0], self.batch):
                stop = min(flat.shape[0], start + self.batch)
                if self.fps:  # a batch is yielded when its last frame would have come from a detector
                    ahead = t0 + stop / self.fps - time.perf_counter()
                    if ahead > 0:
                        time.sleep(ahead)
                yield Frames(np.arange(start, stop), np.asarray(flat[start:stop]))
            return
        for item in self._frames:
            if isinstance(item, Frames):
                yield item
            else:
                index, frame = item
                yield Frames(np.array([index]), np.asarray(frame)[None])


@dataclass
class FrameReport:
    """What became of the frames: counts, and the indices of those not placed."""

    placed: int = 0
    late: list = field(default_factory=list)  # arrived after their row was transformed: added to its transform
    repeated: list = field(default_factory=list)  # an index seen before: the second copy not placed
    out_of_range: list = field(default_factory=list)  # beyond the scan
    out_of_order: int = 0  # arrived before a lower index (placed all the same, by their index)
    # the dropped ones as keys in the order their rows closed: a late frame is taken out in O(1), where
    # a list would be scanned once for every late batch (tens of thousands of entries with receivers behind)
    _dropped: dict = field(default_factory=dict, repr=False)

    @property
    def dropped(self) -> list:
        """Frames that never arrived (their scan positions are marked missing), in the order their rows closed."""
        return list(self._dropped)

    def drop(self, indices) -> None:
        """Record ``indices`` as dropped."""
        self._dropped.update(dict.fromkeys(indices))

    def arrived_late(self, indices) -> None:
        """``indices``, dropped when their rows closed, came after all: placed late, no longer dropped."""
        self.late.extend(indices)
        for i in indices:
            self._dropped.pop(i, None)

    def as_dict(self) -> dict:
        dropped = self.dropped
        return {"placed": self.placed, "dropped": len(dropped), "late": len(self.late),
                "repeated": len(self.repeated), "out_of_range": len(self.out_of_range),
                "out_of_order": self.out_of_order, "dropped_indices": dropped[:100],
                "late_indices": self.late[:100]}

    def __str__(self) -> str:
        d = self.as_dict()
        return (f"{d['placed']} frames placed ({d['late']} of them late, added to their transformed rows), "
                f"{d['dropped']} dropped, {d['repeated']} repeated, "
                f"{d['out_of_range']} beyond the scan, {d['out_of_order']} out of order")


class Placement:
    """Where each frame of a scan goes, and which never came.

    Frames are placed by their index, whatever their order of arrival; a row is *closed* (handed
    on to be transformed) when all its frames are in, or when a frame ``lag_rows`` rows further on
    arrives (the detector has moved on: what is still missing is counted dropped), or at the end. A
    frame for a closed row is *late*: it is placed all the same (the row's transform is linear, so
    the frame is added to it: :meth:`qora.ssb.live.LiveG.add`), listed in ``report.late`` and no
    longer counted dropped. Why: with several receivers, one that is scheduled late can be many
    rows behind the others (its socket's buffered frames), and rejecting its frames lost 58% of a
    128^2 scan with 4 receivers on two cores (docs/ssb-performance.md).

    With several receivers (``receiver`` of :meth:`accept`), the detector deals its frames among
    them, so their batches interleave out of order by up to a batch each (more when one is slower
    to be scheduled): "further on" is then the least of the receivers' highest frames, i.e. a row
    closes when every receiver that has delivered frames has passed it by ``lag_rows`` rows (each
    receiver's own frames are in the detector's order; ``receivers``: how many there are, so
    that none is passed over before its first batch). Out-of-order frames are counted within a
    receiver's stream, where they are the detector's (or the network's) reordering.
    """

    def __init__(self, scan_shape, *, lag_rows: int = 2, receivers: int = 1) -> None:
        self.rows, self.cols = (int(v) for v in scan_shape)
        self.lag_rows = max(1, int(lag_rows))
        self.receivers = max(1, int(receivers))
        self.received = np.zeros((self.rows, self.cols), bool)
        self.row_count = np.zeros(self.rows, np.int64)
        self.closed = np.zeros(self.rows, bool)
        self.next_open = 0  # rows below this are closed
        self.highest = -1
        self._highest_of: dict = {}  # receiver -> its highest frame placed
        self.report = FrameReport()

    def accept(self, index: np.ndarray, *, receiver: int = 0, with_late: bool = False):
        """The mask of ``index`` (a batch's frame indices, from ``receiver``) to place; the rest
        are recorded. ``with_late``: also the mask of those placed whose row is already closed
        (a subset of the first), as ``(keep, late)``."""
        index = np.asarray(index, np.int64)
        keep = np.ones(len(index), bool)
        total = self.rows * self.cols
        bad = (index < 0) | (index >= total)
        if bad.any():
            self.report.out_of_range.extend(index[bad].tolist())
            keep &= ~bad
        safe = np.where(bad, 0, index)
        row, col = np.divmod(safe, self.cols)
        seen = keep & self.received[row, col]
        # a repeat within the batch itself
        _, first = np.unique(safe, return_index=True)
        dup = np.ones(len(index), bool)
        dup[first] = False
        seen |= keep & dup
        if seen.any():
            self.report.repeated.extend(index[seen].tolist())
            keep &= ~seen
        late = keep & self.closed[row]
        if late.any():  # placed into their transformed rows: no longer dropped
            self.report.arrived_late(index[late].tolist())
        kept = index[keep]
        if len(kept):
            mine = self._highest_of.get(receiver, -1)
            running = np.maximum.accumulate(np.concatenate([[mine], kept]))[:-1]
            self.report.out_of_order += int((kept < running).sum())
            self._highest_of[receiver] = max(mine, int(kept.max()))
            self.highest = max(self.highest, int(kept.max()))
            self.received[row[keep], col[keep]] = True
            np.add.at(self.row_count, row[keep], 1)
            self.report.placed += len(kept)
        return (keep, late) if with_late else keep

    def rows_to_close(self, *, end: bool = False) -> list[int]:
        """The open rows that are complete, or that the stream has passed by ``lag_rows`` (or all
        open rows at the ``end``), closed now; their missing frames are recorded as dropped."""
        out = []
        # every receiver is past it (before each has delivered, only complete rows close)
        passed = min(self._highest_of.values()) if len(self._highest_of) >= self.receivers else -1
        top = passed // self.cols if passed >= 0 else -1
        for r in np.flatnonzero(~self.closed):
            r = int(r)
            if self.row_count[r] == self.cols or end or r <= top - self.lag_rows:
                if self.row_count[r] < self.cols:
                    self.report.drop((r * self.cols + np.flatnonzero(~self.received[r])).tolist())
                self.closed[r] = True
                out.append(r)
            elif r > top:
                break
        while self.next_open < self.rows and self.closed[self.next_open]:
            self.next_open += 1
        return out

    def close(self, row: int) -> None:
        """Close ``row`` now (its ring slot is needed by a row further on): what is missing is dropped."""
        if not self.closed[row]:
            if self.row_count[row] < self.cols:
                self.report.drop((row * self.cols + np.flatnonzero(~self.received[row])).tolist())
            self.closed[row] = True
            while self.next_open < self.rows and self.closed[self.next_open]:
                self.next_open += 1

    @property
    def complete_rows(self) -> int:
        """Rows closed from the first on, with no gap: the partial scan a refresh can show."""
        return self.next_open


MAX_FRAME_PIXELS = 1 << 25  # the largest DECTRIS detector (EIGER2 16M, 4148 x 4362 = 18.1 Mpixel), with room


def bound_detector(source, rows, cols) -> tuple:
    """The detector's (rows, cols) a stream's header declares, refused unless 1 to
    :data:`MAX_FRAME_PIXELS` pixels (a peer's word is not allocated on)."""
    try:
        rows, cols = int(rows), int(cols)
    except (TypeError, ValueError):
        raise FileFormatError(f"{source!r}: the header's detector size {rows!r} x {cols!r} is not two whole "
                              "numbers") from None
    if rows < 1 or cols < 1 or rows * cols > MAX_FRAME_PIXELS:
        raise FileFormatError(f"{source!r}: the header declares a detector of {rows} x {cols} pixels; a DECTRIS "
                              f"detector has 1 to {MAX_FRAME_PIXELS} (a damaged header, or not a DECTRIS stream)")
    return rows, cols


def check_declared_frames(source, declared, detector_shape) -> None:
    """Refuse frames whose declared shape (rows, cols) and type (a peer says them: ``declared``, a set of
    ((rows, cols), numpy dtype)) are not the stream's detector's, before anything is allocated or decoded."""
    for (rows, cols), dtype in declared:
        if (rows, cols) != tuple(detector_shape):
            raise FileFormatError(f"{source!r}: a frame declares {rows} x {cols} pixels, the stream's detector is "
                                  f"{detector_shape[0]} x {detector_shape[1]}: the stream is ended")
        if dtype.kind not in "uif" or dtype.itemsize > 8:
            raise FileFormatError(f"{source!r}: a frame declares pixels of type {dtype}, not counts (unsigned or "
                                  "signed integers, or floats, of 1 to 8 bytes): the stream is ended")


def check_header_scan(source, scan_shape, ntrigger, nimages, user_shape=None) -> None:
    """A scan shape given that disagrees with a DECTRIS header's frames (ntrigger x nimages, or stream v2's
    ``user_data`` scan shape) is refused (:func:`check_scan_shape`); nothing to check where none is given or
    the header does not say."""
    if scan_shape is None:
        return
    try:
        shape = tuple(int(v) for v in user_shape) if user_shape is not None else (int(ntrigger or 0), int(nimages or 0))
    except (TypeError, ValueError):
        return
    if len(shape) == 2 and min(shape) > 0:
        check_scan_shape(repr(source), scan_shape, shape[0] * shape[1], header="stream's header", shape=shape)
