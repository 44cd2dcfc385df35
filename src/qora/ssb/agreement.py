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
is exact. The scan rotation is held fixed here.
"""

from __future__ import annotations

import math

import numpy as np

from qora.ssb.optics import KNOWN_ABERRATIONS, Aberrations, aperture

__all__ = ["ABERRATION_PARAMETERS", "THICK_PARAMETERS", "SEARCH_BOUNDS", "Band", "parameters_to_aberrations", "newton",
           "defocus_search", "tpe_search", "fit_rotation", "fit_session"]

ABERRATION_PARAMETERS = ("C10", "C12a", "C12b", "C21a", "C21b", "C23a", "C23b", "C30")
THICK_PARAMETERS = ("thickness", "tilt_y", "tilt_x")


def _basis(name: str, ky, kx, lam: float):
    """B_p(k): the chi per unit of the cartesian coefficient ``name`` (rad / A)."""
    coefficient = name.rstrip("ab") if name[-1] in "ab" else name
    n, m = KNOWN_ABERRATIONS[coefficient]
    w = lam * np.hypot(ky, kx)
    theta = np.arctan2(ky, kx)
    angular = np.sin(m * theta) if name.endswith("b") else np.cos(m * theta)
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
    small = np.abs(u) < 1e-4
    us = np.where(small, 1.0, u)
    s, c = np.sin(us), np.cos(us)
    f = np.where(small, 1 - u**2 / 6, s / us)
    d1 = np.where(small, -u / 3, (us * c - s) / us**2)
    d2 = np.where(small, -1 / 3 + u**2 / 10, -s / us - 2 * c / us**2 + 2 * s / us**3)
    return f, d1, d2


class Band:
    """The frequencies of a band and everything about them that does not depend on p.

    Built from a :class:`qora.ssb.session.Session`: the half-plane Q with band_low <= |Q| <=
    band_high (1/A) and their G, apertures, and the phase bases of every fitted parameter, for
    the scan rotation ``rotation`` (rad; the session's by default).
    """

    def __init__(self, session, parameters, *, band=(0.2, 0.9), rotation: float | None = None) -> None:
        unknown = [p for p in parameters if p not in ABERRATION_PARAMETERS + THICK_PARAMETERS]
        if unknown:
            raise ValueError(f"unknown parameters {unknown}; known: {ABERRATION_PARAMETERS + THICK_PARAMETERS}")
        self.parameters = tuple(parameters)
        self.rotation = session.rotation if rotation is None else float(rotation)
        qy, qx = session.q_half(self.rotation)
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
        self.qy, self.qx = qy[keep][:, None], qx[keep][:, None]
        self.G = session.host_G()[keep]  # (nq, nbf); the fits run on the host (issue 10 brings them to the GPU)
        self.total = float(np.sum(np.abs(self.G) ** 2))
        lam = session.wavelength
        ky, kx = session.k[:, 0][None, :], session.k[:, 1][None, :]
        a0 = aperture(kx, ky, session.alpha_mrad, lam)
        self.a1 = a0 * aperture(kx - self.qx, ky - self.qy, session.alpha_mrad, lam)
        self.a2 = a0 * aperture(kx + self.qx, ky + self.qy, session.alpha_mrad, lam)
        abers = [p for p in self.parameters if p in ABERRATION_PARAMETERS]
        self.aberration_index = [self.parameters.index(p) for p in abers]
        self.d1 = np.stack([_basis(p, ky - self.qy, kx - self.qx, lam) - _basis(p, ky, kx, lam) for p in abers]) \
            if abers else np.zeros((0,) + self.G.shape)
        self.d2 = np.stack([_basis(p, ky, kx, lam) - _basis(p, ky + self.qy, kx + self.qx, lam) for p in abers]) \
            if abers else np.zeros((0,) + self.G.shape)
        k2 = ky**2 + kx**2
        self.a1_depth = np.pi * lam * (k2 - ((ky - self.qy) ** 2 + (kx - self.qx) ** 2))
        self.a2_depth = np.pi * lam * (((ky + self.qy) ** 2 + (kx + self.qx) ** 2) - k2)
        self.thick = any(p in THICK_PARAMETERS for p in self.parameters)

    # -- one parameter set with derivatives -----------------------------------------------
    def _depth(self, depth_phase, values, order: int):
        """s, its derivatives in (thickness, tilt_y, tilt_x) (first: 3 arrays, second: 3 x 3)."""
        t = values.get("thickness", 0.0)
        ty, tx = values.get("tilt_y", 0.0), values.get("tilt_x", 0.0)
        a = depth_phase - 2 * np.pi * (ty * self.qy + tx * self.qx)
        u = a * t / 2
        f, d1, d2 = _sinc_derivatives(u)
        if order == 0:
            return f, None, None
        du = [a / 2, -np.pi * self.qy * t, -np.pi * self.qx * t]  # du / d(thickness, tilt_y, tilt_x)
        first = [d1 * g for g in du]
        cross = {(0, 1): -np.pi * self.qy, (0, 2): -np.pi * self.qx}
        second = [[d2 * du[i] * du[j] + (d1 * cross.get((min(i, j), max(i, j)), 0.0)) for j in range(3)]
                  for i in range(3)]
        return f, first, second

    def evaluate(self, values: dict, *, order: int = 2):
        """Agreement (and with ``order`` 1 or 2 its gradient and Hessian in ``self.parameters``)."""
        c = np.array([values.get(self.parameters[i], 0.0) for i in self.aberration_index])
        nparam = len(self.parameters)
        terms = []
        for a_ap, d, depth in ((self.a1, self.d1, self.a1_depth), (self.a2, self.d2, self.a2_depth)):
            e = a_ap * np.exp(-1j * np.tensordot(c, d, axes=(0, 0))) if len(c) else a_ap.astype(complex)
            s, s1, s2 = self._depth(depth, values, order) if self.thick else (1.0, None, None)
            term = e * s
            grads = hess = None
            if order >= 1:
                grads = [None] * nparam
                for j, i in enumerate(self.aberration_index):
                    grads[i] = -1j * d[j] * term
                for ti, name in enumerate(THICK_PARAMETERS):
                    if name in self.parameters:
                        grads[self.parameters.index(name)] = e * s1[ti]
            if order >= 2:
                hess = [[None] * nparam for _ in range(nparam)]
                for pi_, pname in enumerate(self.parameters):
                    for qi, qname in enumerate(self.parameters):
                        ep = -1j * d[self.aberration_index.index(pi_)] if pi_ in self.aberration_index else None
                        eq = -1j * d[self.aberration_index.index(qi)] if qi in self.aberration_index else None
                        tp = THICK_PARAMETERS.index(pname) if pname in THICK_PARAMETERS else None
                        tq = THICK_PARAMETERS.index(qname) if qname in THICK_PARAMETERS else None
                        h = 0
                        if ep is not None and eq is not None:
                            h = h + ep * eq * s
                        if ep is not None and tq is not None:
                            h = h + ep * s1[tq]
                        if eq is not None and tp is not None:
                            h = h + eq * s1[tp]
                        if tp is not None and tq is not None:
                            h = h + s2[tp][tq]
                        hess[pi_][qi] = e * h
            terms.append((term, grads, hess))
        (t1, g1, h1), (t2, g2, h2) = terms
        gam = t1 - t2
        G = self.G
        S = np.sum(G * np.conj(gam), -1)
        N = np.sum(np.abs(gam) ** 2, -1)
        N = np.maximum(N, 1e-300)
        P = np.abs(S) ** 2
        value = float(np.sum(P / N)) / self.total
        if order == 0:
            return value
        gp = [g1[i] - g2[i] for i in range(nparam)]
        Sp = [np.sum(G * np.conj(g), -1) for g in gp]
        Np = [2 * np.real(np.sum(np.conj(gam) * g, -1)) for g in gp]
        Pp = [2 * np.real(np.conj(S) * s) for s in Sp]
        grad = np.array([np.sum(Pp[i] / N - P * Np[i] / N**2) for i in range(nparam)]) / self.total
        if order == 1:
            return value, grad
        hessian = np.empty((nparam, nparam))
        for i in range(nparam):
            for j in range(i, nparam):
                gij = h1[i][j] - h2[i][j]
                Sij = np.sum(G * np.conj(gij), -1)
                Nij = 2 * np.real(np.sum(np.conj(gp[j]) * gp[i] + np.conj(gam) * gij, -1))
                Pij = 2 * np.real(np.conj(Sp[j]) * Sp[i] + np.conj(S) * Sij)
                hij = (Pij / N - Pp[i] * Np[j] / N**2 - Pp[j] * Np[i] / N**2 - P * Nij / N**2
                       + 2 * P * Np[i] * Np[j] / N**3)
                hessian[i, j] = hessian[j, i] = np.sum(hij) / self.total
        return value, grad, hessian

    def evaluate_batch(self, sets) -> np.ndarray:
        """Agreement of several parameter sets (a list of dicts) in one pass over G."""
        sets = list(sets)
        c = np.array([[s.get(self.parameters[i], 0.0) for i in self.aberration_index] for s in sets])
        out = np.empty(len(sets))
        gam = []
        for a_ap, d, depth in ((self.a1, self.d1, self.a1_depth), (self.a2, self.d2, self.a2_depth)):
            phase = np.tensordot(c, d, axes=(1, 0)) if c.shape[1] else np.zeros((len(sets),) + self.G.shape)
            e = a_ap[None] * np.exp(-1j * phase)
            if self.thick:
                e = e * np.stack([self._depth(depth, s, 0)[0] * np.ones(self.G.shape) for s in sets])
            gam.append(e)
        gam = gam[0] - gam[1]  # (B, nq, nbf)
        S = np.sum(self.G[None] * np.conj(gam), -1)
        N = np.maximum(np.sum(np.abs(gam) ** 2, -1), 1e-300)
        out[:] = np.sum(np.abs(S) ** 2 / N, -1) / self.total
        return out

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
        nq, nbf = self.G.shape
        dof = max(1, nq * nbf - nq - len(self.parameters))
        sigma2 = self.total * max(1.0 - agreement, 0.0) / dof
        try:
            cov = sigma2 / self.total * np.linalg.inv(h)
        except np.linalg.LinAlgError:
            return {name: float("inf") for name in self.parameters}
        return {name: float(math.sqrt(max(cov[i, i], 0.0))) for i, name in enumerate(self.parameters)}


def newton(band: Band, start: dict, *, iterations: int = 20, tolerance: float = 1e-10):
    """Maximise the agreement from ``start`` by damped Newton steps with the exact Hessian.

    Returns ``(values, agreement, hessian)``. Each step solves (-H + mu I) delta = grad,
    raising mu until the agreement increases (Levenberg-Marquardt on the negative Hessian).
    """
    values = dict(start)
    names = band.parameters
    current, grad, hess = band.evaluate(values)
    mu = 1e-3 * max(1e-30, float(np.max(np.abs(np.diag(hess)))))
    for _ in range(iterations):
        improved = False
        for _ in range(30):
            delta = np.linalg.solve(-hess + mu * np.eye(len(names)), grad)
            trial = {**values, **{n: values.get(n, 0.0) + float(d) for n, d in zip(names, delta)}}
            if "thickness" in trial:
                trial["thickness"] = max(trial["thickness"], 0.0)
            value = band.evaluate(trial, order=0)
            if value > current:
                values, improved = trial, True
                mu = max(mu / 3, 1e-12 * abs(hess).max())
                break
            mu *= 4
        if not improved:
            break
        previous = current
        current, grad, hess = band.evaluate(values)
        if abs(current - previous) < tolerance * max(abs(current), 1e-30):
            break
    return values, current, hess



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
        z = (points[:, None, :] - centres[None, :, :]) / width
        return np.exp(-0.5 * (z**2).sum(-1)).sum(-1) / len(centres) / np.prod(width)

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


def fit_rotation(session, parameters=("C10", "C12a", "C12b"), *, band=(0.2, 0.9), coarse_deg: float = 6.0,
                 tolerance_deg: float = 0.1):
    """Cold-start fit with the scan rotation unknown: ``(rotation, values, agreement)``.

    The agreement does not change when the scan turns by 180 degrees (G(-Q) = conj G(Q) and
    Gamma(-Q) = -conj Gamma(Q)), so the rotation is found in [-90, 90) degrees. A coarse grid
    of ``coarse_deg`` with the C10 search at each angle picks the basin; a golden-section search
    on the rotation, with a C10 search around the coarse one and Newton on ``parameters`` at
    each angle, refines it to ``tolerance_deg``. The rotation has no exact derivative here (the top-hat aperture makes
    the agreement piecewise constant in it at the pixel level).
    """
    def c10_only(theta):
        b = Band(session, ("C10",), band=band, rotation=theta)
        c10, values = defocus_search(b, step=20.0, low=-400.0, high=400.0)
        return float(values.max()), c10

    grid = np.deg2rad(np.arange(-90.0, 90.0, coarse_deg))
    scores = [c10_only(t) for t in grid]
    best = int(np.argmax([a for a, _ in scores]))

    coarse_c10 = scores[best][1]

    def full(theta):
        b = Band(session, parameters, band=band, rotation=theta)
        c10, _ = defocus_search(b, step=10.0, low=coarse_c10 - 60.0, high=coarse_c10 + 60.0)
        start = {p: 0.0 for p in parameters}
        start["C10"] = c10
        values, agreement, _ = newton(b, start)
        return agreement, values

    lo, hi = grid[best] - np.deg2rad(coarse_deg), grid[best] + np.deg2rad(coarse_deg)
    golden = (math.sqrt(5) - 1) / 2
    x1, x2 = hi - golden * (hi - lo), lo + golden * (hi - lo)
    f1, f2 = full(x1), full(x2)
    while hi - lo > np.deg2rad(tolerance_deg):
        if f1[0] > f2[0]:
            hi, x2, f2 = x2, x1, f1
            x1 = hi - golden * (hi - lo)
            f1 = full(x1)
        else:
            lo, x1, f1 = x1, x2, f2
            x2 = lo + golden * (hi - lo)
            f2 = full(x2)
    theta, (agreement, values) = (x1, f1) if f1[0] > f2[0] else (x2, f2)
    theta = (theta + np.pi / 2) % np.pi - np.pi / 2
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
    branch fits better; stage timings (s); the conventions. ``compare_standard=False`` leaves the
    standard branch (still the thick fit's start) out of the result when ``tilt`` is on.
    """
    import time

    from qora.progress import report

    timings = {}
    t0 = time.perf_counter()
    names = ("C10", "C12a", "C12b")
    report(progress, "standard", 0, 2)
    if rotation is None:
        rotation, values, agreement = fit_rotation(session, names, band=band)
        hessian = Band(session, names, band=band, rotation=rotation).evaluate(values)[2]
    else:
        b = Band(session, names, band=band, rotation=rotation)
        start, _, _, _ = tpe_search(b, trials=trials, batch=batch, seed=seed)
        timings["search_s"] = time.perf_counter() - t0
        values, agreement, hessian = newton(b, start)
    timings["standard_s"] = time.perf_counter() - t0
    std_band = Band(session, names, band=band, rotation=rotation)
    out = {"rotation_rad": float(rotation),
           "standard": {"parameters": {k: float(v) for k, v in values.items()}, "agreement": float(agreement),
                        "hessian": np.asarray(hessian).tolist(), "parameter_order": list(names),
                        "uncertainty": std_band.uncertainties(agreement, hessian)},
           "conventions": "Krivanek chi, defocus = -C10, cartesian C_nm,a = C cos(m phi), C_nm,b = C sin(m phi); "
                          "C10 at the mid-plane; tilt (y, x) in rad; docs/ssb.md",
           "band_inv_a": list(band)}
    if tilt:
        report(progress, "thick", 1, 2)
        t1 = time.perf_counter()
        tnames = names + ("thickness", "tilt_y", "tilt_x")
        b = Band(session, tnames, band=band, rotation=rotation)
        tvalues, tagreement, thessian = newton(b, {**values, "thickness": 60.0, "tilt_y": 0.0, "tilt_x": 0.0},
                                               iterations=60)
        timings["thick_s"] = time.perf_counter() - t1
        out["thick"] = {"parameters": {k: float(v) for k, v in tvalues.items()}, "agreement": float(tagreement),
                        "hessian": np.asarray(thessian).tolist(), "parameter_order": list(tnames),
                        "uncertainty": b.uncertainties(tagreement, thessian)}
        # the simpler model unless the thick one explains measurably more (0.1% of the signal)
        out["better"] = "thick" if tagreement > agreement + 1e-3 else "standard"
        if not compare_standard:
            out.pop("standard")
    report(progress, "done", 2, 2)
    out["timings_s"] = timings
    return out
