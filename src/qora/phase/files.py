"""Phase results and simulated patterns as CXI/HDF5 files, and their figures.

Result layout (HDF5, CXI-style; root attributes ``qora_kind = "phase_result"``,
``qora_version``, ``units``):

- ``entry_1/image_1/data``: the best object (complex64, centre-origin)
- ``entry_1/image_1/support``: its support (uint8)
- ``entry_1/image_1/process_1/``: ``errors`` (iterations x starts), ``final_errors``,
  ``llk``, ``free_llk``; attributes ``recipe``, ``seed``, ``starts``, ``best``, ``rank``,
  ``backend``, ``variant``, ``timings`` and ``versions`` (JSON)
- ``entry_1/image_1/all_objects``, ``all_supports`` when every start was kept

A simulated pattern is a CXI file with ``entry_1/data_1/data`` and the true
object at ``entry_1/sample_1/qora_truth``.
"""

from __future__ import annotations

import json

import numpy as np

from qora import __version__
from qora.io.atomic import hdf5_output
from qora.io.errors import FileFormatError, naming_file

__all__ = ["write_result", "read_result", "write_pattern", "read_truth", "plot_result"]


def _root_attrs(f, kind: str) -> None:
    f.attrs["qora_kind"] = kind
    f.attrs["qora_version"] = __version__
    f.attrs["units"] = "pixels; object amplitude in sqrt(counts) (unitary transform)"
    f.attrs["cxi_version"] = 150


def write_pattern(path, intensity, *, mask=None, truth=None) -> None:
    """Write a pattern (and optional mask and true object) as a CXI file, atomically."""
    with hdf5_output(path) as f:
        _root_attrs(f, "phase_pattern")
        f.create_dataset("entry_1/data_1/data", data=np.asarray(intensity, np.float32), compression="gzip")
        if mask is not None:
            f.create_dataset("entry_1/instrument_1/detector_1/mask", data=np.asarray(mask, np.uint8))
        if truth is not None:
            f.create_dataset("entry_1/sample_1/qora_truth", data=np.asarray(truth, np.complex64))


def read_truth(path) -> np.ndarray:
    """The object stored by :func:`write_pattern` or the best object of a result file."""
    import h5py

    with naming_file(path), h5py.File(path, "r") as f:
        for name in ("entry_1/sample_1/qora_truth", "entry_1/image_1/data"):
            if name in f:
                return f[name][()]
    raise FileFormatError(f"{path}: holds neither a true object nor a reconstruction")


def write_result(path, result) -> None:
    """Write a :class:`~qora.phase.solver.PhaseResult` as CXI/HDF5, atomically."""
    with hdf5_output(path) as f:
        _root_attrs(f, "phase_result")
        img = f.create_group("entry_1/image_1")
        img.create_dataset("data", data=result.object)
        img.create_dataset("support", data=result.support.astype(np.uint8))
        proc = img.create_group("process_1")
        for name in ("errors", "final_errors", "llk", "free_llk"):
            proc.create_dataset(name, data=np.asarray(getattr(result, name)))
        for name in ("recipe", "seed", "starts", "best", "rank", "backend", "variant"):
            proc.attrs[name] = getattr(result, name)
        proc.attrs["stopped_early"] = bool(result.stopped_early)
        proc.attrs["first_start"] = int(result.first_start)
        proc.attrs["timings"] = json.dumps(result.timings)
        proc.attrs["versions"] = json.dumps(result.versions)
        proc.attrs["support_log"] = json.dumps(result.support_log)
        if result.preprocessing is not None:
            proc.attrs["preprocessing"] = json.dumps(result.preprocessing)
        if result.psf is not None:  # the partial-coherence kernel (detector layout, sums to 1)
            proc.create_dataset("psf", data=np.asarray(result.psf))
        if result.coherence_width is not None:  # the default's coherence check: blur fitted, pixels
            proc.attrs["coherence_width"] = float(result.coherence_width)
        for name in ("agreement", "convergence"):  # the starts' agreement and the best start's convergence
            if getattr(result, name) is not None:
                proc.attrs[name] = json.dumps(getattr(result, name))
        if result.choice:  # why the default ran the recipe it ran
            proc.attrs["choice"] = str(result.choice)
        if result.pixel_size is not None:
            img.attrs["pixel_size_m"] = np.asarray(result.pixel_size, float)
        if result.objects is not None:
            img.create_dataset("all_objects", data=result.objects, compression="gzip")
            img.create_dataset("all_supports", data=result.supports.astype(np.uint8), compression="gzip")


def result_fields(path) -> dict:
    """The fields of the :class:`~qora.phase.result.PhaseResult` a result file holds (``PhaseResult.load`` and
    :func:`qora.phase.result.read_result` make it; this module knows the file, not the type)."""
    import h5py

    with naming_file(path), h5py.File(path, "r") as f:
        if f.attrs.get("qora_kind") != "phase_result":
            raise FileFormatError(f"{path}: not a qora phase result (qora_kind={f.attrs.get('qora_kind')!r})")
        img = f["entry_1/image_1"]
        proc = img["process_1"]
        a = proc.attrs
        return dict(
            object=img["data"][()], support=img["support"][()].astype(bool), errors=proc["errors"][()],
            final_errors=proc["final_errors"][()], llk=proc["llk"][()], free_llk=proc["free_llk"][()],
            best=int(a["best"]), rank=str(a["rank"]), recipe=str(a["recipe"]), seed=int(a["seed"]),
            starts=int(a["starts"]), backend=str(a["backend"]), variant=str(a["variant"]),
            timings=json.loads(a["timings"]), versions=json.loads(a["versions"]),
            objects=img["all_objects"][()] if "all_objects" in img else None,
            supports=img["all_supports"][()].astype(bool) if "all_supports" in img else None,
            stopped_early=bool(a["stopped_early"]), first_start=int(a.get("first_start", 0)),
            support_log=json.loads(a.get("support_log", "[]")),
            pixel_size=tuple(float(v) for v in img.attrs["pixel_size_m"]) if "pixel_size_m" in img.attrs else None,
            preprocessing=json.loads(a["preprocessing"]) if "preprocessing" in a else None,
            psf=proc["psf"][()] if "psf" in proc else None,
            coherence_width=float(a["coherence_width"]) if "coherence_width" in a else None,
            agreement=json.loads(a["agreement"]) if "agreement" in a else None,
            convergence=json.loads(a["convergence"]) if "convergence" in a else None,
            choice=str(a.get("choice", "")),
        )


def plot_result(path, result, *, title: str | None = None) -> None:
    """PNG of amplitude, phase, support (central slice for 3D) and the error curves of all starts."""
    from qora.plot import save_png, subplots

    obj, sup = result.object, result.support
    if obj.ndim == 3:
        obj, sup = obj[obj.shape[0] // 2], sup[sup.shape[0] // 2]
    fig, axes = subplots(1, 4, figsize=(16, 4))
    im = axes[0].imshow(np.abs(obj), cmap="gray")
    axes[0].set_title("amplitude")
    fig.colorbar(im, ax=axes[0], shrink=0.8)
    phase = np.where(sup, np.angle(obj), np.nan)
    im = axes[1].imshow(phase, cmap="twilight", vmin=-np.pi, vmax=np.pi)
    axes[1].set_title("phase (rad), inside the support")
    fig.colorbar(im, ax=axes[1], shrink=0.8)
    axes[2].imshow(sup, cmap="gray")
    axes[2].set_title(f"support ({int(result.support.sum())} px)")
    for s in range(result.errors.shape[1]):
        axes[3].semilogy(result.errors[:, s], lw=1.5 if s == result.best else 0.7,
                         color="C3" if s == result.best else "0.6")
    axes[3].set_xlabel("iteration")
    axes[3].set_ylabel("Fourier error")
    axes[3].set_title("Fourier error per start (best in red)")
    if result.pixel_size is not None:
        # physical axes: the image spans N x (object pixel size) per axis, in nm
        dy, dx = result.pixel_size[-2:]
        extent = [0, obj.shape[-1] * dx * 1e9, obj.shape[-2] * dy * 1e9, 0]
        for ax in axes[:3]:
            ax.images[0].set_extent(extent)
            ax.set_xlabel("x (nm)")
            ax.set_ylabel("y (nm)")
    else:
        for ax in axes[:3]:
            ax.set_xticks([])
            ax.set_yticks([])
    fig.suptitle(title or f"best of {result.starts} starts: Fourier error {result.fourier_error:.2e}")
    fig.tight_layout()
    save_png(fig, path, dpi=100)
