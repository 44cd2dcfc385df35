"""FISTA's extrapolation weights, written once for every accelerated loop of the engine.

Beck and Teboulle's schedule (SIAM J. Imaging Sci. 2, 183 (2009), doi:10.1137/080716542): t_1 = 1,
t_{k+1} = (1 + sqrt(1 + 4 t_k^2)) / 2, and the k-th extrapolation y = x_k + (t_k - 1) / t_{k+1} (x_k - x_{k-1}).
The outer FISTA-TV loops (:mod:`qora.holo.odt`, :mod:`qora.holo.regularisation`, the CUDA solver), the BPM
inversion (CPU and CUDA) and the FGP dual iterations of the TV prox (:mod:`qora.holo.tv`, its Numba and CUDA
versions) all draw their weights from :func:`momenta`; the array update itself stays with each backend.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

__all__ = ["momenta"]


def momenta() -> Iterator[float]:
    """The weights (t_k - 1) / t_{k+1} for k = 1, 2, ...: 0, 0.2818, 0.4340, ... tending to 1."""
    t = 1.0
    while True:
        t_next = (1 + math.sqrt(1 + 4 * t * t)) / 2
        yield (t - 1) / t_next
        t = t_next
