"""The image methods at issue 42's full scale (H200 targets: WDD <= 1 s, OBF and iCoM <= 0.1 s each from a prepared
session), on ``qora bench ssb-full``'s dataset (512^2 scan, 192^2 detector; made into DIR when missing):

    python bench/probes/ssb_methods_fullscale.py /tmp/qora-ssb-full

Prints, for SSB, OBF, iCoM and WDD (at the benchmark's true aberrations, mid-plane C10; WDD with its dose rule),
the median of 3 after a warm-up (the device synchronised), the G bytes, the bright-field pixels, WDD's lattice
side and block, and each image's correlation with SSB's (a sanity check: the same object).

    python bench/probes/ssb_methods_fullscale.py /tmp/qora-ssb-full --peer PYTHON [--crop N]

adds quantem's direct ptychography on the same file (``src/qora/bench/peers/ssb_quantem.py`` run by PYTHON, its own
environment, on the GPU), the first N scan rows and columns when ``--crop`` (quantem holds the data as float32),
and qora's images of the same crop and aberrations (C10 alone: the peer is given C10 alone), each method's time
beside quantem's and the correlation of the two images.
"""

import argparse
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np


def main(directory):
    from qora.bench.ssb_full import TRUTH, full_session
    from qora.ssb import Aberrations, dose_from_counts, epsilon_for_dose
    from qora.ssb.wdd import lattice

    session = full_session(directory, backend="cuda")
    ab = Aberrations(C10=TRUTH["C10"], C12=TRUTH["C12"])
    grid = lattice(session)
    dose = dose_from_counts(session)
    print(f"G {session.nbytes / 1e9:.2f} GB on the {session.memory['G_on']}, {len(session.k)} bright-field pixels, "
          f"WDD lattice {grid.size}, dose {dose} e/A^2 -> epsilon {epsilon_for_dose(dose):.3g}", flush=True)
    images = {}
    for method in ("ssb", "obf", "icom", "wdd"):
        def run():
            out = session.image(None if method == "icom" else ab, method)
            session.backend.synchronize()
            return out
        images[method] = run()
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            run()
            times.append(time.perf_counter() - t0)
        r = np.corrcoef(images[method].ravel(), images["ssb"].ravel())[0, 1]
        print(f"{method}: {np.median(times) * 1e3:.1f} ms (median of 3; {', '.join(f'{t * 1e3:.0f}' for t in times)}),"
              f" r with SSB {r:.3f}", flush=True)


def beside_quantem(directory, python: str, crop: int | None) -> None:
    """qora's and quantem's SSB, OBF, WDD and iCoM on the same counts, times and images side by side."""
    from qora.bench.ssb_full import ALPHA, KV, TRUTH, dataset
    from qora.ssb import Aberrations, Session, fit_detector, wavelength

    path, meta = dataset(Path(directory))
    data = np.load(path, mmap_mode="r")
    with tempfile.TemporaryDirectory(dir=Path(directory)) as tmp:
        if crop:
            data = np.ascontiguousarray(data[:crop, :crop])
            path = Path(tmp) / "crop.npy"
            np.save(path, data)
        mrad = meta["detector_pixel_inv_a"] * wavelength(KV) * 1e3
        out = Path(tmp) / "quantem.npz"
        env = dict(os.environ, QORA_QUANTEM_DEVICE="cuda", QORA_QUANTEM_KERNELS="ssb,obf,icom,wdd",
                   QORA_QUANTEM_REPEATS="3")
        script = Path(__file__).resolve().parents[2] / "src/qora/bench/peers/ssb_quantem.py"
        t0 = time.perf_counter()
        proc = subprocess.run([python, str(script), str(path), str(out), str(meta["scan_step_a"]), str(KV), str(ALPHA),
                               str(mrad), str(TRUTH["C10"])], capture_output=True, text=True, env=env)
        print(f"quantem ran {time.perf_counter() - t0:.1f} s, rc {proc.returncode}", flush=True)
        if proc.returncode != 0:
            print(proc.stderr[-3000:], flush=True)
            return
        report = json.loads(proc.stdout.strip().splitlines()[-1])
        theirs = dict(np.load(out))
    print(f"quantem {report['quantem']} on {report['device']}: prepare {report['seconds']['prepare']:.2f} s", flush=True)
    session = Session(data, kv=KV, alpha_mrad=ALPHA, scan_step=meta["scan_step_a"],
                      detector=fit_detector(data, ALPHA, rows=min(32, data.shape[0])), backend="cuda")
    ab = Aberrations(C10=TRUTH["C10"])
    for method in ("ssb", "obf", "icom", "wdd"):
        times = []
        for k in range(4):
            session.backend.synchronize()
            t0 = time.perf_counter()
            image = session.image(None if method == "icom" else ab, method)
            session.backend.synchronize()
            times.append(time.perf_counter() - t0)
        other = theirs[method]
        r = (np.corrcoef(np.asarray(image).ravel(), other.ravel())[0, 1] if other.shape == image.shape
             else float("nan"))
        print(f"{method}: qora {np.median(times[1:]) * 1e3:.1f} ms, quantem {report['seconds'][method] * 1e3:.1f} ms "
              f"(x{report['seconds'][method] / np.median(times[1:]):.1f}); images {image.shape} / {other.shape}, "
              f"r {r:.3f}", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("directory")
    parser.add_argument("--peer", help="quantem's interpreter: run quantem beside qora instead")
    parser.add_argument("--crop", type=int, help="the first N scan rows and columns (with --peer)")
    args = parser.parse_args()
    if args.peer:
        beside_quantem(args.directory, args.peer, args.crop)
    else:
        main(args.directory)
