"""The vector Mie field (miepython) as an independent truth for the scalar partial waves.

See docs/holo.md, "An independent truth: the vector Mie field", for the conventions and the
measured numbers. Relative index m = n / n_m; the sphere (radius 1.5 um) is at the centre of
the reference geometry unless a test moves it.
"""

import numpy as np
import pytest

from qora import holo
from qora.holo import phantoms as P
from qora.holo import reference as R
from qora.holo.mie import dipole_factor, vector_mie_ratio

RADIUS = 1.5
# normal incidence, and two on the NA 0.8 cone: tilted along x (p-polarised, where lab E_x is
# furthest from the scalar field) and along y (s-polarised)
TILTS = [0, 1, 13]


def _sphere(m, **kw):
    return P.Sphere(radius=RADIUS, index=m * R.MEDIUM_INDEX, **kw)


def _rel(a, b):
    """Relative L2 difference per illumination, against b."""
    return np.linalg.norm(a - b, axis=(1, 2)) / np.linalg.norm(b, axis=(1, 2))


@pytest.fixture(scope="module")
def g64():
    return R.geometry(64)


@pytest.mark.parametrize("m", [1.001, 1.005, 1.01])
def test_vector_mie_agrees_with_partial_waves_at_every_illumination(g64, m):
    """The x component behind an aplanatic objective, all 49 illuminations: within 2% (measured 1.75%)."""
    sphere = _sphere(m)
    vector = vector_mie_ratio(sphere, g64, detection="objective", method="far")
    assert _rel(vector, P.partial_wave_ratio(sphere, g64)).max() < 0.02


@pytest.mark.parametrize("m", [pytest.param(1.001, marks=pytest.mark.slow),
                               pytest.param(1.005, marks=pytest.mark.slow), 1.01])
def test_the_field_on_a_plane_propagated_back_agrees(g64, m):
    """miepython's E on the plane z = radius + 2 um, refocused through the pupil to z = 0."""
    sphere = _sphere(m)
    plane = vector_mie_ratio(sphere, g64, detection="objective", illuminations=TILTS)
    assert _rel(plane, P.partial_wave_ratio(sphere, g64)[TILTS]).max() < 0.02
    # the plane's sampling (pixel, width, taper) costs under 0.2% against the plane-wave form
    far = vector_mie_ratio(sphere, g64, detection="objective", method="far", illuminations=TILTS)
    assert _rel(plane, far).max() < 2e-3


def test_lab_ex_is_the_scalar_field_times_the_dipole_projection(g64):
    """Lab E_x differs from the scalar field by its polarisation alone.

    To first order the vector far field is the scalar one times e - d (d . e); its lab x
    component (over the incident wave's) is off by 2.9% at normal incidence and 6.1% for a beam
    tilted along x, whatever the index: the literal "E_x on a plane" comparison does not meet 2%
    for this sphere at NA 1.2, and that is the scalar theory's missing polarisation, not an
    error. Times that factor, the scalar partial waves are the vector field to 0.25%.
    """
    sphere = _sphere(1.01)
    vector = vector_mie_ratio(sphere, g64, detection="lab", method="far")
    scalar = P.partial_wave_ratio(sphere, g64)
    projected = np.stack([np.fft.fftshift(np.fft.ifft2(np.fft.fft2(np.fft.ifftshift(scalar[a]))
                                                       * dipole_factor(g64, a, detection="lab")))
                          for a in range(g64.count)])
    assert _rel(vector, projected).max() < 5e-3  # measured 0.23%
    raw = _rel(vector, scalar)
    assert 0.02 < raw[0] < 0.04 and raw.max() > 0.05  # measured 2.99% and 6.09%: the projection


def test_the_tilted_beams_polarisation_convention_matters_little(g64):
    sphere = _sphere(1.01)
    kw = dict(detection="objective", method="far", illuminations=[1, 7])
    lens = vector_mie_ratio(sphere, g64, polarization="lens", **kw)
    projected = vector_mie_ratio(sphere, g64, polarization="projected", **kw)
    assert _rel(lens, projected).max() < 0.01  # measured 0.34%


def test_an_absorbing_sphere_agrees_and_its_conjugate_does_not(g64):
    """Absorption is Im n > 0 here (exp(-i omega t)); miepython takes n - i kappa, so the index is conjugated."""
    sphere = _sphere(1.01 + 0.002j / R.MEDIUM_INDEX)
    vector = vector_mie_ratio(sphere, g64, detection="objective", method="far", illuminations=TILTS)
    assert _rel(vector, P.partial_wave_ratio(sphere, g64)[TILTS]).max() < 0.02  # measured 1.8%
    gain = P.Sphere(radius=RADIUS, index=np.conj(sphere.index))
    assert _rel(vector, P.partial_wave_ratio(gain, g64)[TILTS]).min() > 0.1  # measured 29%


@pytest.mark.parametrize("other", [
    P.Sphere(center=(0.0, 0.0, 0.2), radius=RADIUS, index=1.01 * R.MEDIUM_INDEX),  # 0.2 um along x
    P.Sphere(center=(0.3, 0.0, 0.0), radius=RADIUS, index=1.01 * R.MEDIUM_INDEX),  # 0.3 um along z
    P.Sphere(radius=1.4, index=1.01 * R.MEDIUM_INDEX),
], ids=["shifted-x", "shifted-z", "radius-1.4"])
def test_the_comparison_can_fail(g64, other):
    """A slightly different sphere is far outside 2% (11-24%), and agrees again with its own scalar field."""
    vector = vector_mie_ratio(other, g64, detection="objective", method="far", illuminations=TILTS)
    assert _rel(vector, P.partial_wave_ratio(_sphere(1.01), g64)[TILTS]).min() > 0.1
    assert _rel(vector, P.partial_wave_ratio(other, g64)[TILTS]).max() < 0.02


def test_the_plane_must_lie_past_the_sphere(g64):
    with pytest.raises(ValueError, match="past the sphere"):
        vector_mie_ratio(_sphere(1.01), g64, plane_z=1.0, illuminations=[0])
    with pytest.raises(ValueError, match="detection"):
        vector_mie_ratio(_sphere(1.01), g64, detection="camera", illuminations=[0])


@pytest.mark.slow
@pytest.mark.parametrize("detection", ["lab", "objective"])
def test_rytov_gp_recovers_the_contrast_from_vector_mie_data(detection):
    """Index contrast 0.01 (n = 1.343), 49 illuminations, n = 128: within 3% (measured 0.3% and 0.2%)."""
    g = R.geometry()
    sphere = P.Sphere(radius=RADIUS, index=R.MEDIUM_INDEX + 0.01)
    ratio = 1 + vector_mie_ratio(sphere, g, detection=detection, method="far")
    index = holo.reconstruct(ratio, g, method="gp", iterations=50, r2c=True).index
    # the integral of n - n_m over a ball around the sphere, over the sphere's (as in test_holo_exact)
    ball = P.render_spheres([P.Sphere(radius=3.0, index=2.0)], g.n, g.pixel, g.medium_index) > 1.5
    truth = P.render_spheres([sphere], g.n, g.pixel, g.medium_index, supersample=4)
    ratio_of_integrals = (index[ball] - R.MEDIUM_INDEX).sum() / (truth - R.MEDIUM_INDEX).sum()
    assert ratio_of_integrals == pytest.approx(1.0, abs=0.03)
