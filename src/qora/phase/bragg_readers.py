"""Raw Bragg rocking scans in: their frames and their geometry (:class:`qora.phase.bragg_geometry.BraggGeometry`).

ESRF ID01: one BLISS HDF5 (NeXus) file, each scan a group holding the frames, the positioners and the detector's
calibration (:func:`read_id01`).

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

__all__ = ["DETECTORS_34IDC", "ID01_DETECTORS", "read_tiff_frames", "geometry_34idc", "read_34idc", "read_id01"]

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


ID01_DETECTORS = ("mpxgaas", "mpx1x4", "eiger2M")  # the area detectors an ID01 BLISS scan records


def read_id01(path, scan: int, *, sample: str | None = None, detector: str | None = None):
    """An ESRF ID01 scan from its BLISS HDF5 (NeXus) file: (frames (frames, rows, cols), geometry). The scan is the
    group ``<sample>_<scan>.1`` (the sample's name found when it is the file's only one); in it the frames at
    ``measurement/<detector>``, the circles' positions at ``instrument/positioners/{eta, phi, nu, delta}`` (the
    rocking one an array, one angle a frame), the energy ``mononrj`` (keV) there, and the detector's calibration at
    ``instrument/<detector>/{distance (m), x_pixel_size, y_pixel_size (m), beam_center_x, beam_center_y (pixels:
    the direct beam at zero detector angles)}``."""
    import h5py

    from qora.phase.bragg_geometry import CIRCLES_ID01

    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such BLISS file")
    with h5py.File(path, "r") as f:
        name = _id01_scan_group(f, path, scan, sample)
        group = f[name]
        found = [d for d in ID01_DETECTORS if f"measurement/{d}" in group]
        detector = detector or (found[0] if len(found) == 1 else None)
        if detector is None or f"measurement/{detector}" not in group:
            raise InputError(f"{path}: scan {name} has detectors {found or 'none of ' + ', '.join(ID01_DETECTORS)}; "
                             "give detector=")
        frames = np.asarray(group[f"measurement/{detector}"][()])
        positioners = group["instrument/positioners"]
        missing = [m for m in ("eta", "phi", "nu", "delta", "mononrj") if m not in positioners]
        calibration = group[f"instrument/{detector}"]
        missing += [f"{detector}/{k}" for k in ("distance", "x_pixel_size", "y_pixel_size", "beam_center_x",
                                                 "beam_center_y") if k not in calibration]
        if missing:
            raise InputError(f"{path}: scan {name} does not record {', '.join(missing)}")
        angles = {m: np.atleast_1d(np.asarray(positioners[m][()], np.float64)) for m in ("eta", "phi", "nu", "delta")}
        energy_ev = float(np.asarray(positioners["mononrj"][()]).ravel()[0]) * 1e3
        cal = {k: float(np.asarray(calibration[k][()]).ravel()[0]) for k in calibration.keys()
               if k in ("distance", "x_pixel_size", "y_pixel_size", "beam_center_x", "beam_center_y")}
    if frames.ndim != 3:
        raise FileFormatError(f"{path}: the frames of scan {name} are not a stack of 2D frames ({frames.shape})")
    rocking = [m for m in ("eta", "phi") if len(angles[m]) > 1 and np.ptp(angles[m]) > 0]
    if len(rocking) != 1:
        raise InputError(f"{path}: scan {name} must rock one of eta and phi (rocking: {rocking or 'none'})")
    rock = rocking[0]
    if len(angles[rock]) != len(frames):
        raise InputError(f"{path}: scan {name} has {len(angles[rock])} {rock} positions and {len(frames)} frames")
    values = {m: float(a[0]) for m, a in angles.items()}
    step = float((angles[rock][-1] - angles[rock][0]) / max(len(angles[rock]) - 1, 1))
    geometry = BraggGeometry(CIRCLES_ID01, values, energy_ev, cal["distance"], (cal["y_pixel_size"],
                             cal["x_pixel_size"]), (cal["beam_center_y"], cal["beam_center_x"]), rock, step,
                             notes={"detector": detector, "scan": name})
    return frames, geometry


def _id01_scan_group(f, path, scan: int, sample):
    names = [k for k in f.keys() if k.endswith(f"_{scan}.1")]
    if sample is not None:
        names = [k for k in names if k == f"{sample}_{scan}.1"]
    if len(names) != 1:
        samples = sorted({k.rsplit("_", 1)[0] for k in f.keys() if "_" in k})
        raise InputError(f"{path}: {'no' if not names else 'more than one'} scan {scan} "
                         f"(samples: {', '.join(samples) or 'none'}); give sample=")
    return names[0]
