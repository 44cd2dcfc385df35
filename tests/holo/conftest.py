"""Shared holography fixtures."""

import numpy as np
import pytest

from qora.holo import phantoms as P
from qora.holo import reference as R
from qora.holo.plans import MappingPlan


@pytest.fixture(scope="module")
def small_case():
    """A 48^3 reference geometry, two hologram stacks (beads of radius 1.0 and 1.2 um, n = 1.35)
    and the backgrounds: ``(geometry, hologram_pixel, backgrounds, stacks)``."""
    g = R.geometry(48)
    hp = g.pixel / 2
    big = 2 * g.n
    carrier = R.carrier(big, hp)
    stacks = []
    for radius in (1.0, 1.2):
        phi = P.born_ratio([P.Sphere(radius=radius, index=1.35)], g, n=big, pixel=hp)
        stacks.append(P.holograms(np.exp(phi), g, carrier, hologram_pixel=hp))
    bg = P.holograms(np.ones((g.count, big, big)), g, carrier, hologram_pixel=hp)
    return g, hp, bg, stacks


@pytest.fixture
def counted_plans(monkeypatch):
    """Count the MappingPlans made (every reference to the class sees the counting __init__)."""
    made = []
    init = MappingPlan.__init__

    def counting(self, geometry, gridding="nearest", progress=None):
        made.append(geometry.n)
        init(self, geometry, gridding, progress)

    monkeypatch.setattr(MappingPlan, "__init__", counting)
    return made


@pytest.fixture(scope="module")
def cell(shared_data):
    """The real HL60 off-axis hologram and its background (../shared/data/holo/hologram_cell.npz, 200 x 210),
    as float; skipped where the shared data are absent."""
    path = shared_data / "holo" / "hologram_cell.npz"
    if not path.exists():
        pytest.skip(f"no {path}")
    with np.load(path) as z:
        return z["data"].astype(float), z["bg_data"].astype(float)
