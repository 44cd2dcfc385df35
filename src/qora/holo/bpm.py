"""The beam propagation model (BPM): multiple forward scattering, its gradient and its inversion.

The unknown is the index contrast x = n - n_m on a (n_z, n, n) grid, centre-origin, one slice
per voxel of thickness d = pixel; slice k sits at z_k = (k - n_z // 2) d, the plane of its voxel
centres (the same grid as the ODT volumes). Instead of the field u the model propagates the
envelope w = u / u_in of each illumination: the tilt of the incident wave drops out, w is
periodic on the field grid, and bin mu of its spectrum S is the field's spectrum at mu + nu_in.
Per slice (F the unnormalised 2D FFT):

    w_k     = F^-1 S_k                    (S_0 = n^2 delta, i.e. w_0 = 1)
    A       = F(exp(i k0 d x_k) w_k)      the thin phase screen of slice k
    S_{k+1} = c (q A + (1 - q) S_k)       c = exp(2 pi i (nu_z(mu + nu_in) - nu_z,in) d)

and the last slice uses, instead of c, the propagator from z_{n_z - 1} back to the focal plane
z = 0 (a negative distance) times the detection pupil. The output is w at z = 0, the field ratio
u / u_in (centre-origin), the quantity ``odt.reconstruct`` takes; its first-Born counterpart is
``1 + phantoms.born_ratio``.

The obliquity weight q = (n_m / lambda) / nu_z(mu + nu_in) makes the weak-object limit equal to
first Born at every angle (the plain screen, q = 1, leaves out 1 / cos(theta) of the scattered
direction). It is capped at its value at the edge of the detection pupil: it diverges for grazing
waves, which never reach the camera.

In the rotation geometry the illumination is the normal plane wave at every angle and the sample
turns: the unknown x lives in the object frame, and angle a propagates through T_a x, the volume in
its pose R_a = ``geometry.rotation(a)`` by trilinear interpolation (:mod:`qora.holo.rotate`: the
pose the Ewald mapping reads, rotation sense and tilted axis included). The gradient turns each
angle's lab-frame gradient back by the exact adjoint T_a^T. Turning the volume, not the wave, keeps
one table for every angle and the slices along z; a tilted illumination through an unturned volume
would need a new propagation direction per angle and an adjoint through a wave that leaves the grid.

All tables (c, the last step, q) are computed once in float64 on the host (:func:`bpm_tables`)
and are backend-neutral NumPy arrays, so a device implementation can use identical values.
See docs/holo.md, "Beam propagation".
"""

from __future__ import annotations

import time

import numpy as np

from qora.backend import fft as backend_fft
from qora.backend import xp_of
from qora.holo.fista import proximal_gradient
from qora.holo.geometry import Geometry
from qora.holo.odt import OdtResult, check_ratio
from qora.holo.odt import reconstruct as odt_reconstruct
from qora.holo.options import ReconstructionOptions
from qora.holo.plans import BpmTables, bpm_tables, lab_geometry
from qora.holo.rotate import rotate, rotate_adjoint
from qora.io.errors import InputError
from qora.io.validate import integer, nonnegative, positive
from qora.progress import report

__all__ = ["BpmTables", "bpm_tables", "bpm_forward", "bpm_jvp", "bpm_vjp", "bpm_gradient", "bpm_lipschitz",
           "bpm_reconstruct", "simulate_bpm_holograms", "upsample_fields"]

#: stored envelopes per chunk of illuminations in the reverse pass (bytes); chunking changes nothing
#: but the memory
CHUNK_BYTES = 512 * 2**20


def _fft2(a):
    return backend_fft.fftn(a, axes=(-2, -1), overwrite_x=True)


def _ifft2(a):
    return backend_fft.ifftn(a, axes=(-2, -1), overwrite_x=True)


def _prepare(contrast, geometry: Geometry, tables: BpmTables | None):
    """The checked contrast (float32 or float64), the tables and the complex dtype of the fields."""
    x = np.asarray(contrast)
    if x.ndim != 3 or x.shape[1:] != (geometry.n, geometry.n):
        raise InputError(f"contrast must be (n_z, {geometry.n}, {geometry.n}), got {x.shape}")
    real = np.float32 if x.dtype == np.float32 else np.float64
    x = x.astype(real, copy=False)
    if tables is None:
        tables = bpm_tables(geometry, x.shape[0])
    lab = lab_geometry(geometry)
    if tables.n_z != x.shape[0] or tables.n != geometry.n or tables.count != lab.count:
        raise InputError(f"tables are for {tables.count} x {tables.n_z} slices of {tables.n}^2, the contrast is "
                         f"{x.shape} with {lab.count} illuminations")
    cdtype = np.complex64 if real == np.float32 else np.complex128
    return x, tables, cdtype


def _screens(x, tables: BpmTables, cdtype):
    """exp(i k0 d x_k), (n_z, n, n), laterally in the FFT layout (origin at index 0) of w = F^-1 S."""
    return np.exp(1j * tables.k0 * tables.step * _lateral_fft_layout(x)).astype(cdtype)


def _units(x, geometry: Geometry, tables: BpmTables, cdtype, index=slice(None), keep: bool = True):
    """The work of one pass over the illuminations ``index``: (data slice, table rows, screens, poses).

    Scanning: chunks of illuminations sharing the screens of x (n_z, n, n) (poses None; the rows the
    chunk's slice of the tables). Rotation: chunks of angles, the screens of x turned into each pose
    R = ``geometry.rotation(a)``, (n_z, B, n, n), the poses the list of R, the rows the chunk's size B
    (the one table, repeated). Chunks hold at most :data:`CHUNK_BYTES` of what the pass keeps per
    illumination (the stored envelopes; in the rotation geometry also the screens and the gradient).
    """
    start, stop, _ = index.indices(geometry.count)
    size = np.dtype(cdtype).itemsize
    if geometry.angles is None:
        screens = _screens(x, tables, cdtype)
        for sub in _chunks(stop - start, x.shape[0], geometry.n, size if keep else 1):
            ind = slice(start + sub.start, start + sub.stop)
            yield ind, ind, screens, None
    else:
        for sub in _chunks(stop - start, x.shape[0], geometry.n, 3 * size if keep else size):
            ind = slice(start + sub.start, start + sub.stop)
            poses = [geometry.rotation(a) for a in range(ind.start, ind.stop)]
            posed = np.stack([rotate(x, r) for r in poses], axis=1)
            yield ind, len(poses), _screens(posed, tables, cdtype), poses


def _products(tables: BpmTables, cdtype, rows):
    """(c q, c (1 - q), last q, last (1 - q)) for the illuminations ``rows`` (a slice), or the one table of the
    rotation geometry repeated ``rows`` (an int) times, contiguous (the propagation loop reads (B, n, n))."""
    if isinstance(rows, slice):
        return tables.products(cdtype, rows)
    return tuple(np.ascontiguousarray(np.broadcast_to(t, (rows,) + t.shape[1:]))
                 for t in tables.products(cdtype, slice(0, 1)))


def _posed(h, poses):
    """h itself (scanning) or h turned into every pose, (n_z, B, n, n) (rotation)."""
    return h if poses is None else np.stack([rotate(h, r) for r in poses], axis=1)


def _lateral_fft_layout(v):
    return np.fft.ifftshift(v, axes=(-2, -1))


def _lateral_centre(v):
    return np.fft.fftshift(v, axes=(-2, -1))


def _chunks(count: int, n_z: int, n: int, itemsize: int):
    size = max(1, min(count, CHUNK_BYTES // max(1, n_z * n * n * itemsize)))
    return [slice(s, min(s + size, count)) for s in range(0, count, size)]


def _forward_chunk(screens, tables, index, cdtype, keep: bool, tangent=None):
    """Envelope spectra through all slices for illuminations ``index``.

    Returns (S_K, stored w_k (n_z, B, n, n) or None, the tangent's S_K or None). ``tangent`` is
    i k0 d h (n_z, n, n): the tangent-linear model runs alongside. ``screens`` and ``tangent`` are
    (n_z, n, n) for every illumination alike, or (n_z, B, n, n) one per illumination (rotation);
    ``index`` is as :func:`_products` reads it.
    """
    cq, cr, lq, lr = _products(tables, cdtype, index)
    n_z, n = screens.shape[0], screens.shape[-1]
    b = cq.shape[0]
    s = np.zeros((b, n, n), cdtype)
    s[:, 0, 0] = n * n
    ds = np.zeros_like(s) if tangent is not None else None
    stored = np.empty((n_z, b, n, n), cdtype) if keep else None
    from qora.holo.bpm_cpu import propagate, screened  # numba, loaded on first use

    for k in range(n_z):
        w = _ifft2(s.copy())
        if keep:
            stored[k] = w
        pk = screens[k]
        a_spec = _fft2(screened(pk, w) if pk.ndim == 2 else pk * w)
        tq, tr = (lq, lr) if k == n_z - 1 else (cq, cr)
        if tangent is not None:
            dw = _ifft2(ds.copy())
            da = _fft2(pk * (dw + tangent[k] * w))
            propagate(tq, tr, da, ds)
        propagate(tq, tr, a_spec, s)
    return s, stored, ds


def bpm_forward(contrast, geometry: Geometry, tables: BpmTables | None = None, keep: bool = False):
    """Field ratios u / u_in at z = 0 (A, n, n), centre-origin, of the index contrast (n_z, n, n).

    complex128, or complex64 for a float32 contrast. With ``keep`` also the envelopes w_k
    entering every slice, (n_z, A, n, n) in FFT layout (what the reverse pass stores).
    """
    x, tables, cdtype = _prepare(contrast, geometry, tables)
    out = np.empty((geometry.count, geometry.n, geometry.n), cdtype)
    stored = np.empty((x.shape[0],) + out.shape, cdtype) if keep else None
    for index, rows, screens, _ in _units(x, geometry, tables, cdtype, keep=keep):
        s, w, _ = _forward_chunk(screens, tables, rows, cdtype, keep)
        out[index] = np.fft.fftshift(_ifft2(s), axes=(-2, -1))
        if keep:
            stored[:, index] = w
    return (out, stored) if keep else out


def bpm_jvp(contrast, h, geometry: Geometry, tables: BpmTables | None = None):
    """The tangent-linear model J h: the change of the field ratios (A, n, n) along the contrast change h."""
    x, tables, cdtype = _prepare(contrast, geometry, tables)
    h = np.asarray(h, x.dtype)
    if h.shape != x.shape:
        raise InputError(f"h must have the contrast's shape {x.shape}, got {h.shape}")
    out = np.empty((geometry.count, geometry.n, geometry.n), cdtype)
    for index, rows, screens, poses in _units(x, geometry, tables, cdtype, keep=False):
        tangent = (1j * tables.k0 * tables.step * _lateral_fft_layout(_posed(h, poses))).astype(cdtype)
        _, _, ds = _forward_chunk(screens, tables, rows, cdtype, False, tangent)
        out[index] = np.fft.fftshift(_ifft2(ds), axes=(-2, -1))
    return out


def _reverse(x, geometry, tables, cdtype, index, residual_fn):
    """Forward pass storing w_k, then the slices backwards: Re(J^H r) summed over illuminations ``index``.

    ``residual_fn(y, ind)`` gets the field ratios (B, n, n) of the illuminations ``ind``, centre-origin,
    and returns the residual r (the same shape) to back-propagate; returns (gradient (n_z, n, n), sum
    of |r|^2). In the rotation geometry each angle's gradient, in the lab frame, is turned back into
    the object frame by the exact adjoint of the pose (:func:`qora.holo.rotate.rotate_adjoint`).
    """
    n_z = x.shape[0]
    grad = np.zeros(x.shape, np.float64)
    loss = 0.0
    kd = tables.k0 * tables.step
    for ind, rows, screens, poses in _units(x, geometry, tables, cdtype, index):
        s, stored, _ = _forward_chunk(screens, tables, rows, cdtype, True)
        y = np.fft.fftshift(_ifft2(s), axes=(-2, -1))
        r = np.asarray(residual_fn(y, ind), cdtype)
        loss += float(np.vdot(r, r).real)
        cq, cr, lq, lr = _products(tables, cdtype, rows)
        g = _fft2(np.fft.ifftshift(r, axes=(-2, -1)))  # n^2 times the adjoint of S_K
        # scanning: one gradient summed over the chunk; rotation: one per angle, each turned back by its pose
        local = np.zeros(screens.shape, np.float64)
        for k in range(n_z - 1, -1, -1):
            tq, tr = (lq, lr) if k == n_z - 1 else (cq, cr)
            b = _ifft2(np.conj(tq) * g)
            g = np.conj(tr) * g
            pk = screens[k]
            pw = pk * stored[k]
            part = pw.real * b.imag - pw.imag * b.real  # Im(conj(p w) b)
            local[k] = kd * (np.sum(part, axis=0) if poses is None else part)
            g += _fft2(np.conj(pk) * b)
        local = _lateral_centre(local)
        if poses is None:
            grad += local
        else:
            for j, rot in enumerate(poses):
                grad += rotate_adjoint(local[:, j], rot)
    return grad, loss


def bpm_vjp(contrast, r, geometry: Geometry, tables: BpmTables | None = None):
    """J^T r = Re(J^H r): the real adjoint of :func:`bpm_jvp` applied to field-ratio residuals r (A, n, n)."""
    x, tables, cdtype = _prepare(contrast, geometry, tables)
    r = np.asarray(r)
    grad, _ = _reverse(x, geometry, tables, cdtype, slice(None), lambda y, ind: r[ind])
    return grad.astype(x.dtype)


def bpm_gradient(contrast, data, geometry: Geometry, tables: BpmTables | None = None, *, index=slice(None),
                 return_loss: bool = False):
    """Gradient (n_z, n, n) of f(x) = 1/(2 A) sum_a ||y_a(x) - d_a||^2 over the illuminations ``index``.

    ``data`` are measured field ratios u / u_in (count, n, n), centre-origin; A is the number of
    illuminations in ``index`` (all by default), so a batch gradient is the mean over its batch.
    The norm is the plain sum over pixels. With ``return_loss`` also returns f(x).
    """
    x, tables, cdtype = _prepare(contrast, geometry, tables)
    data = np.asarray(data)
    if data.shape != (geometry.count, geometry.n, geometry.n):
        raise InputError(f"data must be ({geometry.count}, {geometry.n}, {geometry.n}), got {data.shape}")
    count = len(range(*index.indices(geometry.count)))
    grad, loss = _reverse(x, geometry, tables, cdtype, index, lambda y, ind: y - data[ind])
    grad = (grad / count).astype(x.dtype)
    return (grad, loss / (2 * count)) if return_loss else grad


def bpm_lipschitz(tables: BpmTables, index=slice(None)) -> float:
    """L = n_z (k0 d)^2 mean_a q_a(0)^2 over the illuminations ``index``: the weak-object estimate of the
    Lipschitz constant of the gradient of f (a constant volume adds the same phase to every angle's
    zero-frequency bin). In the rotation geometry the one table serves every angle (a turn by trilinear
    interpolation does not raise the norm of a smooth volume), so ``index`` does not matter."""
    lipschitz = tables.lipschitz()
    return float(np.mean(lipschitz if len(lipschitz) == 1 else lipschitz[index]))


#: the default start of a BPM inversion: Rytov ODT with 20 Gerchberg-Papoulis iterations on half spectra
START_OPTIONS = ReconstructionOptions(method="gp", iterations=20, r2c=True)


def rytov_start(data, geometry: Geometry, n_z: int, reconstruct=odt_reconstruct):
    """The default start (float64 index contrast, >= 0): ``reconstruct(data, geometry, START_OPTIONS)``
    (the CPU ODT by default; the CUDA BPM passes the CUDA one), on n_z planes. Where ``reconstruct`` leaves
    its index on the GPU (:func:`qora.holo.cuda_pipeline.reconstruct` with ``on_device``) the start stays
    there: the CUDA BPM takes it without a round trip through the host."""
    index = reconstruct(data, geometry, START_OPTIONS).index
    xp = xp_of(index)
    x = index.astype(xp.float64) - geometry.medium_index
    if n_z != geometry.n:  # the central n_z planes (or zero planes around the n^3 volume)
        out = xp.zeros((n_z, geometry.n, geometry.n))
        lo_out, lo_in = max(0, n_z // 2 - geometry.n // 2), max(0, geometry.n // 2 - n_z // 2)
        m = min(n_z, geometry.n)
        out[lo_out:lo_out + m] = x[lo_in:lo_in + m]
        x = out
    return xp.maximum(x, 0.0)


def inversion_inputs(data, geometry: Geometry, start, iterations: int, tv_weight, tv_inner: int, batch, n_z,
                     reconstruct=odt_reconstruct):
    """The checked data, the start (float64; Rytov + 20 GP by default, by ``reconstruct``: see
    :func:`rytov_start`) and the illumination batches of a BPM inversion (both backends' ``bpm_reconstruct``)."""
    data = check_ratio("data", data, geometry)
    iterations = integer("iterations", iterations, low=0)
    tv_inner = integer("tv_inner", tv_inner, low=1)
    if tv_weight is not None:
        tv_weight = nonnegative("tv_weight", tv_weight)
    if batch is not None:
        batch = integer("batch", batch, low=1, high=geometry.count)
    if n_z is not None:
        n_z = integer("n_z (planes)", n_z, low=1)
    if start is None:
        x = rytov_start(data, geometry, int(n_z or geometry.n), reconstruct)
    else:
        xp = xp_of(start)  # a start already on the GPU (the CUDA API's default) is checked there
        if xp.iscomplexobj(start):
            raise InputError("start must be a real index contrast n - n_m, got complex values")
        x = xp.array(start, xp.float64)
        if x.ndim != 3 or x.shape[1:] != (geometry.n, geometry.n) or not bool(xp.all(xp.isfinite(x))):
            raise InputError(f"start must be a finite index contrast (n_z, {geometry.n}, {geometry.n}), got {x.shape}")
    if batch is None or batch >= geometry.count:
        batches = [slice(None)]
    else:
        batches = [slice(s, min(s + batch, geometry.count)) for s in range(0, geometry.count, batch)]
    return data, x, batches


def bpm_reconstruct(data, geometry: Geometry, start=None, iterations: int = 20, tv_weight: float | None = None,
                    tv_inner: int = 20, batch: int | None = None, step: float = 1.0, progress=None, *,
                    n_z: int | None = None, obliquity: bool = True):
    """Refractive-index volume from field ratios u / u_in (A, n, n) by inverting the beam propagation model.

    Proximal gradient on f(x) = 1/(2A) sum_a ||y_a(x) - d_a||^2 over the index contrast x = n - n_m
    with the projection onto x >= 0, or with ``tv_weight`` the FGP proximal step of isotropic TV
    (and x >= 0) with weight ``step * tv_weight / (2 n_m)`` per step of length step / L: the
    ODT TV solver's weight tv_weight k0^2 on the potential V = k0^2 (n^2 - n_m^2) ~ 2 k0^2 n_m x,
    carried over to x with both data terms scaled to a unit Lipschitz constant.

    With all illuminations per step (``batch`` None) FISTA momentum; with ``batch`` the steps cycle
    through consecutive batches of that many illuminations without momentum, each with the batch's
    mean gradient and its own L. ``iterations`` counts steps. The step is step / L, L from
    :func:`bpm_lipschitz`. ``start``: the starting index contrast n - n_m (n_z, n, n), default Rytov
    ODT with 20 Gerchberg-Papoulis iterations (pass ``index - n_m`` to start from an index volume). ``progress`` gets
    ("bpm", step, iterations, {"loss": f}) after each step and may stop the loop by returning False.

    Returns an :class:`qora.holo.odt.OdtResult` (method "bpm", approximation "bpm"); ``info`` holds
    the loss per step ("loss", f before that step), "n_z", "batch", "tv_weight", "seconds".

    This is the CPU path; :func:`qora.holo.bpm_reconstruct` (the api's) picks the backend, and its
    CUDA twin :func:`qora.holo.bpm_cuda.bpm_reconstruct` also takes ``chunk`` (illuminations per
    chunk of the reverse pass) and ``fgp``.
    """
    from qora.holo.tv_cpu import fgp_prox_fused

    t0 = time.perf_counter()
    step = positive("step", step)
    data, x, batches = inversion_inputs(data, geometry, start, iterations, tv_weight, tv_inner, batch, n_z)
    tables = bpm_tables(geometry, x.shape[0], obliquity)
    lam = 0.0 if not tv_weight else step * tv_weight / (2 * geometry.medium_index)
    lips = [bpm_lipschitz(tables, b) for b in batches]
    dual = None
    losses = []

    def gradient_step(y, k):
        j = k % len(batches)
        grad, loss = bpm_gradient(y, data, geometry, tables, index=batches[j], return_loss=True)
        losses.append(loss)
        return y - (step / lips[j]) * grad

    def prox(v):
        nonlocal dual
        if lam == 0:
            return np.maximum(v, 0.0)
        x_new, dual = fgp_prox_fused(np.ascontiguousarray(v), lam, tv_inner, dual=dual)
        return x_new

    # FISTA's momentum with every illumination per step; cycling batches go without it
    x_prev, _ = proximal_gradient(x, gradient_step, prox, iterations, momentum=len(batches) == 1,
                                  after_step=lambda k, _x: report(progress, "bpm", k, iterations, {"loss": losses[-1]}))
    index = (x_prev + geometry.medium_index).astype(np.float32)
    return OdtResult(index, geometry, "bpm", "bpm", len(losses),
                     info={"loss": losses, "n_z": x.shape[0], "batch": batch, "tv_weight": tv_weight,
                           "step": step, "obliquity": obliquity, "seconds": time.perf_counter() - t0})


def upsample_fields(ratio, big: int):
    """Band-limited field ratios (A, n, n) resampled to (A, big, big) on the same field of view
    (zero-padded spectra; exact when the spectrum is zero at the Nyquist bin, as behind the pupil)."""
    ratio = np.asarray(ratio)
    n = ratio.shape[-1]
    spec = np.fft.fftshift(np.fft.fft2(np.fft.ifftshift(ratio, axes=(-2, -1))), axes=(-2, -1))
    out = np.zeros(ratio.shape[:-2] + (big, big), np.complex128)
    lo = big // 2 - n // 2
    out[..., lo:lo + n, lo:lo + n] = spec
    out = np.fft.ifft2(np.fft.ifftshift(out, axes=(-2, -1))) * (big / n) ** 2
    return np.fft.fftshift(out, axes=(-2, -1))


def simulate_bpm_holograms(spheres, geometry: Geometry, *, noise: float = 0.0, seed: int = 0, carrier=None,
                           supersample: int = 3):
    """Sample and background holograms (A, 2n, 2n) of spheres from the beam propagation model.

    The spheres are rendered on the geometry's n^3 grid (anti-aliased), propagated by
    :func:`bpm_forward`, and the pupil-limited field ratios upsampled to the hologram grid at half
    the pixel. Returns ``(holograms, backgrounds, hologram_pixel)`` like ``phantoms.simulate_holograms``.
    """
    from qora.holo.phantoms import check_simulation_memory, holograms_from_fields, render_spheres

    noise = nonnegative("noise", noise)
    check_simulation_memory(geometry, "bpm")
    vol = render_spheres(spheres, geometry.n, geometry.pixel, geometry.medium_index, supersample=supersample)
    ratio = bpm_forward(vol.astype(np.float64) - geometry.medium_index, geometry)
    return holograms_from_fields(upsample_fields(ratio, 2 * geometry.n), geometry, noise=noise, seed=seed,
                                 carrier=carrier)
