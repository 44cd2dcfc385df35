"""G(Q, k) built while the scan runs: each frame's bright-field pixels gathered as it arrives, each
scan row transformed along the fast scan axis (a real FFT over its columns) as soon as it is
closed, and the slow-axis transform of the rows so far done only when a result is asked for.

Why this split (docs/ssb-performance.md, "Live"): the row transform needs one row of frames, so it
runs at the detector's pace with a few rows of buffer; the slow-axis transform needs every row,
and doing it once per refresh costs O(rows log rows) per column and pixel, where a direct DFT
accumulated row by row would cost O(rows^2) in all (4 PFLOP/s at 120 kHz and 8,765 pixels).

The bright-field disk is fitted from the first ``calibration_rows`` rows; the pixels gathered are
those within the disk plus a margin (``margin``), so that the disk refitted later from the running
mean pattern (a refresh, the end) selects a subset of pixels already gathered. Rows are kept in
counts, unnormalised: the level (the mean count of a bright-field pixel) and the pixel set are
applied when G is made, from the same running mean pattern, so a refinement changes every row
alike. At the end G equals :class:`qora.ssb.Session`'s on the same frames.
"""

from __future__ import annotations

import time
import warnings

import numpy as np

from qora.io.errors import InputError
from qora.io.validate import integer, nonnegative
from qora.ssb.detector import DetectorFit, bright_field_pixels, check_level, check_settings, fit_detector_from_mean
from qora.ssb.optics import wavelength
from qora.ssb.live.bslz4_batch import CompressedFrames
from qora.ssb.live.frames import Frames, Placement
from qora.ssb.live.ingest import Staging, ingest, warm
from qora.ssb.session import Session

# the share of the device's free memory the row buffers may take beyond the least ring: a receiver scheduled late
# by more rows than the ring holds finds its rows' slots taken and closed, and each of its frames then takes the
# late path (a product into its transformed row). At 3% (about 105 rows of a 512^2 scan on a 192^2 detector on an
# H100), 18-77k of the scan's frames were late in warm runs and one run of five fell to 118k frames/s; 15% holds
# the whole scan's rows there (10 GB beside G's 10 GB; docs/ssb-performance.md, section 26)
RING_SHARE = 0.15

__all__ = ["LiveG", "session_from_spectrum"]


def session_from_spectrum(G, *, bf_index, k, level: float, bright_field, detector: DetectorFit, kv: float,
                          alpha_mrad: float, scan_step: float, rotation: float = 0.0, backend="auto",
                          chunk: int = 512) -> Session:
    """A :class:`qora.ssb.Session` of a G(Q, k) made here rather than from the data: the attributes
    ``Session.__init__`` sets, each from what :class:`LiveG` has (a test holds the set of attributes
    to an offline session's, so a new one there cannot be missed here).

    ``G`` (scan_row, scan_col // 2 + 1, nbf), complex, normalised by ``level``, on the backend's
    device; ``bf_index`` (nbf,) the pixels' flat detector indices and ``k`` (nbf, 2) their (ky, kx)
    (1/A), as :func:`qora.ssb.detector.bright_field_pixels` gives them; ``bright_field``
    (scan_row, scan_col) the summed bright field over ``level``."""
    from qora.backend import resolve

    session = Session.__new__(Session)
    kv, alpha_mrad, scan_step, rotation = check_settings(kv, alpha_mrad, scan_step, rotation)
    session.backend = resolve(backend)
    session.xp = session.backend.xp
    session.kv, session.alpha_mrad, session.scan_step, session.rotation = kv, alpha_mrad, scan_step, rotation
    session.wavelength = wavelength(kv)
    session.detector = detector
    session.bright_field = np.asarray(bright_field)
    session.scan_shape = tuple(session.bright_field.shape)
    if G.shape != (session.scan_shape[0], session.scan_shape[1] // 2 + 1, len(bf_index)):
        raise InputError(f"G {G.shape} does not match the scan {session.scan_shape} and {len(bf_index)} pixels")
    session.chunk = int(chunk)
    session.bf_index, session.k = np.asarray(bf_index), np.asarray(k)
    session.bf_count, session.pixels = len(session.bf_index), None
    session._k = session.xp.asarray(session.k)
    # C order: the CUDA image and fit kernels index G's memory directly (a transform along the slow
    # axis may hand back other strides; on the device that gave wrong images with the right values)
    session.G, session.level = session.xp.ascontiguousarray(G), float(level)
    session.timings = {"prepare_s": 0.0}
    session.memory = {"G_bytes": int(G.nbytes), "G_on": "device" if session.backend.is_cuda else "host",
                      "prepare_peak_bytes": 0}
    return session


def _tukey(n: int, fraction: float) -> np.ndarray:
    """A Tukey window of n points: flat in the middle, cosine tapers over ``fraction`` / 2 of
    the points at each end (``fraction`` 1: a Hann window)."""
    x = (np.arange(n) + 0.5) / n
    edge = max(fraction / 2, 1e-12)
    w = np.ones(n)
    low, high = x < edge, x > 1 - edge
    w[low] = 0.5 * (1 - np.cos(np.pi * x[low] / edge))
    w[high] = 0.5 * (1 - np.cos(np.pi * (1 - x[high]) / edge))
    return w


class LiveG:
    """The rows of G(Q, k) so far, transformed along the scan columns, and the sessions made of them.

    Parameters
    ----------
    scan_shape : (rows, cols)
        The scan; frames are placed by their index, row-major.
    detector_shape : (det_row, det_col)
    kv, alpha_mrad, scan_step, rotation
        As :class:`qora.ssb.Session` (kV, mrad, A, rad).
    detector : DetectorFit, optional
        The bright-field disk, fixed; else fitted from the first ``calibration_rows`` rows and
        refitted from the running mean pattern whenever a session is made.
    calibration_rows : int
        Rows received before the disk is first fitted (the frames wait in host memory till then).
    margin : float
        Pixels gathered beyond the first fit's disk (detector pixels), for the refits to choose from.
    lag_rows : int
        A row is closed when a frame this many rows further on arrives (:class:`Placement`).
    receivers, reorder_frames : int
        Receiving processes whose batches interleave (:class:`Placement`), and how many frames
        out of order that can make them (more row buffers are kept open for it).
    backend, precision
        As :class:`qora.ssb.Session`: on "cuda" the rows are kept on the device, complex64 by default.
    decode : {"auto", "device", "host"}
        Where batches of :class:`CompressedFrames` (a DECTRIS source's bitshuffle-LZ4 frames, kept
        compressed) are decoded: "device" by the CUDA kernel (:mod:`qora.ssb.live.bslz4_device`:
        the blobs go to the device, the decode, gather and mean-pattern sums run there), "host"
        by Numba on the host then the host's pass, "auto" the device on CUDA. The frames of the
        first ``calibration_rows`` rows are decoded on the host either way (the disk is fitted
        from them before the pixels to gather are known).
    """

    def __init__(self, scan_shape, detector_shape, *, kv: float, alpha_mrad: float, scan_step: float,
                 rotation: float = 0.0, detector: DetectorFit | None = None, calibration_rows: int = 4,
                 margin: float = 3.0, lag_rows: int = 2, receivers: int = 1, reorder_frames: int = 0,
                 backend="auto", precision: str = "auto", decode: str = "auto") -> None:
        from qora.backend import resolve

        self.settings = dict(zip(("kv", "alpha_mrad", "scan_step", "rotation"),
                                 check_settings(kv, alpha_mrad, scan_step, rotation)))
        self.scan_shape = tuple(integer("scan_shape", v, low=1) for v in scan_shape)
        self.detector_shape = tuple(integer("detector_shape", v, low=1) for v in detector_shape)
        if detector is not None and not isinstance(detector, DetectorFit):
            raise InputError(f"detector must be a DetectorFit, got {type(detector).__name__}")
        self.fixed_detector = detector
        self.calibration_rows = integer("calibration_rows", calibration_rows, low=1)
        self.margin = nonnegative("margin", margin, unit="pixels")
        self.backend = resolve(backend)
        self.xp = self.backend.xp
        if precision not in ("auto", "single", "double"):
            raise ValueError(f"precision must be 'auto', 'single' or 'double', got {precision!r}")
        single = precision == "single" or (precision == "auto" and self.backend.is_cuda)
        self.real, self.complex = (np.float32, np.complex64) if single else (np.float64, np.complex128)
        if decode not in ("auto", "device", "host"):
            raise InputError(f"decode must be 'auto', 'device' or 'host', got {decode!r}")
        if decode == "device" and not self.backend.is_cuda:
            raise InputError("decode='device' needs the CUDA backend (backend='cuda'); the CPU decodes on the host")
        self.decode_on_device = self.backend.is_cuda and decode != "host"
        self._decoder = None  # the DeviceDecoder, made with the pixels to gather
        self.placement = Placement(self.scan_shape, lag_rows=lag_rows, receivers=receivers)
        warm()  # the host's pass compiled before the first frame comes
        # row buffers: the open rows and a few closing, and the rows that receivers' interleaved
        # batches span (a row waits for the slowest receiver to pass it)
        spread = -(-max(0, int(reorder_frames)) // self.scan_shape[1])
        self.ring = self.placement.lag_rows + 4 + spread
        self._pending: list[Frames] = []  # frames before the first disk fit
        self.mean_sum = None  # sum of the frames received (det_row, det_col), float64, where the rows are
        self.frames_summed = 0
        self.gathered = None  # flat detector indices of the pixels gathered, sorted
        self.G_rows = None  # (scan_row, scan_col // 2 + 1, gathered) unnormalised counts
        # gather_s: the placing of frames (ingest_s, the host's pass, and scatter_s, to the device
        # and into the row buffers); row_fft_s: the row transforms
        # calibrate_s: the first disk fit with the frames that waited for it; decoder_s: making the device decoder
        # place_s: the placement's bookkeeping (which frames to keep, which rows close)
        self.timings = {"gather_s": 0.0, "ingest_s": 0.0, "scatter_s": 0.0, "row_fft_s": 0.0, "calibrate_s": 0.0,
                        "decoder_s": 0.0, "place_s": 0.0}

    # -- arrival --------------------------------------------------------------------------
    @property
    def report(self):
        """The :class:`FrameReport`: frames placed, dropped, late, repeated, out of order."""
        return self.placement.report

    @property
    def rows_done(self) -> int:
        """Scan rows from the first transformed with no gap (the partial scan a session can show)."""
        return self.placement.complete_rows

    def add(self, frames: Frames | CompressedFrames) -> list[int]:
        """Place a batch of frames (decoded, or compressed: the ``decode`` option); transform the
        rows it closes. Returns the rows closed."""
        shape = frames.shape if isinstance(frames, CompressedFrames) else frames.data.shape[1:]
        if tuple(shape) != self.detector_shape:
            raise InputError(f"a frame of {tuple(shape)} pixels, the stream's detector is {self.detector_shape}")
        if isinstance(frames, CompressedFrames):
            if self.gathered is not None and self.decode_on_device:
                return self._place_compressed(frames)
            t0 = time.perf_counter()
            frames = Frames(frames.index, frames.decode(), receiver=frames.receiver)
            self.timings["ingest_s"] += time.perf_counter() - t0
        if self.gathered is None:
            # kept past this call: a view of a receiver's slot (handed back after it) is copied
            data = frames.data if frames.release is None else np.array(frames.data)
            frames = Frames(np.array(frames.index), data, receiver=frames.receiver)
            self._pending.append(frames)
            top = max(int(f.index.max()) for f in self._pending if len(f.index))
            if top + 1 < self.calibration_rows * self.scan_shape[1]:
                return []
            t0 = time.perf_counter()
            closed = self._calibrate()
            self.timings["calibrate_s"] += time.perf_counter() - t0
            return closed
        closed = []
        cols = self.scan_shape[1]
        for start in range(0, len(frames.index), cols):  # at most one row of frames a piece
            part = Frames(frames.index[start:start + cols], frames.data[start:start + cols], receiver=frames.receiver)
            closed += self._place(part)
        return closed

    def finish(self) -> list[int]:
        """The stream has ended: close and transform every open row (what is missing was dropped)."""
        if self.gathered is None:
            if not self._pending:
                raise InputError("the stream ended before any frame arrived")
            self._calibrate()
        rows = self.placement.rows_to_close(end=True)
        self._transform(rows)
        return rows

    def _calibrate(self) -> list[int]:
        xp = self.xp
        pending, self._pending = self._pending, []
        # the mean pattern is summed on the host, where the frames are (qora.ssb.live.ingest)
        self.mean_sum = np.zeros(self.detector_shape, np.float64)
        first = self.fixed_detector
        if first is None:
            total = sum(f.data.sum(0, dtype=np.float64) for f in pending)
            first = fit_detector_from_mean(total / sum(len(f.index) for f in pending), self.settings["alpha_mrad"])
        self.gathered = self._pixels_near(first, 0.0 if self.fixed_detector else self.margin)
        self._flat_index = np.ascontiguousarray(self.gathered, np.int64)
        sy, sx = self.scan_shape
        self.ring = self._ring_rows(len(self.gathered) * sx * np.dtype(self.real).itemsize)
        self.G_rows = xp.zeros((sy, sx // 2 + 1, len(self.gathered)), self.complex)
        # a row's pixels along its last axis: the row transform runs along contiguous memory (a
        # transform along a strided axis was 5x slower on the host)
        self._buffer = xp.zeros((self.ring, len(self.gathered), sx), self.real)
        self._owner = np.full(self.ring, -1)
        self._pixel_index = None
        self._staging = Staging(self.backend)
        closed = []
        for frames in pending:
            closed += self.add(frames)
        return closed

    def _ring_rows(self, row_bytes: int) -> int:
        """The row buffers: the least ring (the open rows, a few closing, the span of the receivers' batches) and, on
        a GPU, as many more rows as :data:`RING_SHARE` of its free memory holds, up to the scan's rows."""
        if not self.backend.is_cuda:
            return self.ring
        from qora.backend.device import free_memory

        fits = int(RING_SHARE * (free_memory(self.backend) or 0.0) // row_bytes)
        return max(self.ring, min(self.scan_shape[0], fits))

    def _pixels_near(self, detector: DetectorFit, margin: float) -> np.ndarray:
        """Flat indices (sorted) of the pixels within the bright-field disk grown by ``margin`` px."""
        s = self.settings
        grown = detector.mrad_per_pixel * margin
        index, _ = bright_field_pixels(self.detector_shape, detector, s["alpha_mrad"] + grown, s["kv"])
        if not len(index):
            raise InputError(f"no detector pixel lies inside the bright-field disk ({detector.described()})")
        return index

    def _place_compressed(self, frames: CompressedFrames) -> list[int]:
        """A compressed batch decoded on the device in one launch (the mean pattern's sums there
        too), then placed a row of frames at a time as :meth:`add` places decoded ones. Frames the
        placement rejects (repeated, late) were summed with the rest: they are decoded again on
        the host and taken out of the sums, so the mean pattern is the host path's."""
        from qora.ssb.live.bslz4_device import DeviceDecoder

        xp = self.xp
        t0 = time.perf_counter()
        if self._decoder is None:
            self._decoder = DeviceDecoder(self.backend, shape=self.detector_shape, gathered=self.gathered,
                                          real=self.real)
            self.timings["decoder_s"] = time.perf_counter() - t0
        values = self._decoder.decode(frames)
        self.frames_summed += len(frames.index)
        self.timings["ingest_s"] += time.perf_counter() - t0
        self.timings["gather_s"] += time.perf_counter() - t0
        closed, rejected = [], []
        cols = self.scan_shape[1]
        for start in range(0, len(frames.index), cols):
            t1 = time.perf_counter()
            index = frames.index[start:start + cols]
            keep, late = self.placement.accept(index, receiver=frames.receiver, with_late=True)
            self.timings["place_s"] += time.perf_counter() - t1
            part = values[start:start + cols]
            if not keep.all():
                rejected += list(start + np.flatnonzero(~keep))
            self._put(index, part, keep, late)
            self.timings["scatter_s"] += time.perf_counter() - t1
            self.timings["gather_s"] += time.perf_counter() - t1
            t1 = time.perf_counter()
            rows = self.placement.rows_to_close()
            self.timings["place_s"] += time.perf_counter() - t1
            self._transform(rows)
            closed += rows
        if rejected:
            again = CompressedFrames(frames.index[rejected], [frames.blobs[i] for i in rejected], frames.dtype,
                                     frames.shape).decode()
            total = again.reshape(len(rejected), -1).sum(0, dtype=np.uint64)
            self._decoder.synchronize()  # its kernels add into the sums on streams of their own
            self._decoder.sums -= xp.asarray(total)
            self.frames_summed -= len(rejected)
        return closed

    def _place(self, frames: Frames) -> list[int]:
        t0 = time.perf_counter()
        keep, late = self.placement.accept(frames.index, receiver=frames.receiver, with_late=True)
        index, data = (frames.index, frames.data) if keep.all() else (frames.index[keep], frames.data[keep])
        late = late[keep]
        if len(index):
            if not data.dtype.isnative:  # big-endian counts (a file's): the kernels take native ones
                data = data.astype(data.dtype.newbyteorder("="))
            # whole frames into the running mean pattern (the disk's refits see the dark field too,
            # as the offline fit on the whole data does), their gathered pixels into the staging
            # array: one pass over the frames on the host
            values = self._staging.array(len(index), len(self.gathered), data.dtype)
            ingest(data, self._flat_index, self.mean_sum, values)
            self.frames_summed += len(index)
            t1 = time.perf_counter()
            self.timings["ingest_s"] += t1 - t0
            # to the device (from page-locked memory); on the CPU, as is
            self._put(index, self.xp.asarray(values), np.ones(len(index), bool), late)
            self.timings["scatter_s"] += time.perf_counter() - t1
        self.timings["gather_s"] += time.perf_counter() - t0
        closed = self.placement.rows_to_close()
        self._transform(closed)
        return closed

    def _put(self, index: np.ndarray, values, keep: np.ndarray, late: np.ndarray) -> None:
        """The frames ``index`` with gathered pixels ``values`` (n, gathered), where ``keep``: into
        their rows' buffers, or, ``late`` ones (their row already transformed), into G's rows."""
        xp = self.xp
        on_time = keep & ~late
        if on_time.all():
            self._scatter(index, values)
        elif on_time.any():
            self._scatter(index[on_time], values[xp.asarray(np.flatnonzero(on_time))])
        if late.any():
            self._add_late(index[late], values[xp.asarray(np.flatnonzero(late))])

    def _add_late(self, index: np.ndarray, values) -> None:
        """Frames whose row is already transformed, added to its transform: the row transform is
        linear, a frame at column c adds its pixels times exp(-2 pi i k c / cols) at frequency k, so
        G's row ends as if the frame had come in time. All rows at once: the frames grouped by row
        (padded with zeros to the largest group) and one batched product (rows, freq, m) @ (rows, m,
        pixel), so that many late frames (a receiver far behind) cost one launch, not one a row."""
        xp = self.xp
        cols = self.scan_shape[1]
        row, col = np.divmod(np.asarray(index, np.int64), cols)
        order = np.argsort(row, kind="stable")
        row, col = row[order], col[order]
        rows, start, count = np.unique(row, return_index=True, return_counts=True)
        group = np.repeat(np.arange(len(rows)), count)
        place = np.arange(len(row)) - np.repeat(start, count)  # each frame's place within its row's group
        k = np.arange(cols // 2 + 1)
        phase = np.zeros((len(rows), len(k), int(count.max())), self.complex)
        phase[group, :, place] = np.exp(-2j * np.pi * np.outer(col, k) / cols)
        grouped = xp.zeros((len(rows), int(count.max()), values.shape[1]), self.complex)
        grouped[xp.asarray(group), xp.asarray(place)] = values[xp.asarray(order)].astype(self.complex)
        self.G_rows[xp.asarray(rows)] += xp.asarray(phase) @ grouped

    def _scatter(self, index: np.ndarray, values) -> None:
        """The gathered pixels ``values`` (n, gathered) of the frames at scan ``index`` (n,) into
        their rows' buffers (a row whose slot another row still holds is closed first)."""
        xp = self.xp
        row, col = np.divmod(index, self.scan_shape[1])
        rows = np.unique(row)
        for r in rows:
            owner = self._owner[r % self.ring]
            if owner not in (-1, r):  # a jump of many rows: the row in this slot is closed now
                self.placement.close(int(owner))
                self._transform([int(owner)])
            self._owner[r % self.ring] = r
        if (np.diff(index) == 1).all():
            # consecutive frames (one receiver, or one row's): a block of columns in each row
            for r, lo, hi in zip(rows, np.searchsorted(row, rows), np.searchsorted(row, rows, side="right")):
                target = self._buffer[int(r % self.ring)]
                target[:, int(col[lo]):int(col[hi - 1]) + 1] = values[int(lo):int(hi)].T
            return
        # frames dealt among several receivers (each has every N-th frame: one batch spans many rows
        # with a few columns each): one indexed write for the whole batch, its (slot, column) pairs
        # sent in one copy (a write a row, with two uploads each, cost 6-9 s of a 512^2 scan with 6-8
        # receivers: docs/ssb-performance.md)
        where = xp.asarray(np.stack([row % self.ring, col]))
        if self._pixel_index is None:
            self._pixel_index = xp.arange(len(self.gathered))[None, :]
        self._buffer[where[0][:, None], self._pixel_index, where[1][:, None]] = values

    def _transform(self, rows) -> None:
        """Transform closed ``rows`` along the scan columns, their missing frames as zeros: the
        mean pattern takes their place when G is made (:meth:`session`), so that a dropped frame
        shows as flat, never as another position's, with the mean of all frames received then."""
        if not rows:
            return
        xp = self.xp
        t0 = time.perf_counter()
        rows = np.asarray(sorted(rows))
        empty = rows[self._owner[rows % self.ring] != rows]  # no frame came: no buffer of its own
        if len(empty):
            self.G_rows[xp.asarray(empty)] = 0
            rows = rows[self._owner[rows % self.ring] == rows]
            if not len(rows):
                return
        slots = rows % self.ring
        missing = ~self.placement.received[rows]
        if missing.any():
            r, c = np.nonzero(missing)
            self._buffer[xp.asarray(slots[r]), :, xp.asarray(c)] = 0
        from qora.backend.fft import rfft

        spectra = rfft(self._buffer[xp.asarray(slots)], axis=2)  # (rows, gathered, scan_col // 2 + 1)
        for k, r in enumerate(rows):  # each row's spectra turned to (frequency, pixel) as G keeps them
            self.G_rows[int(r)] = spectra[k].T
        self._owner[slots] = -1
        self.backend.synchronize()  # the time is the transform's, not its launch's
        self.timings["row_fft_s"] += time.perf_counter() - t0

    def _mean_pattern(self):
        """The mean pattern of the frames received (det_row, det_col), on the host: the host's sums
        and those of the frames decoded on the device."""
        total = self.mean_sum if self._decoder is None else self.mean_sum + self._decoder.mean_sum()
        return total / max(1, self.frames_summed)

    # -- results ----------------------------------------------------------------------------
    def detector(self) -> DetectorFit:
        """The bright-field disk: the fixed one, or refitted from the running mean pattern."""
        if self.fixed_detector is not None:
            return self.fixed_detector
        return fit_detector_from_mean(self._mean_pattern(), self.settings["alpha_mrad"])

    def session(self, *, rows: int | None = None, taper: float = 0.0) -> Session:
        """A :class:`qora.ssb.Session` of the first ``rows`` scan rows (default: all rows transformed
        with no gap so far): G transformed along the scan rows now, of the refitted disk's pixels,
        scaled by the level from the running mean pattern. The scan's window is those rows: a
        partial scan is a scan of fewer rows (its frequencies spaced 1 / (rows scan_step)).

        ``taper``: the fraction of the rows at each end brought smoothly to the mean (a Tukey
        window along the slow axis, after each pixel's mean over the rows is taken out; 1: Hann),
        default 0: none. The transform takes the rows as periodic, and the jump from the last row
        so far back to the first is no part of the specimen; a taper removes that jump but also
        weights down a quarter of rows (docs/ssb.md, "Live": on the simulator's films the fit
        after 25% of the rows lands closer to the whole scan's without it). The whole scan is
        never tapered: its G equals the offline session's.
        """
        from qora.backend.fft import fft, irfft

        xp = self.xp
        n = self.rows_done if rows is None else integer("rows", rows, low=1, high=self.rows_done)
        if n < 2:
            raise InputError(f"a session needs at least 2 scan rows transformed; {n} so far")
        t0 = time.perf_counter()
        det = self.detector()
        s = self.settings
        bf_index, k = bright_field_pixels(self.detector_shape, det, s["alpha_mrad"], s["kv"])
        where = np.searchsorted(self.gathered, bf_index)
        inside = (where < len(self.gathered)) & (self.gathered[np.minimum(where, len(self.gathered) - 1)] == bf_index)
        if not inside.all():
            warnings.warn(f"{int((~inside).sum())} of {len(bf_index)} bright-field pixels of the refitted disk lie "
                          f"beyond the {self.margin:g} px margin gathered; they are left out (a larger margin keeps "
                          "them)",
                          stacklevel=2)
            bf_index, k, where = bf_index[inside], k[inside], where[inside]
        level = float(self._mean_pattern().reshape(-1)[bf_index].mean())
        check_level(level)
        sel = xp.asarray(where)
        part = self.G_rows[:n][:, :, sel]
        missing = ~self.placement.received[:n]
        if missing.any():  # the mean pattern at the missing positions: its row transform is separable
            fill = xp.asarray(self._mean_pattern().reshape(-1)[bf_index].astype(self.real))
            part = part + xp.asarray(np.fft.rfft(missing, axis=1).astype(self.complex))[:, :, None] * fill
        if taper and n < self.scan_shape[0]:
            tapered = part.copy()
            tapered[:, 0] -= tapered[:, 0].mean(0)  # each pixel's mean over the rows so far out (Q = 0)
            tapered *= xp.asarray(_tukey(n, taper).astype(self.real))[:, None, None]
            G = fft(tapered, axis=0)
            del tapered
        else:
            G = fft(part, axis=0)
        G *= self.real(1.0 / level)
        bright = irfft(part.sum(-1), n=self.scan_shape[1], axis=1).real
        del part
        session = session_from_spectrum(G, bf_index=bf_index, k=k, level=level,
                                        bright_field=self.backend.to_host(bright) / level, detector=det,
                                        backend=self.backend, **s)
        session.timings["slow_axis_s"] = time.perf_counter() - t0
        return session
