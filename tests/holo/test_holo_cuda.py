"""qora.holo on CUDA against the CPU reference: every stage, both geometries, the device Pipeline."""

import math

import numpy as np
import pytest

from qora import holo
from qora.holo import fields as F
from qora.holo.plans import CropPlan
from qora.holo import phantoms as P
from qora.holo import reference as R
from qora.holo.geometry import Geometry
from qora.holo.unwrap import rytov, wrap

pytestmark = pytest.mark.gpu

CONTRAST = R.SPHERE_INDEX - R.MEDIUM_INDEX


def _relative(got, ref, centre=0.0):
    """||got - ref|| / ||ref - centre||."""
    return float(np.linalg.norm(got - ref) / np.linalg.norm(ref - centre))


def _on_grid(n=64, tilt_bins=(5, -7)):
    g = R.geometry(n)
    df = 1 / (n * g.pixel)
    ill = np.array([[0.0, 0.0], [tilt_bins[0] * df, tilt_bins[1] * df]])
    return Geometry(g.wavelength, g.medium_index, g.pixel, n, g.na_detection, illuminations=ill)


@pytest.mark.parametrize("carrier_bins", [None, (48, 10)], ids=["diagonal", "across-kx0"])
def test_field_extraction_matches_cpu(carrier_bins):
    g = _on_grid()
    big, hp = 2 * g.n, g.pixel / 2
    carrier = R.carrier(big, hp) if carrier_bins is None else np.array(carrier_bins) / (big * hp)
    phi = P.born_ratio([P.Sphere(radius=1.0, index=1.34)], g, n=big, pixel=hp)
    holos = P.holograms(1 + phi, g, carrier, hologram_pixel=hp)
    sideband = F.find_sideband(holos[0], hp)
    kw = dict(hologram_pixel=hp, n=g.n, pupil_frequency=g.pupil_frequency)
    if carrier_bins is not None:  # the window crosses k_x = 0: its columns hold both signs
        cols = CropPlan(big, sideband, n=g.n, **{k: kw[k] for k in ("hologram_pixel", "pupil_frequency")}).cols
        assert (cols < big // 2).any() and (cols > big // 2).any()
    cpu = F.extract_fields(holos, sideband, **kw)
    gpu = holo.extract_fields(holos, sideband, backend="cuda", **kw)
    assert gpu.shape == cpu.shape
    assert np.abs(gpu - cpu).max() < 1e-4 * np.abs(cpu).max()


def _phase_stack(n=64, count=3, seed=0):
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[:n, :n] / n
    stack = []
    for a in range(count):
        phase = (30 + 5 * a) * np.exp(-((y - 0.5) ** 2 + (x - 0.45 + 0.02 * a) ** 2) / 0.08) + 3 * np.sin(3 * y + a)
        phase += 2 * math.pi * (a - 1) + 0.3  # exercises the border rule
        amp = 1 + 0.2 * np.cos(2 * math.pi * x) * (a + 1) / count
        stack.append(amp * np.exp(1j * phase))
    return np.array(stack) * np.exp(0.01j * rng.standard_normal((count, n, n)))


def test_rytov_matches_cpu():
    from qora.holo import cuda_pipeline as cuda

    ratio = _phase_stack()
    cpu = rytov(ratio)
    gpu = cuda.first_order(ratio, "rytov")
    assert _relative(gpu, cpu) < 1e-4
    assert np.abs(gpu.imag - cpu.imag).max() < 1e-3  # no pixel lands on another multiple of 2 pi


def test_rytov_and_born_of_a_ratio_of_fields_match_cpu():
    from qora.holo import cuda_pipeline as cuda

    rng = np.random.default_rng(2)
    ratio = _phase_stack(48, 2)
    background = np.exp(1j * wrap(rng.uniform(-3, 3, ratio.shape))) * rng.uniform(0.5, 1.5, ratio.shape)
    fields = ratio * background
    assert _relative(cuda.first_order(fields, "rytov", background=background), rytov(ratio)) < 1e-4
    assert _relative(cuda.first_order(fields, "born", background=background), ratio - 1) < 1e-5


@pytest.fixture(scope="module")
def scan_case():
    g = R.geometry(48)
    sphere = P.Sphere(radius=1.2, index=R.SPHERE_INDEX)
    return g, np.exp(P.born_ratio([sphere], g))


@pytest.fixture(scope="module")
def rotation_case():
    n = 48
    g = Geometry(R.WAVELENGTH, R.MEDIUM_INDEX, R.PIXEL, n, R.NA_DETECTION,
                 angles=np.linspace(0, 2 * np.pi, 60, endpoint=False))
    spheres = [P.Sphere((0.5, 0.3, -0.8), 0.9, 1.36), P.Sphere((-1.0, -0.5, 1.0), 0.5, 1.38)]
    return g, np.exp(P.born_ratio(spheres, g))


RECON_CASES = [
    dict(method="gp", iterations=20, r2c=True, mapping="gather"),
    dict(method="gp", iterations=20, r2c=True, mapping="scatter"),
    dict(method="gp", iterations=20, r2c=False, mapping="gather"),
    dict(method="plain", mapping="gather"),
    dict(method="gp", iterations=10, r2c=True, mapping="gather", oversample=1.5),
    dict(method="tv", iterations=8, tv_inner=5, tv_weight=3e-3, mapping="gather"),
    dict(method="tv", iterations=8, tv_inner=5, tv_weight=3e-3, mapping="scatter", oversample=1.5),
]


@pytest.mark.parametrize("case", ["scan_case", "rotation_case"])
@pytest.mark.parametrize("options", RECON_CASES, ids=lambda o: "-".join(f"{k}={v}" for k, v in o.items()))
def test_reconstruct_matches_cpu(case, options, request):
    g, ratio = request.getfixturevalue(case)
    cuda_only = {k: options[k] for k in ("mapping",) if k in options}
    common = {k: v for k, v in options.items() if k not in cuda_only}
    cpu = holo.reconstruct(ratio, g, backend="cpu", **common).index
    gpu = holo.reconstruct(ratio, g, backend="cuda", **common, **cuda_only)
    assert gpu.index.shape == cpu.shape and gpu.index.dtype == np.float32
    assert gpu.info["backend"] == "cuda"
    assert _relative(gpu.index, cpu, R.MEDIUM_INDEX) < 1e-4


def test_fgp_variants_agree_within_two_ulp(scan_case):
    g, ratio = scan_case
    runs = {fgp: holo.reconstruct(ratio, g, backend="cuda", method="tv", iterations=6, tv_inner=10, tv_weight=3e-3,
                                 fgp=fgp).index for fgp in ("fused", "separate", "cube", "march")}
    for fgp, index in runs.items():
        np.testing.assert_array_max_ulp(index, runs["separate"], maxulp=2)
    assert np.abs(runs["fused"] - R.MEDIUM_INDEX).max() > 1e-3  # a real volume, not an empty one


def test_cuda_rejects_what_it_cannot_do(scan_case):
    from qora.holo import cuda_pipeline as cuda

    g, ratio = scan_case
    with pytest.raises(ValueError, match="mapping"):
        holo.reconstruct(ratio, g, backend="cuda", mapping="nearest")
    with pytest.raises(ValueError, match="fgp"):
        holo.reconstruct(ratio, g, backend="cuda", method="tv", fgp="tiled")
    with pytest.raises(TypeError, match="CUDA backend only"):
        holo.reconstruct(ratio, g, mapping="gather", backend="cpu")
    with pytest.raises(ValueError, match="even"):
        cuda.first_order(np.ones((1, 15, 15), complex))


@pytest.mark.parametrize("parts", [1, 4])
@pytest.mark.parametrize("method", ["gp", "tv"])
def test_pipeline_matches_the_per_call_chain_and_allocates_nothing(small_case, parts, method):
    import cupy

    from qora.holo import Pipeline

    g, hp, bg, stacks = small_case
    sideband = F.find_sideband(bg[0], hp)
    opts = dict(method=method, iterations=10, r2c=True, tv_weight=3e-3, tv_inner=5)
    pipe = Pipeline(g, sideband=sideband, hologram_pixel=hp, hologram_n=2 * g.n, backend="cuda", upload_parts=parts,
                    **opts)
    assert pipe.cuda is not None and len(pipe.cuda.fields.parts) == parts
    pipe.set_background(bg)
    first = pipe.process(stacks[0]).index
    kw = dict(hologram_pixel=hp, n=g.n, pupil_frequency=g.pupil_frequency)
    ratio = F.field_ratio(F.extract_fields(stacks[0], sideband, **kw), F.extract_fields(bg, sideband, **kw))
    ref = holo.reconstruct(ratio, g, backend="cpu", **opts).index
    assert _relative(first, ref, R.MEDIUM_INDEX) < 1e-4
    pool = cupy.get_default_memory_pool()
    cupy.cuda.Device().synchronize()
    used, total, plans = pool.used_bytes(), pool.total_bytes(), pipe.cuda.work.plan_count
    other = pipe.process(stacks[1]).index
    pipe.cuda.input()[...] = stacks[0]  # filled in place: no host copy
    again = pipe.process(copy=False).index
    assert again is pipe.cuda.host_out
    assert (pool.used_bytes(), pool.total_bytes(), pipe.cuda.work.plan_count) == (used, total, plans)
    np.testing.assert_array_equal(again, first)
    assert np.abs(other - first).max() > 1e-3
    assert not np.shares_memory(first, pipe.cuda.host_out)  # copied out: a later stack leaves it as it was


def test_pipeline_host_copies_by_streaming_stores_give_the_same_volume(small_case):
    """A float32 host stack goes into the input buffer, and the volume out of the output buffer, by streaming stores
    (qora.backend.streaming) where the host has them: the same volume, bit for bit, as by ordinary copies."""
    from qora.holo import Pipeline

    g, hp, bg, stacks = small_case
    pipe = Pipeline(g, sideband=F.find_sideband(bg[0], hp), hologram_pixel=hp, hologram_n=2 * g.n, backend="cuda",
                    iterations=10).cuda
    pipe.set_background(bg)
    stack = np.ascontiguousarray(stacks[0], np.float32)
    volumes = []
    for streaming in (True, False):
        pipe.streaming_copies = streaming
        volumes.append(pipe.process(stack).index)
        np.testing.assert_array_equal(pipe.host_in, stack)
    np.testing.assert_array_equal(volumes[0], volumes[1])
    assert not np.shares_memory(volumes[0], pipe.host_out)


def test_pipeline_stage_times_and_errors(small_case):
    from qora.holo import Pipeline

    g, hp, bg, stacks = small_case
    pipe = Pipeline(g, sideband=F.find_sideband(bg[0], hp), hologram_pixel=hp, hologram_n=2 * g.n, backend="cuda")
    with pytest.raises(RuntimeError, match="set_background"):
        pipe.process(stacks[0])
    with pytest.raises(ValueError, match="zero"):
        pipe.set_background(np.zeros_like(bg))
    pipe.set_background(bg)
    with pytest.raises(ValueError, match="expected holograms"):
        pipe.process(stacks[0][:3])
    bad = stacks[0].copy()
    bad[3, 5, 7] = np.nan
    with pytest.raises(ValueError, match="non-finite"):
        pipe.process(bad)
    pipe.cuda.profile = True
    pipe.process(stacks[0])
    assert set(pipe.cuda.stage_ms) == {"fields", "rytov", "solve"}
    assert all(v > 0 for v in pipe.cuda.stage_ms.values())
    with pytest.raises(ValueError, match="upload parts"):
        Pipeline(g, sideband=(0, 0), hologram_pixel=hp, hologram_n=2 * g.n, backend="cuda", upload_parts=0)


def test_the_cuda_pipeline_makes_its_mapping_tables_once(small_case, counted_plans):
    from qora.holo import Pipeline

    g, hp, bg, stacks = small_case
    pipe = Pipeline(g, sideband=F.find_sideband(bg[0], hp), hologram_pixel=hp, hologram_n=2 * g.n, backend="cuda",
                    iterations=5)
    assert len(counted_plans) == 1
    assert pipe.cuda.recon.plan is pipe.mapping and pipe.cuda.recon.mapper.entries == sum(
        t.size for t in pipe.mapping.targets)
