import sys
import numpy as np
from qora.bench import phase_success as ps
from qora.phase import reconstruct
from qora.phase.detector import record
name = sys.argv[1]
case = ps.CASES[name]; truth = case.object(); counts, mask = record(truth, case.detector, seed=0)
recipes = {
 "partial-coherence": "partial-coherence",
 "threshold 0.2, no psf": "HIO(sw=20, sigma=3, sigma_min=1, threshold=0.2, smin=0.25, smax=4)**1000 ER(sw=20, sigma=1, sigma_min=0.5, threshold=0.2, smin=0.25, smax=4)**200 ER**300",
 "default, psf on the last ER only": "HIO(sw=20, sigma=3, sigma_min=1, threshold=0.25, smin=0.25, smax=4)**1000 ER(sw=20, sigma=1, sigma_min=0.5, threshold=0.25, smin=0.25, smax=4)**200 ER(psf=gaussian)**300",
}
for label in sys.argv[2].split("|"):
    r = reconstruct(counts, mask=mask, recipe=recipes[label], starts=int(sys.argv[3]), backend="cpu", keep_all=True)
    errs = [round(ps.aligned_error(o, truth), 3) for o in r.objects]
    peak = None if r.psf is None else float(np.max(r.psf))
    print(name, "|", label, "| errors", errs, "| best start's kernel peak", peak, flush=True)
