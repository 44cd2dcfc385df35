"""The CUDA kernels of qora.ssb by name: one place that knows which file holds each and which
template instantiations its module compiles (``kernels/ssb.cu``, ``kernels/band.cu``)."""

from __future__ import annotations

__all__ = ["kernel", "complex_tag"]

_MODULES = {
    "ssb.cu": tuple(f"{k}<{c}, {q}>" for k in ("ssb_sums", "loss_half") for c in ("float2", "double2")
                    for q in ("true", "false"))
              + ("band_batch<float2>", "band_batch<double2>")
              + tuple(f"parallax_fine<{c}, {f}>" for c in ("float2", "double2") for f in (2, 3, 4))
              + ("loss_moments<float>", "loss_moments<double>", "chi_pixels"),
    "band.cu": tuple(f"{k}<{n}, {'double' if n <= 2 else 'float'}>" for k in ("band_quad_batch", "band_quad_standard")
                     for n in (1, 2, 4, 8)) + ("band_quad_derivatives<3>", "band_quad_derivatives<6>"),
}

BLOCK = {"ssb.cu": 128, "band.cu": 256}  # threads per block: THREADS in ssb.cu, BAND_THREADS in band.cu
BATCH_SETS = 8  # the largest compile-time set count of band_quad_batch and band_quad_standard


def batch_size(sets: int) -> int:
    """The compile-time set count of the instantiation that runs ``sets`` sets (1 to 8): 1, 2, 4 or
    8. ``band_quad_standard`` runs (and so needs the shared memory of) all of them."""
    if not 1 <= sets <= BATCH_SETS:
        raise ValueError(f"band_quad_batch takes 1 to {BATCH_SETS} sets, got {sets}")
    return next(n for n in (1, 2, 4, 8) if n >= sets)


def batch_kernel_name(sets: int, *, standard: bool = False) -> str:
    """The band_quad_batch instantiation (``band_quad_standard`` for sets of the standard model)
    for ``sets`` sets (1 to 8): the smallest that holds them, as its registers (and so the warps an
    SM keeps in flight) grow with the count."""
    size = batch_size(sets)
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
