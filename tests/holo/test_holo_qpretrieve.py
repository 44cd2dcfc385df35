"""The phase of a real off-axis hologram (an HL60 cell, 200 x 210, ../shared/data/holo/) against
qpretrieve's with the same filter (fixtures/qpretrieve_phase.npz, made by the script beside it in the
peers' environment), for every filter shape both offer; the sideband found automatically."""

from pathlib import Path

import numpy as np
import pytest

from qora.holo import fields as F
from qora.holo.filters import FILTERS

REFERENCE = Path(__file__).with_name("fixtures") / "qpretrieve_phase.npz"


@pytest.fixture(scope="module")
def reference():
    with np.load(REFERENCE) as z:
        return {k: z[k] for k in z.files}


def test_sideband_found_automatically_where_qpretrieve_finds_it(cell, reference):
    data, bg = cell
    sideband = F.quantitative_phase(data, bg)["sideband"]  # cycles/pixel (hologram_pixel 1)
    # qpretrieve takes the peak bin of its 512-padded spectrum: within one of its bins
    np.testing.assert_allclose(sideband, reference["sideband"], atol=1 / 512)


@pytest.mark.parametrize("name", FILTERS)
def test_phase_inside_the_cell_within_005_rad_of_qpretrieve(cell, reference, name):
    data, bg = cell
    theirs = reference[name.replace(" ", "_")]
    out = F.quantitative_phase(data, bg, n=216, filter=name, filter_fraction=float(reference["filter_size"]),
                               background_profile=None)  # the filter alone: the reference fits no background
    assert out["phase"].shape == data.shape and out["pixel"] == 1.0
    inside = theirs > 0.5  # the cell: a tenth of its peak phase (about 5 rad)
    assert 0.3 < inside.mean() < 0.7
    rms = np.sqrt(np.mean((out["phase"] - theirs)[inside] ** 2))
    assert rms < 0.05, f"{name}: {rms:.3f} rad RMS"


def test_filters_differ_where_they_should(cell, reference):
    """The comparison can fail: the disk's phase against qpretrieve's Gaussian is further than 0.05 rad."""
    data, bg = cell
    disk = F.quantitative_phase(data, bg, n=216, filter="disk", background_profile=None)["phase"]
    inside = reference["gauss"] > 0.5
    assert np.sqrt(np.mean((disk - reference["gauss"])[inside] ** 2)) > 0.05
