"""other_blurs.py with the sharpening rule S = factor x fitted width instead of width + 0.1 (monkeypatched)."""
import sys
from qora.bench import phase_success as ps
from qora.phase import recipe as rc
from qora.phase.detector import Detector, featured

factor = float(sys.argv[3])
rc.partial_coherence_recipe = lambda width=None: rc.Recipe.parse(
    rc.SHARPENED_SEARCH_RECIPE.format(sharpen=round(factor * width, 3)))
for sigma in [float(s) for s in sys.argv[1].split(",")]:
    case = ps.Case(featured, 256, Detector(photons=1e8, coherence_sigma=sigma))
    row = ps.run_case(case, starts=int(sys.argv[2]), backend="cpu")
    print(f"S = {factor} w | featured_256 blurred {sigma} px | {row['succeeded']}/{row['starts']} below {row['bound']:.3f} | median "
          f"{row['median_error']:.3f} | errors {sorted(round(e, 3) for e in row['errors'])} | width {row['coherence_width']} | "
          f"{row['recipe'][:110]} | {row['s_per_start']:.1f} s/start", flush=True)
