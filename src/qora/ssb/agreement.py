"""The agreement between G(Q, k) and the weak-phase model, with exact first and second derivatives.

For each frequency Q of a band the model is G(Q, k) = i Phi(Q) Gamma(Q, k; p) with Phi(Q) free,
so the best Phi leaves the part of G along Gamma. The agreement is the fraction of the band's
signal that the model explains,

    agreement(p) = sum_Q |S(Q)|^2 / N(Q)  /  sum_Q sum_k |G(Q, k)|^2,
    S(Q) = sum_k G(Q, k) conj(Gamma(Q, k; p)),   N(Q) = sum_k |Gamma(Q, k; p)|^2,

between 0 and 1, and weighted by signal by construction: a frequency where G is empty (most of
the band on a crystal) adds nothing to either sum.

Parameters p (the fitted ones, by name): aberrations in cartesian form, ``C10``, ``C12a``,
``C12b``, ``C21a``, ``C21b``, ``C23a``, ``C23b``, ``C30`` (A; C_nm,a = C cos(m phi), C_nm,b =
C sin(m phi)), and the thick-sample ``thickness`` (A), ``tilt_y``, ``tilt_x`` (rad). chi is
linear in the cartesian coefficients, chi = sum_p c_p B_p(k), so Gamma's two terms are

    term1 = A(k) A(k - Q) exp(-i sum_p c_p [B_p(k - Q) - B_p(k)]) s1(t, tau),
    term2 = A(k) A(k + Q) exp(-i sum_p c_p [B_p(k) - B_p(k + Q)]) s2(t, tau),

with s the thick model's sinc depth weights (1 for the standard model), and every derivative
is exact. The scan rotation is a parameter too (``rotation``, rad): Q in the detector's frame
turns with it, and the band's apertures get a soft edge so that the agreement is smooth in it.
"""

from __future__ import annotations

import math

import numpy as np

from qora.backend.core import xp_of
from qora.ssb.optics import KNOWN_ABERRATIONS, Aberrations, aperture

__all__ = ["ABERRATION_PARAMETERS", "THICK_PARAMETERS", "SEARCH_BOUNDS", "Band", "parameters_to_aberrations", "newton",
           "defocus_search", "tpe_search", "fit_rotation", "fit_session"]

ABERRATION_PARAMETERS = ("C10", "C12a", "C12b", "C21a", "C21b", "C23a", "C23b", "C30")
THICK_PARAMETERS = ("thickness", "tilt_y", "tilt_x")


def _basis(name: str, ky, kx, lam: float):
    """B_p(k): the chi per unit of the cartesian coefficient ``name`` (rad / A)."""
    coefficient = name.rstrip("ab") if name[-1] in "ab" else name
    n, m = KNOWN_ABERRATIONS[coefficient]
    xp = xp_of(ky, kx)
    w = lam * xp.hypot(ky, kx)
    theta = xp.arctan2(ky, kx)
    angular = xp.sin(m * theta) if name.endswith("b") else xp.cos(m * theta)
    return 2 * np.pi / lam * w ** (n + 1) / (n + 1) * angular


def parameters_to_aberrations(values: dict) -> Aberrations:
    """Cartesian parameters (A) -> :class:`Aberrations` (thickness and tilt ignored)."""
    cart = {}
    for name in ABERRATION_PARAMETERS:
        if name not in values:
            continue
        if name[-1] in "ab":
            base = name[:-1]
            a, b = cart.get(base, (0.0, 0.0))
            cart[base] = (values[name], b) if name.endswith("a") else (a, values[name])
        else:
            cart[name] = values[name]
    return Aberrations.from_cartesian(**cart)


def _sinc_derivatives(u):
    """sinc(u) = sin(u) / u and its first two derivatives in u (series near 0)."""
    xp = xp_of(u)
    small = xp.abs(u) < 1e-4
    us = xp.where(small, 1.0, u)
    s, c = xp.sin(us), xp.cos(us)
    f = xp.where(small, 1 - u**2 / 6, s / us)
    d1 = xp.where(small, -u / 3, (us * c - s) / us**2)
    d2 = xp.where(small, -1 / 3 + u**2 / 10, -s / us - 2 * c / us**2 + 2 * s / us**3)
    return f, d1, d2


def _basis_derivatives(name: str, ky, kx, lam: float, qdy, qdx, qddy, qddx):
    """B_p(k) and its first and second derivatives along a path k(theta) with dk/dtheta = (qdy, qdx)
    and d2k/dtheta2 = (qddy, qddx): (B, dB, d2B). Exact: r^(n+1) cos(m phi) = Re(z^m) |z|^(n+1-m)
    with z = kx + i ky is a polynomial (n + 1 - m is even for every Krivanek term here)."""
    coefficient = name.rstrip("ab") if name[-1] in "ab" else name
    n, m = KNOWN_ABERRATIONS[coefficient]
    j = (n + 1 - m) // 2
    xp = xp_of(ky, kx)
    c = 2 * np.pi * lam**n / (n + 1)
    z = kx + 1j * ky
    r2 = kx**2 + ky**2

    def zp(p):  # z^p, 0 for negative p (its coefficient is then zero)
        return z**p if p >= 0 else xp.zeros_like(z)

    def rp(p):
        return r2**p if p >= 0 else xp.zeros_like(r2)

    f = zp(m) * rp(j)
    fx = m * zp(m - 1) * rp(j) + zp(m) * j * rp(j - 1) * 2 * kx
    fy = 1j * m * zp(m - 1) * rp(j) + zp(m) * j * rp(j - 1) * 2 * ky
    fxx = m * (m - 1) * zp(m - 2) * rp(j) + 4 * m * j * zp(m - 1) * rp(j - 1) * kx \
        + zp(m) * (j * (j - 1) * rp(j - 2) * 4 * kx**2 + 2 * j * rp(j - 1))
    fyy = -m * (m - 1) * zp(m - 2) * rp(j) + 4j * m * j * zp(m - 1) * rp(j - 1) * ky \
        + zp(m) * (j * (j - 1) * rp(j - 2) * 4 * ky**2 + 2 * j * rp(j - 1))
    fxy = 1j * m * (m - 1) * zp(m - 2) * rp(j) + 2 * m * j * zp(m - 1) * rp(j - 1) * (ky + 1j * kx) \
        + zp(m) * j * (j - 1) * rp(j - 2) * 4 * kx * ky
    part = xp.imag if name.endswith("b") else xp.real
    d1 = fx * qdx + fy * qdy
    d2 = fxx * qdx**2 + 2 * fxy * qdx * qdy + fyy * qdy**2 + fx * qddx + fy * qddy
    return c * part(f), c * part(d1), c * part(d2)


def _soft_aperture(ky, kx, radius: float, width: float, qdy=None, qdx=None, qddy=None, qddx=None):
    """A(k) = 1 / (1 + exp((|k| - radius) / width)) (1/A), and its first and second derivatives
    along a path with dk/dtheta = (qdy, qdx), d2k/dtheta2 = (qddy, qddx) when given."""
    xp = xp_of(ky, kx)
    r = xp.hypot(ky, kx)
    a = 0.5 * (1 - xp.tanh((r - radius) / (2 * width)))  # the logistic, without overflow
    if qdy is None:
        return a
    ar = -a * (1 - a) / width
    arr = a * (1 - a) * (1 - 2 * a) / width**2
    rs = xp.maximum(r, 1e-300)
    ur = (ky * qdy + kx * qdx) / rs  # the path's radial speed
    speed2 = qdy**2 + qdx**2
    first = ar * ur
    second = arr * ur**2 + ar * ((speed2 - ur**2) / rs + (ky * qddy + kx * qddx) / rs)
    return a, first, second



def _to_host(a):
    return a.get() if hasattr(a, "get") else a


# the parameters of the quadratic-chi kernels, in their order (kernels/band.cu)
QUADRATIC_PARAMETERS = ("C10", "C12a", "C12b", "thickness", "tilt_y", "tilt_x")
# dynamic shared memory a launch may take without opting in: 48 KiB less the kernels' static shared
# memory (the block sums and the sets' constants, 2.6 KB at most in band.cu)
_SHARED_BYTES = 44 * 1024


def _band_G(session, keep, on_device: bool):
    """The band's rows of G and sum |G|^2 over them, gathered once per session and band mask: the
    fits make several bands of one band of frequencies (standard, thick, the Hessian's), and at
    full scale each gather is 3 GB."""
    key = keep.tobytes()
    cached = getattr(session, "_band_cache", None)
    if cached is not None and cached[0] == key:
        return cached[1], cached[2]
    xp = session.xp if on_device else np
    G = session.G[xp.asarray(keep)] if on_device else session.host_G()[keep]
    # a float64 sum in blocks of rows, with no G-sized temporary
    total = float(sum(float(xp.sum(xp.abs(G[i:i + 4096]) ** 2, dtype=np.float64)) for i in range(0, G.shape[0], 4096)))
    session._band_cache = (key, G, total)  # one band kept: the memory of one more is all it costs
    return G, total


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


class Band:
    """The frequencies of a band and everything about them that does not depend on p.

    Built from a :class:`qora.ssb.session.Session`: the half-plane Q with band_low <= |Q| <=
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
        sy, sx = session.scan_shape
        keep = (q >= band[0]) & (q <= band[1])
        if sy % 2 == 0:
            keep[sy // 2] = False  # Nyquist: +Q and -Q are one bin
        if sx % 2 == 0:
            keep[:, sx // 2] = False
        keep[0, 0] = False
        if not keep.any():
            raise ValueError(f"no scan frequency in the band {band} 1/A")
        # The band lives where G does: on the device for a session holding G there, else on the host
        # (a session streaming G from the host memory fits on the host).
        on_device = session.memory.get("G_on") == "device"
        xp = self.xp = session.xp if on_device else np
        self.G, self.total = _band_G(session, keep, on_device)  # (nq, nbf); sum |G|^2
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
        self._grid = _detector_grid(session.k, xp) if xp is not np else None
        # the quadratic-chi kernels (kernels/band.cu): top-hat apertures, chi of C10 and C12 only
        self.quadratic_kernels = (self._grid is not None and self.soft_edge is None
                                  and set(self.aberration_names) <= set(QUADRATIC_PARAMETERS[:3]))
        # calls so far: batches (one pass over G per launch, a thick batch of 8 is two), single values,
        # values with derivatives (one pass each)
        self.passes = {"batch": 0, "value": 0, "derivatives": 0}

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

    @property
    def terms(self) -> list:
        """Per term of Gamma, the apertures, phase differences of the fitted aberrations and depth
        phases over (Q, k), with their rotation derivatives: what the array code evaluates from.
        The kernels need none of it, and at full scale each of these arrays is 3 GB."""
        if self._terms is None:
            self._terms = self._make_terms()
        return self._terms

    def _make_terms(self) -> list:
        lam, ky, kx = self.lam, self.ky, self.kx
        qdy, qdx = self.q_dot
        qddy, qddx = -self.qy, -self.qx
        names = self.aberration_names
        zero = self.xp.zeros_like(qdy)
        b0 = [_basis_derivatives(p, ky, kx, lam, zero, zero, zero, zero)[0] for p in names]  # B(k): no path
        terms = []
        for sign in (-1, 1):  # term 1 at k - Q, term 2 at k + Q
            ks = (ky + sign * self.qy, kx + sign * self.qx)
            path = (sign * qdy, sign * qdx, sign * qddy, sign * qddx)  # d(k +- Q)/dtheta
            if self.soft_edge is None:
                a0 = aperture(kx, ky, self.alpha * 1e3 * lam, lam)
                a = a0 * aperture(ks[1], ks[0], self.alpha * 1e3 * lam, lam)
                a_d = a_dd = None
            else:
                a0 = _soft_aperture(ky, kx, self.alpha, self.soft_edge)
                a_s, a_s1, a_s2 = _soft_aperture(ks[0], ks[1], self.alpha, self.soft_edge, *path)
                a, a_d, a_dd = a0 * a_s, a0 * a_s1, a0 * a_s2
            d, d_d, d_dd = [], [], []
            for p, b in zip(names, b0):
                bs, bs1, bs2 = _basis_derivatives(p, ks[0], ks[1], lam, *path)
                # term 1: B(k - Q) - B(k); term 2: B(k) - B(k + Q)
                d.append(bs - b if sign < 0 else b - bs)
                d_d.append(bs1 if sign < 0 else -bs1)
                d_dd.append(bs2 if sign < 0 else -bs2)
            k2, kq2 = ky**2 + kx**2, ks[0] ** 2 + ks[1] ** 2
            dot = ks[0] * path[0] + ks[1] * path[1]  # (k +- Q) . d(k +- Q)/dtheta
            speed2 = path[0] ** 2 + path[1] ** 2
            acc = ks[0] * path[2] + ks[1] * path[3]
            # depth phase pi lambda (|k|^2 - |k - Q|^2) (term 1) or pi lambda (|k + Q|^2 - |k|^2) (term 2)
            depth = np.pi * lam * ((k2 - kq2) if sign < 0 else (kq2 - k2))
            depth_d = np.pi * lam * 2 * dot * (-1 if sign < 0 else 1)
            depth_dd = np.pi * lam * 2 * (speed2 + acc) * (-1 if sign < 0 else 1)
            terms.append({"a": a, "a_d": a_d, "a_dd": a_dd, "d": d, "d_d": d_d, "d_dd": d_dd,
                          "depth": depth, "depth_d": depth_d, "depth_dd": depth_dd})
        return terms

    @property
    def a1(self):
        return self.terms[0]["a"]

    @property
    def a2(self):
        return self.terms[1]["a"]

    # -- one parameter set with derivatives -----------------------------------------------
    def _depth(self, term, values, order: int):
        """The sinc depth weight s and its derivatives in the depth-related parameters present
        (thickness, tilt_y, tilt_x, rotation): (s, {name: s_i}, {(name, name): s_ij})."""
        t = values.get("thickness", 0.0)
        ty, tx = values.get("tilt_y", 0.0), values.get("tilt_x", 0.0)
        qy, qx = self.qy, self.qx
        a = term["depth"] - 2 * np.pi * (ty * qy + tx * qx)
        u = a * t / 2
        f, f1, f2 = _sinc_derivatives(u)
        if order == 0:
            return f, {}, {}
        qdy, qdx = self.q_dot
        a_r = term["depth_d"] - 2 * np.pi * (ty * qdy + tx * qdx)
        a_rr = term["depth_dd"] - 2 * np.pi * (ty * -qy + tx * -qx)
        du = {"thickness": a / 2, "tilt_y": -np.pi * qy * t, "tilt_x": -np.pi * qx * t, "rotation": a_r * t / 2}
        ddu = {("thickness", "tilt_y"): -np.pi * qy, ("thickness", "tilt_x"): -np.pi * qx,
               ("thickness", "rotation"): a_r / 2, ("tilt_y", "rotation"): -np.pi * qdy * t,
               ("tilt_x", "rotation"): -np.pi * qdx * t, ("rotation", "rotation"): a_rr * t / 2}
        present = [p for p in ("thickness", "tilt_y", "tilt_x", "rotation") if p in self.parameters]
        first = {p: f1 * du[p] for p in present}
        second = {}
        for i, p in enumerate(present):
            for q_ in present[i:]:
                cross = ddu.get((p, q_), ddu.get((q_, p), 0.0))
                second[(p, q_)] = second[(q_, p)] = f2 * du[p] * du[q_] + f1 * cross
        return f, first, second

    def moments(self, values: dict, *, order: int = 2) -> dict:
        """The per-Q sums over k the agreement of ``values`` and its derivatives are made of."""
        if self.quadratic_kernels:
            return self._kernel_moments(values, order)
        if self.fits_rotation:
            self._set_rotation(float(values.get("rotation", self.rotation)))
        names = self.parameters
        nparam = len(names)
        xp = self.xp
        c = [float(values.get(p, 0.0)) for p in self.aberration_names]
        terms = []
        for term in self.terms:
            phase = sum(ci * di for ci, di in zip(c, term["d"])) if len(c) else 0.0
            e = xp.exp(-1j * phase) * xp.ones(self.G.shape)
            if self.thick or self.fits_rotation:
                sw, s_first, s_second = self._depth(term, values, order) if self.thick else (1.0, {}, {})
            else:
                sw, s_first, s_second = 1.0, {}, {}
            a = term["a"]
            value = a * e * sw
            if order == 0:
                terms.append((value, None, None))
                continue
            # first derivatives of the three factors a (aperture), e (aberration phase), s (depth)
            phase_d = {}
            for j, p in enumerate(self.aberration_names):
                phase_d[p] = term["d"][j]
            if self.fits_rotation:
                phase_d["rotation"] = sum(ci * di for ci, di in zip(c, term["d_d"])) if len(c) else 0.0
            a_d = {"rotation": term["a_d"]} if self.fits_rotation else {}
            grads = []
            for p in names:
                g = 0.0
                if p in a_d:
                    g = g + a_d[p] * e * sw
                if p in phase_d:
                    g = g + a * (-1j * phase_d[p]) * e * sw
                if p in s_first:
                    g = g + a * e * s_first[p]
                grads.append(g * xp.ones(self.G.shape))
            if order == 1:
                terms.append((value, grads, None))
                continue
            phase_dd = {}
            if self.fits_rotation:
                for j, p in enumerate(self.aberration_names):
                    phase_dd[(p, "rotation")] = phase_dd[("rotation", p)] = term["d_d"][j]
                phase_dd[("rotation", "rotation")] = (sum(ci * di for ci, di in zip(c, term["d_dd"]))
                                                      if len(c) else 0.0)
            a_dd = term["a_dd"] if self.fits_rotation else None
            hess = [[None] * nparam for _ in range(nparam)]
            for i, p in enumerate(names):
                for j in range(i, nparam):
                    q_ = names[j]
                    # d2(a e s) = a_pq e s + a_p e_q s + a_p e s_q + a_q e_p s + a e_pq s + a e_p s_q
                    #             + a_q e s_p + a e_q s_p + a e s_pq, with e_p = -i phi_p e and
                    #             e_pq = (-i phi_pq - phi_p phi_q) e
                    ep = -1j * phase_d[p] if p in phase_d else None
                    eq = -1j * phase_d[q_] if q_ in phase_d else None
                    h = 0.0
                    if p == "rotation" and q_ == "rotation":
                        h = h + a_dd * sw
                    if p in a_d and eq is not None:
                        h = h + a_d[p] * eq * sw
                    if q_ in a_d and ep is not None:
                        h = h + a_d[q_] * ep * sw
                    if p in a_d and q_ in s_first:
                        h = h + a_d[p] * s_first[q_]
                    if q_ in a_d and p in s_first:
                        h = h + a_d[q_] * s_first[p]
                    e2 = 0.0
                    if ep is not None and eq is not None:
                        e2 = e2 + ep * eq
                    if (p, q_) in phase_dd:
                        e2 = e2 - 1j * phase_dd[(p, q_)]
                    h = h + a * e2 * sw
                    if ep is not None and q_ in s_first:
                        h = h + a * ep * s_first[q_]
                    if eq is not None and p in s_first:
                        h = h + a * eq * s_first[p]
                    if (p, q_) in s_second:
                        h = h + a * s_second[(p, q_)]
                    hess[i][j] = hess[j][i] = h * e
            terms.append((value, grads, hess))
        return self._moments(terms, order)

    def _moments(self, terms, order: int) -> dict:
        """The sums over this band's k of the products the agreement is made of, per Q: additive
        over disjoint sets of bright-field pixels, so shards of G (``qora.distributed``) add them
        up before :func:`combine_moments` finishes the agreement."""
        xp, G = self.xp, self.G
        (t1, g1, h1), (t2, g2, h2) = terms
        gam = t1 - t2
        m = {"S": xp.sum(G * xp.conj(gam), -1), "N": xp.sum(xp.abs(gam) ** 2, -1)}
        if order == 0:
            return m
        nparam = len(self.parameters)
        gp = [g1[i] - g2[i] for i in range(nparam)]
        m["Sp"] = xp.stack([xp.sum(G * xp.conj(g), -1) for g in gp])
        m["Np"] = xp.stack([2 * xp.real(xp.sum(xp.conj(gam) * g, -1)) for g in gp])
        if order == 1:
            return m
        Sij = xp.zeros((nparam, nparam) + m["S"].shape, m["S"].dtype)
        Nij = xp.zeros((nparam, nparam) + m["S"].shape)
        for i in range(nparam):
            for j in range(i, nparam):
                gij = h1[i][j] - h2[i][j]
                Sij[i, j] = Sij[j, i] = xp.sum(G * xp.conj(gij), -1)
                Nij[i, j] = Nij[j, i] = 2 * xp.real(xp.sum(xp.conj(gp[j]) * gp[i] + xp.conj(gam) * gij, -1))
        m["Sij"], m["Nij"] = Sij, Nij
        return m

    def evaluate(self, values: dict, *, order: int = 2):
        """Agreement (and with ``order`` 1 or 2 its gradient and Hessian in ``self.parameters``)."""
        self.passes["derivatives" if order else "value"] += 1
        return combine_moments(self.moments(values, order=order), self.total, order)

    def evaluate_batch(self, sets) -> np.ndarray:
        """Agreement of several parameter sets (a list of dicts) in one pass over G per rotation."""
        if self.quadratic_kernels and not self.fits_rotation:
            # the search's passes: the agreement reduced on the device from the kernels' output in one
            # launch, without the complex S arrays of batch_moments
            self.passes["batch"] += 1
            return np.asarray(_to_host(_agreement_sum(self._quadratic_raw(list(sets)), self.xp))) / self.total
        return combine_batch_moments(self.batch_moments(sets), self.total)

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
        return self._batch_arrays(sets)

    # -- the quadratic-chi kernels (kernels/band.cu) ----------------------------------------
    def _quadratic_row(self, v: dict) -> list:
        """A set as the kernels take it: C10, C12a, C12b (those the band fits, else 0), thickness
        and tilt (the thick model's, else 0)."""
        row = [float(v.get(p, 0.0)) if p in self.aberration_names else 0.0 for p in QUADRATIC_PARAMETERS[:3]]
        row += [float(v.get(p, 0.0)) if self.thick else 0.0 for p in QUADRATIC_PARAMETERS[3:]]
        return row

    def _quadratic_launch(self, name: str, table, out, sets_count: int | None = None) -> None:
        from qora.ssb.cuda import BLOCK, kernel

        xp = self.xp
        krow, kcol, cell = self._grid
        nq, nbf = self.G.shape
        nsets = 1 if sets_count is None else sets_count
        shared = self._table_bytes(name.startswith("band_quad_standard"), nsets)
        args = (self._G64, self._k_pairs, self._k32, cell, krow, np.int32(len(krow)), kcol, np.int32(len(kcol)),
                self._qy_flat, self._qx_flat, xp.asarray(table, np.float64))
        args += (np.int32(nsets),) if sets_count is not None else ()
        args += (np.int32(nq), np.int32(nbf), np.float64(self.lam), np.float64(self.alpha), out)
        kernel(name)((nq,), (BLOCK["band.cu"],), args, shared_mem=shared)

    @property
    def _G64(self):
        """The band's G as complex64, what the quadratic kernels read (the session's own when it
        holds complex64)."""
        if self.G.dtype != np.complex64:
            if getattr(self, "_g64", None) is None:
                self._g64 = self.G.astype(np.complex64)
            return self._g64
        return self.G


    def _table_bytes(self, standard: bool, sets: int) -> int:
        """Dynamic shared memory of a quadratic kernel's launch: per set the phase tables (and the
        thick model's depth tables), for every padded set of band_quad_standard."""
        from qora.ssb.cuda import batch_size

        krow, kcol, _ = self._grid
        if standard:
            return batch_size(sets, standard=True) * (len(krow) + len(kcol)) * 8
        return sets * 2 * (len(krow) + len(kcol)) * 8

    def _quadratic_raw(self, sets):
        """(B, nq, 3) Re S, Im S, N of each set by ``band_quad_batch``, or ``band_quad_standard``
        when no set has a thickness (the search's sets, all of the standard model), up to 8 sets
        per pass over G."""
        from qora.ssb.cuda import batch_kernel_name, most_sets

        xp = self.xp
        rows = [self._quadratic_row(v) for v in sets]
        standard = all(r[3] == 0.0 for r in rows)
        most = most_sets(standard=standard)
        per_pass = next((n for n in (8, 4, 2) if n <= most and self._table_bytes(standard, n) <= _SHARED_BYTES), 1)
        out = xp.empty((len(rows), self.G.shape[0], 3))
        for start in range(0, len(rows), per_pass):
            part = rows[start:start + per_pass]
            self._quadratic_launch(batch_kernel_name(len(part), standard=standard), part, out[start:start + len(part)],
                                   sets_count=len(part))
        return out

    def _quadratic_batch(self, sets) -> dict:
        """:meth:`_quadratic_raw` as the S (complex) and N of :meth:`batch_moments`."""
        out = self._quadratic_raw(sets)
        return {"S": out[..., 0] + 1j * out[..., 1], "N": out[..., 2]}

    def _kernel_moments(self, values: dict, order: int) -> dict:
        """:meth:`moments` by the quadratic kernels: order 0 one set of the batch kernel, else every
        first and second derivative in one pass (``band_quad_derivatives``)."""
        xp = self.xp
        if order == 0:
            m = self._quadratic_batch([values])
            return {"S": m["S"][0], "N": m["N"][0]}
        nk = 6 if self.thick else 3
        pairs = [(i, j) for i in range(nk) for j in range(i, nk)]
        nq = self.G.shape[0]
        out = xp.empty((nq, 3 + 3 * nk + 3 * len(pairs)))
        self._quadratic_launch(f"band_quad_derivatives<{nk}>", self._quadratic_row(values), out)
        out = out.T
        first = out[3:3 + 3 * nk].reshape(nk, 3, nq)
        second = out[3 + 3 * nk:].reshape(len(pairs), 3, nq)
        Sij = xp.empty((nk, nk, nq), np.complex128)
        Nij = xp.empty((nk, nk, nq))
        i, j = np.array(pairs).T
        for a, b in ((i, j), (j, i)):
            Sij[a, b] = second[:, 0] + 1j * second[:, 1]
            Nij[a, b] = second[:, 2]
        idx = np.array([QUADRATIC_PARAMETERS.index(p) for p in self.parameters])
        return {"S": out[0] + 1j * out[1], "N": out[2], "Sp": (first[:, 0] + 1j * first[:, 1])[idx],
                "Np": first[:, 2][idx], "Sij": Sij[np.ix_(idx, idx)], "Nij": Nij[np.ix_(idx, idx)]}

    _KERNEL_COEFFICIENTS = ("C10", "C12a", "C12b", "C21a", "C21b", "C23a", "C23b", "C30")  # then C32, C34: zero

    def _batch_kernel(self, sets) -> dict:
        """:meth:`_batch_arrays` in one kernel pass over the band's G (``kernels/ssb.cu``,
        ``band_batch``): chi from its coefficients per term, no (B, nq, nbf) arrays."""
        from qora.ssb.cuda import BLOCK, complex_tag, kernel

        xp = self.xp
        table = np.zeros((len(sets), 15))
        for row, v in zip(table, sets):
            for i, name in enumerate(self._KERNEL_COEFFICIENTS):
                if name in self.aberration_names:
                    row[i] = v.get(name, 0.0)
            if self.thick:
                row[12:15] = v.get("thickness", 0.0), v.get("tilt_y", 0.0), v.get("tilt_x", 0.0)
        nq, nbf = self.G.shape
        S = xp.empty((len(sets), nq), np.complex128)
        N = xp.empty((len(sets), nq))
        kernel(f"band_batch<{complex_tag(self.G)}>")(
            (nq,), (BLOCK["ssb.cu"],), (self.G, self._k_pairs, self._qy_flat, self._qx_flat, xp.asarray(table), np.int32(len(sets)),
                            np.int32(nq),
                            np.int32(nbf), np.float64(self.lam), np.float64(self.alpha), S, N))
        return {"S": S, "N": N}

    def _batch_arrays(self, sets) -> dict:
        xp = self.xp
        c = xp.asarray(np.array([[v.get(p, 0.0) for p in self.aberration_names] for v in sets], float))
        gam = []
        for term in self.terms:
            if c.shape[1]:
                phase = xp.tensordot(c, xp.stack(term["d"]), axes=(1, 0))
            else:
                phase = xp.zeros((len(sets),) + self.G.shape)
            e = term["a"][None] * xp.exp(-1j * phase)
            if self.thick:
                e = e * xp.stack([self._depth(term, v, 0)[0] * xp.ones(self.G.shape) for v in sets])
            gam.append(e)
        gam = gam[0] - gam[1]  # (B, nq, nbf)
        return {"S": xp.sum(self.G[None] * xp.conj(gam), -1), "N": xp.sum(xp.abs(gam) ** 2, -1)}

    def uncertainties(self, agreement: float, hessian) -> dict:
        """Standard errors of the fitted parameters from the Hessian of the agreement at its maximum.

        With white complex noise of variance sigma^2 on G (Poisson counts give nearly that over
        the bright field), -log L = E / sigma^2 with E = T (1 - agreement) the energy the model
        leaves (T = sum |G|^2, Phi(Q) profiled out), so cov = sigma^2 (d2 E)^-1 =
        sigma^2 / T (-H)^-1, and sigma^2 = E / (elements - frequencies - parameters): the
        residual estimates the noise (model error counts as noise, so the errors are upper
        estimates on a sample the weak-phase model does not describe). Units: A, rad.
        """
        h = -np.asarray(hessian, float)
        nq, nbf = self.shape
        dof = max(1, nq * nbf - nq - len(self.parameters))
        sigma2 = self.total * max(1.0 - agreement, 0.0) / dof
        try:
            cov = sigma2 / self.total * np.linalg.inv(h)
        except np.linalg.LinAlgError:
            return {name: float("inf") for name in self.parameters}
        return {name: float(math.sqrt(max(cov[i, i], 0.0))) for i, name in enumerate(self.parameters)}


def _agreement_sum(raw, xp):
    """sum over Q of |S|^2 / N per set, from the kernels' (B, nq, 3) Re S, Im S, N on the device
    (``xp``: the CuPy module, as the band holds it), in one reduction launch."""
    global _AGREEMENT_SUM
    if _AGREEMENT_SUM is None:
        _AGREEMENT_SUM = xp.ReductionKernel("float64 re, float64 im, float64 n", "float64 total",
                                            "(re * re + im * im) / max(n, 1e-300)", "a + b", "total = a", "0",
                                            "qora_ssb_agreement_sum")
    return _AGREEMENT_SUM(raw[..., 0], raw[..., 1], raw[..., 2], axis=1)


_AGREEMENT_SUM = None


def make_band(session, parameters, **kwargs):
    """A :class:`Band` of ``session``, or what the session makes in its place (a session split over
    workers, :class:`qora.distributed.ssb.ShardedSession`, makes a band of the same interface)."""
    maker = getattr(session, "make_band", None)
    return maker(parameters, **kwargs) if maker is not None else Band(session, parameters, **kwargs)


def combine_moments(m: dict, total: float, order: int = 2):
    """The agreement sum_Q |S|^2 / N / total from the moments of :meth:`Band.moments` (summed over
    shards where G is split), with its gradient and Hessian for ``order`` 1 and 2."""
    xp = xp_of(m["S"])
    S, N = m["S"], xp.maximum(m["N"], 1e-300)
    P = xp.abs(S) ** 2
    value = float(xp.sum(P / N)) / total
    if order == 0:
        return value
    Sp, Np = m["Sp"], m["Np"]
    Pp = 2 * xp.real(xp.conj(S)[None] * Sp)
    grad = _to_host(xp.sum(Pp / N - P * Np / N**2, -1)) / total
    if order == 1:
        return value, grad
    # all pairs at once, (nparam, nparam, nq): a few launches however many parameters
    Pij = 2 * xp.real(xp.conj(Sp)[None] * Sp[:, None] + xp.conj(S) * m["Sij"])
    outer_p = Pp[:, None] * Np[None] + Pp[None] * Np[:, None]
    h = Pij / N - outer_p / N**2 - P * m["Nij"] / N**2 + 2 * P * Np[:, None] * Np[None] / N**3
    hessian = np.asarray(_to_host(xp.sum(h, -1)), float) / total
    return value, grad, (hessian + hessian.T) / 2


def combine_batch_moments(m: dict, total: float) -> np.ndarray:
    """The agreement of each set from :meth:`Band.batch_moments` (summed over shards)."""
    xp = xp_of(m["S"])
    return np.asarray(_to_host(xp.sum(xp.abs(m["S"]) ** 2 / xp.maximum(m["N"], 1e-300), -1))) / total


RHO = 0.1  # the least fraction of the quadratic model's predicted gain a Newton step must realise
# The largest specimen tilt (rad) a fit may reach. The depth phases are paraxial, and as the thickness
# goes to zero the tilt stops acting on the agreement at all: without a bound Newton then wanders
# along that flat direction to radians (seen on a film whose unmodelled C30 drove the thickness to
# 0.2 A). 0.1 rad is far beyond the mrad tilts the model is for (docs/ssb.md).
TILT_LIMIT = 0.1
BOUNDS = {"thickness": (0.0, math.inf), "tilt_y": (-TILT_LIMIT, TILT_LIMIT), "tilt_x": (-TILT_LIMIT, TILT_LIMIT)}


def newton(band: Band, start: dict, *, iterations: int = 20, tolerance: float = 1e-10):
    """Maximise the agreement from ``start`` by damped Newton steps with the exact Hessian.

    Returns ``(values, agreement, hessian)``. Each step solves (-H + mu D) delta = grad with D the
    magnitudes of the Hessian's diagonal (Marquardt's scaling), raising mu until the step raises
    the agreement by at least a tenth of the gain its quadratic model predicts. The scaling matters: the parameters span eight
    decades of curvature (tilt in rad against C10 and thickness in A), and a damping of mu times
    the identity, sized by the stiffest parameter, would hold the soft ones to tiny steps for many
    passes over G. Thickness and tilt keep to :data:`BOUNDS`; one held at a bound that the gradient
    pushes against leaves the step (a projected Newton step). The fit stops when the full Newton
    step predicts a gain below ``tolerance`` (relative), so converged fits spend no pass on a step
    whose change is rounding.
    """
    values = dict(start)
    names = band.parameters
    lower = np.array([BOUNDS.get(n, (-math.inf, math.inf))[0] for n in names])
    upper = np.array([BOUNDS.get(n, (-math.inf, math.inf))[1] for n in names])
    current, grad, hess = band.evaluate(values)
    mu = 1e-3
    for _ in range(iterations):
        x = np.array([values.get(n, 0.0) for n in names], float)
        free = np.flatnonzero(~(((x <= lower) & (grad < 0)) | ((x >= upper) & (grad > 0))))
        g, h = grad[free], hess[np.ix_(free, free)]
        if not len(free) or _newton_gain(g, h) <= tolerance * max(abs(current), 1e-30):
            break
        scale = np.maximum(np.abs(np.diag(h)), 1e-12 * max(np.abs(np.diag(h)).max(), 1e-300))
        improved = False
        for _ in range(30):
            step = np.zeros(len(names))
            try:
                step[free] = np.linalg.solve(-h + mu * np.diag(scale), g)
            except np.linalg.LinAlgError:  # mu D just cancels an indefinite -H: damp more
                mu *= 10
                continue
            step = np.clip(x + step, lower, upper) - x
            trial = {**values, **{n: float(v) for n, v in zip(names, x + step)}}
            value = band.evaluate(trial, order=0)
            # a step must raise the agreement, and by a tenth of what its quadratic model predicts
            # (where -H is indefinite, or a bound clipped the step, the model may predict a fall)
            predicted = float(grad @ step + 0.5 * step @ hess @ step)
            if value > current and value - current >= RHO * predicted:
                values, improved = trial, True
                mu = max(mu / 10, 1e-9)
                break
            mu *= 10
        if not improved:
            break
        previous = current
        current, grad, hess = band.evaluate(values)
        if abs(current - previous) < tolerance * max(abs(current), 1e-30):
            break
    return values, current, hess


def _newton_gain(grad, hess) -> float:
    """The agreement's increase that the full Newton step predicts, grad (-H)^-1 grad / 2 (inf where
    -H is not positive definite: no prediction, keep stepping)."""
    try:
        step = np.linalg.solve(-hess, grad)
    except np.linalg.LinAlgError:
        return math.inf
    gain = 0.5 * float(grad @ step)
    return gain if gain > 0 else math.inf


def defocus_search(band: Band, *, low: float = -500.0, high: float = 500.0, step: float = 10.0, batch: int = 8,
                   fixed: dict | None = None):
    """The C10 (A) of best agreement on a grid, evaluated ``batch`` sets per pass over G.

    The cold-start stage before :func:`newton`: the agreement's basin around the true C10 is a
    few tens of A wide, so a grid of ``step`` lands inside it. Returns ``(c10, agreements)``.
    """
    if "C10" not in band.parameters:
        raise ValueError("the band does not fit C10")
    grid = np.arange(low, high + step / 2, step)
    fixed = dict(fixed or {})
    values = np.concatenate([band.evaluate_batch([{**fixed, "C10": float(c)} for c in grid[i:i + batch]])
                             for i in range(0, len(grid), batch)])
    return float(grid[int(np.argmax(values))]), values


SEARCH_BOUNDS = {"C10": (-500.0, 500.0), "C12a": (-60.0, 60.0), "C12b": (-60.0, 60.0)}


def tpe_search(band: Band, bounds: dict | None = None, *, trials: int = 200, batch: int = 8, seed: int = 0,
               fixed: dict | None = None, startup: int | None = None, gamma: float = 0.2, candidates: int = 96):
    """A batched search in the style of the tree-structured Parzen estimator (TPE), seeded.

    ``startup`` trials (default a fifth, in whole batches) are uniform in ``bounds`` (name ->
    (low, high), default :data:`SEARCH_BOUNDS` for the band's parameters); then each pass splits
    the trials so far into the best ``gamma`` and the rest, draws ``candidates`` points from
    Gaussian kernels around the best ones, and evaluates the ``batch`` candidates with the largest
    ratio of the two kernel densities (good over rest) in one pass over G. Returns
    ``(values, agreement, trials (n, d), agreements (n,))`` with values the best trial.
    """
    if bounds is None:
        bounds = {p: SEARCH_BOUNDS[p] for p in band.parameters if p in SEARCH_BOUNDS}
    names = list(bounds)
    if not names:
        raise ValueError("nothing to search: give bounds for at least one parameter")
    unknown = [n for n in names if n not in band.parameters]
    if unknown:
        raise ValueError(f"the band does not fit {unknown}")
    if trials < batch or batch < 1:
        raise ValueError(f"need trials >= batch >= 1, got {trials} and {batch}")
    rng = np.random.default_rng(seed)
    lo = np.array([bounds[n][0] for n in names], float)
    hi = np.array([bounds[n][1] for n in names], float)
    span = hi - lo
    fixed = dict(fixed or {})
    startup = startup or max(batch, batch * round(trials / 5 / batch))
    xs, ys = [], []

    def run(points):
        ys.extend(band.evaluate_batch([{**fixed, **dict(zip(names, map(float, p)))} for p in points]))
        xs.extend(points)

    while len(xs) < min(startup, trials):
        run(lo + span * rng.random((batch, len(names))))

    def density(points, centres, width):
        # the squared distances as |a|^2 + |b|^2 - 2 a.b: one small matrix product, where the
        # (candidates, trials, d) differences took most of the search's host time per pass
        a, b = points / width, centres / width
        z2 = np.maximum((a * a).sum(1)[:, None] + (b * b).sum(1)[None] - 2.0 * (a @ b.T), 0.0)
        return np.exp(-0.5 * z2).sum(-1) / len(centres) / np.prod(width)

    while len(xs) < trials:
        x, y = np.array(xs), np.array(ys)
        order = np.argsort(-y)
        n_good = max(2, int(math.ceil(gamma * len(y))))
        good, rest = x[order[:n_good]], x[order[n_good:]]
        scale = len(names) + 4
        w_good = np.maximum(good.std(0) * n_good ** (-1 / scale), 0.01 * span)
        w_rest = np.maximum(rest.std(0) * max(len(rest), 1) ** (-1 / scale), 0.05 * span)
        pick = good[rng.integers(n_good, size=candidates)]
        cand = np.clip(pick + rng.normal(size=pick.shape) * w_good, lo, hi)
        ratio = density(cand, good, w_good) / (density(cand, rest, w_rest) + 1e-300)
        take = min(batch, trials - len(xs))
        run(cand[np.argsort(-ratio)[:take]])
    x, y = np.array(xs), np.array(ys)
    best = int(np.argmax(y))
    return {**fixed, **dict(zip(names, map(float, x[best])))}, float(y[best]), x, y


def fit_rotation(session, parameters=("C10", "C12a", "C12b"), *, band=(0.2, 0.9), coarse_deg: float = 6.0):
    """Cold-start fit with the scan rotation unknown: ``(rotation, values, agreement)``.

    The agreement does not change when the scan turns by 180 degrees (G(-Q) = conj G(Q) and
    Gamma(-Q) = -conj Gamma(Q)), so the rotation is found in [-90, 90) degrees. A coarse grid
    of ``coarse_deg`` with the C10 search at each angle picks the basin; a finer C10 search at the
    best angle, then Newton on ``parameters`` and the rotation together, with exact first and
    second derivatives in all of them (the apertures with a soft edge, :class:`Band`), refines it.
    """
    def c10_only(theta):
        b = make_band(session, ("C10",), band=band, rotation=theta)
        c10, values = defocus_search(b, step=20.0, low=-400.0, high=400.0)
        return float(values.max()), c10

    grid = np.deg2rad(np.arange(-90.0, 90.0, coarse_deg))
    scores = [c10_only(t) for t in grid]
    best = int(np.argmax([a for a, _ in scores]))
    theta0, coarse_c10 = float(grid[best]), scores[best][1]
    b = make_band(session, ("C10",), band=band, rotation=theta0)
    c10, _ = defocus_search(b, step=10.0, low=coarse_c10 - 60.0, high=coarse_c10 + 60.0)
    b = make_band(session, tuple(parameters) + ("rotation",), band=band, rotation=theta0)
    start = {p: 0.0 for p in parameters}
    start.update(C10=c10, rotation=theta0)
    values, agreement, _ = newton(b, start, iterations=60)
    theta = (values.pop("rotation") + np.pi / 2) % np.pi - np.pi / 2
    return float(theta), values, agreement


def fit_session(session, *, rotation: float | None = None, tilt: bool = True, band=(0.2, 0.9), progress=None,
                trials: int = 200, batch: int = 8, seed: int = 0, compare_standard: bool = True):
    """The standard fit (C10, C12) and, with ``tilt``, the thick-sample fit beside it.

    ``rotation`` (rad) is given or, when None, fitted (:func:`fit_rotation`). With the rotation
    given the cold start is :func:`tpe_search` over C10 and C12 (``trials`` sets, ``batch`` per
    pass over G, ``seed``), then Newton. The thick fit starts from the standard one with 60 A of
    thickness and no tilt and fits C10, C12, thickness and tilt by Newton. Returns a dict
    (JSON-ready): per branch its parameters (A, rad), agreement, the Hessian of the agreement and
    the parameters' standard errors from it (:meth:`Band.uncertainties`); the rotation; which
    branch fits better; stage timings (s) and passes over G; the conventions.
    ``compare_standard=False`` leaves the standard branch (still the thick fit's start) out of the
    result when ``tilt`` is on.
    """
    import time

    from qora.progress import report

    timings, passes = {}, {}
    t0 = time.perf_counter()
    names = ("C10", "C12a", "C12b")
    report(progress, "standard", 0, 2)
    if rotation is None:
        rotation, values, agreement = fit_rotation(session, names, band=band)
    else:
        b = make_band(session, names, band=band, rotation=rotation)
        start, _, _, _ = tpe_search(b, trials=trials, batch=batch, seed=seed)
        timings["search_s"] = time.perf_counter() - t0
        values, agreement, hessian = newton(b, start)
        passes["standard"] = getattr(b, "passes", None)  # a band split over workers does not count
    timings["standard_s"] = time.perf_counter() - t0
    fitted_rotation = "search_s" not in timings
    std_names = names + (("rotation",) if fitted_rotation else ())
    std_band = make_band(session, std_names, band=band, rotation=rotation) if fitted_rotation else b
    if fitted_rotation:
        # the Hessian in the rotation too, from the soft-edged band the rotation was fitted on; the
        # agreement reported is the top-hat one, comparable with the thick branch's
        soft_agreement, _, hessian = std_band.evaluate({**values, "rotation": rotation})
        uncertainty = std_band.uncertainties(soft_agreement, hessian)
        agreement = make_band(session, names, band=band, rotation=rotation).evaluate(values, order=0)
    else:
        uncertainty = std_band.uncertainties(agreement, hessian)
    out = {"rotation_rad": float(rotation),
           "standard": {"parameters": {k: float(v) for k, v in values.items()}, "agreement": float(agreement),
                        "hessian": np.asarray(hessian).tolist(), "parameter_order": list(std_names),
                        "uncertainty": uncertainty},
           "conventions": "Krivanek chi, defocus = -C10, cartesian C_nm,a = C cos(m phi), C_nm,b = C sin(m phi); "
                          "C10 at the mid-plane; tilt (y, x) in rad; docs/ssb.md",
           "band_inv_a": list(band)}
    if tilt:
        report(progress, "thick", 1, 2)
        t1 = time.perf_counter()
        tnames = names + ("thickness", "tilt_y", "tilt_x")
        b = make_band(session, tnames, band=band, rotation=rotation)
        tvalues, tagreement, thessian = newton(b, {**values, "thickness": 60.0, "tilt_y": 0.0, "tilt_x": 0.0},
                                               iterations=60)
        timings["thick_s"] = time.perf_counter() - t1
        passes["thick"] = getattr(b, "passes", None)
        out["thick"] = {"parameters": {k: float(v) for k, v in tvalues.items()}, "agreement": float(tagreement),
                        "hessian": np.asarray(thessian).tolist(), "parameter_order": list(tnames),
                        "uncertainty": b.uncertainties(tagreement, thessian)}
        # the simpler model unless the thick one explains measurably more (0.1% of the signal)
        out["better"] = "thick" if tagreement > agreement + 1e-3 else "standard"
        if not compare_standard:
            out.pop("standard")
    report(progress, "done", 2, 2)
    timings["total_s"] = time.perf_counter() - t0
    out["timings_s"] = timings
    out["passes"] = {k: dict(v) for k, v in passes.items() if v is not None}  # over G, per branch's band
    return out
