"""A ``jax.jit`` Gerchberg-Papoulis loop on half spectra: the peer of ``qora bench holo --threads``.

Run as a script in the peers' environment::

    python holo_gp_jax.py N ITERATIONS

The same work per iteration as qora's CPU GP (float64, as qora's): a C2R of the half spectrum, max(v, 0),
an R2C, and the restore step a + b E with a fixed complex a and real b (the timing does not depend on
their values). Prints one JSON line: milliseconds for ITERATIONS iterations (the faster of two runs
after a compiling one) and the JAX version.
"""

import json
import sys
import time

import numpy as np


def main(argv):
    n, iterations = int(argv[0]), int(argv[1])
    import jax

    jax.config.update("jax_platforms", "cpu")
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    shape = (n, n, n)
    half = shape[:-1] + (n // 2 + 1,)
    rng = np.random.default_rng(0)
    a = jnp.asarray(rng.standard_normal(half) + 1j * rng.standard_normal(half))
    b = jnp.asarray((rng.random(half) < 0.7).astype(np.float64))

    def step(_, e):
        v = jnp.maximum(jnp.fft.irfftn(e, s=shape), 0.0)
        return a + b * jnp.fft.rfftn(v)

    @jax.jit
    def run(e):
        return jax.lax.fori_loop(0, iterations, step, e)

    run(a).block_until_ready()
    best = float("inf")
    for _ in range(2):
        t0 = time.perf_counter()
        run(a).block_until_ready()
        best = min(best, time.perf_counter() - t0)
    print(json.dumps({"ms": best * 1e3, "jax": jax.__version__, "device": str(jax.devices()[0])}))


if __name__ == "__main__":
    main(sys.argv[1:])
