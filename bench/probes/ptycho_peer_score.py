"""Score py4DSTEM's multislice result (``src/qora/bench/peers/ssb_py4dstem_multislice.py``'s OUT.npz) on its abTEM
set as ``qora bench ssb-ptycho`` scores Qora's: the summed phase on the three bands and, for a set with depth
groups, each group of slices against each group's truth.

    .venv/bin/python bench/probes/ptycho_peer_score.py FIXTURE.npz PEER_OUT.npz

Its slices' depths are taken as py4DSTEM's equal slices over the set's true thickness (it was given it). Prints one
JSON line.
"""

import json
import sys

import numpy as np

from qora.bench.ssb_ptycho import depth_scores, score
from qora.ssb import wavelength
from qora.ssb.ptycho import Grid, PtychoResult


def main(fixture: str, peer: str) -> None:
    data, out = np.load(fixture), np.load(peer)
    sampling = np.asarray(out["sampling"], float)
    if not np.isclose(sampling[0], sampling[1]):
        raise SystemExit(f"non-square object pixels {sampling}: the score assumes square ones")
    kv, alpha = float(data["kv"]), float(data["alpha_mrad"])
    lam = wavelength(kv)
    slices = out["slice_phases"] if "slice_phases" in out.files else out["phase"][None]
    grid = Grid(window=2, pixel=float(sampling[0]), wavelength=lam, slice_spacing=1.0)
    result = PtychoResult(objects=np.exp(1j * slices), probe=np.zeros((1, 2, 2)), positions=out["positions_px"],
                          start_positions=out["positions_px"], losses=[], grid=grid, scan_map=out["scan_map"])
    bands = {"2alpha": 2 * alpha * 1e-3 / lam, "grid": 0.5 / float(sampling[0]),
             "alpha+detector": (alpha + float(data["collection_half_angle_mrad"])) * 1e-3 / lam}
    noise = np.random.default_rng(0).random(data["counts"].shape[:2])  # no WDD here: its column is not used
    report = {"summed": {b: v[0] for b, v in score(result, noise,
                                                     data, bands).items()}}
    if "phase_by_depth" in data.files:
        report["depth"] = depth_scores(result, noise, data, bands["2alpha"])["ptycho"]
    print(json.dumps(report))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
