"""``qora bench ssb-files``: what reading a detector file lazily and calibrating it costs before G.

On our simulator's film (a ``scan`` x ``scan`` scan, ``window`` x ``window`` detector, float32), written
once as a Qora HDF5 file (gzip) and as an ``.npy`` in abTEM's x-first order, each step timed (median of
``repeats``, warm): the file read whole (``read_dataset``) and lazily (``load_data``); the session
prepared (bright field and G) from the array in memory, from the lazy HDF5 file, and from the x-first
``.npy`` through the layout (``--axis-order x,y``: a transposed memory map); the descan fitted
(a plane), the data corrected into memory and the session prepared from them, and the session
prepared from the lazily corrected data (each pattern Fourier-shifted each time its block of scan
rows is read; timed once).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

from qora.backend import resolve
from qora.bench.common import BenchResult, median_wall

__all__ = ["run"]


def run(*, backend="auto", write=True, echo=print, scan: int = 64, window: int = 64, repeats: int = 3) -> BenchResult:
    from qora.ssb import (Aberrations, Layout, Session, amorphous_slices, correct_descan, fit_descan, load_data,
                          read_dataset, simulate, write_dataset)

    be = resolve(backend)
    result = BenchResult(f"ssb-files-{be.name}", be.name, be.device_facts().as_dict(), columns=("ms",))
    label = f"{scan}x{scan}x{window}x{window}"
    pixel = 0.2
    sim = simulate(amorphous_slices((2 * scan, 2 * scan), pixel, atoms_per_a2=0.1, seed=0), pixel=pixel, stride=2,
                   window=window, aberrations=Aberrations(C10=150.0))
    times = {}
    with tempfile.TemporaryDirectory() as tmp:
        h5, npy = Path(tmp) / "film.h5", Path(tmp) / "film_xy.npy"
        write_dataset(h5, sim.data, kv=sim.kv, alpha_mrad=sim.alpha_mrad, scan_step=sim.scan_step)
        np.save(npy, np.ascontiguousarray(sim.data.astype(np.float32).transpose(1, 0, 3, 2)))
        (whole, meta), times["read_whole"] = median_wall(lambda: read_dataset(h5), repeats)
        (lazy, _), times["read_lazy"] = median_wall(lambda: load_data(h5), repeats)
        kw = dict(kv=meta["kv"], alpha_mrad=meta["alpha_mrad"], scan_step=meta["scan_step_a"], backend=be)
        Session(whole, **kw)  # warm
        _, times["prepare_in_memory"] = median_wall(lambda: Session(whole, **kw), repeats)
        _, times["prepare_lazy_hdf5"] = median_wall(lambda: Session(lazy, **kw), repeats)
        xy, _ = load_data(npy, layout=Layout(axis_order="x,y"))
        _, times["prepare_layout_xy_npy"] = median_wall(lambda: Session(xy, **kw), repeats)
        descan, times["descan_fit_plane"] = median_wall(lambda: fit_descan(whole), repeats)
        corrected, times["descan_correct_in_memory"] = median_wall(
            lambda: correct_descan(whole, descan, in_memory=True), repeats)
        _, times["prepare_descan_in_memory"] = median_wall(lambda: Session(corrected, **kw), repeats)
        lazy_corrected = correct_descan(whole, descan, in_memory=False)
        _, times["prepare_descan_lazy"] = median_wall(lambda: Session(lazy_corrected, **kw), 1)
    for step, seconds in times.items():
        result.add(f"step/{label}/{step}", ms=seconds * 1e3)
    echo(f"{be.name}: {result.device['name']}; scan {scan}^2, detector {window}^2")
    echo("  " + ", ".join(f"{k} {v * 1e3:.0f} ms" for k, v in times.items()))
    if write:
        echo(f"result written to {result.write()}")
    return result
