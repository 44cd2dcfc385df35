import numpy as np
import pytest

from qora.holo import fields as F
from qora.holo import phantoms as P
from qora.holo import reference as R
from qora.holo.geometry import Geometry


def _on_grid(n=64, tilt_bins=(5, -7)):
    g = R.geometry(n)
    df = 1 / (n * g.pixel)
    ill = np.array([[0.0, 0.0], [tilt_bins[0] * df, tilt_bins[1] * df]])
    return Geometry(g.wavelength, g.medium_index, g.pixel, n, g.na_detection, illuminations=ill)


def _synthesize(g, carrier, *, noise=None, sphere=P.Sphere(radius=1.0, index=1.34)):
    big, hp = 2 * g.n, g.pixel / 2
    phi = P.born_ratio([sphere], g, n=big, pixel=hp)
    holo = P.holograms(1 + phi, g, carrier, hologram_pixel=hp)
    bg = P.holograms(np.ones_like(phi), g, carrier, hologram_pixel=hp)
    if noise:
        holo = P.add_noise(holo, noise, seed=1)
        bg = P.add_noise(bg, noise, seed=2)
    return holo, bg, P.born_ratio([sphere], g)


def _ratio(g, holo, bg, sideband):
    kw = dict(hologram_pixel=g.pixel / 2, n=g.n, pupil_frequency=g.pupil_frequency)
    return F.field_ratio(F.extract_fields(holo, sideband, **kw), F.extract_fields(bg, sideband, **kw))


def _assert_born_field_recovered(g, carrier):
    holo, bg, truth = _synthesize(g, carrier)
    sideband = F.find_sideband(bg[0], g.pixel / 2)
    np.testing.assert_allclose(sideband, -carrier, atol=1e-9)
    ratio = _ratio(g, holo, bg, sideband)
    assert np.abs(ratio - 1 - truth).max() < 1e-4 * max(1.0, np.abs(truth).max())


def test_born_field_from_a_synthetic_hologram():
    g = _on_grid()
    _assert_born_field_recovered(g, R.carrier(2 * g.n, g.pixel / 2))


def test_noise_of_2_percent_stays_below_002_rms():
    g = _on_grid()
    carrier = R.carrier(2 * g.n, g.pixel / 2)
    holo, bg, truth = _synthesize(g, carrier, noise=0.02)
    ratio = _ratio(g, holo, bg, F.find_sideband(bg[0], g.pixel / 2))
    assert np.sqrt(np.mean(np.abs(ratio - 1 - truth) ** 2)) < 0.02


@pytest.mark.parametrize("offset", [(0.3, -0.2), (-0.45, 0.37), (0.1, 0.49)])
def test_sub_pixel_carrier_within_005_px(offset):
    g = _on_grid()
    hp = g.pixel / 2
    df = 1 / (2 * g.n * hp)
    carrier = R.carrier(2 * g.n, hp) + np.array(offset) * df
    _, bg, _ = _synthesize(g, carrier)
    found = F.find_sideband(bg[0], hp)
    assert np.all(np.abs(found + carrier) / df < 0.05)


def test_crop_across_kx_zero():
    """A carrier whose crop window spans negative and positive k_x."""
    g = _on_grid()
    hp = g.pixel / 2
    df = 1 / (2 * g.n * hp)
    # window centre at k_x = -10 bins, 64 wide: it crosses k_x = 0
    _assert_born_field_recovered(g, np.array([48 * df, 10 * df]))


def test_illumination_from_the_backgrounds():
    g = _on_grid()
    carrier = R.carrier(2 * g.n, g.pixel / 2)
    _, bg, _ = _synthesize(g, carrier)
    fields = F.extract_fields(bg, F.find_sideband(bg[0], g.pixel / 2), hologram_pixel=g.pixel / 2, n=g.n,
                              pupil_frequency=g.pupil_frequency)
    np.testing.assert_allclose(F.illumination_frequencies(fields, g.pixel), g.illuminations, atol=1e-6)


def test_bad_inputs():
    with pytest.raises(ValueError, match="2D"):
        F.find_sideband(np.ones((2, 8, 8)), 0.05)
    with pytest.raises(ValueError, match="exceeds"):
        F.extract_fields(np.ones((8, 8)), (0, 0), hologram_pixel=0.05, n=16, pupil_frequency=1.0)
    with pytest.raises(ValueError, match="zero"):
        F.field_ratio(np.ones((4, 4)), np.zeros((4, 4)))


def test_a_background_without_a_sideband_is_refused(cell):
    """Noise has no carrier: its strongest bin stands 3-5 times above the spectrum's median, where an off-axis
    hologram's stands hundreds of times (the HL60 cell's background 779). A search used to pick a random bin and
    reconstruct garbage with exit 0 (found by bench/probes/bad_inputs.py)."""
    from qora.io.errors import InputError

    rng = np.random.default_rng(0)
    for noise in (rng.random((64, 64)), rng.poisson(1000.0, (256, 256)).astype(float)):
        with pytest.raises(InputError, match="no sideband found"):
            F.find_sideband(noise, 0.1)
    background = cell[1]
    assert np.all(np.isfinite(F.find_sideband(background, 0.107)))  # the real background: found


def test_auto_keeps_what_the_cuda_stages_cannot_take_on_the_cpu(monkeypatch):
    """The backend rule's holo exception, seen without a GPU: what "auto" asks ``resolve`` for."""
    from types import SimpleNamespace

    from qora.holo import api

    asked = []
    monkeypatch.setattr(api, "resolve", lambda name: asked.append(name) or SimpleNamespace(is_cuda=False))
    assert api._backend("auto", 64, 128).is_cuda is False and asked[-1] == "auto"
    api._backend("auto", 64, 129)
    assert asked[-1] == "cpu"  # an odd size
    api._backend("cuda", 63)
    assert asked[-1] == "cuda"  # by name: the CUDA stages refuse it themselves
    fields = api.extract_fields(np.ones((2, 200, 210)), (1.0, 1.0), hologram_pixel=0.1, n=64, pupil_frequency=1.0)
    assert asked[-1] == "cpu" and fields.shape[0] == 2  # not square: the CUDA twin needs square holograms
