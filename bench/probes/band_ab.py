"""The band agreement kernels (``kernels/band.cu``) of this tree against an older copy of the file, in one process on
the ssb-full dataset (issue 43: the one-set pass at 2.9 ms against its 0.73-1.0 ms G-read floor):

    python bench/probes/band_ab.py /tmp/qora-ssb-full OLD_band.cu

For each source: the thick and the standard model's batch pass for 1 and 8 sets and the derivative pass for 3 and 6
parameters, median device ms of 10 (CUDA events); then the largest difference of the new moments from the old
(S against its largest value, N relative), per pass.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np


def _use_source(text: str | None) -> None:
    """Compile band.cu from ``text`` (None: the tree's file) at the next launch."""
    from qora.backend import kernels as backend_kernels

    original = getattr(_use_source, "original", None) or backend_kernels.kernel_source
    _use_source.original = original
    if text is not None:  # its local includes written in place, as kernel_source does
        text = backend_kernels._LOCAL_INCLUDE.sub(lambda m: original("qora.ssb", m.group(1)), text)
    backend_kernels.kernel_source = original if text is None else (
        lambda package, name: text if (package, name) == ("qora.ssb", "band.cu") else original(package, name))
    backend_kernels._modules.clear()
    backend_kernels._functions.clear()


def passes(band3, band6, base):
    """name -> (launch, fetch): the pass's launches alone (timed), and the pass with its moments on the host."""
    thick8 = [{**base, "C10": base["C10"] + 5 * i} for i in range(8)]
    standard8 = [{**v, "thickness": 0.0} for v in thick8]

    def host(m):
        return {k: np.asarray(v.get() if hasattr(v, "get") else v) for k, v in m.items() if k in ("S", "N")}

    def batch(band, sets):
        return lambda: band._quadratic_batch(sets), lambda: host(band._quadratic_batch(sets))

    def derivatives(band):
        return lambda: band._derivative_raw(base), lambda: host(band.moments(base, order=2))
    return {"thick, 1 set": batch(band6, thick8[:1]), "thick, 8 sets": batch(band6, thick8),
            "standard, 1 set": batch(band6, standard8[:1]), "standard, 8 sets": batch(band6, standard8),
            "derivatives, 3 parameters": derivatives(band3), "derivatives, 6 parameters": derivatives(band6)}


def main(directory: str, old: str) -> None:
    from qora.bench.common import time_device
    from qora.bench.ssb_full import full_session
    from qora.ssb import QUADRATIC_PARAMETERS, Band

    session = full_session(Path(directory), backend="cuda")
    be = session.backend
    base = {"C10": 100.0, "C12a": 10.0, "C12b": 5.0, "thickness": 120.0, "tilt_y": 1e-3, "tilt_x": 0.0}
    band6, band3 = Band(session, QUADRATIC_PARAMETERS), Band(session, QUADRATIC_PARAMETERS[:3])
    runs = passes(band3, band6, base)
    print(f"band {band6.shape[0]} frequencies x {band6.shape[1]} pixels", flush=True)
    results = {}
    for label, text in (("old", Path(old).read_text()), ("new", None)):
        _use_source(text)
        results[label] = {}
        for name, (launch, fetch) in runs.items():
            ms = time_device(be, launch, warmup=1, repeats=10).median_ms
            results[label][name] = (ms, fetch())
            print(f"{label}: {name}: {ms:.2f} ms", flush=True)
    for name in runs:
        (t_old, a), (t_new, b) = results["old"][name], results["new"][name]
        s = float(np.abs(b["S"] - a["S"]).max() / np.abs(a["S"]).max())
        n = float(np.abs(b["N"] - a["N"]).max() / np.abs(a["N"]).max())
        print(f"{name}: {t_old:.2f} -> {t_new:.2f} ms ({t_old / t_new:.2f}x); new - old: S {s:.1e}, N {n:.1e}",
              flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:3])
