"""The band agreement's array code: the reference route of :class:`qora.ssb.band.Band` (its
:class:`ArrayCode` base), which evaluates Gamma's two terms and their exact derivatives as arrays
over (Q, k), and its memory model.

Where the quadratic-chi kernels do not apply (the rotation's Newton with soft apertures on the
device, chi with higher aberrations, k off a grid) the array code does, and at full scale each of
its (Q, k) arrays is 3.10 GB (44,247 frequencies x 8,765 pixels, float64). So it runs over blocks
of Q whose arrays stay within :func:`block_budget`, through row views of the band (G not copied),
the per-Q moments joined (:meth:`ArrayCode._in_blocks`); a band that fits runs in one block and
keeps its geometry between calls. docs/ssb-performance.md, section 13.
"""

from __future__ import annotations

import copy

import numpy as np

from qora.ssb.model import basis, basis_derivatives, sinc_derivatives, soft_aperture
from qora.ssb.optics import aperture

__all__ = ["ArrayCode", "block_budget", "array_pair_bytes", "batch_pair_bytes"]


def block_budget(xp, *, host: int = 64 << 20) -> int:
    """The memory (bytes) the array code gives one block of frequencies: ``host`` on the host; on the
    device a quarter of its free memory (with CuPy's free pool blocks), at most 8 GiB, 2 GiB where
    it cannot be told. A few hundred Q per block at full scale, where each block costs ~100 launches."""
    if xp is np:
        return int(host)
    try:
        free = float(xp.cuda.Device().mem_info[0]) + float(xp.get_default_memory_pool().free_bytes())
    except Exception:  # noqa: BLE001 - no figure: the fixed budget
        return 2 << 30
    return int(min(8 << 30, max(free / 4, 64 << 20)))


def array_pair_bytes(parameters: int) -> int:
    """Bytes :meth:`Band._array_moments` with derivatives holds per (Q, k) pair, an upper bound: the
    geometry of both terms (13 float64 arrays each with the rotation's derivatives) and their value,
    gradient and Hessian factors in complex128; measured (tracemalloc, 4, 5 and 7 parameters) 971,
    1228 and 1719 B, 0.76-0.84 of this."""
    return 256 * (parameters + 1)


def batch_pair_bytes(sets: int) -> int:
    """Bytes :meth:`Band._batch_arrays` holds per (Q, k) pair for ``sets`` parameter sets, an upper
    bound: the geometry (512) and per set the phase, the two terms' factors and Gamma (112); measured
    468, 816 and 2544 B for 1, 8 and 32 sets, 0.58-0.75 of this."""
    return 512 + 112 * int(sets)


class ArrayCode:
    """The array code of a :class:`qora.ssb.band.Band`: its geometry (:attr:`terms`), the per-Q
    moments of one set with derivatives (:meth:`_array_moments`) and of a batch
    (:meth:`_batch_arrays`), in blocks of Q within ``block_bytes`` (:meth:`_in_blocks`). It reads
    the band's G, frequencies (``_q_scan``, ``qy``, ``qx``, ``q_dot``), pixels (``ky``, ``kx``),
    ``lam``, ``alpha``, ``soft_edge``, ``parameters`` and ``aberration_names``."""

    def _rows(self, rows: slice) -> "ArrayCode":
        """This band on the frequencies ``rows`` (contiguous: G a view, no copy), for the array code's
        blocks; its geometry is made when first needed, at the band's current rotation."""
        out = copy.copy(self)
        out.G = self.G[rows]
        out._q_scan = tuple(q[rows] for q in self._q_scan)
        out.shape = out.G.shape
        out._geometry_for = None
        out._set_rotation(self.rotation if self._geometry_for is None else self._geometry_for)
        return out

    def _in_blocks(self, method: str, pair_bytes: int, *args) -> dict:
        """The array code's ``method`` over blocks of Q whose (Q, k) arrays (``pair_bytes`` per pair)
        stay within :attr:`block_bytes`, the per-Q outputs (Q the last axis) joined; one call where
        the band fits (its geometry then kept between calls)."""
        nq, nbf = self.shape
        rows = max(1, int(self.block_bytes // (pair_bytes * nbf)))
        if rows >= nq:
            return getattr(self, method)(*args)
        parts = [getattr(self._rows(slice(i, i + rows)), method)(*args) for i in range(0, nq, rows)]
        return {k: self.xp.concatenate([p[k] for p in parts], axis=-1) for k in parts[0]}

    @property
    def terms(self) -> list:
        """Per term of Gamma, the apertures, phase differences of the fitted aberrations and depth
        phases over (Q, k), with their rotation derivatives: what the array code evaluates from.
        The kernels need none of it, and at full scale each of these arrays is 3 GB."""
        if self._terms is None:
            self._terms = self._make_terms()
        return self._terms

    def _make_terms(self, rows=slice(None), *, rotation_derivatives: bool = True) -> list:
        """:attr:`terms` over the band's frequencies ``rows`` (a slice); without
        ``rotation_derivatives`` only the apertures ``a``, the phase differences ``d`` and the
        ``depth`` phases (what a model without the rotation needs: 2 (2 + aberrations) arrays of
        (rows, pixels) float64, where all of them are 2 (5 + 3 aberrations))."""
        lam, ky, kx = self.lam, self.ky, self.kx
        qy, qx = self.qy[rows], self.qx[rows]
        names = self.aberration_names
        if not rotation_derivatives:
            return [self._plain_term(sign, qy, qx) for sign in (-1, 1)]
        qdy, qdx = qx, -qy  # dQ/dtheta (q_dot)
        qddy, qddx = -qy, -qx
        zero = self.xp.zeros_like(qdy)
        b0 = [basis_derivatives(p, ky, kx, lam, zero, zero, zero, zero)[0] for p in names]  # B(k): no path
        terms = []
        for sign in (-1, 1):  # term 1 at k - Q, term 2 at k + Q
            ks = (ky + sign * qy, kx + sign * qx)
            path = (sign * qdy, sign * qdx, sign * qddy, sign * qddx)  # d(k +- Q)/dtheta
            if self.soft_edge is None:
                a0 = aperture(kx, ky, self.alpha * 1e3 * lam, lam)
                a = a0 * aperture(ks[1], ks[0], self.alpha * 1e3 * lam, lam)
                a_d = a_dd = None
            else:
                a0 = soft_aperture(ky, kx, self.alpha, self.soft_edge)
                a_s, a_s1, a_s2 = soft_aperture(ks[0], ks[1], self.alpha, self.soft_edge, *path)
                a, a_d, a_dd = a0 * a_s, a0 * a_s1, a0 * a_s2
            d, d_d, d_dd = [], [], []
            for p, b in zip(names, b0):
                bs, bs1, bs2 = basis_derivatives(p, ks[0], ks[1], lam, *path)
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

    def _plain_term(self, sign: int, qy, qx) -> dict:
        """One term of :meth:`_make_terms` without rotation derivatives, top-hat apertures (term 1
        at k - Q for ``sign`` -1, term 2 at k + Q for +1) over the frequencies (qy, qx) (nq, 1)."""
        lam, ky, kx = self.lam, self.ky, self.kx
        ks = (ky + sign * qy, kx + sign * qx)
        radius = self.alpha * 1e3 * lam  # aperture's semi-angle in mrad
        a = aperture(kx, ky, radius, lam) * aperture(ks[1], ks[0], radius, lam)
        d = []
        for p in self.aberration_names:
            diff = basis(p, ks[0], ks[1], lam) - basis(p, ky, kx, lam)  # B(k - Q) - B(k) for term 1
            d.append(diff if sign < 0 else -diff)  # term 2: B(k) - B(k + Q)
        k2, kq2 = ky**2 + kx**2, ks[0] ** 2 + ks[1] ** 2
        depth = np.pi * lam * ((k2 - kq2) if sign < 0 else (kq2 - k2))
        return {"a": a, "d": d, "depth": depth}

    @property
    def a1(self):
        return self.terms[0]["a"]

    @property
    def a2(self):
        return self.terms[1]["a"]

    def _depth(self, term, values, order: int):
        """The sinc depth weight s and its derivatives in the depth-related parameters present
        (thickness, tilt_y, tilt_x, rotation): (s, {name: s_i}, {(name, name): s_ij})."""
        t = values.get("thickness", 0.0)
        ty, tx = values.get("tilt_y", 0.0), values.get("tilt_x", 0.0)
        qy, qx = self.qy, self.qx
        a = term["depth"] - 2 * np.pi * (ty * qy + tx * qx)
        u = a * t / 2
        f, f1, f2 = sinc_derivatives(u)
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

    def _array_moments(self, values: dict, order: int) -> dict:
        """:meth:`moments` by the array code (the kernels' reference)."""
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
