"""CUDA variants of qora.phase against the CPU reference, from the same starts."""

import numpy as np
import pytest

from qora.phase import analysis, objects, reconstruct
from qora.phase.physics import native_amplitude, update_coefficients
from qora.phase.solver import Solver, random_start
from qora.testing import assert_parity

pytestmark = pytest.mark.gpu

VARIANTS = ["naive", "fused", "graph", "batched", "callback", "callback-load"]
CASES = [("triangle", (64, 64)), ("triangle", (45, 51)), ("cut_prism", (32, 32, 32)), ("cut_prism", (15, 16, 17))]


def _case(name, shape, batch, seed=0):
    obj = objects.OBJECTS[name](shape=shape)
    from qora.phase.physics import detector_intensity

    intensity = detector_intensity(obj)
    mask = np.zeros(shape, bool)
    mask[(0,) * len(shape)] = True  # one masked pixel exercises that branch
    amp = native_amplitude(intensity, mask)
    support = objects.support_of(obj)
    x0 = np.stack([random_start(amp, support, seed, s) for s in range(batch)])
    return amp, support, x0


def make_engine(variant, amp, support, batch):
    """The variant's engine; "callback-load" is the callback variant in its load-callback mode."""
    from qora.phase import cuda

    if variant == "callback-load":
        return cuda.CallbackEngine(amp, support, batch, mode="load")
    return cuda.make_engine(variant, amp, support, batch)


def _run(engine, x0, iterations, algorithm, constraint):
    a, b = update_coefficients(algorithm, 0.9)
    engine.set_x(x0)
    errs = engine.iterate(iterations, a, b, constraint)
    return engine.get_x(), errs


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("name,shape", CASES)
@pytest.mark.parametrize("iterations", [1, 20])
def test_variant_matches_cpu_step_by_step(variant, name, shape, iterations):
    from qora.phase.cpu import CpuEngine

    batch = 3 if variant == "batched" else 1
    amp, support, x0 = _case(name, shape, batch)
    assert_parity(lambda x: _run(CpuEngine(amp, support, batch), x, iterations, "HIO", None),
                  lambda x: _run(make_engine(variant, amp, support, batch), x, iterations, "HIO", None),
                  x0, rtol=1e-5)


@pytest.mark.parametrize("variant", ["graph", "callback", "callback-load"])
@pytest.mark.parametrize("algorithm", ["ER", "HIO", "RAAR"])
@pytest.mark.parametrize("constraint", [None, "real", "positive"])
def test_every_update_branch(variant, algorithm, constraint):
    from qora.phase.cpu import CpuEngine

    amp, support, x0 = _case("triangle", (48, 48), 2)
    assert_parity(lambda x: _run(CpuEngine(amp, support, 2), x, 5, algorithm, constraint),
                  lambda x: _run(make_engine(variant, amp, support, 2), x, 5, algorithm, constraint),
                  x0, rtol=1e-5)


def test_known_support_recipe_on_the_gpu():
    obj, intensity = objects.simulate("triangle", 64)
    r = reconstruct(intensity, support=objects.support_of(obj), recipe="HIO**400 ER**100", starts=8,
                    backend="cuda", variant="graph")
    assert r.backend == "cuda" and r.variant == "graph"
    assert r.fourier_error < 1e-6 and analysis.object_error(r.object, obj) < 1e-6


def test_known_support_cut_prism_on_the_gpu():
    obj, intensity = objects.simulate("cut_prism", 64)
    r = reconstruct(intensity, support=objects.support_of(obj), recipe="HIO**400 ER**100", starts=8,
                    backend="cuda", variant="graph")
    assert analysis.object_error(r.object, obj) < 1e-5


def test_default_recipe_on_the_gpu_with_shrinkwrap():
    obj, intensity = objects.simulate("triangle", 64)
    r = reconstruct(intensity, starts=4, backend="cuda")
    assert analysis.object_error(r.object, obj) < 1e-3


def test_batched_equals_looped():
    obj, intensity = objects.simulate("triangle", 64)
    sup = objects.support_of(obj)
    kw = dict(support=sup, recipe="HIO**50 ER**20", starts=4, backend="cuda", keep_all=True)
    looped = reconstruct(intensity, variant="graph", batch=1, **kw)
    batched = reconstruct(intensity, variant="batched", **kw)
    np.testing.assert_allclose(batched.objects, looped.objects, atol=1e-5 * np.abs(looped.objects).max())
    np.testing.assert_allclose(batched.final_errors, looped.final_errors, rtol=1e-4)


def test_second_graph_run_allocates_nothing_and_recaptures_nothing():
    from qora.backend import resolve

    cp = resolve("cuda").xp
    obj, intensity = objects.simulate("triangle", 64)
    solver = Solver(intensity, backend="cuda", variant="graph")
    sup = objects.support_of(obj)
    solver.run(support=sup, recipe="HIO**100 ER**50", starts=1, sync_every=25)
    engine = solver._engine
    graphs = dict(engine._graphs)
    pool = cp.get_default_memory_pool()
    before = pool.total_bytes()
    reads = []
    solver.run(support=sup, recipe="HIO**100 ER**50", starts=1, sync_every=25,
               progress=lambda *a: reads.append(a[1]))
    assert pool.total_bytes() == before
    assert engine._graphs.keys() == graphs.keys() and all(engine._graphs[k] is graphs[k] for k in graphs)
    assert reads == [25, 50, 75, 100, 125, 150]  # one host read per progress report


@pytest.mark.parametrize("variant", ["graph", "mixed", "callback"])
def test_starts_built_in_the_engine_equal_the_cpu_reference(variant):
    from qora.phase.cuda import make_engine
    from qora.phase.solver import fill_random_starts

    amp, support, _ = _case("triangle", (64, 64), 1)
    engine = make_engine(variant, amp, support, 2)
    fill_random_starts(engine, 7, [0, 1])
    reference = np.stack([random_start(amp, support, 7, s) for s in (0, 1)])
    np.testing.assert_allclose(engine.get_x(), reference, rtol=0, atol=1e-6 * np.abs(reference).max())


def test_whole_run_stays_within_32_bytes_per_voxel():
    """The start and the LLK are computed in the engine's buffers (PyNX's 32 B/voxel figure)."""
    from qora.backend import resolve
    from qora.backend.device import PeakMemory

    be = resolve("cuda")
    shape = (256, 256, 256)
    rng = np.random.default_rng(0)
    intensity = rng.random(shape, dtype=np.float32)
    support = np.zeros(shape, bool)
    support[96:160, 96:160, 96:160] = True
    be.fft.clear()  # the run's plans and their work areas count
    be.xp.get_default_memory_pool().free_all_blocks()
    with PeakMemory(be) as pm:
        solver = Solver(intensity, backend="cuda", variant="graph")
        r = solver.run(support=support, recipe="HIO**10", starts=1)
    peak = pm.peak_bytes / intensity.size
    del solver
    assert np.isfinite(r.llk[0]) and peak <= 32, peak


def test_bad_variant_name():
    with pytest.raises(ValueError, match="variant"):
        Solver(np.ones((8, 8)), backend="cuda", variant="half-baked")


# --- fp16 variants -------------------------------------------------------------------

FP16 = ["half", "mixed"]


@pytest.mark.parametrize("variant", FP16)
@pytest.mark.parametrize("name,shape", [("triangle", (64, 64)), ("cut_prism", (32, 32, 32))])
@pytest.mark.parametrize("iterations,tolerance", [(1, 3e-3), (20, 3e-2)])
def test_fp16_variants_follow_the_cpu_to_fp16_precision(variant, name, shape, iterations, tolerance):
    from qora.phase.cpu import CpuEngine

    amp, support, x0 = _case(name, shape, 2)
    ref, ref_err = _run(CpuEngine(amp, support, 2), x0, iterations, "HIO", None)
    got, got_err = _run(make_engine(variant, amp, support, 2), x0, iterations, "HIO", None)
    assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < tolerance
    np.testing.assert_allclose(got_err, ref_err, rtol=10 * tolerance)


def test_mixed_er_stage_is_the_fp32_path():
    from qora.phase.cuda import make_engine

    amp, support, x0 = _case("triangle", (64, 64), 1)
    a = _run(make_engine("mixed", amp, support, 1), x0, 20, "ER", None)
    b = _run(make_engine("graph", amp, support, 1), x0, 20, "ER", None)
    np.testing.assert_array_equal(a[0], b[0])


def test_fp16_variants_refuse_other_sizes():
    with pytest.raises(ValueError, match="power-of-two"):
        reconstruct(np.ones((48, 64)), support=np.ones((48, 64), bool), recipe="HIO**2", backend="cuda",
                    variant="half")


def _known(name, n, variant, starts=8):
    obj, intensity = objects.simulate(name, n)
    r = reconstruct(intensity, support=objects.support_of(obj), recipe="HIO**400 ER**100", starts=starts,
                    backend="cuda", variant=variant)
    return obj, r


def _z_factor_removed(x, truth):
    """Relative error left after dividing out the best factor that depends on z (axis 0) alone."""
    aligned, _ = analysis.align(x, truth)
    out = aligned.copy()
    for k in range(truth.shape[0]):
        den = np.vdot(aligned[k], aligned[k])
        if abs(den) > 0:
            out[k] = aligned[k] * (np.vdot(aligned[k], truth[k]) / den)
    return np.linalg.norm(out - truth) / np.linalg.norm(truth)


@pytest.mark.parametrize("name,n", [("triangle", 64), ("triangle", 256), ("prism", 64)])
def test_half_stays_in_its_band(name, n):
    """fp16 holds about three digits: the object error stalls between 2e-4 and 3e-3, not better, not worse."""
    obj, r = _known(name, n, "half")
    err = analysis.object_error(r.object, obj)
    assert 2e-4 < err < 3e-3 if obj.ndim == 2 else 2e-4 < err < 1e-2
    assert 1e-4 < r.fourier_error < 3e-3


@pytest.mark.parametrize("n", [64, 256])
def test_mixed_reaches_float_precision_in_2d(n):
    obj, r = _known("triangle", n, "mixed")
    assert r.fourier_error < 1e-6 and analysis.object_error(r.object, obj) < 1e-6


def test_mixed_on_the_separable_prism_differs_by_a_z_only_factor():
    obj, r = _known("prism", 64, "mixed")
    err = analysis.object_error(r.object, obj)
    residual = _z_factor_removed(r.object, obj)
    assert r.fourier_error < 1e-6
    assert residual < 1e-5 and residual < err  # what is left after the z factor is at fp32 level


def test_mixed_matches_graph_on_the_cut_prism():
    obj, mixed = _known("cut_prism", 64, "mixed")
    _, graph = _known("cut_prism", 64, "graph")
    assert analysis.object_error(mixed.object, obj) < 1e-5
    assert analysis.object_error(graph.object, obj) < 1e-5


# --- callback ----------------------------------------------------------------------------


def test_callback_recipe_changes_algorithm_without_new_plans():
    obj, intensity = objects.simulate("triangle", 64)
    solver = Solver(intensity, backend="cuda", variant="callback")
    r = solver.run(support=objects.support_of(obj), recipe="HIO**400 ER**100", starts=4)
    engine = solver._engine
    plans = (engine.plan_forward, engine.plan_inverse)
    solver.run(support=objects.support_of(obj), recipe="RAAR**30 ER**10", starts=1)
    assert (engine.plan_forward, engine.plan_inverse) == plans and engine.plan_created_s > 0
    assert r.fourier_error < 1e-6 and analysis.object_error(r.object, obj) < 1e-6


# --- fused_fft (cuFFTDx line passes carrying the element-wise work) ---------------------------

FUSED_CASES = [("triangle", (64, 64)), ("triangle", (64, 256)), ("triangle", (512, 512)),
               ("cut_prism", (64, 64, 64)), ("cut_prism", (64, 128, 64))]


@pytest.mark.parametrize("name,shape", FUSED_CASES)
@pytest.mark.parametrize("iterations", [1, 20])
@pytest.mark.parametrize("batch", [1, 3])
def test_fused_fft_matches_cpu_step_by_step(name, shape, iterations, batch):
    from qora.phase.cpu import CpuEngine

    if batch > 1 and np.prod(shape) > 2**18:
        pytest.skip("batch covered at the smaller sizes")
    amp, support, x0 = _case(name, shape, batch)
    # 20 HIO iterations amplify one iteration's rounding (2e-7 of the peak for both graph and fused_fft
    # here) about 40-fold on the rectangular 64 x 256 triangle with three starts: measured 8.2e-6 of the
    # peak for graph and 2.6e-5 for fused_fft on the H200 (docs/phase-performance.md); 1e-5 elsewhere
    rtol = 4e-5 if shape == (64, 256) and iterations == 20 and batch == 3 else 1e-5
    assert_parity(lambda x: _run(CpuEngine(amp, support, batch), x, iterations, "HIO", None),
                  lambda x: _run(make_engine("fused_fft", amp, support, batch), x, iterations, "HIO", None),
                  x0, rtol=rtol)


@pytest.mark.parametrize("algorithm", ["ER", "HIO", "RAAR"])
@pytest.mark.parametrize("constraint", [None, "real", "positive"])
def test_fused_fft_every_update_branch(algorithm, constraint):
    from qora.phase.cpu import CpuEngine

    amp, support, x0 = _case("triangle", (64, 64), 2)
    assert_parity(lambda x: _run(CpuEngine(amp, support, 2), x, 5, algorithm, constraint),
                  lambda x: _run(make_engine("fused_fft", amp, support, 2), x, 5, algorithm, constraint),
                  x0, rtol=1e-5)


def test_fused_fft_default_recipe_with_shrinkwrap():
    obj, intensity = objects.simulate("triangle", 64)
    r = reconstruct(intensity, starts=4, backend="cuda", variant="fused_fft")
    assert r.variant == "fused_fft"
    assert analysis.object_error(r.object, obj) < 1e-3


def test_fused_fft_known_support_reaches_float_precision():
    obj, intensity = objects.simulate("cut_prism", 64)
    r = reconstruct(intensity, support=objects.support_of(obj), recipe="HIO**400 ER**100", starts=2,
                    backend="cuda", variant="fused_fft")
    assert analysis.object_error(r.object, obj) < 1e-5


@pytest.mark.parametrize("shape", [(45, 51), (96, 96), (32, 32), (64,), (64, 64, 64, 64)])
def test_fused_fft_refuses_sizes_it_was_not_built_for(shape):
    from qora.phase.cuda_fused import FusedFFTEngine

    with pytest.raises(ValueError, match="fused_fft"):
        FusedFFTEngine(np.ones(shape, np.float32), np.ones(shape, bool))


@pytest.mark.parametrize("shape", [(64, 64, 64), (64, 128, 256)])
def test_fused_fft_modulus_on_the_y_pass_matches_cpu(shape):
    from qora.phase.cpu import CpuEngine
    from qora.phase.cuda_fused import FusedFFTEngine

    amp, support, x0 = _case("cut_prism", shape, 2)
    assert_parity(lambda x: _run(CpuEngine(amp, support, 2), x, 20, "HIO", None),
                  lambda x: _run(FusedFFTEngine(amp, support, 2, modulus_axis="y"), x, 20, "HIO", None),
                  x0, rtol=1e-5)


@pytest.mark.parametrize("shape", [(256, 512), (1024, 256), (256, 512, 64)])
def test_fused_fft_every_built_line_layout_matches_cpu(shape):
    """Sizes built with 8 and with 16 elements per thread: each layout against the CPU."""
    from qora.phase.cpu import CpuEngine
    from qora.phase.cuda_fused import FusedFFTEngine

    amp, support, x0 = _case("triangle" if len(shape) == 2 else "cut_prism", shape, 1)
    reference = _run(CpuEngine(amp, support, 1), x0, 3, "HIO", None)
    for ept in (8, 16):
        assert_parity(lambda x: reference,
                      lambda x: _run(FusedFFTEngine(amp, support, 1, elements_per_thread=ept), x, 3, "HIO", None),
                      x0, rtol=1e-5)


@pytest.mark.parametrize("shape,expected", [((128, 128, 128), "fused_fft"), ((64, 64, 64), "graph"),
                                            ((256, 256), "graph"), ((128, 128, 96), "graph"),
                                            ((2048, 2048), "fused_fft"), ((4096, 2048), "fused_fft"),
                                            ((1024, 1024), "graph"), ((2048, 1024), "graph")])
def test_auto_picks_fused_fft_where_it_measured_faster(shape, expected):
    assert Solver(np.ones(shape, np.float32), backend="cuda").variant == expected


@pytest.mark.parametrize("variant", ["graph", "batched", "naive", "mixed"])
@pytest.mark.parametrize("options", [dict(statistic="rms", threshold=0.3),
                                     dict(statistic="mean", threshold=0.5, size_range=(300, 400)),
                                     dict(statistic="max", threshold=0.9, size_range=(200, 2000))])
def test_engine_shrinkwrap_and_detwin_match_cpu(variant, options):
    """The engines' support update (statistic, size guard) and the detwin cut on the GPU against the CPU
    engine on the same iterates: the same statuses, supports equal up to pixels at the level."""
    from qora.phase.cpu import CpuEngine
    from qora.phase.detector import Detector, record
    from qora.phase.support import autocorrelation_estimate, grow_supports, halve_supports

    obj = objects.triangle(64)
    counts, mask = record(obj, Detector(photons=1e8, beamstop=2, gap=1))
    amp = native_amplitude(counts, mask)
    support, _ = autocorrelation_estimate(counts, mask=mask)
    cpu = CpuEngine(amp, support, batch=2)
    cpu.x[...] = np.stack([random_start(amp, support, 0, s) for s in range(2)])
    cpu.iterate(30, 1.0, -0.9)  # a partly reconstructed iterate: the support update has structure to find
    x = cpu.get_x()
    gpu = make_engine(variant, amp, support, 2)
    gpu.set_x(x)
    want = cpu.shrinkwrap(1.5, options["threshold"], statistic=options["statistic"],
                          size_range=options.get("size_range"))
    got = gpu.shrinkwrap(1.5, options["threshold"], statistic=options["statistic"],
                         size_range=options.get("size_range"))
    assert got == want
    differ = (gpu.get_support() != cpu.get_support()).sum(axis=(1, 2))
    assert np.all(differ <= 2)
    halve_supports(cpu.support)
    halve_supports(gpu.support, xp=gpu.xp)
    assert np.all((gpu.get_support() != cpu.get_support()).sum(axis=(1, 2)) <= 2)
    gpu.set_support(cpu.get_support()[0])  # the grow step (a recipe stage's grow=) on the same supports
    cpu.set_support(cpu.get_support()[0])
    grow_supports(cpu.support, 2)
    grow_supports(gpu.support, 2, xp=gpu.xp)
    np.testing.assert_array_equal(gpu.get_support(), cpu.get_support())


def test_default_recipe_on_the_gpu_from_a_detector_like_pattern():
    """Poisson counts, a beamstop and gaps, no support given: the default recipe on the GPU recovers the
    object (the success benchmark's criterion) in every one of 4 starts."""
    from qora.bench.phase_success import SUCCESS_BOUND, aligned_error
    from qora.phase.detector import Detector, record

    obj = objects.triangle(128)
    counts, mask = record(obj, Detector(photons=1e8))
    r = reconstruct(counts, mask=mask, starts=4, backend="cuda", keep_all=True)
    assert max(aligned_error(o, obj) for o in r.objects) < SUCCESS_BOUND


# candidates of docs/phase-performance.md, "fused_fft candidates": each against the CPU reference
PHASE_CANDIDATES = [("cut_prism", (64, 128, 64), {"strided_load": "async"}),
                    ("cut_prism", (64, 128, 64), {"strided_load": "pipe"}),
                    ("cut_prism", (256, 64, 64), {"strided_load": "pipe"}),  # 256 points: 16 lines, 16 per thread
                    ("cut_prism", (256, 64, 64), {"strided_load": "pipe", "strided_lines": 8}),
                    ("cut_prism", (64, 512, 64), {"strided_load": "pipe"}),  # 512 points: 4 lines
                    ("triangle", (256, 512), {"strided_load": "async"}),
                    ("triangle", (2048, 64), {"strided_load": "async"}),
                    ("triangle", (2048, 64), {"strided_load": "async", "strided_lines": 8}),
                    ("triangle", (2048, 64), {"column_split": True}),
                    ("triangle", (4096, 64), {"column_split": True}),
                    ("triangle", (4096, 64), {"column_split": True, "strided_load": "async"}),
                    ("triangle", (256, 512), {"contig_load": "prefetch"}),
                    ("triangle", (64, 2048), {"contig_load": "prefetch"}),  # 2048 points, 16 per thread
                    ("cut_prism", (64, 128, 64), {"contig_load": "prefetch", "strided_load": "async"})]


@pytest.mark.parametrize("name,shape,candidate", PHASE_CANDIDATES)
def test_fused_fft_candidates_match_cpu(name, shape, candidate):
    from qora.phase.cpu import CpuEngine
    from qora.phase.cuda_fused import FusedFFTEngine

    amp, support, x0 = _case(name, shape, 2)
    engine = FusedFFTEngine(amp, support, 2, **{"strided_load": "plain", "contig_load": "plain",
                                                "column_split": False, **candidate})
    # the rectangular triangle amplifies rounding over 20 HIO iterations as in the step-by-step test: measured
    # on the H200 2.2e-5 of the norm at 256 x 512 with the async and the prefetch loads alike (the loads do
    # not change the arithmetic)
    rtol = 4e-5 if name == "triangle" and shape == (256, 512) else 1e-5
    assert_parity(lambda x: _run(CpuEngine(amp, support, 2), x, 20, "HIO", None),
                  lambda x: _run(engine, x, 20, "HIO", None), x0, rtol=rtol)
    # the candidate ran where it is built (not the plain kernels it falls back to elsewhere)
    ran = " ".join(engine.strided_kernels.values())
    if "strided_load" in candidate:
        assert f"_{candidate['strided_load']}" in ran
    if candidate.get("column_split"):
        assert any(str(key).startswith("split") for key in engine.strided_kernels)
    if "contig_load" in candidate:
        assert all(v.endswith("_prefetch") for v in engine.contig_kernels.values())


@pytest.mark.parametrize("algorithm", ["ER", "HIO", "RAAR"])
@pytest.mark.parametrize("constraint", [None, "real", "positive"])
def test_fused_fft_prefetched_x_pass_every_update_branch(algorithm, constraint):
    from qora.phase.cpu import CpuEngine
    from qora.phase.cuda_fused import FusedFFTEngine

    amp, support, x0 = _case("triangle", (64, 64), 2)
    assert_parity(lambda x: _run(CpuEngine(amp, support, 2), x, 5, algorithm, constraint),
                  lambda x: _run(FusedFFTEngine(amp, support, 2, contig_load="prefetch"), x, 5, algorithm, constraint),
                  x0, rtol=1e-5)


def test_fused_fft_refuses_an_unknown_strided_load():
    from qora.phase.cuda_fused import FusedFFTEngine

    with pytest.raises(ValueError, match="strided_load"):
        FusedFFTEngine(np.ones((64, 64), np.float32), np.ones((64, 64), bool), strided_load="tma")
    with pytest.raises(ValueError, match="contig_load"):
        FusedFFTEngine(np.ones((64, 64), np.float32), np.ones((64, 64), bool), contig_load="tma")


@pytest.mark.parametrize("variant", ["graph", "batched", "naive"])
def test_settle_recipe_matches_cpu(variant):
    """``settle``: the ER iterations before each support update on the GPU engines, against the CPU engine from
    the same starts (two rms updates from a loose support); supports equal up to pixels at the level."""
    obj, intensity = objects.simulate("triangle", 64)
    loose = np.zeros((64, 64), bool)
    loose[12:52, 12:52] = True
    recipe = "HIO(sw=10, settle=3, sigma=2, sigma_min=1, threshold=0.25, stat=rms)**20 ER**5"
    kw = dict(support=loose, recipe=recipe, starts=2, seed=3, keep_all=True)
    cpu = reconstruct(intensity, backend="cpu", **kw)
    gpu = reconstruct(intensity, backend="cuda", variant=variant, batch=2 if variant == "batched" else 1, **kw)
    assert np.all((gpu.supports != cpu.supports).sum(axis=(1, 2)) <= 2)
    np.testing.assert_allclose(gpu.final_errors, cpu.final_errors, rtol=1e-3)
    assert gpu.agreement["total"] == 2 and gpu.convergence is not None
