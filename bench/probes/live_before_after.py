"""Live 4D-STEM before/after (issue 25): frames/s from memory into G (with LiveG's timings), and from the
simulators' streams (the receiver alone, and into G), 192^2 uint16 frames of the bench's pool, a 64 x 64
scan, the CPU backend. Only names that exist in both checkouts are used. Run once per checkout, its
``src`` first on PYTHONPATH, alternating the two when the machine is shared:

    git archive 4cd126b src | tar -x -C /tmp/before
    PYTHONPATH=/tmp/before/src python3 bench/probes/live_before_after.py merlin dectris
    PYTHONPATH=src python3 bench/probes/live_before_after.py merlin dectris

Prints one JSON line (docs/ssb-performance.md, section 9, "Live: the host's stages").
"""
import sys, time, json
import numpy as np
from qora.bench.ssb_live import _pool, _SimulatorProcess
from qora.ssb.live import Frames, LiveG, LiveOptions, open_source, run_live
def main():
    scan, det, pool = 64, 192, 256
    out = {}
    frames = _pool(det, pool)
    settings = dict(kv=300.0, alpha_mrad=30.0, scan_step=0.373)
    live = LiveG((scan, scan), (det, det), rotation=0.0, **settings)
    t = time.perf_counter()
    for s in range(0, scan * scan, 1024):
        i = np.arange(s, min(scan * scan, s + 1024)); live.add(Frames(i, frames[i % pool]))
    live.finish()
    out["memory_to_G"] = scan * scan / (time.perf_counter() - t)
    out["memory_timings"] = {k: round(v, 3) for k, v in live.timings.items()}
    for protocol in sys.argv[1:]:
        with _SimulatorProcess(protocol, det, pool, scan) as address:
            n = 0
            with open_source(address, protocol=protocol, batch=1024, timeout=60) as src:
                t = time.perf_counter()
                for b in src:
                    n += len(b.index)
            out[f"receive_{protocol}"] = n / (time.perf_counter() - t)
        with _SimulatorProcess(protocol, det, pool, scan) as address:
            r = run_live(open_source(address, protocol=protocol, batch=1024, timeout=60), **settings, rotation=0.0,
                         options=LiveOptions(refresh_s=0, fit=False, queue_frames=1 << 18, max_wait_s=60))
        out[f"to_G_{protocol}"] = r.statistics["processed_fps"]
    print(json.dumps({k: (round(v) if isinstance(v, float) else v) for k, v in out.items()}))


if __name__ == "__main__":
    main()
