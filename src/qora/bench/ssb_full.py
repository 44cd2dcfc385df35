"""``qora bench ssb-full``: the seed's protocol, steps 1 to 9, on a full-scale 4D-STEM scan (GPU).

The dataset (made once, on the GPU, into ``--dir``): our multislice simulator's amorphous film of 8
slices over 120 A with a specimen tilt of (2, -1) mrad, C10 = 100 A and 20 A of C12; 300 kV,
30 mrad; a 512 x 512 scan in steps of 0.373 A; patterns of a 186-pixel probe window centred on a
192 x 192 detector (so the bright field holds ~8,800 pixels, as the seed's scan), Poisson counts
written as uint16 (19 GB). The half-plane band 0.2 to 0.9 1/A then holds ~44,000 frequencies.

Steps, warm (each run once before it is timed), median of 3 fits or 20 previews; previews move
C10 on every call and return host arrays:
 1. open the file memory-mapped and fit the detector sampling on 32 summed scan rows (s);
 2. prepare the session: bright field and G(Q, k) on the device, complex64 (s);
 3. the default tilt fit with the rotation given (``depth_model="auto"``, the path a user's defaults
    take: here the depth-incoherent model), its error against the truth beside it; the columnar
    model's fit as the named row ``3_columnar_tilt_fit_s`` (the seed's step 3); 3b. the columnar fit
    with ``compare_standard=False``;
 4. ``reconstruct()``, both branches fitted and imaged (s);
 5. a ``tilt=False`` fit (s);
 6. the drag preview, tilt-corrected, 1x (ms), split into the sums, the FFT and the host copy;
 7. the drag preview at 3x (ms), split the same way;
 8. the release preview with the loss, 1x (ms);
 9. the peak of CuPy's pool in use over steps 2 to 8 (GiB).
Then the agreement kernel: one pass for 1, 2, 4, 8 sets and one derivative pass, against the
copy-bandwidth floor of reading the band's G and the special-function (SFU) count at the SFU rate.
``--kernels-only`` builds the session and runs one batch pass of each model and one derivative pass
(for Nsight Compute).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from qora.backend import resolve
from qora.bench.common import BenchResult, median_wall, time_device

__all__ = ["run", "dataset", "STEPS"]

STEPS = ("1_load_and_detector_fit_s", "2_prepare_s", "3_tilt_fit_s", "3_columnar_tilt_fit_s",
         "3b_tilt_fit_no_standard_s", "4_reconstruct_s", "5_standard_fit_s", "6_preview_tilt_1x_ms",
         "7_preview_3x_ms", "8_release_loss_1x_ms", "9_peak_gib")
# step 3 is the default fit (depth_model "auto": on this amorphous film the depth-incoherent model); the seed's
# step 3, the columnar model's, is the named row 3_columnar_tilt_fit_s; 3b keeps the columnar model
SEED_CUDA_AFTER = {"1_load_and_detector_fit_s": 0.44, "2_prepare_s": 0.17, "3_tilt_fit_s": 0.67,
                   "3_columnar_tilt_fit_s": 0.67,
                   "3b_tilt_fit_no_standard_s": 0.53, "4_reconstruct_s": 1.51, "5_standard_fit_s": 0.25,
                   "6_preview_tilt_1x_ms": 23.6, "7_preview_3x_ms": 36.1, "8_release_loss_1x_ms": 116.0,
                   "9_peak_gib": 16.6}
KV, ALPHA, STEP, WINDOW, DETECTOR = 300.0, 30.0, 0.373, 186, 192
TRUTH = {"C10": 100.0, "C12": (20.0, 0.6), "thickness": 120.0, "tilt": (2e-3, -1e-3)}


def dataset(directory: Path, *, scan: int = 512, backend="auto", echo=print) -> tuple[Path, dict]:
    """The full-scale dataset's path and metadata, simulated into ``directory`` when missing."""
    from qora.ssb import Aberrations, amorphous_slices, simulate_to_npy

    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"ssb-{scan}x{scan}x{DETECTOR}x{DETECTOR}-uint16.npy"
    meta_path = path.with_suffix(".json")
    if path.is_file() and meta_path.is_file():
        return path, json.loads(meta_path.read_text())
    pixel = STEP / 2
    t0 = time.perf_counter()
    slices = amorphous_slices((2 * scan, 2 * scan), pixel, slices=8, atoms_per_a2=0.02, seed=1)
    meta = simulate_to_npy(path, slices, pixel=pixel, stride=2, window=WINDOW, detector=DETECTOR, dose=6e6, kv=KV,
                           alpha_mrad=ALPHA, aberrations=Aberrations(C10=TRUTH["C10"], C12=TRUTH["C12"]),
                           thickness=TRUTH["thickness"], tilt=TRUTH["tilt"], backend=backend)
    meta["simulate_s"] = time.perf_counter() - t0
    meta_path.write_text(json.dumps(meta))
    echo(f"dataset {path} ({path.stat().st_size / 1e9:.1f} GB) made in {meta['simulate_s']:.1f} s")
    return path, meta


def full_session(directory: Path, *, backend="auto"):
    """A :class:`qora.ssb.Session` on the full-scale dataset (made into ``directory`` when missing), its detector
    fitted on 32 scan rows as the benchmark's step 1 does: the probes' starting point."""
    from qora.backend import resolve
    from qora.ssb import Session, fit_detector

    be = resolve(backend)
    path, meta = dataset(Path(directory), backend=be)
    data = np.load(path, mmap_mode="r")
    return Session(data, kv=KV, alpha_mrad=ALPHA, scan_step=meta["scan_step_a"],
                   detector=fit_detector(data, ALPHA, rows=32), backend=be)


def _previews(session, params: dict, count: int, **opts) -> tuple[float, dict]:
    """Median ms of ``count`` previews moving C10 by 0.5 A each call, and the median split."""
    session.preview({**params, "C10": params["C10"] - 1.0}, **opts)  # warm
    samples, splits = [], []
    for i in range(count):
        t0 = time.perf_counter()
        session.preview({**params, "C10": params["C10"] + 0.5 * i}, **opts)
        samples.append((time.perf_counter() - t0) * 1e3)
    if not opts.get("loss"):
        for i in range(min(count, 5)):
            split: dict = {}
            _preview_split(session, {**params, "C10": params["C10"] + 0.5 * i}, split, opts.get("upsample", 1))
            splits.append(split)
    split = {k: float(np.median([s[k] for s in splits])) for k in (splits[0] if splits else {})}
    return float(np.median(samples)), split


def _preview_split(session, params: dict, timings: dict, upsample: int) -> None:
    from qora.ssb import parameters_to_aberrations

    p = dict(params)
    extra = {k: p.pop(k) for k in ("thickness", "tilt_y", "tilt_x") if k in p}
    ab = parameters_to_aberrations(p)
    if upsample > 1:
        session.image(ab, "parallax", upsample=upsample, timings=timings)
    else:
        session.image(ab, "thick", thickness=extra.get("thickness", 0.0),
                      tilt=(extra.get("tilt_y", 0.0), extra.get("tilt_x", 0.0)), timings=timings)


def _default_fit_note(result, fit, echo) -> dict:
    """What the default fit (``depth_model="auto"``, step 3) chose and how far its values are from the
    film's truth (issue 38: C10 within 2 A, thickness within 15%, the tilt within 0.5 mrad or reported
    not determined), as the note ``default_fit``; returns the chosen branch's parameters."""
    chosen = fit["depth_model"]["chosen"]
    branch = fit["incoherent" if chosen == "incoherent" else "thick"]
    p = branch["parameters"]
    note = {"depth_model": fit["depth_model"], "parameters": p, "agreement": branch["agreement"],
            "abs_C10_error_a": abs(p["C10"] - TRUTH["C10"]),
            "thickness_error": p["thickness"] / TRUTH["thickness"] - 1, "stage_timings_s": fit["timings_s"],
            "passes": fit.get("passes")}
    if chosen == "incoherent":
        note.update(sections=branch["sections"], depth_coherence=branch["depth_coherence"], tilt=branch["tilt"])
        tilt = "not a parameter (not observable)"
    else:
        note["tilt_error_mrad"] = float(np.hypot(p["tilt_y"] - TRUTH["tilt"][0], p["tilt_x"] - TRUTH["tilt"][1]) * 1e3)
        tilt = f"({p['tilt_y'] * 1e3:.2f}, {p['tilt_x'] * 1e3:.2f}) mrad"
    result.notes["default_fit"] = note
    echo(f"  default fit ({chosen}): C10 {p['C10']:.2f} A (truth {TRUTH['C10']}), thickness {p['thickness']:.1f} A "
         f"(truth {TRUTH['thickness']}), tilt {tilt}; agreement {branch['agreement']:.4f}; stages "
         + ", ".join(f"{k} {v:.3f}" for k, v in fit["timings_s"].items()))
    return p


def _band_terms(band) -> int:
    """(k, Q) pairs of the band with at least one term of Gamma (the kernels' work per set)."""
    xp = band.xp
    ky, kx = band.ky, band.kx
    lim = band.alpha
    total = 0
    for start in range(0, band.shape[0], 2048):
        qy, qx = band.qy[start:start + 2048], band.qx[start:start + 2048]
        total += int(xp.count_nonzero((xp.hypot(ky - qy, kx - qx) <= lim) | (xp.hypot(ky + qy, kx + qx) <= lim)))
    return total


def _event_ms(be, fn, repeats: int = 10) -> float:
    """Median device time (ms) of ``fn`` by CUDA events, after one warm-up call."""
    return time_device(be, fn, warmup=1, repeats=repeats).median_ms


def _agreement_rows(result, session, be, echo) -> None:
    from qora.backend.device import copy_bandwidth
    from qora.ssb import QUADRATIC_PARAMETERS, Band

    cp = be.xp
    band = Band(session, QUADRATIC_PARAMETERS)
    nq, nbf = band.shape
    copy_gbs, _ = copy_bandwidth(be)
    band_bytes = nq * nbf * 8
    floor_ms = band_bytes / (copy_gbs * 1e9) * 1e3
    terms = _band_terms(band)
    dev = cp.cuda.Device()
    sms = dev.attributes["MultiProcessorCount"]
    clock_hz = dev.attributes["ClockRate"] * 1e3
    sfu_rate = 16 * sms * clock_hz  # MUFU results per second (16 per SM per clock)
    base = {"C10": TRUTH["C10"], "C12a": 10.0, "C12b": 5.0, "thickness": TRUTH["thickness"], "tilt_y": 1e-3,
            "tilt_x": 0.0}
    for count in (1, 2, 4, 8):
        sets = [{**base, "C10": base["C10"] + 5 * i} for i in range(count)]
        ms = _event_ms(be, lambda: band._quadratic_batch(sets))
        standard = [{**v, "thickness": 0.0} for v in sets]  # band_quad_standard: the search's passes
        std_ms = _event_ms(be, lambda: band._quadratic_batch(standard))
        # the search's view of a pass: the kernel, the agreement's reduction and its copy to the host
        wall = []
        for _ in range(11):
            t0 = time.perf_counter()
            band.evaluate_batch(standard)
            wall.append(time.perf_counter() - t0)
        result.add(f"agreement/{count}_sets/standard", ms=std_ms, floor_ms=floor_ms,
                   evaluate_batch_wall_ms=float(np.median(wall[1:])) * 1e3)
        old = _event_ms(be, lambda: band._batch_kernel(sets), repeats=3)
        # per set and term: two reciprocals (the depth sincs); the tables' sincos (float32 after a float64
        # reduction) are per (Q, set), not per term
        sfu_ms = 2 * terms * count / sfu_rate * 1e3
        result.add(f"agreement/{count}_sets/quadratic", ms=ms, floor_ms=floor_ms, sfu_floor_ms=sfu_ms,
                   frequencies=nq, pixels=nbf, terms=terms)
        result.add(f"agreement/{count}_sets/per_term_chi", ms=old)
        echo(f"  agreement pass, {count} sets: {ms:.2f} ms, standard model {std_ms:.2f} ms "
             f"(per-term chi kernel {old:.2f} ms); floor {floor_ms:.2f} ms "
             f"(G at {copy_gbs:.0f} GB/s), SFU {sfu_ms:.2f} ms")
    for nk, names in ((3, QUADRATIC_PARAMETERS[:3]), (6, QUADRATIC_PARAMETERS)):
        b = band if nk == 6 else Band(session, names)
        ms = _event_ms(be, lambda: b.moments(base, order=2))
        result.add(f"agreement/derivatives_{nk}_parameters", ms=ms, floor_ms=floor_ms)
        echo(f"  derivative pass, {nk} parameters: {ms:.2f} ms")
    tables = 2 * (len(band._grid[0]) + len(band._grid[1])) + 3
    result.notes["agreement"] = {"copy_gbs": copy_gbs, "band_bytes": band_bytes, "terms_per_set": terms,
                                 "sfu_per_term": 2.0, "table_sincos_per_q_and_set": tables,
                                 "table_sincos_per_term": tables * nq / terms,
                                 "sms": sms, "clock_hz": clock_hz, "sfu_rate_per_s": sfu_rate}


def _kernel_passes(session, be) -> None:
    """``--kernels-only``: a one-set pass, one batch pass of each model and one derivative pass (for Nsight
    Compute)."""
    from qora.ssb import QUADRATIC_PARAMETERS, Band

    band = Band(session, QUADRATIC_PARAMETERS)
    base = {"C10": 100.0, "C12a": 10.0, "C12b": 5.0, "thickness": 120.0, "tilt_y": 1e-3, "tilt_x": 0.0}
    band._quadratic_batch([base])  # first: the one-set pass (issue 43's row), a profiler's --launch-count 1
    band._quadratic_batch([{**base, "C10": 100.0 + 5 * i} for i in range(8)])
    band._quadratic_batch([{**base, "C10": 100.0 + 5 * i, "thickness": 0.0} for i in range(8)])
    band.moments(base, order=2)
    be.synchronize()


def _timed_fits(result, session, repeats, times, peaks, peak, echo) -> dict:
    """Steps 3, 3b and 5 (median of ``repeats`` after a warm-up each) into ``times`` with the running pool peak
    after each into ``peaks``, and the standard fit on the whole band (before issue 23's thinned multi-start) as
    a note; returns the fits by step."""
    fits = {}
    for step, opts in (("3_tilt_fit_s", dict(tilt=True, depth_model="auto")),
                       ("3_columnar_tilt_fit_s", dict(tilt=True, depth_model="columnar")),
                       ("3b_tilt_fit_no_standard_s", dict(tilt=True, compare_standard=False, depth_model="columnar")),
                       ("5_standard_fit_s", dict(tilt=False))):
        seeds = iter(range(100))
        fits[step], times[step] = median_wall(lambda: session.fit(rotation=0.0, seed=next(seeds), **opts), repeats,
                                              warmup=1)
        echo(f"  {step}: {times[step]:.3f} s")
        peaks[step] = peak.peak_bytes / 2**30
    whole, whole_s = median_wall(lambda: session.fit(rotation=0.0, seed=next(seeds), depth_model="columnar",
                                                     tilt=False, coarse_rows=10**9), repeats, warmup=1)
    result.notes["standard_fit_whole_band"] = {"s": whole_s, "passes": whole["passes"],
                                               "thinned_s": times["5_standard_fit_s"],
                                               "thinned_passes": fits["5_standard_fit_s"]["passes"],
                                               "stage_timings_s": whole["timings_s"]}
    echo(f"  5_standard_fit_s with the search and starts on the whole band (before): {whole_s:.3f} s, passes "
         f"{whole['passes']}; thinned {fits['5_standard_fit_s']['passes']}")
    return fits


def run(*, directory: Path, scan: int = 512, repeats: int = 3, previews: int = 20, write: bool = True, echo=print,
        kernels_only: bool = False) -> BenchResult | None:
    from qora.backend.device import PeakPoolUse
    from qora.ssb import Session, fit_detector

    be = resolve("cuda")
    path, meta = dataset(Path(directory), scan=scan, backend=be, echo=echo)
    # the simulation's FFT plans hold ~1 GiB of work areas in CuPy's pool: not the protocol's memory
    be.xp.fft.config.get_plan_cache().clear()
    be.xp.get_default_memory_pool().free_all_blocks()
    label = f"{scan}x{scan}x{DETECTOR}x{DETECTOR}"
    result = BenchResult("ssb-full", be.name, be.device_facts().as_dict(), columns=("value",))
    result.notes["dataset"] = {**meta, "path": path.name, "truth": {**TRUTH, "C12": list(TRUTH["C12"])}}
    times: dict = {}

    def load():
        data = np.load(path, mmap_mode="r")
        return data, fit_detector(data, ALPHA, rows=32)

    (data, detector), times["1_load_and_detector_fit_s"] = median_wall(load, repeats, warmup=1)
    kw = dict(kv=KV, alpha_mrad=ALPHA, scan_step=meta["scan_step_a"], detector=detector, backend=be)
    if kernels_only:
        _kernel_passes(Session(data, **kw), be)
        return None
    Session(data, **kw)  # warm: kernels compiled, FFT plans made, the file in the page cache
    be.xp.get_default_memory_pool().free_all_blocks()
    with PeakPoolUse(be) as peak:
        prep = []
        for _ in range(repeats):
            session = None
            t0 = time.perf_counter()
            session = Session(data, **kw)
            prep.append(time.perf_counter() - t0)
        times["2_prepare_s"] = float(np.median(prep))
        peaks = {"2_prepare_s": peak.peak_bytes / 2**30}  # the running peak after each step (GiB)
        echo(f"{label}: {len(session.bf_index)} bright-field pixels, G {session.nbytes / 1e9:.2f} GB; "
             f"load {times['1_load_and_detector_fit_s']:.2f} s, prepare {times['2_prepare_s']:.2f} s")
        fits = _timed_fits(result, session, repeats, times, peaks, peak, echo)
        rec, times["4_reconstruct_s"] = median_wall(lambda: session.reconstruct(rotation=0.0, depth_model="columnar"),
                                                    repeats, warmup=1)
        peaks["4_reconstruct_s"] = peak.peak_bytes / 2**30
        echo(f"  4_reconstruct_s: {times['4_reconstruct_s']:.3f} s")
        _default_fit_note(result, fits["3_tilt_fit_s"], echo)
        fit = fits["3_columnar_tilt_fit_s"]
        params = dict(fit["thick"]["parameters"])
        few = previews
        times["6_preview_tilt_1x_ms"], split6 = _previews(session, params, few)
        peaks["6_preview_tilt_1x_ms"] = peak.peak_bytes / 2**30
        t0 = time.perf_counter()
        session.preview({"C10": params["C10"]}, upsample=3)
        slow = time.perf_counter() - t0 > 1.0
        times["7_preview_3x_ms"], split7 = _previews(session, {"C10": params["C10"], "C12a": params["C12a"],
                                                              "C12b": params["C12b"]}, 3 if slow else few, upsample=3)
        peaks["7_preview_3x_ms"] = peak.peak_bytes / 2**30
        t0 = time.perf_counter()
        session.preview(params, loss=True)
        slow = time.perf_counter() - t0 > 1.0
        times["8_release_loss_1x_ms"], _ = _previews(session, params, 3 if slow else few, loss=True)
        for step in ("6_preview_tilt_1x_ms", "7_preview_3x_ms", "8_release_loss_1x_ms"):
            echo(f"  {step}: {times[step]:.1f} ms")
    times["9_peak_gib"] = peaks["8_release_loss_1x_ms"] = peak.peak_bytes / 2**30
    result.notes["peak_gib_after_step"] = peaks
    result.notes["G_and_band_gib"] = (session.nbytes + session.band_cache_bytes) / 2**30
    echo("  running peak after each step (GiB): " + ", ".join(f"{k.split('_')[0]} {v:.2f}" for k, v in peaks.items()))
    echo(f"  9_peak_gib: {times['9_peak_gib']:.2f} GiB")
    for step in STEPS:
        result.add(f"step/{label}/{step}", value=times[step], seed_cuda_after=SEED_CUDA_AFTER[step])
    result.add(f"split/{label}/6_preview_tilt_1x_ms", value=None, **split6)
    result.add(f"split/{label}/7_preview_3x_ms", value=None, **split7)
    std = fits["5_standard_fit_s"]["standard"]["parameters"]
    result.notes["fit"] = {"model": "columnar (3_columnar_tilt_fit_s)", "thick": fit["thick"]["parameters"],
                           "standard": std, "better": fit["better"],
                           "stage_timings_s": fit["timings_s"], "passes": fit.get("passes"),
                           "standard_fit_stage_timings_s": fits["5_standard_fit_s"]["timings_s"],
                           "reconstruct_better": rec["better"],
                           "abs_C10_error_a": abs(params["C10"] - TRUTH["C10"]),
                           "thickness_a": params["thickness"], "tilt_rad": [params["tilt_y"], params["tilt_x"]]}
    echo(f"  columnar fit: C10 {params['C10']:.2f} A (truth {TRUTH['C10']}), thickness {params['thickness']:.1f} A, "
         f"tilt ({params['tilt_y'] * 1e3:.2f}, {params['tilt_x'] * 1e3:.2f}) mrad; better: {fit['better']}")
    _agreement_rows(result, session, be, echo)
    if write:
        out = result.write()
        echo(f"result written to {out}")
    return result
