"""Frames/s from the DECTRIS simulator into G (issue 25), for several (receivers, batch) settings in
turn, repeated in alternating order so that neither setting always runs first on a fresh machine;
with where the time went: the building thread waiting for batches against adding them to G, each
receiving process's CPU seconds and its seconds waiting for a free slot (the building process's
back-pressure). Starved building thread and idle receivers: the simulator or the sockets are the
limit; busy building thread and receivers waiting for slots: the processing is.

    PYTHONPATH=src python bench/probes/live_to_g_probe.py --configs 4:1024,4:2048 --repeats 2 [--senders 2]

Prints one JSON line a run.
"""
import argparse
import json

from qora.backend import resolve
from qora.bench.ssb_live import _SimulatorProcess
from qora.ssb.live import LiveOptions, run_live
from qora.ssb.live.receivers import ParallelDectrisSource


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--scan", type=int, default=512)
    parser.add_argument("--detector", type=int, default=192)
    parser.add_argument("--configs", default="4:1024,4:2048", help="receivers:batch, comma-separated")
    parser.add_argument("--senders", type=int, default=2)
    parser.add_argument("--slots", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    be = resolve("cuda")
    configs = [tuple(int(v) for v in c.split(":")) for c in args.configs.split(",")]
    for r in range(args.repeats):
        for receivers, batch in (configs if r % 2 == 0 else configs[::-1]):
            sim = _SimulatorProcess("dectris2", args.detector, 256, args.scan, clients=receivers, senders=args.senders)
            with sim as address:
                src = ParallelDectrisSource(address if isinstance(address, list) else [address], processes=receivers,
                                            batch=batch, timeout=60, slots=args.slots)
                out = run_live(src, kv=300.0, alpha_mrad=30.0, scan_step=0.373, rotation=0.0, backend=be,
                               options=LiveOptions(refresh_s=0, fit=False, queue_frames=1 << 18, max_wait_s=60))
            s = out.statistics
            rec = s.get("receivers", {})
            print(json.dumps({"receivers": receivers, "batch": batch, "slots": args.slots, "senders": sim.senders,
                              "processed_fps": round(s["processed_fps"]), "received_fps": round(s["received_fps"]),
                              "simulator_fps": None if sim.send_fps is None else round(sim.send_fps),
                              "elapsed_s": round(s["elapsed_s"], 3), "wait_s": round(s["wait_s"], 3),
                              "add_s": round(s["add_s"], 3), "gather_s": round(s["gather_s"], 3),
                              "row_fft_s": round(s["row_fft_s"], 3), "queue_peak_batches": s["queue_peak_batches"],
                              "ingest_s": round(s["ingest_s"], 3), "scatter_s": round(s["scatter_s"], 3),
                              "calibrate_s": round(s["calibrate_s"], 3), "decoder_s": round(s["decoder_s"], 3),
                              "place_s": round(s["place_s"], 3), "release_s": round(s["release_s"], 3),
                              "receiver_cpu_s": [round(c, 2) for c in rec.get("cpu_s", [])],
                              "receiver_slot_wait_s": [round(w, 2) for w in rec.get("slot_wait_s", [])],
                              "backlog_at_last": s["after_last_frame"]["backlog_frames"],
                              "late": s["late"], "dropped": s["dropped"], "repeated": s["repeated"]}), flush=True)
            del out


if __name__ == "__main__":
    main()
