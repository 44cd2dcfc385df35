"""Hologram stacks and index volumes on disk, and their figures.

Hologram file (HDF5, ``qora_kind = "holo_holograms"``): ``holograms`` (A, N, N),
``backgrounds`` (A, N, N), ``illuminations`` (A, 2) in cycles/um, ``angles`` (A,) in
radians for the rotation geometry, optional ``truth``
(the simulated index volume); attributes ``wavelength_um``, ``medium_index``,
``pixel_um`` (field and volume pixel), ``hologram_pixel_um``, ``na_detection``, ``n``.

Volume file (HDF5, ``qora_kind = "holo_volume"``): ``index`` (z, y, x) float32,
centre-origin, with its voxel size in um as ``element_size_um`` (z, y, x) on the dataset and
``voxel_size_um`` on the file, and the same geometry attributes plus ``method``, ``approximation``,
``iterations``. TIFF volumes carry the pixel size as ImageJ spacing (um).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from qora import __version__
from qora.holo.geometry import Geometry
from qora.io.atomic import atomic_path, hdf5_output
from qora.io.errors import FileFormatError, InputError, naming_file
from qora.io.validate import positive

__all__ = ["write_holograms", "read_holograms", "write_volume", "read_volume", "write_volume_tiff",
           "load_stack", "backgrounds_for", "plot_volume", "plot_phase"]

UNITS = "refractive index; lengths in um; frequencies in cycles/um"


def _geometry_attrs(obj, geometry: Geometry) -> None:
    obj.attrs["qora_version"] = __version__
    obj.attrs["units"] = UNITS
    obj.attrs["wavelength_um"] = geometry.wavelength
    obj.attrs["medium_index"] = geometry.medium_index
    obj.attrs["pixel_um"] = geometry.pixel
    obj.attrs["na_detection"] = geometry.na_detection
    obj.attrs["n"] = geometry.n
    obj.attrs["geometry"] = geometry.geometry
    if geometry.angles is not None:  # the pose of the rotation: axis (z, y, x) and sense (Geometry's)
        obj.attrs["rotation_axis_zyx"] = np.asarray(geometry.axis, float)
        obj.attrs["rotation_sense"] = geometry.rotation_sense


_GEOMETRY_ATTRS = (("wavelength_um", float), ("medium_index", float), ("pixel_um", float), ("n", int),
                   ("na_detection", float))


def _geometry_from(f, path="") -> Geometry:
    """The geometry recorded in an open file; a missing or invalid record is a FileFormatError naming it."""
    a = f.attrs
    missing = [k for k, _ in _GEOMETRY_ATTRS if k not in a]
    what = "angles" if "angles" in f else "illuminations"
    if what not in f:
        missing.append(f"dataset {what}")
    if missing:
        raise FileFormatError(f"{path}: the geometry record is incomplete (missing {', '.join(missing)})")
    try:
        values = [kind(np.asarray(a[k]).item()) for k, kind in _GEOMETRY_ATTRS]
        ill = f[what][()]
        pose = {}
        if what == "angles":  # files written before the tilted axis have neither: the y axis, sense +1
            if "rotation_axis_zyx" in a:
                pose["axis"] = tuple(np.asarray(a["rotation_axis_zyx"], float).reshape(-1))
            if "rotation_sense" in a:
                pose["rotation_sense"] = int(np.asarray(a["rotation_sense"]).item())
        return Geometry(*values, **{what: ill}, **pose)
    except (TypeError, ValueError, InputError) as exc:
        raise FileFormatError(f"{path}: invalid geometry record ({exc})") from exc


def _dataset(f, name: str, path, *, ndim) -> np.ndarray:
    """A real dataset of the file as float64 (FileFormatError naming the file if absent, complex, not numbers or
    of another number of dimensions)."""
    if name not in f or not hasattr(f[name], "shape"):
        raise FileFormatError(f"{path}: no dataset {name!r} (a qora hologram file holds holograms and backgrounds)")
    d = f[name]
    if d.dtype.kind not in "biuf":
        raise FileFormatError(f"{path}: dataset {name!r} must hold real intensities, got dtype {d.dtype}")
    if d.ndim not in ndim:
        raise FileFormatError(f"{path}: dataset {name!r} has shape {d.shape}, expected {' or '.join(f'{k}D' for k in ndim)}")
    return d[()].astype(np.float64)


def write_holograms(path, holograms, backgrounds, geometry: Geometry, *, hologram_pixel: float, truth=None) -> None:
    """Write a simulated or measured hologram stack with its backgrounds and geometry, atomically.

    ``holograms`` (A, N, N) or (T, A, N, N) and ``backgrounds`` (A, N, N), intensities (any linear scale);
    ``hologram_pixel`` in um; ``truth`` an optional refractive-index volume (dimensionless).
    """
    with hdf5_output(path) as f:
        f.attrs["qora_kind"] = "holo_holograms"
        _geometry_attrs(f, geometry)
        f.attrs["hologram_pixel_um"] = hologram_pixel
        f.create_dataset("holograms", data=np.asarray(holograms, np.float32), compression="gzip")
        f.create_dataset("backgrounds", data=np.asarray(backgrounds, np.float32), compression="gzip")
        f.create_dataset("illuminations", data=geometry.illuminations)
        if geometry.angles is not None:
            f.create_dataset("angles", data=geometry.angles)
        if truth is not None:
            f.create_dataset("truth", data=np.asarray(truth, np.float32), compression="gzip")


def read_holograms(path):
    """``(holograms, backgrounds, geometry, hologram_pixel, truth or None)`` from :func:`write_holograms`.

    Holograms (A, N, N) or (T, A, N, N) and backgrounds (A, N, N), intensities; ``hologram_pixel`` in um;
    the geometry's lengths
    in um; ``truth`` a refractive-index volume (dimensionless).

    A file that is not one (empty, truncated, another kind, a dataset or attribute missing, shapes
    that disagree with the recorded geometry) is a :class:`~qora.io.errors.FileFormatError` naming it.
    """
    import h5py

    with naming_file(path), h5py.File(path, "r") as f:
        if f.attrs.get("qora_kind") != "holo_holograms":
            raise FileFormatError(f"{path}: not a qora hologram file (qora_kind={f.attrs.get('qora_kind')!r}); "
                                  "for plain stacks give HOLOS and BACKGROUNDS and the geometry")
        holos = _dataset(f, "holograms", path, ndim=(3, 4))
        bgs = _dataset(f, "backgrounds", path, ndim=(3,))
        g = _geometry_from(f, path)
        if "hologram_pixel_um" not in f.attrs:
            raise FileFormatError(f"{path}: the geometry record is incomplete (missing hologram_pixel_um)")
        try:
            hp = positive("hologram_pixel_um", np.asarray(f.attrs["hologram_pixel_um"]).item())
        except (TypeError, ValueError) as exc:
            raise FileFormatError(f"{path}: invalid geometry record ({exc})") from exc
        if holos.shape[-3:] != bgs.shape or bgs.shape[0] != g.count or bgs.shape[1] != bgs.shape[2]:
            raise FileFormatError(f"{path}: holograms {holos.shape} and backgrounds {bgs.shape} do not match the "
                                  f"recorded geometry ({g.count} illuminations, square holograms)")
        truth = f["truth"][()] if "truth" in f else None
        return holos, bgs, g, hp, truth


def backgrounds_for(stack: np.ndarray, backgrounds: np.ndarray, *, rotation: bool) -> np.ndarray:
    """The backgrounds of a hologram ``stack`` (A, N, N) or series (T, A, N, N): as given, or, in the rotation
    geometry (the specimen turns in a fixed beam), one background (N, N) or (1, N, N) repeated for every angle."""
    one = backgrounds.shape in (stack.shape[-2:], (1,) + stack.shape[-2:])
    if rotation and stack.ndim in (3, 4) and one:
        return np.repeat(backgrounds.reshape((1,) + stack.shape[-2:]), stack.shape[-3], axis=0)
    return backgrounds


def load_stack(path, *, dtype=np.float64) -> np.ndarray:
    """A hologram stack (A, N, N) or one hologram from TIFF, .npy, .npz or HDF5 (dataset ``holograms``/``data``),
    as ``dtype`` (float32 where the GPU takes it: half the bytes to read and convert)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no such file: {path}")
    with naming_file(path):
        data = np.asarray(_read_stack_format(path))
        if np.iscomplexobj(data):
            raise FileFormatError(f"{path}: holds complex values ({data.dtype}); holograms are intensities")
        if data.dtype.kind not in "biuf":
            raise FileFormatError(f"{path}: holds {data.dtype} values, not numbers")
        if data.ndim not in (2, 3, 4) or data.size == 0:
            raise FileFormatError(f"{path}: holds an array of shape {data.shape}; expected a hologram (N, N), "
                                  "a stack (A, N, N) or a series (T, A, N, N)")
        return np.asarray(data, dtype)


def _read_stack_format(path: Path):
    suffix = path.suffix.lower()
    if suffix in (".tif", ".tiff"):
        import tifffile

        try:
            data = tifffile.imread(path)
        except (ArithmeticError, IndexError, TypeError, AttributeError) as exc:
            # tifffile meets a damaged header with whatever its arithmetic raises (a ZeroDivisionError
            # from a zero tile size, found by tests/holo/test_holo_bad_input.py's Hypothesis search)
            raise ValueError(f"{path}: a damaged TIFF ({type(exc).__name__}: {exc})") from exc
    elif suffix == ".npy":
        with open(path, "rb") as fh:
            data = np.load(fh)
    elif suffix == ".npz":
        import zipfile

        try:  # the file opened here: np.load leaves its own handle open when the archive is damaged
            with open(path, "rb") as fh, np.load(fh) as z:
                if not z.files:
                    raise ValueError(f"{path}: the .npz archive holds no array")
                data = z[z.files[0]]
        except zipfile.BadZipFile as exc:
            raise ValueError(f"{path}: not a readable .npz archive ({exc})") from exc
    elif suffix in (".h5", ".hdf5"):
        import h5py

        with h5py.File(path, "r") as f:
            name = next((k for k in ("holograms", "data") if k in f and hasattr(f[k], "shape")), None)
            if name is None:
                raise ValueError(f"{path}: expected a dataset named holograms or data")
            data = f[name][()]
    else:
        raise ValueError(f"{path}: unknown stack format {suffix!r} (expected .tif, .npy, .npz, .h5)")
    return data


def _plain(value):
    """A JSON value for what a result's info holds (NumPy scalars and arrays)."""
    return value.tolist() if hasattr(value, "tolist") else str(value)


def write_volume(path, index, geometry: Geometry, *, method: str = "", approximation: str = "", iterations: int = 0,
                 extra: dict | None = None, absorption=None) -> None:
    """Write an index volume (n, n, n), refractive index (dimensionless), with its geometry (um) as HDF5,
    atomically; ``absorption`` (the imaginary index kappa, same shape) beside it when given."""
    with hdf5_output(path) as f:
        if absorption is not None:
            f.create_dataset("absorption", data=np.asarray(absorption, np.float32), compression="gzip")
        f.attrs["qora_kind"] = "holo_volume"
        _geometry_attrs(f, geometry)
        f.attrs["method"] = method
        f.attrs["approximation"] = approximation
        f.attrs["iterations"] = iterations
        text = json.dumps(extra or {}, default=_plain)
        if len(text) > 60_000:  # an HDF5 attribute holds 64 KiB at most: a long record goes into a dataset
            f.create_dataset("extra", data=text)
            text = '"dataset extra"'
        f.attrs["extra"] = text
        f.attrs["voxel_size_um"] = (geometry.pixel,) * 3
        d = f.create_dataset("index", data=np.asarray(index, np.float32), compression="gzip")
        d.attrs["element_size_um"] = (geometry.pixel,) * 3  # (z, y, x), the name Fiji's HDF5 reader takes
        f.create_dataset("illuminations", data=geometry.illuminations)
        if geometry.angles is not None:
            f.create_dataset("angles", data=geometry.angles)


def read_volume(path):
    """``(index, geometry, attributes)`` from :func:`write_volume`: the refractive index (n, n, n),
    dimensionless, and its geometry (lengths in um)."""
    import h5py

    with naming_file(path), h5py.File(path, "r") as f:
        if f.attrs.get("qora_kind") != "holo_volume":
            raise FileFormatError(f"{path}: not a qora volume (qora_kind={f.attrs.get('qora_kind')!r})")
        if "index" not in f:
            raise FileFormatError(f"{path}: no dataset 'index'")
        return f["index"][()], _geometry_from(f, path), dict(f.attrs)


def save_result(path, result) -> Path:
    """An :class:`~qora.holo.odt.OdtResult` as a volume file (:func:`write_volume`, its info as ``extra`` and the
    absorption beside the index); ``OdtResult.load`` reads it back (:func:`result_fields`)."""
    write_volume(path, result.index, result.geometry, method=result.method, approximation=result.approximation,
                 iterations=result.iterations, extra=result.info, absorption=result.absorption)
    return Path(path)


def result_fields(path) -> dict:
    """The fields of the :class:`~qora.holo.odt.OdtResult` a volume file holds (:func:`save_result`, ``qora holo
    reconstruct --out F.h5``); ``OdtResult.load`` makes the result (this module knows the file, not the type)."""
    import h5py

    index, geometry, attrs = read_volume(path)
    with h5py.File(path, "r") as f:
        absorption = f["absorption"][()] if "absorption" in f else None
        extra = f["extra"][()].decode() if "extra" in f else attrs.get("extra", "{}")
    return dict(index=index, geometry=geometry, method=str(attrs.get("method", "")),
                approximation=str(attrs.get("approximation", "")), iterations=int(attrs.get("iterations", 0)),
                info=json.loads(extra), absorption=absorption)


def write_volume_tiff(path, index, geometry: Geometry) -> None:
    """Write an index volume as a float32 TIFF stack with ImageJ spacing in um, atomically."""
    import tifffile

    with atomic_path(path) as tmp:
        tifffile.imwrite(tmp, np.asarray(index, np.float32), imagej=True,
                         resolution=(1 / geometry.pixel, 1 / geometry.pixel),
                         metadata={"spacing": geometry.pixel, "unit": "um", "axes": "ZYX"})


def plot_volume(path, index, geometry: Geometry, *, truth=None, title: str = "") -> None:
    """PNG: orthogonal slices through the centre (z, y, x) and a line profile along x of a refractive-index
    volume (n, n, n), dimensionless (``truth`` likewise), positions from the geometry's pixel in um."""
    from qora.plot import save_png, subplots

    index = np.asarray(index)
    n = index.shape[0]
    c = n // 2
    ext = np.array([-(n // 2), n - n // 2]) * geometry.pixel
    extent = [ext[0], ext[1], ext[1], ext[0]]
    vmin, vmax = float(index.min()), float(index.max())
    fig, axes = subplots(1, 4, figsize=(17, 4))
    for ax, img, label in ((axes[0], index[c], "x-y at z = 0"), (axes[1], index[:, c], "x-z at y = 0"),
                           (axes[2], index[:, :, c], "y-z at x = 0")):
        im = ax.imshow(img, cmap="viridis", vmin=vmin, vmax=vmax, extent=extent)
        ax.set_title(label)
        ax.set_xlabel("um")
    fig.colorbar(im, ax=axes[:3], shrink=0.8, label="refractive index")
    x = (np.arange(n) - n // 2) * geometry.pixel
    axes[3].plot(x, index[c, c], label="reconstruction")
    if truth is not None:
        axes[3].plot(x, np.asarray(truth)[c, c], "--", label="truth")
    axes[3].axhline(geometry.medium_index, color="0.7", lw=0.8)
    axes[3].set_xlabel("x (um)")
    axes[3].set_ylabel("index")
    axes[3].set_title("profile along x through the centre")
    axes[3].legend()
    if title:
        fig.suptitle(title)
    save_png(fig, path, dpi=90)


def plot_phase(path, phase, amplitude, *, pixel: float = 1.0, title: str = "") -> None:
    """PNG of an unwrapped phase (rad) and amplitude image (ratio to the background, dimensionless);
    ``pixel`` scales the axes (um when the phase comes from :func:`quantitative_phase` with ``hologram_pixel``
    in um)."""
    from qora.plot import save_png, subplots

    fig, axes = subplots(1, 2, figsize=(10, 4))
    n = phase.shape[0]
    extent = [0, phase.shape[1] * pixel, n * pixel, 0]
    im = axes[0].imshow(phase, cmap="coolwarm", extent=extent)
    axes[0].set_title("unwrapped phase (rad)")
    fig.colorbar(im, ax=axes[0])
    im = axes[1].imshow(amplitude, cmap="gray", extent=extent)
    axes[1].set_title("amplitude (ratio to background)")
    fig.colorbar(im, ax=axes[1])
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    save_png(fig, path, dpi=90)
