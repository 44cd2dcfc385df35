"""Diffraction patterns and masks from CXI/HDF5, NumPy, TIFF and EDF files.

Masks follow the CXI convention: nonzero (True) marks a pixel that was *not*
measured (bad, dead or behind the beamstop). Patterns are in detector layout.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from qora.io.errors import naming_file

__all__ = ["load_pattern", "load_mask", "CXI_DATA_PATHS", "CXI_MASK_PATHS"]

CXI_DATA_PATHS = ("entry_1/data_1/data", "entry_1/instrument_1/detector_1/data", "entry_1/image_1/data")
CXI_MASK_PATHS = ("entry_1/instrument_1/detector_1/mask", "entry_1/data_1/mask", "mask")


def _read_hdf5(path: Path, dataset: str | None):
    import h5py

    with h5py.File(path, "r") as f:
        names = (dataset,) if dataset else CXI_DATA_PATHS + ("data", "intensity")
        data = None
        for name in names:
            if name in f and isinstance(f[name], h5py.Dataset):
                data = f[name][()]
                break
        if data is None:
            raise ValueError(f"{path}: no pattern found at {', '.join(names)}")
        mask = None
        for name in CXI_MASK_PATHS:
            if name in f and isinstance(f[name], h5py.Dataset):
                mask = f[name][()] != 0
                break
    return data, mask


def load_mask(path) -> np.ndarray:
    """A mask from .npy, TIFF, EDF or HDF5 (first of the CXI mask paths): True = not measured."""
    data, _ = _load(Path(path), None)
    return np.asarray(data) != 0


def _load(path: Path, dataset):
    if not path.exists():
        raise FileNotFoundError(f"no such file: {path}")
    with naming_file(path):
        return _load_format(path, dataset)


def _load_format(path: Path, dataset):
    suffix = path.suffix.lower()
    if suffix in (".cxi", ".h5", ".hdf5", ".nxs"):
        return _read_hdf5(path, dataset)
    if suffix == ".npy":
        return np.load(path), None
    if suffix == ".npz":
        with np.load(path) as z:
            key = dataset or next((k for k in ("intensity", "data", "pattern") if k in z.files), None)
            if key is None:
                raise ValueError(f"{path}: expected an array named intensity, data or pattern; found {z.files}")
            mask = z["mask"].astype(bool) if "mask" in z.files else None
            return z[key], mask
    if suffix in (".tif", ".tiff"):
        import tifffile

        return tifffile.imread(path), None
    if suffix == ".edf":
        import fabio

        return fabio.open(str(path)).data, None
    raise ValueError(f"{path}: unknown pattern format {suffix!r} (expected .cxi, .h5, .npy, .npz, .tif, .edf)")


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
    """
    data, file_mask = _load(Path(path), dataset)
    data = np.asarray(data)
    if data.ndim == 3 and data.shape[0] == 1:
        data = data[0]
    if mask is not None:
        file_mask = load_mask(mask) if isinstance(mask, (str, Path)) else np.asarray(mask, bool)
    if file_mask is not None and file_mask.ndim == 3 and file_mask.shape[0] == 1 and data.ndim == 2:
        file_mask = file_mask[0]
    if file_mask is not None and file_mask.shape != data.shape:
        raise ValueError(f"mask shape {file_mask.shape} differs from pattern shape {data.shape}")
    return data.astype(np.float64), file_mask
