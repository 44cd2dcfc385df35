import numpy as np
import pytest

from qora import holo
from qora.holo import fields as F
from qora.holo import phantoms as P
from qora.holo import reference as R
from qora.holo import Pipeline


def _per_call(g, hp, bg, holos, **kw):
    sideband = F.find_sideband(bg[0], hp)
    args = dict(hologram_pixel=hp, n=g.n, pupil_frequency=g.pupil_frequency)
    ratio = F.field_ratio(F.extract_fields(holos, sideband, **args), F.extract_fields(bg, sideband, **args))
    return holo.reconstruct(ratio, g, **kw).index


def test_pipeline_equals_the_per_call_chain_and_keeps_its_state(small_case):
    g, hp, bg, stacks = small_case
    pipe = Pipeline(g, sideband=F.find_sideband(bg[0], hp), hologram_pixel=hp, hologram_n=2 * g.n,
                    iterations=10, r2c=True, backend="cpu")
    pipe.set_background(bg)
    seen = []
    first = pipe.process(stacks[0], progress=lambda s, d, t, m: seen.append(s)).index
    ref = _per_call(g, hp, bg, stacks[0], iterations=10, r2c=True)
    np.testing.assert_allclose(first, ref, atol=1e-6 * (R.SPHERE_INDEX - R.MEDIUM_INDEX))
    second = pipe.process(stacks[1]).index
    again = pipe.process(stacks[0]).index
    np.testing.assert_array_equal(again, first)
    assert np.abs(second - first).max() > 1e-3  # a different bead gives a different volume
    assert seen[0] == "fields" and seen[-1] == "done"
    series = list(pipe.process_series(stacks))
    np.testing.assert_array_equal(series[0].index, first)


def test_pipeline_errors(small_case):
    g, hp, bg, stacks = small_case
    pipe = Pipeline(g, sideband=F.find_sideband(bg[0], hp), hologram_pixel=hp, hologram_n=2 * g.n, backend="cpu")
    with pytest.raises(RuntimeError, match="set_background"):
        pipe.process(stacks[0])
    with pytest.raises(ValueError, match="expected holograms"):
        pipe.set_background(bg[:3])
    with pytest.raises(ValueError, match="approximation"):
        Pipeline(g, sideband=(0, 0), hologram_pixel=hp, hologram_n=2 * g.n, approximation="mie")


def test_quantitative_phase_of_one_hologram():
    g = R.geometry(64)
    hp = g.pixel / 2
    big = 2 * g.n
    carrier = R.carrier(big, hp)
    g1 = type(g)(g.wavelength, g.medium_index, g.pixel, g.n, g.na_detection, illuminations=np.zeros((1, 2)))
    phi = P.born_ratio([P.Sphere(radius=1.5, index=1.36)], g1, n=big, pixel=hp)
    # a band-limited field (1 + phi: the pupil keeps all of it), so the extraction is exact
    holo = P.holograms(1 + phi, g1, carrier, hologram_pixel=hp)[0]
    bg = P.holograms(np.ones_like(phi), g1, carrier, hologram_pixel=hp)[0]
    out = F.quantitative_phase(holo, bg, hologram_pixel=hp, pupil_frequency=g.pupil_frequency, n=g.n,
                               background_profile=None)  # the field itself: no background fitted
    truth = 1 + P.born_ratio([P.Sphere(radius=1.5, index=1.36)], g1)[0]
    np.testing.assert_allclose(out["ratio"], truth, atol=1e-9)
    np.testing.assert_allclose(out["phase"], np.angle(truth), atol=1e-9)
    np.testing.assert_allclose(out["amplitude"], np.abs(truth), atol=1e-9)
    assert out["pixel"] == pytest.approx(g.pixel)
    auto = F.quantitative_phase(holo, bg)  # pixel units, automatic pupil, the hologram's sampling
    assert auto["phase"].shape == (128, 128) and np.abs(auto["phase"]).max() > 0.5
