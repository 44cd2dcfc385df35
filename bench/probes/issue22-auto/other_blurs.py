"""The default (with its coherence check) on featured_256 blurred by other widths than the benchmark's 0.7 px, 10 starts,
scored as the benchmark scores (bound from the reference from the truth).

    PYTHONPATH=src python bench/probes/issue22-auto/other_blurs.py 0.3,0.5,1.0 10
"""
import sys

from qora.bench import phase_success as ps
from qora.phase.detector import Detector, featured


def run(sigmas, starts: int, label: str = "", recipe_chars: int = 60) -> None:
    """One line a blur width: the starts within the bound, the errors, the fitted width and the recipe run."""
    for sigma in sigmas:
        case = ps.Case(featured, 256, Detector(photons=1e8, coherence_sigma=sigma))
        row = ps.run_case(case, starts=starts, backend="cpu")
        print(f"{label}featured_256 blurred {sigma} px | {row['succeeded']}/{row['starts']} below {row['bound']:.3f} | "
              f"median {row['median_error']:.3f} | errors {sorted(round(e, 3) for e in row['errors'])} | width "
              f"{row['coherence_width']} | recipe {row['recipe'][:recipe_chars]}... | {row['s_per_start']:.1f} s/start",
              flush=True)


if __name__ == "__main__":
    run([float(s) for s in sys.argv[1].split(",")], int(sys.argv[2]))
