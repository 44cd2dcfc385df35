"""Qora's defaults against qpimage's own example pipeline on the real HL60 hologram (200 x 210, whole, no crop):
fixtures/qpimage_pipeline.npz, made by qpimage in a peers' environment (the script beside it)."""

from pathlib import Path

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

from qora import holo
from qora.cli.root import cli

REFERENCE = Path(__file__).with_name("fixtures") / "qpimage_pipeline.npz"


@pytest.fixture(scope="module")
def theirs():
    with np.load(REFERENCE) as z:
        return z["phase"].astype(float)


def _rms_inside(phase, theirs):
    inside = theirs > 0.5  # the cell: above a tenth of its ~5 rad peak
    assert 0.2 < inside.mean() < 0.6
    return float(np.sqrt(np.mean((phase - theirs)[inside] ** 2)))


def test_api_defaults_equal_the_qpimage_pipeline(cell, theirs):
    out = holo.quantitative_phase(*cell)
    assert out["phase"].shape == theirs.shape == (200, 210)
    assert _rms_inside(out["phase"], theirs) < 0.05  # measured 0.026 rad
    # the comparison can fail: without the background fit the default was 0.24 rad off
    bare = holo.quantitative_phase(*cell, background_profile=None)
    assert _rms_inside(bare["phase"], theirs) > 0.15


def test_cli_defaults_equal_the_qpimage_pipeline(cell, theirs, tmp_path):
    np.save(tmp_path / "h.npy", cell[0])
    np.save(tmp_path / "b.npy", cell[1])
    out = CliRunner().invoke(cli, ["holo", "phase", str(tmp_path / "h.npy"), str(tmp_path / "b.npy"), "--out",
                                   str(tmp_path / "p.h5")])
    assert out.exit_code == 0, out.output
    with h5py.File(tmp_path / "p.h5") as f:
        assert f.attrs["background"] == "tilt" and list(f.attrs["offset"]) == [8, 3]
        assert _rms_inside(f["phase"][()], theirs) < 0.05


def test_half_sampling_is_not_shifted_against_the_hologram(cell):
    """A 200 x 210 hologram sits in a 216 square; at half sampling its field is the full-sampling field taken at
    every other pixel from the data's first pixel, exactly (the field is band-limited inside the half window).
    Centring the 210 columns at offset 3 put them 1.5 field pixels in, floored to 1: one hologram pixel off."""
    full = holo.quantitative_phase(*cell, background_profile=None)
    half = holo.quantitative_phase(*cell, n=108, background_profile=None)
    assert half["offset"] == (8, 2) and half["ratio"].shape == (100, 105)
    np.testing.assert_allclose(half["ratio"], full["ratio"][::2, ::2], atol=1e-9)
    assert np.abs(half["ratio"] - full["ratio"][::2, 1::2][:, :105]).max() > 0.1
