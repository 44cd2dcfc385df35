"""quantem's direct ptychography (SSB, OBF, WDD, iCoM, parallax) on one 4D-STEM array, for ``qora bench ssb-methods``.

Run by quantem's own environment (bench/quantem-env.sh), never by qora:

    python ssb_quantem.py DATA.npy OUT.npz SCAN_STEP_A KV ALPHA_MRAD MRAD_PER_PIXEL C10_A

DATA is (scan_row, scan_col, det_row, det_col), qora's layout, which quantem reads as (Rx, Ry, Qx, Qy): the scan
and the detector are transposed alike, a reflection of the whole experiment, which a round probe (defocus only)
does not see. The rotation is given as 0 and the aberrations as C10 alone (quantem's C10, like qora's, is minus the
defocus). Writes each kernel's phase image (quantem's ``corrected_bf``) to OUT.npz and prints one JSON line: the
seconds of the preparation and of each kernel's reconstruct, and quantem's version.

``QORA_QUANTEM_DEVICE`` (default cpu; "cuda" on a GPU machine) is quantem's device, ``QORA_QUANTEM_KERNELS`` a comma
list of the kernels to run (default all), ``QORA_QUANTEM_REPEATS`` how many times each is timed after a first,
untimed call when above 1 (the median is printed; the GPU synchronised before each reading).
"""

import json
import os
import sys
import time
import warnings

import numpy as np

KERNELS = {"ssb": "ssb", "obf": "obf", "wdd": "wdd", "icom": "icom", "parallax": "prlx"}


def main(path, out, step, kv, alpha, mrad_per_pixel, c10):
    warnings.filterwarnings("ignore")
    import quantem
    from quantem.core.datastructures.dataset4dstem import Dataset4dstem
    from quantem.diffractive_imaging.direct_ptychography import DirectPtychography

    device = os.environ.get("QORA_QUANTEM_DEVICE", "cpu")
    kernels = os.environ.get("QORA_QUANTEM_KERNELS", ",".join(KERNELS)).split(",")
    repeats = int(os.environ.get("QORA_QUANTEM_REPEATS", "1"))
    data = np.load(path).astype(np.float32)
    ds = Dataset4dstem.from_array(data, sampling=(step, step, mrad_per_pixel, mrad_per_pixel),
                                  units=["A", "A", "mrad", "mrad"])
    t0 = time.perf_counter()
    dp = DirectPtychography.from_dataset4d(ds, energy=kv * 1e3, semiangle_cutoff=alpha, aberration_coefs={"C10": c10},
                                           rotation_angle=0.0, verbose=False, device=device)
    seconds = {"prepare": time.perf_counter() - t0}
    images = {}
    for ours in kernels:
        samples = []
        for _ in range(repeats + 1 if repeats > 1 else 1):
            _synchronise(device)
            t0 = time.perf_counter()
            dp.reconstruct(deconvolution_kernel=KERNELS[ours], verbose=False)
            _synchronise(device)
            samples.append(time.perf_counter() - t0)
        seconds[ours] = float(np.median(samples[1:] if repeats > 1 else samples))
        image = dp.corrected_bf
        images[ours] = np.squeeze(np.asarray(image.detach().cpu().numpy() if hasattr(image, "detach") else image))
    np.savez(out, **images)
    print(json.dumps({"seconds": seconds, "quantem": getattr(quantem, "__version__", "unknown"), "device": device}))


def _synchronise(device: str) -> None:
    if device != "cpu":
        import torch

        torch.cuda.synchronize()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], *(float(v) for v in sys.argv[3:8]))
