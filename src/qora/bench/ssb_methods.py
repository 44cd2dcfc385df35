"""``qora bench ssb-methods``: the dose study behind docs/ssb-methods.md's "which method when" table.

Every image method of :meth:`qora.ssb.Session.image` (SSB, OBF, WDD with its dose rule, iCoM, parallax) on one
noise-free 4D-STEM set turned into Poisson counts at several doses, each image scored by its Pearson correlation
with the specimen's phase low-passed to the band the bright field transfers (|Q| <= 2 alpha / lambda): the fair
metric, since no direct method holds more and an unfiltered truth would reward mere sharpening. The default set is
our simulator's crystal (a 3.905 A square lattice of strong columns); ``data`` takes an abTEM set in the format of
``tests/ssb/fixtures/abtem_srtio3_wdd.npz`` (independent of our simulator: the table in the docs is measured on it).
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from qora.backend import resolve
from qora.bench.common import BenchResult

__all__ = ["run", "DOSES", "METHODS"]

DOSES = (1e3, 1e4, 1e5, 1e6, None)  # electrons per A^2; None: no noise
METHODS = ("ssb", "obf", "wdd", "icom", "parallax")


class _Set:
    """A noise-free set: ``intensity`` (scan, scan, det, det), its settings and the band-limited truth."""

    def __init__(self, name, intensity, truth, *, kv, alpha_mrad, scan_step, aberrations, mrad_per_pixel,
                 detector=None):
        self.name, self.intensity, self.kv, self.alpha_mrad = name, intensity, kv, alpha_mrad
        self.mrad_per_pixel = mrad_per_pixel
        self.scan_step, self.aberrations, self.detector = scan_step, aberrations, detector
        from qora.ssb import wavelength

        f = np.fft.fftfreq(truth.shape[0], scan_step)[:, None], np.fft.fftfreq(truth.shape[1], scan_step)[None, :]
        band = np.hypot(*f) <= 2 * alpha_mrad * 1e-3 / wavelength(kv)
        self.truth = np.fft.ifft2(np.fft.fft2(truth) * band).real

    def counts(self, dose, seed: int) -> np.ndarray:
        """Poisson counts at ``dose`` e/A^2 (the incident electrons of a pattern: dose x step^2); None: the set."""
        if dose is None:
            return self.intensity
        per_frame = self.intensity.sum((2, 3)).mean()
        expected = self.intensity * (dose * self.scan_step**2 / per_frame)
        return np.random.default_rng(seed).poisson(expected).astype(np.float32)


def simulated_crystal() -> _Set:
    """Our simulator's crystal: a 3.905 A square lattice with a strong column at the corner and a weaker one at the
    centre (0.8 and 0.4 rad at their peaks), 300 kV, 25 mrad, C10 = 100 A, 40 x 40 steps of 0.195 A."""
    from qora.ssb import Aberrations, crystal_slices, scan_truth, simulate

    pixel, ab = 3.905 / 40, Aberrations(C10=100.0)
    slices = crystal_slices((80, 80), pixel, period=3.905, basis=((0.0, 0.0, 1.0), (0.5, 0.5, 0.5)),
                            phase_per_atom=0.8)
    scan = simulate(slices, pixel=pixel, stride=2, window=64, kv=300.0, alpha_mrad=25.0, aberrations=ab)
    return _Set("simulated crystal", scan.data, scan_truth(scan, band_limit=np.inf), kv=300.0, alpha_mrad=25.0,
                scan_step=scan.scan_step, aberrations=ab, mrad_per_pixel=scan.mrad_per_pixel)


def abtem_set(path) -> _Set:
    """An abTEM set written by ``tests/ssb/fixtures/make_abtem_srtio3_wdd.py`` (its keys and units)."""
    from qora.io.errors import InputError
    from qora.ssb import Aberrations, DetectorFit

    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such file (an .npz written by make_abtem_srtio3_wdd.py)")
    with np.load(path) as f:
        missing = [k for k in ("data", "truth_phase", "kv", "alpha_mrad", "scan_step", "C10", "detector_center",
                               "detector_mrad_per_pixel") if k not in f]
        if missing:
            raise InputError(f"{path}: not an abTEM set of make_abtem_srtio3_wdd.py (missing {', '.join(missing)})")
        alpha, per_px = float(f["alpha_mrad"]), float(f["detector_mrad_per_pixel"])
        detector = DetectorFit(center=tuple(float(c) for c in f["detector_center"]), radius=alpha / per_px,
                               mrad_per_pixel=per_px)
        return _Set(f"abTEM {path.name}", f["data"].astype(np.float64), f["truth_phase"], kv=float(f["kv"]),
                    alpha_mrad=alpha, scan_step=float(f["scan_step"]), aberrations=Aberrations(C10=float(f["C10"])),
                    mrad_per_pixel=per_px, detector=detector)


def quantem_python() -> Path:
    """The interpreter of quantem's environment (bench/quantem-env.sh), or ``QORA_QUANTEM_PYTHON``."""
    env = os.environ.get("QORA_QUANTEM_PYTHON")
    return Path(env) if env else Path(__file__).resolve().parents[3] / ".quantem" / "bin" / "python"


def _peers() -> dict:
    """{peer: (its interpreter, its script, the methods it has)} for the peers whose environment exists."""
    from qora.bench.ssb import py4dstem_python

    found = {"quantem": (quantem_python(), "ssb_quantem.py", METHODS),
             "py4dstem": (py4dstem_python(), "ssb_py4dstem_direct.py", ("ssb", "obf", "wdd"))}
    return {name: entry for name, entry in found.items() if entry[0].exists()}


def _r(image, study: _Set) -> float:
    return float(np.corrcoef(np.asarray(image, np.float64).ravel(), study.truth.ravel())[0, 1])


def score(study: _Set, dose, seed: int, backend, *, peers: dict | None = None) -> dict:
    """{method: (r, seconds)} for one draw of counts; with ``peers`` (:func:`_peers`) also theirs on the same counts
    ("<peer>_<method>")."""
    from qora.ssb import Session

    counts = study.counts(dose, seed)
    session = Session(counts, kv=study.kv, alpha_mrad=study.alpha_mrad, scan_step=study.scan_step,
                      detector=study.detector, backend=backend)
    out = {}
    for method in METHODS:
        t0 = time.perf_counter()
        image = session.image(None if method == "icom" else study.aberrations, method)
        out[method] = (_r(image, study), time.perf_counter() - t0)
    for name, (python, script, methods) in (peers or {}).items():
        images, seconds = _peer_images(python, script, counts, study)
        out.update({f"{name}_{m}": (_r(images[m], study), seconds[m]) for m in methods})
    return out


def _peer_images(python: Path, script: str, counts, study: _Set):
    """A peer's images and seconds (its script, in its own environment) for these counts."""
    script = Path(__file__).with_name("peers") / script
    with tempfile.TemporaryDirectory() as tmp:
        data, out = Path(tmp) / "data.npy", Path(tmp) / "images.npz"
        np.save(data, np.asarray(counts, np.float32))
        proc = subprocess.run([str(python), str(script), str(data), str(out), str(study.scan_step),
                               str(study.kv), str(study.alpha_mrad), str(study.mrad_per_pixel), str(study.aberrations.get("C10"))],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"the peer {script.name} failed: {proc.stderr.strip()[-2000:]}")
        with np.load(out) as f:
            images = {k: f[k] for k in f.files}
    return images, json.loads(proc.stdout.strip().splitlines()[-1])["seconds"]


def run(*, backend="auto", data=None, seeds: int = 3, write: bool = True, echo=print, peers: bool = True) -> BenchResult:
    """The study on ``data`` (an abTEM .npz; default: :func:`simulated_crystal`), ``seeds`` draws per dose; with
    ``peers``, those of quantem and py4DSTEM whose environments exist on the same counts beside ours."""
    be = resolve(backend)
    found = _peers() if peers else {}
    study = abtem_set(data) if data is not None else simulated_crystal()
    kind = "abtem-" if data is not None else ""
    result = BenchResult(f"ssb-methods-{kind}{be.name}", be.name, be.device_facts().as_dict(), columns=("r", "r_spread", "ms"))
    result.notes["set"] = study.name
    result.notes["metric"] = "Pearson r with the specimen phase low-passed to |Q| <= 2 alpha / lambda"
    result.notes["peers"] = sorted(found)
    echo(f"{study.name}: {study.intensity.shape}, step {study.scan_step:.3f} A; r against the phase in the 2 alpha band")
    if peers and len(found) < 2:
        echo("peers without an environment (bench/quantem-env.sh, bench/py4dstem-env.sh) skipped: "
             + ", ".join(sorted({"quantem", "py4dstem"} - set(found))))
    names = METHODS + tuple(f"{name}_{m}" for name, (_, _, methods) in found.items() for m in methods)
    echo(f"{'dose e/A^2':>11} " + " ".join(f"{m:>14}" for m in names))
    for dose in DOSES:
        draws = [score(study, dose, seed, be, peers=found) for seed in range(seeds if dose is not None else 1)]
        cells = []
        for method in names:
            r = np.array([d[method][0] for d in draws])
            ms = 1e3 * float(np.median([d[method][1] for d in draws]))
            label = "noise-free" if dose is None else f"{dose:g}"
            result.add(f"{label}/{method}", r=float(r.mean()), r_spread=float(r.max() - r.min()), ms=ms)
            cells.append(f"{r.mean():8.3f} +-{(r.max() - r.min()) / 2:.3f}")
        echo(f"{'none' if dose is None else f'{dose:g}':>11} " + " ".join(cells))
    if write:
        echo(f"result written to {result.write()}")
    return result
