"""Partial coherence from the data: the Poisson deviance of the counts against the found object's coherent
intensity blurred by a Gaussian of width s (s = 0: no blur), scanned over s, for each start of the default recipe;
and the same after 100 iterations of ER with the psf model started narrow (0.5 px, Richardson-Lucy every iteration)."""
import sys, time
import numpy as np
from qora.bench import phase_success as ps
from qora.phase.solver import Solver
from qora.phase.detector import record
from qora.phase.coherence import Coherence, coherence_iterate, kernel_profile, _radius2

SIGMAS = [0.0, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 1.0]

def deviance(calc, obs, used):
    calc = np.maximum(calc[used], 1e-30); obs = obs[used]
    return float(np.sum(2 * (calc - obs + np.where(obs > 0, obs * np.log(np.where(obs > 0, obs, 1) / calc), 0))))

def scan(obj, counts, used):
    y = np.fft.fftn(np.fft.ifftshift(obj), norm="ortho")  # object centre-origin; any shift leaves |y|
    c = np.fft.fftshift(np.abs(y) ** 2).astype(np.float64)
    c = np.fft.ifftshift(c)
    obs = np.fft.ifftshift(counts); u = np.fft.ifftshift(used)
    out = []
    for s in SIGMAS:
        if s == 0:
            m = c
        else:
            k = kernel_profile(c.shape, sigma=s, dtype=np.float64)
            m = np.fft.irfftn(np.fft.rfftn(c) * np.fft.rfftn(k), s=c.shape)
        m = m * obs[u].sum() / max(m[u].sum(), 1e-30)
        out.append(deviance(m, obs, u) / u.sum())
    return out

cases = sys.argv[1].split(","); starts = int(sys.argv[2])
for name in cases:
    case = ps.CASES[name]; truth = case.object(); counts, mask = record(truth, case.detector, seed=0)
    used = ~mask if mask is not None else np.ones(counts.shape, bool)
    solver = Solver(counts, mask=mask, backend="cpu")
    r = solver.run(starts=starts, keep_all=True)
    for k in range(starts):
        e = ps.aligned_error(r.objects[k], truth)
        d = scan(r.objects[k], counts, used)
        best = SIGMAS[int(np.argmin(d))]
        engine = solver._engine_for(r.supports[k]); engine.x[0] = r.objects[k]; engine.x_written()
        coh = Coherence(engine, sigma=0.5, every=1)
        coherence_iterate(engine, coh, 100, 0.0, 0.0)
        d2 = scan(engine.get_x()[0], counts, used)
        best2 = SIGMAS[int(np.argmin(d2))]
        print(f"{name} start {k}: err {e:.3f}; deviance/px vs s {[round(v, 4) for v in d]} -> best s {best}; "
              f"after psf-ER: {[round(v, 4) for v in d2]} -> best s {best2}", flush=True)
