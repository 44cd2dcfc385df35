"""Is the object real? The centrosymmetry of its pattern (qora.phase.symmetry), and the default's choice by it."""

import numpy as np
import pytest

from qora.phase import objects, reconstruct
from qora.phase.detector import Detector, lithograph, record
from qora.phase.physics import detector_intensity
from qora.phase.symmetry import ASYMMETRY_REAL, CHI2_REAL, centrosymmetry


@pytest.mark.parametrize("photons", [1e6, 1e9])
def test_a_real_objects_counts_are_centrosymmetric_to_the_noise(photons):
    counts, mask = record(lithograph(128), Detector(photons=photons), seed=1)
    report = centrosymmetry(counts, mask)
    assert report["real"] and report["chi2"] is not None
    assert 0.5 < report["chi2"] <= 1.1  # Poisson noise alone: about 1 per pair
    assert "centrosymmetric" in report["message"] and "real object" in report["message"]


def test_a_phase_ramp_breaks_the_symmetry_at_few_photons():
    counts, mask = record(objects.triangle(128), Detector(photons=1e6, beamstop=4))  # 1 rad across the object
    report = centrosymmetry(counts, mask)
    assert not report["real"] and report["chi2"] > 4 * CHI2_REAL
    assert "not centrosymmetric" in report["message"]


def test_any_scale_uses_the_asymmetric_power():
    real = detector_intensity(lithograph(128)).astype(np.float64) * 0.37  # not counts
    complex_ = detector_intensity(objects.triangle(128)).astype(np.float64)
    assert centrosymmetry(real)["chi2"] is None and centrosymmetry(real)["real"]
    assert centrosymmetry(real)["asymmetry"] < 1e-9
    assert centrosymmetry(complex_)["asymmetry"] > 10 * ASYMMETRY_REAL  # 0.07 and not centrosymmetry(complex_)["real"]


def test_a_pattern_with_its_mirror_unmeasured_decides_nothing():
    intensity = detector_intensity(lithograph(128)).astype(np.float64)
    mask = np.zeros(intensity.shape, bool)
    mask[:65] = True  # every measured pixel's mirror lies in the masked half
    report = centrosymmetry(intensity, mask)
    assert report["pairs"] < 100 and not report["real"] and "too few" in report["message"]


def test_the_default_runs_the_real_object_search_on_a_centrosymmetric_pattern():
    counts, mask = record(lithograph(128), Detector(photons=1e8))
    result = reconstruct(counts, mask=mask, backend="cpu")
    assert result.recipe == "real-envelope"
    assert result.choice.startswith("the pattern is centrosymmetric") and "real-envelope" in result.choice
    given = reconstruct(counts, mask=mask, recipe="HIO**20 ER**10", backend="cpu")
    assert given.recipe != "real-envelope" and given.choice == ""


def test_the_default_keeps_the_stage_recipe_for_a_complex_object():
    counts, mask = record(objects.triangle(64), Detector(photons=1e8))
    result = reconstruct(counts, mask=mask, backend="cpu", recipe=None)
    assert result.recipe != "real-envelope" and result.choice == ""
