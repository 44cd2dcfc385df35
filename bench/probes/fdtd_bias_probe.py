"""Where the FDTD set's index bias comes from (issue 39; docs/holo.md, "The index bias on the FDTD set").

Compares the integral of each field's Rytov phase with the phantom's projection k0 int (n - n_m) dz, for the
FDTD fields, for the beam propagation model (BPM) through the same phantom, and for the exact field of a sphere
of this size and contrast; then reconstructs (plain Rytov, oversample 2) the FDTD fields and the BPM's fields of
the same phantom at every angle and reports the mean index error inside the cell and outside it.

    PYTHONPATH=src python bench/probes/fdtd_bias_probe.py ../shared/data/odt/fdtd_3d_sino_A220_R6.500_tiltyz0.2.tar.lzma

Takes about 8 minutes on the two-core machine (the BPM through 220 poses of the 188^3 phantom: 6.5 of them).
ODTbrain's row of the docs' table was measured in the peers' environment (odtbrain 0.4.12, backpropagate_3d,
padfac 1.75, onlyreal), not here.
"""

import sys
import time

import numpy as np

WAVELENGTH, NA_BPM = 0.65, 1.30  # um; the BPM's tables need NA < n_m


def main(path):
    from qora import holo
    from qora.holo.bpm import bpm_forward
    from qora.holo.geometry import Geometry
    from qora.holo.phantoms import Sphere, partial_wave_ratio
    from qora.holo.unwrap import rytov

    s = holo.read_odtbrain_archive(path, wavelength=WAVELENGTH)
    u, phantom, nm, n = s.fields, s.phantom, s.medium_index, s.fields.shape[-1]
    k0 = 2 * np.pi / WAVELENGTH
    projection = k0 * (phantom - nm).sum(axis=0) * s.pixel
    ratio = [rytov(u[a]).imag.sum() / projection.sum() for a in range(len(u))]
    print(f"FDTD: phase integral / projection, over {len(u)} angles: {np.min(ratio):.4f} to {np.max(ratio):.4f}")

    def geometry(na, angles):
        return Geometry(wavelength=WAVELENGTH, medium_index=nm, pixel=s.pixel, n=n, na_detection=na, angles=angles,
                        rotation_sense=-1)

    one = np.asarray(bpm_forward(phantom - nm, geometry(NA_BPM, s.angles[:1])))[0]
    cell = projection > 0.05
    print(f"BPM, angle 0: phase integral / projection {rytov(one).imag.sum() / projection.sum():.4f}; median inside "
          f"the cell: BPM {np.median(rytov(one).imag[cell] / projection[cell]):.4f}, FDTD "
          f"{np.median(rytov(u[0]).imag[cell] / projection[cell]):.4f}")
    sphere = Sphere((0, 0, 0), 4.5, 1.365)
    exact = rytov(1 + partial_wave_ratio(sphere, geometry(nm, s.angles[:1]))[0]).imag
    c = (np.arange(n) - n // 2) * s.pixel
    y, x = np.meshgrid(c, c, indexing="ij")
    chord = 2 * np.sqrt(np.maximum(sphere.radius**2 - y**2 - x**2, 0))
    print(f"exact sphere (R 4.5 um, n 1.365): phase integral / projection "
          f"{exact.sum() / (k0 * (1.365 - nm) * chord.sum()):.4f}")
    t = time.time()
    w = np.asarray(bpm_forward(phantom - nm, geometry(NA_BPM, s.angles)))
    print(f"BPM fields at {len(s.angles)} angles: {time.time() - t:.0f} s")
    inside = phantom > nm + 1e-4
    for label, fields in (("FDTD fields", u), ("BPM fields of the same phantom", w)):
        index = np.asarray(holo.reconstruct(fields, geometry(NA_BPM, s.angles), method="plain", oversample=2).index)
        err = index - phantom
        print(f"{label}: Qora plain, oversample 2: mean error inside the cell {err[inside].mean():+.2e}, outside "
              f"{err[~inside].mean():+.2e}, RMSE {np.sqrt(np.mean(err**2)):.3e}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
