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

from qora.io.atomic import hdf5_output
from qora.io.errors import FileFormatError, InputError, MissingExtra, QoraError, naming_file
from qora.progress import report
from qora.ssb.detector import scan_steps
from qora.ssb.optics import Aberrations
from qora.ssb.readers import lazy_array, read_dectris, read_fpd, read_mib

__all__ = ["write_dataset", "read_dataset", "load_data", "write_image", "plot_image", "plot_fit"]


def write_dataset(path, data, *, kv: float, alpha_mrad: float, scan_step: float, detector_pixel: float | None = None,
                  aberrations: Aberrations | None = None, truth=None, progress=None) -> None:
    """Write a dataset file, a block of scan rows at a time (an interrupt stops it between blocks and
    the temporary file is removed: nothing appears under ``path``); ``progress`` gets the scan
    positions written ("write", done, total).

    ``data`` is (scan_row, scan_col, det_row, det_col), counts; ``kv`` the accelerating voltage
    (kV), ``alpha_mrad`` the convergence semi-angle (mrad), ``scan_step`` the scan step (A; or
    (step_y, step_x) where they differ),
    ``detector_pixel`` 1/A per detector pixel (optional), ``aberrations`` C_nm (A) and azimuths (rad).
    """
    data = np.asarray(data)
    if data.ndim != 4:
        raise InputError(f"4D-STEM data must be (scan_row, scan_col, det_row, det_col), got shape {data.shape}")
    sy, sx = data.shape[:2]
    rows = max(1, (64 << 20) // max(1, 4 * int(np.prod(data.shape[1:]))))  # ~64 MB of float32 per block
    with hdf5_output(path, nbytes=4 * data.size) as f:
        f.attrs["qora_kind"] = "ssb_dataset"
        f.attrs["kv"] = kv
        f.attrs["alpha_mrad"] = alpha_mrad
        steps = scan_steps(scan_step)
        f.attrs["scan_step_a"] = steps[0] if steps[0] == steps[1] else np.asarray(steps)  # (step_y, step_x) if they differ
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


def read_dataset(path, *, lazy: bool = False):
    """``(data, metadata)`` of a qora dataset file: the data read into memory, or with ``lazy`` a
    dask array over the open HDF5 dataset, read in blocks of scan rows only when needed (the file
    stays open while the array is referenced). A file that is not one (damaged, truncated, another
    kind, no 4D ``data``) is a FileFormatError naming the file and what it holds."""
    import h5py

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    with naming_file(path):
        f = h5py.File(path, "r")
    try:
        result = _dataset_contents(path, f, lazy)
    except BaseException:
        f.close()
        raise
    if not lazy:
        f.close()
    return result


def _dataset_contents(path: Path, f, lazy: bool):
    import h5py

    with naming_file(path):
        kind = f.attrs.get("qora_kind")
        if kind != "ssb_dataset":
            raise FileFormatError(f"{path}: not a qora 4D-STEM dataset (qora_kind={kind!r}){_contents(f)}")
        data = f.get("data")
        if not isinstance(data, h5py.Dataset) or data.ndim != 4:
            what = "no dataset 'data'" if data is None else f"'data' of shape {getattr(data, 'shape', '?')}"
            raise FileFormatError(f"{path}: 4D-STEM data must be a 4D dataset 'data' (scan_row, scan_col, det_row, "
                                  f"det_col), found {what}{_contents(f)}")
        meta = {k: (v.item() if np.size(v) == 1 else tuple(np.ravel(v).tolist())) if isinstance(v, np.ndarray)
                else (v.item() if hasattr(v, "item") else v) for k, v in f.attrs.items()}
        try:
            recorded = json.loads(meta.get("aberrations", "{}"))
            meta["aberrations"] = Aberrations({k: tuple(v) if isinstance(v, list) else v for k, v in recorded.items()})
        except (TypeError, ValueError, AttributeError) as exc:
            raise FileFormatError(f"{path}: its aberrations attribute cannot be read ({exc})") from None
        array = lazy_array(data) if lazy else data[...]
        if "truth" in f:
            meta["truth"] = f["truth"][...]
    return array, meta


def _named_kind(path):
    """:func:`_hdf5_kind`, a damaged file's error naming it (HDF5 reports a broken group as a RuntimeError)."""
    with naming_file(path):
        return _hdf5_kind(path)


def load_data(path, *, scan_shape=None, layout=None):
    """4D data and what the file says about them, read lazily (nothing but headers and metadata is
    read here: the data stay a memory map, a dask array or an HDF5/Zarr array read in chunks).

    Formats (docs/ssb.md, "Detector files"): Qora's HDF5 dataset, fpd HDF5 (``fpd_expt``),
    DECTRIS/Arina HDF5 masters (``entry/data/data_000001 ...``, external links and bitshuffle/LZ4
    through hdf5plugin), Zarr (a ``.zarr`` folder: an array, or a group holding one 4D array),
    ``.npy`` (memory-mapped), Merlin ``.mib`` (:mod:`qora.ssb.readers`), and through rosettasciio
    (the ``formats`` extra) DM3/DM4, EMPAD (``.xml``/``.raw``), EMD (Velox and NCEM), TVIPS, HSPY,
    blockfile and MRC; ZSPY is a Zarr store, read as Zarr. Returns ``(data, metadata)``: data (scan_row, scan_col, det_row, det_col) and whatever
    metadata the file holds: ``kv``, ``alpha_mrad``, ``scan_step_a`` (A; a (step_y, step_x) pair
    where the scan's two steps differ), ``detector_pixel_mrad`` and/or ``detector_pixel_inv_a``
    (the scattering angle per detector pixel, mrad or 1/A), ``camera_length_m``, ``detector``.

    ``scan_shape`` (rows, cols) shapes a series of frames whose file does not say its scan shape
    (a Merlin series, a DECTRIS master, a TVIPS stack, a 3D ``.npy``). ``layout`` (a
    :class:`qora.ssb.readers.Layout`) maps the file's axes onto Qora's (axis order, detector
    transpose, flips), applied lazily after reading. A damaged file, data that are not 4D (the
    message says what the file holds), or that do not hold real numbers, are a FileFormatError
    naming the file."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file")
    suffix = path.suffix.lower()
    if path.is_dir() or suffix in (".zarr", ".zspy"):
        with naming_file(path):
            data, meta = _read_zarr(path)
    elif suffix in (".h5", ".hdf5", ".emd", ".nxs") and _named_kind(path) is not None:
        kind = _named_kind(path)
        with naming_file(path):
            if kind == "fpd":
                data, meta = read_fpd(path)
            elif kind == "qora":
                data, meta = read_dataset(path, lazy=True)
            else:
                data, meta = read_dectris(path, scan_shape=scan_shape)
    elif suffix in (".h5", ".hdf5", ".nxs"):
        return read_dataset(path)  # not one of ours: its refusal names what the file holds
    elif suffix == ".npy":
        from qora.io.npy import check_npy

        check_npy(path)  # the size its header declares is in the file: nothing mapped on a header's word
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
            data, meta = read_mib(path, scan_shape) if suffix == ".mib" else _read_rsciio(path, scan_shape)
    if data.ndim == 3 and scan_shape is not None:
        data = _shape_scan(path, data, scan_shape)
    if data.ndim != 4:
        hint = ("; a series of frames: give the scan shape (scan_shape=(rows, cols), --scan-shape ROWSxCOLS)"
                if data.ndim == 3 else "")
        raise FileFormatError(f"{path}: 4D-STEM data must be (scan_row, scan_col, det_row, det_col), the file holds "
                              f"an array of shape {tuple(data.shape)} {np.dtype(data.dtype)}{hint}")
    if np.dtype(data.dtype).kind not in "iuf":
        raise FileFormatError(f"{path}: 4D-STEM data must be real numbers (counts or intensities), got dtype "
                              f"{data.dtype}")
    if layout is not None and not layout.identity:
        data = layout.apply(data)
        meta = _layout_metadata(meta, layout)
    return data, meta


def _layout_metadata(meta: dict, layout) -> dict:
    """The metadata of data whose axes a layout reordered: a (step_y, step_x) scan step follows
    its axes."""
    meta = dict(meta)
    step = meta.get("scan_step_a")
    if isinstance(step, tuple):
        scan_axes = [a for a in layout.axis_order if a.startswith("scan")]
        if scan_axes == ["scan_col", "scan_row"]:  # the file's first scan axis becomes the columns
            meta["scan_step_a"] = (step[1], step[0])
    return meta


def _shape_scan(path: Path, data, scan_shape):
    """A (frames, det_row, det_col) series as (rows, cols, det_row, det_col), row by row, lazily."""
    rows, cols = (int(v) for v in scan_shape)
    if rows < 1 or cols < 1 or rows * cols != data.shape[0]:
        raise FileFormatError(f"{path}: holds {data.shape[0]} frames of {data.shape[1]}x{data.shape[2]}; the scan "
                              f"shape {rows}x{cols} given needs {rows * cols}")
    return data.reshape(rows, cols, *data.shape[1:])


def _hdf5_kind(path: Path) -> str | None:
    """"fpd", "qora", "dectris" (a NeXus master with ``entry/data/data_000001``) or None (another
    HDF5 file, or one h5py cannot open: its reader says why)."""
    import h5py

    try:
        with h5py.File(path, "r") as f:
            if isinstance(f.get("fpd_expt/fpd_data/data"), h5py.Dataset):
                return "fpd"
            if f.attrs.get("qora_kind") == "ssb_dataset":
                return "qora"
            group = f.get("entry/data")
            if isinstance(group, h5py.Group) and any(k.startswith("data_") for k in group.keys()):
                return "dectris"
    except (OSError, ValueError):
        return None
    return None


def _read_zarr(path: Path):
    """A Zarr array (or the one 4D array of a Zarr group) as a dask array, and the metadata its
    attributes hold under Qora's names (kv, alpha_mrad, scan_step_a, detector_pixel_mrad, ...)."""
    try:
        import dask.array as da
        import zarr
    except ImportError:
        raise MissingExtra(f"{path}: reading Zarr needs zarr and dask (pip install 'qora[dask]')") from None
    try:
        node = zarr.open(str(path), mode="r")
    except Exception as exc:  # zarr raises its own, version-dependent errors for what is not a store
        raise FileFormatError(f"{path}: not a Zarr array or group ({type(exc).__name__}: {exc})") from None
    attrs = dict(node.attrs)
    if isinstance(node, zarr.Group):
        arrays = {name: a for name, a in node.members(max_depth=None) if isinstance(a, zarr.Array)}
        four = {name: a for name, a in arrays.items() if a.ndim == 4}
        if len(four) != 1:
            held = ", ".join(f"{n} {a.shape} {a.dtype}" for n, a in arrays.items()) or "no array"
            raise FileFormatError(f"{path}: a Zarr group must hold one 4D array (scan_row, scan_col, det_row, "
                                  f"det_col), it holds {held}")
        name, node = next(iter(four.items()))
        attrs = {**attrs, **dict(node.attrs)}
    return da.from_zarr(node), _known_metadata(attrs)


_KNOWN = ("kv", "alpha_mrad", "scan_step_a", "detector_pixel_mrad", "detector_pixel_inv_a", "camera_length_m")


def _known_metadata(attrs: dict) -> dict:
    """The attributes that carry Qora's metadata names, as floats (a two-valued scan step as a
    (step_y, step_x) tuple)."""
    meta = {}
    for key in _KNOWN:
        if key in attrs:
            value = np.asarray(attrs[key], dtype=float)
            meta[key] = float(value) if value.ndim == 0 else tuple(float(v) for v in value.ravel())
    return meta


_RSCIIO = {".dm3": "rsciio.digitalmicrograph", ".dm4": "rsciio.digitalmicrograph", ".raw": "rsciio.empad",
           ".xml": "rsciio.empad", ".emd": "rsciio.emd", ".tvips": "rsciio.tvips", ".hspy": "rsciio.hspy",
           ".blo": "rsciio.blockfile", ".mrc": "rsciio.mrc"}  # .zspy: a Zarr store, read as Zarr
_NO_READER = {".seq": "DE/StreamPix .seq: rosettasciio 0.15 has no reader for it (its DE reader came later); "
                     "convert it to .npy, .zarr or HDF5, or use a rosettasciio with a DE reader"}


def _read_rsciio(path: Path, scan_shape=None):
    """A 4D detector file through rosettasciio, lazily (its dask arrays over a memory map), with its
    calibration mapped onto Qora's metadata (:func:`rsciio_metadata`)."""
    import importlib

    suffix = path.suffix.lower()
    if suffix in _NO_READER:
        raise FileFormatError(f"{path}: {_NO_READER[suffix]}")
    name = _RSCIIO.get(suffix)
    if name is None:
        known = [".h5", ".hdf5", ".npy", ".zarr", ".mib", *_RSCIIO]
        raise FileFormatError(f"{path}: unknown 4D-STEM format {path.suffix!r} (known: {', '.join(known)})")
    try:
        reader = importlib.import_module(name)
    except ImportError as exc:  # a reader's own dependency (the blockfile reader's scikit-image)
        raise MissingExtra(f"{path}: rosettasciio's {suffix} reader needs {exc.name or exc} (pip install "
                           f"{exc.name or 'it'})") from None
    options = {}
    if suffix == ".raw":  # EMPAD: the .xml beside the .raw holds the shape
        path = path.with_suffix(".xml")
    if suffix == ".tvips" and scan_shape is not None:
        options["scan_shape"] = (int(scan_shape[0]), int(scan_shape[1]))  # rosettasciio's TVIPS order: (y, x)
    try:
        items = reader.file_reader(str(path), lazy=True, **options)
    except (QoraError, FileNotFoundError, MemoryError):
        raise
    except Exception as exc:  # noqa: BLE001 - on damaged bytes rosettasciio raises anything (NotImplementedError,
        # struct.error, IndexError, ...): one FileFormatError naming the file, the format and what the reader said
        raise FileFormatError(f"{path}: cannot be read as {suffix} ({name.split('.')[-1]}): damaged, or not a "
                              f"{suffix} file ({type(exc).__name__}: {' '.join(str(exc).split())[:200]})") from exc
    item = next((i for i in items if np.ndim(i["data"]) == 4), None)
    if item is None:
        item = next((i for i in items if np.ndim(i["data"]) == 3), None) if scan_shape is not None else None
    if item is None:
        held = ", ".join(f"{_title(i)}{tuple(np.shape(i['data']))} {i['data'].dtype}" for i in items) or "nothing"
        hint = (" (a series of frames: give the scan shape)" if any(np.ndim(i["data"]) == 3 for i in items) else "")
        raise FileFormatError(f"{path}: holds no 4D data (scan_row, scan_col, det_row, det_col); it holds "
                              f"{held}{hint}")
    meta = rsciio_metadata(item)
    if suffix == ".tvips":
        meta.pop("scan_step_a", None)  # rosettasciio gives a TVIPS scan 1 nm steps: the file records none
    return item["data"], meta


def _title(item) -> str:
    title = item.get("metadata", {}).get("General", {}).get("title", "")
    return f"{title!r} " if title else ""


_LENGTH_A = {"nm": 10.0, "Å": 1.0, "A": 1.0, "angstrom": 1.0, "um": 1e4, "µm": 1e4, "pm": 0.01}
_INV_A = {"1/nm": 0.1, "nm^-1": 0.1, "nm-1": 0.1, "1 / nm": 0.1, "1/Å": 1.0, "1/A": 1.0, "Å^-1": 1.0, "A^-1": 1.0,
          "1 / Å": 1.0}
_ANGLE_MRAD = {"mrad": 1.0, "rad": 1e3, "µrad": 1e-3, "urad": 1e-3}


def rsciio_metadata(item: dict) -> dict:
    """Qora's metadata from a rosettasciio signal dict: beam energy (kV) and convergence angle (mrad)
    from ``Acquisition_instrument.TEM``; the scan step from the navigation axes (A; a (step_y,
    step_x) pair where they differ), the detector pixel from the signal axes (1/nm or 1/A ->
    ``detector_pixel_inv_a``, mrad or rad -> ``detector_pixel_mrad``), camera length (m). Axes in
    pixel units (rosettasciio's default, scale 1) say nothing and are left out."""
    meta = {}
    md = item.get("metadata", {})
    beam = md.get("Acquisition_instrument", {}).get("TEM", {})
    if beam.get("beam_energy"):
        meta["kv"] = float(beam["beam_energy"])
    if beam.get("convergence_angle"):
        meta["alpha_mrad"] = float(beam["convergence_angle"])
    if beam.get("camera_length"):  # rosettasciio: mm
        meta["camera_length_m"] = float(beam["camera_length"]) * 1e-3
    axes = sorted(item.get("axes", []), key=lambda a: a.get("index_in_array", 0))
    if len(axes) == 4:
        steps = [float(a.get("scale", 1.0)) * _LENGTH_A[a.get("units")] for a in axes[:2]
                 if a.get("units") in _LENGTH_A]
        if len(steps) == 2:
            meta["scan_step_a"] = steps[0] if np.isclose(steps[0], steps[1], rtol=1e-6) else tuple(steps)
        det = axes[2:]
        units = {a.get("units") for a in det}
        scales = [float(a.get("scale", 1.0)) for a in det]
        if len(units) == 1 and np.isclose(scales[0], scales[1], rtol=1e-6):
            unit = units.pop()
            if unit in _INV_A:
                meta["detector_pixel_inv_a"] = scales[0] * _INV_A[unit]
            elif unit in _ANGLE_MRAD:
                meta["detector_pixel_mrad"] = scales[0] * _ANGLE_MRAD[unit]
    return meta


def write_image(path, phase, *, method: str, scan_step: float, kv: float, alpha_mrad: float,
                aberrations: Aberrations, depths=None) -> None:
    """Write a phase image (rad, (scan_row, scan_col)) as a qora ``ssb_image`` HDF5 file, atomically,
    with what made it: the method ("ssb", "parallax", "thick", "depth-sections"), the scan step (A),
    the voltage (kV), the probe semi-angle (mrad) and the aberrations (A, rad). Depth sections
    (:func:`qora.ssb.depth.depth_sections`) are a stack (section, scan_row, scan_col) with their
    centres ``depths`` (A from the mid-plane, along the beam) as the dataset ``depth_a``.
    Layout: docs/formats.md."""
    with hdf5_output(path) as f:
        f.attrs["qora_kind"] = "ssb_image"
        f.attrs["method"] = method
        steps = scan_steps(scan_step)
        f.attrs["scan_step_a"] = steps[0] if steps[0] == steps[1] else np.asarray(steps)  # (y, x) if they differ
        f.attrs["kv"] = kv
        f.attrs["alpha_mrad"] = alpha_mrad
        f.attrs["aberrations"] = json.dumps(aberrations.values)
        f.create_dataset("phase", data=np.asarray(phase, np.float32))
        if depths is not None:
            f.create_dataset("depth_a", data=np.asarray(depths, np.float64))


def plot_image(path, phase, *, scan_step: float, title: str = "", chi_map=None) -> None:
    """PNG of the phase image (rad, (scan_row, scan_col); axes in A from ``scan_step``, A) and, when
    given, the aberration function over the aperture (``chi_map``: ``(extent, values)``, extent in
    mrad, values chi in rad)."""
    from qora.plot import save_png, subplots

    panels = 2 if chi_map is not None else 1
    fig, axes = subplots(1, panels, figsize=(5 * panels, 4.4), squeeze=False)
    sy, sx = np.shape(phase)
    step_y, step_x = scan_steps(scan_step)
    im = axes[0, 0].imshow(phase, cmap="gray", extent=(0, sx * step_x, sy * step_y, 0))
    axes[0, 0].set(title=title or "phase (rad)", xlabel="x (A)", ylabel="y (A)")
    fig.colorbar(im, ax=axes[0, 0], label="rad")
    if chi_map is not None:
        extent, values = chi_map
        im = axes[0, 1].imshow(values, cmap="twilight", extent=extent, origin="lower")
        axes[0, 1].set(title="aberration function chi (rad)", xlabel="k_x (mrad)", ylabel="k_y (mrad)")
        fig.colorbar(im, ax=axes[0, 1], label="rad")
    fig.tight_layout()
    save_png(fig, path, dpi=110)


# the incoherent branch's curves: a value of its model costs a solve per frequency, a hundred of them several fits'
# worth (16 s of plot for a 9 s fit on the 64 x 64 thick film), so they are evaluated on the band thinned to this
# many frequencies, at CURVE_POINTS_INCOHERENT points, and scaled to the printed agreement at the fit. The shape is
# the thinned band's: its maximum may sit a point or two from the fit where the range is a few standard errors
# (tests/ssb/test_ssb_depth.py); on the 64 x 64 thick film (1,258 frequencies, the +-10 A floor) every curve peaks
# at the fit from 128, 256 or 512 rows, and the plot took 3.7 s against 16.0 s (the fit 9.4 s)
CURVE_ROWS_INCOHERENT = 128
CURVE_POINTS_INCOHERENT = 9


def agreement_curves(session, result: dict, *, progress=None) -> dict:
    """The agreement along each fitted parameter of the better branch around its fit, the others held (the curves
    of :func:`plot_fit`): ``{name: (values, agreements)}``; +-4 standard errors, at least +-10 A, +-1 mrad or
    +-1 degree (a parameter not determined gets that floor). Each is evaluated on the fit's own band with top-hat
    apertures, where the fit's printed agreement is reported, so every curve passes through that number at the fit.
    The incoherent branch's curves are the shape on the band thinned to :data:`CURVE_ROWS_INCOHERENT`
    frequencies (:data:`CURVE_POINTS_INCOHERENT` points), scaled by one factor to pass through the printed
    agreement at the fit. ``progress(stage, done, total, metrics)`` is told each parameter's curve.
    """
    from qora.ssb.band import Band
    from qora.ssb.depth import IncoherentBand

    branches = [b for b in ("standard", "thick", "incoherent") if b in result]
    best = result.get("better", branches[0])
    params = dict(result[best]["parameters"])
    names = list(result[best]["parameter_order"])
    if "rotation" in names:
        params["rotation"] = float(result["rotation_rad"])
    # the fit's own band of |Q| with top-hat apertures, the agreement the fit reports, so that each curve peaks
    # at the printed number (a band fitting the rotation has soft edges and reads higher than the printed value)
    fitted = tuple(result.get("band_inv_a", (0.2, 0.9)))
    held = [n for n in names if n != "rotation"]
    fixed = {n: params[n] for n in held}

    def band_at(rotation):
        if best == "incoherent":
            return IncoherentBand(session, held, sections=result[best]["sections"], rotation=rotation, band=fitted)
        return Band(session, held, band=fitted, rotation=rotation)

    incoherent = best == "incoherent"

    def thin(band):  # the incoherent model's curves on a thinned band (the module's note)
        stride = max(1, band.shape[0] // CURVE_ROWS_INCOHERENT) if incoherent else 1
        return band.thinned(stride) if stride > 1 else band

    band = thin(band_at(result["rotation_rad"]))
    error = result[best].get("uncertainty", {})
    lines = {}
    for name in names:
        floor = 1e-3 if name.startswith("tilt") else np.deg2rad(1.0) if name == "rotation" else 10.0
        half = max(4 * (error.get(name) or 0.0), floor)  # None: not determined, the floor's range
        count = 9 if name == "rotation" else CURVE_POINTS_INCOHERENT if incoherent else 25
        lines[name] = params[name] + np.linspace(-half, half, count)
    together = [n for n in names if n != "rotation"]  # one band: every point of their curves in one batch
    if progress is not None:
        progress("plot: agreement curves", 0, len(names), {})
    values = band.evaluate_batch([fixed] + [{**fixed, n: float(x)} for n in together for x in lines[n]])
    scale = result[best]["agreement"] / values[0] if incoherent else 1.0
    curves, at = {}, 1
    for name in together:
        curves[name] = (lines[name], values[at:at + len(lines[name])] * scale)
        at += len(lines[name])
    if "rotation" in names:  # one top-hat band per rotation: fewer points, each a band of its own
        if progress is not None:
            progress("plot: agreement curves", len(together), len(names), {})
        ys = np.array([float(thin(band_at(float(x))).evaluate(fixed, order=0)) for x in lines["rotation"]])
        curves["rotation"] = (lines["rotation"], ys * scale)
    if progress is not None:
        progress("plot: agreement curves", len(names), len(names), {})
    return {name: curves[name] for name in names}


def plot_fit(path, session, result: dict, *, progress=None) -> None:
    """PNG of a fit (:func:`qora.ssb.fit`'s result): the image of each branch,
    the fitted aberration function chi over the aperture (the better branch), and the agreement
    along each fitted parameter of that branch around its fit (+-4 standard errors, at least
    +-10 A, +-1 mrad or +-1 degree for a fitted scan rotation), the others held (:func:`agreement_curves`,
    which ``progress`` follows)."""
    from qora.plot import import_in_background, save_png, subplots

    from qora.ssb.depth import depth_sections
    from qora.ssb.model import parameters_to_aberrations
    from qora.ssb.optics import chi

    import_in_background()  # beside the images' and curves' compiled loops (nogil), not after them

    branches = [b for b in ("standard", "thick", "incoherent") if b in result]
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
            if b == "incoherent":  # the whole film's image: the sum of its depth sections
                images[b] = depth_sections(session, p, sections=result[b]["sections"],
                                           rotation=result["rotation_rad"]).sum(0)
                continue
            kw = {"thickness": p["thickness"], "tilt": (p["tilt_y"], p["tilt_x"])} if b == "thick" else {}
            images[b] = session.image(parameters_to_aberrations(p), "thick" if b == "thick" else "ssb", **kw)
    finally:
        session.rotation = saved
    curves = agreement_curves(session, result, progress=progress)
    cols = max(len(branches) + 1, len(names))
    fig, axes = subplots(2, cols, figsize=(3.6 * cols, 7.0), squeeze=False)
    sy, sx = session.scan_shape
    step_y, step_x = scan_steps(session.scan_step)
    for i, b in enumerate(branches):
        im = axes[0, i].imshow(images[b], cmap="gray", extent=(0, sx * step_x, sy * step_y, 0))
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
    for ax in fig.axes:  # tick labels are most of the drawing (0.42 of a 0.52 s draw): four a side are enough
        ax.locator_params(nbins=4)
    fig.suptitle(f"scan rotation {np.rad2deg(result['rotation_rad']):.2f} deg; better: {best}")
    # fixed margins: tight_layout drew the figure once more to measure it (0.38 of a 1.9 s plot)
    fig.subplots_adjust(left=0.06, right=0.97, bottom=0.08, top=0.9, wspace=0.45, hspace=0.35)
    save_png(fig, path, dpi=100)
