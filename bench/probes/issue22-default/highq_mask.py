"""triangle_256_1e6: leave the high-q shells whose mean count is below a threshold unmeasured (free modulus) and run
the default recipe; does the search then end nearer the truth-started floor (0.034)?"""
import sys
import numpy as np
from qora.bench import phase_success as ps
from qora.phase import reconstruct
from qora.phase.detector import record

case = ps.CASES["triangle_256_1e6"]; truth = case.object(); counts, mask = record(truth, case.detector, seed=0)
n = counts.shape[0]
g = np.meshgrid(*[np.arange(k) - k // 2 for k in counts.shape], indexing="ij")
r = np.sqrt(sum(x ** 2 for x in g)).astype(int)
shell_mean = np.bincount(r[~mask], counts[~mask]) / np.maximum(np.bincount(r[~mask]), 1)
for level in map(float, sys.argv[1].split(",")):
    low = (shell_mean < level) & (np.arange(shell_mean.size) > 10)  # past the beamstop
    rcut = int(np.argmax(low)) if low.any() else r.max() + 1
    m2 = mask | (r >= rcut)
    res = reconstruct(np.where(m2, 0, counts), mask=m2, starts=int(sys.argv[2]), backend="cpu", keep_all=True)
    errs = [round(ps.aligned_error(o, truth), 3) for o in res.objects]
    ref = ps.reference_error(truth, np.where(m2, 0, counts), m2)
    print(f"shells with mean count < {level} left free (q >= {rcut} px of {n // 2}): recipe {res.recipe[:40]}..., "
          f"errors {errs}, truth-started reference {ref:.4f}", flush=True)
