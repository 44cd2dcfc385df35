"""The pruned box transforms against the full transforms of the zero-padded grid (float64 reference)."""

import numpy as np
import pytest

from qora.holo import box_fft
from qora.holo.box_fft import BoxSpectrum
from qora.holo.odt import FieldOfView


@pytest.mark.parametrize("big,n", [(16, 8), (15, 7), (12, 12), (20, 9)])
@pytest.mark.parametrize("library", ["ducc0", "scipy"])
def test_box_spectrum_matches_the_padded_transforms(big, n, library, monkeypatch):
    if library == "scipy":
        monkeypatch.setattr(box_fft, "_ducc0", lambda: None)
    rng = np.random.default_rng(big + n)
    fov, plan = FieldOfView(big, n), BoxSpectrum(big, n)
    box = rng.normal(size=(n,) * 3)
    full = np.fft.rfftn(fov.expand(box))
    np.testing.assert_allclose(plan.forward(box), full, atol=1e-11 * np.abs(full).max())
    spectrum = rng.normal(size=full.shape) + 1j * rng.normal(size=full.shape)  # not Hermitian on its edge planes
    want = fov.crop(np.fft.irfftn(spectrum, s=(big,) * 3, axes=(0, 1, 2)))
    np.testing.assert_allclose(plan.inverse(spectrum), want, atol=1e-12 * np.abs(want).max())


def test_box_must_fit():
    with pytest.raises(ValueError, match="fit"):
        BoxSpectrum(8, 9)


def test_fista_momenta_follow_beck_and_teboulle():
    from itertools import islice

    from qora.holo.fista import momenta

    t, want = 1.0, []
    for _ in range(6):  # t_{k+1} = (1 + sqrt(1 + 4 t_k^2)) / 2, weight (t_k - 1) / t_{k+1}
        t_next = (1 + np.sqrt(1 + 4 * t * t)) / 2
        want.append((t - 1) / t_next)
        t = t_next
    np.testing.assert_allclose(list(islice(momenta(), 6)), want, rtol=1e-15)
    assert want[0] == 0 and 0 < want[1] < want[-1] < 1
