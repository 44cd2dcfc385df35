"""The GP loop's fused_fft on the device: the kernels against GP with whole float64 transforms, and the solver's
fused loop against its cuFFT loop and the CPU."""

import numpy as np
import pytest

from qora import holo
from qora.holo import reference as R
from qora.holo import gp_fused

from test_gp_fused import padded, problem, reference_gp

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("n", gp_fused.SIZES)
@pytest.mark.parametrize("bounds,packed,sparse", [((0.0, np.inf), False, False), ((-0.25, 0.375), False, False),
                                                  ((-0.25, 0.375), True, False), ((-0.25, 0.375), True, True)])
def test_fused_loop_matches_float64_gp(n, bounds, packed, sparse):
    """The loop (the x pass plain or with two rows a transform; the restoring z pass on every tile, or, with sparse
    data, on the tiles that hold a measured bin) against GP with whole float64 transforms."""
    import cupy as cp

    iterations = 3 if n < 512 else 2
    a, counts = problem(n, sparse=sparse)
    engine = gp_fused.FusedGP(n, packed=packed)
    stride = engine.stride
    e = cp.asarray(padded(a.astype(np.complex64), stride))
    dense = cp.asarray(padded(counts, stride))
    assert (len(engine.measured_tiles(dense)) < engine.tiles / 2) == sparse
    scale = engine.run(e, cp.asarray(padded(a.astype(np.complex64), stride)), dense, iterations, 1.0 / n**3, bounds)
    got = e.view(cp.float32).reshape(n, n, 2 * stride)[..., :n].get() * (scale * n**3)  # the reference's scale
    want = reference_gp(a, counts, iterations, 1.0 / n**3, bounds)
    error = np.linalg.norm(got - want) / np.linalg.norm(want)
    assert error < 2e-6, error
    free = reference_gp(a, counts, iterations, 1.0 / n**3, (-np.inf, np.inf))
    assert np.linalg.norm(free - want) / np.linalg.norm(want) > 1e-3  # the clamp binds


@pytest.fixture(scope="module")
def case_128():
    """A geometry whose solver grid (oversample 2) is 128, a fused size."""
    from qora.holo import phantoms as P

    g = R.geometry(64)
    return g, np.exp(P.born_ratio([P.Sphere(radius=1.5, index=R.SPHERE_INDEX)], g))


def test_solver_takes_the_fused_loop_and_matches_cufft_and_cpu(case_128):
    g, ratio = case_128
    runs = {loop: holo.reconstruct(ratio, g, backend="cuda", method="gp", iterations=20, r2c=True, gp_loop=loop)
            for loop in ("auto", "fused_fft", "cufft")}
    assert [runs[k].info["gp_loop"] for k in runs] == ["fused_fft", "fused_fft", "cufft"]
    np.testing.assert_array_equal(runs["auto"].index, runs["fused_fft"].index)
    fused, cufft = runs["fused_fft"].index, runs["cufft"].index
    contrast = np.linalg.norm(cufft - R.MEDIUM_INDEX)
    assert np.linalg.norm(fused - cufft) / contrast < 1e-5
    cpu = holo.reconstruct(ratio, g, backend="cpu", method="gp", iterations=20, r2c=True).index
    assert np.linalg.norm(fused - cpu) / np.linalg.norm(cpu - R.MEDIUM_INDEX) < 1e-4
    assert np.abs(fused - R.MEDIUM_INDEX).max() > 1e-3  # a real volume, not an empty one


def test_fused_loop_says_where_it_cannot_run():
    g = R.geometry(48)  # solver grid 96: no fused layout
    ratio = np.ones((g.count, g.n, g.n), np.complex64)
    with pytest.raises(ValueError, match="gp_loop='cufft'"):
        holo.reconstruct(ratio, g, backend="cuda", method="gp", iterations=2, r2c=True, gp_loop="fused_fft")
    with pytest.raises(ValueError, match="r2c=True"):
        holo.reconstruct(ratio, g, backend="cuda", method="gp", iterations=2, r2c=False, gp_loop="fused_fft")
    with pytest.raises(ValueError, match="gp_loop"):
        holo.reconstruct(ratio, g, backend="cuda", gp_loop="fast")
