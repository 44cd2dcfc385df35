"""A pattern that the solver refuses (NaN where measured) fails alone in a multi-file Dask run: the
client's plan measurement skips it instead of aborting every pattern; the report names it."""

import numpy as np
import pytest

from qora.distributed import connect, reconstruct_many
from qora.io.errors import InputError
from qora.phase import objects
from qora.phase.files import write_pattern


def test_a_refused_pattern_fails_alone(tmp_path):
    _, intensity = objects.simulate("triangle", 24)
    good, bad = tmp_path / "good.cxi", tmp_path / "nan.npy"
    write_pattern(good, intensity)
    nan = intensity.copy()
    nan[2, 3] = np.nan
    np.save(bad, nan)
    with connect(workers=1) as client:
        report = reconstruct_many([bad, good], client=client, starts=1, recipe="ER**3", backend="cpu",
                                  out_dir=tmp_path / "out")
        with pytest.raises(InputError, match="starts must be at least 1"):
            reconstruct_many([good], client=client, starts=0, backend="cpu")
    assert list(report.done) == ["good"] and list(report.failed) == ["nan"]
    assert "non-finite" in report.failed["nan"]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["good.cxi"]
    assert "on 1 worker" in report.summary()
