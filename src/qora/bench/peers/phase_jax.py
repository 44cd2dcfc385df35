"""A plain ``jax.jit`` HIO loop: the peer of ``qora bench phase``.

Run as a script in the peers' environment::

    python phase_jax.py SHAPE N [--device cpu|gpu]   (SHAPE like 256x256)

Prints one JSON line: milliseconds per iteration by the difference of N and 2N
iterations, the fastest of five runs of each (compilation and transfers drop out), and the final
Fourier error as a sanity check. The iteration is the textbook one: a unitary
FFT, the modulus projection with the error sum, an inverse FFT, the HIO update.
"""

import json
import sys
import time

import numpy as np


def main(argv):
    shape = tuple(int(s) for s in argv[0].split("x"))
    n = int(argv[1])
    device = argv[3] if len(argv) > 3 and argv[2] == "--device" else "cpu"
    import jax

    jax.config.update("jax_platforms", device if device == "cpu" else "cuda")
    import jax.numpy as jnp

    rng = np.random.default_rng(0)
    amp = rng.random(shape).astype(np.float32)
    support = np.zeros(shape, bool)
    support[tuple(slice(s // 4, 3 * s // 4) for s in shape)] = True
    x0 = (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(np.complex64)
    beta = 0.9

    def step(_, carry):
        x, err = carry
        y = jnp.fft.fftn(x, norm="ortho")
        mag = jnp.abs(y)
        err = jnp.sum((mag - amp_d) ** 2)
        y = jnp.where(mag > 0, amp_d * y / jnp.where(mag > 0, mag, 1), amp_d)
        p = jnp.fft.ifftn(y, norm="ortho")
        x = jnp.where(support_d, p, x - beta * p)
        return x, err

    @jax.jit
    def run(x, k):
        return jax.lax.fori_loop(0, k, step, (x, jnp.float32(0)))

    amp_d = jnp.asarray(amp)
    support_d = jnp.asarray(support)
    x_d = jnp.asarray(x0)

    def iterate(k):
        out = run(x_d, k)
        out[0].block_until_ready()
        return out

    # the same protocol as qora.bench.common.time_peer: the fastest of five runs of each
    # length, then their difference, so a slow run of either length cannot flip the sign
    iterate(n)
    iterate(2 * n)
    best_n = best_2n = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        iterate(n)
        t1 = time.perf_counter()
        iterate(2 * n)
        t2 = time.perf_counter()
        best_n = min(best_n, t1 - t0)
        best_2n = min(best_2n, t2 - t1)
    ms = (best_2n - best_n) / n * 1e3
    if not ms > 0:
        raise SystemExit(f"2n iterations were not slower than n ({best_2n:.6f} s vs {best_n:.6f} s)")
    err = float(iterate(n)[1])
    print(json.dumps({"ms": ms, "jax": jax.__version__, "device": str(jax.devices()[0]), "err": err}))


if __name__ == "__main__":
    main(sys.argv[1:])
