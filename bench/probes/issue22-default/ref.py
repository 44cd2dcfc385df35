import sys, time
from qora.bench import phase_success as ps
from qora.phase.detector import record
for name in sys.argv[1].split(","):
    case = ps.CASES[name]; truth = case.object()
    for seed in (0, 1, 2):
        c, m = record(truth, case.detector, seed=seed)
        t = time.time(); r = ps.reference_error(truth, c, m)
        print(name, "record seed", seed, "reference %.4f" % r, "%.1fs" % (time.time() - t), flush=True)
