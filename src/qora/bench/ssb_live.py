"""``qora bench ssb-live``: live 4D-STEM, frames per second from the detector stream into G and the
time from the last frame to the final image and fit, each against its floor.

Cases (``scan`` x ``scan`` positions, ``detector`` x ``detector`` uint16 frames):

- ``receive/<protocol>/<detector>``: the receiver alone (Merlin TCP, DECTRIS ZMQ with
  bitshuffle-LZ4), the simulator sending as fast as it can on 127.0.0.1, in a process of its own,
  from a pool of distinct frames (the stream's bytes are a real scan's; only the content repeats);
- ``to_G/<protocol>/<scan>x<detector>``: the live run with the fit off: receiver thread, bounded
  queue, gather, row transforms, and at the end the slow-axis transform;
- ``memory_to_G/<scan>x<detector>``: the same from frames in memory (the processing's own rate);
- ``floor/host_copy``, ``floor/h2d`` (CUDA): the bytes of a frame over the host copy bandwidth and
  the host-to-device copy bandwidth, as frames/s;
- ``final/<scan>x<detector>``: from the last frame to the final SSB image and the standard fit
  (rotation given), split into the queue's backlog, the rows and slow-axis transform, the fit and the
  image (``s_without_backlog``: the time a scan paced at the processing's rate would see); on a
  simulated film (the full-scale dataset of ``qora bench ssb-full`` where ``--dataset-dir`` holds
  it, else a small simulation).
"""

from __future__ import annotations

import time

import numpy as np

from qora.backend import resolve
from qora.bench.common import BenchResult

__all__ = ["run"]


def _pool(detector: int, count: int, seed: int = 0) -> np.ndarray:
    """Frames like a 4D-STEM scan's (a bright disk of ~8,800 pixels at 192^2, Poisson counts, a sparse
    dark field), uint16."""
    rng = np.random.default_rng(seed)
    yy, xx = np.indices((detector, detector))
    disk = np.hypot(yy - detector / 2, xx - detector / 2) < detector * 53 / 192
    frames = rng.poisson(30.0, (count, detector, detector)) * disk + rng.poisson(0.02, (count, detector, detector))
    return frames.astype(np.uint16)


def _host_copy_gbs(nbytes: int = 256 << 20) -> float:
    a = np.ones(nbytes, np.uint8)
    b = np.empty_like(a)
    np.copyto(b, a)
    t = time.perf_counter()
    for _ in range(3):
        np.copyto(b, a)
    return 3 * nbytes / (time.perf_counter() - t) / 1e9


def _h2d_gbs(be, nbytes: int = 256 << 20) -> float:
    xp = be.xp
    a = np.ones(nbytes, np.uint8)  # pageable, as the frames are
    d = xp.asarray(a)
    be.synchronize()
    t = time.perf_counter()
    for _ in range(3):
        d.set(a)
    be.synchronize()
    return 3 * nbytes / (time.perf_counter() - t) / 1e9


def run(*, backend="auto", scan: int = 512, detector: int = 192, protocols=("merlin", "dectris"), pool: int = 256,
        dataset_dir=None, write: bool = True, echo=print) -> BenchResult:
    from qora.ssb.live import Frames, LiveG, LiveOptions, MemorySource, open_source, run_live

    be = resolve(backend)
    result = BenchResult(f"ssb-live-{be.name}", be.name, be.device_facts().as_dict(), columns=("frames_per_s", "s"))
    frames = _pool(detector, pool)
    total = scan * scan
    frame_bytes = detector * detector * 2
    result.add("floor/host_copy", frames_per_s=_host_copy_gbs() * 1e9 / frame_bytes, s=None)
    if be.is_cuda:
        result.add("floor/h2d", frames_per_s=_h2d_gbs(be) * 1e9 / frame_bytes, s=None)
    settings = dict(kv=300.0, alpha_mrad=30.0, scan_step=0.373)
    for protocol in protocols:
        with _SimulatorProcess(protocol, detector, pool, scan) as address:
            n = 0
            with open_source(address, protocol=protocol, batch=1024, timeout=60) as src:
                t0 = time.perf_counter()  # the header is in: the frames follow
                for batch in src:
                    n += len(batch.index)
            seconds = time.perf_counter() - t0
        result.add(f"receive/{protocol}/{detector}", frames_per_s=n / seconds, s=seconds)
        echo(f"receive {protocol}: {n / seconds:,.0f} frames/s")
        with _SimulatorProcess(protocol, detector, pool, scan) as address:
            out = run_live(open_source(address, protocol=protocol, batch=1024, timeout=60), **settings,
                           rotation=0.0, backend=be, options=LiveOptions(refresh_s=0, fit=False,
                                                                        queue_frames=1 << 18, max_wait_s=60))
        s = out.statistics
        result.add(f"to_G/{protocol}/{scan}x{detector}", frames_per_s=s["processed_fps"], s=s["elapsed_s"],
                   received_fps=s["received_fps"], gather_s=s["gather_s"], row_fft_s=s["row_fft_s"],
                   after_last_frame=s["after_last_frame"])
        echo(f"to G {protocol}: {s['processed_fps']:,.0f} frames/s processed ({s['received_fps']:,.0f} received); "
             f"gather {s['gather_s']:.2f} s, row FFTs {s['row_fft_s']:.2f} s")
    # the processing's own rate, from memory (a pool-backed scan: frames[i % pool])
    live = LiveG((scan, scan), (detector, detector), rotation=0.0, backend=be, **settings)
    t = time.perf_counter()
    for start in range(0, total, 1024):
        index = np.arange(start, min(total, start + 1024))
        live.add(Frames(index, frames[index % pool]))
    live.finish()
    be.synchronize()
    seconds = time.perf_counter() - t
    result.add(f"memory_to_G/{scan}x{detector}", frames_per_s=total / seconds, s=seconds, **live.timings)
    echo(f"memory to G: {total / seconds:,.0f} frames/s")
    del live
    # the final image and fit after the last frame, on a simulated film
    data, meta = _film(dataset_dir, scan, be, echo)
    out = run_live(MemorySource(data, batch=1024), kv=meta["kv"], alpha_mrad=meta["alpha_mrad"],
                   scan_step=meta["scan_step"], rotation=0.0, backend=be,
                   options=LiveOptions(refresh_s=0, fit=True, queue_frames=1 << 18, max_wait_s=600))
    p = out.fit["standard"]["parameters"]
    parts = out.statistics["after_last_frame"]
    # frames from memory come faster than they are processed: the queue's backlog at the last frame
    # is the processing's rate, not the end's; without it, the time a paced scan would see
    result.add(f"final/{data.shape[0]}x{data.shape[2]}", frames_per_s=None, s=out.latency_s,
               s_without_backlog=out.latency_s - parts["queue_s"], parts=parts, C10=p["C10"],
               truth_C10=meta.get("C10"))
    echo(f"final image + fit: {out.latency_s:.3f} s after the last frame, {out.latency_s - parts['queue_s']:.3f} s "
         f"without the queue's backlog ({parts}); "
         f"C10 {p['C10']:.1f} A (truth {meta.get('C10')})")
    if write:
        echo(f"result written to {result.write()}")
    return result


def _serve_pool(protocol: str, detector: int, pool: int, scan: int, ports) -> None:
    """The simulator's process: the pool of frames made here (no array crosses the process
    boundary), its port sent back, the scan served as fast as the client reads, then exit."""
    from qora.ssb.live import DectrisSimulator, MerlinSimulator

    Sim = MerlinSimulator if protocol == "merlin" else DectrisSimulator
    sim = Sim(_pool(detector, pool), scan_shape=(scan, scan), timeout=60, time_limit=600)
    ports.put(sim.port)
    sim.start()
    sim.join()


class _SimulatorProcess:
    """A simulator in a process of its own, so that its Python (the DECTRIS messages are sent one by
    one) does not share the receiver's interpreter lock: the receiver's rate is measured, not the
    simulator's. Entering gives the address; leaving waits for the process (then ends it)."""

    def __init__(self, protocol: str, detector: int, pool: int, scan: int) -> None:
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")
        self.ports = ctx.Queue()
        self.process = ctx.Process(target=_serve_pool, args=(protocol, detector, pool, scan, self.ports), daemon=True)
        self.scheme = "tcp" if protocol == "merlin" else "zmq"

    def __enter__(self) -> str:
        self.process.start()
        port = self.ports.get(timeout=120)
        return f"{self.scheme}://127.0.0.1:{port}"

    def __exit__(self, *exc) -> None:
        self.process.join(60)
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(10)


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
    from qora.ssb import Aberrations, amorphous_slices, simulate

    side = max(16, min(scan, 64))
    sim = simulate(amorphous_slices((4 * side, 4 * side), 0.1, atoms_per_a2=0.1, seed=1), pixel=0.1, stride=4,
                   window=32, alpha_mrad=25.0, aberrations=Aberrations(C10=-120.0), dose=1e5, seed=1)
    return sim.data.astype(np.uint16), {"kv": 300.0, "alpha_mrad": 25.0, "scan_step": sim.scan_step, "C10": -120.0}
