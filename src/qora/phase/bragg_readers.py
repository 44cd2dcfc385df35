"""Raw Bragg rocking scans in: their frames and their geometry (:class:`qora.phase.bragg_geometry.BraggGeometry`).

APS 34-ID-C: one TIFF frame per rocking step in a scan's folder (names ending in the frame's number), the scan's
motors in the beamline's SPEC file. Read from the SPEC scan: the energy ("Energy", keV), the sample-detector
distance ("camdist", mm), the circles (Theta, Chi, Phi, Delta, Gamma), the scanned motor and the detector
("#UIMDET": 34idcTIM1 or 34idcTIM2, 55 um Timepix pixels). The rocking circle's angle at each frame is the scan's
own column of it where the scan records one (the measured positions), else the command's start and step.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from qora.io.errors import FileFormatError, InputError
from qora.phase.bragg_geometry import CIRCLES_34IDC, BraggGeometry
from qora.phase.spec import read_spec_scan

__all__ = ["DETECTORS_34IDC", "read_tiff_frames", "geometry_34idc", "read_34idc"]

# detector: (pixel pitch along rows and columns (m), full size (rows, cols)); the direct beam's pixel at zero
# detector angles is taken as the full detector's centre
DETECTORS_34IDC = {"34idcTIM1": ((55e-6, 55e-6), (256, 256)), "34idcTIM2": ((55e-6, 55e-6), (512, 512))}
_MOTORS_34IDC = {"th": "Theta", "chi": "Chi", "phi": "Phi"}  # SPEC mnemonic -> circle


def read_tiff_frames(folder) -> np.ndarray:
    """The TIFF frames of a scan's folder, ordered by the number that ends each name: (frames, rows, cols)."""
    import tifffile

    folder = Path(folder)
    if not folder.is_dir():
        raise InputError(f"{folder}: no such folder of frames")
    numbered = []
    for path in folder.iterdir():
        found = re.search(r"(\d+)$", path.stem) if path.suffix.lower() in (".tif", ".tiff") else None
        if found:
            numbered.append((int(found.group(1)), path))
    if not numbered:
        raise InputError(f"{folder}: no TIFF frames whose names end in a number")
    numbered.sort()
    numbers = [n for n, _ in numbered]
    if len(set(numbers)) != len(numbers):
        raise FileFormatError(f"{folder}: two frames share a number")
    frames = [tifffile.imread(p) for _, p in numbered]
    shapes = {f.shape for f in frames}
    if len(shapes) != 1 or len(next(iter(shapes))) != 2:
        raise FileFormatError(f"{folder}: the frames are not all 2D of one shape ({sorted(shapes)})")
    return np.stack(frames)


def geometry_34idc(spec_path, scan: int, *, frames: int, roi=(0, 0), detector: str | None = None,
                   centre=None) -> BraggGeometry:
    """The geometry of 34-ID-C scan ``scan`` from its SPEC file, for ``frames`` frames cut from the detector at
    ``roi`` (the frames' first row and column on the detector); ``centre`` (row, col on the detector) the direct
    beam's pixel at zero detector angles (default the detector's centre); ``detector`` overrides the file's."""
    spec = read_spec_scan(spec_path, scan)
    name = detector or spec.headers.get("UIMDET", "").rstrip(":").strip()
    if name not in DETECTORS_34IDC:
        raise InputError(f"scan {scan}: detector {name or '(none recorded)'!r} is not one of "
                         f"{', '.join(DETECTORS_34IDC)}; give detector=")
    pixel, size = DETECTORS_34IDC[name]
    mnemonic = spec.scan_motor
    if mnemonic not in _MOTORS_34IDC:
        raise InputError(f"scan {scan} scans {mnemonic!r}; a rocking scan turns one of "
                         f"{', '.join(_MOTORS_34IDC)} (th, chi, phi)")
    rocking = _MOTORS_34IDC[mnemonic]
    angles = {circle: spec.motor(circle) for circle in CIRCLES_34IDC.sample_names + CIRCLES_34IDC.detector_names}
    first, step = _rocking_positions(spec, rocking, frames)
    angles[rocking] = first
    energy = spec.motor("Energy")
    energy_ev = energy * 1e3 if energy < 1e3 else energy  # SPEC at 34-ID-C records keV
    centre = (size[0] / 2, size[1] / 2) if centre is None else tuple(float(c) for c in centre)
    return BraggGeometry(CIRCLES_34IDC, angles, energy_ev, spec.motor("camdist") * 1e-3, pixel,
                         (centre[0] - roi[0], centre[1] - roi[1]), rocking, step,
                         notes={"detector": name, "scan": scan, "command": spec.command, **({"spec": spec.notes}
                                                                                          if spec.notes else {})})


def _rocking_positions(spec, rocking: str, frames: int) -> tuple:
    """(the first frame's angle, the mean step) (degrees): from the scan's column of the rocking circle when it has
    one, else from its command; the frames must match the scan's points."""
    column = spec.columns.get(rocking)
    if column is not None:
        if len(column) != frames:
            raise InputError(f"scan {spec.number} has {len(column)} points and the folder {frames} frames")
        return float(column[0]), float((column[-1] - column[0]) / max(len(column) - 1, 1))
    start, stop, intervals = spec.scan_range()
    if intervals + 1 != frames:
        raise InputError(f"scan {spec.number} has {intervals + 1} points and the folder {frames} frames")
    return start, (stop - start) / intervals


def read_34idc(folder, spec_path, scan: int, **geometry):
    """A 34-ID-C scan: its frames (frames, rows, cols) and their geometry (:func:`geometry_34idc`'s options)."""
    frames = read_tiff_frames(folder)
    return frames, geometry_34idc(spec_path, scan, frames=len(frames), **geometry)
