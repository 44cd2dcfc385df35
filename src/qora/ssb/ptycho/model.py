"""The multislice forward model of ptychography and its exact gradient (NumPy or CuPy arrays alike).

At scan position j the probe's K modes P_m (the window's N x N pixels of ``pixel`` A) are shifted by the position's
sub-pixel part f_j (a Fourier phase ramp) and pass S object slices O_s (complex transmissions on the object's grid,
read in the window at the position's whole-pixel corner c_j):

    psi_0 = shift(P_m, f_j),   psi_{s+1} = prop(psi_s O_s[c_j]),   Psi_m = F(psi_{S-1} O_{S-1}[c_j]),
    I_j(k) = sum_m |Psi_m(k)|^2,

with prop the Fresnel propagator over the slice spacing dz, exp(-i pi lambda dz |k|^2) (the sign of
qora.ssb.simulation, so that a slice at depth z sees C10 + z), and F the unitary 2D FFT. The patterns are in FFT
order (q = 0 at pixel 0): the data are ifftshifted once when they are loaded, not the model every step.

The loss is the amplitude misfit L = sum_j sum_k (sqrt(I_j) - sqrt(D_j))^2 (Gaussian in the amplitude: the
variance of the square root of Poisson counts is about 1/4 whatever the count, so the weights are equal), or the
Poisson misfit sum (I - D log I) (exact for counts; at a few counts a pixel the amplitude's variance is not 1/4).
Its gradient
flows back through every step (Wirtinger derivatives, dL = 2 Re sum conj(g) dz):

    g(Psi_m) = (1 - sqrt(D) / sqrt(I)) Psi_m,  g(exit) = F^H g(Psi),
    g(O_s[c_j]) += conj(psi_s) g_s,  g(psi_s) = conj(O_s[c_j]) g_s,  g_{s-1} = prop^H g(psi_s),
    g(P_m) = sum_j shift^H(g(psi_0)),  dL/df = 2 Re sum conj(g(psi_0)) d shift(P_m, f) / df.

The object's gradient is summed over the modes and scattered back to the object's grid. The position derivative
is the model's own: within a whole pixel the window is fixed and the probe moves by its ramp.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qora.backend.core import resolve, xp_of
from qora.backend.fft import fftn, ifftn

__all__ = ["Grid", "Batch", "forward", "backward", "exit_waves", "loss_and_gradients", "propagator", "window_corners"]


@dataclass(frozen=True)
class Grid:
    """The model's sampling: ``window`` pixels of ``pixel`` A across the probe (the detector's pixels; the
    detector pixel is 1 / (window pixel) 1/A), ``wavelength`` (A), ``slice_spacing`` dz (A) between slices, and the
    propagator's band (1/A; None: the whole grid): frequencies beyond it are cut at every propagation, as
    multislice codes do against aliasing."""

    window: int
    pixel: float
    wavelength: float
    slice_spacing: float
    band: float | None = None

    def frequencies(self, xp=np):
        """ky (N, 1) and kx (1, N), 1/A, in FFT order."""
        k = xp.fft.fftfreq(self.window, self.pixel)  # made where used: a host copy a call waited for the device
        return k[:, None], k[None, :]


def propagator(grid: Grid, xp=np, dtype=np.complex128):
    """exp(-i pi lambda dz |k|^2) on the window's frequencies, zero beyond ``grid.band``."""
    ky, kx = grid.frequencies(xp)
    k2 = ky**2 + kx**2
    h = xp.exp(-1j * np.pi * grid.wavelength * grid.slice_spacing * k2)
    if grid.band is not None:
        h = h * (k2 <= grid.band**2)
    return h.astype(dtype)


def window_corners(positions):
    """Whole-pixel corners (B, 2) int and sub-pixel parts (B, 2) in [0, 1) of window positions (B, 2) (pixels of the
    object's grid, row and column of the window's first pixel)."""
    xp = xp_of(positions)
    corners = xp.floor(positions)
    return corners.astype(np.int64), positions - corners


@dataclass
class Batch:
    """What the forward pass of a batch keeps for the backward pass."""

    corners: object  # (B, 2) int
    ramps: object  # (B, N, N): exp(-2 pi i k.f), the sub-pixel shift in Fourier space
    probe_k: object  # (K, N, N): F(P)
    waves: list  # psi_s (B, K, N, N), the wave entering slice s
    patches: list  # O_s[c_j] (B, N, N), or None where the CUDA kernels read the slice (model._transmit)
    far: object  # Psi (B, K, N, N)
    intensity: object  # I (B, N, N)


def _unscaled(a, *, inverse: bool = False):
    """The unscaled transform of the last two axes of ``a`` (B, K, N, N); on the GPU by a cuFFT plan kept per shape
    (cupy.fft's entry point spent more Python on each call than the transform's arithmetic took)."""
    xp = xp_of(a)
    if xp is np:
        return ifftn(a, axes=(-2, -1), norm="forward") if inverse else fftn(a, axes=(-2, -1))
    a = xp.ascontiguousarray(a)
    plan = resolve("cuda").fft.c2c(a.shape, a.dtype, axes=(-2, -1), norm=None)
    return plan.inverse(a) if inverse else plan.forward(a)


def _propagate(wave, scaled):
    """The waves (B, K, N, N) over one slice spacing: F^-1 (F(wave) prop) with unscaled transforms and ``scaled`` the
    propagator over N^2 (the unitary transforms' product; their own scaling was a pass over the waves each)."""
    k = _unscaled(wave)
    k *= scaled
    return _unscaled(k, inverse=True)


def _on_device_kernels(wave, slice_) -> bool:
    """Whether the slice products run as qora.ssb.kernels' ptycho kernels: CuPy arrays of one complex dtype."""
    return xp_of(wave) is not np and wave.dtype == slice_.dtype and wave.dtype in (np.complex64, np.complex128)


def _transmit(slice_, wave, corners, n: int):
    """The waves (B, K, N, N) through one slice: (wave times the slice's window at each corner, the windows (B, N,
    N) for the backward pass, or None where the kernel made the product and the backward kernel reads the slice
    again)."""
    if not _on_device_kernels(wave, slice_):
        patch = _patches(slice_, corners, n)
        return wave * patch[:, None], patch
    from qora.ssb.kernels import ptycho_transmit

    xp = xp_of(wave)
    wave = xp.ascontiguousarray(wave)
    out = xp.empty_like(wave)
    ptycho_transmit(wave=wave, slice_=xp.ascontiguousarray(slice_), corners=xp.ascontiguousarray(corners), out=out)
    return out, None


def _slice_adjoint(g, wave, slice_, patch, corners, g_slice, lit):
    """One slice of the backward pass: the sum over modes of conj(wave) g added into ``g_slice`` (H, W) at the
    windows, that of |wave|^2 into ``lit`` (H, W; None: not summed), and g times the windows' conj(O) returned."""
    xp = xp_of(g)
    if patch is not None:
        n = g.shape[-1]
        _scatter_add(g_slice, (xp.conj(wave) * g).sum(1), corners, n)
        if lit is not None:
            _scatter_add(lit, (wave.real**2 + wave.imag**2).sum(1), corners, n)
        return xp.conj(patch)[:, None] * g
    from qora.ssb.kernels import ptycho_slice_adjoint

    g = xp.ascontiguousarray(g, dtype=wave.dtype)  # the model's precision (g is complex128 from float64 counts)
    out = xp.empty_like(g)
    real = wave.real.dtype
    into = lit if lit is None or lit.dtype == real else xp.zeros(lit.shape, real)
    ptycho_slice_adjoint(wave=xp.ascontiguousarray(wave), g=g, slice_=xp.ascontiguousarray(slice_),
                         corners=xp.ascontiguousarray(corners), g_out=out, g_slice=g_slice, lit=into)
    if into is not lit:
        lit += into
    return out


def _patches(slice_, corners, n: int):
    xp = xp_of(slice_)
    rows = corners[:, 0, None] + xp.arange(n)[None, :]
    cols = corners[:, 1, None] + xp.arange(n)[None, :]
    return slice_[rows[:, :, None], cols[:, None, :]]


def _ramps(grid: Grid, fractions, dtype):
    ky, kx = grid.frequencies(xp_of(fractions))
    xp = xp_of(fractions)
    phase = (fractions[:, 0, None, None] * ky * grid.pixel + fractions[:, 1, None, None] * kx * grid.pixel)
    return xp.exp(-2j * np.pi * phase).astype(dtype)


def forward(objects, probe, positions, grid: Grid, prop=None, *, intensity: bool = True) -> Batch:
    """The patterns I (B, N, N), FFT order, of the probe modes ``probe`` (K, N, N) through the slices ``objects``
    (S, H, W) at window positions (B, 2) (object pixels; the windows must lie inside the object's grid).
    ``intensity`` False: the batch's ``intensity`` is left None (the misfit's kernel sums it from ``far``)."""
    xp = xp_of(objects, probe)
    n = grid.window
    prop = propagator(grid, xp, objects.dtype) if prop is None else prop
    corners, fractions = window_corners(positions)
    ramps = _ramps(grid, fractions, objects.dtype)
    probe_k = fftn(probe, axes=(-2, -1), norm="ortho")
    wave = ifftn(ramps[:, None] * probe_k[None], axes=(-2, -1), norm="ortho")  # (B, K, N, N)
    waves, patches = [], []
    scaled = prop / (n * n)  # the transforms' two 1/N folded into the propagator: no scaling pass a transform
    for s in range(objects.shape[0]):
        waves.append(wave)
        wave, patch = _transmit(objects[s], wave, corners, n)
        patches.append(patch)
        if s + 1 < objects.shape[0]:
            wave = _propagate(wave, scaled)
    far = fftn(wave, axes=(-2, -1), norm="ortho")
    return Batch(corners, ramps, probe_k, waves, patches, far, _intensity(far) if intensity else None)


def _intensity(far):
    """I (B, N, N): the modes' far fields' power summed."""
    return (far.real**2 + far.imag**2).sum(1)


def _far_kernel_takes(far, amplitudes) -> bool:
    """Whether the misfit's weight runs as ptycho.cu's kernel: CuPy arrays, complex far fields, real amplitudes."""
    return (xp_of(far) is not np and far.dtype in (np.complex64, np.complex128)
            and amplitudes.dtype in (np.float32, np.float64))


def _far_weight(b: Batch, amplitudes, floor: float, noise: str):
    """The misfit of the batch's far fields against the measured ``amplitudes`` (a 0-d array) and the far fields
    times the misfit's weight (B, K, N, N), whose inverse transform is the gradient at the exit waves."""
    xp = xp_of(b.far)
    if noise not in ("amplitude", "poisson"):
        raise ValueError(f"noise must be 'amplitude' or 'poisson', got {noise!r}")
    if _far_kernel_takes(b.far, amplitudes):
        from qora.ssb.kernels import ptycho_far_weight

        loss, out = xp.zeros((), np.float64), xp.empty_like(b.far)
        ptycho_far_weight(far=xp.ascontiguousarray(b.far), amplitudes=xp.ascontiguousarray(amplitudes), out=out,
                          loss=loss, floor=floor, poisson=noise == "poisson")
        return loss, out
    intensity = xp.maximum(_intensity(b.far) if b.intensity is None else b.intensity, floor)
    if noise == "poisson":
        counts = amplitudes**2
        loss = (intensity - counts - counts * xp.log(intensity / xp.maximum(counts, floor))).sum()
        weight = 1.0 - counts / intensity
    else:
        root = xp.sqrt(intensity)
        loss = ((root - amplitudes) ** 2).sum()
        weight = 1.0 - amplitudes / root
    return loss, weight[:, None] * b.far


def loss_and_gradients(objects, probe, positions, amplitudes, grid: Grid, *, prop=None, want_positions: bool = False,
                       illumination=None, floor: float = 1e-12, noise: str = "amplitude", derivatives=None,
                       host_loss: bool = True):
    """The amplitude misfit L of the batch at ``positions`` against the measured amplitudes sqrt(D) (B, N, N, FFT
    order) and its Wirtinger gradients: (L, g_objects (S, H, W) with zeros off the windows, g_probe (K, N, N),
    dL/d positions (B, 2) real or None). ``illumination`` (S, H, W) real, if given, receives the summed intensity
    of the waves entering each slice (the solver's step scale). ``floor``: I below it counts as that (sqrt(I) has
    no derivative at 0). ``noise`` "poisson": the Poisson misfit sum (I - D log I) - (D - D log D) (0 at I = D)
    instead, with g(Psi_m) = (1 - D / I) Psi_m. ``derivatives`` (a dict), if given, receives "slice_spacing": dL/d dz
    (1/A), the misfit's derivative with respect to the slices' spacing (:func:`backward`). ``host_loss`` False: L as
    a 0-d array of the inputs' kind (on the GPU, read it once a pass: a read each batch waits for the device)."""
    xp = xp_of(objects, probe)
    prop = propagator(grid, xp, objects.dtype) if prop is None else prop
    on_kernels = _far_kernel_takes(objects, amplitudes)  # the far fields take the objects' dtype
    b = forward(objects, probe, positions, grid, prop, intensity=not on_kernels)
    loss, weighted = _far_weight(b, amplitudes, floor, noise)
    g_exit = ifftn(weighted, axes=(-2, -1), norm="ortho")
    g_objects, g_probe, g_positions = backward(b, g_exit, objects, grid, prop=prop, want_positions=want_positions,
                                               illumination=illumination, derivatives=derivatives)
    return (float(loss) if host_loss else loss), g_objects, g_probe, g_positions


def backward(b: Batch, g_exit, objects, grid: Grid, *, prop=None, want_positions: bool = False, illumination=None,
             derivatives=None):
    """The adjoint of the forward pass's linearisation, applied to ``g_exit`` (B, K, N, N), the gradient with
    respect to the exit waves: (g_objects, g_probe, dL/d positions or None), as :func:`loss_and_gradients`.
    ``derivatives`` (a dict), if given, receives "slice_spacing": dL/d dz = 2 Re sum over the propagations of
    <F g(psi_{s+1}), -i pi lambda |k|^2 F psi_{s+1}> (the propagator's derivative is -i pi lambda |k|^2 times it)."""
    xp = xp_of(objects)
    n = grid.window
    prop = propagator(grid, xp, objects.dtype) if prop is None else prop
    scaled = xp.conj(prop) / (n * n)  # as in forward
    g = g_exit
    g_objects = xp.zeros_like(objects)
    d_spacing = 0.0  # summed on the device, read once: a read per slice would stall the GPU's queue each time
    if derivatives is not None:
        ky, kx = grid.frequencies(xp)
        slope = -1j * np.pi * grid.wavelength * (ky**2 + kx**2)
    for s in range(objects.shape[0] - 1, -1, -1):
        if s + 1 < objects.shape[0]:
            g_k = _unscaled(g)  # N times the unitary transform (its 1/N^2 in ``scaled``)
            if derivatives is not None:
                entering = _unscaled(b.waves[s + 1])
                d_spacing = d_spacing + (xp.conj(g_k) * slope * entering).real.sum()
            g_k *= scaled
            g = _unscaled(g_k, inverse=True)
        g = _slice_adjoint(g, b.waves[s], objects[s], b.patches[s], b.corners, g_objects[s],
                           None if illumination is None else illumination[s])
    if derivatives is not None:
        derivatives["slice_spacing"] = 2.0 * float(d_spacing) / (n * n)  # two unscaled transforms, N each
    g_k = fftn(g, axes=(-2, -1), norm="ortho")  # (B, K, N, N): the gradient of the shifted probe, in Fourier space
    if _probe_kernel_takes(g_k, b.ramps, want_positions):
        g_probe_k, d_positions = _probe_sums(g_k, b, want_positions)
        return g_objects, ifftn(g_probe_k, axes=(-2, -1), norm="ortho"), d_positions
    g_probe = ifftn((xp.conj(b.ramps)[:, None] * g_k).sum(0), axes=(-2, -1), norm="ortho")
    if not want_positions:
        return g_objects, g_probe, None
    ky, kx = grid.frequencies(xp)
    # d psi_0 / d f = F^H(-2 pi i k pixel F(psi_0)); dL/df = 2 Re <g, d psi_0>, taken in Fourier space (Parseval)
    inner = xp.conj(g_k) * (b.ramps[:, None] * b.probe_k[None])
    dy = (inner * (-2j * np.pi * ky * grid.pixel)).real.sum(axis=(1, 2, 3))
    dx = (inner * (-2j * np.pi * kx * grid.pixel)).real.sum(axis=(1, 2, 3))
    return g_objects, g_probe, 2.0 * xp.stack([dy, dx], 1)


def _probe_kernel_takes(g_k, ramps, want_positions: bool) -> bool:
    """Whether the probe's and the positions' sums run as ptycho.cu's kernel: CuPy arrays of one complex dtype, and
    a batch whose per-window sums fit a block's shared memory."""
    from qora.ssb.kernels import SHARED_BYTES

    return (xp_of(g_k) is not np and g_k.dtype == ramps.dtype and g_k.dtype in (np.complex64, np.complex128)
            and (not want_positions or 16 * len(g_k) <= SHARED_BYTES))


def _probe_sums(g_k, b: Batch, want_positions: bool):
    """ptycho.cu's sums over the batch: the probe's gradient in Fourier space (K, N, N), and dL/d positions (B, 2)
    (None without ``want_positions``), as :func:`backward`'s array code."""
    from qora.ssb.kernels import ptycho_probe_sums

    xp = xp_of(g_k)
    out = xp.empty(g_k.shape[1:], g_k.dtype)
    d_positions = xp.zeros((len(g_k), 2), np.float64) if want_positions else None
    ptycho_probe_sums(g=xp.ascontiguousarray(g_k), ramps=xp.ascontiguousarray(b.ramps), out=out,
                      probe_k=xp.ascontiguousarray(b.probe_k, dtype=g_k.dtype) if want_positions else None,
                      d_positions=d_positions)
    return out, None if d_positions is None else d_positions.astype(g_k.real.dtype)


def exit_waves(objects, probe, positions, grid: Grid, prop=None):
    """The exit waves (B, K, N, N) before the far-field transform (for the adjoint's dot test and for users)."""
    b = forward(objects, probe, positions, grid, prop)
    return ifftn(b.far, axes=(-2, -1), norm="ortho")


def _scatter_add(target, patches, corners, n: int) -> None:
    """target[c_j : c_j + n] += patches[j] for every window (windows may overlap: added one after another)."""
    xp = xp_of(target)
    if xp is np:
        for (r, c), patch in zip(corners.tolist(), patches):
            target[r:r + n, c:c + n] += patch
        return
    rows = corners[:, 0, None] + xp.arange(n)[None, :]
    cols = corners[:, 1, None] + xp.arange(n)[None, :]
    flat = (rows[:, :, None] * target.shape[1] + cols[:, None, :]).ravel()
    if not xp.iscomplexobj(target):
        xp.add.at(target.reshape(-1), flat, patches.ravel())
        return
    parts = target.reshape(-1).view(target.real.dtype)  # real and imaginary parts interleaved
    xp.add.at(parts, 2 * flat, patches.real.ravel())
    xp.add.at(parts, 2 * flat + 1, patches.imag.ravel())
