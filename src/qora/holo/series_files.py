"""Complex-field series on disk: qpimage HDF5, phase/amplitude TIFF, the ODTbrain example archives, angles.

A rotation series measured by a QLSI camera or processed by a DHM's software comes as phase and
amplitude images, one per angle, not as holograms. Each reader returns a :class:`FieldSeries`: the
field ratios u / u_in = amplitude exp(i phase) (A, M, N), dimensionless, and what the file says of
the optics, converted to um.

- qpimage / qpformat HDF5 (:func:`read_qpimage_series`): groups ``qpi_0``, ``qpi_1``, ... each with
  ``phase/raw`` and ``amplitude/raw`` and optional backgrounds under ``phase/bg_data`` (subtracted)
  and ``amplitude/bg_data`` (divided out), as qpimage applies them; metadata in SI units on each
  group (``wavelength`` m, ``pixel size`` m, ``medium index``, ``angle`` rad). A single qpimage file
  (one image, the groups ``phase`` and ``amplitude`` at the top) reads as a series of one.
- TIFF (:func:`read_phase_amplitude`): a multi-page phase TIFF (rad), or a folder of one-page TIFFs
  taken in name order, with an optional amplitude (a ratio to the background) of the same layout.
- ODTbrain's example archives (:func:`read_odtbrain_archive`, ``.tar.lzma`` / ``.tar.xz`` / ``.tar``
  / ``.zip``): the FDTD layout (``fdtd_info.txt`` of ``key = value`` lines; ``field*real.txt`` and
  ``field*imag.txt`` per angle, in name order; ``phantom*.txt`` index slices), the Mie layout
  (``*real.txt``, ``*imag.txt`` and ``*info.txt`` of one field) and the QLSI layout (``series.h5``,
  a qpimage series, with ``angles.txt``). Their lengths are in vacuum wavelengths: ``res`` is the
  wavelength in pixels, so the pixel is ``wavelength / res`` for the ``wavelength`` you give (um), and
  ``lD`` is the detector plane's distance from the rotation axis (``detector_distance`` = lD x
  wavelength um, which the fields must be propagated back by).
  The FDTD archives hold 2 pi evenly spaced angles (ODTbrain's examples make them so).
- angles (:func:`read_angles`): a text file of numbers (one per line, or separated by spaces or
  commas), in radians or degrees.
"""

from __future__ import annotations

import io
import lzma
import re
import tarfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from qora.io.errors import FileFormatError, InputError, naming_file

__all__ = ["FieldSeries", "read_qpimage_series", "read_phase_amplitude", "read_odtbrain_archive", "read_angles",
           "read_field_series", "is_qpimage_file"]


@dataclass
class FieldSeries:
    """Field ratios (A, M, N) complex, and what their file records (None where it does not).

    ``angles`` (A,) rad; ``wavelength`` (vacuum) and ``pixel`` um; ``medium_index`` dimensionless;
    ``phantom`` a refractive-index volume where the file holds the simulation's truth; ``info`` the
    file's own parameters as they are; ``detector_distance`` (um, along the light) where the fields were
    recorded from the rotation axis, 0 for fields in the axis's plane: refocus by minus it."""

    fields: np.ndarray
    angles: np.ndarray | None = None
    wavelength: float | None = None
    pixel: float | None = None
    medium_index: float | None = None
    phantom: np.ndarray | None = None
    info: dict = field(default_factory=dict)
    detector_distance: float = 0.0


def _optics_from_si(meta: dict) -> dict:
    """qpimage's SI metadata as um and a dimensionless index (missing keys: None)."""
    def get(key, scale=1.0):
        return float(np.asarray(meta[key]).item()) * scale if key in meta else None
    return {"wavelength": get("wavelength", 1e6), "pixel": get("pixel size", 1e6), "medium_index": get("medium index")}


def is_qpimage_file(path) -> bool:
    """Whether ``path`` is an HDF5 file in qpimage's layout (a series or one image)."""
    import h5py

    try:
        with h5py.File(path, "r") as f:
            return "qpi_0" in f or ("phase" in f and "amplitude" in f and "raw" in f["phase"])
    except OSError:
        return False


def _qpimage_group(g, path, name: str):
    """(phase, amplitude) of one qpimage group, its backgrounds applied."""
    out = []
    for key, apply in (("phase", np.subtract), ("amplitude", np.divide)):
        if key not in g or "raw" not in g[key]:
            raise FileFormatError(f"{path}: {name} has no {key}/raw dataset (not a qpimage file?)")
        data = np.asarray(g[key]["raw"][()], float)
        if "bg_data" in g[key]:
            for bg in g[key]["bg_data"].values():
                data = apply(data, np.asarray(bg[()], float))
        out.append(data)
    return out


def read_qpimage_series(path) -> FieldSeries:
    """A qpimage series (or single image) file as a :class:`FieldSeries` (angles from each image's
    ``angle`` metadata where every one has it)."""
    import h5py

    with naming_file(path), h5py.File(path, "r") as f:
        names = sorted((k for k in f if k.startswith("qpi_")), key=lambda k: int(k.split("_")[1]))
        groups = [(k, f[k]) for k in names] if names else [("the file", f)]
        if not names and "phase" not in f:
            raise FileFormatError(f"{path}: no qpi_0, qpi_1, ... groups and no phase dataset: not a qpimage file")
        fields, angles, meta = [], [], dict(groups[0][1].attrs)
        for name, g in groups:
            phase, amplitude = _qpimage_group(g, path, name)
            if fields and phase.shape != fields[0].shape:
                raise FileFormatError(f"{path}: {name} is {phase.shape}, the first image {fields[0].shape}")
            fields.append(amplitude * np.exp(1j * phase))
            angles.append(float(g.attrs["angle"]) if "angle" in g.attrs else None)
    return FieldSeries(np.stack(fields), angles=None if None in angles else np.array(angles),
                       info={k: (v.item() if hasattr(v, "item") else v) for k, v in meta.items()},
                       **_optics_from_si(meta))


def _tiff_stack(path) -> np.ndarray:
    import tifffile

    path = Path(path)
    with naming_file(path):
        if path.is_dir():
            files = sorted(p for p in path.iterdir() if p.suffix.lower() in (".tif", ".tiff"))
            if not files:
                raise FileFormatError(f"{path}: a folder with no .tif files")
            images = [tifffile.imread(p) for p in files]
            shapes = {im.shape for im in images}
            if len(shapes) != 1:
                raise FileFormatError(f"{path}: its TIFF files differ in shape ({sorted(shapes)})")
            data = np.stack(images)
        else:
            data = tifffile.imread(path)
    data = np.asarray(data)
    if data.dtype.kind not in "biuf" or data.ndim not in (2, 3):
        raise FileFormatError(f"{path}: expected real images (A, M, N) or one (M, N), got {data.dtype} {data.shape}")
    return np.asarray(data[None] if data.ndim == 2 else data, float)


def _real_stack(path) -> np.ndarray:
    """Phase or amplitude images (A, M, N) from TIFF (a file or a folder), .npy or .npz."""
    path = Path(path)
    if path.is_dir() or path.suffix.lower() in (".tif", ".tiff"):
        return _tiff_stack(path)
    from qora.holo.files import load_stack

    data = load_stack(path)
    return data[None] if data.ndim == 2 else data


def read_phase_amplitude(phase, amplitude=None) -> FieldSeries:
    """Field ratios from phase images (rad) and optional amplitudes (ratio to the background; default 1),
    each a multi-page TIFF, a folder of TIFFs (name order), .npy or .npz, of one shape (A, M, N)."""
    p = _real_stack(phase)
    a = np.ones_like(p) if amplitude is None else _real_stack(amplitude)
    if a.shape != p.shape:
        raise InputError(f"the amplitude {a.shape} and phase {p.shape} images differ in shape")
    if np.any(~np.isfinite(p)) or np.any(~np.isfinite(a)):
        raise InputError("the phase or amplitude images hold NaN or Inf values")
    if np.any(a <= 0):
        raise InputError("the amplitude images must be positive (a ratio to the background), found values <= 0")
    return FieldSeries(a * np.exp(1j * p))


def _info(text: bytes) -> dict:
    """``key = value`` lines as floats (other lines skipped)."""
    out = {}
    for line in text.decode(errors="replace").splitlines():
        if line.count("=") == 1:
            key, value = (s.strip() for s in line.split("="))
            try:
                out[key] = float(value)
            except ValueError:
                out[key] = value
    return out


def _members(path: Path) -> dict:
    """name -> bytes of every file in an archive (.tar.lzma, .tar.xz, .tar or .zip); a damaged one is a
    FileFormatError naming it."""
    try:
        return _archive(path)
    except (zipfile.BadZipFile, tarfile.TarError, lzma.LZMAError, EOFError) as exc:
        raise FileFormatError(f"{path}: not a readable archive ({exc})") from exc


def _archive(path: Path) -> dict:
    name = path.name.lower()
    if name.endswith(".zip"):
        with zipfile.ZipFile(path) as z:
            return {m: z.read(m) for m in z.namelist() if not m.endswith("/")}
    raw = path.read_bytes()
    if name.endswith((".lzma", ".xz")):
        raw = lzma.decompress(raw)
    elif not name.endswith(".tar"):
        raise FileFormatError(f"{path}: expected an ODTbrain example archive (.tar.lzma, .tar.xz, .tar or .zip)")
    with tarfile.open(fileobj=io.BytesIO(raw)) as t:
        return {m.name: t.extractfile(m).read() for m in t.getmembers() if m.isfile()}


def _numbered(name: str) -> tuple:
    """Sort key: the numbers in a name compared as numbers (field_9 before field_10)."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))


def _text_array(data: bytes) -> np.ndarray:
    return np.loadtxt(io.BytesIO(data), ndmin=2)


def read_odtbrain_archive(path, *, wavelength: float | None = None) -> FieldSeries:
    """One of ODTbrain's example archives (FDTD, Mie or QLSI layout, see the module) as a
    :class:`FieldSeries`. With the vacuum ``wavelength`` (um) the pixel is ``wavelength / res``."""
    path = Path(path)
    with naming_file(path):
        members = _members(path)
        base = {Path(k).name: v for k, v in members.items()}
        if "series.h5" in base:  # QLSI: a qpimage series and its angles
            import tempfile

            with tempfile.TemporaryDirectory() as tmp:
                h5 = Path(tmp) / "series.h5"
                h5.write_bytes(base["series.h5"])
                series = read_qpimage_series(h5)
            if "angles.txt" in base:
                series.angles = read_angles(io.BytesIO(base["angles.txt"]))
            return series
        info_name = next((k for k in sorted(base) if k.endswith("info.txt")), None)
        info = _info(base[info_name]) if info_name else {}
        # the phantom's slices are "phantom_NNN_real.txt" in the FDTD archives: not fields
        fields_only = [k for k in base if not k.startswith("phantom")]
        real = sorted((k for k in fields_only if k.endswith("real.txt")), key=_numbered)
        imag = sorted((k for k in fields_only if k.endswith("imag.txt")), key=_numbered)
        if not real or len(real) != len(imag):
            raise FileFormatError(f"{path}: expected pairs of *real.txt and *imag.txt fields, found {len(real)} and "
                                  f"{len(imag)}")
        fields = np.stack([_text_array(base[r]) + 1j * _text_array(base[i]) for r, i in zip(real, imag)])
        phantom_names = sorted((k for k in base if k.startswith("phantom")), key=_numbered)
        phantom = np.stack([_text_array(base[k]) for k in phantom_names]) if phantom_names else None
    angles = np.linspace(0, 2 * np.pi, len(fields), endpoint=False) if len(fields) > 1 else None
    pixel, distance = None, 0.0
    if wavelength is not None and "res" in info:
        pixel = float(wavelength) / float(info["res"])
    if info.get("lD"):  # the detector plane, in vacuum wavelengths from the rotation axis
        if wavelength is None:
            raise InputError(f"{path}: its fields lie lD = {info['lD']:g} wavelengths from the rotation axis; give "
                             "the vacuum wavelength (um) to place them")
        distance = float(info["lD"]) * float(wavelength)
    return FieldSeries(fields, angles=angles, wavelength=wavelength, pixel=pixel, medium_index=info.get("nm"),
                       phantom=phantom, info=info, detector_distance=distance)


def read_angles(source, *, unit: str = "rad") -> np.ndarray:
    """Angles (rad) from a text file (a path or an open binary file) of numbers, one per line or separated by
    spaces or commas (lines starting with # skipped), in ``unit`` "rad" or "deg"."""
    if unit not in ("rad", "deg"):
        raise InputError(f"the angles' unit must be 'rad' or 'deg', got {unit!r}")
    name = getattr(source, "name", None) or str(source)
    with naming_file(name):
        text = source.read() if hasattr(source, "read") else Path(source).read_bytes()
        tokens = [t for line in text.decode().splitlines() if not line.strip().startswith("#")
                  for t in line.replace(",", " ").split()]
        try:
            angles = np.array([float(t) for t in tokens])
        except ValueError as exc:
            raise FileFormatError(f"{name}: not a list of numbers ({exc})") from None
    if angles.size == 0 or not np.all(np.isfinite(angles)):
        raise FileFormatError(f"{name}: no angles, or non-finite ones")
    return np.deg2rad(angles) if unit == "deg" else angles


def read_field_series(path, *, amplitude=None, wavelength: float | None = None, phase_ok: bool = True) -> FieldSeries:
    """A field series from any of the formats above, by its name: an ODTbrain archive, a qpimage HDF5
    file, complex .npy/.npz (field ratios), or phase images (TIFF, a folder, real .npy/.npz) with the
    optional ``amplitude`` (refused with ``phase_ok`` False: a file that should hold complex fields)."""
    path = Path(path)
    name = path.name.lower()
    if not path.exists():
        raise FileNotFoundError(f"no such file: {path}")
    if name.endswith((".tar.lzma", ".tar.xz", ".tar", ".zip")):
        return read_odtbrain_archive(path, wavelength=wavelength)
    if name.endswith((".h5", ".hdf5")) and is_qpimage_file(path):
        return read_qpimage_series(path)
    if name.endswith((".npy", ".npz")) and amplitude is None:
        with naming_file(path), open(path, "rb") as fh:
            data = np.load(fh)
            data = data[data.files[0]] if hasattr(data, "files") else data
        if np.iscomplexobj(data):
            data = np.asarray(data, np.complex128)
            return FieldSeries(data[None] if data.ndim == 2 else data)
    if not phase_ok:
        raise InputError(f"{path}: holds no complex fields (phase images go with their amplitudes as phase and "
                         "amplitude input)")
    return read_phase_amplitude(path, amplitude)
