"""The reference case end to end: holograms -> fields -> Rytov -> ODT (seed 003's Odt rows)."""

import numpy as np
import pytest

from qora import holo
from qora.holo import fields as F
from qora.holo import odt, plans
from qora.holo import phantoms as P
from qora.holo import reference as R


@pytest.fixture(scope="module")
def reference_ratio():
    g, sphere = R.geometry(), P.Sphere(radius=R.SPHERE_DIAMETER / 2, index=R.SPHERE_INDEX)
    holos, bgs, hp = P.simulate_holograms([sphere], g)
    ratio = F.ratio_from_holograms(holos, bgs, g, hp)
    truth = P.render_spheres([sphere], g.n, g.pixel, g.medium_index, supersample=4)
    inner = P.render_spheres([P.Sphere(radius=1.2, index=2.0)], g.n, g.pixel, g.medium_index) > 1.5
    return g, ratio, truth, inner


def _rmse(a, b):
    return float(np.sqrt(np.mean((a - b) ** 2)))


def test_reference_illuminations_are_on_the_field_grid():
    g = R.geometry()
    df = 1 / (g.n * g.pixel)
    np.testing.assert_allclose(g.illuminations / df, np.round(g.illuminations / df), atol=1e-9)
    assert g.count == 49


def test_reference_sphere_index_and_gp_gain(reference_ratio):
    g, ratio, truth, inner = reference_ratio
    plain = holo.reconstruct(ratio, g, method="plain").index
    gp = holo.reconstruct(ratio, g, method="gp", iterations=50, r2c=True).index
    assert abs(gp[inner].mean() - R.SPHERE_INDEX) < 4e-3
    assert _rmse(gp, truth) < 0.7 * _rmse(plain, truth)


@pytest.mark.slow
def test_c2c_and_r2c_gp_agree(reference_ratio):
    g, ratio, _, _ = reference_ratio
    c2c = holo.reconstruct(ratio, g, method="gp", iterations=20, r2c=False).index
    r2c = holo.reconstruct(ratio, g, method="gp", iterations=20, r2c=True).index
    contrast = R.SPHERE_INDEX - R.MEDIUM_INDEX
    # the only difference: C2C's final complex potential keeps the anti-Hermitian part of the data
    assert np.abs(c2c - r2c).max() < 1e-4 * contrast


def test_potential_index_round_trip():
    g = R.geometry(16)
    n = np.linspace(1.30, 1.40, 10)
    np.testing.assert_allclose(odt.index_from_potential(odt.potential_from_index(n, g), g), n, rtol=1e-6)


def test_bad_inputs(reference_ratio):
    g, ratio, _, _ = reference_ratio
    with pytest.raises(ValueError, match="complex"):
        holo.reconstruct(ratio.real, g)
    with pytest.raises(ValueError, match="ratio must have shape"):
        holo.reconstruct(ratio[:3], g)
    with pytest.raises(ValueError, match="approximation"):
        holo.reconstruct(ratio, g, approximation="mie")


@pytest.mark.slow
def test_tv_beats_gp_with_noise():
    g, sphere = R.geometry(), P.Sphere(radius=R.SPHERE_DIAMETER / 2, index=R.SPHERE_INDEX)
    holos, bgs, hp = P.simulate_holograms([sphere], g, noise=R.NOISE, seed=1)
    ratio = F.ratio_from_holograms(holos, bgs, g, hp)
    truth = P.render_spheres([sphere], g.n, g.pixel, g.medium_index, supersample=4)
    gp = holo.reconstruct(ratio, g, method="gp", iterations=50, r2c=True).index
    tv = holo.reconstruct(ratio, g, method="tv", iterations=30, tv_inner=5).index
    assert _rmse(tv, truth) < 0.85 * _rmse(gp, truth)


def test_fgp_prox_against_a_direct_minimisation():
    """The FGP prox of a small volume equals L-BFGS-B on the (smoothed) objective."""
    import scipy.optimize

    from qora.holo.tv import fgp_prox, gradient, gradient_adjoint

    rng = np.random.default_rng(0)
    v = rng.standard_normal((4, 5, 6))
    lam = 0.3
    x, _ = fgp_prox(v, lam, 2000)
    eps = 1e-10

    def f(z):
        z = z.reshape(v.shape)
        g = gradient(z)
        mag = np.sqrt((g**2).sum(axis=0) + eps)
        val = 0.5 * ((z - v) ** 2).sum() + lam * mag.sum()
        grad = (z - v) + lam * gradient_adjoint(g / mag)
        return val, grad.ravel()

    ref = scipy.optimize.minimize(f, np.maximum(v, 0).ravel(), jac=True, method="L-BFGS-B",
                                  bounds=[(0, None)] * v.size, options={"maxiter": 5000, "gtol": 1e-12})
    assert f(x.ravel())[0] <= ref.fun + 1e-6
    # the prox is unique (strongly convex); L-BFGS on the smoothed, non-smooth objective stops near it
    np.testing.assert_allclose(x.ravel(), ref.x, atol=1e-2)


def test_gradient_adjoint_is_the_adjoint():
    from qora.holo.tv import gradient, gradient_adjoint

    rng = np.random.default_rng(1)
    x = rng.standard_normal((5, 6, 7))
    p = rng.standard_normal((3, 5, 6, 7))
    assert np.isclose(np.vdot(gradient(x), p), np.vdot(x, gradient_adjoint(p)))


@pytest.mark.slow
def test_rotation_geometry_two_spheres():
    """Sample rotation about y (ODTbrain's setting): two off-centre spheres come back where they are."""
    from qora.holo.geometry import Geometry

    n = 96
    g = Geometry(R.WAVELENGTH, R.MEDIUM_INDEX, R.PIXEL, n, R.NA_DETECTION,
                 angles=np.linspace(0, 2 * np.pi, 120, endpoint=False))
    spheres = [P.Sphere((0.5, 0.3, -1.0), 1.2, 1.36), P.Sphere((-1.5, -0.5, 1.5), 0.6, 1.38)]
    ratio = np.exp(P.born_ratio(spheres, g))
    truth = P.render_spheres(spheres, n, g.pixel, g.medium_index, supersample=3)
    plain = holo.reconstruct(ratio, g, method="plain").index
    gp = holo.reconstruct(ratio, g, method="gp", iterations=30, r2c=True).index
    assert _rmse(gp, truth) < _rmse(plain, truth) < 1e-3
    for s in spheres:
        ball = P.render_spheres([P.Sphere(s.center, s.radius + 0.6, 2.0)], n, g.pixel, g.medium_index) > 1.5
        one = P.render_spheres([s], n, g.pixel, g.medium_index, supersample=3)
        got = (gp[ball] - R.MEDIUM_INDEX).sum() / (one - R.MEDIUM_INDEX).sum()
        assert got == pytest.approx(1.0, abs=0.1)


def test_rotation_geometry_arguments():
    from qora.holo.geometry import Geometry

    g = Geometry(R.WAVELENGTH, R.MEDIUM_INDEX, R.PIXEL, 16, R.NA_DETECTION, angles=[0.0, 0.5])
    assert g.geometry == "rotation" and g.count == 2 and g.illuminations.shape == (2, 2)
    np.testing.assert_allclose(g.rotation(1) @ g.rotation(1).T, np.eye(3), atol=1e-12)
    with pytest.raises(ValueError, match="not both"):
        Geometry(R.WAVELENGTH, R.MEDIUM_INDEX, R.PIXEL, 16, R.NA_DETECTION, illuminations=[[0.1, 0.0]], angles=[0.0])


@pytest.mark.slow
def test_oversampled_gridding_lowers_the_error_of_a_large_object():
    """A cell-like phantom filling the field of view, rotation geometry: 2x oversampling cuts the RMSE."""
    from qora.bench.holo import cell_phantom
    from qora.holo.geometry import Geometry

    n = 48
    g = Geometry(R.WAVELENGTH, R.MEDIUM_INDEX, R.PIXEL, n, R.NA_DETECTION,
                 angles=np.linspace(0, 2 * np.pi, 48, endpoint=False))
    spheres = cell_phantom(n, g.pixel)
    ratio = np.exp(P.born_ratio(spheres, g))
    truth = P.render_spheres(spheres, n, g.pixel, g.medium_index, supersample=3)
    plain = holo.reconstruct(ratio, g, method="gp", iterations=30, r2c=True, oversample=1)
    fine = holo.reconstruct(ratio, g, method="gp", iterations=30, r2c=True, oversample=2)
    assert fine.index.shape == (n, n, n) and fine.info["oversample"] == 2
    assert _rmse(fine.index, truth) < 0.85 * _rmse(plain.index, truth)


@pytest.mark.parametrize("nonnegative", [True, False])
def test_fused_fgp_equals_the_reference(nonnegative):
    from qora.holo.tv import fgp_prox
    from qora.holo.tv_cpu import fgp_prox_fused

    rng = np.random.default_rng(2)
    v = rng.standard_normal((9, 10, 11))
    ref, dual_ref = fgp_prox(v, 0.25, 12, nonnegative=nonnegative)
    got, dual = fgp_prox_fused(v, 0.25, 12, nonnegative=nonnegative)
    np.testing.assert_allclose(got, ref, atol=1e-12)
    np.testing.assert_allclose(dual, dual_ref, atol=1e-12)
    # warm start: continuing from the returned dual is the same on both paths
    ref2, _ = fgp_prox(v, 0.25, 5, dual=dual_ref.copy(), nonnegative=nonnegative)
    got2, _ = fgp_prox_fused(v, 0.25, 5, dual=dual.copy(), nonnegative=nonnegative)
    np.testing.assert_allclose(got2, ref2, atol=1e-12)


def test_solver_grid_is_a_fast_length_and_padding_only_refines_it():
    from qora.backend.fft import fast_length

    assert [fast_length(m) for m in (188, 192, 282, 376, 470, 3)] == [192, 192, 288, 384, 480, 4]
    g = R.geometry(n=47)
    assert plans.solver_grid(g).n == 48 and plans.solver_grid(g, 2).n == 96
    assert plans.solver_grid(R.geometry(n=32)).n == 32
    with pytest.raises(ValueError):
        plans.solver_grid(g, 0.5)


def test_field_of_view_box_matches_the_centre_crop():
    rng = np.random.default_rng(0)
    fov = odt.FieldOfView(12, 7)
    box = rng.random((7, 7, 7))
    big = fov.expand(box)  # FFT layout
    centred = np.fft.fftshift(big)
    np.testing.assert_array_equal(odt.crop_volume(centred, 7), box)
    assert np.count_nonzero(centred) == np.count_nonzero(box)
    np.testing.assert_array_equal(fov.crop(big), box)


def test_tv_with_a_field_of_view_is_zero_outside_it():
    g = R.geometry(n=24)
    grid = plans.solver_grid(g, 1.5)
    rng = np.random.default_rng(1)
    plan = plans.MappingPlan(grid)
    phi = odt.pad_fields(0.01 * rng.standard_normal((g.count, 24, 24)) + 0j, grid.n)
    index = odt.solve(plan(phi), plan.measured, grid, method="tv", iterations=3, tv_inner=2, field_of_view=24)
    outside = index.copy()
    lo = grid.n // 2 - 12
    outside[lo:lo + 24, lo:lo + 24, lo:lo + 24] = g.medium_index
    np.testing.assert_allclose(outside, g.medium_index, atol=1e-12)
    assert np.ptp(index[lo:lo + 24, lo:lo + 24, lo:lo + 24]) > 0
