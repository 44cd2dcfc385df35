import sys, time
from qora.bench import phase_success as ps
from qora.phase.detector import record
for name in sys.argv[1].split(","):
    case = ps.CASES[name]; truth = case.object()
    c, m = record(truth, case.detector, seed=0)
    t = time.time(); r = ps.reference_error(truth, c, m)
    print(name, "reference (ER**300 from the truth, record seed 0) %.4f" % r, "bound %.3f" % ps.success_bound(r), "%.1fs" % (time.time() - t), flush=True)
