"""`qora bench holo-measured`: the defaults' rows on the FDTD cell, here on a stand-in series (Born fields of a cell
whose phantom has the real archive's region values), and the error where the archive is missing."""

from types import SimpleNamespace

import numpy as np
import pytest

from qora import holo
from qora.bench import holo_measured
from qora.holo.geometry import Geometry
from qora.holo.phantoms import Sphere, born_ratio
from qora.io.errors import InputError

MEDIUM = 1.333


def _stand_in(n=40, count=90, pixel=0.2):
    angles = np.linspace(0, 2 * np.pi, count, endpoint=False)
    g = Geometry(wavelength=holo_measured.WAVELENGTH, medium_index=MEDIUM, pixel=pixel, n=n, na_detection=MEDIUM,
                 angles=angles, rotation_sense=-1)
    nucleus_index = float(np.sqrt(MEDIUM**2 + 1.360**2 - 1.365**2))  # the two potentials add to the nucleus's
    cell = [Sphere((0.3, 0.0, 0.2), 2.6, 1.365), Sphere((0.0, 0.2, 0.0), 1.3, nucleus_index)]
    z = (np.arange(n) - n // 2) * pixel
    zz, yy, xx = np.meshgrid(z, z, z, indexing="ij")
    phantom = np.full((n,) * 3, MEDIUM)
    phantom[np.sqrt((zz - 0.3) ** 2 + yy**2 + (xx - 0.2) ** 2) < 2.6] = 1.365
    phantom[np.sqrt(zz**2 + (yy - 0.2) ** 2 + xx**2) < 1.3] = 1.360
    return SimpleNamespace(fields=1 + born_ratio(cell, g), phantom=phantom, medium_index=MEDIUM, pixel=pixel,
                           angles=angles)


def test_each_default_is_timed_beside_its_error(tmp_path, monkeypatch):
    (tmp_path / holo_measured.FDTD_ARCHIVE).write_bytes(b"")  # read by the stand-in below, not parsed
    monkeypatch.setattr(holo, "read_odtbrain_archive", lambda path, wavelength: _stand_in())
    lines = []
    result = holo_measured.run(backend="cpu", write=False, echo=lines.append, folder=tmp_path)
    gp, tv = result.cases["fdtd_cell/gp_default"], result.cases["fdtd_cell/tv_default"]
    assert gp["gridding"] == "nearest" and tv["gridding"] == "exact" and tv["tv_weight"] > 0
    # errors against the phantom, well under the cell's contrast of 0.032 (measured: GP 3.6e-3 on this 40^3 grid)
    assert gp["ms"] > 0 and tv["ms"] > 0 and 0 < gp["rmse"] < 6e-3 and 0 < tv["rmse"] < 6e-3
    # the cytoplasm reads above the nucleus (swapped regions or a sign would not); on these Rytov-of-Born fields with
    # the regions' edges counted both read high (GP 0.0057, TV 0.0072): the physics is test_holo_gridding.py's
    assert 0.003 < gp["contrast"] < 0.01 and 0.003 < tv["contrast"] < 0.01
    assert any("tv default (exact gridding)" in line for line in lines)


def test_a_missing_archive_says_where_to_put_it(tmp_path):
    with pytest.raises(InputError, match="QORA_ODT_DATA"):
        holo_measured.run(backend="cpu", write=False, echo=lambda *a: None, folder=tmp_path)
