"""``qora bench holo-measured``: the defaults on data no one here wrote, each timed beside its error.

ODTbrain's FDTD cell (``fdtd_3d_sino_A220_R6.500_tiltyz0.2.tar.lzma``: 220 angles of fields computed by FDTD, and
the phantom they were computed from; ``../shared/data/odt``, README there) reconstructed with the default options
of GP and of TV (``--method tv``: its weight from the data and, in this geometry, exact gridding), each timed end to
end, beside its RMSE against the phantom, the mean index bias inside the cell and the cytoplasm - nucleus contrast
(truth 0.0050; docs/holo.md, "Exact gridding"). The axis is taken as straight with ODTbrain's rotation sense
(docs/holo.md, "The FDTD set's axis"). The archive is read from ``QORA_ODT_DATA``, else ``QORA_SHARED_DATA``/odt,
else ``shared/data/odt`` beside the checkout; where it is absent the benchmark says so and writes nothing.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from qora.backend import resolve
from qora.bench.common import BenchResult, shared_data_folder
from qora.io.errors import InputError

__all__ = ["run", "odt_data_folder", "FDTD_ARCHIVE", "CASES"]

FDTD_ARCHIVE = "fdtd_3d_sino_A220_R6.500_tiltyz0.2.tar.lzma"
CASES = (("gp", {}), ("tv", {"tv_weight": "auto"}))  # the defaults of the two solvers a user picks between
WAVELENGTH = 0.65  # um, the archive's (ODTbrain's example reads it so)


def odt_data_folder() -> Path:
    """Where the FDTD cell's archive is: ``QORA_ODT_DATA``, else ``QORA_SHARED_DATA``/odt, else ``shared/data/odt``
    next to the checkout."""
    return shared_data_folder("odt", "QORA_ODT_DATA")


def _regions(truth, medium_index):
    """The phantom's cytoplasm (1.365), nucleus (1.360) and the whole cell."""
    return (truth > 1.364) & (truth < 1.366), (truth > 1.359) & (truth < 1.361), truth > medium_index + 1e-4


def run(*, backend="auto", write=True, echo=print, folder=None) -> BenchResult:
    from qora import holo
    from qora.holo import Geometry

    be = resolve(backend)
    path = Path(folder or odt_data_folder()) / FDTD_ARCHIVE
    if not path.exists():
        raise InputError(f"the FDTD cell needs {path} (set QORA_ODT_DATA to the folder that holds {FDTD_ARCHIVE})")
    series = holo.read_odtbrain_archive(path, wavelength=WAVELENGTH)
    truth, nm = series.phantom, series.medium_index
    g = Geometry(wavelength=WAVELENGTH, medium_index=nm, pixel=series.pixel, n=series.fields.shape[-1],
                 na_detection=nm, angles=series.angles, rotation_sense=-1)
    cytoplasm, nucleus, cell = _regions(truth, nm)
    name = "holo-measured" if be.is_cuda else "holo-measured-cpu"
    result = BenchResult(name, be.name, be.device_facts().as_dict(), columns=("ms", "rmse", "contrast"))
    echo(f"{be.name}: {result.device['name']}; {path.name}: {g.count} angles of {g.n}^2 fields")
    for method, extra in CASES:
        t0 = time.perf_counter()
        res = holo.reconstruct(series.fields, g, backend=be.name, method=method, **extra)
        ms = (time.perf_counter() - t0) * 1e3
        index = np.asarray(res.index)
        error = index - truth
        row = dict(rmse=float(np.sqrt(np.mean(error**2))), bias_inside=float(error[cell].mean()),
                   contrast=float(index[cytoplasm].mean() - index[nucleus].mean()), gridding=res.info.get("gridding"),
                   tv_weight=res.info.get("tv_weight") if method == "tv" else None)
        result.add(f"fdtd_cell/{method}_default", ms=ms, **row)
        echo(f"  {method} default ({row['gridding']} gridding): {ms / 1e3:.1f} s, RMSE {row['rmse']:.3e}, bias "
             f"inside {row['bias_inside']:+.2e}, nucleus contrast {row['contrast']:.4f} (truth 0.0050)")
    if write:
        echo(f"result written to {result.write()}")
    echo(result.table())
    return result
