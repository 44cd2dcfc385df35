"""Issue 24 on CUDA against the CPU: tilted axes and the rotation sense (through the shared mapping
plan), two-sided bounds in GP (R2C, C2C) and TV, the complex index and the TV weight from the data."""

import math

import numpy as np
import pytest

from qora import holo
from qora.holo import phantoms as P
from qora.holo.geometry import Geometry, rotation_axis

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
    cpu = holo.reconstruct(ratio, g, backend="cpu", **options).index
    gpu = holo.reconstruct(ratio, g, backend="cuda", **options)
    assert gpu.info["backend"] == "cuda"
    assert _relative(gpu.index, cpu) < 1e-4


@pytest.mark.parametrize("fgp", ["fused", "separate", "cube", "march"])
def test_every_fgp_variant_keeps_the_box(tilted_case, fgp):
    g, ratio = tilted_case
    kw = dict(method="tv", iterations=6, tv_inner=10, tv_weight=3e-3, index_min=1.325, index_max=1.34)
    cpu = holo.reconstruct(ratio, g, backend="cpu", **kw).index
    gpu = holo.reconstruct(ratio, g, backend="cuda", fgp=fgp, **kw).index
    assert _relative(gpu, cpu) < 1e-4
    assert gpu.min() >= 1.325 - 1e-6 and gpu.max() <= 1.34 + 1e-6


# -- complex index and the TV weight from the data on the device (parity with the CPU) ---------------------------
#
# Same inputs on both sides (the same ratios, options and host tables); the device runs float32 with cuFFT. The
# tolerances are those of the tests above: 1e-4 of the contrast for the real index; 1e-3 relative for the
# absorption (a part 10x smaller than the contrast, carried in the same float32 potential).


@pytest.fixture(scope="module")
def absorbing_case():
    from qora.holo.geometry import cone_illuminations

    n, pixel = 32, 0.15
    df = 1.0 / (n * pixel)
    g = Geometry(0.532, MEDIUM, pixel, n, 1.2, illuminations=np.round(cone_illuminations(0.8, 0.532, 24) / df) * df)
    return g, 1 + P.partial_wave_ratio(P.Sphere((0, 0, 0), 1.2, 1.35 + 0.004j), g)


COMPLEX_CASES = [
    dict(method="gp", iterations=15, r2c=False),
    dict(method="gp", iterations=15, r2c=True),  # a complex index solves C2C on both sides
    dict(method="tv", iterations=8, tv_inner=5, tv_weight=1e-4),
    dict(method="plain"),
]


@pytest.mark.parametrize("options", COMPLEX_CASES, ids=lambda o: "-".join(f"{k}={v}" for k, v in o.items()))
def test_complex_index_matches_cpu(absorbing_case, options):
    g, ratio = absorbing_case
    cpu = holo.reconstruct(ratio, g, backend="cpu", complex_index=True, **options)
    gpu = holo.reconstruct(ratio, g, complex_index=True, backend="cuda", **options)
    assert gpu.info["backend"] == "cuda" and gpu.absorption is not None and gpu.absorption.shape == cpu.absorption.shape
    assert _relative(gpu.index, cpu.index) < 1e-4
    assert np.linalg.norm(gpu.absorption - cpu.absorption) < 1e-3 * np.linalg.norm(cpu.absorption)
    if options["method"] == "tv":
        assert gpu.absorption.min() >= -1e-7  # absorption only: TV's iterate is projected onto Im V >= 0
    # GP ends, as on the CPU, with the data restored and one more inverse transform, unprojected: its absorption
    # dips below 0 (the CPU's min -5e-4 on this case), so the GP cases compare with the CPU's alone


def _search_agrees(cpu, gpu):
    """The device's discrepancy search against the CPU's: the same noise, the same excess at the start weight
    (the device's real-index misfit leaves out a constant, so floors are not compared), the predicted weight
    within 5% (it follows that excess, summed in float32 on the device), and the same choice of the two unless
    one of them sits at the acceptance limit. True when both chose the predicted or both the start weight."""
    from qora.holo.regularisation import ACCEPT, W_START

    c, d = cpu.info["tv_selection"], gpu.info["tv_selection"]
    assert d["noise_energy"] == pytest.approx(c["noise_energy"], rel=1e-3)
    assert d["allowed_excess"] == pytest.approx(c["allowed_excess"], rel=1e-3)
    (w1c, e1c), (w2c, e2c) = c["tried"]
    (w1d, e1d), (w2d, e2d) = d["tried"]
    assert w1c == w1d == W_START
    assert abs(e1d - e1c) < 2e-2 * max(abs(e1c), c["allowed_excess"]), (c["tried"], d["tried"])
    assert w2d == pytest.approx(w2c, rel=0.05)
    limit = ACCEPT * c["allowed_excess"]
    same = (cpu.info["tv_weight"] == w2c) == (gpu.info["tv_weight"] == w2d)
    assert same or min(abs(e2c - limit), abs(e2d - limit)) < 0.05 * limit, (c, d)
    return same


@pytest.mark.parametrize("complex_index", [False, True], ids=["real", "complex"])
def test_tv_weight_from_the_data_matches_cpu(tilted_case, absorbing_case, complex_index):
    g, ratio = absorbing_case if complex_index else tilted_case
    rng = np.random.default_rng(5)
    noisy = ratio * (1 + 0.02 * (rng.standard_normal(ratio.shape) + 1j * rng.standard_normal(ratio.shape)))
    kw = dict(method="tv", tv_weight="auto", iterations=6, tv_inner=5, complex_index=complex_index)
    cpu = holo.reconstruct(noisy, g, backend="cpu", **kw)
    gpu = holo.reconstruct(noisy, g, backend="cuda", **kw)
    assert gpu.info["backend"] == "cuda" and gpu.info["tv_weight"] > 0 and gpu.info["tv_selection"]["noise_energy"] > 0
    if _search_agrees(cpu, gpu):
        assert _relative(gpu.index, cpu.index) < 1e-2  # three float32 FISTA runs, the last at a weight up to 5% apart


def test_pipeline_takes_complex_index_and_the_weight_from_the_data(absorbing_case):
    """The device Pipeline (holograms in) writes the absorption beside the index and chooses the weight per stack."""
    from qora.holo import Pipeline
    from qora.holo import fields as F
    from qora.holo.phantoms import holograms_from_fields
    from qora.holo.bpm import upsample_fields

    g, ratio = absorbing_case
    holos, bgs, hp = holograms_from_fields(upsample_fields(ratio, 2 * g.n), g, noise=0.01, seed=1)
    sideband = F.find_sideband(bgs[0], hp)
    kw = dict(method="tv", tv_weight="auto", iterations=5, tv_inner=5, complex_index=True)
    results = {}
    for backend in ("cpu", "cuda"):
        pipe = Pipeline(g, sideband=sideband, hologram_pixel=hp, hologram_n=2 * g.n, backend=backend, **kw)
        pipe.set_background(bgs)
        results[backend] = pipe.process(holos)
    cpu, gpu = results["cpu"], results["cuda"]
    assert gpu.absorption is not None and gpu.info["tv_selection"]["noise_energy"] > 0
    if _search_agrees(cpu, gpu):
        assert _relative(gpu.index, cpu.index) < 1e-2
        assert np.linalg.norm(gpu.absorption - cpu.absorption) < 1e-2 * np.linalg.norm(cpu.absorption)


def test_index_kernels_keep_a_weak_absorption():
    """index_complex and index_parts against NumPy's complex128 sqrt for kappa from 1e-6 to 4e-3 (and a gain, and
    zero): the imaginary index to float32 rounding of itself, not of n_m^2 (the cancelling sqrt((|z| - x) / 2)
    returned 0 below kappa ~1e-4)."""
    from qora.holo import kernels as K
    from qora.holo.cuda_stages import cupy

    cp = cupy()
    k02 = (2 * math.pi * MEDIUM / 0.532) ** 2
    n = np.linspace(1.33, 1.37, 4096) + 1j * np.geomspace(1e-6, 4e-3, 4096) * np.resize([1, 1, 1, -1, 0], 4096)
    v = ((n**2 - MEDIUM**2) * k02).astype(np.complex64)  # the potential, rad^2/um^2
    medium2, inv_k02 = np.float32(MEDIUM**2), np.float32(1 / k02)
    ref = np.sqrt(medium2.astype(np.float64) + v.astype(np.complex128) * np.float64(inv_k02))
    re, im = cp.empty(v.size, cp.float32), cp.empty(v.size, cp.float32)
    K.index_complex(v=cp.asarray(v), total=v.size, scale=1.0, medium2=medium2, inv_k02=inv_k02, out=re, out_imag=im)
    parts = [cp.asarray(np.ascontiguousarray(v.real)), cp.asarray(np.ascontiguousarray(v.imag))]
    K.index_parts(re=parts[0], im=parts[1], total=v.size, medium2=medium2, inv_k02=inv_k02)
    for got_re, got_im in ((re, im), parts):
        np.testing.assert_allclose(got_re.get(), ref.real, rtol=1e-6)
        np.testing.assert_allclose(got_im.get(), ref.imag, rtol=1e-5, atol=1e-12)
