"""How the band agreement's (Q, k) pairs fall on a warp's lanes (docs/ssb-performance.md, section 33; CPU only):

    python bench/probes/band_warp_occupancy.py [RADIUS_PX] [FREQUENCIES]    (default 52.8 400)

A disk of bright-field pixels (RADIUS_PX on the detector grid, the ssb-full bright field's size), in row-major order as
the kernels walk it, 32 consecutive pixels a warp's step; band frequencies Q drawn uniformly from |Q| < 2 RADIUS_PX.
Prints the share of pairs with a term (k - Q or k + Q inside the disk), of warp steps with at least one, and the
share of active lanes in the steps that run the term's body.
"""

import sys

import numpy as np


def main(radius: float = 52.8, frequencies: int = 400) -> None:
    edge = int(np.ceil(radius)) + 1
    y, x = np.mgrid[-edge:edge + 1, -edge:edge + 1]
    inside = y**2 + x**2 <= radius**2
    ky, kx = y[inside].astype(float), x[inside].astype(float)
    n = ky.size
    rng = np.random.default_rng(1)
    terms = steps = 0
    for _ in range(frequencies):
        r, a = 2 * radius * np.sqrt(rng.uniform()), rng.uniform(0, np.pi)
        qy, qx = r * np.sin(a), r * np.cos(a)
        term = (((ky - qy)**2 + (kx - qx)**2) <= radius**2) | (((ky + qy)**2 + (kx + qx)**2) <= radius**2)
        lanes = np.concatenate([term, np.zeros(-n % 32, bool)]).reshape(-1, 32)
        terms += int(term.sum())
        steps += int(lanes.any(axis=1).sum())
    print(f"{n} pixels; pairs with a term {terms / (n * frequencies):.3f}; warp steps with one "
          f"{steps / (-(-n // 32) * frequencies):.3f}; active lanes in those {terms / (32 * steps):.3f}")


if __name__ == "__main__":
    main(*(float(a) for a in sys.argv[1:2]), *(int(a) for a in sys.argv[2:3]))
