"""A Bragg rocking scan from its frames to the strain map in one call: :func:`bragg_strain`.

The steps (docs/phase.md, "Bragg rocking scans"):

1. **Preparation** (:func:`prepare_scan`): pixels the dark frame flags (above ``dark_limit`` counts: hot or
   broken) and those the white field cannot normalise (under ``white_floor``) masked; the frames divided by the
   white field normalised to a mean of 1; counts at or under ``threshold`` set to 0 (the detector's noise floor:
   1 by default, measured on the real 34-ID-C scan against 0.5 and 2, docs/phase.md);
   optional binning per axis (frames, rows, cols); the box around the counts' centre of mass that holds ``keep``
   of them along each axis, widened to an even 2-3-5 FFT length and kept inside the scan.
2. **Phasing**: :func:`qora.phase.reconstruct` with the default recipe's stages, complex (a Bragg object has a
   phase: the recipe choice that takes a centrosymmetric pattern for a real object does not apply), multi-start,
   with its agreement report.
3. **Post-processing** (:mod:`qora.phase.bragg`): the ramp and offset removed, the object put on an orthogonal lab
   grid by the geometry's direct basis at the box's centre, the strain along the reflection G (the lab Q of the
   box's centre). The twin (conj(o(-r))) is the one phasing returned: a single reflection cannot tell them apart.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from qora.io.errors import InputError
from qora.phase.bragg import displacement_along, orthogonal_grid, remove_ramp, strain_along, unwrap_in_support
from qora.phase.bragg_geometry import BraggGeometry
from qora.phase.raw_frames import centre_of_mass, fast_size_below

__all__ = ["prepare_scan", "bragg_strain", "BraggResult", "write_vti", "plot_bragg", "reciprocal_metric",
           "reflection_frame", "support_faces"]


def _even_fast_at_least(n: int) -> int:
    from qora.backend.fft import fast_length

    return fast_length(max(2, n))


def _binned(a, factors, reduce="sum"):
    shape = tuple(s // f for s, f in zip(a.shape, factors))
    a = a[tuple(slice(0, s * f) for s, f in zip(shape, factors))]
    a = a.reshape(shape[0], factors[0], shape[1], factors[1], shape[2], factors[2])
    return a.sum((1, 3, 5)) if reduce == "sum" else a.any((1, 3, 5))


def prepare_scan(frames, *, dark=None, white=None, dark_limit: float = 1.0, white_floor: float = 100.0,
                 threshold: float = 1.0, keep: float = 0.995, bin=(1, 1, 1)):
    """The frames (frames, rows, cols) of a rocking scan made ready to phase: (intensity, mask, window, steps), the
    window the box's first voxel (frame, row, col) in the binned scan, ``steps`` what was done. ``dark`` and
    ``white`` have the frames' detector shape (rows, cols)."""
    frames = np.asarray(frames, np.float64)
    if frames.ndim != 3 or min(frames.shape) < 4:
        raise InputError(f"a rocking scan is (frames, rows, cols) with at least 4 of each, got {frames.shape}")
    if not np.all(np.isfinite(frames)):
        raise InputError("the frames hold NaN or infinite values")
    if not 0 < keep <= 1:
        raise InputError(f"keep is a fraction of the counts in (0, 1], got {keep}")
    bad = np.zeros(frames.shape[1:], bool)
    steps = {"threshold": threshold, "keep": keep}
    for name, a in (("dark", dark), ("white", white)):
        if a is not None and np.shape(a) != frames.shape[1:]:
            raise InputError(f"{name} has shape {np.shape(a)}; the frames' detector is {frames.shape[1:]}")
    if dark is not None:
        hot = np.asarray(dark) > dark_limit
        steps["dark_masked"] = int(hot.sum())
        bad |= hot
    if white is not None:
        white = np.asarray(white, np.float64)
        dead = ~(white >= white_floor)
        steps["white_masked"] = int((dead & ~bad).sum())
        bad |= dead
        frames = frames / np.where(dead, 1.0, white / white[~dead].mean())
    frames = np.where(bad[None] | (frames <= threshold), 0.0, frames)
    mask = np.broadcast_to(bad, frames.shape)
    factors = tuple(int(b) for b in np.broadcast_to(bin, (3,)))
    if any(b < 1 for b in factors):
        raise InputError(f"bin factors must be positive integers, got {bin}")
    if factors != (1, 1, 1):
        frames, mask = _binned(frames, factors), _binned(mask, factors, reduce="any")
        steps["bin"] = list(factors)
    if not frames.any():
        raise InputError(f"no count above the threshold ({threshold}) is left")
    window, size = _box(frames, keep)
    box = tuple(slice(w, w + s) for w, s in zip(window, size))
    steps["box"] = {"start": list(window), "size": list(size)}
    return frames[box], np.ascontiguousarray(mask[box]), tuple(window), steps


def _box(intensity, keep: float):
    """The per-axis box about the centre of mass holding ``keep`` of the counts, at an even fast size."""
    centre = centre_of_mass(intensity)
    total = intensity.sum()
    window, size = [], []
    for axis, n in enumerate(intensity.shape):
        profile = intensity.sum(axis=tuple(i for i in range(3) if i != axis))
        cumulative = np.cumsum(profile) / total
        low = int(np.searchsorted(cumulative, (1 - keep) / 2))
        high = int(np.searchsorted(cumulative, 1 - (1 - keep) / 2)) + 1
        c = int(round(centre[axis]))
        half = max(c - low, high - c)
        s = _even_fast_at_least(2 * half)
        if s > n:  # the whole axis is needed: its largest fast length
            s = fast_size_below(n)
        start = min(max(c - s // 2, 0), n - s)
        window.append(start)
        size.append(s)
    return window, size


def reciprocal_metric(lattice) -> np.ndarray:
    """The B matrix (1/A, columns the reciprocal basis b1, b2, b3 in a Cartesian frame with b1 along x, 2 pi
    included) of a lattice (a, b, c in A; alpha, beta, gamma in degrees), or of a cubic one (a)."""
    values = np.ravel(np.asarray(lattice, np.float64))
    if values.size not in (1, 6) or not np.all(np.isfinite(values)) or values[:3].min() <= 0:
        raise InputError(f"lattice: a (cubic) or a, b, c (A) and alpha, beta, gamma (degrees), got {lattice!r}")
    a, b, c, al, be, ga = (values[0], values[0], values[0], 90.0, 90.0, 90.0) if values.size == 1 else values
    al, be, ga = np.deg2rad([al, be, ga])
    # the direct basis in Cartesian coordinates (a along x, b in the x-y plane), then its 2 pi dual
    ax = np.array([a, 0.0, 0.0])
    bx = np.array([b * np.cos(ga), b * np.sin(ga), 0.0])
    cx = c * np.cos(be)
    cy = c * (np.cos(al) - np.cos(be) * np.cos(ga)) / np.sin(ga)
    direct = np.stack([ax, bx, np.array([cx, cy, np.sqrt(max(c * c - cx * cx - cy * cy, 0.0))])], 1)
    if np.linalg.det(direct) <= 0:
        raise InputError(f"lattice {lattice!r}: the angles make no cell")
    return 2 * np.pi * np.linalg.inv(direct).T


def reflection_frame(g_lab, hkl, lattice, beam=(0.0, 0.0, 1.0)) -> dict:
    """The reflection named: its reference spacing d_hkl (A) from ``lattice`` (:func:`reciprocal_metric`), the
    measured spacing's lattice strain (d - d_hkl) / d_hkl, and the rotation (3 x 3) from the lab frame to a frame
    of the crystal whose z is along G_hkl (B hkl, Cartesian crystal axes): one reflection fixes G's direction, not
    the crystal's turn about it, which the sample's orientation matrix (UB) would; here the lab beam's component
    across G is taken to the crystal's x-z plane (a convention, said in the result)."""
    hkl = np.asarray(hkl, np.float64)
    if hkl.shape != (3,) or not np.any(hkl):
        raise InputError(f"hkl: three Miller indices, not all 0, got {tuple(hkl)}")
    g_crystal = reciprocal_metric(lattice) @ hkl
    d_ref = float(2 * np.pi / np.linalg.norm(g_crystal))
    d = float(2 * np.pi / np.linalg.norm(g_lab))

    def frame(g, across):  # orthonormal rows x, y, z with z along g and x toward ``across`` (made perpendicular)
        z = g / np.linalg.norm(g)
        x = np.asarray(across, float) - np.dot(across, z) * z
        if np.linalg.norm(x) < 1e-9:
            x = np.eye(3)[np.argmin(np.abs(z))] - z * z[np.argmin(np.abs(z))]
        x /= np.linalg.norm(x)
        return np.stack([x, np.cross(z, x), z])

    # lab -> (G-aligned) -> crystal: the crystal's G-aligned frame takes its x from the crystal's x axis
    to_g_lab = frame(np.asarray(g_lab, float), beam)
    to_g_crystal = frame(g_crystal, (1.0, 0.0, 0.0))
    rotation = to_g_crystal.T @ to_g_lab
    return {"hkl": hkl.astype(int).tolist(), "d_ref_a": d_ref, "lattice_strain": (d - d_ref) / d_ref,
            "lab_to_crystal": rotation.tolist(),
            "about_g": "the turn about G is a convention (the lab beam's component across G to the crystal's x-z "
                       "plane): one reflection does not fix it"}


@dataclass
class BraggResult:
    """A rocking scan's reconstruction: ``obj`` and ``support`` in the array's frame (frame, row, col), ``lab`` and
    ``lab_support`` on the orthogonal lab grid (``voxel`` A, ``origin`` A: the lab position of voxel 0; axes lab x,
    y, z), ``strain`` along G there (NaN outside), ``displacement`` u_G there (A, the phase unwrapped over the
    support, its mean 0; NaN outside), ``g_lab`` (1/A), ``phasing`` (the PhaseResult),
    ``window`` and ``steps`` of the preparation, and ``geometry``."""

    obj: np.ndarray
    support: np.ndarray
    lab: np.ndarray
    lab_support: np.ndarray
    voxel: float
    origin: np.ndarray
    strain: np.ndarray
    displacement: np.ndarray
    g_lab: np.ndarray
    phasing: object
    window: tuple
    steps: dict
    geometry: BraggGeometry
    notes: dict = field(default_factory=dict)
    crystal: dict | None = None  # reflection_frame's, when the reflection is named

    @property
    def d_spacing(self) -> float:
        """2 pi / |G| (A): the lattice spacing of the reflection at the box's centre."""
        return float(2 * np.pi / np.linalg.norm(self.g_lab))

    def summary(self) -> dict:
        inside = self.strain[np.isfinite(self.strain)]
        out = {"d_spacing_a": self.d_spacing, "voxel_nm": self.voxel / 10, "lab_shape": list(self.lab.shape),
               "support_voxels": int(self.support.sum()), "strain_mean": float(inside.mean()),
               "strain_std": float(inside.std()), "fourier_error": float(self.phasing.fourier_error)}
        if self.crystal is not None:
            out.update(hkl=self.crystal["hkl"], d_ref_a=self.crystal["d_ref_a"],
                       lattice_strain=self.crystal["lattice_strain"])
        return out

    def save(self, path) -> Path:
        """The result as HDF5: the objects, supports, strain, the grid and the geometry (every number of it)."""
        import h5py

        from qora.io.atomic import atomic_path

        path = Path(path)
        with atomic_path(path) as tmp, h5py.File(tmp, "w") as f:
            f.attrs["qora_kind"] = "bragg_result"  # what `qora view` opens it as
            for name in ("obj", "support", "lab", "lab_support", "strain", "displacement"):
                f.create_dataset(name, data=getattr(self, name), compression="gzip")
            f.attrs["voxel_a"], f.attrs["origin_a"], f.attrs["g_lab"] = self.voxel, self.origin, self.g_lab
            f.attrs["window"] = np.asarray(self.window)
            g = f.create_group("geometry")
            for key in ("energy_ev", "distance_m", "pixel_m", "centre", "rocking", "step_deg"):
                g.attrs[key] = getattr(self.geometry, key)
            for name, value in self.geometry.angles.items():
                g.attrs[f"angle_{name}"] = value
            for key, value in self.summary().items():
                f.attrs[key] = value
            if self.crystal is not None:
                c = f.create_group("crystal")
                c.attrs["about_g"] = self.crystal["about_g"]
                c.create_dataset("lab_to_crystal", data=np.asarray(self.crystal["lab_to_crystal"]))
        return path


def bragg_strain(frames, geometry: BraggGeometry, *, dark=None, white=None, threshold: float = 1.0,
                 keep: float = 0.995, bin=(1, 1, 1), starts: int = 4, backend="auto", seed: int = 0,
                 recipe: str | None = None, progress=None, hkl=None, lattice=None) -> BraggResult:
    """A rocking scan's frames (frames, rows, cols: the geometry's) to the strain along its reflection; with
    ``hkl`` and ``lattice`` (:func:`reflection_frame`) also the lattice strain against that reflection's spacing
    and the frame of the crystal."""
    if (hkl is None) != (lattice is None):
        raise InputError("hkl and lattice name the reflection together: give both or neither")
    if hkl is not None:
        reflection_frame(np.ones(3), hkl, lattice)  # a bad reflection refused before the phasing
    from qora.phase import reconstruct
    from qora.phase.recipe import DEFAULT_RECIPE

    intensity, mask, window, steps = prepare_scan(frames, dark=dark, white=white, threshold=threshold, keep=keep,
                                                  bin=bin)
    factors = np.broadcast_to(np.asarray(bin, np.float64), (3,))
    # the box's centre in the unbinned scan's (frame, row, col); a binned step spans that many of the scan's
    centre = [(w + (n - 1) / 2) * f + (f - 1) / 2 for w, n, f in zip(window, intensity.shape, factors)]
    # a binned step spans f of the scan's: the basis of an array f times longer at the scan's own steps
    basis = geometry.direct_basis(np.asarray(intensity.shape) * factors, *centre)
    g_lab = geometry.q_lab(centre[1], centre[2])
    phasing = reconstruct(intensity, recipe=recipe or DEFAULT_RECIPE, starts=starts, seed=seed,
                          mask=mask if mask.any() else None, backend=backend, progress=progress)
    obj = np.asarray(phasing.object)
    support = np.asarray(phasing.support, bool)
    flat, ramp = remove_ramp(obj, support)
    lab, lab_support, voxel, origin = orthogonal_grid(flat, support, basis)
    strain = strain_along(lab, lab_support, voxel, g_lab)
    displacement = displacement_along(unwrap_in_support(lab, lab_support), g_lab)
    displacement -= np.nanmean(displacement)
    return BraggResult(flat, support, lab, lab_support, voxel, origin, strain, displacement, g_lab, phasing, window,
                       steps, geometry, notes={"ramp_rad_per_voxel": ramp.tolist()},
                       crystal=None if hkl is None else reflection_frame(g_lab, hkl, lattice,
                                                                         beam=geometry.circles.beam))


def write_vti(path, arrays: dict, *, voxel: float, origin) -> Path:
    """Arrays on one orthogonal grid (axes x, y, z; ``voxel`` A, ``origin`` A) as a VTK ImageData file (.vti,
    ParaView), each as float32 point data in raw little-endian binary."""
    import base64

    path = Path(path)
    shape = next(iter(arrays.values())).shape
    extent = f"0 {shape[0] - 1} 0 {shape[1] - 1} 0 {shape[2] - 1}"
    parts = []
    for name, a in arrays.items():
        if a.shape != shape:
            raise InputError(f"{name} has shape {a.shape}; the grid is {shape}")
        raw = np.asarray(a, "<f4").ravel(order="F").tobytes()  # VTK's x-fastest order
        header = np.array([len(raw)], "<u4").tobytes()
        parts.append(f'<DataArray type="Float32" Name="{name}" format="binary">'
                     f"{base64.b64encode(header + raw).decode()}</DataArray>")
    text = ('<?xml version="1.0"?>\n<VTKFile type="ImageData" version="0.1" byte_order="LittleEndian">\n'
            f'<ImageData WholeExtent="{extent}" Origin="{" ".join(f"{o / 10:g}" for o in origin)}" '
            f'Spacing="{voxel / 10:g} {voxel / 10:g} {voxel / 10:g}">\n<Piece Extent="{extent}">\n<PointData>\n'
            + "\n".join(parts) + "\n</PointData>\n</Piece>\n</ImageData>\n</VTKFile>\n")
    path.write_text(text)
    return path


def support_faces(support, values, voxel_nm: float, origin_nm):
    """The support's surface as the voxel faces between an inside and an outside voxel: quads (F, 4, 3) of their
    corners (nm, lab x y z) and the inside voxel's value of ``values`` for each (the surface the modulus threshold
    drew, exact on the voxels, no interpolation)."""
    inside = np.pad(np.asarray(support, bool), 1)
    padded = np.pad(np.asarray(values, float), 1)
    quads, colours = [], []
    unit = np.eye(3)
    for axis in range(3):
        for step in (-1, 1):
            neighbour = np.roll(inside, -step, axis=axis)
            cells = np.argwhere(inside & ~neighbour)
            if not len(cells):
                continue
            others = [a for a in range(3) if a != axis]
            base = cells - 1 + (0.5 + 0.5 * step) * unit[axis] - 0.5  # the face's plane, voxel centres at integers
            u, v = unit[others[0]], unit[others[1]]
            corners = np.stack([base, base + u, base + u + v, base + v], 1)
            quads.append(corners * voxel_nm + np.asarray(origin_nm))
            colours.append(padded[tuple(cells.T)])
    if not quads:
        return np.zeros((0, 4, 3)), np.zeros(0)
    return np.concatenate(quads), np.concatenate(colours)


def plot_bragg(path, result: BraggResult) -> Path:
    """A PNG of the reconstruction: the modulus, the strain along G and the displacement on the three central lab
    planes (x-y, x-z, y-z; nm axes), the support's outline over each; and the support's surface (the modulus
    threshold's isosurface, voxel faces) coloured by the strain, in 3D."""
    from qora.plot import save_png, subplots

    fig, axes = subplots(4, 3, figsize=(11, 15), gridspec_kw={"height_ratios": (1, 1, 1, 1.6)})
    grid = axes[0, 0].get_gridspec()  # before the colour bars split the cells
    centre = [n // 2 for n in result.lab.shape]
    extent_nm = [result.origin[i] / 10 + result.voxel / 10 * np.array([0, n - 1]) for i, n in
                 enumerate(result.lab.shape)]
    finite = result.strain[np.isfinite(result.strain)]
    limit = float(np.percentile(np.abs(finite), 99)) if finite.size else 1.0
    u = result.displacement[np.isfinite(result.displacement)]
    shown = (("modulus", np.abs(result.lab), "gray", (0.0, float(np.abs(result.lab).max()))),
             ("strain along G", result.strain, "coolwarm", (-limit, limit)),
             ("displacement along G (A)", result.displacement, "viridis",
              (float(u.min()), float(u.max())) if u.size else None))  # one scale a row: the planes compare
    planes = ((2, "x", "y", (0, 1)), (1, "x", "z", (0, 2)), (0, "y", "z", (1, 2)))
    for row, (title, values, cmap, clim) in enumerate(shown):
        for col, (axis, first, second, (i, j)) in enumerate(planes):
            ax = axes[row, col]
            plane = np.take(values, centre[axis], axis=axis)
            outline = np.take(result.lab_support, centre[axis], axis=axis)
            extent = (extent_nm[i][0], extent_nm[i][1], extent_nm[j][0], extent_nm[j][1])
            im = ax.imshow(plane.T, origin="lower", cmap=cmap, extent=extent,
                           **({"vmin": clim[0], "vmax": clim[1]} if clim else {}))
            ax.contour(outline.T.astype(float), levels=[0.5], colors="k", linewidths=0.5, extent=extent)
            ax.set_xlabel(f"{first} (nm)")
            ax.set_ylabel(f"{second} (nm)")
            ax.set_title(f"{title}, {first}-{second}", fontsize=9)
            fig.colorbar(im, ax=ax, fraction=0.046)
    for ax in axes[3]:
        ax.remove()
    _surface(fig.add_subplot(grid[3, :2], projection="3d"), result, limit)
    fig.suptitle(f"d = {result.d_spacing:.4f} A, voxel {result.voxel / 10:.1f} nm", fontsize=10)
    # fixed margins: tight_layout draws the figure once more to measure it, 3D surface included
    fig.subplots_adjust(left=0.07, right=0.93, bottom=0.03, top=0.95, wspace=0.5, hspace=0.3)
    save_png(fig, path)
    return Path(path)


def _surface(ax, result: BraggResult, limit: float) -> None:
    """The support's surface coloured by the strain along G (one colour scale with the planes above)."""
    from matplotlib import cm
    from matplotlib.colors import Normalize
    from mpl_toolkits.mplot3d.art3d import Poly3DCollection

    strain = np.nan_to_num(result.strain, nan=0.0)
    quads, colours = support_faces(result.lab_support, strain, result.voxel / 10, np.asarray(result.origin) / 10)
    mapper = cm.ScalarMappable(Normalize(-limit, limit), "coolwarm")
    ax.add_collection3d(Poly3DCollection(quads, facecolors=mapper.to_rgba(colours), edgecolors="none"))
    if len(quads):
        low, high = quads.reshape(-1, 3).min(0), quads.reshape(-1, 3).max(0)
        ax.set(xlim=(low[0], high[0]), ylim=(low[1], high[1]), zlim=(low[2], high[2]))
        ax.set_box_aspect(tuple(np.maximum(high - low, 1e-9)))
    ax.set(xlabel="x (nm)", ylabel="y (nm)", zlabel="z (nm)")
    ax.set_title("the support's surface (the modulus threshold), coloured by the strain along G", fontsize=9)
    ax.figure.colorbar(mapper, ax=ax, fraction=0.03, pad=0.1, label="strain")
