"""Where the thick fit's C10 bias comes from (issue 23): the same 120 A slab geometry as the tests'
``_slab_fit``, once columnar (one layer repeated in 12 slices) and once amorphous (12 independent
slices), each without and with a tilt. Prints, per case, the standard fit's C10 and agreement, the
columnar thick fit's parameters and agreement, and the depth-incoherent fit's (qora.ssb.depth: its
sections one per depth of field, started from the columnar fit) with its depth coherence; the
truth is C10 = -100 A at the mid-plane.

    PYTHONPATH=src python bench/probes/thick_bias_probe.py     # about 6 minutes on two cores
"""

from __future__ import annotations

import time

import numpy as np

from qora.ssb import Aberrations, Band, Session, amorphous_slices, defocus_search, newton, simulate
from qora.ssb.depth import fit_incoherent

PIXEL, KV, ALPHA, TRUTH_C10, THICKNESS = 0.25, 300.0, 25.0, -100.0, 120.0


def fit(slices, tilt):
    scan = simulate(slices, pixel=PIXEL, stride=2, window=48, alpha_mrad=ALPHA,
                    aberrations=Aberrations(C10=TRUTH_C10), thickness=THICKNESS, tilt=tilt)
    session = Session(scan.data, kv=KV, alpha_mrad=ALPHA, scan_step=scan.scan_step)
    standard = Band(session, ("C10",))
    c10, _ = defocus_search(standard)
    std_values, std_agreement, _ = newton(standard, {"C10": c10})
    thick = Band(session, ("C10", "thickness", "tilt_y", "tilt_x"))
    values, agreement, _ = newton(thick, {"C10": std_values["C10"], "thickness": 60.0, "tilt_y": 0.0,
                                          "tilt_x": 0.0}, iterations=60)
    inc, inc_agreement, _, band, coherence = fit_incoherent(session, {"C10": values["C10"],
                                                                       "thickness": values["thickness"]})
    return std_values["C10"], std_agreement, values, agreement, (inc, inc_agreement, band.sections, coherence)


def main() -> None:
    t0 = time.time()
    layer = amorphous_slices((96, 96), PIXEL, atoms_per_a2=0.02, phase_per_atom=0.02, seed=6)[0]
    cases = {"columnar": np.repeat(layer[None], 12, axis=0),
             "amorphous": amorphous_slices((96, 96), PIXEL, slices=12, atoms_per_a2=0.02, seed=5)}
    for name, slices in cases.items():
        for tilt in ((0.0, 0.0), (0.008, -0.005)):
            std_c10, std_agreement, values, agreement, (inc, inc_agreement, sections, coherence) = fit(slices, tilt)
            print(f"{name:9s} tilt {tilt}: standard C10 {std_c10:.1f} A ({std_agreement:.3f}); thick C10 "
                  f"{values['C10']:.1f} A, t {values['thickness']:.1f} A, tilt ({values['tilt_y'] * 1e3:.2f}, "
                  f"{values['tilt_x'] * 1e3:.2f}) mrad ({agreement:.3f}); incoherent ({sections} sections) C10 "
                  f"{inc['C10']:.1f} A, t {inc['thickness']:.1f} A ({inc_agreement:.3f}), depth coherence "
                  f"{coherence:.2f}; {time.time() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
