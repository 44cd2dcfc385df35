"""Why the phase CPU loops do not scale with threads (issue 28): each element-wise loop and the FFT pair
timed alone at 1024^2 and 2048^2 for 1..16 threads, with the threading layer and the host's NUMA layout.

    PYTHONPATH=src python bench/probes/phase_loops_threads.py
"""

from __future__ import annotations

import os
import subprocess
import time

import numpy as np

from qora.backend import resolve
from qora.backend.host import threads
from qora.phase import cpu


def best(fn, repeat=7):
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return min(out) * 1e3


def main() -> None:
    import numba

    print("numba", numba.__version__, "NUMBA_NUM_THREADS", numba.config.NUMBA_NUM_THREADS, "cores", os.cpu_count())
    try:
        text = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        print("\n".join(ln for ln in text.splitlines() if ln.split(":")[0] in (
            "Model name", "Socket(s)", "Core(s) per socket", "Thread(s) per core", "NUMA node(s)", "L3 cache")))
    except OSError:
        pass
    be = resolve("cpu")
    rng = np.random.default_rng(0)
    for n in (1024, 2048):
        shape = (n, n)
        y = (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(np.complex64)
        x = y.copy()
        amp = rng.random(shape).astype(np.float32)
        sup = np.zeros(shape, bool)
        sup[n // 4:3 * n // 4, n // 4:3 * n // 4] = True
        plan = be.fft.c2c((1,) + shape, np.complex64, axes=(1, 2), norm=None)
        buf = plan.empty()
        buf[0] = y
        for t in (1, 2, 4, 8, 16):
            with threads(t):
                cpu.modulus_step(y, amp, 1e-3)  # compile / warm
                m = best(lambda: cpu.modulus_step(y, amp, 1e-3))
                u = best(lambda: cpu.update_step(x, y, sup, 1.0, -0.9))
                f = best(lambda: (plan.forward(buf, out=buf), plan.inverse(buf, out=buf)))
                try:
                    layer = numba.threading_layer()
                except ValueError:  # no parallel loop has run yet (one thread: the serial loops)
                    layer = "none yet"
            print(f"{n}^2 threads {t:2d}: modulus {m:7.3f} ms, update {u:7.3f} ms, fft pair {f:7.3f} ms "
                  f"(numba threads now {numba.get_num_threads()}, layer {layer})", flush=True)


if __name__ == "__main__":
    main()
