"""The CUDA kernels of qora.ssb by name: one place that knows which file holds each and which
template instantiations its module compiles (``kernels/ssb.cu``, ``kernels/band.cu``)."""

from __future__ import annotations

__all__ = ["kernel", "complex_tag"]

# the most parameter sets one launch takes: the thick kernel 4 (8 held one block per SM at 178 registers
# and took 29.5 ms a pass against 9.9 ms for two launches of 4 at full scale, H200,
# docs/ssb-performance.md), the standard-model kernel 8
MOST_SETS = {"band_quad_batch": 4, "band_quad_standard": 8}
BATCH_SETS = max(MOST_SETS.values())


def _batch_names(kernel_name: str) -> tuple:
    return tuple(f"{kernel_name}<{n}, {'double' if n <= 2 else 'float'}>" for n in (1, 2, 4, 8)
                 if n <= MOST_SETS[kernel_name])


_MODULES = {
    "ssb.cu": tuple(f"{k}<{c}, {q}>" for k in ("ssb_sums", "loss_half") for c in ("float2", "double2")
                    for q in ("true", "false"))
              + ("band_batch<float2>", "band_batch<double2>")
              + tuple(f"parallax_fine<{c}, {f}>" for c in ("float2", "double2") for f in (2, 3, 4))
              + ("loss_moments<float>", "loss_moments<double>", "chi_pixels"),
    "band.cu": _batch_names("band_quad_batch") + _batch_names("band_quad_standard")
               + ("band_quad_derivatives<3>", "band_quad_derivatives<6>"),
}

BLOCK = {"ssb.cu": 128, "band.cu": 256}  # threads per block: THREADS in ssb.cu, BAND_THREADS in band.cu


def most_sets(*, standard: bool) -> int:
    """The most parameter sets one launch of the batch kernel takes (:data:`MOST_SETS`)."""
    return MOST_SETS["band_quad_standard" if standard else "band_quad_batch"]


def batch_size(sets: int, *, standard: bool = True) -> int:
    """The compile-time set count of the instantiation that runs ``sets`` sets: 1, 2, 4 or 8, at
    most :func:`most_sets`. ``band_quad_standard`` runs (and so needs the shared memory of) all of
    them."""
    most = most_sets(standard=standard)
    if not 1 <= sets <= most:
        raise ValueError(f"one launch takes 1 to {most} sets, got {sets}")
    return next(n for n in (1, 2, 4, 8) if n >= sets)


def batch_kernel_name(sets: int, *, standard: bool = False) -> str:
    """The band_quad_batch instantiation (``band_quad_standard`` for sets of the standard model)
    for ``sets`` sets: the smallest that holds them, as its registers (and so the warps an SM keeps
    in flight) grow with the count."""
    size = batch_size(sets, standard=standard)
    name = "band_quad_standard" if standard else "band_quad_batch"
    return f"{name}<{size}, {'double' if size <= 2 else 'float'}>"


def complex_tag(array) -> str:
    """The CUDA vector type of a complex array: ``float2`` (complex64) or ``double2`` (complex128)."""
    import numpy as np

    return "float2" if array.dtype == np.complex64 else "double2"


def kernel(name: str):
    """The compiled kernel ``name`` (a template expression such as ``"ssb_sums<float2>"``)."""
    from qora.backend.kernels import get_kernel

    for filename, names in _MODULES.items():
        if name in names:
            return get_kernel("qora.ssb", filename, name, name_expressions=names)
    raise KeyError(f"no qora.ssb kernel {name!r}; known: {[n for names in _MODULES.values() for n in names]}")
