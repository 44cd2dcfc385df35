"""triangle_256_1e6: does averaging the iterates of HIO on a start's found support (after the few-photon recipe) lower
its object error? For 4 starts: the error as found, of the mean of the in-support iterate over N HIO iterations
(global phase of each iterate matched to the first), and of ER**100 started from that mean."""
import numpy as np
from qora.bench import phase_success as ps
from qora.phase.solver import Solver
from qora.phase.detector import record

case = ps.CASES["triangle_256_1e6"]; truth = case.object(); counts, mask = record(truth, case.detector, seed=0)
solver = Solver(counts, mask=mask, backend="cpu")
r = solver.run(starts=4, keep_all=True)
for k in range(4):
    engine = solver._engine_for(r.supports[k])
    engine.x[0] = r.objects[k]; engine.x_written()
    sup = r.supports[k]
    for n_avg, algo in ((400, (1.0, -0.9)), (400, (0.9, -0.8))):  # HIO beta 0.9; RAAR beta 0.9 (a=beta, b=1-2beta)
        engine.x[0] = r.objects[k]; engine.x_written()
        acc = np.zeros(truth.shape, np.complex128); ref = None
        for i in range(n_avg):
            engine.iterate(1, algo[0], algo[1], None)
            x = engine.get_x()[0] * sup
            if ref is None:
                ref = x
            x = x * np.exp(-1j * np.angle(np.vdot(ref, x)))
            if i >= 100:
                acc += x
        mean = acc / (n_avg - 100)
        engine.x[0] = mean.astype(np.complex64); engine.x_written()
        engine.iterate(100, 0.0, 0.0, None)
        er = engine.get_x()[0]
        print(f"start {k} ({'HIO' if algo[0] == 1.0 else 'RAAR'}): found {ps.aligned_error(r.objects[k], truth):.3f}, "
              f"mean of {n_avg - 100} iterates {ps.aligned_error(mean, truth):.3f}, ER**100 from it {ps.aligned_error(er, truth):.3f}", flush=True)
