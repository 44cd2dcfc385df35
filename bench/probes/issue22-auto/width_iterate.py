"""featured_256_psf (0.7 px blur): the blur width fitted to the objects of a coherent search on counts sharpened by w,
for a few w: does the estimate move towards the blur when the search is sharpened by the first estimate?"""
import sys
import numpy as np
from qora.bench import phase_success as ps
from qora.phase import reconstruct
from qora.phase.detector import record
from qora.phase.coherence import blur_width

case = ps.CASES[sys.argv[1] if len(sys.argv) > 1 else "featured_256_psf"]
truth = case.object(); counts, mask = record(truth, case.detector, seed=0)
for w in (0.4, 0.5):
    recipe = (f"HIO(sw=20, sigma=3, sigma_min=1, threshold=0.25, smin=0.25, smax=4, sharpen={w})**1000 "
              f"ER(sw=20, sigma=1, sigma_min=0.5, threshold=0.25, smin=0.25, smax=4, sharpen={w})**200 ER(sharpen={w})**300")
    r = reconstruct(counts, mask=mask, recipe=recipe, starts=4, backend="cpu", keep_all=True)
    widths = [blur_width(o, counts, mask) for o in r.objects]
    errs = [round(ps.aligned_error(o, truth), 3) for o in r.objects]
    print(f"sharpened by {w}: errors {errs}, blur widths fitted to the measured counts {widths}, best start {r.best}", flush=True)
