"""``qora bench ssb``: the 4D-STEM steps of the seed's protocol that exist so far, on a 128 x 128 scan,
on the CPU or the GPU (``--backend``; the GPU adds the 3x parallax and the mean-phase image).

Steps timed (warm; the median of ``repeats`` runs each): load the dataset file, fit the
detector, prepare the session (bright field and half-plane G), one image per method (SSB, the
thick model, parallax) at fixed parameters; the previews as a slider moves them (C10 changes on
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
from qora.bench.common import BenchResult

__all__ = ["run", "SSB_STEPS"]

SSB_STEPS = ("load", "detector_fit", "prepare", "image_ssb", "image_thick", "image_parallax")


def _median_ms(fn, repeats: int):
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return out, float(np.median(times))


def run(*, backend="auto", write=True, echo=print, scan: int = 128, window: int = 64, repeats: int = 3) -> BenchResult:
    from qora.backend.device import PeakMemory
    from qora.ssb.files import read_dataset, write_dataset
    from qora.ssb.optics import Aberrations
    from qora.ssb.session import Session, fit_detector
    from qora.ssb.simulate import amorphous_slices, simulate

    be = resolve(backend)
    result = BenchResult(f"ssb-{be.name}", be.name, be.device_facts().as_dict(), columns=("ms",))
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
    if be.is_cuda:
        for name, fn in (("image_parallax_up3", lambda: session.image(ab, "parallax", upsample=3)),
                         ("mean_phase", lambda: session.mean_phase(ab))):
            fn()
            _, times[name] = _median_ms(fn, repeats)
    # previews as a slider moves them: C10 changes on every call (median of 20)
    previews = (("preview_1x", {}), ("preview_3x", {"upsample": 3}), ("preview_tilt_1x", {"thickness": 100.0}),
                ("preview_loss_1x", {"loss": True}))
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
    # the fit from a cold start (rotation given), median of 3: search, standard Newton, thick Newton.
    # It reads G on the host whatever the session's backend (the GPU fit is issue 10), so it is
    # timed in the CPU run only.
    c10_error = float("nan")
    if not be.is_cuda:
        from qora.ssb.agreement import fit_session

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
