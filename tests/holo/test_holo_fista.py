"""The one accelerated proximal-gradient loop (qora.holo.fista.proximal_gradient) against known minimisers."""

import numpy as np

from qora.holo.fista import momenta, proximal_gradient


def test_fista_reaches_the_nonnegative_least_squares_minimiser():
    # f(x) = 1/2 ||A x - b||^2 with x >= 0; the minimiser from a dense NNLS by enumeration of the active sets
    rng = np.random.default_rng(7)
    a = rng.standard_normal((12, 4))
    b = rng.standard_normal(12)
    step = 1.0 / np.linalg.norm(a, 2) ** 2
    best, value = None, np.inf
    for mask in range(16):  # every set of free variables: least squares on it, kept if feasible
        free = [i for i in range(4) if mask >> i & 1]
        x = np.zeros(4)
        if free:
            x[free] = np.linalg.lstsq(a[:, free], b, rcond=None)[0]
        if np.all(x >= -1e-12) and 0.5 * np.sum((a @ x - b) ** 2) < value:
            best, value = np.maximum(x, 0), 0.5 * np.sum((a @ x - b) ** 2)
    for momentum in (True, False):
        x, steps = proximal_gradient(np.zeros(4), lambda y, _k: y - step * a.T @ (a @ y - b),
                                     lambda v: np.maximum(v, 0), 3000, momentum=momentum)
        assert steps == 3000
        np.testing.assert_allclose(x, best, atol=1e-6)


def test_the_loop_stops_when_asked_and_uses_the_schedule():
    seen = []
    x, steps = proximal_gradient(np.ones(2), lambda y, k: y - 0.5 * y, lambda v: v, 10,
                                 extrapolate=lambda x, xp, w: seen.append(w) or x + w * (x - xp),
                                 after_step=lambda k, _x: k < 3)
    assert steps == 3
    weights = momenta()
    assert seen == [next(weights) for _ in range(3)] and seen[0] == 0.0
