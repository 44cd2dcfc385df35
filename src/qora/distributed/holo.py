"""A holographic time series over Dask workers, each volume written to a Zarr store as it finishes.

Layout of the store (a directory, Zarr v3): the root group's attributes hold the geometry and
units (``qora_kind = "holo_series"``); each time point is an array ``t000123`` (n, n, n), float32,
refractive index; ``qora-index.json`` lists the time points done. A worker writes its volume
under ``.partial/`` and renames it into place, so an array is complete or absent, never half
written; the index is rewritten atomically by the client as each volume lands. A run on a
store that holds some time points already does only the others (an interrupted run resumes).
Each worker keeps one :class:`qora.holo.Pipeline` per geometry (plans, backgrounds
and, on a GPU, its device buffers made once).
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
import uuid
from pathlib import Path

import numpy as np

from qora.distributed.items import ItemReport, run_items
from qora.holo import intensities
from qora.io.errors import InputError, MissingExtra, OutputError

__all__ = ["reconstruct_series", "SeriesStore", "write_series", "series_options"]

INDEX = "qora-index.json"
PARTIAL = ".partial"

_PIPELINES: dict = {}  # this worker process's pipelines, by the token of their geometry and options
_PIPELINES_LOCK = threading.RLock()


def _time_name(t: int) -> str:
    return f"t{t:06d}"


def _zarr():
    try:
        import zarr
    except ImportError as exc:  # pragma: no cover - the dask extra brings it
        raise MissingExtra("the holo series store needs Zarr: pip install 'qora[dask]'") from exc
    return zarr


class SeriesStore:
    """A time series of index volumes in a Zarr directory store (see the module's docstring)."""

    def __init__(self, path) -> None:
        self.path = Path(path)

    def create(self, geometry, options: dict) -> None:
        """Make the store (or check that an existing one has the same geometry and options)."""
        zarr = _zarr()
        attrs = self.check(geometry, options)
        if (self.path / "zarr.json").exists():
            return
        from qora import __version__

        group = zarr.open_group(str(self.path), mode="w")
        group.attrs.update({**attrs, "qora_version": __version__,
                            "units": "refractive index; lengths in um; frequencies in cycles/um"})
        self._write_index({})

    def check(self, geometry, options: dict) -> dict:
        """Refuse, before any work, a store this series cannot go to: a path that holds something else
        (a file, a folder that is not a series store), or a store of another geometry or options.
        Returns the attributes the store has or will have."""
        attrs = {"qora_kind": "holo_series", **_geometry_json(geometry), "options": options}
        if (self.path / "zarr.json").exists():
            old = dict(_zarr().open_group(str(self.path), mode="r").attrs)
            if old.get("qora_kind") != "holo_series":
                raise OutputError(f"{self.path} is not a qora holo series store; give a new store")
            if {k: old.get(k) for k in attrs} != json.loads(json.dumps(attrs)):
                raise OutputError(f"{self.path} holds a series of another geometry or options; give a new store")
        elif self.path.exists() and (not self.path.is_dir() or any(self.path.iterdir())):
            raise OutputError(f"{self.path} exists and is not a Zarr store (writing it would replace what is there); "
                              "give a new store")
        return attrs

    @property
    def attrs(self) -> dict:
        return dict(_zarr().open_group(str(self.path), mode="r").attrs)

    def index(self) -> dict:
        """Time point -> what its worker reported, for every volume in place (the index file and
        the arrays agree after a clean run; after a crash the arrays are the truth)."""
        recorded = {}
        if (self.path / INDEX).exists():
            recorded = {int(k): v for k, v in json.loads((self.path / INDEX).read_text())["done"].items()}
        present = {int(p.name[1:]) for p in self.path.glob("t[0-9]*") if (p / "zarr.json").exists()}
        return {t: recorded.get(t, {}) for t in sorted(present)}

    def _write_index(self, done: dict) -> None:
        from qora.io.atomic import atomic_path

        with atomic_path(self.path / INDEX) as tmp:
            Path(tmp).write_text(json.dumps({"done": {str(t): v for t, v in sorted(done.items())}}, indent=1))

    def volume(self, t: int) -> np.ndarray:
        """The index volume of time point ``t`` (KeyError when it is not done)."""
        path = self.path / _time_name(t)
        if not (path / "zarr.json").exists():
            raise KeyError(f"time point {t} is not in {self.path}")
        return np.asarray(_zarr().open_array(str(path), mode="r")[...])

    def write_volume(self, t: int, volume) -> None:
        """Write one volume: into ``.partial`` first, then renamed into place."""
        zarr = _zarr()
        volume = np.asarray(volume, np.float32)
        final = self.path / _time_name(t)
        partial = self.path / PARTIAL / f"{_time_name(t)}-{uuid.uuid4().hex[:8]}"
        partial.parent.mkdir(exist_ok=True)
        n = volume.shape[-1]
        array = zarr.create_array(str(partial), shape=volume.shape, dtype=np.float32,
                                  chunks=(min(volume.shape[0], max(1, 2**22 // (n * n * 4))),) + volume.shape[1:])
        array[...] = volume
        try:
            os.rename(partial, final)
        except OSError:
            if (final / "zarr.json").exists():  # written meanwhile by a redone task: the same volume
                shutil.rmtree(partial, ignore_errors=True)
            else:
                raise


def _geometry_json(geometry) -> dict:
    out = {"wavelength_um": float(geometry.wavelength), "medium_index": float(geometry.medium_index),
           "pixel_um": float(geometry.pixel), "n": int(geometry.n), "na_detection": float(geometry.na_detection),
           "geometry": geometry.geometry}
    if geometry.geometry == "rotation":  # the pose too: a fitted axis makes other volumes (and other workers' plans)
        out["angles_rad"] = np.asarray(geometry.angles, float).tolist()
        out["axis_zyx"] = np.asarray(geometry.axis, float).tolist()
        out["rotation_sense"] = int(geometry.rotation_sense)
    else:
        out["illuminations"] = np.asarray(geometry.illuminations, float).tolist()
    return out


def _worker_pipeline(token: str, geometry, backgrounds, options: dict):
    from qora.holo import Pipeline

    with _PIPELINES_LOCK:
        pipe = _PIPELINES.get(token)
        if pipe is None:
            _PIPELINES.clear()  # one geometry at a time: a pipeline holds device buffers
            pipe = Pipeline(geometry, **options)
            pipe.set_background(backgrounds)
            _PIPELINES[token] = pipe
        return pipe


def _read_stack(source, dtype):
    if isinstance(source, (str, Path)):
        from qora.holo import load_stack

        return load_stack(source, dtype=dtype)
    return np.asarray(source)


def _process_time_point(t: int, source, store: str, token: str, geometry, backgrounds, options: dict) -> dict:
    """One time point on a worker: its stack -> volume -> the store."""
    t0 = time.perf_counter()
    with _PIPELINES_LOCK:
        pipe = _worker_pipeline(token, geometry, backgrounds, options)
        # the GPU takes float32 holograms: read them so (half the bytes); the CPU path computes in float64
        holograms = _read_stack(source, np.float32 if pipe.cuda is not None else np.float64)
        volume = pipe.process(holograms, copy=False).index  # the page-locked output, valid until the next stack
        SeriesStore(store).write_volume(t, volume)
        return {"seconds": time.perf_counter() - t0, "min": float(volume.min()), "max": float(volume.max()),
                "backend": pipe.backend.name}


def reconstruct_series(stacks, backgrounds, geometry, *, store, client, sideband, hologram_pixel: float,
                       options=None, fit_axis: bool = False, backend="auto", progress=None, times=None) -> ItemReport:
    """Reconstruct every stack of a time series on the client's workers into a Zarr store.

    Parameters
    ----------
    stacks : array (T, A, N, N), or a list of T stacks (arrays or hologram files, read on the worker)
        The sample holograms of each time point.
    backgrounds : array (A, N, N)
        One background hologram per illumination, shared by every time point.
    geometry : qora.holo.Geometry
    store : path
        The Zarr directory; created, or resumed when it holds a series of the same geometry and
        options (time points already there are skipped, reported in ``skipped``).
    client : distributed.Client
    sideband, hologram_pixel, options, backend
        As for :class:`qora.holo.Pipeline`: ``sideband`` (nu_y, nu_x) in cycles/um, ``hologram_pixel`` in
        um (``hologram_n`` from the backgrounds); ``options`` a
        :class:`qora.holo.ReconstructionOptions` (default: its defaults), recorded in the store.
    fit_axis : bool
        Fit a rotation geometry's axis to the first stack's ratios (in this process, before the series) and use
        it where the data determine it (:func:`qora.holo.fitted_axis`); the report's ``info["axis_fit"]`` says
        what was found, ``info["geometry"]`` is the geometry the volumes were made with.
    times : sequence of int, optional
        The time point of each stack (default 0, 1, ...): the arrays' names.
    progress : callable, optional
        ``progress("stacks", done, total, {"failed": n})``.

    Returns
    -------
    ItemReport
        ``done`` maps each time point written in this run to its worker's report (seconds, index
        range, backend); ``failed`` each failed one to its error. The volumes are in the store
        (:class:`SeriesStore`).
    """
    from dask.base import tokenize

    from qora.holo import ReconstructionOptions

    options = options if options is not None else ReconstructionOptions()
    if not isinstance(options, ReconstructionOptions):
        raise InputError(f"options must be a qora.holo.ReconstructionOptions, got {type(options).__name__}")
    backgrounds = intensities("backgrounds", backgrounds)
    if backgrounds.ndim != 3 or backgrounds.shape[1] != backgrounds.shape[2]:
        raise InputError(f"backgrounds must be (A, N, N), got shape {backgrounds.shape}")
    count = len(stacks)
    times = _times(times, count)
    chosen = {}
    if fit_axis:
        from qora.holo import fitted_axis, ratio_from_holograms

        ratio = ratio_from_holograms(_read_stack(stacks[0], np.float64), backgrounds, geometry, hologram_pixel,
                                     sideband)
        geometry, chosen["axis_fit"] = fitted_axis(ratio, geometry, options)
        chosen["geometry"] = geometry
    recorded = series_options(sideband, hologram_pixel, backgrounds.shape[-1], options.to_dict())
    series = SeriesStore(store)
    series.create(geometry, recorded)
    done = series.index()
    token = tokenize(_geometry_json(geometry), recorded, backend, backgrounds)
    pipeline = dict(sideband=recorded["sideband"], hologram_pixel=recorded["hologram_pixel"],
                    hologram_n=recorded["hologram_n"], options=options, backend=backend)
    shared = client.scatter(backgrounds, broadcast=True, hash=False)  # a key of its own: no other run releases it
    items = {t: (t, stacks[i], str(series.path), token, geometry, shared, pipeline)
             for i, t in enumerate(times) if t not in done}

    def land(t, info):
        done[t] = info
        series._write_index(done)

    out = run_items(client, _process_time_point, items, stage="stacks", progress=progress, on_result=land)
    out.skipped = sorted(t for t in times if t not in items)
    out.info.update(chosen)
    return out


def _times(times, count: int) -> list:
    try:
        times = list(range(count)) if times is None else [int(t) for t in times]
    except (TypeError, ValueError):
        raise InputError(f"times must be {count} integers (the time points), got {times!r}") from None
    if len(times) != count or len(set(times)) != count or min(times, default=0) < 0:
        raise InputError(f"times must give {count} distinct non-negative time points")
    return times


def series_options(sideband, hologram_pixel: float, hologram_n: int, options: dict) -> dict:
    """What a series store records of how its volumes were made (a run that resumes it must match)."""
    return dict(sideband=tuple(float(v) for v in sideband), hologram_pixel=float(hologram_pixel),
                hologram_n=int(hologram_n), **options)


def write_series(store, volumes, geometry, options: dict, *, times=None) -> dict:
    """Write volumes (T, n, n, n) computed here (no cluster) into the series store ``store``, the layout
    :func:`reconstruct_series` writes: created, or added to when it holds a series of the same geometry
    and ``options`` (:func:`series_options`; time points already there are kept, not rewritten).
    Returns the store's index."""
    volumes = np.asarray(volumes)
    times = _times(times, len(volumes))
    series = SeriesStore(store)
    series.create(geometry, options)
    done = series.index()
    for t, volume in zip(times, volumes):
        if t not in done:
            series.write_volume(t, volume)
            done[t] = {"min": float(volume.min()), "max": float(volume.max()), "backend": "local"}
    series._write_index(done)
    return done
