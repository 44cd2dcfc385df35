"""Detector file readers for :func:`qora.ssb.load_data`: Quantum Detectors Merlin ``.mib`` (with
its ``.hdr``) and fpd HDF5 (``fpd_expt/fpd_data/data``). Each returns ``(data, metadata)`` with
``data`` lazy (a dask array or an h5py dataset) shaped (scan_row, scan_col, det_row, det_col).

Merlin: rosettasciio reads the counter depths 1, 6, 12 and 24 in normal (``U08``/``U16``/``U32``)
frames; the RAW frames (``R64``) it refuses are decoded here (:func:`decode_raw`) from the
documented layout, single chip or quad, counter depths 1, 6, 12 and 24 (docs/ssb.md, "Merlin RAW
frames"). The scan shape comes from the ``.hdr`` (frames in acquisition / frames per trigger, one
trigger a scan row) or, for a scan triggered a pixel at a time, from the pauses in the frames' time
stamps at the end of each row (rosettasciio's); a single frame, or a series with no scan shape, is
refused unless the caller gives one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from qora.io.errors import FileFormatError, NamedReads

__all__ = ["read_mib", "read_fpd", "is_fpd", "MERLIN_DTYPES", "MAX_FRAME_HEADER", "MAX_FRAME_BYTES",
           "merlin_frame_header", "decode_raw_1bit", "decode_raw", "RAW_BITS", "header_fields", "header_number",
           "check_raw", "Layout", "parse_axis_order", "lazy_array", "AXIS_ORDERS", "read_dectris"]

MERLIN_DTYPES = {"U08": ">u1", "U16": ">u2", "U32": ">u4"}  # normal frames: counter depths 1 and 6, 12, 24


# what a Merlin's frame header may declare: a frame header is 384 bytes (single chip) or 768 (quad), a frame's
# pixels 1 MiB at most (a 512 x 512 quad of 32-bit counts); the bounds leave room and stop a damaged header
# (or a peer on the network) from making a reader allocate or map what no Merlin sends
MAX_FRAME_HEADER = 1 << 20
MAX_FRAME_BYTES = 64 << 20
MAX_FRAME_SIDE = 8192

RAW_BITS = {1: 1, 6: 8, 12: 16, 24: 32}  # RAW (R64) bits a pixel by counter depth; 24: two 12-bit counters
EXTENDED = "MQ1A"  # the extended frame header's marker: its time stamp, the exposure in ns, the counter depth follow


def merlin_frame_header(head: list[str], *, counter_depth: int | None = None) -> dict:
    """The fields of a Merlin frame header (``MQ1,...`` split at commas) that place and decode its
    pixels: ``number`` (the frame's sequence number, from 1), ``header_size`` and ``payload``
    (bytes), ``rows``, ``cols``, ``pixel_format`` (U08/U16/U32, or R64 for RAW), ``assembly``,
    ``counter_depth`` (the header's, else ``counter_depth``, the acquisition header's; None when
    neither says). A RAW frame's payload depends on its counter depth (:data:`RAW_BITS`); a RAW
    quad's header gives its chips side by side (4 x 256 columns, 256 rows: the order they are
    sent, :func:`decode_raw`), ``rows`` and ``cols`` here are the assembled frame's (512 x 512).
    The same header starts each frame of a ``.mib`` file and each frame message of the TCP stream."""
    if not head or head[0] != "MQ1" or len(head) < 8:
        raise FileFormatError(f"not a Merlin frame header (it does not start with MQ1): {','.join(head[:8])[:120]!r}")
    fields = [head[i].strip() for i in (1, 2, 4, 5)]
    if not all(f.isdigit() and f.isascii() and len(f) <= 12 for f in fields):
        raise FileFormatError(f"a Merlin frame header with non-numeric fields: {','.join(head[:8])[:120]!r}")
    number, header_size, cols, rows = (int(f) for f in fields)
    if not (len(",".join(head[:8])) < header_size <= MAX_FRAME_HEADER):
        raise FileFormatError(f"a Merlin frame header that declares itself {header_size} bytes long (its fields take "
                              f"{len(','.join(head[:8])) + 1}, a Merlin's is 384 or 768, at most {MAX_FRAME_HEADER}): "
                              f"{','.join(head[:8])[:120]!r}")
    if not (1 <= rows <= MAX_FRAME_SIDE and 1 <= cols <= MAX_FRAME_SIDE):
        raise FileFormatError(f"a Merlin frame header that declares {rows} x {cols} pixels (each side 1 to "
                              f"{MAX_FRAME_SIDE}): {','.join(head[:8])[:120]!r}")
    # the extended header (MerlinEM 0.7x and later; the DAC values before it vary in number with the
    # chip type): its marker, time stamp, exposure in ns, then the counter depth
    marker = head.index(EXTENDED) if EXTENDED in head else -1
    depth = head[marker + 3].strip() if 0 <= marker < len(head) - 3 else ""
    depth = int(depth) if depth.isdigit() and depth.isascii() and len(depth) <= 3 else counter_depth
    fmt = head[6]
    if fmt == "R64":
        if depth not in RAW_BITS:
            raise FileFormatError(f"a RAW Merlin frame of counter depth {depth if depth is not None else 'unknown'}: "
                                  f"neither its header nor the acquisition header gives one of 1, 6, 12, 24")
        payload = rows * cols * RAW_BITS[depth] // 8
        quad = head[7].replace(" ", "").upper() == "2X2"
        if (rows * cols * RAW_BITS[depth]) % 64 or (quad and cols % 4):  # whole 64-bit words; four chips a row
            raise FileFormatError(f"a RAW Merlin frame header that declares {rows} x {cols} pixels of {depth} bits "
                                  f"({'a 2x2 quad, ' if quad else ''}not a whole number of 64-bit words"
                                  f"{' of four chips' if quad else ''})")
        if quad:  # the chips side by side: the frame they make
            rows, cols = 2 * rows, cols // 2
    elif fmt in MERLIN_DTYPES:
        payload = rows * cols * np.dtype(MERLIN_DTYPES[fmt]).itemsize
    else:
        raise FileFormatError(f"unknown Merlin pixel format {fmt[:16]!r}")
    if payload > MAX_FRAME_BYTES:
        raise FileFormatError(f"a Merlin frame header that declares {rows} x {cols} {fmt} pixels, {payload} bytes: "
                              f"more than a Merlin frame holds (at most {MAX_FRAME_BYTES} bytes)")
    return {"number": number, "header_size": header_size, "payload": payload, "rows": rows, "cols": cols,
            "pixel_format": fmt, "assembly": head[7].strip(), "counter_depth": depth}


def _raw_counters(block: np.ndarray, depth: int) -> np.ndarray:
    """RAW payloads (frames, bytes) uint8 as the pixels in the order the chips send them (frames,
    pixels): every 64-bit word's bytes reversed, which makes its pixels little-endian and in order
    (1-bit: each byte least significant bit first; 6-bit: one byte a pixel; 12-bit: two)."""
    n = block.shape[0]
    words = np.ascontiguousarray(block.reshape(n, -1, 8)[:, :, ::-1]).reshape(n, -1)
    if depth == 1:
        return np.unpackbits(words, axis=-1, bitorder="little")
    if depth == 6:
        return words
    if depth == 12:
        return words.view("<u2")
    # 24: the frame is two 12-bit RAW frames, the counter of the high 12 bits first (docs/ssb.md)
    half = words.shape[1] // 2
    high, low = words[:, :half].view("<u2"), words[:, half:].view("<u2")
    return ((high & 0xFFF).astype(np.uint32) << 12) | (low & 0xFFF)


def decode_raw(block: np.ndarray, rows: int, cols: int, *, counter_depth: int = 1, assembly: str = "1x1") -> np.ndarray:
    """RAW (``R64``) frames (frames, payload) uint8 as (frames, rows, cols) counts: uint8 for the
    depths 1 and 6, uint16 for 12, uint32 for 24, the rows flipped as the normal frames' (row 0 at
    the top).

    A single chip's pixels come in reading order. A quad (``assembly`` "2x2", ``rows`` x ``cols``
    the assembled frame) sends one row of each of its four chips side by side, rows // 2 times:
    strip 3 of such a row is the top-left chip, strip 2 the top-right, strips 1 and 0 the
    bottom-left and bottom-right turned by 180 degrees (the lower chips are mounted rotated). The
    layout is the one LiberTEM's reader decodes from Quantum Detectors' quad files; the frame is
    then the normal (``U16``) frame of the same acquisition, rows flipped as those are.
    """
    if counter_depth not in RAW_BITS:
        raise FileFormatError(f"RAW Merlin counter depth {counter_depth}: 1, 6, 12 or 24")
    n = block.shape[0]
    pixels = _raw_counters(np.asarray(block, np.uint8).reshape(n, -1), counter_depth)
    if assembly.replace(" ", "").upper() == "1X1":
        frames = pixels.reshape(n, rows, cols)
    elif assembly.replace(" ", "").upper() == "2X2":
        h, w = rows // 2, cols // 2
        strips = pixels.reshape(n, h, 4, w)
        frames = np.empty((n, rows, cols), pixels.dtype)
        frames[:, :h, :w] = strips[:, :, 3]
        frames[:, :h, w:] = strips[:, :, 2]
        frames[:, h:, :w] = strips[:, ::-1, 1, ::-1]
        frames[:, h:, w:] = strips[:, ::-1, 0, ::-1]
    else:
        raise FileFormatError(f"RAW Merlin frames of a {assembly!r} assembly: 1x1 or 2x2")
    return frames[:, ::-1, :]


def decode_raw_1bit(block: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """RAW 1-bit single-chip frames (frames, rows * cols // 8) uint8 as (frames, rows, cols) uint8
    (:func:`decode_raw`)."""
    return decode_raw(block, rows, cols, counter_depth=1)


def _hdr(path: Path) -> dict:
    """The ``.hdr`` beside a ``.mib`` as a dict of its ``key: value`` lines ({} when there is none)."""
    hdr = path.with_suffix(".hdr")
    if not hdr.is_file():
        return {}
    return header_fields(hdr.read_bytes().decode("latin-1"))


def header_fields(text: str) -> dict:
    """A Merlin header's ``key:<tab>value`` lines as a dict."""
    fields = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields[key.strip()] = value.strip()
    return fields


def header_number(header: dict, key: str, where: str) -> int:
    """A whole number of a Merlin acquisition header (``.hdr`` or the stream's ``HDR``; 0 where it
    does not give it); a value that is not one is a FileFormatError naming the field."""
    text = str(header.get(key, "") or "0").strip()
    if not (text.isdigit() and text.isascii()) or len(text) > 12:
        raise FileFormatError(f"{where}: the acquisition header's {key!r} is {text[:40]!r}, not a whole number")
    return int(text)


def _frame_header(path: Path) -> list[str]:
    with open(path, "rb") as f:
        head = f.read(768).decode("latin-1").split(",")
    if not head or head[0] != "MQ1":
        raise FileFormatError(f"{path}: not a Merlin .mib file (it does not start with an MQ1 frame header)")
    return head


def _detector(path: Path, head: list[str], hdr: dict) -> dict:
    """The detector metadata: what the frame header and the .hdr say about the Merlin."""
    depth = hdr.get("Counter Depth (number)")
    det = {"name": "Quantum Detectors Merlin", "assembly": head[7].strip(), "raw": head[6] == "R64",
           "pixel_format": head[6]}
    try:
        det["exposure_s"] = float(head[10]) * 1e-3
    except (IndexError, ValueError):
        pass  # a header without its exposure: not needed to read the frames
    if depth and depth.strip().isdigit() and depth.strip().isascii():
        det["counter_depth"] = int(depth)
    for key, name in (("Chip Type (Medipix 3.0, Medipix 3.1, Medipix 3RX)", "chip"),
                      ("Chip Mode  (SPM, CSM, CM, CSCM)", "chip_mode"), ("Gain", "gain"),
                      ("Trigger Start (Positive, Negative, Internal)", "trigger_start")):
        if hdr.get(key):
            det[name] = hdr[key]
    if hdr.get("Thresholds (keV)"):
        try:
            det["thresholds_kev"] = [float(v) for v in hdr["Thresholds (keV)"].split(",")][:2]
        except ValueError:
            pass  # damaged thresholds: metadata only
    return det


def _scan_shape(path: Path, frames: int, frame: tuple, hdr: dict, scan_shape):
    """(rows, cols) of the scan: the caller's; else the .hdr's frames per trigger when a trigger
    starts each scan row; None for a scan triggered a pixel at a time (the rows are found from the
    frames' time stamps); else refused: a single frame, or a series with no scan shape."""
    what = f"{frames} frame{'s' if frames != 1 else ''} of {frame[0]}x{frame[1]}"
    if scan_shape is not None:
        rows, cols = (int(v) for v in scan_shape)
        if rows * cols != frames:
            raise FileFormatError(f"{path}: holds {what}; the scan shape {rows}x{cols} given needs {rows * cols}")
        return rows, cols
    if frames == 1:
        raise FileFormatError(f"{path}: holds {what}: a single diffraction pattern, not a 4D-STEM scan")
    per_trigger = header_number(hdr, "Frames per Trigger (Number)", str(path.with_suffix(".hdr")))
    if 1 < per_trigger < frames and frames % per_trigger == 0:
        return frames // per_trigger, per_trigger
    if per_trigger == 1 and hdr.get("Trigger Start (Positive, Negative, Internal)", "Internal") != "Internal":
        return None
    raise FileFormatError(f"{path}: holds {what} with no scan shape (an internally triggered series); give the "
                          f"scan shape: load_data(path, scan_shape=(rows, cols))")


def read_mib(path, scan_shape=None):
    """``(data, metadata)`` of a Merlin ``.mib``: data lazy, (scan_row, scan_col, det_row, det_col),
    the detector rows flipped as rosettasciio does (row 0 at the top); metadata ``detector``."""
    path = Path(path)
    head = _frame_header(path)
    hdr = _hdr(path)
    depth = header_number(hdr, "Counter Depth (number)", str(path.with_suffix(".hdr"))) or None
    try:
        frame = merlin_frame_header(head, counter_depth=depth)
    except FileFormatError as error:
        raise FileFormatError(f"{path}: {error}") from None
    header_size, payload, rows, cols = frame["header_size"], frame["payload"], frame["rows"], frame["cols"]
    raw = head[6] == "R64"
    if raw:
        depth = check_raw(hdr, frame["assembly"], str(path), counter_depth=frame["counter_depth"])
    size = path.stat().st_size
    frames, extra = divmod(size, header_size + payload)
    if frames == 0 or extra:
        raise FileFormatError(f"{path}: {size} bytes is not a whole number of {rows}x{cols} {head[6]} frames "
                              f"({header_size + payload} bytes each); truncated?")
    shape = _scan_shape(path, frames, (rows, cols), hdr, scan_shape)
    if raw and shape is not None:
        data = _raw_frames(path, frames, header_size, payload, rows, cols, depth, frame["assembly"]).reshape(
            *shape, rows, cols)
    elif raw:
        raise FileFormatError(f"{path}: RAW frames of a scan triggered a pixel at a time: give the scan shape: "
                              f"load_data(path, scan_shape=(rows, cols))")
    else:
        from rsciio.quantumdetector import file_reader

        nav = None if shape is None else (shape[1], shape[0])  # rosettasciio's order: (cols, rows)
        try:
            data = file_reader(str(path), lazy=True, navigation_shape=nav)[0]["data"]
        except MemoryError:
            raise
        except Exception as exc:  # noqa: BLE001 - a damaged file makes rosettasciio raise anything
            raise FileFormatError(f"{path}: cannot be read as Merlin frames of {rows}x{cols} {head[6]} "
                                  f"({type(exc).__name__}: {' '.join(str(exc).split())[:200]})") from exc
        if data.ndim != 4 or min(data.shape[:2]) < 2:
            raise FileFormatError(f"{path}: holds {frames} frames of {rows}x{cols}, triggered a pixel at a time, "
                                  f"whose time stamps show no scan rows; give the scan shape: "
                                  f"load_data(path, scan_shape=(rows, cols))")
    return data, {"detector": _detector(path, head, hdr)}


def check_raw(hdr: dict, assembly: str, where: str, *, counter_depth: int | None = None) -> int:
    """The counter depth of RAW frames (the frame header's ``counter_depth``, else the ``.hdr``'s);
    refused unless 1, 6, 12 or 24 on a single chip or a quad (the layouts :func:`decode_raw` knows)."""
    depth = counter_depth or header_number(hdr, "Counter Depth (number)", where)
    if depth not in RAW_BITS or assembly.replace(" ", "").upper() not in ("1X1", "2X2"):
        raise FileFormatError(f"{where}: RAW Merlin frames of counter depth {depth or '?'} on a "
                              f"{assembly} assembly are not supported (RAW: depths 1, 6, 12, 24, single chip or 2x2)")
    return depth


def _raw_frames(path: Path, frames: int, header_size: int, payload: int, rows: int, cols: int, depth: int,
                assembly: str):
    """RAW frames, lazily: a dask array (frames, rows, cols) decoded a block of frames at a time
    from a memory map of the file."""
    import dask.array as da

    mm = np.memmap(path, dtype=np.uint8, mode="r", shape=(frames, header_size + payload))[:, header_size:]
    per_block = max(1, (16 << 20) // max(1, payload))

    def decode(block):
        return decode_raw(block, rows, cols, counter_depth=depth, assembly=assembly)

    dtype = {1: np.uint8, 6: np.uint8, 12: np.uint16, 24: np.uint32}[depth]
    lazy = da.from_array(mm, chunks=(per_block, -1))
    return lazy.map_blocks(decode, dtype=dtype, chunks=(lazy.chunks[0], (rows,), (cols,)), new_axis=2)


def is_fpd(path) -> bool:
    """Whether an HDF5 file is an fpd one (``fpd_expt/fpd_data/data``)."""
    import h5py

    with h5py.File(path, "r") as f:
        return isinstance(f.get("fpd_expt/fpd_data/data"), h5py.Dataset)


def read_fpd(path):
    """``(data, metadata)`` of an fpd HDF5 file: the h5py dataset ``fpd_expt/fpd_data/data`` (read
    lazily; the file stays open while it is referenced), its axes checked against the ``dim1..dim4``
    names (scanY, scanX, detY, detX); metadata ``kv`` and ``scan_step_a`` (A, from nm) where the file
    has them, ``camera_length_m``, and the Merlin ``detector``."""
    import h5py

    path = Path(path)
    f = h5py.File(path, "r")
    group = f["fpd_expt/fpd_data"]
    data = group["data"]
    names = [group[f"dim{i}"].attrs.get("name", "") if f"dim{i}" in group else "" for i in range(1, 5)]
    names = [n.decode() if isinstance(n, bytes) else str(n) for n in names]
    if data.ndim != 4 or names != ["scanY", "scanX", "detY", "detX"]:
        f.close()
        raise FileFormatError(f"{path}: fpd_expt/fpd_data/data {data.shape} has axes {names}, expected "
                              f"(scanY, scanX, detY, detX)")
    meta: dict = {}
    steps = []
    for i in (1, 2):
        dim = group[f"dim{i}"]
        unit = dim.attrs.get("units", "")
        unit = unit.decode() if isinstance(unit, bytes) else str(unit)
        if dim.shape[0] > 1 and unit in ("nm", "A", "Å"):
            steps.append(float(dim[1] - dim[0]) * (10.0 if unit == "nm" else 1.0))
    if len(steps) == 2:  # one number for a square grid, else (step_y, step_x)
        meta["scan_step_a"] = steps[0] if np.isclose(steps[0], steps[1], rtol=1e-6) else (steps[0], steps[1])
    desc = f.get("fpd_expt/TIA0/tags/ObjectInfo/ExperimentalDescription")
    if desc is not None:
        if "High tension_kV" in desc:
            meta["kv"] = float(desc["High tension_kV"][()])
        if "Camera length_m" in desc:
            meta["camera_length_m"] = float(desc["Camera length_m"][()])
    hdr = f.get("fpd_expt/merlin_hdr")
    if hdr is not None and "string" in hdr.attrs:
        text = hdr.attrs["string"]
        text = text.decode() if isinstance(text, bytes) else str(text)
        fields = header_fields(text)
        det = {"name": "Quantum Detectors Merlin", "assembly": fields.get("Assembly Size (NX1, 2X2)", "")}
        if fields.get("Counter Depth (number)"):
            det["counter_depth"] = int(fields["Counter Depth (number)"])
        meta["detector"] = det
    return data, meta


# -- the data layout: how a file's axes map onto (scan_row, scan_col, det_row, det_col) ---------------

AXES = ("scan_row", "scan_col", "det_row", "det_col")
_ALIASES = {"scan_row": "scan_row", "scan_y": "scan_row", "sy": "scan_row", "scan_col": "scan_col",
            "scan_x": "scan_col", "sx": "scan_col", "det_row": "det_row", "det_y": "det_row", "ky": "det_row",
            "det_col": "det_col", "det_x": "det_col", "kx": "det_col"}
AXIS_ORDERS = {
    "scan-scan-det-det": AXES,
    "det-det-scan-scan": ("det_row", "det_col", "scan_row", "scan_col"),
    # abTEM (and other x-first codes): (scan x, scan y, k_x, k_y), x the first axis, y the second
    "x,y": ("scan_col", "scan_row", "det_col", "det_row"),
}


def parse_axis_order(text) -> tuple:
    """The file's axes in Qora's names, from a preset (``scan-scan-det-det``, ``det-det-scan-scan``,
    ``x,y``: abTEM's x-first (scan_x, scan_y, k_x, k_y)) or four names separated by commas, each one
    of scan_row/scan_y, scan_col/scan_x, det_row/det_y/ky, det_col/det_x/kx, every axis once."""
    from qora.io.errors import InputError

    if isinstance(text, (tuple, list)):
        names = [str(n) for n in text]
    else:
        text = str(text).strip().lower().replace(" ", "")
        if text in AXIS_ORDERS:
            return AXIS_ORDERS[text]
        if text in ("xy", "abtem"):
            return AXIS_ORDERS["x,y"]
        names = text.split(",")
    try:
        order = tuple(_ALIASES[n.strip().lower()] for n in names)
    except KeyError:
        order = ()
    if sorted(order) != sorted(AXES):
        raise InputError(f"axis order {text!r}: give one of {', '.join(AXIS_ORDERS)} or the four axes of the file in "
                         f"its order, e.g. 'scan_x,scan_y,det_x,det_y' (each of scan_row/scan_y, scan_col/scan_x, "
                         f"det_row/det_y, det_col/det_x once)")
    return order


@dataclass(frozen=True)
class Layout:
    """How a file's array maps onto Qora's (scan_row, scan_col, det_row, det_col), applied at load
    time and lazily (views of a memory map, dask operations on a dask array), in this order:

    ``axis_order``: the file's axes in Qora's names (:func:`parse_axis_order`; default Qora's own);
    ``transpose_detector``: swap det_row and det_col (a detector mounted with its axes swapped
    against the scan's); ``flip_detector_rows`` / ``flip_detector_cols``: reverse the detector's rows
    / columns (a mirrored detector); ``flip_scan_rows`` / ``flip_scan_cols``: reverse the scan's
    rows / columns (a scan run bottom to top or right to left)."""

    axis_order: tuple = AXES
    transpose_detector: bool = False
    flip_detector_rows: bool = False
    flip_detector_cols: bool = False
    flip_scan_rows: bool = False
    flip_scan_cols: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "axis_order", parse_axis_order(self.axis_order))

    @property
    def identity(self) -> bool:
        return self == Layout()

    def describe(self) -> str:
        """One line: what is done to the file's axes (for the CLI's report)."""
        steps = [f"axes ({', '.join(self.axis_order)})"]
        steps += [name.replace("_", " ") for name in ("transpose_detector", "flip_detector_rows", "flip_detector_cols",
                                                       "flip_scan_rows", "flip_scan_cols") if getattr(self, name)]
        return "; ".join(steps)

    def apply(self, data):
        """``data`` (a 4D array in the file's order: NumPy, memory map, dask) in Qora's order, lazily;
        an h5py dataset becomes a dask array over it first (h5py has no lazy transpose)."""
        from qora.io.errors import InputError

        if self.identity:
            return data
        if getattr(data, "ndim", None) != 4:
            raise InputError(f"a layout applies to 4D data, got shape {getattr(data, 'shape', None)}")
        data = lazy_array(data, required=True)
        data = data.transpose([self.axis_order.index(a) for a in AXES])
        if self.transpose_detector:
            data = data.transpose(0, 1, 3, 2)
        flips = (self.flip_scan_rows, self.flip_scan_cols, self.flip_detector_rows, self.flip_detector_cols)
        return data[tuple(slice(None, None, -1) if f else slice(None) for f in flips)]


def lazy_array(data, *, required: bool = False):
    """An h5py dataset (or any array-like that reads by slicing) as a dask array in blocks of whole
    scan rows of about 64 MB, each read when needed; NumPy and dask arrays as they are. Without dask
    (the ``dask`` extra) the dataset itself, which the Session also reads by slicing; ``required``:
    a MissingExtra instead (a layout's lazy transpose needs dask)."""
    if isinstance(data, np.ndarray) or hasattr(data, "compute"):
        return data
    try:
        import dask.array as da
    except ImportError:
        if required:
            from qora.io.errors import MissingExtra

            raise MissingExtra("reordering the axes of data read lazily needs dask (pip install 'qora[dask]')") \
                from None
        return data

    row = int(np.prod(data.shape[1:])) * np.dtype(data.dtype).itemsize
    rows = max(1, min(data.shape[0], (64 << 20) // max(1, row)))
    filename = getattr(getattr(data, "file", None), "filename", None)  # an HDF5 dataset: its reads name the file
    source = NamedReads(data, filename) if filename else data
    return da.from_array(source, chunks=(rows,) + tuple(data.shape[1:]), lock=True, asarray=True)


# -- DECTRIS (Arina, Quadro, ...) NeXus masters ----------------------------------------------------

def _electron_kv(wavelength_a: float) -> float:
    """The accelerating voltage (kV) of electrons of relativistic wavelength ``wavelength_a`` (A):
    the inverse of qora.ssb.optics.wavelength, h c / lambda = sqrt(E (E + 2 m c^2))."""
    hc_kev_a = 12.398419843320026  # h c (keV A)
    mc2_kev = 510.99895000
    pc = hc_kev_a / wavelength_a
    return float(np.sqrt(pc * pc + mc2_kev * mc2_kev) - mc2_kev)


def read_dectris(path, *, scan_shape=None):
    """``(data, metadata)`` of a DECTRIS NeXus master (``entry/data/data_000001``, ... each an
    external link to a data file's (frames, det_row, det_col) stack, bitshuffle/LZ4 compressed):
    the stacks joined lazily (a dask array of whole frames read when needed), (frames, det_row,
    det_col) - a master does not record the scan, so :func:`qora.ssb.load_data` shapes it with the
    ``scan_shape`` given. Pixels marked in ``detectorSpecific/pixel_mask`` (dead, hot, the gaps of
    a multi-chip module) read 0. Metadata: ``kv`` from ``beam/incident_wavelength``,
    ``camera_length_m`` from ``detector_distance`` and ``detector_pixel_mrad`` = pixel size /
    camera length (valid where the acquisition wrote the effective camera length: the CLI warns
    when it disagrees with the bright-field disk), the ``detector``'s name, pixel size, bit depth,
    count time and masked pixels."""
    import dask.array as da
    import h5py

    try:
        import hdf5plugin  # noqa: F401 - registers the bitshuffle/LZ4 filters the data files use
    except ImportError:
        from qora.io.errors import MissingExtra

        raise MissingExtra(f"{path}: DECTRIS data are bitshuffle/LZ4 compressed: reading them needs hdf5plugin "
                           "(pip install 'qora[formats]')") from None
    path = Path(path)
    f = h5py.File(path, "r")
    group = f["entry/data"]
    names = sorted(k for k in group.keys() if k.startswith("data_"))
    stacks = []
    for name in names:
        try:
            dset = group[name]
        except KeyError:  # an external link whose data file is missing
            link = group.get(name, getlink=True)
            target = getattr(link, "filename", "?")
            f.close()
            raise FileFormatError(f"{path}: entry/data/{name} links to {target}, which is missing (keep the data "
                                  "files beside the master)") from None
        if not isinstance(dset, h5py.Dataset) or dset.ndim != 3:
            shape = getattr(dset, "shape", "a group")
            f.close()
            raise FileFormatError(f"{path}: entry/data/{name} must be a stack of frames (frames, det_row, det_col), "
                                  f"it is {shape}")
        frames = max(1, min(dset.shape[0], (64 << 20) // max(1, int(np.prod(dset.shape[1:])) * dset.dtype.itemsize)))
        target = Path(path).parent / getattr(group.get(name, getlink=True), "filename", path.name)
        stacks.append(da.from_array(NamedReads(dset, target), chunks=(frames, -1, -1), lock=True, asarray=True))
    if not stacks:
        f.close()
        raise FileFormatError(f"{path}: a DECTRIS master with no data_ links in entry/data")
    if len({s.shape[1:] for s in stacks}) != 1:
        f.close()
        raise FileFormatError(f"{path}: the data files' frames differ in shape: {[s.shape for s in stacks]}")
    data = da.concatenate(stacks, axis=0) if len(stacks) > 1 else stacks[0]
    meta: dict = {}
    det = {"name": "DECTRIS"}
    d = f.get("entry/instrument/detector")

    def value(key, group=d):
        item = group.get(key) if group is not None else None
        if isinstance(item, h5py.Dataset):
            v = item[()]
            return v.decode() if isinstance(v, bytes) else v
        return None

    if d is not None:
        if value("description"):
            det["name"] = str(value("description"))
        pixel = value("x_pixel_size")
        if pixel is not None and value("y_pixel_size") not in (None, pixel):
            pixel = None  # rectangular pixels: no one scattering angle per pixel
        distance = value("detector_distance")
        if pixel is not None:
            det["pixel_size_m"] = float(pixel)
        if distance is not None and float(distance) > 0:
            meta["camera_length_m"] = float(distance)
            if pixel is not None:
                meta["detector_pixel_mrad"] = float(pixel) / float(distance) * 1e3
        for key, name in (("bit_depth_image", "bit_depth"), ("count_time", "count_time_s")):
            if value(key) is not None:
                det[name] = value(key).item() if hasattr(value(key), "item") else value(key)
        mask = d.get("detectorSpecific/pixel_mask")
        if isinstance(mask, h5py.Dataset) and mask.shape == tuple(data.shape[1:]):
            bad = np.asarray(mask[...]) != 0
            if bad.any():
                det["masked_pixels"] = int(bad.sum())
                data = da.where(bad[None], data.dtype.type(0), data)
    beam = f.get("entry/instrument/beam")
    wavelength = value("incident_wavelength", beam)
    if wavelength is not None and float(wavelength) > 0:
        unit = beam["incident_wavelength"].attrs.get("units", "angstrom")
        unit = unit.decode() if isinstance(unit, bytes) else str(unit)
        scale = {"angstrom": 1.0, "A": 1.0, "Å": 1.0, "nm": 10.0, "pm": 0.01, "m": 1e10}.get(unit)
        if scale is None:
            f.close()
            raise FileFormatError(f"{path}: entry/instrument/beam/incident_wavelength in unknown units {unit!r}")
        meta["kv"] = _electron_kv(float(wavelength) * scale)
    meta["detector"] = det
    return data, meta
