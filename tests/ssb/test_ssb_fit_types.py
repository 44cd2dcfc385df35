"""The session fit's options and result types (issue 41): options checked when made, keywords and an options
object giving the same fit, the result read like its JSON file, saved and loaded without loss."""

import json

import numpy as np
import pytest

from qora.io.errors import InputError
from qora.ssb import Aberrations, FitOptions, FitResult, Session, fit, simulate


@pytest.fixture(scope="module")
def session():
    rng = np.random.default_rng(3)
    phase = 0.3 * rng.standard_normal((48, 48))
    scan = simulate(phase, pixel=0.25, stride=2, window=32, alpha_mrad=20.0, aberrations=Aberrations(C10=-60.0))
    return Session(scan.data, kv=300.0, alpha_mrad=20.0, scan_step=scan.scan_step, backend="cpu")


def test_options_are_checked_when_made():
    with pytest.raises(InputError, match="trials must be at least 8"):
        FitOptions(trials=4)
    with pytest.raises(InputError, match="sections belongs to the incoherent depth model"):
        FitOptions(tilt=False, sections=2)
    with pytest.raises(InputError, match=r"unknown fit options \['trails'\]"):
        FitOptions.made(trails=50)
    assert FitOptions(band=[0.1, 0.8]).band == (0.1, 0.8)  # normalised
    assert FitOptions.made(FitOptions(seed=3), trials=16) == FitOptions(seed=3, trials=16)


def test_keywords_and_an_options_object_fit_the_same(session):
    # the orientation and branch given: random phase has no skewness to choose the 180-degree branch by
    given = dict(rotation=0.0, tilt=False, trials=16, orientation="identity", branch="as-fitted")
    by_keywords = fit(session, **given)
    by_options = fit(session, FitOptions(**given))
    assert isinstance(by_options, FitResult)
    assert by_keywords["standard"]["parameters"] == by_options["standard"]["parameters"]
    assert abs(by_options.standard["parameters"]["C10"] + 60.0) < 5.0


def test_the_result_reads_like_its_json_file_and_survives_a_round_trip(session, tmp_path):
    result = fit(session, rotation=0.0, tilt=False, trials=16)
    assert "thick" not in result and result.get("thick") is None and result.thick is None
    assert result["rotation_deg"] == pytest.approx(np.rad2deg(result.rotation_rad))
    path = result.save(tmp_path / "fit.json")
    on_disk = json.loads(path.read_text())
    assert on_disk == result.to_dict() and list(on_disk) == list(result)
    loaded = FitResult.load(path)
    assert loaded == result and loaded.to_dict() == on_disk
    assert loaded.standard["uncertainty"] == result.standard["uncertainty"]


def test_a_file_that_is_not_a_fit_is_refused(tmp_path):
    (tmp_path / "list.json").write_text("[1, 2]")
    (tmp_path / "other.json").write_text(json.dumps({"rotation_rad": 0.0, "colour": "red"}))
    with pytest.raises(InputError, match="not an object"):
        FitResult.load(tmp_path / "list.json")
    with pytest.raises(InputError, match=r"not keys of a fit result: \['colour'\]"):
        FitResult.load(tmp_path / "other.json")
    with pytest.raises(InputError, match="no fit file"):
        FitResult.load(tmp_path / "missing.json")
