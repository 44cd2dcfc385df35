"""``qora bench ssb``: the 4D-STEM steps of the seed's protocol that exist so far, on a 128 x 128 scan,
on the CPU or the GPU (``--backend``; the GPU adds the 3x parallax and the mean-phase image).

Steps timed (warm; the median of ``repeats`` runs each): load the dataset file, fit the
detector, prepare the session (bright field and half-plane G), one image per method (SSB, the
thick model, parallax, iCoM, OBF) at fixed parameters; the previews as a slider moves them (C10 changes on
every call; median of 20): 1x, 3x, tilt-corrected 1x, and 1x with the loss; the fit from a cold
start with the rotation given (median of 3 seeds): its search, standard and thick stages. The dataset is
our simulator's (amorphous film, 300 kV, 20 mrad, a 64 x 64 detector), written once to a
temporary HDF5 file. The peak memory of the preparation is reported too.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np

from qora.backend import resolve
from qora.bench.common import BenchResult, median_wall

__all__ = ["run", "SSB_STEPS"]

SSB_STEPS = ("load", "detector_fit", "prepare", "image_ssb", "image_thick", "image_parallax", "image_icom",
             "image_obf", "image_wdd", "preview_1x", "preview_3x", "preview_tilt_1x", "preview_loss_1x", "fit_search",
             "fit_standard", "fit_thick")


def _median_ms(fn, repeats: int):
    out, seconds = median_wall(fn, repeats)
    return out, seconds * 1e3


def run(*, backend="auto", write=True, echo=print, scan: int = 128, window: int = 64, repeats: int = 3,
        peers: bool = True, fit_only: bool = False) -> BenchResult:
    """The steps above; on the CPU with ``peers`` also the fit beside py4DSTEM at 64 x 64
    (:func:`cpu_fit_against_py4dstem`) and the batch pass's thread scaling (:func:`cpu_batch_scaling`).
    ``fit_only``: those two alone (the benchmark ``ssb-cpu-fit``)."""
    from qora.backend.device import PeakMemory
    from qora.ssb import Aberrations, Session, amorphous_slices, fit_detector, read_dataset, simulate, write_dataset

    be = resolve(backend)
    # the fit comparison alone is a benchmark of its own (its rows, bench/results/ssb-cpu-fit/)
    name = "ssb-cpu-fit" if fit_only and not be.is_cuda else f"ssb-{be.name}"
    result = BenchResult(name, be.name, be.device_facts().as_dict(), columns=("ms",))
    if not be.is_cuda and (peers or fit_only):  # the comparison with the peer, at its own 64 x 64 size
        echo(f"{be.name}: the CPU fit at 64 x 64 beside py4DSTEM's parallax fit, interleaved")
        cpu_batch_scaling(result, echo)
        cpu_fit_against_py4dstem(result, echo, repeats=repeats)
        if fit_only:
            if write:
                echo(f"result written to {result.write()}")
            return result
    elif fit_only:
        raise ValueError("fit_only: the CPU fit comparison runs on the CPU backend")
    label = f"{scan}x{scan}x{window}x{window}"
    ab = Aberrations(C10=150.0)
    pixel = 0.2
    sim = simulate(amorphous_slices((2 * scan, 2 * scan), pixel, atoms_per_a2=0.1, seed=0), pixel=pixel, stride=2,
                   window=window, aberrations=ab)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.h5"
        write_dataset(path, sim.data, kv=sim.kv, alpha_mrad=sim.alpha_mrad, scan_step=sim.scan_step)
        (data, meta), t_load = _median_ms(lambda: read_dataset(path), repeats)
    fit, t_fit = _median_ms(lambda: fit_detector(data, meta["alpha_mrad"]), repeats)
    kw = dict(kv=meta["kv"], alpha_mrad=meta["alpha_mrad"], scan_step=meta["scan_step_a"], detector=fit,
              backend=be)
    Session(data, **kw)  # warm: CuPy's kernels and FFT plans are made on first use
    session, t_prep = _median_ms(lambda: Session(data, **kw), repeats)
    with PeakMemory(be) as pm:
        Session(data, **kw)
    times = {"load": t_load, "detector_fit": t_fit, "prepare": t_prep}
    _, times["image_ssb"] = _median_ms(lambda: session.image(ab, "ssb"), repeats)
    _, times["image_thick"] = _median_ms(lambda: session.image(ab, "thick", thickness=100.0, tilt=(0.01, 0.0)),
                                         repeats)
    _, times["image_parallax"] = _median_ms(lambda: session.image(ab, "parallax"), repeats)
    _, times["image_icom"] = _median_ms(lambda: session.image(method="icom"), repeats)
    _, times["image_obf"] = _median_ms(lambda: session.image(ab, "obf"), repeats)
    _, times["image_wdd"] = _median_ms(lambda: session.image(ab, "wdd"), repeats)
    if be.is_cuda:
        for name, fn in (("image_parallax_up3", lambda: session.image(ab, "parallax", upsample=3)),
                         ("mean_phase", lambda: session.mean_phase(ab))):
            fn()
            _, times[name] = _median_ms(fn, repeats)
    times.update(_preview_times(session))
    if be.is_cuda:  # one pass of the agreement over the band's G for B sets: the fused kernel and the array code
        from qora.ssb import Band, combine_batch_moments

        band = Band(session, ("C10", "C12a", "C12b", "thickness", "tilt_y", "tilt_x"))
        for count in (1, 2, 4, 8):
            sets = [{"C10": 100.0 + 10 * i, "thickness": 50.0} for i in range(count)]
            for kind, fn in (("fused", lambda: band.evaluate_batch(sets)),
                             ("arrays", lambda: combine_batch_moments(band._batch_arrays(sets), band.total))):
                fn()
                _, ms = _median_ms(fn, 10)
                result.add(f"agreement/{count}_sets/{kind}", ms=ms, frequencies=int(band.shape[0]),
                           pixels=int(band.shape[1]))
    # the fit from a cold start (rotation given), median of 3: search, standard Newton, thick Newton;
    # on the GPU the band and its agreement live on the device (array code in float64; the fused
    # kernel is issue 10)
    from qora.ssb import fit_session

    fit_session(session, rotation=0.0, tilt=False, trials=16)  # warm: CuPy compiles its kernels
    fits = [fit_session(session, rotation=0.0, tilt=True, seed=i) for i in range(repeats)]
    for stage, key in (("fit_search", "search_s"), ("fit_standard", "standard_s"), ("fit_thick", "thick_s")):
        times[stage] = float(np.median([f["timings_s"][key] for f in fits])) * 1e3
    c10_error = float(np.median([abs(f["standard"]["parameters"]["C10"] - 150.0) for f in fits]))
    result.notes["fit"] = {"truth_C10_a": 150.0, "median_abs_C10_error_a": c10_error,
                           "median_C12_a": float(np.median([np.hypot(f["standard"]["parameters"]["C12a"],
                                                                     f["standard"]["parameters"]["C12b"])
                                                            for f in fits]))}
    for step, ms in times.items():
        result.add(f"step/{label}/{step}", ms=ms)
    if peers and not be.is_cuda:
        _against_py4dstem(result, sim, echo)
    result.add(f"memory/{label}/prepare", ms=None, peak_bytes=pm.peak_bytes, data_bytes=int(data.nbytes),
               g_bytes=int(session.nbytes), bright_field_pixels=int(len(session.bf_index)))
    echo(f"{be.name}: {result.device['name']}; scan {scan}^2, detector {window}^2, "
         f"{len(session.bf_index)} bright-field pixels, G {session.nbytes / 2**20:.0f} MiB")
    echo("  " + ", ".join(f"{k} {v:.0f} ms" for k, v in times.items())
         + f"; prepare peak {pm.peak_bytes / 2**20:.0f} MiB; fit |C10 error| {c10_error:.2f} A")
    if write:
        out = result.write()
        echo(f"result written to {out}")
    return result


def _preview_times(session) -> dict:
    """The previews as a slider moves them, C10 changing on every call: the median of 20 (ms) per kind."""
    previews = (("preview_1x", {}), ("preview_3x", {"upsample": 3}), ("preview_tilt_1x", {"thickness": 100.0}),
                ("preview_loss_1x", {"loss": True}))
    times = {}
    for name, opts in previews:
        opts = dict(opts)
        extra = {"thickness": opts.pop("thickness")} if "thickness" in opts else {}
        session.preview({"C10": 150.0, **extra}, **opts)
        samples = []
        for i in range(20):
            t0 = time.perf_counter()
            session.preview({"C10": 150.0 + 0.5 * i, **extra}, **opts)
            samples.append((time.perf_counter() - t0) * 1e3)
        times[name] = float(np.median(samples))
    return times


BATCH_SETS = 8  # parameter sets per batch pass, as the fit's search evaluates them


def run_cpu_threads(counts, *, scan: int = 128, window: int = 64, repeats: int = 5, write=True,
                    echo=print) -> BenchResult:
    """The band agreement's batch pass (:meth:`qora.ssb.Band.evaluate_batch` of 8 thick-model sets, the
    fit's search step) at each thread count, on the CPU path that exists, beside the FFT-pair floor of
    the scan's shape. There is no JAX peer of the band agreement: the JSON says so."""
    from qora.backend.host import threads
    from qora.bench.threads import add_scaling, new_result, pair_floor
    from qora.ssb import Aberrations, Session, amorphous_slices, fit_detector, make_band, simulate

    result, counts = new_result("ssb-cpu", counts, echo)
    be = resolve("cpu")
    pixel = 0.2
    sim = simulate(amorphous_slices((2 * scan, 2 * scan), pixel, atoms_per_a2=0.1, seed=0), pixel=pixel, stride=2,
                   window=window, aberrations=Aberrations(C10=150.0))
    session = Session(sim.data, kv=sim.kv, alpha_mrad=sim.alpha_mrad, scan_step=sim.scan_step,
                      detector=fit_detector(sim.data, sim.alpha_mrad), backend=be)
    band = make_band(session, ("C10", "C12a", "C12b", "thickness", "tilt_y", "tilt_x"))
    sets = [{"C10": 100.0 + 10 * i, "thickness": 50.0} for i in range(BATCH_SETS)]
    label = f"{scan}x{scan}x{window}x{window}"
    result.notes["case"] = {"scan": scan, "window": window, "sets": BATCH_SETS, "band_shape": list(band.shape),
                            "band_class": f"{type(band).__module__}.{type(band).__qualname__}"}
    result.notes["jax_missing"] = "no JAX peer of the band agreement exists"
    band.evaluate_batch(sets)  # compile (or load) what the CPU path compiles
    best = {}
    for r in range(2):  # interleaved, reversed on the second round; the fastest median kept
        for t in counts if r % 2 == 0 else counts[::-1]:
            with threads(t):
                _, ms = _median_ms(lambda: band.evaluate_batch(sets), repeats)
                floor = pair_floor(session.scan_shape)
            best[t] = {"ms": min(ms, best.get(t, {}).get("ms", ms)),
                       "floor_ms": min(floor, best.get(t, {}).get("floor_ms", floor))}
    add_scaling(result, f"agreement/{label}/batch_{BATCH_SETS}_sets", best, echo)
    if write:
        out = result.write()
        echo(f"result written to {out}")
    echo(result.table())
    return result


def py4dstem_python() -> Path:
    """The interpreter of py4DSTEM's environment (bench/py4dstem-env.sh), or ``QORA_PY4DSTEM_PYTHON``."""
    import os

    env = os.environ.get("QORA_PY4DSTEM_PYTHON")
    return Path(env) if env else Path(__file__).resolve().parents[3] / ".py4dstem" / "bin" / "python"


def _py4dstem_fit(data, scan_step: float, kv: float, mrad_per_pixel: float) -> dict:
    import json
    import subprocess

    script = Path(__file__).with_name("peers") / "ssb_py4dstem.py"
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "data.npy"
        np.save(path, np.asarray(data, np.float32))
        proc = subprocess.run([str(py4dstem_python()), str(script), str(path), str(scan_step), str(kv),
                               str(mrad_per_pixel)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"the py4DSTEM peer failed: {proc.stderr.strip()[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _against_py4dstem(result, film, echo) -> None:
    """qora's fit and py4DSTEM's parallax fit on the same two datasets: the film (C10 = 150 A, no
    astigmatism, no rotation) and a crystal whose parallax shifts exceed half its period (3.2 A
    lattice, C10 = -100 A, 20 A of C12 at 25 degrees, the scan turned by 7 degrees). Errors: |C10|,
    |C12| magnitude (angle conventions differ between the codes) and the rotation's."""
    from qora.ssb import (Aberrations, Session, crystal_slices, fit_rotation, fit_session, parameters_to_aberrations,
                         rotate_detector, simulate)

    if not py4dstem_python().exists():
        echo(f"  py4DSTEM: no environment at {py4dstem_python()} (bench/py4dstem-env.sh); comparison skipped")
        return
    crystal = simulate(crystal_slices((96, 96), 0.2, period=3.2), pixel=0.2, stride=2, window=48, alpha_mrad=20.0,
                       aberrations=Aberrations(C10=-100.0, C12=(20.0, np.deg2rad(25.0))))
    cases = {
        "film": (film.data, film.scan_step, film.kv, film.mrad_per_pixel, 150.0, 0.0, 0.0, film.alpha_mrad),
        "crystal_3.2A_rot7": (rotate_detector(crystal.data, np.deg2rad(7.0)), crystal.scan_step, crystal.kv,
                              crystal.mrad_per_pixel, -100.0, 20.0, 7.0, crystal.alpha_mrad),
    }
    for name, (data, step, kv, mpp, c10, c12, rot_deg, alpha) in cases.items():
        t0 = time.perf_counter()
        session = Session(data, kv=kv, alpha_mrad=alpha, scan_step=step)
        if rot_deg == 0.0:
            fit = fit_session(session, rotation=0.0, tilt=False)
            values, rotation = fit["standard"]["parameters"], 0.0
        else:
            rotation, values, _ = fit_rotation(session)
        ours_ms = (time.perf_counter() - t0) * 1e3
        ab = parameters_to_aberrations(values)
        ours = (abs(ab.get("C10") - c10), abs(ab.get("C12") - c12), abs(np.rad2deg(rotation) - rot_deg))
        peer = _py4dstem_fit(data, step, kv, mpp)
        p = peer["polar"]
        theirs = (abs(p.get("C10", np.nan) - c10), abs(p.get("C12", 0.0) - c12),
                  abs(((np.rad2deg(peer["rotation_rad"]) - rot_deg) + 90) % 180 - 90))
        for who, ms, err, raw in (("qora", ours_ms, ours, {"C10": ab.get("C10"), "C12": ab.get("C12")}),
                                  ("py4dstem", peer["seconds"] * 1e3, theirs, p)):
            result.add(f"peer/{name}/{who}", ms=ms, c10_error_a=err[0], c12_error_a=err[1], rotation_error_deg=err[2],
                       fitted=raw)
        result.notes.setdefault("py4dstem", peer["py4dstem"])
        echo(f"  {name}: qora {ours_ms / 1e3:.1f} s, errors C10 {ours[0]:.2f} A, C12 {ours[1]:.2f} A, rotation "
             f"{ours[2]:.2f} deg; py4DSTEM {peer['seconds']:.1f} s, errors C10 {theirs[0]:.2f} A, C12 {theirs[1]:.2f} A, "
             f"rotation {theirs[2]:.2f} deg")


# -- the CPU fit beside py4DSTEM's parallax fit (issue 23), and the batch pass's thread scaling (issue 28) --
# a fit is "right" within these of the simulated truth (A, A, degrees): the cold-start criteria of the
# project's tests, the same for both codes
RIGHT = {"C10_a": 2.0, "C12_a": 1.0, "rotation_deg": 0.1}


def _fit_cases(scan: int) -> dict:
    """The three 64 x 64 datasets (``scan`` x ``scan``) of the CPU fit comparison, from our simulator:
    name -> (Scan4D-like data, step, kv, mrad per pixel, alpha, truth C10, |C12|, rotation deg). The
    thick film (12 independent slices over 120 A, C10 -100 A at its mid-plane) is the one where the
    default fit runs the depth-incoherent model (issue 38); the other two are single slices."""
    from qora.ssb import Aberrations, amorphous_slices, crystal_slices, rotate_detector, simulate

    window = min(64, 2 * scan)  # a 64 x 64 detector (smaller where the field is)
    film = simulate(amorphous_slices((2 * scan, 2 * scan), 0.2, atoms_per_a2=0.1, seed=0), pixel=0.2, stride=2,
                    window=window, aberrations=Aberrations(C10=150.0))
    crystal = simulate(crystal_slices((2 * scan, 2 * scan), 0.2, period=3.2), pixel=0.2, stride=2, window=window,
                       alpha_mrad=20.0, aberrations=Aberrations(C10=-100.0, C12=(20.0, np.deg2rad(25.0))))
    thick = simulate(amorphous_slices((2 * scan, 2 * scan), 0.25, slices=12, atoms_per_a2=0.02, seed=5), pixel=0.25,
                     stride=2, window=window, alpha_mrad=25.0, aberrations=Aberrations(C10=-100.0), thickness=120.0)
    return {
        f"film_{scan}": (film.data, film.scan_step, film.kv, film.mrad_per_pixel, film.alpha_mrad, 150.0, 0.0, 0.0),
        f"thick_film_{scan}": (thick.data, thick.scan_step, thick.kv, thick.mrad_per_pixel, thick.alpha_mrad, -100.0,
                               0.0, 0.0),
        f"crystal_3.2A_rot7_{scan}": (rotate_detector(crystal.data, np.deg2rad(7.0)), crystal.scan_step, crystal.kv,
                                      crystal.mrad_per_pixel, crystal.alpha_mrad, -100.0, 20.0, 7.0),
    }


def _errors(c10: float, c12: float, rotation_deg: float, truth) -> dict:
    t10, t12, trot = truth
    err = {"c10_error_a": abs(c10 - t10), "c12_error_a": abs(c12 - t12),
           "rotation_error_deg": abs(((rotation_deg - trot) + 90.0) % 180.0 - 90.0)}
    err["right"] = bool(err["c10_error_a"] <= RIGHT["C10_a"] and err["c12_error_a"] <= RIGHT["C12_a"]
                        and err["rotation_error_deg"] <= RIGHT["rotation_deg"])
    return err


def cpu_fit_against_py4dstem(result, echo=print, *, scan: int = 64, repeats: int = 3) -> None:
    """Rows ``fit_cpu/<case>/{qora_default,qora_cold,qora_rotation_given,py4dstem}``: the median wall time
    of each code's fit on the same data (``qora_default``: :func:`fit_session` with its defaults, the thick
    fit and the depth model's choice included; ``qora_cold``: the standard model alone), the runs
    interleaved (each once, then again) so that a shared machine's load falls on all alike; each row carries the errors against the
    truth, whether the fit is right (:data:`RIGHT`), and the load average seen during its runs.

    Qora's time includes the session's preparation (the bright field and G) and the fit
    (``fit_session(tilt=False)``: the rotation searched, or given as the truth's); py4DSTEM's is
    its own preprocess, reconstruct and aberration_fit (bench/peers/ssb_py4dstem.py), timed in its
    process. Both on the same cores (qora's loops on :func:`qora.backend.host.num_threads`)."""
    import os

    from qora.backend.host import num_threads
    from qora.ssb import Session, fit_session, parameters_to_aberrations

    have_peer = py4dstem_python().exists()
    if not have_peer:
        echo(f"  py4DSTEM: no environment at {py4dstem_python()} (bench/py4dstem-env.sh); qora's rows alone")
    result.notes["fit_cpu"] = {"threads": num_threads(), "cores": os.cpu_count(), "right_within": RIGHT,
                               "repeats": repeats, "interleaved": True}
    for name, (data, step, kv, mpp, alpha, c10, c12, rot_deg) in _fit_cases(scan).items():
        truth = (c10, c12, rot_deg)

        def qora(rotation, **options):
            t0 = time.perf_counter()
            session = Session(data, kv=kv, alpha_mrad=alpha, scan_step=step)
            fit = fit_session(session, rotation=rotation, **(options or dict(tilt=False)))
            seconds = time.perf_counter() - t0
            better = fit.get("better", "standard")  # the default's branch: the one the result calls better
            ab = parameters_to_aberrations(fit[better if better in fit else "standard"]["parameters"])
            return seconds, _errors(ab.get("C10"), ab.get("C12"), np.rad2deg(fit["rotation_rad"]), truth)

        def peer():
            out = _py4dstem_fit(data, step, kv, mpp)
            p = out["polar"]
            return out["seconds"], _errors(p.get("C10", np.nan), p.get("C12", 0.0), np.rad2deg(out["rotation_rad"]),
                                           truth)

        # qora_default: fit_session's defaults (the thick fit and the depth model's choice too), what a user runs
        runs = {"qora_default": lambda: qora(None, tilt=True), "qora_cold": lambda: qora(None),
                "qora_rotation_given": lambda: qora(np.deg2rad(rot_deg))}
        if have_peer:
            runs["py4dstem"] = peer
        qora(np.deg2rad(rot_deg))  # warm: Numba loads its compiled loops
        samples = {who: [] for who in runs}
        for _ in range(repeats):
            for who, fn in runs.items():
                load = os.getloadavg()[0]
                seconds, err = fn()
                samples[who].append((seconds, err, load))
        for who, got in samples.items():
            secs = [s for s, _, _ in got]
            last = got[-1][1]
            result.add(f"fit_cpu/{name}/{who}", ms=float(np.median(secs)) * 1e3, samples_s=secs,
                       loadavg_1min=[ld for _, _, ld in got], right=all(e["right"] for _, e, _ in got),
                       **{k: v for k, v in last.items() if k != "right"})
        line = ", ".join(f"{who} {np.median([s for s, _, _ in got]):.1f} s "
                         f"({'right' if all(e['right'] for _, e, _ in got) else 'WRONG'})" for who, got in samples.items())
        echo(f"  {name}: {line}; load {os.getloadavg()[0]:.1f}")


def cpu_batch_scaling(result, echo=print, *, scan: int = 64, sets: int = 81, threads=None, repeats: int = 5) -> None:
    """Rows ``agreement_cpu/<scan>/<sets>_sets/threads_<n>``: one pass of the batched agreement
    (``sets`` C10 values, the host's standard-model loop) on n threads, and ``rotation_grid``: the
    cold-start search's 30 rotations x 41 C10 values in one :meth:`Band.evaluate_rotations`."""
    import numba

    from qora.backend.host import num_threads
    from qora.ssb import Band, Session

    data, step, kv, _, alpha, *_ = _fit_cases(scan)[f"film_{scan}"]
    band = Band(Session(data, kv=kv, alpha_mrad=alpha, scan_step=step), ("C10",), rotation=0.0)
    batch = [{"C10": float(c)} for c in np.linspace(-400.0, 400.0, sets)]
    most = min(num_threads(), numba.config.NUMBA_NUM_THREADS)
    threads = threads or sorted({1, most} | {n for n in (2, 4, 8, 16, 32, 64) if n < most})
    import os

    previous = os.environ.get("QORA_NUM_THREADS")
    try:
        for n in threads:
            os.environ["QORA_NUM_THREADS"] = str(n)
            _, ms = _median_ms(lambda: band.evaluate_batch(batch), repeats)
            result.add(f"agreement_cpu/{scan}x{scan}/{sets}_sets/threads_{n}", ms=ms, frequencies=int(band.shape[0]),
                       pixels=int(band.shape[1]), ns_per_term=ms * 1e6 / (sets * band.shape[0] * band.shape[1]))
            echo(f"  agreement pass, {sets} sets, {n} threads: {ms:.1f} ms")
    finally:
        if previous is None:
            os.environ.pop("QORA_NUM_THREADS", None)
        else:
            os.environ["QORA_NUM_THREADS"] = previous
    grid = np.deg2rad(np.arange(-90.0, 90.0, 6.0))
    c10 = [{"C10": float(c)} for c in np.arange(-400.0, 401.0, 20.0)]
    _, ms = _median_ms(lambda: band.evaluate_rotations(grid, c10), max(1, repeats // 2))
    result.add(f"agreement_cpu/{scan}x{scan}/rotation_grid_{len(grid)}x{len(c10)}", ms=ms)
    echo(f"  rotation search grid {len(grid)} x {len(c10)} in one pass: {ms:.0f} ms")
