"""Exact gridding of the Ewald caps (qora.holo.gridding): the transform against the direct sum, its conventions
against the nearest-bin mapping, the density weights on lattices, and a low-contrast nucleus that the nearest-bin
mapping loses and the exact one keeps (Born fields of spheres: analytic, no simulator of ours in between)."""

import numpy as np
import pytest

from qora import holo as H
from qora.holo.geometry import Geometry
from qora.holo.gridding import density_weights, direct_volume, hann_window, nonuniform_volume
from qora.holo.options import ReconstructionOptions
from qora.holo.phantoms import Sphere, born_ratio
from qora.holo.plans import MappingPlan, mapping_plan
from qora.io.errors import InputError

# a cell: cytoplasm 1.365 (R 2.6 um) with a nucleus of 1.360 (R 1.3 um; the second sphere's index makes the sum
# of the two potentials the nucleus's) in water, as the FDTD cell of docs/holo.md
CELL = [Sphere((0.3, 0.0, 0.2), 2.6, 1.365), Sphere((0.0, 0.2, 0.0), 1.3, float(np.sqrt(1.333**2 + 1.360**2
                                                                                          - 1.365**2)))]
CONTRAST = 0.005


def _rotation(n=16, count=12, **kw):
    angles = np.linspace(0, 2 * np.pi, count, endpoint=False)
    return Geometry(wavelength=0.65, medium_index=1.333, pixel=0.2, n=n, na_detection=1.2, angles=angles, **kw)


def test_the_transform_is_the_direct_sum():
    rng = np.random.default_rng(0)
    points = rng.uniform(-7, 7, (60, 3))
    values = rng.standard_normal(60) + 1j * rng.standard_normal(60)
    reference = direct_volume(values, points, 8)
    assert np.abs(nonuniform_volume(values, points, 8) - reference).max() < 1e-8 * np.abs(reference).max()


def test_rounded_frequencies_with_the_hit_weights_are_the_nearest_bin_mapping():
    g = _rotation()
    rng = np.random.default_rng(1)
    phi = rng.standard_normal((g.count, g.n, g.n)) + 1j * rng.standard_normal((g.count, g.n, g.n))
    nearest, exact = MappingPlan(g), MappingPlan(g, "exact")
    assert exact.points.shape == (sum(t.size for t in nearest.targets), 3)
    assert np.array_equal(exact.hits, nearest.hits)  # the solvers' measured bins are the same
    exact.points = np.round(exact.points)
    exact.density = 1.0 / nearest.hits[np.concatenate(nearest.targets)]
    want = nearest(phi)
    assert np.abs(exact(phi) - want).max() < 1e-9 * np.abs(want).max()


def test_density_weights_of_a_full_lattice_are_one_and_halve_when_every_sample_is_twice():
    n = 8
    lattice = np.stack(np.meshgrid(*(np.arange(n) - n // 2,) * 3, indexing="ij"), -1).reshape(-1, 3).astype(float)
    once = density_weights(lattice, np.full(n**3, 0.3), n)
    twice = density_weights(np.concatenate([lattice, lattice]), np.full(2 * n**3, 0.3), n)
    assert once == pytest.approx(1.0, rel=2e-3)  # the weights' transforms run to DENSITY_EPSILON = 1e-3
    assert twice == pytest.approx(0.5, rel=2e-3)
    assert hann_window(n)[n // 2, n // 2, n // 2] == 1.0


def _regions(g):
    z = (np.arange(g.n) - g.n // 2) * g.pixel
    zz, yy, xx = np.meshgrid(z, z, z, indexing="ij")
    r_cell = np.sqrt((zz - 0.3) ** 2 + yy**2 + (xx - 0.2) ** 2)
    r_nucleus = np.sqrt(zz**2 + (yy - 0.2) ** 2 + xx**2)
    return (r_cell < 2.0) & (r_nucleus > 1.9), r_nucleus < 0.7  # both 0.6 um away from the edges


@pytest.mark.parametrize("method", ["plain", "tv"])
def test_exact_gridding_keeps_the_nucleus_that_the_nearest_bin_loses(method):
    g = _rotation(n=40, count=90)
    ratio = 1 + born_ratio(CELL, g)
    cytoplasm, nucleus = _regions(g)
    contrast = {}
    for gridding in ("nearest", "exact"):
        extra = {"tv_weight": "auto"} if method == "tv" else {}
        index = H.reconstruct(ratio, g, backend="cpu", method=method, approximation="born", gridding=gridding,
                              **extra).index
        contrast[gridding] = index[cytoplasm].mean() - index[nucleus].mean()
    # measured: nearest 0.0029 / 0.0027, exact 0.0055 / 0.0055 (plain / tv)
    assert contrast["nearest"] < 0.7 * CONTRAST
    assert contrast["exact"] == pytest.approx(CONTRAST, rel=0.2)


def test_auto_is_exact_for_tv_in_the_rotation_geometry_only():
    rotation = _rotation()
    scanning = Geometry(wavelength=0.65, medium_index=1.333, pixel=0.2, n=16, na_detection=1.2)
    tv, gp = ReconstructionOptions(method="tv", tv_weight="auto"), ReconstructionOptions()
    assert mapping_plan(rotation, tv).gridding == "exact"
    assert mapping_plan(scanning, tv).gridding == "nearest"
    assert mapping_plan(rotation, gp).gridding == "nearest"
    assert mapping_plan(rotation, gp.replace(gridding="exact")).gridding == "exact"
    assert mapping_plan(rotation, tv.replace(gridding="nearest")).gridding == "nearest"


def test_an_unknown_gridding_is_refused():
    with pytest.raises(InputError, match="gridding"):
        ReconstructionOptions(gridding="linear")
    with pytest.raises(InputError, match="gridding"):
        MappingPlan(_rotation(), "linear")


def test_the_result_records_its_gridding():
    g = _rotation(n=16, count=12)
    ratio = 1 + born_ratio(CELL[:1], g)
    result = H.reconstruct(ratio, g, backend="cpu", method="plain", gridding="exact")
    assert result.info["gridding"] == "exact"


def test_the_command_takes_the_gridding_and_records_it(tmp_path):
    import json
    from pathlib import Path

    from click.testing import CliRunner

    from qora.cli import cli

    series = Path(__file__).with_name("fixtures") / "qpimage_series.h5"
    volumes = {}
    for gridding in ("nearest", "exact"):
        out = CliRunner().invoke(cli, ["holo", "reconstruct", str(series), "--input", "fields", "--na", "1.0",
                                       "--method", "plain", "--gridding", gridding, "--out",
                                       str(tmp_path / f"{gridding}.h5"), "--quiet"], catch_exceptions=False)
        assert out.exit_code == 0, out.output
        index, _, attrs = H.read_volume(tmp_path / f"{gridding}.h5")
        assert json.loads(attrs["extra"])["gridding"] == gridding
        volumes[gridding] = index
    assert np.abs(volumes["exact"] - volumes["nearest"]).max() > 1e-4


def test_the_weights_name_their_steps_on_the_runs_bar():
    g = _rotation(n=16, count=12)
    ratio = 1 + born_ratio(CELL[:1], g)
    seen = []
    H.reconstruct(ratio, g, backend="cpu", method="tv", tv_weight=1e-3, iterations=2, tv_inner=2,
                  progress=lambda stage, done, total, metrics=None: seen.append((stage, done, total)))
    steps = [s for s in seen if s[0].startswith("gridding weights")]
    assert [s[0] for s in steps] == [f"gridding weights {k} of 6" for k in range(1, 7)]
    assert {s[1:] for s in steps} == {(1, seen[-1][2])}  # the run's count held at the first order's unit
