"""Sideband filter shapes (analytic values) and the phase background fit (exact polynomials)."""

import math

import numpy as np
import pytest

from qora.holo import background as B
from qora.holo import fields as F
from qora.holo import filters as FL
from qora.holo.plans import CropPlan
from qora.io.errors import InputError

R0 = 0.2  # cycles/um
D = np.fft.fftfreq(256, 1 / (256 * 0.005))  # offsets in FFT order, bins of 0.005 cycles/um


def _weights(name):
    return FL.filter_weights(name, D[:, None], D[None, :], R0)


def test_shapes_against_their_definitions():
    r = np.hypot(D[:, None], D[None, :])
    np.testing.assert_array_equal(_weights("disk"), r <= R0)
    np.testing.assert_allclose(_weights("gauss"), np.exp(-r**2 / (2 * (0.6 * R0) ** 2)))
    square = (np.abs(D[:, None]) <= R0) & (np.abs(D[None, :]) <= R0)
    np.testing.assert_array_equal(_weights("square"), square)
    tukey = _weights("tukey")
    assert tukey[0, 0] == 1 and tukey[np.abs(D) > R0].max() == 0
    k = int(np.argmin(np.abs(D - 0.95 * R0)))  # half-way through the taper [0.9 R, R]: close to 1/2
    expected = 0.5 * (1 + math.cos(math.pi * (D[k] / R0 - 0.9) / 0.1))
    assert tukey[0, k] == pytest.approx(expected)


@pytest.mark.parametrize("name", ["smooth disk", "smooth square"])
def test_smooth_shapes_are_half_at_the_edge(name):
    """A straight edge blurred by a Gaussian is 1/2 on the edge and erfc-shaped across it (the sampled
    edge lies half a bin beyond R; the disk's curvature adds a little)."""
    w = _weights(name)
    sigma, edge = R0 / 5, R0 + 0.0025
    for t in (-sigma, 0.0, sigma):
        k = int(np.argmin(np.abs(D - (R0 + t))))
        if name == "smooth square":  # a straight edge: the erfc
            expected = 0.5 * math.erfc((D[k] - edge) / (math.sqrt(2) * sigma))
        else:  # the disk curves away from its edge: the discrete convolution summed directly
            y, x = np.meshgrid(D, D, indexing="ij")
            gauss = np.exp(-(y**2 + (x - D[k]) ** 2) / (2 * sigma**2))
            expected = (gauss * (np.hypot(y, x) <= R0)).sum() / np.exp(-(y**2 + x**2) / (2 * sigma**2)).sum()
        assert w[0, k] == pytest.approx(expected, abs=2e-3)


def test_radius_from_the_sideband_and_errors():
    assert FL.filter_radius((0.3, -0.4)) == pytest.approx(0.5 / 3)
    assert FL.filter_radius((0.3, -0.4), fraction=0.5) == pytest.approx(0.25)
    assert FL.filter_radius((0.3, -0.4), radius=0.1) == 0.1
    for kw, match in ((dict(radius=0.1, fraction=0.2), "not both"), (dict(fraction=1.0), r"\(0, 1\)"),
                      (dict(radius=-1.0), "positive")):
        with pytest.raises(InputError, match=match):
            FL.filter_radius((0.3, -0.4), **kw)
    with pytest.raises(InputError, match="filter must be one of"):
        FL.check_filter("hann")
    assert FL.check_filter("smooth_disk") == "smooth disk"


def test_rectangular_crop_keeps_a_plane_wave():
    """A rectangular hologram of a tilted plane wave gives its field exactly on a rectangular window."""
    m, n, hp = 60, 96, 0.1
    fy, fx = 10 / (m * hp), 15 / (n * hp)  # on the bins: the crop is exact
    y, x = np.meshgrid((np.arange(m) - m // 2) * hp, (np.arange(n) - n // 2) * hp, indexing="ij")
    obj = np.exp(2j * np.pi * (3 / (m * hp) * y + 2 / (n * hp) * x))
    holo = np.abs(np.exp(2j * np.pi * (fy * y + fx * x)) + obj) ** 2
    crop = CropPlan((m, n), (-fy, -fx), hologram_pixel=hp, n=(30, 48), pupil_frequency=0.3 * math.hypot(fy, fx))
    field = crop(holo)
    assert field.shape == (30, 48)
    np.testing.assert_allclose(field, obj[::2, ::2], atol=1e-12)


def test_quantitative_phase_of_a_rectangular_hologram():
    """A 100 x 130 hologram of a Gaussian phase bump (not a fast square: padded inside) gives its phase."""
    m, n = 100, 130
    y, x = np.meshgrid(np.arange(m) - m // 2, np.arange(n) - n // 2, indexing="ij")
    phase = 1.5 * np.exp(-(x**2 + y**2) / (2 * 8.0**2))
    carrier = np.exp(2j * np.pi * (0.21 * y + 0.17 * x))
    holo, bg = np.abs(carrier + np.exp(1j * phase)) ** 2, np.abs(carrier + 1) ** 2
    out = F.quantitative_phase(holo, bg, n=fast(m, n), filter="smooth disk", filter_fraction=0.45)
    assert out["phase"].shape == (m, n)
    inner = (slice(10, -10), slice(10, -10))
    assert np.abs(out["phase"] - phase)[inner].max() < 0.02
    full = F.quantitative_phase(holo, bg)  # the default window: the whole padded square, the hologram's sampling
    assert full["pixel"] == 1.0 and full["phase"].shape == (m, n)
    half = F.quantitative_phase(holo, bg, n=fast(m, n) // 2)
    assert half["pixel"] == 2.0 and half["phase"].shape == (m // 2, n // 2)


def fast(*shape):
    from qora.backend.fft import fast_length

    return fast_length(max(shape))


@pytest.mark.parametrize("profile, order", [("offset", 0), ("tilt", 1), ("poly2", 2), (3, 3)])
def test_background_fit_removes_its_polynomial(profile, order):
    y, x = np.meshgrid(np.linspace(-1, 1, 60), np.linspace(-1, 1, 80), indexing="ij")
    obj = 2.0 * np.exp(-(x**2 + y**2) / 0.05)
    terms = [y**i * x**(t - i) for t in range(order + 1) for i in range(t + 1)]
    coefficients = np.random.default_rng(order).normal(size=len(terms))
    surface = sum(c * t for c, t in zip(coefficients, terms))
    out = B.correct_background(obj + surface, profile=profile, mask=obj < 1e-9)
    np.testing.assert_allclose(out, obj, atol=1e-9)
    border = B.correct_background(obj + surface, profile=profile, border=5)  # the frame misses the object
    np.testing.assert_allclose(border, obj, atol=1e-6)
    if order < 2:  # a lower order cannot remove a curvature
        curved = obj + surface + 0.5 * x * y
        assert np.abs(B.correct_background(curved, profile=profile, mask=obj < 1e-9) - obj).max() > 0.1


def test_object_mask_and_errors():
    phase = np.zeros((40, 40))
    phase[15:25, 15:25] = 1.0
    mask = B.object_mask(phase, threshold=0.5, margin=2)
    assert mask.sum() == 14 * 14 - 4 * 3  # the square grown by 2 (4-neighbour steps: cut corners)
    with pytest.raises(InputError, match="profile"):
        B.correct_background(phase, profile="cubic")
    with pytest.raises(InputError, match="too few"):
        B.correct_background(phase, profile="poly2", mask=np.eye(40, dtype=bool)[:, ::-1] & (phase > 5))
    with pytest.raises(InputError, match="shape"):
        B.correct_background(phase, mask=np.ones((3, 3), bool))
