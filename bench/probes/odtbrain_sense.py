"""Which of Qora's rotation senses ODTbrain's angles and tilted axis follow (docs/holo.md, Geometries).

Step 1 (qora's venv):  PYTHONPATH=src python bench/probes/odtbrain_sense.py simulate /tmp/sense
Step 2 (peers' venv with odtbrain):  python bench/probes/odtbrain_sense.py odtbrain /tmp/sense
Two off-axis spheres, 60 angles about an axis tilted 0.3 rad (Born fields of qora's sense +1); ODTbrain's
backpropagate_3d_tilted is run with +angles and -angles and both axis tilts, and each result correlated
with Qora's plain reconstruction: the best is the matching convention.
"""

import sys
from pathlib import Path

import numpy as np

TILT = 0.3


def simulate(folder: Path):
    from qora import holo
    from qora.holo import phantoms as P
    from qora.holo.geometry import Geometry, rotation_axis

    g = Geometry(0.532, 1.333, 0.1, 48, 1.2, angles=np.linspace(0, 2 * np.pi, 60, endpoint=False),
                 axis=rotation_axis(TILT))
    ratio = np.exp(P.born_ratio([P.Sphere((0.8, 0.0, 0.6), 0.6, 1.35), P.Sphere((-0.5, 0.9, -0.7), 0.5, 1.35)], g))
    folder.mkdir(parents=True, exist_ok=True)
    np.save(folder / "ratio.npy", ratio)
    np.save(folder / "angles.npy", g.angles)
    np.save(folder / "qora.npy", holo.reconstruct(ratio, g, method="plain", oversample=1).index)


def odtbrain(folder: Path):
    import odtbrain as odt

    ratio, angles, qora = (np.load(folder / f) for f in ("ratio.npy", "angles.npy", "qora.npy"))
    for sign in (1, -1):
        for tilt in (TILT, -TILT):
            axis = [0.0, np.cos(tilt), np.sin(tilt)]  # ODTbrain's [x, y, z]
            f = odt.backpropagate_3d_tilted(odt.sinogram_as_rytov(ratio.copy()), sign * angles, res=0.532 / 0.1,
                                            nm=1.333, lD=0, tilted_axis=axis)
            ri = odt.odt_to_ri(f, res=0.532 / 0.1, nm=1.333).real
            print(f"odtbrain angles {'+' if sign > 0 else '-'}qora, tilted_axis z {axis[2]:+.3f}: correlation "
                  f"{np.corrcoef(ri.ravel(), qora.ravel())[0, 1]:.3f}")


if __name__ == "__main__":
    {"simulate": simulate, "odtbrain": odtbrain}[sys.argv[1]](Path(sys.argv[2]))
