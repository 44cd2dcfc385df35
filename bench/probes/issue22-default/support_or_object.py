"""triangle_256_1e6: is the default's 0.22 the found support's fault or the found object's? ER**300 from the truth on
each start's found support, and ER**300 from each start's found object on the true support (float64)."""
import numpy as np
from qora.bench import phase_success as ps
from qora.phase import reconstruct, analysis
from qora.phase.detector import record

case = ps.CASES["triangle_256_1e6"]; truth = case.object(); counts, mask = record(truth, case.detector, seed=0)
r = reconstruct(counts, mask=mask, starts=3, backend="cpu", keep_all=True)
true_support = np.abs(truth) > 0
for k, (obj, sup) in enumerate(zip(r.objects, r.supports)):
    e0 = ps.aligned_error(obj, truth)
    # the truth on the found support: align the found support to the truth first (shift/twin of the object)
    aligned, info = analysis.align(np.asarray(obj, np.complex128) / np.linalg.norm(obj), truth / np.linalg.norm(truth))
    sup_al = np.abs(aligned) > 0.2 * np.abs(aligned).max()
    e_truth_found_support = ps.aligned_error(ps.known_support_er(np.where(sup_al, truth + 1e-6, 0), counts, mask), truth)
    e_found_true_support = ps.aligned_error(ps.known_support_er(np.where(true_support, aligned, 0), counts, mask), truth)
    print(f"start {k}: found {e0:.3f}, support {int(sup.sum())} px (true {int(true_support.sum())}), "
          f"ER from truth on found support (thresholded aligned object, {int(sup_al.sum())} px) {e_truth_found_support:.3f}, "
          f"ER from found object on true support {e_found_true_support:.3f}", flush=True)
