"""The live reconstruction: a receiver thread reads the source into a bounded queue, the caller's
thread builds G from it (:class:`LiveG`), refreshes the image and the fit of the rows so far at a
set rate, and at the end makes the final image and fit.

Back-pressure: the queue holds at most ``LiveOptions.queue_frames`` frames. When it is full the
receiver waits ``LiveOptions.max_wait_s`` for room, then stops with :class:`FellBehind`: a
detector does not wait, so processing slower than the scan for longer than the buffer lasts
would lose frames; the error says so instead of dropping them unseen.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from qora.io.errors import InputError
from qora.ssb.detector import DetectorFit
from qora.ssb.live.accumulate import LiveG
from qora.ssb.live.fitting import cold_fit, warm_fit
from qora.ssb.live.rehearsal import read_ahead_libraries, rehearse
from qora.ssb.model import parameters_to_aberrations
from qora.ssb.optics import Aberrations
from qora.ssb.session import PREVIEW_METHODS

__all__ = ["LiveOptions", "LiveResult", "LiveUpdate", "FellBehind", "LIVE_METHODS", "WARM_MIN_ROWS", "run_live", "warm_final"]


LIVE_METHODS = PREVIEW_METHODS  # LiveOptions.method: those a refresh can show (not "thick": the fit decides)


class FellBehind(RuntimeError):
    """Processing fell behind the detector for longer than the receive buffer allows."""


@dataclass(frozen=True)
class LiveOptions:
    """How the live reconstruction runs."""

    refresh_s: float = 1.0
    """Seconds between refreshes of the image (and fit) of the rows so far; 0: none before the end."""
    method: str = "ssb"
    """The refreshed and final image: "ssb", "parallax", "obf", "icom" (each accumulates: refreshed from the rows so
    far) or "wdd" (SSB while the scan runs, WDD on the whole scan at the end: its deconvolution is of the whole
    scan's spectrum, and it costs more than a refresh should)."""
    fit: bool = True
    """Fit the aberrations (C10, C12; the scan rotation unless given) live and at the end."""
    fit_after: float = 0.25
    """Fraction of the scan's rows received before the first (cold) fit; later fits are warm."""
    tilt: bool = False
    """Fit the thick-sample branch (thickness, tilt) too, at the end."""
    band: tuple = (0.2, 0.9)
    """The fit's band of scan frequencies (1/A)."""
    trials: int = 200
    """The cold fit's search trials (rotation given) (:func:`qora.ssb.fit_session`)."""
    final_fit: str = "auto"
    """The fit of the whole scan: "cold", the offline fit (:func:`qora.ssb.fit_session`, its search
    then Newton: the same result as the offline session's), "warm", Newton from the last
    partial-scan fit only (faster, but it keeps the partial fit's basin: on a small or noisy scan
    that can be a lower local maximum than the search finds), or "auto": warm when the last
    partial fit was made on at least half the scan's rows and at least :data:`WARM_MIN_ROWS` rows,
    cold otherwise (docs/ssb.md, "Live")."""
    queue_frames: int = 65536
    """Frames the receive queue holds."""
    max_wait_s: float = 2.0
    """Seconds the receiver waits on a full queue before :class:`FellBehind`."""
    decode: str = "auto"
    """Where a DECTRIS source's bitshuffle-LZ4 frames are decoded: "device" (the GPU: the
    receiver only parses messages, the compressed bytes go to the device), "host", or "auto"
    (the device on CUDA) (:class:`LiveG`'s ``decode``)."""
    calibration_rows: int = 4
    """Rows before the bright-field disk is first fitted (:class:`LiveG`)."""
    margin: float = 3.0
    """Detector pixels gathered beyond the first disk (:class:`LiveG`)."""
    lag_rows: int = 2
    """Rows after which a row with missing frames is closed (:class:`qora.ssb.live.Placement`)."""


@dataclass
class LiveUpdate:
    """One refresh: the rows so far, their image (rad, (rows, scan_col)), the fit (or None), the
    statistics then, and the :class:`qora.ssb.Session` of those rows (for previews: the viewer's
    sliders work on it)."""

    rows: int
    image: np.ndarray
    fit: dict | None
    statistics: dict
    session: object = None


@dataclass
class LiveResult:
    """The end of a live run: the :class:`qora.ssb.Session` of all rows, the final image (rad), the
    fit (or None), the statistics, the frame report, the refreshes made and the latency: seconds
    from the last frame received to the final image and fit (``latency_s``)."""

    session: object
    image: np.ndarray
    fit: dict | None
    statistics: dict
    report: object
    updates: list = field(default_factory=list)
    latency_s: float = 0.0


class _Counter:
    def __init__(self) -> None:
        self.received = self.processed = 0
        self.queue_peak = 0
        self.backlog_at_end = 0  # frames received but not yet in G when the last batch was received
        self.t0 = time.perf_counter()  # the stream's header read: the receiver starts
        self.t_last = None  # the last frame received
        self.t_processed = None  # the last frame placed in G's rows
        # the building thread's seconds waiting for a batch (starved: the receivers are the limit) and
        # adding batches to G (busy: the processing is)
        self.wait_s = self.add_s = self.release_s = 0.0  # release_s: handing slots back (part of add_s)


def _statistics(c: _Counter, live: LiveG, q: queue.Queue) -> dict:
    now = time.perf_counter()
    report = live.report
    return {"received": c.received, "processed": c.processed, "dropped": len(report.dropped), "late": len(report.late),
            "repeated": len(report.repeated), "out_of_order": report.out_of_order,
            "received_fps": c.received / max(1e-9, (c.t_last or now) - c.t0),
            "processed_fps": c.processed / max(1e-9, (c.t_processed or now) - c.t0),
            "queue_batches": q.qsize(), "queue_peak_batches": c.queue_peak, "rows_done": live.rows_done,
            "wait_s": c.wait_s, "add_s": c.add_s, "release_s": c.release_s,
            "elapsed_s": now - c.t0}


WARM_MIN_ROWS = 64
"""Rows the last partial-scan fit must span for ``final_fit="auto"`` to end with a warm fit."""


def warm_final(final_fit: str, fit_rows: int, rows: int) -> bool:
    """Whether the whole scan's fit starts from the last partial fit (made on ``fit_rows`` of the
    scan's ``rows``): always for "warm", never for "cold"; for "auto" when that fit saw at least half
    the rows and :data:`WARM_MIN_ROWS`. Why: Newton from a fit of half the data or more stays in the
    whole scan's basin (after a quarter of the rows the fit is already within 5 A of the whole
    scan's: the partial-scan test), and skips the search, 0.5 of the 0.68 s after the last frame at
    512 x 512; the one case seen where the warm start kept a lower maximum was a 24-row scan."""
    if final_fit != "auto":
        return final_fit == "warm"
    return fit_rows >= max(WARM_MIN_ROWS, rows / 2)


def _opened(source, options, *, kv, alpha_mrad, scan_step, rotation, detector, backend, precision) -> LiveG:
    """The source opened (its header read and checked) and the LiveG that takes its frames, the source's decode and
    waits set to match; on any failure the source is closed (no connection left open by a refused header or a bad
    setting)."""
    from qora.backend import resolve

    backend = resolve(backend)
    try:
        if hasattr(source, "connect"):  # connected first: a stream waiting for its receivers sees them meanwhile
            source.connect()
        prepare_s = _before_the_scan(source, options, backend, rotation)
        source.open()
        if source.scan_shape is None or source.detector_shape is None:
            raise InputError(f"{source!r}: no scan or detector shape after its header")
    except BaseException:
        source.close()  # a refused header (a scan shape that disagrees, a damaged stream) leaves no connection open
        raise
    # several receiving processes: their batches interleave; a receiver scheduled late can be behind
    # the others by its batches in flight (its slots' worth), which the row buffers must span
    receivers = int(getattr(source, "processes", 1))
    reorder = receivers * int(getattr(source, "batch", 256)) * int(getattr(source, "slots", 2)) if receivers > 1 else 0
    try:
        live = LiveG(source.scan_shape, source.detector_shape, kv=kv, alpha_mrad=alpha_mrad, scan_step=scan_step,
                     rotation=0.0 if rotation is None else rotation, detector=detector,
                     calibration_rows=options.calibration_rows, margin=options.margin, lag_rows=options.lag_rows,
                     receivers=receivers, reorder_frames=reorder, backend=backend, precision=precision,
                     decode=options.decode)
    except Exception:
        source.close()  # the stream's connection is not left open by a bad setting
        raise
    if getattr(source, "decode", None) == "auto":  # a DECTRIS source: its frames kept compressed for the GPU
        source.decode = "device" if live.decode_on_device else "host"
    if getattr(source, "decode", None) == "device" and live.decode_on_device and hasattr(source, "register_slots"):
        source.register_slots(live.backend)  # receivers' slots copied to the device from where they are
    if hasattr(source, "max_wait_s"):  # receiving processes wait as long for a free slot
        source.max_wait_s = options.max_wait_s
    live.timings["prepare_s"] = prepare_s
    return live


def _before_the_scan(source, options, backend, rotation) -> float:
    """What a fresh process (on a fresh machine) would otherwise pay during the scan, paid before the series'
    header is awaited: Qora's CUDA modules compiled (NVRTC: seconds a module where CuPy's disk cache is empty),
    the live path and its fits rehearsed on a small film, then its placing and session on a film of a full scan's
    extent (:func:`qora.ssb.live.rehearsal.rehearse`: CuPy's own kernels in both index widths, cuFFT's library and
    plans), and, where the GPU decodes from the receivers' slots, their
    page-locking asked for before the header (:attr:`ParallelDectrisSource.pin_for`). First of all the CUDA
    libraries' files are read ahead into the page cache (:func:`qora.ssb.live.rehearsal.read_ahead_libraries`):
    the scan's own transform lengths load kernels the rehearsal did not. Seconds taken."""
    if not backend.is_cuda:
        return 0.0
    from qora.ssb import kernels

    t0 = time.perf_counter()
    read_ahead_libraries()
    device_decode = options.decode != "host"
    kernels.compile_modules(["ssb.cu", "band.cu"] + (["bslz4.cu"] if device_decode else [])
                            + (["depth.cu"] if options.tilt else []))
    rehearse(backend, fit=options.fit, fit_rotation=rotation is None, tilt=options.tilt, band=options.band,
             trials=options.trials, device_decode=device_decode)
    if device_decode and hasattr(source, "pin_for"):
        source.pin_for = backend
    return time.perf_counter() - t0


def _receive(source, options, q, counter, stop, failure: list, end) -> None:
    """The receiver thread: the source's batches into the bounded queue ``q``, then ``end``; a full queue for
    ``options.max_wait_s`` is :class:`FellBehind`, any error goes to ``failure`` (the caller's thread raises it)."""
    try:
        for frames in source:
            counter.t_last = time.perf_counter()
            counter.received += len(frames.index)
            counter.backlog_at_end = counter.received - counter.processed
            try:
                q.put(frames, timeout=options.max_wait_s)
            except queue.Full:
                failure.append(FellBehind(
                    f"processing fell behind the detector: the receive buffer of {options.queue_frames} frames "
                    f"stayed full for {options.max_wait_s:g} s (received {counter.received}, processed "
                    f"{counter.processed}); use a faster backend (--backend cuda), a larger buffer, or a "
                    "slower scan"))
                return
            counter.queue_peak = max(counter.queue_peak, q.qsize())
            if stop.is_set():
                return
    except Exception as error:  # the caller's thread raises it
        failure.append(error)
    finally:
        while not stop.is_set():
            try:
                q.put(end, timeout=0.1)
                break
            except queue.Full:
                continue


def _finish(source, live, counter, fitted, image):
    """After the last frame: the last rows closed, the final fit and image, each step timed from the last frame's
    arrival. Returns (session, fit, image, the steps' times, the latency from the last frame, s)."""
    # the last frame's arrival: a receiving process's own time where it tells it (perf_counter is
    # CLOCK_MONOTONIC on Linux, one clock for all processes), else the receiver thread's
    last_frame = getattr(source, "last_received", None) or counter.t_last or time.perf_counter()
    ends = {"queue_s": time.perf_counter() - last_frame,  # frames still queued when the last one came
            "backlog_frames": counter.backlog_at_end}
    t = time.perf_counter()
    live.finish()
    session = live.session()
    ends["rows_and_slow_axis_s"] = time.perf_counter() - t
    t = time.perf_counter()
    fit = fitted(session, final=True)
    ends["fit_s"] = time.perf_counter() - t
    t = time.perf_counter()
    final = image(session, fit, final=True)
    live.backend.synchronize()
    ends["image_s"] = time.perf_counter() - t
    return session, fit, final, ends, time.perf_counter() - last_frame


def run_live(source, *, kv: float, alpha_mrad: float, scan_step: float, rotation: float | None = None,
             aberrations: Aberrations | None = None, detector: DetectorFit | None = None, backend="auto",
             precision: str = "auto", options: LiveOptions = LiveOptions(), on_update=None) -> LiveResult:
    """Reconstruct a scan while it arrives from ``source`` (a :class:`qora.ssb.live.Source`).

    ``rotation`` (rad): the scan rotation, fitted when None (and the fit on). ``aberrations``: those
    the image is made with while no fit is available (default none; the fitted ones after).
    ``on_update(LiveUpdate)`` is called at each refresh (in this thread). Returns a
    :class:`LiveResult`; raises :class:`FellBehind` when processing cannot keep up.
    """
    if options.method not in LIVE_METHODS:
        raise InputError(f"method must be one of {', '.join(map(repr, LIVE_METHODS))}, got {options.method!r}")
    if options.final_fit not in ("auto", "cold", "warm"):
        raise InputError(f"final_fit must be 'auto', 'cold' or 'warm', got {options.final_fit!r}")
    live = _opened(source, options, kv=kv, alpha_mrad=alpha_mrad, scan_step=scan_step, rotation=rotation,
                   detector=detector, backend=backend, precision=precision)
    batch = max(1, int(getattr(source, "batch", 256)))
    q: queue.Queue = queue.Queue(maxsize=max(2, options.queue_frames // batch))
    counter, stop = _Counter(), threading.Event()
    failure: list = []
    end = object()
    thread = threading.Thread(target=_receive, args=(source, options, q, counter, stop, failure, end), daemon=True,
                              name="qora-live-receiver")
    counter.t0 = time.perf_counter()
    thread.start()
    state = {"fit": None, "last": time.perf_counter(), "rows": 0, "fit_rows": 0}  # fit_rows: the last fit's rows
    fit_rotation = rotation is None
    updates = []
    rows = source.scan_shape[0]
    ab = aberrations or Aberrations()

    def fitted(session, final: bool):
        if not options.fit or (not final and session.scan_shape[0] < max(2, options.fit_after * rows)):
            return state["fit"]
        tilt = options.tilt and final
        if state["fit"] is None or (final and not warm_final(options.final_fit, state["fit_rows"], rows)):
            state["fit"] = cold_fit(session, rotation=rotation, tilt=tilt, band=options.band, trials=options.trials)
        else:
            state["fit"] = warm_fit(session, state["fit"], fit_rotation=fit_rotation, tilt=tilt, band=options.band)
        state["fit_rows"] = session.scan_shape[0]
        return state["fit"]

    def image(session, fit, final: bool = False):
        method = "ssb" if options.method == "wdd" and not final else options.method
        used = ab if fit is None else parameters_to_aberrations(fit["standard"]["parameters"])
        if fit is not None:
            session.rotation = fit["rotation_rad"]
        return session.image(None if method == "icom" else used, method)

    try:
        while True:
            t = time.perf_counter()
            try:
                item = q.get(timeout=getattr(source, "timeout", 10.0) + options.max_wait_s + 5)
            except queue.Empty:
                raise InputError(f"{source!r}: the receiver delivered nothing for too long") from None
            got = time.perf_counter()
            counter.wait_s += got - t
            if failure:
                raise failure[0]
            if item is end:
                break
            live.add(item)
            if item.release is not None:  # a receiver's shared-memory slot, read: handed back
                t = time.perf_counter()
                item.release()
                counter.release_s += time.perf_counter() - t
            counter.processed += len(item.index)
            now = counter.t_processed = time.perf_counter()
            counter.add_s += now - got
            if (options.refresh_s and now - state["last"] >= options.refresh_s and live.rows_done >= 2
                    and live.rows_done > state["rows"]):
                session = live.session()
                fit = fitted(session, final=False)
                updates.append(LiveUpdate(live.rows_done, image(session, fit), fit, _statistics(counter, live, q),
                                          session))
                if on_update is not None:
                    on_update(updates[-1])
                state["last"], state["rows"] = time.perf_counter(), live.rows_done
        session, fit, final, ends, latency = _finish(source, live, counter, fitted, image)
    finally:
        stop.set()
        source.close()
        thread.join(5)
    stats = _statistics(counter, live, q)
    stats.update(live.timings)
    if isinstance(getattr(source, "statistics", None), dict):  # several receiving processes: their shares
        stats["receivers"] = dict(source.statistics)
    stats["after_last_frame"] = ends
    for update in updates:  # the partial sessions' G (GBs at full scale) are not kept past the run
        update.session = None
    return LiveResult(session=session, image=final, fit=fit, statistics=stats, report=live.report, updates=updates,
                      latency_s=latency)
