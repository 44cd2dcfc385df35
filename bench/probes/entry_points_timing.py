"""Issue 41's before/after on the CPU: each engine's entry point on a small case, the best of three in one
process (run it once with PYTHONPATH at the old tree and once at the new, interleaved). Prints one JSON line:
seconds per case. The cases use only what both trees accept (keywords, the CPU named)."""

import json
import sys
import time

import numpy as np


def best_of(call, repeats: int = 3) -> float:
    call()  # warm: Numba's caches, FFT plans
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        call()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    from qora import holo, phase, ssb
    from qora.bench.ssb import _fit_cases
    from qora.holo import reference as R

    out = {}
    intensity = phase.objects.box_intensity((256, 256), 40)
    out["phase_reconstruct_hio200_256"] = best_of(lambda: phase.reconstruct(
        intensity, recipe="HIO**150 ER**50", starts=2, backend="cpu"))
    g = R.geometry(32)
    ratio = 1 + holo.born_ratio([holo.Sphere(radius=1.0, index=1.36)], g)
    out["holo_reconstruct_gp30_32"] = best_of(lambda: holo.reconstruct(ratio, g, method="gp", iterations=30,
                                                                       backend="cpu"))
    out["holo_reconstruct_tv10_32"] = best_of(lambda: holo.reconstruct(ratio, g, method="tv", iterations=10,
                                                                       tv_weight=1e-4, backend="cpu"))
    x = np.zeros((32, 32, 32))
    out["holo_bpm10_32"] = best_of(lambda: holo.bpm_reconstruct(ratio, g, start=x, iterations=10, backend="cpu"))
    data, step, kv, _, alpha, *_ = _fit_cases(64)["thick_film_64"]
    session = ssb.Session(data, kv=kv, alpha_mrad=alpha, scan_step=step, backend="cpu")
    out["ssb_fit_standard_64"] = best_of(lambda: ssb.fit(session, rotation=0.0, tilt=False), repeats=2)
    print(json.dumps({"tree": sys.argv[1] if len(sys.argv) > 1 else "", **out}))


if __name__ == "__main__":
    main()
