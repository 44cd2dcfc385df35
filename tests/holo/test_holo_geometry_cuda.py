"""Issue 24 on CUDA against the CPU: tilted axes and the rotation sense (through the shared mapping
plan), two-sided bounds in GP (R2C, C2C) and TV, and what the CUDA solver leaves to the CPU."""

import math

import numpy as np
import pytest

from qora import holo
from qora.holo import phantoms as P
from qora.holo.geometry import Geometry, rotation_axis
from qora.holo.plans import Unsupported

pytestmark = pytest.mark.gpu

MEDIUM = 1.333


def _relative(got, ref):
    return float(np.linalg.norm(got - ref) / np.linalg.norm(ref - MEDIUM))


@pytest.fixture(scope="module")
def tilted_case():
    angles = np.sort(np.random.default_rng(2).uniform(0, 2 * np.pi, 40))  # non-uniform
    g = Geometry(0.532, MEDIUM, 0.1, 48, 1.2, angles=angles, axis=rotation_axis(0.2, 0.1), rotation_sense=-1)
    spheres = [P.Sphere((0.5, 0.3, -0.8), 0.9, 1.345), P.Sphere((-0.6, -0.5, 0.7), 0.6, 1.323)]
    return g, np.exp(P.born_ratio(spheres, g))


CASES = [
    dict(method="plain"),
    dict(method="gp", iterations=15, r2c=True),
    dict(method="gp", iterations=15, r2c=False),
    dict(method="gp", iterations=15, r2c=True, index_min=-math.inf, index_max=1.35),
    dict(method="gp", iterations=15, r2c=False, index_min=1.32, index_max=1.35),
    dict(method="tv", iterations=8, tv_inner=5, tv_weight=3e-3),
    dict(method="tv", iterations=8, tv_inner=5, tv_weight=3e-3, index_min=1.32, index_max=1.35),
]


@pytest.mark.parametrize("options", CASES, ids=lambda o: "-".join(f"{k}={v}" for k, v in o.items()))
def test_tilted_axis_and_bounds_match_cpu(tilted_case, options):
    g, ratio = tilted_case
    cpu = holo.reconstruct(ratio, g, **options).index
    gpu = holo.reconstruct(ratio, g, backend="cuda", **options)
    assert gpu.info["backend"] == "cuda"
    assert _relative(gpu.index, cpu) < 1e-4


@pytest.mark.parametrize("fgp", ["fused", "separate", "cube", "march"])
def test_every_fgp_variant_keeps_the_box(tilted_case, fgp):
    g, ratio = tilted_case
    kw = dict(method="tv", iterations=6, tv_inner=10, tv_weight=3e-3, index_min=1.325, index_max=1.34)
    cpu = holo.reconstruct(ratio, g, **kw).index
    gpu = holo.reconstruct(ratio, g, backend="cuda", fgp=fgp, **kw).index
    assert _relative(gpu, cpu) < 1e-4
    assert gpu.min() >= 1.325 - 1e-6 and gpu.max() <= 1.34 + 1e-6


@pytest.mark.parametrize("changes", [dict(complex_index=True), dict(method="tv", tv_weight="auto", iterations=4,
                                                                     tv_inner=3)])
def test_cpu_only_options_route_to_the_cpu_on_auto_and_are_refused_on_cuda(tilted_case, changes):
    g, ratio = tilted_case
    auto = holo.reconstruct(ratio, g, backend="auto", **changes)
    cpu = holo.reconstruct(ratio, g, backend="cpu", **changes)
    assert "backend" not in auto.info and np.array_equal(auto.index, cpu.index)
    with pytest.raises(Unsupported, match="CUDA solver does not implement"):
        holo.reconstruct(ratio, g, backend="cuda", **changes)
