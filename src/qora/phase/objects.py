"""Test objects and their diffraction patterns.

All objects are centre-origin complex arrays with an oversampling of at least
4 per axis: the object's bounding box is a quarter of each axis.

- :func:`triangle`: 2D, amplitude 1, a linear phase of 1 rad across it.
- :func:`prism`: that triangle extruded over a quarter of the z extent, with a
  further linear phase of 1 rad along z.
- :func:`cut_prism`: the prism without the voxels beyond the plane
  u + v + w = 1.5 (box coordinates in [0, 1]), with a Gaussian phase bump of
  0.8 rad and standard deviation a sixth of the box: a non-separable object.
- :func:`box` and :func:`box_intensity`: a uniform box and its pattern in closed
  form (products of Dirichlet kernels), a reference no FFT computed.
"""

from __future__ import annotations

import numpy as np

from qora.io import validate
from qora.io.errors import InputError
from qora.backend import host
from qora.phase.physics import detector_intensity

__all__ = ["triangle", "prism", "cut_prism", "box", "box_intensity", "support_of", "simulate", "OBJECTS"]


def _box_coords(shape, fraction=0.25):
    """Per axis: (start index, side, normalised coordinate in [0, 1] over the box)."""
    out = []
    for n in shape:
        side = max(2, int(round(n * fraction)))
        start = n // 2 - side // 2
        u = (np.arange(n) - start) / (side - 1)
        out.append((start, side, u))
    return out


def triangle(n: int = 64, *, shape=None) -> np.ndarray:
    """The 2D triangle of side n/4 (rows v, columns u: u + v <= 1), phase u radians."""
    shape = tuple(shape) if shape is not None else (n, n)
    (_, _, v), (_, _, u) = _box_coords(shape)
    V, U = np.meshgrid(v, u, indexing="ij")
    inside = (U >= 0) & (V >= 0) & (U + V <= 1 + 1e-9)
    return np.where(inside, np.exp(1j * U), 0).astype(np.complex64)


def prism(n: int = 64, *, shape=None) -> np.ndarray:
    """The triangle extruded over a quarter of z (axis 0), phase u + w radians."""
    shape = tuple(shape) if shape is not None else (n, n, n)
    (_, _, w), (_, _, v), (_, _, u) = _box_coords(shape)
    W, V, U = np.meshgrid(w, v, u, indexing="ij")
    inside = (U >= 0) & (V >= 0) & (U + V <= 1 + 1e-9) & (W >= 0) & (W <= 1 + 1e-9)
    return np.where(inside, np.exp(1j * (U + W)), 0).astype(np.complex64)


def cut_prism(n: int = 64, *, shape=None) -> np.ndarray:
    """The prism cut by u + v + w <= 1.5 with a Gaussian phase bump of 0.8 rad (sigma = box / 6)."""
    shape = tuple(shape) if shape is not None else (n, n, n)
    (_, _, w), (_, _, v), (_, _, u) = _box_coords(shape)
    W, V, U = np.meshgrid(w, v, u, indexing="ij")
    inside = (U >= 0) & (V >= 0) & (U + V <= 1 + 1e-9) & (W >= 0) & (W <= 1 + 1e-9) & (U + V + W <= 1.5 + 1e-9)
    r2 = (U - 0.5) ** 2 + (V - 0.5) ** 2 + (W - 0.5) ** 2
    bump = 0.8 * np.exp(-r2 / (2 * (1 / 6) ** 2))
    return np.where(inside, np.exp(1j * (U + W + bump)), 0).astype(np.complex64)


def box(shape, side) -> np.ndarray:
    """A uniform real box of ``side`` pixels per axis centred at n//2 (centre-origin)."""
    side = np.broadcast_to(side, (len(shape),))
    obj = np.zeros(shape, np.complex64)
    sl = tuple(slice(n // 2 - s // 2, n // 2 - s // 2 + s) for n, s in zip(shape, side))
    obj[sl] = 1
    return obj


def box_intensity(shape, side) -> np.ndarray:
    """Unitary |F box|^2 in detector layout, in closed form.

    Per axis, sum_{k<w} exp(-2 pi i q k / n) has modulus |sin(pi q w / n) / sin(pi q / n)|
    (w at q = 0); the box's pattern is the product over axes, divided by n per axis.
    """
    side = np.broadcast_to(side, (len(shape),))
    out = np.ones(shape)
    for ax, (n, w) in enumerate(zip(shape, side)):
        q = np.arange(n) - n // 2  # detector layout
        with np.errstate(invalid="ignore", divide="ignore"):
            d = np.where(q == 0, float(w), np.sin(np.pi * q * w / n) / np.sin(np.pi * q / n))
        out = out * (d**2 / n).reshape([-1 if i == ax else 1 for i in range(len(shape))])
    return out


def support_of(obj) -> np.ndarray:
    """The exact support (nonzero pixels) of an object."""
    return np.abs(obj) > 0


OBJECTS = {"triangle": triangle, "prism": prism, "cut_prism": cut_prism}
# Peak host memory of simulate() per pixel (voxel), measured with tracemalloc (float64 coordinate
# grids, complex128 exponentials and transform), with a little margin.
SIMULATE_BYTES = {"triangle": 52, "prism": 60, "cut_prism": 76}
NDIM = {"triangle": 2, "prism": 3, "cut_prism": 3}


def simulate_bytes(name: str, n: int) -> float:
    """About how many bytes of host memory :func:`simulate` needs for ``name`` at ``n`` per axis."""
    return float(SIMULATE_BYTES[name]) * float(n) ** NDIM[name]


def check_memory(name: str, n: int) -> None:
    """Refuse (MemoryNeeded), before any work, a simulation the host's memory cannot hold."""
    validate.memory_needed(simulate_bytes(name, n), f"simulating the {name} at {n} pixels per axis",
                           available=host.available_memory(), where="host",
                           hint="a smaller size (--size, or n=) shrinks it")


def simulate(name: str = "triangle", n: int = 64, *, photons: float | None = None, seed: int = 0):
    """A test object and its pattern (detector layout), optionally with Poisson noise.

    ``photons`` is the expected total count; None gives the noise-free intensity
    at the unitary scale (sum of the pattern = sum of |object|^2).
    Returns ``(object, intensity)``.
    """
    if not isinstance(name, str) or name not in OBJECTS:
        raise InputError(f"object must be one of {sorted(OBJECTS)}, got {name!r}")
    n = validate.integer("n (the size)", n, low=8)
    if photons is not None:
        photons = validate.positive("photons", photons, unit="counts")
    seed = validate.integer("seed", seed, low=0)
    check_memory(name, n)
    obj = OBJECTS[name](n)
    intensity = detector_intensity(obj)
    if photons is not None:
        rng = np.random.default_rng(seed)
        intensity = rng.poisson(intensity * (photons / intensity.sum())).astype(np.float64)
    return obj, intensity
