"""triangle_256_1e6: a support from the aligned average of the default's starts (the pattern alone), then random
starts on it. Prints the per-start errors of the default, the consensus support's size and its overlap with the
truth's, and the errors of `HIO**400 ER**300` from random starts on it."""
import sys
import numpy as np
from qora.bench import phase_success as ps
from qora.phase import reconstruct, analysis
from qora.phase.detector import record

name = sys.argv[1] if len(sys.argv) > 1 else "triangle_256_1e6"
case = ps.CASES[name]; truth = case.object(); counts, mask = record(truth, case.detector, seed=0)
true_support = np.abs(truth) > 0
r = reconstruct(counts, mask=mask, starts=10, backend="cpu", keep_all=True)
errs = [ps.aligned_error(o, truth) for o in r.objects]
print("default errors", [round(e, 3) for e in errs], "fourier", [round(float(f), 4) for f in r.final_errors], flush=True)
order = np.argsort(r.final_errors)
ref = r.objects[order[0]]
for keep in (3, 5, 10):
    acc = np.zeros(truth.shape)
    for k in order[:keep]:
        al, _ = analysis.align(r.objects[k] / np.linalg.norm(r.objects[k]), ref / np.linalg.norm(ref))
        acc += np.abs(al)
    acc /= keep
    avg_err = None
    for thr in (0.15, 0.2, 0.25):
        sup = acc > thr * acc.max()
        # the support in the truth's frame, to score it
        al_sup, info = analysis.align(np.where(sup, acc, 0).astype(complex), truth)
        sup_t = np.abs(al_sup) > 0.5 * np.abs(al_sup)[sup.nonzero()].min() if False else np.abs(al_sup) > 0.5 * thr * acc.max()
        rr = reconstruct(counts, mask=mask, support=sup, recipe="HIO**400 ER**300", starts=10, backend="cpu", keep_all=True)
        e2 = sorted(round(ps.aligned_error(o, truth), 3) for o in rr.objects)
        print(f"keep {keep} thr {thr}: support {int(sup.sum())} px (true {int(true_support.sum())}), "
              f"missed {int((true_support & ~sup_t).sum())} extra {int((sup_t & ~true_support).sum())}; "
              f"HIO**400 ER**300 on it: {e2} ({sum(e < 0.2 for e in e2)}/10 < 0.2)", flush=True)
