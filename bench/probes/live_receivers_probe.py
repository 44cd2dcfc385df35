"""The DECTRIS and Merlin receivers alone, from one or several receiving processes (issue 25,
qora.ssb.live.receivers): the simulator in processes of its own (``--senders``), the frames taken
and their slots handed back at once (no G), and the CPU seconds a frame of every process (each
receiver, the taking process, the simulator): the cost per frame whatever share of the cores each
got, which is what predicts a machine with more cores (docs/ssb-performance.md, "Live: several
receiving processes").

    PYTHONPATH=src python bench/probes/live_receivers_probe.py --scan 128 --protocol dectris2 \\
        --receivers 2 [--senders 2] [--decode device] [--repeats 2]

Prints one JSON line a run.
"""
import argparse
import json
import time

from qora.bench.ssb_live import _SimulatorProcess
from qora.ssb.live import open_source
from qora.ssb.live.receivers import ParallelDectrisSource


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--scan", type=int, default=128)
    parser.add_argument("--detector", type=int, default=192)
    parser.add_argument("--protocol", choices=["merlin", "dectris", "dectris2"], default="dectris2")
    parser.add_argument("--receivers", type=int, default=1)
    parser.add_argument("--senders", type=int, default=1)
    parser.add_argument("--decode", choices=["device", "host"], default="device",
                        help="device: the receivers only stage the compressed frames (the GPU path); host: they decode")
    parser.add_argument("--batch", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    for _ in range(args.repeats):
        sim = _SimulatorProcess(args.protocol, args.detector, 64, args.scan, clients=args.receivers,
                                senders=args.senders)
        with sim as address:
            if isinstance(address, list):
                src = ParallelDectrisSource(address, processes=args.receivers, batch=args.batch, timeout=60)
            else:
                src = open_source(address, protocol="merlin" if args.protocol == "merlin" else "dectris",
                                  batch=args.batch, timeout=60, processes=args.receivers)
            if args.protocol != "merlin":
                src.decode = args.decode
            n = 0
            with src:
                cpu0, t0 = time.process_time(), time.perf_counter()
                for frames in src:
                    n += len(frames.index)
                    if frames.release is not None:
                        frames.release()
                seconds, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        stats = getattr(src, "statistics", {})
        row = {"protocol": args.protocol, "receivers": args.receivers, "senders": sim.senders, "frames": n,
               "frames_per_s": n / seconds, "simulator_fps": sim.send_fps,
               "simulator_cpu_us_per_frame": None if sim.cpu_s_per_frame is None else sim.cpu_s_per_frame * 1e6,
               "taking_process_cpu_us_per_frame": cpu / max(1, n) * 1e6}
        if stats.get("cpu_s"):
            row["per_receiver_frames"] = stats["per_process"]
            row["per_receiver_cpu_us_per_frame"] = [c / max(1, k) * 1e6 for c, k in
                                                    zip(stats["cpu_s"], stats["per_process"])]
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
