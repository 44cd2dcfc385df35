"""The image methods at issue 42's full scale (H200 targets: WDD <= 1 s, OBF and iCoM <= 0.1 s each from a prepared
session), on ``qora bench ssb-full``'s dataset (512^2 scan, 192^2 detector; made into DIR when missing):

    python bench/probes/ssb_methods_fullscale.py /tmp/qora-ssb-full

Prints, for SSB, OBF, iCoM and WDD (at the benchmark's true aberrations, mid-plane C10; WDD with its dose rule),
the median of 3 after a warm-up (the device synchronised), the G bytes, the bright-field pixels, WDD's lattice
side and block, and each image's correlation with SSB's (a sanity check: the same object).
"""

import sys
import time

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


if __name__ == "__main__":
    main(sys.argv[1])
