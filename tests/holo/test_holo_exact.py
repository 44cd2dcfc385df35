"""The exact scalar partial-wave solution: limits, the optical theorem, Born and Rytov."""

import math

import numpy as np
import pytest

from qora import holo
from qora.holo import phantoms as P
from qora.holo import reference as R


def test_small_sphere_amplitude_is_the_born_limit():
    """f(theta) -> V^(q) / 4 pi, the sphere's form factor at q = k |out - in|, as k a -> 0."""
    a, n_s = 0.01, 1.40
    k = 2 * math.pi * R.MEDIUM_INDEX / R.WAVELENGTH
    v = (2 * math.pi / R.WAVELENGTH) ** 2 * (n_s**2 - R.MEDIUM_INDEX**2)
    cos_t = np.array([1.0, 0.0, -1.0])
    f = P.scattering_amplitude(cos_t, a, n_s, R.MEDIUM_INDEX, R.WAVELENGTH)
    q = k * np.sqrt(2 - 2 * cos_t) / (2 * math.pi)  # cycles/um
    born = v * P.sphere_transform(q, a) / (4 * math.pi)
    np.testing.assert_allclose(f.real, born, rtol=2e-3)  # the internal field's correction is O((k1 a)^2)
    assert np.all(np.abs(f.imag) < 1e-3 * np.abs(born)) and k * a < 0.2


@pytest.mark.parametrize("radius,index", [(0.5, 1.36), (1.5, 1.40), (2.0, 1.34)])
def test_optical_theorem(radius, index):
    """Extinction (4 pi / k) Im f(0) equals the scattered power 2 pi int |f|^2 sin(theta) for a lossless sphere."""
    k = 2 * math.pi * R.MEDIUM_INDEX / R.WAVELENGTH
    theta = np.linspace(0, math.pi, 20001)
    f = P.scattering_amplitude(np.cos(theta), radius, index, R.MEDIUM_INDEX, R.WAVELENGTH)
    scattered = 2 * math.pi * np.trapezoid(np.abs(f) ** 2 * np.sin(theta), theta)
    extinction = 4 * math.pi / k * f[0].imag
    assert extinction == pytest.approx(scattered, rel=1e-5)


def test_weak_sphere_partial_waves_equal_first_born():
    g = R.geometry(64)
    sphere = P.Sphere(radius=1.5, index=R.MEDIUM_INDEX + 0.001)
    born = P.born_ratio([sphere], g)
    exact = P.partial_wave_ratio(sphere, g)
    rel = np.linalg.norm(exact - born, axis=(1, 2)) / np.linalg.norm(born, axis=(1, 2))
    assert rel.max() < 0.02  # every one of the 49 illuminations


def test_rytov_is_closer_than_born_for_a_larger_phase():
    g = R.geometry(64)
    sphere = P.Sphere(radius=1.5, index=R.MEDIUM_INDEX + 0.01)
    born = P.born_ratio([sphere], g)
    exact = P.partial_wave_ratio(sphere, g)
    err = lambda x: np.linalg.norm(x - born) / np.linalg.norm(born)  # noqa: E731
    assert err(np.log(1 + exact)) < 0.2 * err(exact)


@pytest.mark.slow
def test_rytov_gp_recovers_the_contrast_from_exact_data():
    g = R.geometry()
    sphere = P.Sphere(radius=1.5, index=R.MEDIUM_INDEX + 0.01)
    ratio = 1 + P.partial_wave_ratio(sphere, g)
    index = holo.reconstruct(ratio, g, method="gp", iterations=50, r2c=True).index
    # The contrast as the integral of n - n_m around the sphere over the sphere's volume (the
    # integral index that dry-mass measurements use): the mean over the interior is biased by the
    # missing cone (+4% with GP, -25% plain), the integral is fixed by measured frequencies.
    ball = P.render_spheres([P.Sphere(radius=3.0, index=2.0)], g.n, g.pixel, g.medium_index) > 1.5
    truth = P.render_spheres([sphere], g.n, g.pixel, g.medium_index, supersample=4)
    ratio_of_integrals = (index[ball] - R.MEDIUM_INDEX).sum() / (truth - R.MEDIUM_INDEX).sum()
    assert ratio_of_integrals == pytest.approx(1.0, abs=0.03)


def test_no_index_bias_inside_an_exact_sphere_at_the_fdtd_cells_contrast():
    """Issue 39's bias check at its source: the default reconstruction (Rytov, GP, oversample 2) of the exact
    field of a sphere of the FDTD cell's contrast (n_m 1.333, n 1.365, 6.5 px per wavelength) reads its
    interior within 1e-3 of the truth (measured +5.8e-4 at this size, +3.9e-4 at R = 3 um). The FDTD set's
    +1.57e-3 is in its fields (docs/holo.md, "Index bias"), not in the inversion."""
    n, radius, count = 64, 2.0, 60
    angles = np.linspace(0, 2 * np.pi, count, endpoint=False)
    g = holo.Geometry(wavelength=0.65, medium_index=1.333, pixel=0.1, n=n, na_detection=1.333, angles=angles)
    one = holo.Geometry(wavelength=0.65, medium_index=1.333, pixel=0.1, n=n, na_detection=1.333, angles=angles[:1])
    ratio = 1 + P.partial_wave_ratio(P.Sphere((0, 0, 0), radius, 1.365), one)[0]  # a centred sphere: one field
    index = holo.reconstruct(np.repeat(ratio[None], count, axis=0), g).index
    c = (np.arange(n) - n // 2) * 0.1
    z, y, x = np.meshgrid(c, c, c, indexing="ij")
    interior = np.sqrt(z**2 + y**2 + x**2) <= radius - 0.3  # away from the edge's blur
    assert abs(float(index[interior].mean()) - 1.365) < 1e-3
    assert abs(float(index[np.sqrt(z**2 + y**2 + x**2) > radius + 0.5].mean()) - 1.333) < 2e-4
