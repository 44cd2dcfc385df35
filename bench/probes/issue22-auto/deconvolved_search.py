"""featured_256_psf: the coherent default recipe on counts deconvolved by a Gaussian of the fitted width (a Wiener
division of the autocorrelation by the kernel's transfer function), 10 starts; errors against the truth."""
import sys
import numpy as np
from qora.bench import phase_success as ps
from qora.phase import reconstruct
from qora.phase.detector import record
from qora.phase.coherence import kernel_profile
from qora.phase.support import fill_masked

case = ps.CASES["featured_256_psf"]; truth = case.object(); counts, mask = record(truth, case.detector, seed=0)
for width in [float(w) for w in sys.argv[1].split(",")]:
    for floor in (0.05, 0.2):
        filled = np.fft.ifftshift(np.where(mask, fill_masked(counts, mask), counts)) if mask is not None else np.fft.ifftshift(counts)
        t = np.fft.rfftn(kernel_profile(counts.shape, sigma=width, xp=np, dtype=np.float64))
        d = np.fft.irfftn(np.fft.rfftn(filled) * t / (t * t + floor**2), s=counts.shape)
        d = np.fft.fftshift(np.maximum(d, 0))
        r = reconstruct(d, mask=mask, starts=10, backend="cpu", keep_all=True,
                        recipe="HIO(sw=20, sigma=3, sigma_min=1, threshold=0.25, smin=0.25, smax=4)**1000 ER(sw=20, sigma=1, sigma_min=0.5, threshold=0.25, smin=0.25, smax=4)**200 ER**300")
        errs = sorted(round(ps.aligned_error(o, truth), 3) for o in r.objects)
        print(f"deconvolved by {width} px (Wiener floor {floor}): default coherent errors {errs}", flush=True)
