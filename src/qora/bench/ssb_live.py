"""``qora bench ssb-live``: live 4D-STEM, frames per second from the detector stream into G and the
time from the last frame to the final image and fit, each against its floor.

Cases (``scan`` x ``scan`` positions, ``detector`` x ``detector`` uint16 frames):

- ``stage/<stage>``: the host's receive path stage by stage (:func:`stages`): socket read, header
  parse, pixel decoding (normal and RAW), the DECTRIS messages' parse (v1 JSON, v2 CBOR) and
  bitshuffle-LZ4 decoding, the queue, the ingest pass, per frame and against a memcpy of the frame
  measured in the same run; ``stage/G/*``: the row buffers' scatter and row FFTs per frame;
- ``receive/<protocol>/<detector>``: the receiver alone (Merlin TCP, DECTRIS ZMQ v1 and v2 with
  bitshuffle-LZ4), the simulator sending as fast as it can on 127.0.0.1, in a process of its own,
  from a pool of distinct frames (the stream's bytes are a real scan's; only the content repeats);
- ``receive/<protocol>/<detector>/x<N>``, ``to_G/.../x<N>``: the same with N receiving processes
  on the DECTRIS stream (:mod:`qora.ssb.live.receivers`; the simulator waits for all N);
  ``simulator_fps``: the simulator's own sending rate (when the receiver's equals it, the simulator
  is the limit);
- ``to_G/<protocol>/<scan>x<detector>``: the live run with the fit off: receiver thread, bounded
  queue, gather, row transforms, and at the end the slow-axis transform; the backlog at the last
  frame (frames received, not yet in G) and the time from the last frame to G complete;
- ``to_G/<protocol>/<scan>x<detector>[/x<N>]/<method>``: the same with the method's image of the rows so far
  made every ``refresh_s`` seconds (``--method``; the refreshes in the main thread, as ``qora ssb live`` makes them);
- ``memory_to_G/<scan>x<detector>``: the same from frames in memory (the processing's own rate);
- ``memory_to_G_device_decode/<scan>x<detector>`` (CUDA): from bitshuffle-LZ4 blobs in memory (the
  DECTRIS receiver's batches with ``decode="device"``): packed into page-locked memory, copied and
  decoded on the device (``qora/ssb/kernels/bslz4.cu``), the gathered pixels scattered into the rows;
  ``stage/dectris/device_decode_host_part``: the host's share of it per frame (the pack and the
  block table);
- ``floor/host_copy``, ``floor/h2d`` (CUDA): the bytes of a frame over the host copy bandwidth and
  the host-to-device copy bandwidth (pageable), as frames/s; ``floor/h2d_pinned_gathered`` (CUDA):
  the gathered pixels (what goes to the device) over the bandwidth from page-locked memory;
- ``final/<scan>x<detector>``: from the last frame to the final SSB image and the standard fit
  (rotation given), split into the queue's backlog, the rows and slow-axis transform, the fit and the
  image (``s_without_backlog``: the time a scan paced at the processing's rate would see; with
  ``final_fps`` the frames come at that pace and the backlog is the processing's own); on a
  simulated film (the full-scale dataset of ``qora bench ssb-full`` where ``--dataset-dir`` holds
  it, else a small simulation); ``final/<scan>x<detector>/auto``: the same with fits of the rows so far
  every second and the default final fit (``LiveOptions(final_fit="auto")``: warm-started from the last
  partial fit when that saw half the rows or more, else cold; ``warm_start`` says which ran);
- ``parity/<scan>x<detector>``: the cold case's end against the offline :class:`qora.ssb.Session` of
  the same frames (:func:`offline_parity`: G and the image, max difference over max, the fits'
  agreements and C10, C12 in A; the issue's bounds 1e-6, 1e-6, 1e-5, 0.1 A); ``parity_wire/<protocol>/...``:
  the same film served by the simulator over each protocol (several receiving processes on DECTRIS),
  reconstructed live, against the offline session, with the frame report. A parity case out of the bounds
  (:data:`PARITY_BOUNDS`) fails the run with :class:`ParityError` after the result is written.
"""

from __future__ import annotations

import time

import numpy as np

from qora.backend import resolve
from qora.bench.common import BenchResult
from qora.bench.ssb_live_parity import ParityError, offline_parity, parity_breaches
from qora.bench.ssb_live_stages import pool_frames, stages

__all__ = ["run"]


def _host_copy_gbs(nbytes: int = 256 << 20) -> float:
    a = np.ones(nbytes, np.uint8)
    b = np.empty_like(a)
    np.copyto(b, a)
    t = time.perf_counter()
    for _ in range(3):
        np.copyto(b, a)
    return 3 * nbytes / (time.perf_counter() - t) / 1e9


def _h2d_gbs(be, nbytes: int = 256 << 20, *, pinned: bool = False) -> float:
    """Host-to-device copy bandwidth (GB/s) from pageable memory (the frames as they arrive) or
    page-locked memory (the ingest's staging, :class:`qora.ssb.live.ingest.Staging`)."""
    xp = be.xp
    a = be.host_empty(nbytes, np.uint8) if pinned else np.empty(nbytes, np.uint8)
    a[:] = 1
    d = xp.asarray(a)
    be.synchronize()
    t = time.perf_counter()
    for _ in range(3):
        d.set(a)
    be.synchronize()
    return 3 * nbytes / (time.perf_counter() - t) / 1e9


def _receivers_line(stats: dict) -> str:
    """The receiving processes' CPU seconds and seconds waiting for a free slot, as one text."""
    if not stats.get("cpu_s"):
        return ""
    cpu = ", ".join(f"{c:.2f}" for c in stats["cpu_s"])
    wait = ", ".join(f"{w:.2f}" for w in stats.get("slot_wait_s", []))
    return f"; receivers' CPU s [{cpu}], waiting for slots s [{wait}]"


def run(*, backend="auto", scan: int = 512, detector: int = 192, protocols=("merlin", "dectris", "dectris2"),
        pool: int = 256, dataset_dir=None, stages_only: bool = False, receivers=(1,), senders: int = 1,
        batch: int = 2048, final_fps: float | None = None, methods=(), refresh_s: float = 0.5, write: bool = True,
        echo=print) -> BenchResult:
    """The cases of the module's docstring; ``methods``: live image methods (``qora.ssb.PREVIEW_METHODS``) each
    measured over the wire with its image refreshed every ``refresh_s`` seconds during the scan."""
    from qora.ssb.live import open_source

    be = resolve(backend)
    result = BenchResult(f"ssb-live-{be.name}", be.name, be.device_facts().as_dict(), columns=("frames_per_s", "s"))
    frames = pool_frames(detector, pool)
    frame_bytes = detector * detector * 2
    for row in stages(detector=detector, cols=scan):
        name, rate = row.pop("stage"), row.pop("frames_per_s")
        result.add(f"stage/{name}", frames_per_s=rate, s=row["us_per_frame"] * 1e-6, **row)
        echo(f"stage {name:34s} {row['us_per_frame']:9.1f} us/frame  {row['x_floor']:6.2f} x memcpy")
    if stages_only:
        if write:
            echo(f"result written to {result.write()}")
        return result
    result.add("floor/host_copy", frames_per_s=_host_copy_gbs() * 1e9 / frame_bytes, s=None)
    if be.is_cuda:
        result.add("floor/h2d", frames_per_s=_h2d_gbs(be) * 1e9 / frame_bytes, s=None)
        # what goes to the device now: the gathered pixels (~9,800 uint16 at 192^2, the disk's share of
        # the frame), from page-locked staging
        gathered_bytes = 9800 * 2 * (detector / 192) ** 2
        result.add("floor/h2d_pinned_gathered", frames_per_s=_h2d_gbs(be, pinned=True) * 1e9 / gathered_bytes, s=None)
    settings = dict(kv=300.0, alpha_mrad=30.0, scan_step=0.373)
    for protocol in protocols:
        # a Merlin's TCP stream is one connection: one receiver; a DECTRIS stream is dealt among N
        for n_recv in ((1,) if protocol == "merlin" else tuple(receivers)):
            tag = f"/x{n_recv}" if n_recv > 1 else ""

            def source(address, n_recv=n_recv, protocol=protocol):
                if isinstance(address, list):  # several sending processes: a receiver connects to one each
                    from qora.ssb.live.receivers import ParallelDectrisSource

                    src = ParallelDectrisSource(address, processes=n_recv, batch=batch, timeout=60)
                else:
                    src = open_source(address, protocol=_kind(protocol), batch=batch, timeout=60, processes=n_recv)
                if protocol != "merlin":  # as run_live settles it: the device decodes on CUDA
                    src.decode = "device" if be.is_cuda else "host"
                return src

            _receive_rate(result, source, protocol, detector, pool, scan, n_recv=n_recv, senders=senders, tag=tag,
                          echo=echo)
            for method in (None,) + tuple(methods):  # None: G alone; a method: its image refreshed during the scan
                _to_g(result, source, protocol, detector, pool, scan, n_recv=n_recv, senders=senders, tag=tag,
                      method=method, refresh_s=refresh_s, settings=settings, be=be, echo=echo)
    _memory_to_g(result, be, frames, scan=scan, detector=detector, pool=pool, settings=settings, echo=echo)
    if be.is_cuda:
        batch = min(1024, 2 * scan)  # the batches the final fits and the parity ran with (as measured before)
    data, meta = _film(dataset_dir, scan, be, echo)
    _final_fits(result, be, data, meta, batch=batch, final_fps=final_fps, echo=echo)
    # the end-to-end parity: the simulators serve the same film over each protocol (several
    # receiving processes on DECTRIS, as the throughput cases), the live end against the offline session
    for protocol in protocols:
        n_recv = 1 if protocol == "merlin" else max(receivers)
        t = time.perf_counter()
        parity = _parity_over_the_wire(protocol, data, meta, be, receivers=n_recv, senders=senders, batch=batch)
        tag = f"/x{n_recv}" if n_recv > 1 else ""
        result.add(f"parity_wire/{protocol}/{data.shape[0]}x{data.shape[2]}{tag}", frames_per_s=None,
                   s=time.perf_counter() - t, **parity)
        echo(f"over {protocol} x{n_recv}, live against offline: G {parity['G_rel']:.1e}, image "
             f"{parity['image_rel']:.1e} relative; agreement {parity['agreement_rel']:.1e}; C10, C12a, C12b "
             f"{parity['C10_A']:.3f}, {parity['C12a_A']:.3f}, {parity['C12b_A']:.3f} A apart; {parity['report']}")
    if write:
        echo(f"result written to {result.write()}")
    broken = parity_breaches(result.cases)
    if broken:  # written first, so that the numbers stay; then the run fails like a test
        raise ParityError("live against offline out of bounds: " + "; ".join(broken))
    return result


def _to_g(result, source, protocol: str, detector: int, pool: int, scan: int, *, n_recv: int, senders: int, tag: str,
          method, refresh_s: float, settings: dict, be, echo) -> None:
    """The live run over the wire with the fit off: into G alone (``method`` None), or with ``method``'s image of
    the rows so far made every ``refresh_s`` seconds (what a user watches during the scan)."""
    from qora.ssb.live import LiveOptions, run_live

    options = LiveOptions(refresh_s=refresh_s if method else 0, fit=False, queue_frames=1 << 18, max_wait_s=60,
                          method=method or "ssb")
    refreshes = []
    sim = _SimulatorProcess(protocol, detector, pool, scan, clients=n_recv, senders=senders)
    with sim as address:
        out = run_live(source(address), **settings, rotation=0.0, backend=be, options=options,
                       on_update=lambda update: refreshes.append(update.rows))
    s = out.statistics
    ends = s["after_last_frame"]
    name = f"to_G/{protocol}/{scan}x{detector}{tag}" + (f"/{method}" if method else "")
    result.add(name, frames_per_s=s["processed_fps"], s=s["elapsed_s"], method=method, refreshes=len(refreshes),
               refresh_s=options.refresh_s,
               received_fps=s["received_fps"], gather_s=s["gather_s"], row_fft_s=s["row_fft_s"],
               backlog_frames_at_last_frame=ends["backlog_frames"],
               last_frame_to_G_s=ends["queue_s"] + ends["rows_and_slow_axis_s"], after_last_frame=ends,
               receivers=n_recv, senders=sim.senders, per_receiver=s.get("receivers", {}).get("per_process"),
               queue_peak_batches=s["queue_peak_batches"], simulator_fps=sim.send_fps,
               wait_s=s["wait_s"], add_s=s["add_s"], receiver_cpu_s=s.get("receivers", {}).get("cpu_s"),
               receiver_slot_wait_s=s.get("receivers", {}).get("slot_wait_s"), late=s["late"],
               dropped=s["dropped"], prepare_s=s.get("prepare_s"),
               register_s=s.get("receivers", {}).get("register_s"), decoder_s=s.get("decoder_s"))
    shown = f" with {method} refreshed {len(refreshes)} times (every {options.refresh_s} s)" if method else ""
    echo(f"to G {protocol} x{n_recv}{shown}: {s['processed_fps']:,.0f} frames/s processed ({s['received_fps']:,.0f} "
         f"received, the simulator sent at {sim.send_fps or 0:,.0f}); backlog at the last frame "
         f"{ends['backlog_frames']} frames, last frame to G "
         f"{ends['queue_s'] + ends['rows_and_slow_axis_s']:.3f} s"
         f" ({ends['queue_s']:.3f} s queue, {ends['rows_and_slow_axis_s']:.3f} s rows and slow axis); gather "
         f"{s['gather_s']:.2f} s, row FFTs {s['row_fft_s']:.2f} s; building thread waiting {s['wait_s']:.2f} s, "
         f"adding {s['add_s']:.2f} s; {s['late']} frames late (added to their rows' transforms), {s['dropped']} "
         f"dropped; before the header {s.get('prepare_s', 0.0):.2f} s (modules, cuFFT), slots pinned in "
         f"{s.get('receivers', {}).get('register_s') or 0.0:.2f} s" + _receivers_line(s.get("receivers", {})))


def _receive_rate(result, source, protocol: str, detector: int, pool: int, scan: int, *, n_recv: int, senders: int,
                  tag: str, echo) -> None:
    """Frames per second a protocol's stream is received at (nothing done with them), with the receivers' CPU."""
    sim = _SimulatorProcess(protocol, detector, pool, scan, clients=n_recv, senders=senders)
    with sim as address:
        n = 0
        with source(address) as src:
            t0 = time.perf_counter()  # the header is in: the frames follow
            for frames_in in src:
                n += len(frames_in.index)
                if frames_in.release is not None:
                    frames_in.release()
        seconds = time.perf_counter() - t0
    cpu = getattr(src, "statistics", {}).get("cpu_s")
    # frames per CPU second of one receiving process: the rate it reaches with a core of its own
    per_core = None if not cpu or not sum(cpu) else n / sum(cpu)
    result.add(f"receive/{protocol}/{detector}{tag}", frames_per_s=n / seconds, s=seconds, receivers=n_recv,
               senders=sim.senders, simulator_fps=sim.send_fps, receiver_frames_per_cpu_s=per_core,
               simulator_cpu_us_per_frame=None if sim.cpu_s_per_frame is None else sim.cpu_s_per_frame * 1e6)
    echo(f"receive {protocol} x{n_recv}: {n / seconds:,.0f} frames/s (the simulator sent at "
         f"{sim.send_fps or 0:,.0f} frames/s" + (f"; {per_core:,.0f} frames per CPU second a receiver"
                                                 if per_core else "") + ")")


def _memory_to_g(result, be, frames, *, scan: int, detector: int, pool: int, settings: dict, echo) -> None:
    """The processing's own rate from memory (a pool-backed scan: frames[i % pool]), and on the GPU the DECTRIS path
    with the frames decoded on the device, from blobs in memory; the G stages per frame."""
    from qora.ssb.live import Frames, LiveG

    total = scan * scan
    live = LiveG((scan, scan), (detector, detector), rotation=0.0, backend=be, **settings)
    t = time.perf_counter()
    for start in range(0, total, 1024):
        index = np.arange(start, min(total, start + 1024))
        live.add(Frames(index, frames[index % pool]))
    live.finish()
    be.synchronize()
    seconds = time.perf_counter() - t
    result.add(f"memory_to_G/{scan}x{detector}", frames_per_s=total / seconds, s=seconds, **live.timings)
    parts = ", ".join(f"{k} {v:.2f} s" for k, v in live.timings.items())
    echo(f"memory to G: {total / seconds:,.0f} frames/s ({parts})")
    for name in ("ingest_s", "scatter_s", "row_fft_s"):  # per frame, as the stages above
        per = live.timings[name] / total
        result.add(f"stage/G/{name[:-2]}", frames_per_s=1 / max(per, 1e-12), s=per, us_per_frame=per * 1e6)
        echo(f"stage G/{name[:-2]:32s} {per * 1e6:9.1f} us/frame")
    del live
    if be.is_cuda:  # the DECTRIS path with the frames decoded on the device, from blobs in memory
        from qora.ssb.live.bslz4 import compress
        from qora.ssb.live.bslz4_batch import CompressedFrames

        blobs = [compress(f) for f in frames]
        live = LiveG((scan, scan), (detector, detector), rotation=0.0, backend=be, decode="device", **settings)
        # batches of 1024 frames, two rows at small scans: the frames of the calibration's rows are decoded on
        # the host, so one batch holding the whole scan would never reach the device
        batch = min(1024, 2 * scan)
        t = time.perf_counter()
        for start in range(0, total, batch):
            index = np.arange(start, min(total, start + batch))
            live.add(CompressedFrames(index, [blobs[i % pool] for i in index], frames.dtype, (detector, detector)))
        live.finish()
        decoder = live._decoder
        if decoder is not None:
            decoder.synchronize()  # a block that failed to decode is an error, not a rate
        be.synchronize()
        seconds = time.perf_counter() - t
        result.add(f"memory_to_G_device_decode/{scan}x{detector}", frames_per_s=total / seconds, s=seconds,
                   compressed_bytes_per_frame=float(np.mean([len(b) for b in blobs])),
                   frames_decoded_on_device=0 if decoder is None else decoder.frames, **live.timings)
        parts = ", ".join(f"{k} {v:.2f} s" for k, v in live.timings.items())
        echo(f"memory to G, decoded on the device: {total / seconds:,.0f} frames/s ({parts})")
        del live


def _final_fits(result, be, data, meta: dict, *, batch: int, final_fps, echo) -> None:
    """The final image and fit after the last frame, on a simulated film: the offline fit of the whole scan ("cold")
    and the default's refreshes with the warm end ("auto"); the live end against the offline session (parity)."""
    from qora.ssb.live import LiveOptions, MemorySource, run_live

    # "cold": the offline fit of the whole scan after the last frame; "auto" (the default): refreshes every
    # second with fits of the rows so far, and at the end Newton from the last of them if it saw half the rows
    for final_fit, refresh_s in (("cold", 0.0), ("auto", 1.0)):
        out = run_live(MemorySource(data, batch=batch, fps=final_fps), kv=meta["kv"], alpha_mrad=meta["alpha_mrad"],
                       scan_step=meta["scan_step"], rotation=0.0, backend=be,
                       options=LiveOptions(refresh_s=refresh_s, fit=True, queue_frames=1 << 18, max_wait_s=600,
                                           final_fit=final_fit))
        p = out.fit["standard"]["parameters"]
        parts = out.statistics["after_last_frame"]
        # frames from memory come faster than they are processed: the queue's backlog at the last frame
        # is the processing's rate, not the end's; without it, the time a paced scan would see
        name = f"final/{data.shape[0]}x{data.shape[2]}" + ("" if final_fit == "cold" else f"/{final_fit}")
        warm = bool(out.fit.get("warm_start"))
        result.add(name, frames_per_s=None, s=out.latency_s,
                   s_without_backlog=out.latency_s - parts["queue_s"], parts=parts, C10=p["C10"],
                   truth_C10=meta.get("C10"), paced_fps=final_fps, processed_fps=out.statistics["processed_fps"],
                   backlog_frames_at_last_frame=parts["backlog_frames"], final_fit=final_fit,
                   refreshes=len(out.updates), warm_start=warm, C10_determined=_c10_determined(out.fit))
        took = "" if final_fit != "auto" else f"took the {'warm' if warm else 'cold'} fit, "
        echo(f"final image + {final_fit} fit ({took}{len(out.updates)} refreshes): {out.latency_s:.3f} s after the last "
             f"frame, {out.latency_s - parts['queue_s']:.3f} s without the queue's backlog ({parts}); "
             f"{_c10_text(out.fit, meta.get('C10'))}")
        if final_fit == "cold":  # the parity: the live end equals the offline session of the same frames
            t = time.perf_counter()
            parity = offline_parity(out, data, meta, be)
            result.add(f"parity/{data.shape[0]}x{data.shape[2]}", frames_per_s=None, s=time.perf_counter() - t,
                       **parity)
            echo("live against offline on the same frames: G {G_rel:.1e}, image {image_rel:.1e} relative (bound "
                 "1e-6); agreement {agreement_rel:.1e} relative (1e-5); C10, C12a, C12b {C10_A:.3f}, {C12a_A:.3f}, "
                 "{C12b_A:.3f} A apart (0.1)".format(**parity))
        del out


def _parity_over_the_wire(protocol: str, data, meta: dict, be, *, receivers: int, senders: int, batch: int) -> dict:
    """The film ``data`` served by the simulator over ``protocol`` and reconstructed live (the cold
    final fit), against the offline session of the same frames (:func:`offline_parity`), with the
    frame report. The simulator's processes read the film from a .npy file (the full-scale one where
    ``data`` maps it, else a temporary copy)."""
    import tempfile
    from pathlib import Path

    from qora.ssb.live import LiveOptions, open_source, run_live

    with tempfile.TemporaryDirectory() as tmp:
        path = getattr(data, "filename", None)
        if path is None:
            path = Path(tmp) / "film.npy"
            np.save(path, np.asarray(data))
        scan, detector = data.shape[0], data.shape[2]
        sim = _SimulatorProcess(protocol, detector, 1, scan, clients=receivers, senders=senders, dataset=path)
        with sim as address:
            if isinstance(address, list):
                from qora.ssb.live.receivers import ParallelDectrisSource

                # the simulators encode the whole film before the header: at full size tens of seconds
                source = ParallelDectrisSource(address, processes=receivers, batch=batch, timeout=300)
            else:
                source = open_source(address, protocol=_kind(protocol), timeout=300, processes=receivers,
                                     batch=batch if receivers > 1 else 256)
            out = run_live(source, kv=meta["kv"], alpha_mrad=meta["alpha_mrad"], scan_step=meta["scan_step"],
                           rotation=0.0, backend=be,
                           options=LiveOptions(refresh_s=0, fit=True, final_fit="cold", queue_frames=1 << 18,
                                               max_wait_s=600))
    parity = offline_parity(out, data, meta, be)
    parity["report"] = str(out.report)
    parity["dropped"] = len(out.report.dropped)
    return parity


def _serve_pool(protocol: str, detector: int, pool: int, scan: int, clients: int, share: tuple, ports,
                dataset=None) -> None:
    """A simulator's process: the pool of frames made here (no array crosses the process
    boundary), or the scan stored at ``dataset`` (a .npy file, mapped), its port sent back, the
    scan (its ``share`` of the frames, of several senders) served as fast as the clients read
    (DECTRIS: once ``clients`` receivers are connected), then its frames sent, seconds and CPU
    seconds sent back, and exit."""
    from qora.ssb.live import DectrisSimulator, MerlinSimulator

    frames = pool_frames(detector, pool) if dataset is None else np.load(dataset, mmap_mode="r")
    options = dict(scan_shape=(scan, scan), timeout=60, time_limit=600)
    if protocol == "merlin":
        sim = MerlinSimulator(frames, **options)
    else:
        sim = DectrisSimulator(frames, stream="v2" if protocol == "dectris2" else "v1",
                               clients=clients, io_threads=max(2, min(4, clients)), share=share, **options)
    ports.put(("port", share[0], sim.port))
    cpu = time.process_time()
    sim.start()
    sim.join()
    # its CPU seconds (all its threads, ZeroMQ's I/O too): its cost per frame, whatever share of the cores it had
    ports.put(("rate", share[0], sim.sent, sim.send_s, time.process_time() - cpu))


def _kind(protocol: str) -> str:
    """open_source's protocol of a case's ("dectris2": the DECTRIS stream, its version told by its messages)."""
    return "merlin" if protocol == "merlin" else "dectris"


class _SimulatorProcess:
    """A simulator in processes of its own, so that its Python (the DECTRIS messages are sent one by
    one) does not share the receiver's interpreter lock: the receiver's rate is measured, not the
    simulator's. ``senders`` > 1 (DECTRIS): that many sending processes, each its share of the
    frames in order on a port of its own (one Python thread sends ~1 frame every few us: at 120 kHz
    one sender can be the limit); receiver k connects to sender k mod senders. Entering gives the
    address (a list of them for several senders); leaving waits for the processes (then ends them)."""

    def __init__(self, protocol: str, detector: int, pool: int, scan: int, *, clients: int = 1,
                 senders: int = 1, dataset=None) -> None:
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")
        self.ports = ctx.Queue()
        self.senders = 1 if protocol == "merlin" else max(1, min(int(senders), int(clients)))
        self.processes = [
            ctx.Process(target=_serve_pool, daemon=True,
                        args=(protocol, detector, pool, scan, len(range(j, clients, self.senders)), (j, self.senders),
                              self.ports, None if dataset is None else str(dataset)))
            for j in range(self.senders)]
        self.scheme = "tcp" if protocol == "merlin" else "zmq"
        self.send_fps = None  # the simulator's own rate: when it is no higher than the receiver's, it is the limit
        self.cpu_s_per_frame = None  # its CPU seconds a frame (all its processes and threads)

    def __enter__(self):
        for process in self.processes:
            process.start()
        ports = {}
        while len(ports) < self.senders:
            _, j, port = self.ports.get(timeout=120)
            ports[j] = port
        if self.senders == 1:
            return f"{self.scheme}://127.0.0.1:{ports[0]}"
        return [f"tcp://127.0.0.1:{ports[j]}" for j in range(self.senders)]

    def __exit__(self, *exc) -> None:
        import queue

        rates = []
        try:
            while len(rates) < self.senders:
                item = self.ports.get(timeout=60)
                if item[0] == "rate":
                    rates.append(item[2:])
        except queue.Empty:  # a sender that never reported: the rate is left unset below, not guessed
            pass
        if rates and all(r[1] for r in rates):
            sent = sum(r[0] for r in rates)
            self.send_fps = sent / max(r[1] for r in rates)
            self.cpu_s_per_frame = sum(r[2] for r in rates) / max(1, sent)
        for process in self.processes:
            process.join(60)
            if process.is_alive():
                process.terminate()
                process.join(10)


def _c10_determined(fit: dict) -> bool:
    report = fit["standard"].get("identifiability", {}).get("parameters", {}).get("C10", {})
    return bool(report.get("determined", True))


def _c10_text(fit: dict, truth) -> str:
    """The final fit's C10 as the fit reports it, beside the simulated truth. The films are one slice, so
    the fit's C10 (at the slab's mid-plane) and the simulator's are at one plane (issue 38 asked which
    plane "-112.0 (truth -120.0)" was at: the same; on the 64 x 64 scan of a 32 x 32 detector the fit
    says C10 is not determined, +-44 A explaining the data as well)."""
    report = fit["standard"].get("identifiability", {}).get("parameters", {}).get("C10", {})
    c10 = fit["standard"]["parameters"]["C10"]
    if report and not report.get("determined", True):
        how = f"not determined: {report['interval']:.0f} A either side explain the data within the gap"
    elif report.get("sigma") is not None:
        how = f"+- {report['sigma']:.1f} A"
    else:
        how = "no error estimate"
    return f"C10 {c10:.1f} A ({how}); truth {truth} A, the same plane (one slice)"


def _film(dataset_dir, scan: int, be, echo):
    """The scan the final-latency case reconstructs: the full-scale dataset where it is kept, else a
    small simulated film."""
    if dataset_dir is not None:
        from pathlib import Path

        from qora.bench import ssb_full

        path, meta = ssb_full.dataset(Path(dataset_dir), scan=scan, echo=echo)
        data = np.load(path, mmap_mode="r")
        return data, {"kv": ssb_full.KV, "alpha_mrad": ssb_full.ALPHA, "scan_step": ssb_full.STEP,
                      "C10": ssb_full.TRUTH["C10"]}
    from qora.ssb import Aberrations
    from qora.ssb import film_counts

    side = max(16, min(scan, 64))
    data, step = film_counts(4 * side, aberrations=Aberrations(C10=-120.0), dose=1e5, noise_seed=1)
    return data, {"kv": 300.0, "alpha_mrad": 25.0, "scan_step": step, "C10": -120.0}
