"""A 4D-STEM simulator of our own, for tests and the demo (independent of the reconstruction code).

The specimen is a stack of phase slices on a periodic grid of ``pixel`` A; the probe, formed
by an aperture of semi-angle alpha with aberrations (``optics.probe_spectrum``), is scanned in
steps of ``stride`` pixels over the whole periodic field, so the scan has no edges. At each
position the exit wave of the probe window (``window`` x ``window`` pixels) is found by
multislice: multiply by exp(i phi_j) (slice j, laterally shifted by z_j tau for a specimen
tilt tau), propagate by the slice spacing with exp(-i pi lambda dz |k|^2); the detector records
|F exit|^2, the window's Fourier grid (1/(window pixel) 1/A per detector pixel), with q = 0 at
the detector's centre pixel. The defocus convention matches ``optics``: a slice at depth z
(from the mid-plane) sees C10 + z.

Units: A, mrad, kV, rad; dose in electrons per A^2.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qora.backend.fft import fftn, ifftn
from qora.io.errors import InputError
from qora.io.validate import disk_needed as check_disk  # noqa: F401  (qora.ssb's name for it)
from qora.io.validate import integer, memory_needed, nonnegative, number, positive
from qora.progress import report
from qora.ssb.optics import Aberrations, probe_spectrum, semiangle, voltage, wavelength

__all__ = ["check_sampling", "amorphous_slices", "atoms_slice", "crystal_slices", "film_counts", "rotate_detector", "Scan4D",
           "simulate", "simulate_to_npy", "scan_truth", "simulation_bytes", "check_simulation_memory", "check_disk"]


def simulation_bytes(positions: int, window: int, *, dose: float | None = None) -> int:
    """Host bytes :func:`simulate` holds at its peak: the float64 patterns of every scan position
    (three such arrays while Poisson counts are drawn with a ``dose``)."""
    return int(positions) * int(window) ** 2 * 8 * (3 if dose is not None else 1)


def check_simulation_memory(positions: int, window: int, *, dose: float | None = None, available="host") -> None:
    """Refuse, before any work, a simulation that needs more host memory than is available
    (MemoryNeeded: how much is needed, how much there is, and that a smaller scan or window shrinks
    it). ``available``: bytes, or "host" for what this process may still allocate."""
    if available == "host":
        from qora.backend import host

        available = host.available_memory()
    memory_needed(simulation_bytes(positions, window, dose=dose),
                  f"the simulation of {positions} scan positions of {window} x {window} pixels",
                  available=available, hint="a smaller scan (--scan) or window (--window) shrinks it")


def check_sampling(pixel: float, kv: float, alpha_mrad: float) -> float:
    """Refuse (InputError) a pixel (A) too coarse for the aperture: alpha / lambda must stay within 2/3 of the
    sampling's Nyquist frequency. Returns the wavelength (A). Checked before any slice is made (a coarse pixel
    also makes :func:`amorphous_slices` place atoms by the billion)."""
    lam = wavelength(kv)
    reach, limit = semiangle(alpha_mrad) * 1e-3 / lam, 0.5 / positive("pixel", pixel, unit="A") * 2 / 3
    if reach >= limit:
        raise InputError(f"the aperture (alpha / lambda = {reach:.3g} 1/A at {kv:g} kV, {alpha_mrad:g} mrad) reaches "
                         f"beyond 2/3 of the sampling's Nyquist frequency ({limit:.3g} 1/A for a {pixel:g} A pixel): "
                         "a smaller semi-angle (--semiangle), a lower voltage (--kv: a longer wavelength) or a "
                         "finer pixel (the CLI's is --step / 2) brings it inside")
    return lam


def _check_geometry(pixel, stride, window, kv, alpha_mrad, thickness, tilt):
    pixel = positive("pixel", pixel, unit="A")
    stride = integer("stride", stride, low=1)
    window = integer("window", window, low=2)
    kv, alpha_mrad = voltage(kv), semiangle(alpha_mrad)
    thickness = nonnegative("thickness", thickness, unit="A")
    try:
        tilt = tuple(number(f"tilt[{i}]", t, unit="rad") for i, t in enumerate(tilt))
    except TypeError:
        raise InputError(f"tilt must be (tau_y, tau_x) in rad, got {tilt!r}") from None
    if len(tilt) != 2:
        raise InputError(f"tilt must be (tau_y, tau_x) in rad, got {tilt!r}")
    return pixel, stride, window, kv, alpha_mrad, thickness, tilt


def _field_shape(slices, stride: int):
    shape = np.shape(slices)
    if len(shape) not in (2, 3) or not all(shape):
        raise InputError(f"slices must be phases of shape (ny, nx) or (count, ny, nx), got shape {shape}")
    return (shape[-2] // stride) * (shape[-1] // stride)


def amorphous_slices(shape, pixel: float, *, slices: int = 1, atoms_per_a2: float = 0.05, sigma: float = 0.4,
                     phase_per_atom: float = 0.05, seed: int = 0) -> np.ndarray:
    """Random-atom phase slices (slices, ny, nx) in rad: Gaussian atoms of std ``sigma`` A at
    uniform random positions, each adding ``phase_per_atom`` rad at its peak; periodic. ``shape`` is
    (ny, nx) in pixels of ``pixel`` A; ``atoms_per_a2`` the areal density (atoms per A^2, per slice)."""
    ny, nx = shape
    rng = np.random.default_rng(seed)
    count = max(1, int(round(atoms_per_a2 * ny * nx * pixel**2)))
    from qora.backend import host

    # each slice's spectrum is a product of (ny, atoms) and (atoms, nx) complex matrices
    memory_needed(16 * count * (ny + nx) + 8 * slices * ny * nx, f"{count} atoms a slice over a {ny} x {nx} field of "
                  f"{pixel:g} A pixels", available=host.available_memory(), hint="a finer pixel (fewer atoms a pixel) "
                  "or a smaller field shrinks it")
    out = np.empty((slices, ny, nx))
    for s in range(slices):
        ry = rng.uniform(0, ny * pixel, count)
        rx = rng.uniform(0, nx * pixel, count)
        out[s] = atoms_slice(shape, pixel, ry, rx, sigma=sigma, phase_per_atom=phase_per_atom)
    return out


def atoms_slice(shape, pixel: float, ry, rx, *, sigma: float = 0.4, phase_per_atom=0.05) -> np.ndarray:
    """One phase slice (ny, nx) (rad) of Gaussian atoms of std ``sigma`` A at positions (ry, rx) (A),
    each adding ``phase_per_atom`` rad (a scalar or one per atom) at its peak; periodic; ``shape`` in
    pixels of ``pixel`` A. The atoms'
    spectrum is summed at their exact positions, then multiplied by the Gaussian: no rounding to pixels."""
    ny, nx = shape
    ry, rx = np.asarray(ry, float), np.asarray(rx, float)
    weight = np.broadcast_to(np.asarray(phase_per_atom, float), ry.shape)
    ky = np.fft.fftfreq(ny, pixel)[:, None]
    kx = np.fft.fftfreq(nx, pixel)[None, :]
    blob = np.exp(-2 * np.pi**2 * sigma**2 * (kx**2 + ky**2))  # FT of the unit-peak Gaussian / (2 pi sigma^2)
    # sum_a w_a e^{-2 pi i (ky ry_a + kx rx_a)} is a product of an (ny, atoms) and an (atoms, nx) matrix
    spec = (np.exp(-2j * np.pi * ky * ry[None, :]) * weight[None, :]) @ np.exp(-2j * np.pi * rx[:, None] * kx)
    return ifftn(spec * blob, axes=(-2, -1)).real * (2 * np.pi * sigma**2) / pixel**2


def crystal_slices(shape, pixel: float, *, period: float, basis=((0.0, 0.0, 1.0), (0.5, 0.3, 0.6)),
                   sigma: float = 0.35, phase_per_atom: float = 0.05, slices: int = 1) -> np.ndarray:
    """A square lattice of ``period`` A with a ``basis`` of atoms (fractional y, x, relative
    strength), as phase slices (slices, ny, nx) (rad), each slice the same layer; ``shape`` (ny, nx) in
    pixels of ``pixel`` A, ``sigma`` the atoms' std (A), ``phase_per_atom`` rad. The field must
    hold a whole number of periods on both axes (the slices are periodic)."""
    ny, nx = shape
    cells = (ny * pixel / period, nx * pixel / period)
    if not all(abs(c - round(c)) < 1e-9 for c in cells):
        raise ValueError(f"the field ({ny * pixel}, {nx * pixel}) A must hold whole periods of {period} A")
    iy, ix = np.meshgrid(np.arange(round(cells[0])), np.arange(round(cells[1])), indexing="ij")
    ry, rx, w = [], [], []
    for fy, fx, strength in basis:
        ry.append(((iy + fy) * period).ravel())
        rx.append(((ix + fx) * period).ravel())
        w.append(np.full(iy.size, strength * phase_per_atom))
    layer = atoms_slice(shape, pixel, np.concatenate(ry), np.concatenate(rx), sigma=sigma,
                        phase_per_atom=np.concatenate(w))
    return np.repeat(layer[None], slices, axis=0)


@dataclass
class Scan4D:
    """A 4D-STEM dataset and what produced it.

    ``data`` (scan_row, scan_col, det_row, det_col), counts or intensities; ``scan_step`` A;
    ``detector_pixel`` 1/A per detector pixel; ``kv`` kV; ``alpha_mrad`` mrad; ``aberrations``
    C_nm (A) and azimuths (rad); ``phase`` the specimen's total phase (ny, nx) rad on the
    simulation grid of ``pixel`` A; ``thickness`` A; ``tilt`` (tau_y, tau_x) rad.
    """

    data: np.ndarray
    scan_step: float
    detector_pixel: float
    kv: float
    alpha_mrad: float
    aberrations: Aberrations
    pixel: float
    phase: np.ndarray
    thickness: float = 0.0
    tilt: tuple = (0.0, 0.0)

    @property
    def mrad_per_pixel(self) -> float:
        return self.detector_pixel * wavelength(self.kv) * 1e3


class _Multislice:
    """The probe, the slices' transmissions and the propagator of one simulation, on the array
    module ``xp`` (NumPy or CuPy), and the diffraction patterns of any batch of scan positions."""

    def __init__(self, slices, *, pixel: float, stride: int, window: int, kv: float, alpha_mrad: float,
                 aberrations: Aberrations, thickness: float, tilt, xp=np) -> None:
        slices = np.asarray(slices)
        if np.iscomplexobj(slices):
            raise InputError("slices must be real phases (rad), got complex values")
        slices = slices.astype(np.float64)
        if slices.ndim == 2:
            slices = slices[None]
        if slices.ndim != 3 or not np.all(np.isfinite(slices)):
            raise InputError("slices must be finite phases of shape (ny, nx) or (count, ny, nx)")
        count, ny, nx = slices.shape
        if ny % stride or nx % stride:
            raise InputError(f"the field ({ny}, {nx}) must be a whole number of scan steps of {stride} pixels")
        if window > min(ny, nx):
            raise InputError(f"the probe window {window} exceeds the field ({ny}, {nx})")
        lam = check_sampling(pixel, kv, alpha_mrad)
        self.xp, self.shape, self.window, self.count, self.slices = xp, (ny, nx), window, count, slices
        k = np.fft.fftfreq(window, pixel)
        kx, ky = k[None, :], k[:, None]
        depths = (np.arange(count) + 0.5) * (thickness / count) - thickness / 2 if count > 1 else np.zeros(1)
        dz = thickness / count if count > 1 else 0.0
        first = Aberrations({**aberrations.values, "C10": (aberrations.get("C10") + depths[0], 0.0)})
        probe_k = probe_spectrum(kx, ky, first, alpha_mrad, lam)
        probe_k /= np.sqrt(np.sum(np.abs(probe_k) ** 2))
        self.lit = np.count_nonzero(np.abs(probe_k) > 0)  # incident-beam pixels
        self.probe = xp.asarray(np.fft.fftshift(ifftn(probe_k, axes=(-2, -1)) * window))  # centred in the window
        self.propagate = xp.asarray(np.exp(-1j * np.pi * lam * dz * (kx**2 + ky**2)))
        # tilted slices: shift slice j by depth_j * tau (Fourier shift on the periodic field)
        fy = np.fft.fftfreq(ny, pixel)[:, None]
        fx = np.fft.fftfreq(nx, pixel)[None, :]
        self.transmissions = xp.empty(slices.shape, np.complex128)
        for j in range(count):
            sy, sx = depths[j] * tilt[0], depths[j] * tilt[1]
            shift = np.exp(-2j * np.pi * (fy * sy + fx * sx))
            shifted = ifftn(fftn(slices[j], axes=(-2, -1)) * shift, axes=(-2, -1)).real
            self.transmissions[j] = xp.asarray(np.exp(1j * shifted))
        rows, cols = np.meshgrid(np.arange(0, ny, stride), np.arange(0, nx, stride), indexing="ij")
        self.positions = np.stack([rows.ravel(), cols.ravel()], 1)
        self.offsets = np.arange(window) - window // 2

    def patterns(self, pos):
        """|F exit|^2 / window^2 at the scan positions ``pos`` (n, 2) (rows, cols of the field)."""
        xp, (ny, nx), window = self.xp, self.shape, self.window
        iy = xp.asarray((pos[:, 0, None] + self.offsets[None, :]) % ny)
        ix = xp.asarray((pos[:, 1, None] + self.offsets[None, :]) % nx)
        wave = xp.broadcast_to(self.probe, (len(pos), window, window)).copy()
        for j in range(self.count):
            wave *= self.transmissions[j][iy[:, :, None], ix[:, None, :]]
            if j + 1 < self.count:
                wave = ifftn(fftn(wave, axes=(-2, -1)) * self.propagate, axes=(-2, -1))
        far = xp.fft.fftshift(fftn(xp.fft.ifftshift(wave, axes=(1, 2)), axes=(-2, -1)), axes=(1, 2))
        return xp.abs(far) ** 2 / window**2


def simulate(slices, *, pixel: float, stride: int, window: int, kv: float = 300.0, alpha_mrad: float = 20.0,
             aberrations: Aberrations | None = None, thickness: float = 0.0, tilt=(0.0, 0.0),
             dose: float | None = None, seed: int = 0, batch: int = 256, progress=None) -> Scan4D:
    """Scan the probe over ``slices`` (phase, rad; (ny, nx) or (count, ny, nx)) and record 4D data.

    ``pixel`` is the slices' pixel (A); the scan step is ``stride`` pixels (``stride * pixel`` A) and
    each pattern is the ``window`` x ``window`` pixel window's spectrum (detector pixel
    1 / (``window * pixel``) 1/A); ``kv`` the accelerating voltage (kV), ``alpha_mrad`` the
    convergence semi-angle (mrad), ``aberrations`` C_nm (A) and azimuths (rad).
    ``thickness`` (A) spreads the slices evenly over it (a single slice ignores it); ``tilt``
    (tau_y, tau_x) (rad) shifts the slice at depth z by z tau; ``dose`` (e/A^2) draws Poisson
    counts, otherwise the intensity is normalised to 1 per pixel of the incident beam. The memory
    it needs (:func:`simulation_bytes`) is checked first: too much is a MemoryNeeded.
    ``progress`` is told the scan positions done ("simulate", done, total).
    """
    pixel, stride, window, kv, alpha_mrad, thickness, tilt = _check_geometry(pixel, stride, window, kv, alpha_mrad,
                                                                             thickness, tilt)
    if dose is not None:
        dose = positive("dose", dose, unit="e/A^2")
    seed, batch = integer("seed", seed, low=0), integer("batch", batch, low=1)
    check_simulation_memory(_field_shape(slices, stride), window, dose=dose)
    aberrations = aberrations or Aberrations()
    ms = _Multislice(slices, pixel=pixel, stride=stride, window=window, kv=kv, alpha_mrad=alpha_mrad,
                     aberrations=aberrations, thickness=thickness, tilt=tilt)
    (ny, nx), positions = ms.shape, ms.positions
    data = np.empty((len(positions), window, window))
    report(progress, "simulate", 0, len(positions))  # the clock of the run's rate starts with the work
    for start in range(0, len(positions), batch):
        data[start:start + batch] = ms.patterns(positions[start:start + batch])
        report(progress, "simulate", min(start + batch, len(positions)), len(positions))
    # one incident-beam detector pixel holds 1 on average inside the bright field
    data *= ms.lit
    if dose is not None:
        per_position = dose * (stride * pixel) ** 2
        data = np.random.default_rng(seed).poisson(data * per_position / ms.lit).astype(np.float64)
    data = data.reshape(ny // stride, nx // stride, window, window)
    return Scan4D(data=data, scan_step=stride * pixel, detector_pixel=1.0 / (window * pixel), kv=kv,
                  alpha_mrad=alpha_mrad, aberrations=aberrations, pixel=pixel, phase=ms.slices.sum(0),
                  thickness=thickness, tilt=tuple(tilt))


def simulate_to_npy(path, slices, *, pixel: float, stride: int, window: int, detector: int, dose: float,
                    kv: float = 300.0, alpha_mrad: float = 20.0, aberrations: Aberrations | None = None,
                    thickness: float = 0.0, tilt=(0.0, 0.0), seed: int = 0, batch: int = 2048, backend="auto",
                    progress=None) -> dict:
    """:func:`simulate` for scans too large for memory: Poisson counts (``dose`` e/A^2) written as
    uint16 to a ``.npy`` file (scan_row, scan_col, detector, detector) batch by batch, the
    multislice on ``backend``. ``pixel`` (A), ``stride``, ``window``, ``kv`` (kV), ``alpha_mrad`` (mrad),
    ``aberrations``, ``thickness`` (A) and ``tilt`` (rad) as in :func:`simulate`.
    The window's patterns sit centred on a ``detector`` x ``detector`` pixel
    array (``detector`` >= ``window``; the rim beyond the simulated angles reads 0). Returns the
    dataset's metadata (kv, alpha_mrad, scan_step_a, detector_pixel_inv_a, the largest count)."""
    from qora.backend import resolve
    from qora.io.atomic import atomic_path

    pixel, stride, window, kv, alpha_mrad, thickness, tilt = _check_geometry(pixel, stride, window, kv, alpha_mrad,
                                                                             thickness, tilt)
    detector = integer("detector", detector, low=window)
    dose = positive("dose", dose, unit="e/A^2")
    seed, batch = integer("seed", seed, low=0), integer("batch", batch, low=1)
    check_disk(path, _field_shape(slices, stride) * detector**2 * 2 + 128, "the simulated .npy",
               "a smaller scan or detector shrinks it")
    be = resolve(backend)
    xp = be.xp
    aberrations = aberrations or Aberrations()
    ms = _Multislice(slices, pixel=pixel, stride=stride, window=window, kv=kv, alpha_mrad=alpha_mrad,
                     aberrations=aberrations, thickness=thickness, tilt=tilt, xp=xp)
    (ny, nx), positions = ms.shape, ms.positions
    with atomic_path(path) as tmp:  # a failure or an interrupt leaves no partial file under ``path``
        out = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.uint16,
                                        shape=(ny // stride, nx // stride, detector, detector))
        flat = out.reshape(-1, detector, detector)
        pad = (detector - window) // 2
        per_position = dose * (stride * pixel) ** 2
        rng = xp.random.RandomState(seed)
        largest = 0
        try:
            for start in range(0, len(positions), batch):
                counts = rng.poisson(ms.patterns(positions[start:start + batch]) * per_position)
                largest = max(largest, int(counts.max()))
                if largest > np.iinfo(np.uint16).max:
                    raise InputError(f"a count of {largest} does not fit uint16: lower the dose")
                flat[start:start + len(counts), pad:pad + window, pad:pad + window] = \
                    be.to_host(counts.astype(np.uint16))
                report(progress, "simulate", start + len(counts), len(positions))
            out.flush()
        finally:
            del out, flat
    return {"kv": kv, "alpha_mrad": alpha_mrad, "scan_step_a": stride * pixel,
            "detector_pixel_inv_a": 1.0 / (window * pixel), "largest_count": largest}


def film_counts(field: int, *, aberrations=None, window: int = 32, alpha_mrad: float = 25.0, dose: float = 2e5,
                film_seed: int = 1, noise_seed: int = 3, atoms_per_a2: float = 0.1) -> tuple[np.ndarray, float]:
    """A small amorphous film (``field`` x ``field`` pixels of 0.1 A, one slice) scanned every 4
    pixels with a ``window`` x ``window`` detector at 300 kV, recorded as a detector sends it:
    Poisson counts at ``dose`` electrons/A^2, as uint16. Returns (counts (scan, scan, window,
    window), scan step in A). The examples' and the live tests' scan (one recipe, their sizes and
    seeds)."""
    scan = simulate(amorphous_slices((field, field), 0.1, atoms_per_a2=atoms_per_a2, seed=film_seed), pixel=0.1,
                    stride=4, window=window, alpha_mrad=alpha_mrad,
                    aberrations=Aberrations() if aberrations is None else aberrations, dose=dose, seed=noise_seed)
    return scan.data.astype(np.uint16), scan.scan_step


def scan_truth(scan: Scan4D, *, band_limit: float | None = None) -> np.ndarray:
    """The specimen's phase on the scan grid (Fourier-resampled), low-passed to |Q| <= ``band_limit``
    (1/A; default 2 alpha / lambda, what SSB can transfer), mean removed."""
    phase = scan.phase
    sy, sx = scan.data.shape[:2]
    spec = fftn(phase, axes=(-2, -1))
    ny, nx = phase.shape
    keep_y = np.fft.fftfreq(sy, 1.0 / sy).astype(int)
    keep_x = np.fft.fftfreq(sx, 1.0 / sx).astype(int)
    small = spec[np.ix_(keep_y % ny, keep_x % nx)] * (sy * sx) / (ny * nx)
    qy = np.fft.fftfreq(sy, scan.scan_step)[:, None]
    qx = np.fft.fftfreq(sx, scan.scan_step)[None, :]
    limit = band_limit if band_limit is not None else 2 * scan.alpha_mrad * 1e-3 / wavelength(scan.kv)
    small[np.hypot(qy, qx) > limit] = 0
    small[0, 0] = 0
    return ifftn(small, axes=(-2, -1)).real


def rotate_detector(data, theta: float) -> np.ndarray:
    """Patterns of a scan turned by ``theta`` (rad) against the detector: I_d(k_d) = I_s(R(-theta) k_d),
    the scan frame's patterns resampled (bilinear, about the detector's centre pixel) at the
    detector's pixels. Simulates a scan rotation the fits must find. ``data``: (scan_row, scan_col,
    det_row, det_col), counts or intensities."""
    from scipy.ndimage import map_coordinates

    n = data.shape[-1]
    yd, xd = np.indices((n, n)) - n // 2
    c, s = np.cos(theta), np.sin(theta)
    coords = np.array([-s * xd + c * yd + n // 2, c * xd + s * yd + n // 2])
    flat = data.reshape(-1, n, n)
    return np.stack([map_coordinates(p, coords, order=1) for p in flat]).reshape(data.shape)
