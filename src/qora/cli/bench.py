"""``qora bench``: the benchmarks (``src/qora/bench/``), one command each; results are JSON and a table."""

from __future__ import annotations

from pathlib import Path

import click

from qora.cli.options import POSITIVE, SSB_IMAGE_CHOICES, backend_option


@click.group("bench")
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=None,
              help="Folder for the JSON results (one subfolder per benchmark); default: $QORA_RESULTS_DIR, "
              "else ./qora-bench-results/ under the current directory.")
def bench(out_dir) -> None:
    """Benchmarks; results are printed as a table and written as JSON under --out (default
    ./qora-bench-results/; the project's own are committed in bench/results/ of the checkout)."""
    from qora.bench.common import set_results_dir
    from qora.io.errors import OutputError

    if out_dir is not None and out_dir.exists() and not out_dir.is_dir():
        raise OutputError(f"--out {out_dir}: is a file; the results go into a folder")
    set_results_dir(out_dir)


@bench.command("floors")
@backend_option()
@click.option("--repeats", type=click.IntRange(3, 1000), default=20, show_default=True)
@click.option("--no-write", is_flag=True, help="Print only; write no result file.")
def bench_floors(backend: str, repeats: int, no_write: bool) -> None:
    """Copy bandwidth and cuFFT forward+inverse pair floors (fp32 and fp16) per shape."""
    from qora.bench import floors

    floors.run(backend=backend, repeats=repeats, write=not no_write, echo=click.echo)


def threads_option():
    """``--threads 1,2,4,8,16``: the CPU thread-scaling sweep (qora.bench.threads)."""
    return click.option("--threads", "thread_counts", default=None, metavar="N[,N...]",
                        help="CPU only: time the case at each thread count (like 1,2,4,8,16) beside the FFT-pair "
                        "floor and jax.jit at the same count; counts above the cores available are skipped "
                        "with a note. Results go to <benchmark>-threads/.")


def _counts(text):
    if text is None:
        return None
    from qora.bench.threads import parse_counts

    return parse_counts(text)


@bench.command("phase")
@backend_option()
@threads_option()
@click.option("--shapes", default=None, metavar="SHAPE[,SHAPE...]",
              help="Sizes to time, like 1024x1024,128x128x128 (default: the benchmark's).")
@click.option("--no-write", is_flag=True, help="Print only; write no result file.")
@click.option("--extras", is_flag=True, help="GPU: callback, iteration split, construction, recipes, memory.")
@click.option("--callback-probe", is_flag=True, help="GPU: the callback variant with parts switched off.")
def bench_phase(backend: str, thread_counts, shapes, no_write: bool, extras: bool, callback_probe: bool) -> None:
    """ms per HIO iteration per size, against a NumPy loop and a jax.jit loop (peers env)."""
    from qora.bench import phase as phase_bench

    if callback_probe:
        phase_bench.run_callback_probe(write=not no_write, echo=click.echo)
    elif extras:
        phase_bench.run_cuda_extras(write=not no_write, echo=click.echo)
    else:
        phase_bench.run(backend=backend, write=not no_write, echo=click.echo, threads=_counts(thread_counts),
                        shapes=_shapes(shapes))


def _shapes(text):
    """``"1024x1024,128x128x128"`` -> ``((1024, 1024), (128, 128, 128))``; None stays None."""
    if text is None:
        return None
    try:
        shapes = tuple(tuple(int(v) for v in item.strip().lower().split("x")) for item in text.split(","))
    except ValueError:
        raise click.BadParameter(f"shapes are sizes like 1024x1024 or 128x128x128, comma-separated; got {text!r}",
                                 param_hint="--shapes") from None
    if any(len(s) not in (2, 3) or min(s) < 2 for s in shapes):
        raise click.BadParameter(f"each shape has 2 or 3 sizes of at least 2, got {text!r}", param_hint="--shapes")
    return shapes


@bench.command("phase-success")
@backend_option()
@click.option("--cases", default=None, help="Comma-separated case names (default: the quick set "
              "triangle_256,featured_256,prism_48); 'all' for every simulated case; esrf_logo: the measured ESRF "
              "ID10 pattern (files from QORA_CDI_DATA, scored by R-factor and support overlap).")
@click.option("--starts", type=click.IntRange(1, 1000), default=3, show_default=True, help="Random starts per case.")
@click.option("--recipe", default="default", show_default=True,
              help="A recipe's notation, or a name: default, pynx-rule (PyNX's support rule as our recipe), "
              "few-photons, partial-coherence, real-envelope (the real-object support search).")
@click.option("--peer", type=click.Choice(["cohere"]), default=None,
              help="Run cohere-core's reconstruction instead (its interpreter from QORA_COHERE_PYTHON).")
@click.option("--consensus", type=click.IntRange(0, 1000), default=0, show_default=True,
              help="Also the agreement of this many best starts (aligned object error between each pair; 0: off).")
@click.option("--figures", type=click.Path(file_okay=False), default=None,
              help="A folder for <case>.png: central slice of amplitude and phase, best start against the truth.")
@click.option("--resolved", is_flag=True,
              help="Also each start's error at the resolution the data hold (both low-passed at the q where the "
              "PRTF of the 5 best starts falls below 1/e), printed beside the plain error.")
@click.option("--no-write", is_flag=True, help="Print only; write no result file.")
def bench_phase_success(backend: str, cases, starts: int, recipe: str, peer, consensus: int, figures,
                        resolved: bool, no_write: bool) -> None:
    """Share of starts that recover the object from the pattern alone (error after alignment below
    max(0.2, 1.5 x the true-support reference error of the same counts); the share below a fixed 0.2 is
    printed beside it), and the time, on patterns recorded as a detector does (Poisson noise, beamstop, gaps,
    partial coherence)."""
    from qora.bench import phase_success

    if cases is None:
        names = phase_success.QUICK
    elif cases.strip().lower() == "all":
        names = tuple(phase_success.CASES)
    else:
        names = tuple(c.strip() for c in cases.split(",") if c.strip())
    from qora.phase import NAMED_RECIPES, is_envelope

    label = recipe if recipe in NAMED_RECIPES or is_envelope(recipe) else "custom"
    if figures is not None:
        Path(figures).mkdir(parents=True, exist_ok=True)
    phase_success.run(cases=names, starts=starts, recipe=recipe, backend=backend, write=not no_write,
                      echo=click.echo, label=label, peer=peer, consensus=consensus, figures=figures,
                      resolved=resolved)


@bench.command("holo")
@backend_option()
@threads_option()
@click.option("--size", type=click.IntRange(16, 1024), default=188, show_default=True,
              help="With --threads: the rotation case's field of view (voxels per edge).")
@click.option("--angles", type=click.IntRange(2, 3600), default=180, show_default=True,
              help="With --threads: the rotation case's number of illuminations.")
@click.option("--rounds", type=click.IntRange(1, 20), default=2, show_default=True,
              help="With --threads: interleaved sweeps over the counts; the fastest of each stage is kept.")
@click.option("--parts", default=None, metavar="LIST",
              help="With --backend cuda: the parts to run, comma-separated, of stages (field stages, solvers and "
                   "the Pipeline at 256^3 and 512^3), bpm (the BPM variants at 128^3 and 256^3 with their accuracy "
                   "rows), rotation (the 188^3 rotation Pipeline against the CPU). Default: all.")
@click.option("--no-write", is_flag=True, help="Print only; write no result file.")
def bench_holo(backend: str, thread_counts, size: int, angles: int, rounds: int, parts, no_write: bool) -> None:
    """Holography stage times, and ODTbrain on the same rotation data (peers env); with --threads the
    GP rotation case's thread scaling."""
    from qora.bench import holo as holo_bench

    if parts is not None:
        from qora.bench.holo_cuda import PARTS

        parts = tuple(p.strip() for p in parts.split(",") if p.strip())
        bad = [p for p in parts if p not in PARTS]
        if bad or not parts:
            raise click.BadParameter(f"choose from {', '.join(PARTS)}; got {', '.join(bad) or 'nothing'}",
                                     param_hint="--parts")
    holo_bench.run(backend=backend, write=not no_write, echo=click.echo, threads=_counts(thread_counts), size=size,
                   angles=angles, rounds=rounds, parts=parts)


@bench.command("holo-fields")
@backend_option()
@click.option("--no-write", is_flag=True, help="Print only; write no result file.")
def bench_holo_fields(backend: str, no_write: bool) -> None:
    """Field stages: QPI per filter, sideband crop per filter, refocus, autofocus, background fit."""
    from qora.bench import holo_fields

    holo_fields.run(backend=backend, write=not no_write, echo=click.echo)


@bench.command("holo-measured")
@backend_option()
@click.option("--no-write", is_flag=True, help="Print only; write no result file.")
def bench_holo_measured(backend: str, no_write: bool) -> None:
    """The default GP and TV on ODTbrain's FDTD cell (../shared/data/odt; QORA_ODT_DATA), each timed beside its
    error against the cell's phantom."""
    from qora.bench import holo_measured

    holo_measured.run(backend=backend, write=not no_write, echo=click.echo)


@bench.command("ssb")
@backend_option()
@threads_option()
@click.option("--scan", type=click.IntRange(16, 1024), default=128, show_default=True,
              help="With --threads: the scan's side (the detector window is 64).")
@click.option("--fit-only", is_flag=True,
              help="CPU: only the 64 x 64 fit beside py4DSTEM's parallax fit and the batch pass's thread scaling.")
@click.option("--repeats", type=click.IntRange(1), default=3, show_default=True, help="Runs per timed step (medians).")
@click.option("--no-write", is_flag=True, help="Print only; write no result file.")
def bench_ssb(backend: str, thread_counts, scan: int, fit_only: bool, repeats: int, no_write: bool) -> None:
    """4D-STEM steps on a 128 x 128 scan: load, detector fit, session prepare, each image method; on
    the CPU also the cold-start and rotation-given fits at 64 x 64 beside py4DSTEM (interleaved); with
    --threads the band agreement's batch pass at each thread count."""
    from qora.bench import ssb as ssb_bench

    counts = _counts(thread_counts)
    if counts is not None:
        from qora.bench.threads import check_sweep_backend

        check_sweep_backend(backend)
        ssb_bench.run_cpu_threads(counts, scan=scan, write=not no_write, echo=click.echo)
        return
    ssb_bench.run(backend=backend, write=not no_write, echo=click.echo, fit_only=fit_only, repeats=repeats)


@bench.command("ssb-files")
@backend_option()
@click.option("--scan", type=click.IntRange(8, 1024), default=64, show_default=True, help="Scan positions per side.")
@click.option("--no-write", is_flag=True, help="Print only; write no result file.")
def bench_ssb_files(backend: str, scan: int, no_write: bool) -> None:
    """4D-STEM data in: a file read whole and lazily, G prepared from each, the layout and the descan."""
    from qora.bench import ssb_files

    ssb_files.run(backend=backend, scan=scan, write=not no_write, echo=click.echo)


@bench.command("ssb-methods")
@backend_option()
@click.option("--data", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="An abTEM set (.npz of tests/ssb/fixtures/make_abtem_srtio3_wdd.py); default: our simulator's "
              "crystal.")
@click.option("--seeds", type=click.IntRange(1, 20), default=3, show_default=True, help="Noise draws per dose.")
@click.option("--no-write", is_flag=True, help="Print only; write no result file.")
def bench_ssb_methods(backend: str, data, seeds: int, no_write: bool) -> None:
    """The dose study: SSB, OBF, WDD, iCoM and parallax against the phase in the 2 alpha band, at 1e3-1e6 e/A^2."""
    from qora.bench import ssb_methods

    ssb_methods.run(backend=backend, data=data, seeds=seeds, write=not no_write, echo=click.echo)


@bench.command("ssb-full")
@click.option("--dir", "directory", type=click.Path(file_okay=False), default="/tmp/qora-ssb-full", show_default=True,
              help="Where the full-scale dataset is kept (made there on the GPU when missing; 19 GB).")
@click.option("--scan", type=click.IntRange(16, 4096), default=512, show_default=True, help="Scan side.")
@click.option("--repeats", type=click.IntRange(1, 100), default=3, show_default=True, help="Fits per step.")
@click.option("--previews", type=click.IntRange(1, 1000), default=20, show_default=True, help="Previews per step.")
@click.option("--kernels-only", is_flag=True, help="Build the session and run one pass of each agreement kernel "
                                                   "(for Nsight Compute); no timings.")
@click.option("--no-write", is_flag=True, help="Print only; write no result file.")
def bench_ssb_full(directory: str, scan: int, repeats: int, previews: int, kernels_only: bool, no_write: bool) -> None:
    """The seed's 4D-STEM protocol, steps 1-9, on a 512^2 scan with a 192^2 detector (GPU)."""
    from pathlib import Path

    from qora.bench import ssb_full

    ssb_full.run(directory=Path(directory), scan=scan, repeats=repeats, previews=previews, write=not no_write,
                 echo=click.echo, kernels_only=kernels_only)


@bench.command("scale-out")
@click.option("--gpus/--cpu", default=None, help="One worker per GPU (default where there is a GPU), or processes.")
@click.option("--max-workers", type=click.IntRange(1, 4096), default=None, help="Stop at this many workers.")
@click.option("--patterns", type=click.IntRange(1, 10000), default=24, show_default=True)
@click.option("--stacks", type=click.IntRange(1, 10000), default=24, show_default=True)
@click.option("--repeats", type=click.IntRange(1, 100), default=3, show_default=True)
@click.option("--no-write", is_flag=True, help="Print only; write no result file.")
def bench_scale_out(gpus, max_workers, patterns, stacks, repeats, no_write) -> None:
    """Throughput of the Dask patterns (phase, holo, ssb) on 1, 2, ... workers (docs/scale-out.md)."""
    from qora.bench import scaleout

    scaleout.run(gpus=gpus, max_workers=max_workers, patterns=patterns, stacks=stacks, repeats=repeats,
                 write=not no_write, echo=click.echo)


@bench.command("viewer")
@click.option("--part", type=click.Choice(["server", "browser"]), required=True,
              help="server: request to PNG on this machine's GPU; browser: Chromium's own overhead (CPU).")
@backend_option()
@click.option("--screenshots", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="browser: also write screenshots of the three views here.")
@click.option("--no-write", is_flag=True, help="Print only; write no result file.")
def bench_viewer(part, backend, screenshots, no_write) -> None:
    """The SSB slider's latency: server time for a 256^2-scan dataset, and the browser's overhead."""
    from qora.bench import viewer

    viewer.run(part=part, backend=backend, screenshots=screenshots, write=not no_write, echo=click.echo)


@bench.command("ssb-ptycho")
@backend_option()
@click.option("--iterations", type=click.IntRange(1, 10_000), default=None,
              help="Passes of the solver on each abTEM set [default: the solver's rule, as a user's run].")
@click.option("--data", "data", type=click.Path(exists=True, dir_okay=False), multiple=True,
              help="abTEM sets in the format of tests/ssb/fixtures/abtem_srtio3_ptycho_8a.npz [default: that one "
                   "and the depth-marked 100 A crystal].")
@click.option("--positions", type=click.IntRange(1), default=None,
              help="Positions of the time-per-pass case [default: 128^2 on CUDA, 16^2 on the CPU].")
@click.option("--detector", type=click.IntRange(8, 1024), default=None,
              help="Detector side of the time-per-pass case [default: 128 on CUDA, 64 on the CPU].")
@click.option("--slices", type=click.IntRange(1, 256), default=None, help="Slices of the time-per-pass case.")
@click.option("--modes", type=click.IntRange(1, 16), default=None, help="Probe modes of the time-per-pass case.")
@click.option("--batch", "batches", type=click.IntRange(1), multiple=True,
              help="Positions per step of the time-per-pass case (repeat to compare) [default: the solver's].")
@click.option("--no-write", is_flag=True, help="Print only; write no result file.")
def bench_ssb_ptycho(backend, iterations, data, positions, detector, slices, modes, batches, no_write) -> None:
    """Iterative multislice ptychography beside WDD on abTEM's SrTiO3, and its time per pass."""
    from qora.bench import ssb_ptycho

    ssb_ptycho.run(backend=backend, data=tuple(data) or (ssb_ptycho.FIXTURE_8A, ssb_ptycho.FIXTURE_100A_MARKED),
                   iterations=iterations,
                   positions=positions, detector=detector, slices=slices, modes=modes, batches=batches or (None,),
                   write=not no_write, echo=click.echo)


@bench.command("ssb-live")
@backend_option()
@click.option("--scan", type=click.IntRange(8, 4096), default=512, show_default=True, help="Scan side.")
@click.option("--detector", type=click.IntRange(16, 1024), default=192, show_default=True, help="Detector side.")
@click.option("--protocol", type=click.Choice(["merlin", "dectris", "dectris2", "all", "none"]), default="all",
              show_default=True,
              help="The receivers measured: Merlin TCP, DECTRIS stream v1 (JSON), v2 (CBOR), all, or none (only "
                   "the cases from memory and the final latency).")
@click.option("--dataset-dir", type=click.Path(file_okay=False), default=None,
              help="Where qora bench ssb-full keeps its full-scale dataset (the final-latency case uses it; "
                   "default: a small simulated film).")
@click.option("--stages-only", is_flag=True, help="Only the host's receive path stage by stage (socket, headers, "
              "decoding, parse, queue, ingest) against a memcpy of the frame.")
@click.option("--receivers", type=click.IntRange(1, 64), multiple=True, default=(1,), show_default=True,
              help="Receiving processes on the DECTRIS stream (repeat to compare: --receivers 1 --receivers 4); "
              "Merlin's one TCP stream is read by one.")
@click.option("--senders", type=click.IntRange(1, 64), default=1, show_default=True,
              help="Processes the DECTRIS simulator sends from (each its share of the frames; at most one a "
              "receiver), so that the simulator is not the limit.")
@click.option("--batch", type=click.IntRange(1), default=2048, show_default=True,
              help="Frames a receiver's batch holds at most.")
@click.option("--final-fps", type=POSITIVE, default=None,
              help="Frames/s at which the final-latency case's frames come (default: as fast as taken).")
@click.option("--method", "methods", type=click.Choice(SSB_IMAGE_CHOICES), multiple=True,
              help="Also measure the stream with this method's live image refreshed during the scan (repeat for "
                   "several).")
@click.option("--refresh", type=POSITIVE, default=0.5, show_default=True,
              help="Seconds between the live images of --method.")
@click.option("--no-write", is_flag=True, help="Print only; write no result file.")
def bench_ssb_live(backend, scan, detector, protocol, dataset_dir, stages_only, receivers, senders, batch,
                   final_fps, methods, refresh, no_write) -> None:
    """Live 4D-STEM: frames/s from the Merlin and DECTRIS simulators into G, and the final image + fit latency."""
    from qora.bench import ssb_live

    protocols = {"all": ("merlin", "dectris", "dectris2"), "none": ()}.get(protocol, (protocol,))
    ssb_live.run(backend=backend, scan=scan, detector=detector, protocols=protocols, dataset_dir=dataset_dir,
                 stages_only=stages_only, receivers=tuple(receivers), senders=senders, batch=batch, final_fps=final_fps,
                 methods=methods, refresh_s=refresh, write=not no_write, echo=click.echo)
