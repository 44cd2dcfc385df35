"""``qora bench holo --backend cuda``: the holography stages on the GPU against their floors.

At 256^3 and 512^3 (the reference geometry, 49 illuminations, holograms 2n x 2n):

- time per stage (CUDA events, medians): upload, field extraction, Rytov, the mapping FFT,
  mapping by gather and by scatter, GP 50 (R2C and C2C), FISTA-TV 20 x 10 with each FGP kernel,
  and the Pipeline end to end (host array in, host volume out; 1 and 4 upload parts);
- the FGP step as in seed 004: (solve with 10 dual steps - solve with 0) / 200 per kernel;
- bytes by the traffic model per stage, GB/s against the copy bandwidth measured in the same run;
- the Pipeline's model: its transforms (each plan timed alone) + its kernels' compulsory bytes
  at the copy bandwidth + the host transfers at the measured page-locked bandwidth;
- peak device memory of C2C, R2C, TV and the Pipeline (256^3);
- the 188^3, 180-angle rotation case with default GP through the Pipeline (host in, host out,
  transfers included, warm plans) beside the CPU Pipeline on the same machine, and its Ewald mapping by
  nearest bin and by exact gridding (TV's default there) with the exact one's difference from the host's.

The holograms are a Gaussian phase bump seen by every illumination: the work does not depend
on the content, and synthesising it takes seconds at 512^3 (the parity tests check values).
"""

from __future__ import annotations

import time

import numpy as np

from qora.bench.common import BenchResult, copy_floor, time_device, time_queued
from qora.bench.registry import shape_label

__all__ = ["run", "traffic"]

FGP_STEPS = (20, 10)  # outer x inner iterations of the FGP-step measurement (seed 004)


def bump_holograms(g):
    from qora.holo import holograms_from_fields

    big, hp = 2 * g.n, g.pixel / 2
    y = (np.arange(big) - big // 2) * hp
    r2 = y[:, None] ** 2 + y[None, :] ** 2
    ratio = np.exp((-0.05 + 2j) * np.exp(-r2 / (0.15 * big * hp) ** 2))
    holos, bgs, hp = holograms_from_fields(np.broadcast_to(ratio, (g.count, big, big)), g)
    return holos.astype(np.float32), bgs.astype(np.float32), hp  # as a camera's frames arrive: 32-bit


def traffic(n: int, count: int, big: int, entries: int, iterations: int = 50) -> dict:
    """Compulsory bytes of each stage's kernels (the traffic model; the FFTs are timed, not modelled).

    n: field edge; big: solver grid edge; count: holograms (2n x 2n); entries: mapped bins.
    """
    hn, half = 2 * n, big // 2 + 1
    px, nh, n3 = count * n * n, big * big * half, big**3
    padded = 4 * big * big * 2 * half
    return {
        "fields": 8 * px + 8 * px,  # crop: window bins read, fields written (inverse FFT timed apart)
        "rytov": (16 + 12) * px + 16 * px + 12 * px + (16 + 12 + 8) * px,  # divergence, Poisson, congruence, write
        "mapping": 12 * n3 + entries * (8 + 16) + entries * 12,  # zeroing, spectrum + tables, sums and hits
        "gp_prepare": (8 * nh + 4 * n3 // 2) + (12 * n3 + 8 * n3) + (2 * 8 * nh + 8 * nh) + 16 * nh,
        "gp_loop": iterations * (2 * padded + 25 * nh),  # clamp (read + write), restore (E, a, counts, E)
        "index": 2 * padded + 4 * n**3,
        "h2d": 4 * count * hn * hn,
        "d2h": 4 * n**3,
    }


def _wall_ms(fn, sync, repeats: int = 5) -> float:
    """Median wall time of ``fn(); sync()`` after one warm-up call (work on streams of its own)."""
    fn()
    sync()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        sync()
        samples.append((time.perf_counter() - t0) * 1e3)
    return float(np.median(samples))


def _transfer_gbs(cp, nbytes: int) -> dict:
    host = cp.cuda.alloc_pinned_memory(nbytes)
    dev = cp.empty(nbytes, cp.uint8)
    s = cp.cuda.get_current_stream()
    out = {}
    for name, args in (("h2d", (dev.data.ptr, host.ptr, nbytes, 1)), ("d2h", (host.ptr, dev.data.ptr, nbytes, 2))):
        samples = []
        for i in range(6):
            t0 = time.perf_counter()
            cp.cuda.runtime.memcpyAsync(*args, s.ptr)
            s.synchronize()
            if i:
                samples.append(time.perf_counter() - t0)
        out[name] = nbytes / np.median(samples) / 1e9
    return out


def _stages(result, be, n: int, copy_gbs: float, echo, *, memory: bool) -> None:
    from qora.backend.fft import FORWARD, INVERSE
    from qora.backend.device import PeakMemory
    from qora.holo import Pipeline
    from qora.holo import fields as F
    from qora.holo import reference as R
    from qora.holo.cuda_stages import Mapper

    cp = be.xp
    g = R.geometry(n)
    label = shape_label((n, n, n))
    holos, bgs, hp = bump_holograms(g)
    sideband = F.find_sideband(bgs[0], hp)
    with PeakMemory(be) as peak_pipe:
        # oversample 1: the reference configuration of the performance log's rows (the default is 2, whose
        # solver grid is (2n)^3: docs/holo-performance.md)
        pipe = Pipeline(g, sideband=sideband, hologram_pixel=hp, hologram_n=2 * n, backend="cuda", oversample=1).cuda
        pipe.set_background(bgs)
        pipe.process(holos)
    solver, mapper = pipe.recon.solver, pipe.recon.mapper
    model = traffic(n, g.count, pipe.recon.big, mapper.entries)
    times = {}
    stream = cp.cuda.get_current_stream()
    dst = cp.empty((n, n, n), cp.float32)
    times["upload"] = _wall_ms(lambda: pipe._upload(holos), pipe.copy_stream.synchronize)
    times["fields"] = time_device(be, lambda: pipe.fields.extract(pipe.sample), repeats=10).median_ms
    times["rytov"] = time_device(be, lambda: pipe.order(pipe.sample, pipe.background, pipe.phi), repeats=10).median_ms
    spectra = pipe.phi if pipe.recon.padded is None else pipe.recon.padded  # the solver grid's (A, N, N)
    fft2 = pipe.recon.fft
    times["mapping_fft"] = time_device(be, lambda: fft2.execute(spectra.data.ptr, spectra.data.ptr, FORWARD),
                                       repeats=10).median_ms
    times["mapping_gather"] = time_device(be, lambda: mapper(spectra, solver.sums, solver.hits), repeats=10).median_ms
    scatter = Mapper(pipe.recon.plan, "scatter")
    times["mapping_scatter"] = time_device(be, lambda: scatter(spectra, solver.sums, solver.hits), repeats=10).median_ms
    del scatter

    def gp_half():
        mapper(spectra, solver.sums, solver.hits)
        solver._gp_half(dst.data.ptr, stream)
        return dst

    _gp_loops(result, be, solver, gp_half, times, label)
    fused = solver.fused
    # transforms alone, for the Pipeline's model
    big = pipe.recon.big
    f = pipe.fields
    ffts = {
        "hologram_r2c": time_device(be, lambda: f.r2c[g.count].execute(f.holograms.data.ptr, f.spectra.data.ptr),
                                    repeats=10).median_ms,
        "field_c2c": time_device(be, lambda: f.inverse.execute(pipe.sample.data.ptr, pipe.sample.data.ptr, INVERSE),
                                 repeats=10).median_ms,
        "volume_r2c": time_device(be, lambda: solver.forward.execute(solver.sums.data.ptr, solver.sums.data.ptr),
                                  repeats=10).median_ms,
        "volume_c2r": time_device(be, lambda: solver.backward.execute(solver.sums.data.ptr, solver.sums.data.ptr),
                                  repeats=10).median_ms,
    }
    iters = solver.iterations
    if fused is not None:  # the fused loop's passes are its transforms, clamp and restore in one: timed as such
        # the buffers hold the fused loop's layout (_gp_loops ends with it): the restoring z pass runs on the tiles
        # that hold a measured bin, as in the Pipeline
        ffts["gp_fused_loop"] = time_device(be, lambda: fused.run(solver.sums, solver.a, solver.counts, iters,
                                                                  solver.scale, solver.bounds), repeats=5).median_ms
        model.update(gp_loop=fused.model_bytes(iters, solver.counts), index=8 * big * big * 2 * fused.stride + 4 * n**3)
    loop_ms = ffts.get("gp_fused_loop", (iters + 1) * ffts["volume_c2r"] + iters * ffts["volume_r2c"])
    fft_ms = ffts["hologram_r2c"] + 4 * ffts["field_c2c"] + loop_ms
    transfer = _transfer_gbs(cp, model["h2d"])
    cufft_loop = traffic(n, g.count, big, mapper.entries)["gp_loop"]  # its clamp and restore passes
    # the transforms are timed, not modelled: the fused loop (which carries the clamp and restore) as a whole
    kernel_bytes = sum(v for k, v in model.items() if k not in ("h2d", "d2h") + (("gp_loop",) if fused else ()))
    model_ms = (fft_ms + kernel_bytes / copy_gbs / 1e6 + model["h2d"] / transfer["h2d"] / 1e6
                + model["d2h"] / transfer["d2h"] / 1e6)
    nothing = lambda: None  # noqa: E731 - process() returns when its stream is done
    e2e, e2e_ordinary = _from_host(pipe, holos)
    pipe.input()[...] = holos
    e2e_buffer = _wall_ms(lambda: pipe.process(copy=False), nothing)
    stage_ms = _profiled(pipe)
    result.add(f"pipeline/{label}/per_stack", ms=e2e, model_ms=model_ms, ratio=e2e / model_ms,
               input_buffer_ms=e2e_buffer, buffer_ratio=e2e_buffer / model_ms, ordinary_copies_ms=e2e_ordinary,
               fft_ms=fft_ms, ffts=ffts, kernel_bytes=kernel_bytes, transfer_gbs=transfer, stage_ms=stage_ms)
    parts4 = Pipeline(g, sideband=sideband, hologram_pixel=hp, hologram_n=2 * n, backend="cuda", upload_parts=4,
                      oversample=1).cuda
    parts4.set_background(bgs)
    t4 = _wall_ms(lambda: parts4.process(holos), nothing)
    result.add(f"pipeline/{label}/per_stack_4_parts", ms=t4, ratio=t4 / model_ms)
    del parts4
    for stage, ms in times.items():
        key = {"mapping_gather": "mapping", "mapping_scatter": "mapping", "upload": "h2d"}.get(stage, stage)
        nbytes = model.get(key)
        if stage.startswith("gp50_r2c"):  # the fused loop's bytes by its model; cuFFT's loop: clamp and restore
            nbytes = model["gp_prepare"] + (model["gp_loop"] if stage == "gp50_r2c" else cufft_loop) + model["index"]
        gbs = nbytes / ms / 1e6 if nbytes and stage not in ("mapping_fft",) else None
        result.add(f"stage/{label}/{stage}", ms=ms, bytes=nbytes, gbs=gbs,
                   pct_copy=100 * gbs / copy_gbs if gbs and stage != "upload" else None)
    echo(f"  {label}: " + ", ".join(f"{k} {v:.2f} ms" for k, v in times.items())
         + f"; pipeline {e2e:.1f} ms (model {model_ms:.1f}, x{e2e / model_ms:.2f}; "
         f"input buffer {e2e_buffer:.1f}; ordinary copies {e2e_ordinary:.1f}; 4 parts {t4:.1f}); "
         f"stages {stage_ms}")
    del pipe
    _solvers(result, be, g, label, echo, memory=memory, peak_pipe=peak_pipe.peak_bytes)


def _profiled(pipe) -> dict:
    """The Pipeline's stage times (ms, CUDA events) of one more run from its input buffer."""
    pipe.profile = True
    pipe.process()
    pipe.profile = False
    return dict(pipe.stage_ms)


def _from_host(pipe, holos) -> tuple:
    """The Pipeline from the host array ``holos`` (ms): as a user's call runs, and with the buffers' host copies by
    ordinary stores instead of streaming ones (as before issue 43's change)."""
    ms = []
    for streaming in (False, True):
        pipe.streaming_copies = streaming
        ms.append(_wall_ms(lambda: pipe.process(holos), lambda: None))
    return ms[1], ms[0]


def _gp_loops(result, be, solver, gp_half, times, label) -> None:
    """GP 50 (``gp_half``: mapping and solve, returning the index volume) through the solver's loop, then through
    cuFFT's in the same run, the mapping's time taken off; with a fused loop, their ratio and the fused volume's
    largest difference from cuFFT's loop's, relative to the latter's range (its error beside its time)."""
    times["gp50_r2c"] = time_device(be, gp_half, warmup=1, repeats=5).median_ms - times["mapping_gather"]
    fused, solver.fused = solver.fused, None
    times["gp50_r2c_cufft"] = time_device(be, gp_half, warmup=1, repeats=5).median_ms - times["mapping_gather"]
    reference = gp_half().copy()
    solver.fused = fused
    if fused is not None:
        volume = gp_half()  # also leaves a, the counts and the volume in the fused loop's row layout
        xp = be.xp
        difference = float(xp.abs(volume - reference).max() / (reference.max() - reference.min()))
        measured = len(fused.measured_tiles(solver.counts)) / fused.tiles
        result.add(f"gp/{label}/fused_over_cufft", ratio=times["gp50_r2c"] / times["gp50_r2c_cufft"],
                   fused_ms=times["gp50_r2c"], cufft_ms=times["gp50_r2c_cufft"], measured_tiles=measured,
                   max_difference_of_range=difference)


def _solvers(result, be, g, label, echo, *, memory: bool, peak_pipe: int) -> None:
    """GP C2C, TV per FGP kernel, the FGP step, and peak memory, each on its own solver."""
    from qora.backend.device import PeakMemory
    from qora.holo.cuda_pipeline import Reconstruction
    from qora.holo.cuda_stages import WorkArea
    from qora.holo import FGP_VARIANTS, ReconstructionOptions
    from qora.holo import MappingPlan, solver_grid

    cp = be.xp
    n = g.n
    rng = np.random.default_rng(0)
    phi = (rng.standard_normal((g.count, n, n)) * 0.01 + 0j).astype(np.complex64)
    dst = cp.empty((n, n, n), cp.float32)
    peaks = {"pipeline_gp_r2c": peak_pipe}

    def build(**options):
        with PeakMemory(be) as peak:
            work = WorkArea()
            recon = Reconstruction(g, work, MappingPlan(solver_grid(g)), ReconstructionOptions(oversample=1, **options))
            work.allocate()
            x = cp.asarray(phi)
            recon(x, dst.data.ptr)
            be.synchronize()
        return recon, x, peak.peak_bytes

    recon, x, peaks["gp_r2c"] = build(method="gp", iterations=50, r2c=True)
    del recon, x
    recon, x, peaks["gp_c2c"] = build(method="gp", iterations=50, r2c=False)
    t = time_device(be, lambda: recon(x, dst.data.ptr), warmup=1, repeats=3).median_ms
    result.add(f"stage/{label}/gp50_c2c_with_mapping", ms=t)
    del recon, x
    outer, inner = FGP_STEPS
    step = {}
    for fgp in FGP_VARIANTS:
        ms = {}
        for k in (0, inner):
            recon, x, p = build(method="tv", iterations=outer, tv_inner=k, tv_weight=1e-3, fgp=fgp)
            if fgp == "fused" and k == inner:
                peaks["tv"] = p
            ms[k] = time_device(be, lambda: recon(x, dst.data.ptr), warmup=1, repeats=3).median_ms
            del recon, x
        step[fgp] = (ms[inner] - ms[0]) / (outer * inner)
        nbytes = (13 if fgp != "separate" else 18) * 4 * n**3
        gbs = nbytes / step[fgp] / 1e6
        result.add(f"fgp/{label}/{fgp}", ms=step[fgp], solve_ms=ms[inner], bytes=nbytes, gbs=gbs)
    if memory:
        for k, v in peaks.items():
            result.add(f"memory/{label}/{k}", bytes=v, gib=v / 2**30)
    echo(f"  {label}: FGP step " + ", ".join(f"{k} {v:.3f} ms" for k, v in step.items())
         + "; peak GiB " + ", ".join(f"{k} {v / 2**30:.2f}" for k, v in peaks.items()))


def _rotation_188(result, be, echo) -> None:
    from qora.holo import fields as F
    from qora.holo import reference as R
    from qora.holo import Geometry, Pipeline

    g = Geometry(R.WAVELENGTH, R.MEDIUM_INDEX, R.PIXEL, 188, R.NA_DETECTION,
                 angles=np.linspace(0, 2 * np.pi, 180, endpoint=False))
    holos, bgs, hp = bump_holograms(g)
    sideband = F.find_sideband(bgs[0], hp)
    kw = dict(sideband=sideband, hologram_pixel=hp, hologram_n=2 * g.n)
    t0 = time.perf_counter()
    gpu = Pipeline(g, backend="cuda", **kw)
    build_s = time.perf_counter() - t0
    gpu.set_background(bgs)
    samples = []
    for i in range(6):
        t0 = time.perf_counter()
        vol = gpu.process(holos).index
        if i:
            samples.append(time.perf_counter() - t0)
    del gpu
    cpu = Pipeline(g, backend="cpu", **kw)
    cpu.set_background(bgs)
    t0 = time.perf_counter()
    ref = cpu.process(holos).index
    cpu_s = time.perf_counter() - t0
    gpu_s = float(np.median(samples))
    diff = float(np.linalg.norm(vol - ref) / np.linalg.norm(ref - g.medium_index))
    result.add("rotation/188x188x188x180/gp50_pipeline", ms=gpu_s * 1e3, cpu_ms=cpu_s * 1e3, speedup=cpu_s / gpu_s,
               build_s=build_s, relative_difference=diff)
    echo(f"  188^3 x 180 rotation, GP 50: GPU {gpu_s:.2f} s (host in and out), CPU {cpu_s:.1f} s, "
         f"x{cpu_s / gpu_s:.0f}; GPU vs CPU {diff:.1e}; Pipeline built in {build_s:.1f} s")


def _rotation_mapping(result, be, echo) -> None:
    """The rotation case's Ewald mapping by nearest bin (GP's default) and exact gridding (TV's default in this
    geometry) on the solver's grid: device ms of each, the host's plan-building seconds, and the exact mapping's
    largest difference from the host's (ducc0, float64) relative to the largest value."""
    from qora.holo import reference as R
    from qora.holo import Geometry, MappingPlan, ReconstructionOptions, solver_grid
    from qora.holo.cuda_pipeline import mapper_for

    cp = be.xp
    g = solver_grid(Geometry(R.WAVELENGTH, R.MEDIUM_INDEX, R.PIXEL, 188, R.NA_DETECTION,
                             angles=np.linspace(0, 2 * np.pi, 180, endpoint=False)), ReconstructionOptions().oversample)
    big = g.n
    phi = np.random.default_rng(0).standard_normal((g.count, big, big)).astype(np.complex64)
    spectra = cp.fft.fft2(cp.asarray(phi))  # the device's: of centre-origin fields
    sums, hits = cp.empty(big**3, cp.complex64), cp.empty(big**3, cp.int32)
    label = f"rotation/{shape_label((188,) * 3)}x180"
    built = {}
    for gridding in ("nearest", "exact"):
        t0 = time.perf_counter()
        plan = MappingPlan(g, gridding)
        built[gridding] = time.perf_counter() - t0
        mapper = mapper_for(plan)
        ms = time_device(be, lambda: mapper(spectra, sums, hits), warmup=1, repeats=5).median_ms
        row = {"plan_s": built[gridding], "grid": big}
        if gridding == "exact":
            k = np.arange(big) % 2
            sign = 1 - 2 * ((k[:, None, None] + k[None, :, None] + k[None, None, :]) % 2)
            want = (plan(phi) * sign).reshape(-1)
            row["relative_difference"] = float(np.abs(sums.get() - want).max() / np.abs(want).max())
        del mapper
        result.add(f"{label}/mapping_{gridding}", ms=ms, **row)
        echo(f"  {label} on {big}^3, mapping {gridding}: {ms:.1f} ms on the device, plan {built[gridding]:.1f} s"
             + (f", {row['relative_difference']:.1e} from the host's" if "relative_difference" in row else ""))


def _bpm(result, be, n: int, copy_gbs: float, echo) -> None:
    """BPM forward and gradient times, its kernels' GB/s, and RMSE against time on exact-model data."""
    from qora.holo import bpm_cuda, bpm_reconstruct, bpm_resident, reconstruct
    from qora.holo import kernels as K
    from qora.holo import phantoms as P
    from qora.holo import reference as R
    from qora.holo import bpm_tables

    cp = be.xp
    g = R.geometry(n)
    label = shape_label((n, n, n))
    sphere = P.Sphere(radius=1.5, index=1.40)  # the 3 um bead of the BPM validation, exact partial waves
    data = 1 + P.partial_wave_ratio(sphere, g)
    truth = P.render_spheres([sphere], n, g.pixel, g.medium_index, supersample=3)
    rmse = lambda v: float(np.sqrt(np.mean((v - truth) ** 2)))  # noqa: E731
    dev = bpm_cuda.BpmDevice(g, bpm_tables(g, n))
    x = cp.asarray((truth - g.medium_index).astype(np.float32))
    dev.set_contrast(x)
    out = cp.empty((g.count, n, n), cp.complex64)
    d = cp.asarray(data, cp.complex64)
    t_fwd = time_device(be, lambda: dev.forward(out), warmup=1, repeats=3).median_ms
    t_grad = time_device(be, lambda: dev.reverse(d), warmup=1, repeats=3).median_ms
    b = dev.chunk
    total = b * n * n
    a, s = dev.w[:b], dev.s[:b]
    # queued behind a copy: one launch of ~50 us between two events would also time the host's launch gap
    prop = time_queued(be, lambda: K.bpm_propagate(a=a, tq=dev.cq[:b], tr=dev.cr[:b], total=total, s=s)).median_ms
    dev._forward(slice(0, b), True)
    screen = time_queued(be, lambda: K.bpm_screen(w=a, screen=dev.screens[0], total=total, n2=n * n, scale=1.0,
                                                  stored=dev.stored[0, :b])).median_ms
    gbs_prop, gbs_screen = 40 * total / prop / 1e6, 24 * total / screen / 1e6
    result.add(f"bpm/{label}/forward", ms=t_fwd, chunk=b)
    result.add(f"bpm/{label}/gradient", ms=t_grad, chunk=b)
    result.add(f"bpm/{label}/propagate_kernel", ms=prop, gbs=gbs_prop, pct_copy=100 * gbs_prop / copy_gbs)
    result.add(f"bpm/{label}/screen_kernel", ms=screen, gbs=gbs_screen, pct_copy=100 * gbs_screen / copy_gbs)
    fused = _bpm_fused(result, be, g, n, b, x, d, copy_gbs, (t_fwd, t_grad), echo)
    del dev, out, d, x
    # the accuracy row of each fused variant that ran beside the cuFFT one
    fused_variants = () if not fused else ("fused_fft",) + (("fused_resident",) if n in bpm_resident.LAYOUTS else ())
    rows = {}
    for name, fn in (
        ("rytov_gp50", lambda: reconstruct(data, g, method="gp", iterations=50, r2c=True, backend="cuda").index),
        ("rytov_tv30x20", lambda: reconstruct(data, g, method="tv", iterations=30, tv_inner=20,
                                              backend="cuda").index),
        ("bpm20_from_rytov_gp20", lambda: bpm_reconstruct(data, g, iterations=20, backend="cuda",
                                                          variant="cufft").index),
        ("bpm20_tv_from_rytov_gp20", lambda: bpm_reconstruct(data, g, iterations=20, tv_weight=1e-3,
                                                             backend="cuda", variant="cufft").index),
    ) + tuple((f"bpm20_from_rytov_gp20_{v}", lambda v=v: bpm_reconstruct(data, g, iterations=20, backend="cuda",
                                                                        variant=v).index)
              for v in fused_variants):
        fn()
        t0 = time.perf_counter()
        vol = fn()
        rows[name] = ((time.perf_counter() - t0) * 1e3, rmse(vol))
        result.add(f"accuracy/{label}/{name}", ms=rows[name][0], rmse=rows[name][1])
    echo(f"  BPM {label}: forward {t_fwd:.1f} ms, gradient {t_grad:.1f} ms (chunk {b}); propagate "
         f"{gbs_prop:.0f} GB/s ({100 * gbs_prop / copy_gbs:.0f}% of copy), screen {gbs_screen:.0f} GB/s; "
         + ", ".join(f"{k} {ms:.0f} ms RMSE {e:.2e}" for k, (ms, e) in rows.items()))



def _bpm_fused(result, be, g, n: int, chunk: int, x, d, copy_gbs: float, cufft_ms, echo) -> bool:
    """The fused variants' forward and gradient (``fused_fft``, and ``fused_resident`` where it is built) beside
    the cuFFT variant's (``cufft_ms``), with the GB/s of each one's byte model; False where ``fused_fft`` does
    not run (another size, another architecture)."""
    from qora.holo import bpm_fused, bpm_resident
    from qora.holo.bpm_cuda import BpmDevice
    from qora.holo import bpm_tables

    if n not in bpm_fused.SIZES or not be.device_facts().compute_capability.startswith("9"):
        return False
    label = shape_label((n, n, n))
    variants = {"fused_fft": lambda direction: bpm_fused.SLICE_BYTES["fused_fft", direction]}
    if n in bpm_resident.LAYOUTS:
        variants["fused_resident"] = lambda direction: bpm_resident.SLICE_BYTES[direction]
    for variant, slice_bytes in variants.items():
        dev = BpmDevice(g, bpm_tables(g, n), chunk=chunk, variant=variant)
        dev.set_contrast(x)
        out = be.xp.empty((g.count, n, n), be.xp.complex64)
        times = (time_device(be, lambda: dev.forward(out), warmup=1, repeats=3).median_ms,
                 time_device(be, lambda: dev.reverse(d), warmup=1, repeats=3).median_ms)
        for direction, ms, old in zip(("forward", "gradient"), times, cufft_ms):
            gbs = slice_bytes(direction) * g.count * n**3 / ms / 1e6
            result.add(f"bpm/{label}/{direction}_{variant}", ms=ms, gbs=gbs, pct_copy=100 * gbs / copy_gbs,
                       ratio=old / ms)
            echo(f"  BPM {label} {variant} {direction}: {ms:.2f} ms, x{old / ms:.2f} of cufft, {gbs:.0f} GB/s of "
                 f"its model ({100 * gbs / copy_gbs:.0f}% of copy)")
        dev = out = None  # its stored envelopes go before the next variant's
        be.xp.get_default_memory_pool().free_all_blocks()
    return True


#: the parts of the CUDA benchmark (``qora bench holo --parts``)
PARTS = ("stages", "bpm", "rotation")


def result_name(parts) -> str:
    """The benchmark name of a run of ``parts``: "holo" for all of them, else "holo-<parts>" (holo-bpm, ...),
    so that a run of some parts never becomes the newest "holo" result, which must hold every case."""
    return "holo" if set(parts) == set(PARTS) else "-".join(["holo"] + [p for p in PARTS if p in parts])


def run(be, *, write: bool = True, echo=print, quick: bool = False, parts=PARTS) -> BenchResult:
    unknown = set(parts) - set(PARTS)
    if unknown:
        raise ValueError(f"unknown parts {sorted(unknown)}; choose from {PARTS}")
    facts = be.device_facts().as_dict()
    result = BenchResult(result_name(parts), "cuda", facts, columns=("ms", "gbs", "ratio"))
    copy = copy_floor(be)
    result.add("copy", gbs=copy["gbs"])
    echo(f"CUDA: {facts['name']}; copy {copy['gbs']:.0f} GB/s")
    sizes = (64,) if quick else (256, 512)
    for n in sizes if "stages" in parts else ():
        _stages(result, be, n, copy["gbs"], echo, memory=n == sizes[0])
    for n in ((32,) if quick else (128, 256)) if "bpm" in parts else ():
        _bpm(result, be, n, copy["gbs"], echo)
    if not quick and "rotation" in parts:
        _rotation_188(result, be, echo)
        _rotation_mapping(result, be, echo)
    if write:
        path = result.write()
        echo(f"result written to {path}")
    echo(result.table())
    return result
