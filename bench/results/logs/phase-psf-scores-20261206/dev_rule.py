import sys, numpy as np
from qora.phase import objects
from qora.phase.detector import Detector, record
from qora.phase.solver import Solver
from qora.phase.coherence import blur_deviance, BLUR_WIDTHS
import qora.phase.solver as S
orig = S.Solver._coherence_check
def spy(self, result, **run):
    xp = np
    unused = self.free if self.mask is None else (self.mask | self.free)
    d0 = blur_deviance(result.object, self.intensity, unused if unused.any() else None)
    out = orig(self, result, **run)
    d1 = blur_deviance(out.object, self.intensity, unused if unused.any() else None)
    print(f"coherent: err {result.fourier_error:.4f} min dev {d0.min():.5f} at {BLUR_WIDTHS[int(np.argmin(d0))]}, dev0 {d0[0]:.5f} | returned ({'psf' if out.psf is not None else 'coh'}): err {out.fourier_error:.4f} min dev {d1.min():.5f} at {BLUR_WIDTHS[int(np.argmin(d1))]}", flush=True)
    return out
S.Solver._coherence_check = spy
case = sys.argv[1]
if case == "tri":
    c, m = record(objects.triangle(64), Detector(photons=1e8, beamstop=2, gap=1, coherence_sigma=0.8), seed=0)
    for seed in range(3):
        Solver(c, mask=m, backend="cpu").run(seed=seed)
elif case == "feat":
    from qora.bench.phase_success import make_case
    c, m = make_case("featured_256_psf")[:2]
    for seed in range(int(sys.argv[2])):
        Solver(c, mask=m, backend="cpu").run(seed=seed)
