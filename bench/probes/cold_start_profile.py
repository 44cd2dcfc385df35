"""Probe: where a first GPU run of the logo's default spends its time on a machine whose CuPy kernel cache is empty
(the H100 row read 29 s for 10 starts on a machine just started, 2.24 s in the next process).

    PYTHONPATH=src python bench/probes/cold_start_profile.py [STARTS]

Runs the default (`qora.phase.reconstruct`, backend cuda) on the ESRF logo twice in one process, the first time
with CUPY_CACHE_DIR pointing at an empty folder, under cProfile; prints both times and the first run's functions
by cumulative and own time, and the NVRTC / nvJitLink calls' count and time.
"""

import cProfile
import os
import pstats
import sys
import tempfile
import time

os.environ["CUPY_CACHE_DIR"] = tempfile.mkdtemp(prefix="cupy-cold-")


def main(starts=10):
    from qora.bench.phase_measured import load_logo
    from qora.phase import reconstruct

    intensity, mask, _ = load_logo()
    profile = cProfile.Profile()
    t0 = time.perf_counter()
    profile.enable()
    first = reconstruct(intensity, mask=mask, starts=starts, backend="cuda", seed=0)
    profile.disable()
    cold = time.perf_counter() - t0
    t0 = time.perf_counter()
    second = reconstruct(intensity, mask=mask, starts=starts, backend="cuda", seed=0)
    warm = time.perf_counter() - t0
    print(f"cold {cold:.2f} s (timings {first.timings.get('search_s', 0):.2f} search, "
          f"{first.timings.get('report_s', 0):.2f} report); warm {warm:.2f} s (search "
          f"{second.timings.get('search_s', 0):.2f}, report {second.timings.get('report_s', 0):.2f})", flush=True)
    stats = pstats.Stats(profile)
    for key in ("cumulative", "tottime"):
        stats.sort_stats(key).print_stats(30)
    compiled = [(f, v) for f, v in stats.stats.items() if any(w in f[2] for w in ("compile", "nvrtc", "link", "Link"))]
    for (path, line, name), (cc, nc, tt, ct, _) in sorted(compiled, key=lambda kv: -kv[1][3])[:15]:
        print(f"{ct:8.2f} s cumulative, {nc:5d} calls: {name} ({os.path.basename(path)}:{line})")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 10)
