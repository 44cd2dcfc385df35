"""The cases each benchmark's newest committed result must contain.

A benchmark registers its name (the ``benchmark`` field of its JSON) and the
case names it promises; ``tests/test_bench_results.py`` checks that the newest
result of each registered benchmark in ``bench/results/`` lists them all and
names its device. Add a benchmark here when its first result is committed.
"""

from __future__ import annotations

FLOOR_SHAPES = ((256, 256), (1024, 1024), (2048, 2048), (4096, 4096), (128, 128, 128), (256, 256, 256),
                (512, 512, 512))
FLOOR_PRECISIONS = ("fp32", "fp16")


def shape_label(shape) -> str:
    """``(256, 256)`` -> ``"256x256"``."""
    return "x".join(str(int(s)) for s in shape)


def fft_pair_case(shape, precision: str) -> str:
    return f"fft_pair/{shape_label(shape)}/{precision}"


PHASE_CPU_SHAPES = ((256, 256), (1024, 1024), (2048, 2048), (128, 128, 128))
PHASE_THREAD_SHAPES = PHASE_CPU_SHAPES[1:]  # issue 28's sizes (the thread sweep's targets)
PHASE_CPU_IMPLS = ("qora_loops_1_thread", "qora_loops_all_threads", "numpy", "jax_jit")
PHASE_GPU_IMPLS = ("naive", "fused", "graph", "half", "mixed", "cupy_loop", "jax_jit")
PHASE_STARTS_SHAPES = ((256, 256), (1024, 1024), (2048, 2048), (128, 128, 128), (256, 256, 256))

HOLO_STAGES = ("fields", "ratio", "rytov", "mapping_plan", "mapping", "gp50_r2c", "gp50_c2c")
HOLO_PEER_CASES = ("qora_gp50", "qora_gp50_os1.5", "qora_gp50_os2", "qora_tv30x20_w8e-2", "qora_tv30x20_os1.5_w8e-2",
                   "qora_tv30x20_os2_w8e-2", "odtbrain")

HOLO_GPU_SIZES = ("256x256x256", "512x512x512")
HOLO_GPU_STAGES = ("upload", "fields", "rytov", "mapping_fft", "mapping_gather", "mapping_scatter", "gp50_r2c",
                   "gp50_c2c_with_mapping")
HOLO_FGP = ("fused", "separate", "cube", "march")
HOLO_COUNTER_KERNELS = ("fused/fgp_fused", "separate/fgp_primal", "separate/fgp_dual", "cube/fgp_cube",
                        "march/fgp_march", "gp/clamp_real", "gp/restore_half", "mapping/map_gather",
                        "mapping/map_scatter")

SSB_BENCH_LABEL = "128x128x64x64"
SSB_PREVIEW_STEPS = ("preview_1x", "preview_3x", "preview_tilt_1x", "preview_loss_1x")
SSB_FIT_STEPS = SSB_PREVIEW_STEPS + ("fit_search", "fit_standard", "fit_thick")

REQUIRED_CASES: dict[str, list[str]] = {
    "floors": ["copy"] + [fft_pair_case(s, p) for s in FLOOR_SHAPES for p in FLOOR_PRECISIONS],
    "phase-cpu": [f"hio/{shape_label(s)}/{i}" for s in PHASE_CPU_SHAPES for i in PHASE_CPU_IMPLS],
    "phase": (["copy"]
              + [f"floor/{shape_label(s)}/{f}" for s in FLOOR_SHAPES for f in ("fft_pair", "pair_plus_45B")]
              + [f"hio/{shape_label(s)}/{i}" for s in FLOOR_SHAPES for i in PHASE_GPU_IMPLS]
              + [f"starts8/{shape_label(s)}/{k}" for s in PHASE_STARTS_SHAPES
                 for k in ("looped", "batched_all", "batched_2")]
              + [f"progress/256x256/every_{n}" for n in (1, 10, 100)]),
    "holo-cpu": ([f"stage/128x128x128/{s}" for s in HOLO_STAGES + ("tv30x5",)]
                 + [f"stage/256x256x256/{s}" for s in HOLO_STAGES]
                 + [f"odtbrain/{label}/{c}" for label in ("128x128x128x120", "188x188x188x180")
                    for c in HOLO_PEER_CASES]),
    "holo": (["copy", "rotation/188x188x188x180/gp50_pipeline"]
             + [f"stage/{z}/{s}" for z in HOLO_GPU_SIZES for s in HOLO_GPU_STAGES]
             + [f"fgp/{z}/{f}" for z in HOLO_GPU_SIZES for f in HOLO_FGP]
             + [f"pipeline/{z}/{k}" for z in HOLO_GPU_SIZES for k in ("per_stack", "per_stack_4_parts")]
             + [f"memory/256x256x256/{k}" for k in ("pipeline_gp_r2c", "gp_r2c", "gp_c2c", "tv")]
             + [f"bpm/{z}/{k}" for z in ("128x128x128", "256x256x256")
                for k in ("forward", "gradient", "propagate_kernel", "screen_kernel")]
             + [f"accuracy/{z}/{k}" for z in ("128x128x128", "256x256x256")
                for k in ("rytov_gp50", "rytov_tv30x20", "bpm20_from_rytov_gp20", "bpm20_tv_from_rytov_gp20")]),
    # the thread sweeps (--threads): the one-thread row of every case, which every sweep runs first
    "phase-cpu-threads": [f"hio/{shape_label(s)}/1_threads" for s in PHASE_THREAD_SHAPES],
    "holo-measured-cpu": ["fdtd_cell/gp_default", "fdtd_cell/tv_default"],
    "holo-measured": ["fdtd_cell/gp_default", "fdtd_cell/tv_default"],
    "holo-cpu-threads": [f"rotation/188x188x188x180/{k}/1_threads" for k in ("gp50_total", "gp50_solver")],
    "ssb-cpu-threads": ["agreement/128x128x64x64/batch_8_sets/1_threads"],
    "holo-counters": ["copy"] + [f"counters/512/{k}" for k in HOLO_COUNTER_KERNELS],
    "ssb-cpu": [f"step/{SSB_BENCH_LABEL}/{s}" for s in ("load", "detector_fit", "prepare", "image_ssb", "image_thick",
                                                        "image_parallax") + SSB_FIT_STEPS]
               + [f"memory/{SSB_BENCH_LABEL}/prepare"]
               + [f"peer/{d}/{w}" for d in ("film", "crystal_3.2A_rot7") for w in ("qora", "py4dstem")],
    "ssb-methods-cpu": [f"{d}/{m}" for d in ("1000", "noise-free") for m in ("ssb", "obf", "wdd")],
    "ssb-methods-abtem-cpu": [f"{d}/{m}" for d in ("1000", "10000", "100000", "1e+06", "noise-free")
                              for m in ("ssb", "obf", "wdd", "icom", "parallax")],
    "ssb-cpu-fit": [f"fit_cpu/{d}_64/{w}" for d in ("film", "thick_film", "crystal_3.2A_rot7")
                    for w in ("qora_default", "qora_cold", "qora_rotation_given", "py4dstem")]
                   + ["agreement_cpu/64x64/81_sets/threads_1", "agreement_cpu/64x64/rotation_grid_30x41"],
    "ssb-cuda": [f"step/{SSB_BENCH_LABEL}/{s}" for s in ("load", "detector_fit", "prepare", "image_ssb", "image_thick",
                                                         "image_parallax", "image_parallax_up3", "mean_phase")
                                                        + SSB_FIT_STEPS]
                + [f"agreement/{b}_sets/{k}" for b in (1, 2, 4, 8) for k in ("fused", "arrays")]
                + [f"memory/{SSB_BENCH_LABEL}/prepare"],
    "ssb-full": ([f"step/512x512x192x192/{s}" for s in (
        "1_load_and_detector_fit_s", "2_prepare_s", "3_tilt_fit_s", "3b_tilt_fit_no_standard_s", "4_reconstruct_s",
        "5_standard_fit_s", "6_preview_tilt_1x_ms", "7_preview_3x_ms", "8_release_loss_1x_ms", "9_peak_gib")]
                 + [f"split/512x512x192x192/{s}" for s in ("6_preview_tilt_1x_ms", "7_preview_3x_ms")]
                 + [f"agreement/{b}_sets/{k}" for b in (1, 2, 4, 8) for k in ("quadratic", "per_term_chi")]
                 + [f"agreement/derivatives_{n}_parameters" for n in (3, 6)]),
    "viewer-server": [f"{k}/{p}" for k in ("drag_1x", "drag_3x", "release_loss_1x") for p in ("request_to_png", "in_view")],
    "viewer-browser": ["drag_1x/browser_overhead"],
    "scale-out": ["phase/in_process", "holo/in_process", "phase/1_workers", "holo/1_workers",
                  "ssb/1_workers/batch8", "ssb/1_workers/newton5"],
}

