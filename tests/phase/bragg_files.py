"""Files of a 34-ID-C rocking scan built by the tests: a SPEC file and a folder of TIFF frames."""

import numpy as np

MOTORS = ["Delta", "Theta", "Chi", "Phi", "Mu", "Gamma", "z-sample", "Lab X", "camdist", "Energy"]


def spec_text(scans, names=MOTORS, *, detector="34idcTIM2"):
    """A SPEC file: the file header (#O lines, two spaces between names, five names a line), then ``scans``:
    (number, command, positions (one per name), labels, rows)."""
    chunks = [names[i:i + 5] for i in range(0, len(names), 5)]
    lines = ["#F test.spec", "#E 1580609738"] + [f"#O{i} " + "  ".join(c) for i, c in enumerate(chunks)] + [""]
    for number, command, positions, labels, rows in scans:
        lines += [f"#S {number}  {command}", "#D Tue Feb 04 12:28:23 2020"]
        lines += [f"#P{i} " + " ".join(map(str, positions[5 * i:5 * i + 5])) for i in range(len(chunks))]
        lines += [f"#UIMDET {detector}:", f"#N {len(labels)}", "#L " + "  ".join(labels)]
        lines += [" ".join(repr(float(v)) for v in row) for row in rows] + [""]
    return "\n".join(lines) + "\n"


def rocking_spec(path, *, number=54, frames=5, start=-0.28, step=0.005, angles=None, camdist=500.0, energy=9.0,
                 extra_scan=True):
    """A SPEC file with a theta rocking scan ``number`` of ``frames`` points (and scan 53 before it)."""
    angles = {"Delta": 32.174, "Theta": 0.22, "Chi": 90.0, "Phi": -5.0, "Gamma": 12.6346, **(angles or {})}
    positions = [angles.get(n, 0.0) for n in MOTORS[:8]] + [camdist, energy]
    positions[MOTORS.index("Lab X")] = -0.03
    theta = start + step * np.arange(frames)
    rows = np.stack([theta, np.arange(frames) * 10.0], 1)
    scans = [(number, f"ascan  th {start} {start + step * (frames - 1)}  {frames - 1} 0.25", positions,
              ["Theta", "ImageTot"], rows)]
    if extra_scan:
        scans.insert(0, (number - 1, "ascan  th -1 1  4 0.25", positions, ["Theta", "ImageTot"], rows[:5]))
    path.write_text(spec_text(scans))
    return path


def write_frames(folder, stack, prefix="scan_S0054_"):
    """``stack`` (frames, rows, cols) as numbered TIFF frames in ``folder``."""
    import tifffile

    folder.mkdir(parents=True, exist_ok=True)
    for i, frame in enumerate(stack):
        tifffile.imwrite(folder / f"{prefix}{i:05d}.tif", np.asarray(frame))
    return folder
