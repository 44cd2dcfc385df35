"""triangle_256_1e6: what a search reaches WITH the true support, from random starts (10 starts), for a few recipes;
plus the error after a low-pass at a cut-off radius (pixels of q) beside the plain error."""
import sys
import numpy as np
from qora.bench import phase_success as ps
from qora.phase import reconstruct
from qora.phase.detector import record

case = ps.CASES["triangle_256_1e6"]; truth = case.object(); counts, mask = record(truth, case.detector, seed=0)
true_support = np.abs(truth) > 0
for recipe in sys.argv[1].split("|"):
    r = reconstruct(counts, mask=mask, support=true_support, recipe=recipe, starts=int(sys.argv[2]), backend="cpu",
                    keep_all=True)
    errs = sorted(round(ps.aligned_error(o, truth), 3) for o in r.objects)
    print(f"true support | {recipe} | errors {errs} | median {np.median(errs):.3f}", flush=True)
