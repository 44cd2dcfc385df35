"""The reference case end to end: holograms -> fields -> Rytov -> ODT (seed 003's Odt rows)."""

import numpy as np
import pytest

from qora.holo import fields as F
from qora.holo import odt
from qora.holo import phantoms as P
from qora.holo import reference as R


@pytest.fixture(scope="module")
def reference_ratio():
    g = R.geometry()
    sphere = P.Sphere(radius=R.SPHERE_DIAMETER / 2, index=R.SPHERE_INDEX)
    big, hp = R.HOLOGRAM_N, R.PIXEL / 2
    phi = P.born_ratio([sphere], g, n=big, pixel=hp)
    carrier = R.carrier()
    holo = P.holograms(np.exp(phi), g, carrier, hologram_pixel=hp)
    bg = P.holograms(np.ones_like(phi), g, carrier, hologram_pixel=hp)
    sideband = F.find_sideband(bg[0], hp)
    kw = dict(hologram_pixel=hp, n=g.n, pupil_frequency=g.pupil_frequency)
    ratio = F.field_ratio(F.extract_fields(holo, sideband, **kw), F.extract_fields(bg, sideband, **kw))
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
    plain = odt.reconstruct(ratio, g, method="plain").index
    gp = odt.reconstruct(ratio, g, method="gp", iterations=50, r2c=True).index
    assert abs(gp[inner].mean() - R.SPHERE_INDEX) < 4e-3
    assert _rmse(gp, truth) < 0.7 * _rmse(plain, truth)


@pytest.mark.slow
def test_c2c_and_r2c_gp_agree(reference_ratio):
    g, ratio, _, _ = reference_ratio
    c2c = odt.reconstruct(ratio, g, method="gp", iterations=20).index
    r2c = odt.reconstruct(ratio, g, method="gp", iterations=20, r2c=True).index
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
        odt.reconstruct(ratio.real, g)
    with pytest.raises(ValueError, match="phi must be"):
        odt.reconstruct(ratio[:3], g)
    with pytest.raises(ValueError, match="approximation"):
        odt.reconstruct(ratio, g, approximation="mie")
