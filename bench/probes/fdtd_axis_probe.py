"""Which rotation axis relates the FDTD "tilted" set's fields to its phantom (issue 39; docs/holo.md, "The FDTD
set's axis"), without any reconstruction: the phantom (the truth at angle 0) is turned about a candidate axis by
each angle, projected along z (k0 * sum (n - n_m) * pixel, the projection approximation), and correlated with
the Rytov phase of the FDTD field at that angle. The axis the data were made with gives the highest correlation.

    PYTHONPATH=src python bench/probes/fdtd_axis_probe.py ../shared/data/odt/fdtd_3d_sino_A220_R6.500_tiltyz0.2.tar.lzma

Also the plain Rytov reconstruction's correlation with the phantom for the same axes (oversample 1).
"""

import io
import lzma
import sys
import tarfile

import numpy as np
from scipy.ndimage import affine_transform

RES, NM, TILT, STEP = 6.5, 1.333, 0.2, 10  # pixels per wavelength, medium index, the tilt named, every STEP-th angle


def load(path):
    """The fields (A, n, n) and the phantom (n, n, n), as the archive's text files hold them."""
    fields, phantom = {}, {}
    with tarfile.open(fileobj=io.BytesIO(lzma.open(path).read())) as tar:
        for member in tar.getmembers():
            name = member.name.rsplit("/", 1)[-1]
            if not name.endswith(".txt") or "_" not in name:
                continue
            parts = name[:-4].split("_")
            if parts[0] in ("field", "phantom"):
                data = np.loadtxt(tar.extractfile(member))
                (fields if parts[0] == "field" else phantom)[(int(parts[1]), parts[2])] = data
    count = max(i for i, _ in fields) + 1
    u = np.stack([fields[(i, "real")] + 1j * fields[(i, "imag")] for i in range(count)])
    return u, np.stack([phantom[(i, "real")] for i in range(len(phantom))])


def turn(axis, angle):
    """Rodrigues' matrix on (z, y, x) components (qora.holo.geometry.axis_rotation's form)."""
    u = np.asarray(axis, float) / np.linalg.norm(axis)
    k = np.array([[0, -u[2], u[1]], [u[2], 0, -u[0]], [-u[1], u[0], 0]])
    return np.eye(3) + np.sin(angle) * k + (1 - np.cos(angle)) * k @ k


def main(path):
    from qora import holo
    from qora.holo.geometry import Geometry
    from qora.holo.unwrap import rytov

    u, phantom = load(path)
    count, n = u.shape[:2]
    angles = np.linspace(0, 2 * np.pi, count, endpoint=False)
    contrast = phantom - NM
    centre = np.full(3, (n - 1) / 2)
    axes = {"straight (y)": (0, 1, 0), "tilt +z": (np.sin(TILT), np.cos(TILT), 0),
            "tilt -z": (-np.sin(TILT), np.cos(TILT), 0), "tilt +x": (0, np.cos(TILT), np.sin(TILT)),
            "tilt -x": (0, np.cos(TILT), -np.sin(TILT))}
    measured = {i: rytov(u[i]).imag for i in range(0, count, STEP)}
    print(f"{count} fields of {n}^2; projections at {len(measured)} angles")
    for label, axis in axes.items():
        r = []
        for i, phase in measured.items():
            m = turn(axis, angles[i])  # samples the phantom at m (r - c) + c: the phantom turned by m^-1
            vol = affine_transform(contrast, m, offset=centre - m @ centre, order=1)
            r.append(np.corrcoef((2 * np.pi / RES * vol.sum(axis=0)).ravel(), phase.ravel())[0, 1])
        lam = 0.65
        g = Geometry(wavelength=lam, medium_index=NM, pixel=lam / RES, n=n, na_detection=NM, angles=angles,
                     axis=axis, rotation_sense=-1)
        index = np.asarray(holo.reconstruct(u, g, method="plain", oversample=1).index).real
        c = np.corrcoef(index.ravel(), phantom.ravel())[0, 1]
        print(f"{label:14s} projections: mean correlation {np.mean(r):.5f} (min {np.min(r):.5f}); "
              f"plain Rytov (sense -1) against the phantom: correlation {c:.4f}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
