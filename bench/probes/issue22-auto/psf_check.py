"""Can the data say whether the beam was partially coherent? For each case: the default recipe's starts, then from
each start's found object on its found support, ER with the psf model (kernel refined by Richardson-Lucy) and the
fitted kernel's rms width (pixels per axis)."""
import sys, time
import numpy as np
from qora.bench import phase_success as ps
from qora.phase.solver import Solver
from qora.phase.detector import record
from qora.phase.coherence import Coherence, coherence_iterate, _radius2

def width(kernel, shape):
    r2 = np.asarray(_radius2(shape, np))
    return float(np.sqrt((kernel * r2).sum() / len(shape)))

cases = sys.argv[1].split(","); starts = int(sys.argv[2])
variants = [(1.0, 5, 100), (1.0, 1, 100), (0.5, 1, 100)]
for name in cases:
    case = ps.CASES[name]; truth = case.object(); counts, mask = record(truth, case.detector, seed=0)
    solver = Solver(counts, mask=mask, backend="cpu")
    t = time.time()
    r = solver.run(starts=starts, keep_all=True)
    t_run = time.time() - t
    for k in range(starts):
        e = ps.aligned_error(r.objects[k], truth)
        out = []
        for s0, every, n in variants:
            engine = solver._engine_for(r.supports[k])
            engine.x[0] = r.objects[k]; engine.x_written()
            coh = Coherence(engine, sigma=s0, every=every)
            t = time.time()
            hist = coherence_iterate(engine, coh, n, 0.0, 0.0)
            w = width(np.asarray(coh.kernels[0]), solver.shape)
            out.append(f"s0={s0} every={every} n={n}: width {w:.3f} peak {float(coh.kernels[0].max()):.3f} "
                       f"ferr {r.final_errors[k]:.4f}->{hist[-1,0]:.4f} ({time.time()-t:.1f}s)")
        print(f"{name} start {k}: err {e:.3f} recipe {r.recipe[:20]} run {t_run/starts:.1f}s/start | " + " | ".join(out), flush=True)
