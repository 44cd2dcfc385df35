"""Issue 38's `--plot` target (at most 10% of the fit): the default fit of the 64 x 64 thick film of
`qora bench ssb-cpu-fit` (the incoherent branch chosen), then plot_fit's parts timed one by one:
the branch images, the agreement curves, the figure and its PNG. CPU; prints seconds."""

import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def main() -> None:
    from qora.bench.ssb import _fit_cases
    from qora.ssb import Session, fit_session
    from qora.ssb import files

    data, step, kv, mpp, alpha, *_ = _fit_cases(64)["thick_film_64"]
    session = Session(data, kv=kv, alpha_mrad=alpha, scan_step=step)
    fit_session(session, rotation=0.0, tilt=False)  # warm Numba
    t0 = time.perf_counter()
    session = Session(data, kv=kv, alpha_mrad=alpha, scan_step=step)
    result = fit_session(session, rotation=None, tilt=True)
    fit_s = time.perf_counter() - t0
    print(f"fit {fit_s:.2f} s, better {result.get('better')}")
    parts = {}
    original = files.agreement_curves

    def timed_curves(*a, **k):
        t = time.perf_counter()
        out = original(*a, **k)
        parts["curves"] = time.perf_counter() - t
        return out

    files.agreement_curves = timed_curves
    import qora.plot
    import qora.ssb.depth

    for module, name in ((qora.plot, "save_png"), (qora.ssb.depth, "depth_sections")):
        def timed(*a, _f=getattr(module, name), _name=name, **k):
            t = time.perf_counter()
            out = _f(*a, **k)
            parts[_name] = time.perf_counter() - t
            return out
        setattr(module, name, timed)
    import shutil
    with tempfile.TemporaryDirectory() as tmp:
        for run in range(2):
            t = time.perf_counter()
            files.plot_fit(Path(tmp) / "fit.png", session, result)
            total = time.perf_counter() - t
            print(f"plot run {run}: {total:.2f} s ({total / fit_s:.0%} of the fit), " + ", ".join(f"{k} {v:.2f} s" for k, v in parts.items()))
        shutil.copy(Path(tmp) / "fit.png", "/tmp/fit_plot_cost.png")
    if len(sys.argv) > 1:
        import cProfile
        import pstats
        with tempfile.TemporaryDirectory() as tmp:
            cProfile.runctx("files.plot_fit(Path(tmp) / 'fit.png', session, result)", globals(),
                            {"files": files, "Path": Path, "tmp": tmp, "session": session, "result": result},
                            sys.argv[1])
        pstats.Stats(sys.argv[1]).sort_stats("cumulative").print_stats(30)


if __name__ == "__main__":
    main()
