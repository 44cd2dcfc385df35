"""Shape priors of the shrinkwrap support (qora.phase.support_shape): holes filled, convex hull."""

import numpy as np
import pytest
import scipy.spatial

from qora.phase import objects
from qora.phase.detector import Detector, record
from qora.phase.recipe import Recipe, RecipeError
from qora.phase.support import shrinkwrap_update
from qora.phase.support_shape import convex_hull, fill_holes, shape_support


def _xp(backend):
    if backend == "cpu":
        return np
    from qora.backend import resolve

    return resolve("cuda").xp


def _host(a):
    return np.asarray(a.get() if hasattr(a, "get") else a)


def _annulus(n=40, r_in=5, r_out=12, centre=(20, 20)):
    y, x = np.mgrid[:n, :n]
    r = np.hypot(y - centre[0], x - centre[1])
    return (r <= r_out) & (r > r_in), r <= r_out


def test_fill_holes_fills_an_annulus_and_leaves_an_open_channel(backend):
    xp = _xp(backend)
    ring, disk = _annulus()
    np.testing.assert_array_equal(_host(fill_holes(xp.asarray(ring))), disk)
    open_ring = ring.copy()
    open_ring[20, 20:] = False  # a one-pixel channel from the hole to the outside
    np.testing.assert_array_equal(_host(fill_holes(xp.asarray(open_ring))), open_ring)


def test_priors_see_through_the_periodic_edge(backend):
    """A support that drifted across the array's edge gets the same prior as the centred one."""
    xp = _xp(backend)
    ring, disk = _annulus()
    l_shape = np.zeros((40, 40), bool)
    l_shape[8:30, 8:14] = True
    l_shape[24:30, 8:32] = True
    for prior, support in (("filled", ring), ("convex", l_shape)):
        centred = _host(shape_support(xp.asarray(support), prior))
        wrapped = _host(shape_support(xp.asarray(np.roll(support, (-17, 25), axis=(0, 1))), prior))
        np.testing.assert_array_equal(np.roll(wrapped, (17, -25), axis=(0, 1)), centred)


@pytest.mark.parametrize("ndim", [2, 3])
def test_convex_hull_against_delaunay(backend, ndim):
    """Pixel centres inside the hull of the support's pixels, against a second method: the Delaunay
    triangulation of all support pixel centres (not only the boundary) and its point location."""
    xp = _xp(backend)
    rng = np.random.default_rng(ndim)
    n = 40 if ndim == 2 else 24
    support = np.zeros((n,) * ndim, bool)
    for _ in range(4):  # a few blobs: a concave union with holes between
        centre = rng.integers(n // 4, 3 * n // 4, ndim)
        grid = np.indices(support.shape)
        r2 = sum((g - c) ** 2 for g, c in zip(grid, centre))
        support |= r2 <= rng.integers(4, 16)
    hull = _host(convex_hull(xp.asarray(support)))
    points = np.argwhere(support).astype(float)
    everywhere = np.indices(support.shape).reshape(ndim, -1).T.astype(float)
    located = scipy.spatial.Delaunay(points).find_simplex(everywhere, tol=1e-9) >= 0
    expected = located.reshape(support.shape)
    assert np.all(hull[support])
    # pixel centres on a hull facet may fall either way of the two methods' round-off
    assert (hull != expected).sum() <= max(2, 0.002 * expected.sum()), (hull != expected).sum()
    assert hull.sum() > support.sum()


def test_convex_hull_of_a_flat_support_is_the_support():
    line = np.zeros((16, 16), bool)
    line[8, 3:12] = True
    np.testing.assert_array_equal(convex_hull(line), line)


def test_shrinkwrap_with_a_prior_fills_the_thresholded_support():
    ring, disk = _annulus()
    x = ring.astype(np.complex64)
    plain, _ = shrinkwrap_update(x, np.ones_like(ring), sigma=0.3, threshold=0.5)
    filled, status = shrinkwrap_update(x, np.ones_like(ring), sigma=0.3, threshold=0.5, shape="filled")
    assert status == "ok"
    assert plain[20, 20] == 0 and filled[20, 20] == 1
    np.testing.assert_array_equal(filled, fill_holes(plain))


def test_recipe_shape_option_round_trip_and_errors():
    r = Recipe.parse("HIO(sw=20, shape=convex)**100 ER(sw=20, shape=filled)**10 ER**5")
    assert [s.shape for s in r.stages] == ["convex", "filled", None]
    assert Recipe.parse(str(r)) == r
    with pytest.raises(RecipeError, match="shape"):
        Recipe.parse("HIO(sw=20, shape=round)**10")


def test_a_run_with_the_filled_prior_closes_the_hole_a_plain_run_keeps():
    """A disk of weak phase with a ring of strong amplitude: shrinkwrap alone keeps a support hole
    where the amplitude is weak; with ``shape=filled`` every update's support is hole-free."""
    from qora.phase import reconstruct

    n = 64
    y, x = np.mgrid[:n, :n] - n // 2
    r = np.hypot(y, x)
    obj = np.where(r <= 14, np.where(r > 8, 1.0, 0.05), 0.0).astype(np.complex64)
    counts, mask = record(obj, Detector(photons=1e9, beamstop=1, gap=0))
    recipe = "HIO(sw=10, sigma=1, sigma_min=0.7, threshold=0.2{})**60"
    plain = np.asarray(reconstruct(counts, mask=mask, backend="cpu", recipe=recipe.format("")).support, bool)
    filled = np.asarray(reconstruct(counts, mask=mask, backend="cpu",
                                    recipe=recipe.format(", shape=filled")).support, bool)
    assert fill_holes(plain).sum() > plain.sum()  # the plain run's support has a hole
    np.testing.assert_array_equal(fill_holes(filled), filled)


@pytest.mark.gpu
@pytest.mark.parametrize("prior", ["filled", "convex"])
def test_priors_in_a_device_run(prior):
    """The priors inside the CUDA engines' shrinkwrap (graph variant): every support is its own prior."""
    from qora.phase import reconstruct

    obj = objects.triangle(64)
    counts, mask = record(obj, Detector(photons=1e8, beamstop=2, gap=1))
    result = reconstruct(counts, mask=mask, backend="cuda", variant="graph", starts=2, keep_all=True,
                         recipe=f"HIO(sw=10, sigma=2, sigma_min=1, threshold=0.25, shape={prior})**40")
    for support in np.asarray(result.supports, bool):
        np.testing.assert_array_equal(shape_support(support, prior), support)


def test_priors_keep_to_array_code_cupy_runs(monkeypatch):
    """The priors on an emulated device array (qora.testing: NumPy behind CuPy's rules, cupyx.scipy.ndimage's
    role played by SciPy's): no NumPy-only call on the device array, the host's result, a device array back."""
    import scipy.ndimage

    from qora.phase import support_shape
    from qora.testing import DeviceArray, DeviceXp

    monkeypatch.setattr(support_shape, "cupy_submodule", lambda name: DeviceXp(scipy.ndimage))
    xp = DeviceXp()
    ring, disk = _annulus()
    wrapped = np.roll(ring, (-17, 25), axis=(0, 1))  # across the periodic edge: the rolls run on the device too
    for prior in ("filled", "convex"):
        out = shape_support(xp.asarray(wrapped), prior, xp=xp)
        assert isinstance(out, DeviceArray) and out.dtype == bool
        np.testing.assert_array_equal(out.get(), shape_support(wrapped, prior))
    np.testing.assert_array_equal(np.roll(fill_holes(xp.asarray(wrapped), xp=xp).get(), (17, -25), axis=(0, 1)), disk)
