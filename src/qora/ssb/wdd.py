"""Wigner distribution deconvolution (WDD; Rodenburg and Bates 1992, Yang et al. 2015-2016) from a session's G(Q, k).

With the probe's spectrum A(K) = aperture(K) exp(-i chi(K)) and the object's O(u) (the Fourier transform of the
transmission function o(r), no weak-phase assumption), the scan's transform of the patterns is a convolution over
the detector for each scan frequency Q:

    G(Q, k) = sum_K a_Q(K) b_Q(k - K),   a_Q(K) = A(K) conj(A(K + Q)),   b_Q(u) = O(u) conj(O(u - Q)).

The detector's pixels form a lattice (k = k0 + dk n, n integer), and so do the differences u = k - K, so the
convolution is a discrete one, made circular on an L x L grid of the lattice with L > twice the bright field's
span (the products that reach the bright field then never wrap). Its transform over the lattice is a product,
H_Q(rho) = a~_Q(rho) b~_Q(rho), which the Wiener filter divides: b~_Q = H_Q conj(a~_Q) / (|a~_Q|^2 + eps). Two
values of b_Q hold the object against its unscattered wave: b_Q(0) = O(0) conj(O(-Q)) and b_Q(Q) = O(Q) conj(O(0)),
so each half-plane Q gives O at Q and at -Q (times the constant conj(O(0))). Each read is a linear filter of G
over the bright-field pixels (like SSB's and OBF's) whose weights depend on the probe alone.

Two corrections make the reads exact for the unscattered-wave terms. The scan's frequencies are not on the
detector's lattice (a 512-step scan's are 1/512 of its span), so u = Q lies between lattice points: it is read by
the filter's band-limited interpolation, and the two reads leak into each other when Q is under a pixel. And the
Wiener filter passes each term with a gain below 1 where |a~|^2 is not much above eps. Both are the filter's
response to the two terms a_Q(k) and a_Q(k - Q), a 2 x 2 matrix per Q computed from the probe; it is inverted
(Tikhonov, ``epsilon`` / 10) to give the two values. Everything else b_Q holds (pairs of scattered beams, strong
scattering) is kept apart by the deconvolution, which is what WDD adds to SSB. Only the bright field's pixels
enter (those the session holds): the terms linear in the scattered wave lie in it whole.

The regularisation: eps = ``epsilon`` x max |a~|^2, the largest value of the probe's Wigner distribution over all
(Q, rho) (its value at Q = rho = 0, (sum |A|^2)^2 on the lattice): one eps for every Q. docs/ssb-methods.md
measures the rule against dose.
"""

from __future__ import annotations

import numpy as np

from qora.backend.device import free_memory
from qora.backend.fft import fast_length, fftn, ifftn
from qora.io.errors import InputError
from qora.io.validate import positive
from qora.progress import report
from qora.ssb.detector import scan_steps, unresolved_out

__all__ = ["Lattice", "lattice", "probe_terms", "wdd_reads", "unmix", "wdd_object", "wdd_image", "wdd_bytes", "dose_from_counts",
           "epsilon_for_dose"]

EPSILON_FLOOR, EPSILON_CEILING = 1e-3, 0.3  # the dose rule's range (docs/ssb-methods.md: the dose study)


class Lattice:
    """The bright-field pixels on the detector's lattice: ``n`` (nbf, 2) integer offsets from the pixel ``k0``
    (1/A, the one nearest the disk's centre) in steps of ``dk`` (1/A), the grid side ``size`` (L) and its
    frequencies ``ky``, ``kx`` (L, L) (1/A, the lattice's points in the FFT's order); ``bright`` the flat grid index
    of each bright-field pixel and ``disk`` those of the grid's points inside the aperture (|k| <= ``limit``, 1/A),
    the only ones where the probe's products are not zero."""

    def __init__(self, k: np.ndarray, dk: float, limit: float):
        k = np.asarray(k, np.float64)
        self.k0 = k[np.argmin(np.hypot(k[:, 0], k[:, 1]))]
        steps = (k - self.k0) / dk
        self.n = np.rint(steps).astype(np.int64)
        if np.abs(steps - self.n).max() > 1e-6:
            raise InputError("the bright-field pixels do not lie on one square lattice: WDD needs the detector's "
                             "pixel grid (an interpolated or rotated detector is not one)")
        span = int((self.n.max(0) - self.n.min(0)).max()) + 1
        self.size = fast_length(2 * span + 2)
        self.dk = float(dk)
        m = np.fft.fftfreq(self.size, 1.0 / self.size)  # signed lattice steps in the FFT's order
        self.ky = self.k0[0] + dk * m[:, None] * np.ones((1, self.size))
        self.kx = self.k0[1] + dk * m[None, :] * np.ones((self.size, 1))
        self.bright = self._flat(self.n)
        self.disk = np.union1d(np.flatnonzero(np.hypot(self.ky, self.kx) <= limit), self.bright)

    def _flat(self, n) -> np.ndarray:
        return (n[:, 0] % self.size) * self.size + n[:, 1] % self.size

    def flat_reflected(self) -> np.ndarray:
        """The flat index into an L x L grid of -n for each bright-field pixel: where w(k) = f(-k) is read."""
        return self._flat(-self.n)


def lattice(session) -> Lattice:
    """The session's bright-field pixels on the detector lattice (its k, after any relabelling of the detector)."""
    lam = session.wavelength
    return Lattice(session.k, session.detector.mrad_per_pixel * 1e-3 / lam, session.alpha_mrad * 1e-3 / lam)


def wigner_max(session, aberrations, grid: Lattice) -> float:
    """max over (Q, rho) of |a~_Q(rho)|^2 = (sum_K |A(K)|^2)^2 on the lattice (Cauchy-Schwarz; reached at Q = 0)."""
    xp = session.xp
    probe = session._psi(xp.asarray(grid.ky), xp.asarray(grid.kx), aberrations)
    return float(xp.sum(xp.abs(probe) ** 2)) ** 2


def probe_terms(session, aberrations, qy, qx, grid: Lattice, dtype=np.complex128):
    """For the scan frequencies ``qy``, ``qx`` (1/A, flat (nq,), the detector's axes): a_Q(K) on the L x L grid
    (nq, L, L), evaluated on the aperture's disk alone (zero elsewhere), and the two terms of a weak object's G at
    the bright-field pixels, (nq, nbf) each: a_Q(k) (the unscattered wave at k with the wave scattered by -Q) and
    a_Q(k - Q) (the wave scattered by +Q with the unscattered one). On the session's backend."""
    xp = session.xp
    ky, kx = (xp.asarray(g.ravel()[grid.disk]) for g in (grid.ky, grid.kx))
    qy, qx = xp.asarray(qy)[:, None], xp.asarray(qx)[:, None]
    a = xp.zeros((len(qy), grid.size**2), dtype)
    a[:, xp.asarray(grid.disk)] = session._psi(ky, kx, aberrations) * xp.conj(session._psi(ky + qy, kx + qx,
                                                                                             aberrations))
    near = a[:, xp.asarray(grid.bright)]
    by, bx = session._k[:, 0], session._k[:, 1]
    far = session._psi(by - qy, bx - qx, aberrations) * xp.conj(session._psi(by, bx, aberrations))
    return a.reshape(-1, grid.size, grid.size), near, far.astype(dtype)


def wdd_reads(a, qy, qx, grid: Lattice, eps: float, xp):
    """The Wiener filter's read-outs of b_Q at u = 0 and at u = Q, as weights on the bright-field pixels: (w0, wQ),
    each (nq, nbf), from a_Q on the grid (:func:`probe_terms`); b_Q(0) = sum_k G(Q, k) w0(k), and likewise wQ. u = Q
    lies between the lattice's points for most Q: it is read by the filter's band-limited interpolation (a phase
    ramp over rho, separable in its two axes). ``eps`` is absolute."""
    spectrum = fftn(a, axes=(-2, -1))
    wiener = xp.conj(spectrum) / (spectrum.real**2 + spectrum.imag**2 + eps)
    del spectrum
    read = xp.asarray(grid.flat_reflected())
    w0 = ifftn(wiener, axes=(-2, -1)).reshape(len(wiener), -1)[:, read]
    m = xp.asarray(np.fft.fftfreq(grid.size, 1.0 / grid.size))  # signed rho, in the lattice's units
    turn = 2j * np.pi / (grid.size * grid.dk)
    ramp_y = xp.exp(turn * xp.asarray(qy)[:, None] * m).astype(a.dtype)
    ramp_x = xp.exp(turn * xp.asarray(qx)[:, None] * m).astype(a.dtype)
    wiener *= ramp_y[:, :, None] * ramp_x[:, None, :]
    wq = ifftn(wiener, axes=(-2, -1)).reshape(len(wiener), -1)[:, read]
    return w0, wq


def unmix(near, far, w0, wq, reads, zero, lam: float, xp):
    """(c1, c2) = (O(0) conj(O(-Q)), O(Q) conj(O(0))) from the reads (b_Q(0), b_Q(Q)), (nq, 2): the filter's response
    to the two terms ``near`` and ``far`` (a 2 x 2 matrix per Q: the Wiener gain, and the leak between u = 0 and a
    u = Q less than a pixel away) inverted with Tikhonov's ``lam`` (where the two cannot be told apart, near Q = 0,
    both shrink). Where ``zero`` (Q = 0) the two terms are one, |O(0)|^2 a_0(k): read once, not split in two."""
    response = xp.stack([xp.stack([(near * w0).sum(-1), (far * w0).sum(-1)], -1),
                         xp.stack([(near * wq).sum(-1), (far * wq).sum(-1)], -1)], -2).astype(np.complex128)
    adjoint = xp.conj(xp.swapaxes(response, 1, 2))
    both = xp.linalg.solve(adjoint @ response + lam * xp.eye(2), adjoint @ reads[..., None])[..., 0]
    single = reads[:, 0] / xp.where(zero, response[:, 0, 0], 1)
    return xp.where(zero[:, None], single[:, None], both)


def wdd_bytes(session, count: int, itemsize: int = 16, grid: Lattice | None = None) -> int:
    """The working memory (bytes) of one block of ``count`` scan frequencies: the lattice grids (four complex arrays
    of ``itemsize`` bytes an element at a time) and the bright-field arrays (six)."""
    grid = grid or lattice(session)
    return count * (4 * grid.size ** 2 + 6 * len(session.k)) * itemsize


def wdd_object(session, aberrations, *, epsilon: float = EPSILON_FLOOR, block: int | None = None,
               max_bytes: int | None = None, progress=None):
    """o(r) conj(O(0)) on the scan grid (complex, the session's backend): the object's transmission function up to a
    constant factor, by WDD with eps = ``epsilon`` x the probe's Wigner maximum (and the unmixing's Tikhonov term
    ``epsilon`` / 10). ``block`` scan frequencies at a time (default: as many as ``max_bytes`` of working memory
    allows, :func:`wdd_bytes`; ``max_bytes`` by default a quarter of the free memory, at most 512 MiB on the host and
    8 GiB on the device). On the device the lattice transforms are complex64 where G is. ``progress`` (the engines'
    signature, :mod:`qora.progress`) is told the frequencies done ("WDD"); its False stops the work (an
    InterruptedError: no partial image, whose frequencies would be a strip of the plane)."""
    if not 0 < epsilon < 1:
        raise ValueError(f"epsilon must be a fraction of the probe's Wigner maximum in (0, 1), got {epsilon}")
    xp = session.xp
    grid = lattice(session)
    eps = epsilon * wigner_max(session, aberrations, grid)
    dtype = np.complex64 if session.G.dtype == np.complex64 else np.complex128
    if max_bytes is None:
        free = free_memory(session.backend)
        cap = (8 << 30) if session.backend.is_cuda else (512 << 20)
        max_bytes = cap if free is None else min(cap, int(free // 4))
    block = block or max(1, int(max_bytes // wdd_bytes(session, 1, np.dtype(dtype).itemsize, grid)))
    qy, qx = (q.reshape(-1) for q in session._q(half=True))
    G = session.G.reshape(len(qy), -1)  # the half plane's frequencies in order: blocks are contiguous rows of G
    plus = xp.zeros(len(qy), np.complex128)  # O(Q) conj(O(0)) on the half plane
    minus = xp.zeros(len(qy), np.complex128)  # O(-Q) conj(O(0)), the same Q's mirror
    for start in range(0, len(qy), block):
        sl = slice(start, start + block)
        a, near, far = probe_terms(session, aberrations, qy[sl], qx[sl], grid, dtype)
        w0, wq = wdd_reads(a, qy[sl], qx[sl], grid, eps, xp)
        del a
        g = xp.asarray(G[sl])
        reads = xp.stack([(g * w0).sum(-1), (g * wq).sum(-1)], -1).astype(np.complex128)
        c = unmix(near, far, w0, wq, reads, (qy[sl] == 0) & (qx[sl] == 0), epsilon / 10, xp)
        plus[sl], minus[sl] = c[:, 1], xp.conj(c[:, 0])
        if not report(progress, "WDD", min(start + block, len(qy)), len(qy)):
            raise InterruptedError(f"WDD stopped by its progress callback after {start + block} of {len(qy)} "
                                   "frequencies")
    half = (session.scan_shape[0], -1)
    return ifftn(_whole_plane(plus.reshape(half), minus.reshape(half), session.scan_shape, xp), axes=(0, 1))


def _whole_plane(plus, minus, scan_shape, xp):
    """The full FFT plane from the half plane's two estimates: +Q's where they are, -Q's mirrored; where a
    frequency gets both (the column Qx = 0, and Qx's Nyquist column), their mean. The unresolved Nyquist bins out."""
    sy, sx = scan_shape
    cols = plus.shape[1]
    unresolved_out(plus, scan_shape)
    unresolved_out(minus, scan_shape)
    whole = xp.zeros((sy, sx), np.complex128)
    count = xp.zeros((sy, sx))
    whole[:, :cols] += plus
    count[:, :cols] += 1
    rows = (-xp.arange(sy)) % sy
    mirror_cols = (-xp.arange(cols)) % sx
    whole[rows[:, None], mirror_cols[None, :]] += minus
    count[rows[:, None], mirror_cols[None, :]] += 1
    return whole / xp.maximum(count, 1)


def dose_from_counts(session) -> float | None:
    """The dose (electrons per A^2) the data were recorded at, where their bright field holds counts: the mean
    bright-field sum of a pattern over the area of one scan step, or None where the sums are not whole numbers (the
    data are not counts: a simulation without noise, or a detector's gain-scaled values). The dark field's
    electrons are not in it (a few per cent for a thin specimen)."""
    sums = np.asarray(session.backend.to_host(session.bright_field), np.float64) * session.level
    if not np.all(np.isfinite(sums)) or sums.mean() < 1 or np.abs(sums - np.rint(sums)).max() > 1e-6 * sums.max():
        return None
    step_y, step_x = scan_steps(session.scan_step)
    return float(sums.mean() / (step_y * step_x))


def epsilon_for_dose(dose: float | None) -> float:
    """The regularisation's fraction for a dose (electrons per A^2; None: no noise to speak of): 3 / sqrt(dose),
    kept to [1e-3, 0.3]. Measured (docs/ssb-methods.md) on abTEM's SrTiO3 at 1e3-1e6 e/A^2, where the best fraction
    fell from 0.1 to 3e-3 as the dose rose: the noise that the filter lets through falls as 1 / sqrt(dose)."""
    if dose is None:
        return EPSILON_FLOOR
    return float(min(EPSILON_CEILING, max(EPSILON_FLOOR, 3.0 / np.sqrt(positive("dose", dose)))))


def wdd_image(session, aberrations, *, epsilon: float | None = None, block: int | None = None,
              progress=None) -> np.ndarray:
    """The WDD phase image (rad, the scan grid, a host array): the phase of :func:`wdd_object`, its mean set to 0
    (the constant factor's phase and the mean phase are one). ``epsilon`` by default from the data's dose
    (:func:`epsilon_for_dose` of :func:`dose_from_counts`)."""
    if epsilon is None:
        epsilon = epsilon_for_dose(dose_from_counts(session))
    obj = wdd_object(session, aberrations, epsilon=epsilon, block=block, progress=progress)
    xp = session.xp
    mean = obj.mean()
    phase = xp.angle(obj * xp.conj(mean) / abs(mean)) if abs(mean) > 0 else xp.angle(obj)
    return session.backend.to_host(phase - phase.mean())
