"""Diffraction patterns and masks from CXI/HDF5, NumPy, TIFF and EDF files.

Masks follow the CXI convention: nonzero (True) marks a pixel that was *not*
measured (bad, dead or behind the beamstop). Patterns are in detector layout.

Every reader names the file and what is wrong with it: a missing file is a
``FileNotFoundError``; an empty, truncated or corrupt file, an HDF5 file without
a pattern (the message lists the datasets it holds), an array of the wrong rank
or of no numbers is a :class:`~qora.io.errors.FileFormatError`; a complex array
(a wave, not an intensity) is an :class:`~qora.io.errors.InputError` asking for
``abs(x)**2``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from qora.io.errors import FileFormatError, InputError, MissingExtra, QoraError
from qora.io.validate import numbers_only

__all__ = ["load_pattern", "load_mask", "load_support", "CXI_DATA_PATHS", "CXI_MASK_PATHS", "PATTERN_SUFFIXES"]

CXI_DATA_PATHS = ("entry_1/data_1/data", "entry_1/instrument_1/detector_1/data", "entry_1/image_1/data")
CXI_MASK_PATHS = ("entry_1/instrument_1/detector_1/mask", "entry_1/data_1/mask", "mask")
HDF5_SUFFIXES = (".cxi", ".h5", ".hdf5", ".nxs")
PATTERN_SUFFIXES = HDF5_SUFFIXES + (".npy", ".npz", ".tif", ".tiff", ".edf")


def _datasets(f, limit: int = 12) -> str:
    """The datasets an HDF5 file holds (name and shape), for a message."""
    import h5py

    found = []

    def visit(name, obj):
        if isinstance(obj, h5py.Dataset):
            found.append(f"{name} {obj.shape}")
        return None

    try:
        f.visititems(visit)
    except Exception:  # a damaged group: list what could be read  # noqa: BLE001
        pass
    if not found:
        return "it holds no dataset"
    more = f" and {len(found) - limit} more" if len(found) > limit else ""
    return "it holds " + ", ".join(found[:limit]) + more


def _read_hdf5(path: Path, dataset: str | None, names=None):
    import h5py

    with h5py.File(path, "r") as f:
        names = (dataset,) if dataset else (names or CXI_DATA_PATHS + ("data", "intensity"))
        data = None
        for name in names:
            if name in f and isinstance(f[name], h5py.Dataset):
                data = f[name][()]
                break
        if data is None:
            raise FileFormatError(f"{path}: no pattern found at {', '.join(names)}; {_datasets(f)}")
        mask = None
        for name in CXI_MASK_PATHS:
            if name in f and isinstance(f[name], h5py.Dataset):
                mask = f[name][()]
                _check_numbers(path, mask, f"the mask at {name}")
                mask = mask != 0
                break
    return data, mask


def _check_numbers(path: Path, data, what: str) -> None:
    numbers_only(f"{path}: {what}", np.asarray(data), hint="a pattern is measured intensities: store abs(x)**2",
                 error=FileFormatError)


def load_mask(path) -> np.ndarray:
    """A mask from .npy, TIFF, EDF or HDF5 (first of the CXI mask paths, else a data path):
    True = not measured."""
    path = Path(path)
    data, _ = _load(path, None, mask_file=True)
    _check_numbers(path, data, "the mask")
    return np.asarray(data) != 0


def load_support(path) -> np.ndarray:
    """A support (True inside the object) from .npy, TIFF, EDF or HDF5: booleans, integers
    (nonzero = inside) or floats of only 0 and 1; other floats (a blurred or scaled support) are
    refused rather than thresholded silently."""
    path = Path(path)
    data, _ = _load(path, None)
    data = np.asarray(data)
    _check_numbers(path, data, "the support")
    if np.issubdtype(data.dtype, np.floating) and not np.isin(data, (0.0, 1.0)).all():
        raise InputError(f"{path}: the support must be boolean (or 0 and 1), got {data.dtype} values such as "
                         f"{data[~np.isin(data, (0.0, 1.0))].flat[0]:g}")
    return data != 0


def _load(path: Path, dataset, *, mask_file: bool = False):
    if not path.exists():
        raise FileNotFoundError(f"no such file: {path}")
    if path.is_dir():
        raise FileFormatError(f"{path}: is a folder, not a pattern file")
    suffix = path.suffix.lower()
    if suffix not in PATTERN_SUFFIXES:
        raise FileFormatError(f"{path}: unknown pattern format {suffix!r} (expected .cxi, .h5, .npy, .npz, .tif, "
                              ".edf)")
    if path.stat().st_size == 0:
        raise FileFormatError(f"{path}: the file is empty (0 bytes)")
    _import_reader(suffix)
    try:
        return _load_format(path, suffix, dataset, mask_file)
    except (QoraError, FileNotFoundError, MemoryError):
        raise
    except Exception as exc:  # noqa: BLE001 - a damaged file makes a reader raise anything; name the file
        raise FileFormatError(f"{path}: cannot be read as {suffix} (damaged or truncated?): "
                              f"{type(exc).__name__}: {' '.join(str(exc).split())}") from exc


def _import_reader(suffix: str) -> None:
    if suffix != ".edf":  # h5py and tifffile are dependencies of qora itself
        return
    try:
        import fabio  # noqa: F401
    except ImportError as exc:
        raise MissingExtra("reading .edf files needs fabio: pip install 'qora[formats]'") from exc


_MAGIC = {".npy": (b"\x93NUMPY", "a NumPy .npy file"), ".npz": (b"PK", "an .npz archive (a zip file)")}


def _load_format(path: Path, suffix: str, dataset, mask_file: bool):
    if suffix in HDF5_SUFFIXES:
        import h5py

        if not h5py.is_hdf5(path):
            raise FileFormatError(f"{path}: not an HDF5 file (a {suffix} file is HDF5)")
        names = CXI_MASK_PATHS + CXI_DATA_PATHS + ("data",) if mask_file else None
        return _read_hdf5(path, dataset, names)
    if suffix in _MAGIC:
        magic, what = _MAGIC[suffix]
        with open(path, "rb") as f:
            if f.read(len(magic)) != magic:
                raise FileFormatError(f"{path}: not {what} (it does not start as one)")
    if suffix == ".npy":
        from qora.io.npy import check_npy

        check_npy(path)  # the array its header declares is in the file: nothing allocated on a header's word
        return np.load(path, allow_pickle=False), None
    if suffix == ".npz":
        # our own handle: NumPy leaves its file open when a damaged archive fails to open
        with open(path, "rb") as fh, np.load(fh, allow_pickle=False) as z:
            if not hasattr(z, "files"):
                raise FileFormatError(f"{path}: not an .npz archive")
            key = dataset or next((k for k in ("intensity", "data", "pattern") if k in z.files), None)
            if key is None or key not in z.files:
                wanted = repr(dataset) if dataset else "intensity, data or pattern"
                raise FileFormatError(f"{path}: expected an array named {wanted}; found {z.files}")
            from qora.io.npy import check_npz_member

            for name in (key, "mask"):  # what each member's header declares is in the archive
                if name in z.files:
                    check_npz_member(path, z, name)
            mask = None
            if "mask" in z.files:
                mask = z["mask"]
                _check_numbers(path, mask, "the array 'mask'")
                mask = mask.astype(bool)
            return z[key], mask
    if suffix in (".tif", ".tiff"):
        import tifffile

        return tifffile.imread(path), None
    import fabio

    return fabio.open(str(path)).data, None


def load_pattern(path, *, mask=None, dataset: str | None = None):
    """Read a pattern and its mask; returns ``(intensity float64, mask bool or None)``.

    Parameters
    ----------
    path : str or Path
        .cxi/.h5 (CXI layout: ``entry_1/data_1/data``, mask in
        ``entry_1/instrument_1/detector_1/mask``), .npy, .npz (``intensity`` and
        optional ``mask``), .tif/.tiff or .edf.
    mask : str, Path or array, optional
        A separate mask (file or array); overrides one found in the file.
    dataset : str, optional
        The dataset (HDF5) or array name (npz) holding the pattern.

    Raises
    ------
    FileNotFoundError
        No such file.
    FileFormatError
        The file is empty, truncated, not of its format, holds no pattern (the
        message lists what it holds), or the pattern is not a 2D or 3D array of numbers.
    InputError
        The pattern is complex (pass ``abs(x)**2``) or boolean, or the mask's shape differs.
    """
    path = Path(path)
    data, file_mask = _load(path, dataset)
    data = np.asarray(data)
    _check_numbers(path, data, "the pattern")
    if data.dtype == bool:  # refused here: the float64 returned below would pass any later check
        raise InputError(f"{path}: the pattern is boolean (a mask or a support?): give the measured intensities "
                         "(counts)")
    if data.ndim == 3 and data.shape[0] == 1:
        data = data[0]
    if data.ndim not in (2, 3):
        raise FileFormatError(f"{path}: the pattern has shape {data.shape}; a pattern is a 2D or 3D array "
                              "(or a stack of one 2D frame)")
    if mask is not None:
        if isinstance(mask, (str, Path)):
            mask_name = str(mask)
            file_mask = load_mask(mask)
        else:
            mask_name = "the mask"
            mask = np.asarray(mask)
            if not (np.issubdtype(mask.dtype, np.integer) or mask.dtype == bool):
                raise InputError(f"the mask must be boolean (True = not measured), got dtype {mask.dtype}")
            file_mask = mask.astype(bool)
    else:
        mask_name = f"the mask in {path}"
    if file_mask is not None and file_mask.ndim == 3 and file_mask.shape[0] == 1 and data.ndim == 2:
        file_mask = file_mask[0]
    if file_mask is not None and file_mask.shape != data.shape:
        raise InputError(f"mask shape {file_mask.shape} ({mask_name}) differs from pattern shape {data.shape} "
                         f"({path})")
    return data.astype(np.float64), file_mask
