"""The default (with its coherence check) on featured_256 blurred by other widths than the benchmark's 0.7 px, 10 starts,
scored as the benchmark scores (bound from the reference from the truth)."""
import sys
from qora.bench import phase_success as ps
from qora.phase.detector import Detector, featured

for sigma in [float(s) for s in sys.argv[1].split(",")]:
    case = ps.Case(featured, 256, Detector(photons=1e8, coherence_sigma=sigma))
    row = ps.run_case(case, starts=int(sys.argv[2]), backend="cpu")
    print(f"featured_256 blurred {sigma} px | {row['succeeded']}/{row['starts']} below {row['bound']:.3f} | median "
          f"{row['median_error']:.3f} | errors {sorted(round(e, 3) for e in row['errors'])} | width {row['coherence_width']} | "
          f"recipe {row['recipe'][:60]}... | {row['s_per_start']:.1f} s/start", flush=True)
