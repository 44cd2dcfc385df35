"""What the viewer shows, per kind of file: a 4D-STEM dataset (a Session and its previews),
a phase result, a holography volume or series. Every input from the page is checked here
(names, types, ranges) before it reaches the engines; a bad one raises :class:`BadRequest`."""

from __future__ import annotations

import math
import threading
import time
from pathlib import Path

import numpy as np

from qora.io.errors import InputError
from qora.plot import png
from qora.ssb import PREVIEW_METHODS, SSB_SLIDERS, slider_parameters, slider_start

__all__ = ["BadRequest", "open_view", "SsbView", "PhaseView", "HoloView", "BraggView", "SSB_SLIDERS"]


class BadRequest(ValueError):
    """An input from the page that is not acceptable (the message says why)."""


def _shown(value, limit: int = 40) -> str:
    """``repr(value)`` cut to ``limit`` characters (a request may carry a 5,000-digit number)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10**30:
        return f"an integer of {len(str(abs(value))) if abs(value) < 10**4000 else 'thousands of'} digits"
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def number(value, name: str, lo: float, hi: float) -> float:
    """A finite number within [lo, hi] (bools and strings are refused)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadRequest(f"{name} must be a number, got {type(value).__name__}")
    try:
        value = float(value)
    except OverflowError:
        raise BadRequest(f"{name} must be within [{lo:g}, {hi:g}], got {_shown(value)}") from None
    if not math.isfinite(value) or not lo <= value <= hi:
        raise BadRequest(f"{name} must be within [{lo:g}, {hi:g}], got {value!r}")
    return value


def query_number(query, key: str, lo: float, hi: float, default: float) -> float:
    """A number from the query string (``lo=0.5``): the default when absent, else a finite
    number within [lo, hi] (``lo=abc`` is refused)."""
    if key not in query:
        return default
    text = str(query[key]).strip()
    try:
        value = float(text) if len(text) <= 64 else math.inf
    except ValueError:
        raise BadRequest(f"{key} must be a number, got {_shown(text)}") from None
    return number(value, key, lo, hi)


def integer(value, name: str, lo: int, hi: int) -> int:
    if isinstance(value, str):
        text = value.strip()
        if len(text) > 20:
            raise BadRequest(f"{name} must be within [{lo}, {hi}], got {len(text)} characters")
        if text.lstrip("-").isdigit():
            value = int(text)
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRequest(f"{name} must be an integer, got {_shown(value)}")
    if not lo <= value <= hi:
        raise BadRequest(f"{name} must be within [{lo}, {hi}], got {_shown(value)}")
    return value


def ssb_parameters(values: dict) -> dict:
    """Slider values from the page -> :meth:`Session.preview`'s parameters
    (:func:`qora.ssb.sliders.slider_parameters`, the widget's too); a bad value is a BadRequest."""
    try:
        return slider_parameters(values, number=number)
    except InputError as exc:
        raise BadRequest(str(exc)) from None




def _method(body: dict) -> str:
    method = body.get("method", "ssb")
    if method not in PREVIEW_METHODS:
        raise BadRequest(f"method must be one of {', '.join(PREVIEW_METHODS)}, got {_shown(method)}")
    return method


class SsbView:
    """A 4D-STEM dataset held in a :class:`qora.ssb.Session` (on the GPU where there is one)."""

    kind = "ssb"

    def __init__(self, session, *, name: str, aberrations=None) -> None:
        self.path = Path(name)
        self.session = session
        self.meta = {"kv": session.kv, "alpha_mrad": session.alpha_mrad, "scan_step_a": session.scan_step}
        # the sliders start at the aberrations the file records (a cold start, zeros, where none)
        self.start = slider_start(aberrations)
        self._lock = threading.Lock()
        self._latest: dict = {}  # the newest request number of each page
        self._fit = {"state": "idle"}
        self._fit_lock = threading.Lock()

    @classmethod
    def open(cls, path, *, backend="auto") -> "SsbView":
        """The view of a dataset file (its kv, semi-angle and scan step read from it)."""
        from qora.ssb import Session, load_data

        from qora.io.errors import FileFormatError, InputError

        data, meta = load_data(path)
        missing = [k for k in ("kv", "alpha_mrad", "scan_step_a") if k not in meta]
        if missing:
            raise FileFormatError(f"{path}: the viewer needs {missing} in the file (a qora dataset file holds them)")
        try:
            session = Session(data, kv=meta["kv"], alpha_mrad=meta["alpha_mrad"], scan_step=meta["scan_step_a"],
                              backend=backend)
        except InputError as exc:
            raise InputError(f"{path}: {exc}") from exc
        return cls(session, name=Path(path).name, aberrations=meta.get("aberrations"))

    def info(self) -> dict:
        sy, sx = self.session.scan_shape
        return {"kind": self.kind, "file": self.path.name, "scan": [sy, sx], **self.meta,
                "backend": self.session.backend.name, "bright_field_pixels": int(len(self.session.bf_index)),
                "sliders": {k: {"label": s[0], "unit": s[1], "min": s[2], "max": s[3], "step": s[4]}
                            for k, s in SSB_SLIDERS.items()},
                "start": self.start}

    def preview(self, body) -> tuple[bytes | None, dict]:
        """``{"params", "upsample", "method", "loss", "seq", "client"}`` -> (PNG or None if a newer request
        came in, headers). Requests run one at a time; one that waited while a newer one from the
        same page (``client``) arrived is dropped (the newest slider position wins)."""
        if not isinstance(body, dict):
            raise BadRequest("the request must be a JSON object")
        params = ssb_parameters(body.get("params", {}))
        upsample = integer(body.get("upsample", 1), "upsample", 1, 3)
        if upsample == 2:
            raise BadRequest("upsample must be 1 or 3")
        method = _method(body)
        loss = body.get("loss", False)
        if not isinstance(loss, bool):
            raise BadRequest("loss must be true or false")
        seq = integer(body.get("seq", 0), "seq", 0, 2**53)
        client = body.get("client", "")
        if not isinstance(client, str) or len(client) > 64:
            raise BadRequest("client must be a string of at most 64 characters")
        if len(self._latest) > 1000:  # forget old pages
            self._latest.clear()
        self._latest[client] = max(self._latest.get(client, 0), seq)
        with self._lock:
            if seq < self._latest[client]:
                return None, {"X-Seq": str(seq), "X-Superseded": "1"}
            t0 = time.perf_counter()
            out = self.session.preview(params, upsample=upsample, loss=loss, method=method)
            image, value = out if loss else (out, None)
            data, lo, hi = png(image)
            ms = (time.perf_counter() - t0) * 1e3
        headers = {"X-Seq": str(seq), "X-Server-Ms": f"{ms:.2f}", "X-Range": f"{lo:.6g},{hi:.6g}"}
        if value is not None:
            headers["X-Loss"] = f"{value:.8g}"
        return data, headers

    def image_npy(self, body) -> bytes:
        """The preview's phase (rad, float32) as a .npy file, for export."""
        import io

        params = ssb_parameters((body or {}).get("params", {}))
        upsample = integer((body or {}).get("upsample", 1), "upsample", 1, 3)
        with self._lock:
            image = self.session.preview(params, upsample=upsample, method=_method(body or {}))
        out = io.BytesIO()
        np.save(out, np.asarray(image, np.float32))
        return out.getvalue()

    # -- "fit from here": Newton from the sliders' values, in a thread, polled for progress ----
    def start_fit(self, body) -> dict:
        if not isinstance(body, dict):
            raise BadRequest("the request must be a JSON object")
        values = body.get("params", {})
        params = ssb_parameters(values)
        thick = "thickness" in params
        with self._fit_lock:
            if self._fit.get("state") == "running":
                raise BadRequest("a fit is already running")
            self._fit = {"state": "running", "done": 0, "total": 20, "stage": "newton"}
        threading.Thread(target=self._run_fit, args=(params, thick, dict(values)), daemon=True).start()
        return self.fit_status()

    def _run_fit(self, params: dict, thick: bool, values: dict) -> None:
        from qora.ssb import Band, newton

        try:
            names = ("C10", "C12a", "C12b") + (("thickness", "tilt_y", "tilt_x") if thick else ())
            with self._lock:
                band = Band(self.session, names, rotation=params["rotation"])
            fixed = {k: v for k, v in params.items() if k not in names and k != "rotation"}

            def progress(state) -> None:  # Newton's accepted steps (the start's evaluation is the first)
                self._fit["done"] = min(state.step + 1, 20)

            # the band holds its own rows of G: its evaluations touch no session state a preview changes
            fitted, agreement, _ = newton(band, {**fixed, **{n: params.get(n, 0.0) for n in names}}, callback=progress)
            result = dict(values)
            c12 = complex(fitted["C12a"], fitted["C12b"])
            result.update(C10=fitted["C10"], C12=abs(c12), C12_angle=math.degrees(np.angle(c12)) / 2)
            if thick:
                result.update(thickness=fitted["thickness"], tilt_y=fitted["tilt_y"] * 1e3,
                              tilt_x=fitted["tilt_x"] * 1e3)
            self._fit = {"state": "done", "done": 20, "total": 20, "result": result, "agreement": agreement}
        except Exception as exc:  # reported to the page, the server goes on
            self._fit = {"state": "error", "error": f"{type(exc).__name__}: {exc}"}

    def fit_status(self) -> dict:
        return dict(self._fit)


class LiveSsbView(SsbView):
    """The viewer's live mode: a :func:`qora.ssb.live.run_live` in a thread; each refresh swaps in
    the session of the rows so far, so the image builds up while the sliders still work on it;
    :meth:`live_status` gives the rows, the live fit (in the sliders' units) and the statistics."""

    kind = "ssb"

    def __init__(self, source, *, kv: float, alpha_mrad: float, scan_step: float, rotation=None, backend="auto",
                 options=None, on_end=None) -> None:
        from qora.ssb.live import LiveOptions

        self.path = Path(repr(source))
        self.session = None
        self.meta = {"kv": kv, "alpha_mrad": alpha_mrad, "scan_step_a": scan_step}
        self.start = slider_start(None)
        self._lock = threading.Lock()
        self._latest = {}
        self._fit = {"state": "idle"}
        self._fit_lock = threading.Lock()
        self._live = {"state": "running", "rows": 0, "fit": None, "statistics": {}}
        self.result = None
        args = dict(kv=kv, alpha_mrad=alpha_mrad, scan_step=scan_step, rotation=rotation, backend=backend,
                    options=options or LiveOptions())
        self._thread = threading.Thread(target=self._run, args=(source, args, on_end), daemon=True,
                                        name="qora-live-view")
        self._thread.start()

    def _swap(self, session, rows: int, fit, statistics) -> None:
        with self._lock:  # a preview in progress finishes on the session it started with
            self.session = session
        sliders = None
        if fit is not None:
            from qora.ssb import parameters_to_aberrations

            sliders = slider_start(parameters_to_aberrations(fit["standard"]["parameters"]))
            sliders["rotation"] = math.degrees(fit["rotation_rad"])
            sliders = {k: v for k, v in sliders.items() if v or k in ("C10", "C12", "rotation")}
        keep = ("received", "processed", "dropped", "late", "received_fps", "processed_fps", "rows_done")
        self._live.update(rows=rows, fit=sliders, statistics={k: statistics[k] for k in keep if k in statistics},
                          agreement=None if fit is None else fit["standard"]["agreement"])

    def _run(self, source, args, on_end) -> None:
        from qora.ssb.live import run_live

        try:
            result = run_live(source, on_update=lambda u: self._swap(u.session, u.rows, u.fit, u.statistics), **args)
            self.result = result
            self._swap(result.session, result.session.scan_shape[0], result.fit, result.statistics)
            self._live.update(state="done", latency_s=result.latency_s, report=str(result.report))
        except Exception as exc:  # reported to the page (and to on_end), the server goes on
            self._live.update(state="error", error=f"{type(exc).__name__}: {exc}")
        if on_end is not None:
            on_end(self)

    def wait(self, timeout: float | None = None) -> dict:
        """Wait for the run to end; its status."""
        self._thread.join(timeout)
        return self.live_status()

    def info(self) -> dict:
        with self._lock:
            session = self.session
        sy, sx = session.scan_shape if session is not None else (0, 0)
        return {"kind": self.kind, "file": self.path.name, "scan": [sy, sx], **self.meta, "live": True,
                "backend": session.backend.name if session is not None else "-",
                "bright_field_pixels": int(len(session.bf_index)) if session is not None else 0,
                "sliders": {k: {"label": s[0], "unit": s[1], "min": s[2], "max": s[3], "step": s[4]}
                            for k, s in SSB_SLIDERS.items()},
                "start": self.start}

    def preview(self, body) -> tuple[bytes | None, dict]:
        if self.session is None:
            raise BadRequest("no scan rows yet: the first image comes with the first refresh")
        return super().preview(body)

    def image_npy(self, body) -> bytes:
        if self.session is None:
            raise BadRequest("no scan rows yet")
        return super().image_npy(body)

    def start_fit(self, body) -> dict:
        if self.session is None:
            raise BadRequest("no scan rows yet")
        return super().start_fit(body)

    def live_status(self) -> dict:
        """``{"state": running|done|error, "rows", "fit" (slider values) or None, "agreement",
        "statistics", ...}``."""
        return dict(self._live)


class PhaseView:
    """A CDI result file: amplitude, phase and support (the central slice of a 3D object), the
    error curves of all starts, and the PRTF over the kept starts."""

    kind = "phase"

    def __init__(self, path, *, pattern=None) -> None:
        from qora.phase import read_result

        self.path = Path(path)
        self.result = read_result(path)
        self.prtf = self._prtf(pattern)

    def _prtf(self, pattern):
        from qora.phase import prtf

        objects = self.result.objects
        if objects is None or len(objects) < 2:
            return {"note": "the PRTF needs the starts kept (qora phase run --keep-all) and at least two"}
        if pattern is not None:
            from qora.io.patterns import load_pattern

            intensity, note = load_pattern(pattern)[0], f"against the measured pattern {Path(pattern).name}"
        else:  # no pattern: the best start's own modulus stands in for the measured one
            best = np.fft.fftshift(np.fft.fftn(np.fft.ifftshift(self.result.object), norm="ortho"))
            intensity, note = np.abs(best) ** 2, "against |F x| of the best start (no pattern given: --pattern)"
        q, curve = prtf(objects, intensity)
        return {"q": q.tolist(), "prtf": np.nan_to_num(curve).tolist(), "note": note}

    def info(self) -> dict:
        r = self.result
        errors = np.asarray(r.errors, float)
        stride = max(1, len(errors) // 1000)  # at most ~1000 points per curve
        return {"kind": self.kind, "file": self.path.name, "shape": list(r.object.shape), "starts": int(r.starts),
                "best": int(r.best), "recipe": r.recipe, "fourier_error": float(r.fourier_error),
                "errors": errors[::stride].T.tolist(), "error_stride": stride, "prtf": self.prtf}

    def image(self, what: str) -> tuple[bytes, dict]:
        """The central plane's amplitude, phase or support (:mod:`qora.phase.display`, the widget's too)."""
        from qora.phase import PLANES, result_png

        if what not in PLANES:
            raise BadRequest(f"image must be one of {sorted(PLANES)}, got {what!r}")
        data, lo, hi = result_png(self.result, what)
        return data, {"X-Range": f"{lo:.6g},{hi:.6g}"}


class HoloView:
    """A refractive-index volume file, or a time series store: orthogonal slices with a fixed
    colour scale, a line profile."""

    kind = "holo"

    def __init__(self, path) -> None:
        self.path = Path(path)
        if self.path.is_dir():
            from qora.distributed.holo import SeriesStore

            self.series = SeriesStore(path)
            self.times = sorted(self.series.index())
            if not self.times:
                raise ValueError(f"{path}: the series holds no volume yet")
            attrs = self.series.attrs
            self.pixel, self.medium = float(attrs["pixel_um"]), float(attrs["medium_index"])
            first = self.series.volume(self.times[0])
        else:
            from qora.holo import read_volume

            index, geometry, _ = read_volume(path)
            self.series, self.times, self._volume = None, [0], np.asarray(index, np.float32)
            if self._volume.ndim == 4:  # a series in one file (T, n, n, n)
                self.times = list(range(len(self._volume)))
            self.pixel, self.medium = float(geometry.pixel), float(geometry.medium_index)
            first = self._volume if self._volume.ndim == 3 else self._volume[0]
        self.shape = first.shape
        self.range = (float(first.min()), float(first.max()))
        self._cache: dict = {}

    def volume(self, t: int) -> np.ndarray:
        if t not in self.times:
            raise BadRequest(f"time point {t} is not in the file (have {self.times[0]}..{self.times[-1]})")
        if self.series is None:
            return self._volume if self._volume.ndim == 3 else self._volume[t]
        if t not in self._cache:
            self._cache = {t: self.series.volume(t)}  # one volume kept: a series can be large
        return self._cache[t]

    def info(self) -> dict:
        return {"kind": self.kind, "file": self.path.name, "shape": list(self.shape), "times": self.times,
                "pixel_um": self.pixel, "medium_index": self.medium, "range": list(self.range)}

    def _plane(self, query) -> tuple[np.ndarray, int, int]:
        from qora.holo import volume_plane

        axis = integer(query.get("axis", "0"), "axis", 0, 2)
        index = integer(query.get("index", str(self.shape[axis] // 2)), "index", 0, self.shape[axis] - 1)
        t = integer(query.get("t", str(self.times[0])), "t", min(self.times), max(self.times))
        return volume_plane(self.volume(t), axis, index), axis, index

    def slice_png(self, query) -> tuple[bytes, dict]:
        """A plane on a fixed scale (:mod:`qora.holo.display`, the widget's too)."""
        from qora.holo import plane_png

        plane, _, _ = self._plane(query)
        lo = query_number(query, "lo", -10.0, 10.0, self.range[0])
        hi = query_number(query, "hi", -10.0, 10.0, self.range[1])
        if not lo < hi:
            raise BadRequest(f"lo must be below hi, got lo={lo:g}, hi={hi:g}")
        data, lo, hi = plane_png(plane, lo, hi)
        return data, {"X-Range": f"{lo:.6g},{hi:.6g}"}

    def profile(self, query) -> dict:
        """The index along the plane's middle row (or ``row``), with positions in um."""
        plane, axis, index = self._plane(query)
        row = integer(query.get("row", str(plane.shape[0] // 2)), "row", 0, plane.shape[0] - 1)
        values = plane[row]
        x = (np.arange(len(values)) - len(values) // 2) * self.pixel
        return {"axis": axis, "index": index, "row": row, "x_um": x.tolist(), "index_values": values.tolist()}


class BraggView(HoloView):
    """A Bragg reconstruction (qora.phase.bragg_strain's result file): the strain along G on the orthogonal lab grid,
    in the volume view's orthogonal slices and line profile (NaN outside the support shown as 0)."""

    def __init__(self, path) -> None:
        import h5py

        self.path = Path(path)
        with h5py.File(path, "r") as f:
            strain = np.asarray(f["strain"][()], np.float32)
            self.pixel = float(f.attrs["voxel_a"]) * 1e-4  # A -> um, the volume view's unit
            self.d_spacing = float(f.attrs.get("d_spacing_a", np.nan))
        self.series, self.times, self._volume = None, [0], np.where(np.isfinite(strain), strain, 0.0)
        self.medium = None
        self.shape = self._volume.shape
        limit = float(np.percentile(np.abs(self._volume[self._volume != 0]), 99)) if self._volume.any() else 1.0
        self.range = (-limit, limit)
        self._cache = {}

    def info(self) -> dict:
        return {**super().info(), "quantity": f"strain along G (d = {self.d_spacing:.4f} A)"}


class PtychoView(HoloView):
    """An iterative ptychography result (``qora ssb ptycho``'s file): the phase of each object slice (rad) as a
    volume (slice, row, col) in the volume view's orthogonal slices and line profile; lateral pixels of the object's
    grid, the slices ``slice_spacing`` A apart (the planes across the slices are drawn on the lateral pixel)."""

    def __init__(self, path) -> None:
        import h5py

        self.path = Path(path)
        with h5py.File(path, "r") as f:
            phase = np.angle(np.asarray(f["objects"][()])).astype(np.float32)
            self.pixel = float(f.attrs["grid_pixel"]) * 1e-4  # A -> um, the volume view's unit
            self.spacing = float(f.attrs["grid_slice_spacing"])
        self.series, self.times, self._volume = None, [0], phase
        self.medium = None
        self.shape = phase.shape
        self.range = (float(phase.min()), float(phase.max())) if phase.max() > phase.min() else (-1.0, 1.0)
        self._cache = {}

    def info(self) -> dict:
        slices = self.shape[0]
        spacing = f", {self.spacing:.1f} A apart" if slices > 1 else ""
        return {**super().info(), "quantity": f"phase of each of {slices} slice(s) (rad){spacing}",
                "profile_label": "phase (rad)"}


def open_view(path, *, backend="auto", pattern=None):
    """The view for a file: a phase result (.cxi), a holography volume (.h5) or series (.zarr
    directory), a Bragg reconstruction (.h5 of ``qora phase bragg``), a ptychography result (.h5 of ``qora ssb
    ptycho``), or a 4D-STEM dataset (anything :func:`qora.ssb.files.load_data` reads)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no such file: {path}")
    if path.is_dir():
        return HoloView(path)
    if path.suffix.lower() in (".h5", ".hdf5", ".cxi", ".nxs"):
        import h5py

        from qora.io.errors import naming_file

        with naming_file(path), h5py.File(path, "r") as f:
            kind = f.attrs.get("qora_kind")
        if kind == "phase_result":
            return PhaseView(path, pattern=pattern)
        if kind == "holo_volume":
            return HoloView(path)
        if kind == "bragg_result":
            return BraggView(path)
        if kind == "ptycho_result":
            return PtychoView(path)
    return SsbView.open(path, backend=backend)
