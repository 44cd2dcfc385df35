"""cohere's geometry of a 34-ID-C scan (cohere-beamlines' Instrument), for the comparison in docs/phase.md.

Run by an environment with cohere-core, cohere-beamlines, xrayutilities and pandas, never by qora:

    python phase_cohere_geometry.py SPEC_FILE SCAN ROW COL FRAME

Prints one JSON line: cohere's reciprocal steps per array index (Trecip, 1/nm, lab frame: the columns along the
detector's first and second axes and the frame), its direct basis (Tdir, nm) and its Q (kf - ki along the
detector arm, 1/A), at the voxel (ROW, COL, FRAME) of the raw scan.
"""

import importlib
import json
import sys

import numpy as np


def main(spec, scan, row, col, frame):
    instrument = importlib.import_module("cohere_beamlines.aps_34idc.instrument")
    configs = {"config": {"beamline": "aps_34idc", "scan": str(scan)},
               "config_instr": {"diffractometer": "34idc", "specfile": spec},
               "config_data": {"binning": [1, 1, 1]}}
    trecip, tdir, q, _, _ = instrument.create_instr(configs).get_geometry([row, col, frame], scan, configs)
    print(json.dumps({"Trecip_per_nm": np.asarray(trecip).tolist(), "Tdir_nm": np.asarray(tdir).tolist(),
                      "Q_per_A": np.asarray(q).tolist()}))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), *(int(v) for v in sys.argv[3:6]))
