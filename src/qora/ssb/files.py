"""4D-STEM data in and phase images out.

Dataset file (HDF5, ``qora_kind = "ssb_dataset"``): ``data`` (scan_row, scan_col, det_row,
det_col) float32; attributes ``kv``, ``alpha_mrad``, ``scan_step_a``, ``detector_pixel_inv_a``
and, for simulated data, the aberrations as JSON and ``truth`` (the specimen's phase on the
scan grid, rad). Image file (HDF5, ``qora_kind = "ssb_image"``): ``phase`` (scan_row,
scan_col) float32 rad, attributes ``method``, ``scan_step_a``, ``kv``, ``alpha_mrad`` and the
aberrations as JSON. Both written atomically. ``load_data`` also reads ``.npy`` and, through
rosettasciio (the ``formats`` extra), ``.mib``, ``.dm4``, EMPAD ``.raw`` and ``.emd``; fpd HDF5
and Merlin ``.mib`` through :mod:`qora.ssb.readers`.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from qora.io.atomic import atomic_path
from qora.io.errors import FileFormatError, InputError, MissingExtra, naming_file
from qora.progress import report
from qora.ssb.optics import Aberrations
from qora.ssb.readers import is_fpd, read_fpd, read_mib

__all__ = ["write_dataset", "read_dataset", "load_data", "write_image", "plot_image", "plot_fit"]


def write_dataset(path, data, *, kv: float, alpha_mrad: float, scan_step: float, detector_pixel: float | None = None,
                  aberrations: Aberrations | None = None, truth=None, progress=None) -> None:
    """Write a dataset file, a block of scan rows at a time (an interrupt stops it between blocks and
    the temporary file is removed: nothing appears under ``path``); ``progress`` gets the scan
    positions written ("write", done, total).

    ``data`` is (scan_row, scan_col, det_row, det_col), counts; ``kv`` the accelerating voltage
    (kV), ``alpha_mrad`` the convergence semi-angle (mrad), ``scan_step`` the scan step (A),
    ``detector_pixel`` 1/A per detector pixel (optional), ``aberrations`` C_nm (A) and azimuths (rad).
    """
    import h5py

    data = np.asarray(data)
    if data.ndim != 4:
        raise InputError(f"4D-STEM data must be (scan_row, scan_col, det_row, det_col), got shape {data.shape}")
    sy, sx = data.shape[:2]
    rows = max(1, (64 << 20) // max(1, 4 * int(np.prod(data.shape[1:]))))  # ~64 MB of float32 per block
    with atomic_path(path) as tmp, h5py.File(tmp, "w") as f:
        f.attrs["qora_kind"] = "ssb_dataset"
        f.attrs["kv"] = kv
        f.attrs["alpha_mrad"] = alpha_mrad
        f.attrs["scan_step_a"] = scan_step
        if detector_pixel is not None:
            f.attrs["detector_pixel_inv_a"] = detector_pixel
        f.attrs["aberrations"] = json.dumps((aberrations or Aberrations()).values)
        dset = f.create_dataset("data", shape=data.shape, dtype=np.float32, chunks=True, compression="gzip")
        for r in range(0, sy, rows):
            dset[r:r + rows] = data[r:r + rows].astype(np.float32)
            report(progress, "write", min(r + rows, sy) * sx, sy * sx)
        if truth is not None:
            f.create_dataset("truth", data=np.asarray(truth, np.float32))


def _contents(f) -> str:
    """What an HDF5 file holds: its datasets' names and shapes (for a message)."""
    import h5py

    found = []
    f.visititems(lambda name, obj: found.append(f"{name} {obj.shape} {obj.dtype}")
                 if isinstance(obj, h5py.Dataset) else None)
    return "; it holds " + (", ".join(found[:12]) + (" ..." if len(found) > 12 else "") if found else "no dataset")


def read_dataset(path):
    """``(data, metadata)`` of a qora dataset file (the data read into memory). A file that is not
    one (damaged, truncated, another kind, no 4D ``data``) is a FileFormatError naming the file and
    what it holds."""
    import h5py

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    with naming_file(path), h5py.File(path, "r") as f:
        kind = f.attrs.get("qora_kind")
        if kind != "ssb_dataset":
            raise FileFormatError(f"{path}: not a qora 4D-STEM dataset (qora_kind={kind!r}){_contents(f)}")
        data = f.get("data")
        if not isinstance(data, h5py.Dataset) or data.ndim != 4:
            what = "no dataset 'data'" if data is None else f"'data' of shape {getattr(data, 'shape', '?')}"
            raise FileFormatError(f"{path}: 4D-STEM data must be a 4D dataset 'data' (scan_row, scan_col, det_row, "
                                  f"det_col), found {what}{_contents(f)}")
        meta = {k: (v.item() if hasattr(v, "item") else v) for k, v in f.attrs.items()}
        try:
            recorded = json.loads(meta.get("aberrations", "{}"))
            meta["aberrations"] = Aberrations({k: tuple(v) if isinstance(v, list) else v for k, v in recorded.items()})
        except (TypeError, ValueError, AttributeError) as exc:
            raise FileFormatError(f"{path}: its aberrations attribute cannot be read ({exc})") from None
        array = data[...]
        if "truth" in f:
            meta["truth"] = f["truth"][...]
    return array, meta


def load_data(path, *, scan_shape=None):
    """4D data from ``.h5`` (qora's, or fpd's ``fpd_expt``), ``.npy`` (memory-mapped), Merlin ``.mib``
    or detector formats via rosettasciio: ``(data, metadata)`` with whatever metadata the file holds
    (kv, alpha_mrad, scan_step_a, camera_length_m, detector). ``scan_shape`` (rows, cols) shapes a
    Merlin frame series whose files do not say its scan shape (docs/ssb.md, "Detector files"). A
    damaged file, data that are not 4D, or that do not hold real numbers, are a FileFormatError
    naming the file."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    suffix = path.suffix.lower()
    if suffix in (".h5", ".hdf5", ".emd") and _is_fpd(path):
        with naming_file(path):
            data, meta = read_fpd(path)
    elif suffix in (".h5", ".hdf5"):
        return read_dataset(path)
    elif suffix == ".npy":
        with naming_file(path):
            data = np.load(path, mmap_mode="r", allow_pickle=False)
        meta = {}
    else:
        try:
            from rsciio import IO_PLUGINS  # noqa: F401 - present means the formats extra is installed
        except ImportError:
            raise MissingExtra(f"{path}: reading {suffix} files needs rosettasciio (pip install 'qora[formats]')") \
                from None
        with naming_file(path):
            data, meta = read_mib(path, scan_shape) if suffix == ".mib" else _read_rsciio(path)
    if data.ndim != 4:
        raise FileFormatError(f"{path}: 4D-STEM data must be (scan_row, scan_col, det_row, det_col), got shape "
                              f"{data.shape}")
    if np.dtype(data.dtype).kind not in "iuf":
        raise FileFormatError(f"{path}: 4D-STEM data must be real numbers (counts or intensities), got dtype "
                              f"{data.dtype}")
    return data, meta


def _is_fpd(path: Path) -> bool:
    """Whether an HDF5 file is fpd's (False for any file h5py cannot open: its reader says why)."""
    try:
        return is_fpd(path)
    except (OSError, ValueError):
        return False


def _read_rsciio(path: Path):
    import importlib

    plugins = {".mib": "rsciio.quantumdetector", ".dm4": "rsciio.digitalmicrograph", ".raw": "rsciio.empad",
               ".emd": "rsciio.emd"}
    name = plugins.get(path.suffix.lower())
    if name is None:
        raise FileFormatError(f"{path}: unknown 4D-STEM format {path.suffix!r} (known: .h5, .npy, "
                              f"{', '.join(plugins)})")
    reader = importlib.import_module(name)
    if path.suffix.lower() == ".raw":  # EMPAD: the .xml beside the .raw holds the shape
        path = path.with_suffix(".xml")
    items = reader.file_reader(str(path), lazy=True)
    item = next((i for i in items if np.ndim(i["data"]) == 4), None)
    if item is None:
        held = ", ".join(f"{np.shape(i['data'])}" for i in items) or "nothing"
        raise FileFormatError(f"{path}: holds no 4D data (scan_row, scan_col, det_row, det_col); it holds {held}")
    meta = {}
    md = item.get("metadata", {})
    beam = md.get("Acquisition_instrument", {}).get("TEM", {})
    if "beam_energy" in beam:
        meta["kv"] = float(beam["beam_energy"])
    if "convergence_angle" in beam:
        meta["alpha_mrad"] = float(beam["convergence_angle"])
    axes = item.get("axes", [])
    if axes and axes[0].get("units") in ("nm", "Å", "A"):
        meta["scan_step_a"] = float(axes[0]["scale"]) * (10.0 if axes[0]["units"] == "nm" else 1.0)
    return item["data"], meta  # lazy (memory-mapped through dask): Session reads it a chunk of pixels at a time


def write_image(path, phase, *, method: str, scan_step: float, kv: float, alpha_mrad: float,
                aberrations: Aberrations) -> None:
    """Write a phase image (rad, (scan_row, scan_col)) as a qora ``ssb_image`` HDF5 file, atomically,
    with what made it: the method ("ssb", "parallax", "thick"), the scan step (A), the voltage (kV),
    the probe semi-angle (mrad) and the aberrations (A, rad). Layout: docs/formats.md."""
    import h5py

    with atomic_path(path) as tmp, h5py.File(tmp, "w") as f:
        f.attrs["qora_kind"] = "ssb_image"
        f.attrs["method"] = method
        f.attrs["scan_step_a"] = scan_step
        f.attrs["kv"] = kv
        f.attrs["alpha_mrad"] = alpha_mrad
        f.attrs["aberrations"] = json.dumps(aberrations.values)
        f.create_dataset("phase", data=np.asarray(phase, np.float32))


def plot_image(path, phase, *, scan_step: float, title: str = "", chi_map=None) -> None:
    """PNG of the phase image (rad, (scan_row, scan_col); axes in A from ``scan_step``, A) and, when
    given, the aberration function over the aperture (``chi_map``: ``(extent, values)``, extent in
    mrad, values chi in rad)."""
    from qora.plot import save_png, subplots

    panels = 2 if chi_map is not None else 1
    fig, axes = subplots(1, panels, figsize=(5 * panels, 4.4), squeeze=False)
    sy, sx = np.shape(phase)
    im = axes[0, 0].imshow(phase, cmap="gray", extent=(0, sx * scan_step, sy * scan_step, 0))
    axes[0, 0].set(title=title or "phase (rad)", xlabel="x (A)", ylabel="y (A)")
    fig.colorbar(im, ax=axes[0, 0], label="rad")
    if chi_map is not None:
        extent, values = chi_map
        im = axes[0, 1].imshow(values, cmap="twilight", extent=extent, origin="lower")
        axes[0, 1].set(title="aberration function chi (rad)", xlabel="k_x (mrad)", ylabel="k_y (mrad)")
        fig.colorbar(im, ax=axes[0, 1], label="rad")
    fig.tight_layout()
    save_png(fig, path, dpi=110)


def plot_fit(path, session, result: dict) -> None:
    """PNG of a fit (:func:`qora.ssb.fit`'s result): the image of each branch,
    the fitted aberration function chi over the aperture (the better branch), and the agreement
    along each fitted parameter of that branch around its fit (+-4 standard errors, at least
    +-10 A, +-1 mrad or +-1 degree for a fitted scan rotation), the others held."""
    from qora.plot import save_png, subplots

    from qora.ssb.band import Band
    from qora.ssb.model import parameters_to_aberrations
    from qora.ssb.optics import chi

    branches = [b for b in ("standard", "thick") if b in result]
    best = result.get("better", branches[0])
    params = dict(result[best]["parameters"])
    names = list(result[best]["parameter_order"])
    if "rotation" in names:  # a fitted rotation is the result's, not a branch parameter
        params["rotation"] = float(result["rotation_rad"])
    saved = session.rotation
    session.rotation = result["rotation_rad"]
    try:
        images = {}
        for b in branches:
            p = result[b]["parameters"]
            kw = {"thickness": p["thickness"], "tilt": (p["tilt_y"], p["tilt_x"])} if b == "thick" else {}
            images[b] = session.image(parameters_to_aberrations(p), "thick" if b == "thick" else "ssb", **kw)
        band = Band(session, names, rotation=result["rotation_rad"])
        error = result[best].get("uncertainty", {})
        curves = {}
        for name in names:
            floor = 1e-3 if name.startswith("tilt") else np.deg2rad(1.0) if name == "rotation" else 10.0
            half = max(4 * error.get(name, 0.0), floor)
            xs = params[name] + np.linspace(-half, half, 25)
            curves[name] = (xs, band.evaluate_batch([{**params, name: float(x)} for x in xs]))
    finally:
        session.rotation = saved
    cols = max(len(branches) + 1, len(names))
    fig, axes = subplots(2, cols, figsize=(3.6 * cols, 7.0), squeeze=False)
    sy, sx = session.scan_shape
    step = session.scan_step
    for i, b in enumerate(branches):
        im = axes[0, i].imshow(images[b], cmap="gray", extent=(0, sx * step, sy * step, 0))
        axes[0, i].set_title(f"{b}: agreement {result[b]['agreement']:.4f}", fontsize=9)
        axes[0, i].set(xlabel="x (A)", ylabel="y (A)")
        fig.colorbar(im, ax=axes[0, i], label="rad")
    a = session.alpha_mrad
    grid = np.linspace(-a, a, 129)
    ky, kx = np.meshgrid(grid, grid, indexing="ij")
    k = 1e-3 / session.wavelength
    values = np.where(np.hypot(ky, kx) <= a, chi(kx * k, ky * k, parameters_to_aberrations(params), session.wavelength),
                      np.nan)
    ax = axes[0, len(branches)]
    im = ax.imshow(values, cmap="twilight", extent=(-a, a, -a, a), origin="lower")
    ax.set_title(f"chi of the {best} fit (rad)", fontsize=9)
    ax.set(xlabel="k_x (mrad)", ylabel="k_y (mrad)")
    fig.colorbar(im, ax=ax, label="rad")
    for j in range(len(branches) + 1, cols):
        axes[0, j].axis("off")
    for j in range(cols):
        if j >= len(names):
            axes[1, j].axis("off")
            continue
        name = names[j]
        xs, ys = curves[name]
        scale, unit = ((1e3, "mrad") if name.startswith("tilt") else (np.rad2deg(1.0), "deg") if name == "rotation"
                       else (1.0, "A"))
        axes[1, j].plot(xs * scale, ys, "-")
        axes[1, j].axvline(params[name] * scale, color="k", lw=0.8)
        axes[1, j].set(xlabel=f"{name} ({unit})", ylabel="agreement" if j == 0 else None)
    fig.suptitle(f"scan rotation {np.rad2deg(result['rotation_rad']):.2f} deg; better: {best}")
    fig.tight_layout()
    save_png(fig, path, dpi=100)
