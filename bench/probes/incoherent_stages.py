"""fit_incoherent's thinned stages at full scale (issue 38): the default's two stages (an eighth of
INCOHERENT_COARSE_ROWS, then INCOHERENT_COARSE_ROWS) against other splits, from the columnar fit's
values on ``qora bench ssb-full``'s dataset; each fit's time (median of 2 after a warm-up), its values,
and every stage's passes.

    python bench/probes/incoherent_stages.py /tmp/qora-ssb-full
"""

import sys
import time
from pathlib import Path

import numpy as np


def main(directory: str) -> None:
    from qora.bench.ssb_full import full_session
    from qora.ssb import depth

    session = full_session(Path(directory))
    columnar = session.fit(rotation=0.0, depth_model="columnar")["thick"]["parameters"]
    start = {n: columnar[n] for n in ("C10", "C12a", "C12b", "thickness")}
    print(f"start (the columnar fit): {start}", flush=True)
    for first, rows in ((8, 4096), (4, 4096), (8, 2048), (8, 8192), (1, 4096)):
        depth.FIRST_STAGE = first
        out = depth.fit_incoherent(session, start, rotation=0.0, coarse_rows=rows)  # warm
        times = []
        for _ in range(2):
            t0 = time.perf_counter()
            out = depth.fit_incoherent(session, start, rotation=0.0, coarse_rows=rows)
            times.append(time.perf_counter() - t0)
        values, agreement, _, band, _ = out
        print(f"first stage {rows // first} rows, then {rows}: {np.median(times):.3f} s; C10 {values['C10']:.3f} A, "
              f"thickness {values['thickness']:.2f} A, agreement {agreement:.8f}; stages {band.stage_passes}, whole "
              f"{band.passes}", flush=True)
    depth.FIRST_STAGE = 8


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/tmp/qora-ssb-full")
