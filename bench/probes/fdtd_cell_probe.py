"""The FDTD cell (ODTbrain's example set) reconstructed as a user would: each method's regions against the
shipped phantom (issue 39: the nucleus contrast cytoplasm - nucleus, truth 0.005, kept by the default TV).

    PYTHONPATH=src python bench/probes/fdtd_cell_probe.py ARCHIVE [cpu|cuda] [method ...]

methods: "gp" (the default), "tv" (weight from the data), "plain", "tv:0.08" (a fixed weight); the environment's
QORA_OVERSAMPLE sets the solver grid's oversampling (default the options'), QORA_GRIDDING the gridding. The axis
is taken as straight, sense -1 (ODTbrain's angles; docs/holo.md, "The FDTD set's axis"). Regions by the phantom's values:
cytoplasm 1.365, nucleus 1.360, nucleolus > 1.37.
"""

import sys
import time

import numpy as np


def main(path, backend="cpu", *methods):
    from qora import holo
    from qora.holo.geometry import Geometry

    s = holo.read_odtbrain_archive(path, wavelength=0.65)
    ph, nm = s.phantom, s.medium_index
    g = Geometry(wavelength=0.65, medium_index=nm, pixel=s.pixel, n=s.fields.shape[-1], na_detection=nm,
                 angles=s.angles, rotation_sense=-1)
    cyto, nuc, nucleolus = (ph > 1.364) & (ph < 1.366), (ph > 1.359) & (ph < 1.361), ph > 1.37
    cell = ph > nm + 1e-4
    print(f"truth: cytoplasm {ph[cyto].mean():.4f} nucleus {ph[nuc].mean():.4f} contrast "
          f"{ph[cyto].mean() - ph[nuc].mean():.4f} nucleolus {ph[nucleolus].mean():.4f}")
    for m in methods or ("gp", "tv"):
        kw = {"method": m.split(":")[0]}
        if m.startswith("tv"):
            kw["tv_weight"] = float(m.split(":")[1]) if ":" in m else "auto"
        t = time.perf_counter()
        import os
        if os.environ.get("QORA_OVERSAMPLE"):
            kw["oversample"] = float(os.environ["QORA_OVERSAMPLE"])
        if os.environ.get("QORA_GRIDDING"):
            kw["gridding"] = os.environ["QORA_GRIDDING"]
        r = holo.reconstruct(s.fields, g, backend=backend, **kw)
        seconds = time.perf_counter() - t
        idx = np.asarray(r.index)
        err = idx - ph
        print(f"{m:8s} cytoplasm {idx[cyto].mean():.4f} nucleus {idx[nuc].mean():.4f} contrast "
              f"{idx[cyto].mean() - idx[nuc].mean():.4f} nucleolus {idx[nucleolus].mean():.4f} bias inside "
              f"{err[cell].mean():+.2e} outside {err[~cell].mean():+.2e} RMSE {np.sqrt(np.mean(err**2)):.3e} "
              f"weight {r.info.get('tv_weight')} "
              f"{seconds:.1f} s", flush=True)
        if r.info.get("tv_selection"):
            print(f"         search: {r.info['tv_selection']}", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
