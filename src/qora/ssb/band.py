"""The agreement between G(Q, k) and the weak-phase model over a band of frequencies, with exact
first and second derivatives.

For each frequency Q of a band the model is G(Q, k) = i Phi(Q) Gamma(Q, k; p) with Phi(Q) free,
so the best Phi leaves the part of G along Gamma. The agreement is the fraction of the band's
signal that the model explains,

    agreement(p) = sum_Q |S(Q)|^2 / N(Q)  /  sum_Q sum_k |G(Q, k)|^2,
    S(Q) = sum_k G(Q, k) conj(Gamma(Q, k; p)),   N(Q) = sum_k |Gamma(Q, k; p)|^2,

between 0 and 1, and weighted by signal by construction: a frequency where G is empty (most of
the band on a crystal) adds nothing to either sum.

With the parameters of :mod:`qora.ssb.model` (chi = sum_p c_p B_p(k)) Gamma's two terms are

    term1 = A(k) A(k - Q) exp(-i sum_p c_p [B_p(k - Q) - B_p(k)]) s1(t, tau),
    term2 = A(k) A(k + Q) exp(-i sum_p c_p [B_p(k) - B_p(k + Q)]) s2(t, tau),

with s the thick model's sinc depth weights (1 for the standard model), and every derivative
is exact. The scan rotation is a parameter too (``rotation``, rad): Q in the detector's frame
turns with it, and the band's apertures get a soft edge so that the agreement is smooth in it.

A :class:`Band` evaluates by one of five routes: the array code (:meth:`Band._array_moments`,
:meth:`Band._batch_arrays`, the reference), on the device the general batch kernel
(``band_batch``) and the quadratic-chi kernels (``band_quad_*``) of :mod:`qora.ssb.kernels`, and
on the host their Numba twins (:mod:`qora.ssb.cpu_kernels`, float64): whenever chi holds only C10
and C12 and the apertures are top-hat (the searches, the fits with the rotation given), the
quadratic-chi routes; else the array code (the rotation's Newton, with soft apertures).
"""

from __future__ import annotations

import copy
import math

import numpy as np

from qora.ssb import cpu_kernels, kernels
from qora.ssb.band_arrays import ArrayCode, array_pair_bytes, batch_pair_bytes, block_budget
from qora.ssb.detector import unresolved_out
from qora.ssb.model import (ABERRATION_PARAMETERS, KERNEL_COEFFICIENTS, QUADRATIC_PARAMETERS, THICK_PARAMETERS,
                            soft_aperture)
from qora.ssb.moments import agreement_from_sums, combine_batch_moments, combine_moments, uncertainties

__all__ = ["Band", "make_band", "combine_moments", "combine_batch_moments", "uncertainties"]


def _to_host(a):
    return a.get() if hasattr(a, "get") else a


def _detector_grid(k, xp):
    """The bright-field pixels' rows and columns on the detector grid: (ky of each row, kx of each
    column, row | column << 16 of each pixel), or None when k is not on a grid of at most 1024
    rows and columns (the quadratic kernels' row and column tables need one)."""
    k = np.asarray(k)
    rows, r = np.unique(k[:, 0], return_inverse=True)
    cols, c = np.unique(k[:, 1], return_inverse=True)
    if len(rows) > 1024 or len(cols) > 1024:
        return None
    cell = (r.astype(np.int64) | (c.astype(np.int64) << 16)).astype(np.int32)
    return xp.asarray(rows), xp.asarray(cols), xp.asarray(cell)


class Band(ArrayCode):
    """The frequencies of a band and everything about them that does not depend on p.

    Built from a :class:`qora.ssb.session.Session` (its rows of G from :meth:`Session.band_rows`): the
    half-plane Q with band_low <= |Q| <=
    band_high (1/A) and their G, apertures, and the phase bases of every fitted parameter, for
    the scan rotation ``rotation`` (rad; the session's by default). With ``"rotation"`` among the
    parameters the rotation is fitted too, with exact derivatives: the apertures then have a soft
    edge (a logistic of width ``soft_edge`` 1/A, default half a detector pixel) so that the
    agreement is smooth in the rotation; the geometry is rebuilt for each rotation evaluated.
    """

    def __init__(self, session, parameters, *, band=(0.2, 0.9), rotation: float | None = None,
                 soft_edge: float | None = None) -> None:
        known = ABERRATION_PARAMETERS + THICK_PARAMETERS + ("rotation",)
        unknown = [p for p in parameters if p not in known]
        if unknown:
            raise ValueError(f"unknown parameters {unknown}; known: {known}")
        self.parameters = tuple(parameters)
        self.rotation = session.rotation if rotation is None else float(rotation)
        self.fits_rotation = "rotation" in self.parameters
        qy, qx = session.q_half(0.0)  # the scan frame; turned for each rotation
        q = np.hypot(qy, qx)
        keep = (q >= band[0]) & (q <= band[1])
        unresolved_out(keep, session.scan_shape)  # Nyquist: +Q and -Q are one bin
        keep[0, 0] = False
        if not keep.any():
            raise ValueError(f"no scan frequency in the band {band} 1/A")
        self.keep = keep  # the band's frequencies on the half plane of Session.q_half (a host mask)
        # The band lives where G does: on the device for a session holding G there, else on the host
        # (a session streaming G from the host memory fits on the host).
        on_device = session.memory.get("G_on") == "device"
        xp = self.xp = session.xp if on_device else np
        self.G, self.total = session.band_rows(keep, on_device=on_device)  # (nq, nbf); sum |G|^2 (cached)
        self._q_scan = (xp.asarray(qy[keep])[:, None], xp.asarray(qx[keep])[:, None])
        self.shape = self.G.shape  # (frequencies, bright-field pixels)
        self.lam = session.wavelength
        self.alpha = session.alpha_mrad * 1e-3 / self.lam
        k = xp.asarray(session.k)  # (nbf, 2), a host array
        self.ky, self.kx = k[:, 0][None, :], k[:, 1][None, :]
        self._k_pairs = xp.ascontiguousarray(k)  # (nbf, 2) as (ky, kx), for the batch kernel
        # the quadratic kernels' aperture tests (float64 near an edge)
        self._k32 = self._k_pairs.astype(np.float32) if xp is not np else None
        dk = session.detector.mrad_per_pixel * 1e-3 / self.lam
        self.soft_edge = (0.5 * dk if soft_edge is None else float(soft_edge)) if self.fits_rotation else None
        self.aberration_names = [p for p in self.parameters if p in ABERRATION_PARAMETERS]
        self.aberration_index = [self.parameters.index(p) for p in self.aberration_names]
        self.thick = any(p in THICK_PARAMETERS for p in self.parameters)
        self._geometry_for = None
        self._set_rotation(self.rotation)
        self._grid = _detector_grid(session.k, xp)
        if xp is np and self._grid is not None:  # the host loops' form of it (None: not evenly spaced)
            self._grid = cpu_kernels.grid_columns(self._grid)
        # the quadratic-chi kernels (kernels/band.cu on the device, cpu_kernels on the host): top-hat
        # apertures, chi of C10 and C12 only
        self.quadratic_kernels = (self._grid is not None and self.soft_edge is None
                                  and set(self.aberration_names) <= set(QUADRATIC_PARAMETERS[:3]))
        # on the host, the rotation's fits (soft apertures, the standard model) by their own loop
        self.rotation_kernel = (xp is np and self.fits_rotation and not self.thick
                                and set(self.aberration_names) <= set(QUADRATIC_PARAMETERS[:3]))
        # the sets a search should give one pass: the device kernels' launch takes 8; the host loops
        # take any number in one pass over G, and a set costs less the more share it (its tables and
        # the pixels' aperture tests are made once per pass: 0.73 against 1.25 ms a set at 64 x 64)
        self.sets_per_pass = 128 if xp is np else 8
        # calls so far: batches (one pass over G per launch, a thick batch of 8 is two), single values,
        # values with derivatives (one pass each)
        self.passes = {"batch": 0, "value": 0, "derivatives": 0}
        # the array code's blocks of Q stay within this (its (Q, k) arrays are 3 GB each at full scale)
        self.block_bytes = block_budget(xp, host=1 << 30)

    def thinned(self, stride: int) -> "Band":
        """This band on every ``stride``-th of its frequencies (in the half plane's row-major order):
        a stand-in that a pass reads 1 / ``stride`` of the band's G for, sharing everything that
        does not depend on Q. Its agreement is the fraction of its own frequencies' signal; its
        maxima are the full band's up to noise, so the fits search and run their starts on it and
        finish on the full band (:func:`qora.ssb.identify.multi_start`). ``self`` for stride 1.
        The rows are a copy (1 / ``stride`` of the band's G), its pass counts its own."""
        if int(stride) != stride or stride < 1:
            raise ValueError(f"stride must be a whole number >= 1, got {stride!r}")
        if stride == 1:
            return self
        xp = self.xp
        out = copy.copy(self)
        out.G = xp.ascontiguousarray(self.G[::stride])
        out.total = float(sum(float(xp.sum(xp.abs(out.G[i:i + 4096]) ** 2, dtype=np.float64))
                              for i in range(0, out.G.shape[0], 4096)))
        out._q_scan = tuple(xp.ascontiguousarray(q[::stride]) for q in self._q_scan)
        out.shape = out.G.shape
        keep = np.zeros(self.keep.shape, bool)
        keep.flat[np.flatnonzero(self.keep)[::stride]] = True
        out.keep = keep
        out._g64 = None
        out._geometry_for = None
        out._set_rotation(self.rotation)
        out.passes = {"batch": 0, "value": 0, "derivatives": 0}
        out.stride = int(stride)
        return out

    stride = 1  # the band's frequencies are every stride-th of its full band's (thinned)

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["xp"] = self.xp.__name__  # a module does not pickle: its name does
        return state

    def __setstate__(self, state: dict) -> None:
        import importlib

        self.__dict__.update(state)
        self.xp = importlib.import_module(state["xp"])

    # -- the geometry at one rotation, with its rotation derivatives --------------------------
    def _set_rotation(self, theta: float) -> None:
        if self._geometry_for == theta:
            return
        c, s = math.cos(theta), math.sin(theta)
        qys, qxs = self._q_scan
        self.qy, self.qx = c * qys + s * qxs, -s * qys + c * qxs
        self.q_dot = (self.qx, -self.qy)  # dQ/dtheta in the detector frame
        self._qy_flat = self.xp.ascontiguousarray(self.qy[:, 0])  # what the kernels take, made once per rotation
        self._qx_flat = self.xp.ascontiguousarray(self.qx[:, 0])
        self._terms = None  # the array code's geometry, made when first needed (G-sized arrays)
        self._geometry_for = theta

    # -- one parameter set with derivatives -----------------------------------------------
    def moments(self, values: dict, *, order: int = 2) -> dict:
        """The per-Q sums over k the agreement of ``values`` and its derivatives are made of."""
        if self.quadratic_kernels:
            return self._kernel_moments(values, order)
        if self.rotation_kernel:
            return self._rotation_moments(values, order)
        if self.fits_rotation:  # the blocks' views make their own geometry: the rotation must be set first
            self._set_rotation(float(values.get("rotation", self.rotation)))
        return self._in_blocks("_array_moments", array_pair_bytes(len(self.parameters)), values, order)

    def _rotation_moments(self, values: dict, order: int) -> dict:
        """:meth:`moments` of a band fitting the rotation by the host's loop
        (:func:`qora.ssb.cpu_kernels.band_rotation_moments`): one pass for any ``order``."""
        self._set_rotation(float(values.get("rotation", self.rotation)))
        if getattr(self, "_soft0", None) is None:  # the soft aperture at each pixel, fixed
            self._soft0 = soft_aperture(self._k_pairs[:, 0], self._k_pairs[:, 1], self.alpha, self.soft_edge)
        coef = [float(values.get(p, 0.0)) if p in self.aberration_names else 0.0 for p in QUADRATIC_PARAMETERS[:3]]
        out = np.empty((self.G.shape[0], 45))
        cpu_kernels.band_rotation_moments(G=self.G, k=self._k_pairs, aperture0=self._soft0, qy=self._qy_flat,
                                          qx=self._qx_flat, coefficients=coef, wavelength=self.lam, radius=self.alpha,
                                          width=self.soft_edge, order=0 if order == 0 else 2, out=out)
        if order == 0:
            return {"S": out[:, 0] + 1j * out[:, 1], "N": out[:, 2]}
        return self._unpack_derivatives(out, cpu_kernels.ROTATION_PARAMETERS)

    def evaluate(self, values: dict, *, order: int = 2):
        """Agreement (and with ``order`` 1 or 2 its gradient and Hessian in ``self.parameters``)."""
        self.passes["derivatives" if order else "value"] += 1
        if self.quadratic_kernels and self.xp is not np:
            # on the device, reduced where the kernels leave their sums: one launch and one small copy
            # to the host for the value, two for the derivatives (the Newton steps' fixed cost)
            if order == 0:
                return float(self._agreement_of_raw(self._quadratic_raw([values]))[0])
            sums = kernels.derivative_sums(raw=self._derivative_raw(values), parameters=6 if self.thick else 3)
            return agreement_from_sums(sums, QUADRATIC_PARAMETERS[:6 if self.thick else 3], self.parameters,
                                       self.total, order)
        return combine_moments(self.moments(values, order=order), self.total, order)

    def evaluate_batch(self, sets) -> np.ndarray:
        """Agreement of several parameter sets (a list of dicts) in one pass over G per rotation."""
        if self.quadratic_kernels and not self.fits_rotation:
            # the search's passes: the agreement reduced from the kernels' output (on the device in one
            # launch), without the complex S arrays of batch_moments
            self.passes["batch"] += 1
            return self._agreement_of_raw(self._quadratic_raw(list(sets)))
        return combine_batch_moments(self.batch_moments(sets), self.total)

    def _agreement_of_raw(self, raw) -> np.ndarray:
        """The agreement of each set from the quadratic kernels' (..., nq, 3) Re S, Im S, N."""
        if self.xp is np:
            return np.sum((raw[..., 0] ** 2 + raw[..., 1] ** 2) / np.maximum(raw[..., 2], 1e-300), -1) / self.total
        return np.asarray(_to_host(kernels.agreement_sum(raw=raw))) / self.total

    def evaluate_rotations(self, rotations, sets) -> np.ndarray:
        """The agreement of every set (a list of dicts of C10, C12a, C12b) at every scan rotation of
        ``rotations`` (rad): (R, B), in one pass over G on the host.

        The cold-start rotation search's primitive: the band's frequencies are chosen in the scan
        frame, so a rotation only turns their detector-frame coordinates and every (rotation, set)
        pair reads the same rows of G. A band of the standard model with top-hat apertures
        (``quadratic_kernels``, no ``"rotation"`` parameter); on the device, one batch per rotation.
        """
        rotations = np.atleast_1d(np.asarray(rotations, float))
        sets = list(sets)
        if not self.quadratic_kernels or self.fits_rotation or self.thick:
            raise ValueError("evaluate_rotations needs a band of C10 and C12 only, top-hat apertures, no rotation "
                             "parameter")
        keep = self.rotation
        try:
            if self.xp is not np:
                out = []
                for theta in rotations:
                    self._set_rotation(float(theta))
                    out.append(self.evaluate_batch(sets))
                return np.array(out)
            qys, qxs = self._q_scan
            qys, qxs = qys[:, 0], qxs[:, 0]
            c, s = np.cos(rotations)[:, None], np.sin(rotations)[:, None]
            qy, qx = (c * qys + s * qxs).ravel(), (-s * qys + c * qxs).ravel()  # as _set_rotation turns them
            rows = np.array([self._quadratic_row(v) for v in sets], float)
            out = np.empty((len(rows), len(qy), 3))
            cpu_kernels.band_quad_batch(G=self.G, k=self._k_pairs, grid=self._grid, qy=qy, qx=qx, table=rows,
                                        wavelength=self.lam, alpha=self.alpha, out=out)
            self.passes["batch"] += 1
            return self._agreement_of_raw(out.reshape(len(rows), len(rotations), -1, 3)).T
        finally:
            self._set_rotation(keep)

    def batch_moments(self, sets) -> dict:
        """S and N (see :meth:`moments`) of each set, (B, nq), in one pass over G per rotation."""
        sets = list(sets)
        self.passes["batch"] += 1
        if not self.fits_rotation:
            return self._batch(sets)
        xp = self.xp
        out = None
        groups: dict = {}
        for i, v in enumerate(sets):
            groups.setdefault(float(v.get("rotation", self.rotation)), []).append(i)
        for theta, idx in groups.items():
            self._set_rotation(theta)
            part = self._batch([sets[i] for i in idx])
            if out is None:
                out = {k: xp.empty((len(sets),) + a.shape[1:], a.dtype) for k, a in part.items()}
            for k, a in part.items():
                out[k][xp.asarray(idx)] = a
        return out

    def _batch(self, sets) -> dict:
        xp = self.xp
        if self.quadratic_kernels:
            return self._quadratic_batch(sets)
        if xp is not np and self.soft_edge is None and len(sets) <= 64:
            return self._batch_kernel(sets)
        return self._in_blocks("_batch_arrays", batch_pair_bytes(len(sets)), sets)

    # -- the quadratic-chi kernels (kernels/band.cu) ----------------------------------------
    def _quadratic_row(self, v: dict) -> list:
        """A set as the kernels take it: C10, C12a, C12b (those the band fits, else 0), thickness
        and tilt (the thick model's, else 0)."""
        row = [float(v.get(p, 0.0)) if p in self.aberration_names else 0.0 for p in QUADRATIC_PARAMETERS[:3]]
        row += [float(v.get(p, 0.0)) if self.thick else 0.0 for p in QUADRATIC_PARAMETERS[3:]]
        return row

    def _quadratic_arrays(self) -> dict:
        """What every quadratic kernel's launch takes from the band (:mod:`qora.ssb.kernels`, and
        :mod:`qora.ssb.cpu_kernels` on the host, which reads the band's own float64 G)."""
        return dict(G=self.G if self.xp is np else self._G64, k=self._k_pairs, k32=self._k32, grid=self._grid, qy=self._qy_flat, qx=self._qx_flat,
                    wavelength=self.lam, alpha=self.alpha)

    @property
    def _G64(self):
        """The band's G as complex64, what the quadratic kernels read (the session's own when it
        holds complex64)."""
        if self.G.dtype != np.complex64:
            if getattr(self, "_g64", None) is None:
                self._g64 = self.G.astype(np.complex64)
            return self._g64
        return self.G


    def _quadratic_raw(self, sets):
        """(B, nq, 3) Re S, Im S, N of each set by ``band_quad_batch``, or ``band_quad_standard``
        when no set has a thickness (the search's sets, all of the standard model), up to 8 sets
        per pass over G."""
        xp = self.xp
        rows = [self._quadratic_row(v) for v in sets]
        if xp is np:  # the host's loops take every set in one pass over G
            out = np.empty((len(rows), self.G.shape[0], 3))
            cpu_kernels.band_quad_batch(table=rows, out=out, **self._quadratic_arrays())
            return out
        standard = all(r[3] == 0.0 for r in rows)
        krow, kcol, _ = self._grid
        per_pass = kernels.sets_per_launch(standard=standard, rows=len(krow), cols=len(kcol))
        launch = kernels.band_quad_standard if standard else kernels.band_quad_batch
        out = xp.empty((len(rows), self.G.shape[0], 3))
        shared = self._quadratic_arrays()
        for start in range(0, len(rows), per_pass):
            part = rows[start:start + per_pass]
            launch(table=part, out=out[start:start + len(part)], **shared)
        return out

    def _quadratic_batch(self, sets) -> dict:
        """:meth:`_quadratic_raw` as the S (complex) and N of :meth:`batch_moments`."""
        out = self._quadratic_raw(sets)
        return {"S": out[..., 0] + 1j * out[..., 1], "N": out[..., 2]}

    def _kernel_moments(self, values: dict, order: int) -> dict:
        """:meth:`moments` by the quadratic kernels: order 0 one set of the batch kernel, else every
        first and second derivative in one pass (``band_quad_derivatives``)."""
        if order == 0:
            m = self._quadratic_batch([values])
            return {"S": m["S"][0], "N": m["N"][0]}
        return self._unpack_derivatives(self._derivative_raw(values), QUADRATIC_PARAMETERS[:6 if self.thick else 3])

    def _derivative_raw(self, values: dict):
        """The derivative kernel's (nq, 3 + 3 n + 3 n (n + 1) / 2) output at ``values``, n = 3 or 6."""
        xp = self.xp
        nk = 6 if self.thick else 3
        out = xp.empty((self.G.shape[0], 3 + 3 * nk + 3 * (nk * (nk + 1) // 2)))
        launcher = cpu_kernels if xp is np else kernels
        launcher.band_quad_derivatives(row=self._quadratic_row(values), thick=self.thick, out=out,
                                       **self._quadratic_arrays())
        return out

    def _unpack_derivatives(self, out, names) -> dict:
        """The moments of :meth:`moments` from a derivative kernel's (nq, 3 + 3 n + 3 n (n + 1) / 2)
        output in the parameters ``names`` (the kernel's order), taken in ``self.parameters``' order."""
        xp = self.xp
        nk, nq = len(names), out.shape[0]
        pairs = [(i, j) for i in range(nk) for j in range(i, nk)]
        out = out.T
        first = out[3:3 + 3 * nk].reshape(nk, 3, nq)
        second = out[3 + 3 * nk:].reshape(len(pairs), 3, nq)
        Sij = xp.empty((nk, nk, nq), np.complex128)
        Nij = xp.empty((nk, nk, nq))
        i, j = np.array(pairs).T
        for a, b in ((i, j), (j, i)):
            Sij[a, b] = second[:, 0] + 1j * second[:, 1]
            Nij[a, b] = second[:, 2]
        idx = np.array([names.index(p) for p in self.parameters])
        return {"S": out[0] + 1j * out[1], "N": out[2], "Sp": (first[:, 0] + 1j * first[:, 1])[idx],
                "Np": first[:, 2][idx], "Sij": Sij[np.ix_(idx, idx)], "Nij": Nij[np.ix_(idx, idx)]}

    def _batch_kernel(self, sets) -> dict:
        """:meth:`_batch_arrays` in one kernel pass over the band's G (``kernels/ssb.cu``,
        ``band_batch``): chi from its coefficients per term, no (B, nq, nbf) arrays."""
        xp = self.xp
        table = np.zeros((len(sets), 15))
        for row, v in zip(table, sets):
            for i, name in enumerate(KERNEL_COEFFICIENTS):
                if name in self.aberration_names:
                    row[i] = v.get(name, 0.0)
            if self.thick:
                row[12:15] = v.get("thickness", 0.0), v.get("tilt_y", 0.0), v.get("tilt_x", 0.0)
        nq, nbf = self.G.shape
        S = xp.empty((len(sets), nq), np.complex128)
        N = xp.empty((len(sets), nq))
        kernels.band_batch(G=self.G, k=self._k_pairs, qy=self._qy_flat, qx=self._qx_flat, table=table,
                           wavelength=self.lam, alpha=self.alpha, S=S, N=N)
        return {"S": S, "N": N}

    def uncertainties(self, agreement: float, hessian) -> dict:
        """Standard errors of the fitted parameters at the agreement's maximum: :func:`uncertainties`."""
        return uncertainties(agreement, hessian, total=self.total, shape=self.shape, parameters=self.parameters)


def make_band(session, parameters, **kwargs):
    """A :class:`Band` of ``session``, or what the session makes in its place (a session split over
    workers, :class:`qora.distributed.ssb.ShardedSession`, makes a band of the same interface)."""
    maker = getattr(session, "make_band", None)
    return maker(parameters, **kwargs) if maker is not None else Band(session, parameters, **kwargs)
