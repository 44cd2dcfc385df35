"""The depth-incoherent thick model: an amorphous film as depth sections of independent objects.

The columnar thick model (:class:`qora.ssb.band.Band` with ``thickness``) averages the transfer
coherently over depth: exact for a specimen whose slices all hold the same projected structure.
In an amorphous film each slice holds its own object, and in the weak-phase limit

    G(Q, k) = sum_j O_j(Q) T_j(Q, k),

T_j the SSB transfer at defocus C10 + z_j. Here the thickness t is cut into M equal sections
at depths z_m = t ((m + 1/2) / M - 1/2), each with its own object Phi_m(Q) and the coherent
average of the transfer over its width t / M,

    T_m(Q, k) = sum over Gamma's two terms of  +-A A e^{-i chi-difference} e^{i a z_m} sinc(a t / 2M),

a the term's depth phase (its derivative in z). Per Q the section objects are fitted to G by
least squares with a penalty eps(Q) on their spread about their mean (a Gaussian prior: the
sections differ, by an amount the data decide):

    E(Q) = s^H K^-1 s,  s_m = sum_k conj(T_m) G,  K = N + eps P,  N_mn = sum_k conj(T_m) T_n,

P = I - 1 1^T / M the centring projector, eps(Q) = ``coupling`` times the double-overlap count
sum_k (A1^2 + A2^2) (a constant of the band). The agreement is sum_Q E(Q) / sum |G|^2, between
0 and 1. What it keeps (docs/ssb-methods.md, "Thick films: columnar or amorphous"):

- M = 1, or eps -> infinity: the columnar model (the mean of the sections' transfers is its
  coherent depth average, and P leaves the common object free); t = 0: the standard model.
- exact first and second derivatives in C10, C12a, C12b and the thickness (E is a rational
  function of the moments, differentiated in closed form below).
- the tilt is not a parameter: it shifts each section's independent object sideways, which the
  free objects absorb (not observable on an amorphous film).

The evaluation runs over blocks of Q, so the arrays of a block (its transfers with their
derivatives, and the geometry they are made of) stay within ``block_bytes``, on the band's array
module (NumPy, or CuPy for a band on the device); nothing of the size of the band's (Q, k) is held
but G's own rows. The memory model: :func:`bytes_per_row`, docs/ssb-performance.md.
"""

from __future__ import annotations

import numpy as np

from qora.ssb import depth_loops, kernels
from qora.ssb.band import Band
from qora.ssb.band_arrays import block_budget
from qora.ssb.cpu_kernels import aperture_limit
from qora.ssb.model import sinc_derivatives

__all__ = ["IncoherentBand", "bytes_per_row", "kernel_bytes_per_row", "sums_bytes", "KERNEL_BLOCK_BYTES",
           "INCOHERENT_COARSE_ROWS", "FIRST_STAGE", "FINISH_TOLERANCE", "DEPTH_MODELS", "SECTIONS", "MOST_SECTIONS", "COUPLING",
           "COHERENT",
           "section_depths", "depth_of_field", "auto_sections", "depth_coherence", "fit_incoherent", "depth_sections"]

DEPTH_MODELS = ("auto", "columnar", "incoherent")  # fit_session's depth_model
SECTIONS = 3  # the default number of depth sections where no thickness is known
MOST_SECTIONS = 8  # auto_sections' largest
COUPLING = 1e-3  # the default penalty on the sections' spread, per double-overlap pixel
# depth_model "auto" keeps the columnar model where neighbouring sections' objects correlate at
# least this much at their best lateral shift (depth_coherence: ~1 for a columnar slab, ~0 for
# independent sections; measured 0.97-0.99 and 0.15-0.24)
COHERENT = 0.5
INCOHERENT_PARAMETERS = ("C10", "C12a", "C12b", "thickness")
# the most a block of the CUDA transfers may hold, so that the incoherent fit does not raise the full-scale fit's
# pool (G 8.6 GiB, the band's rows 2.9 GiB, the thinned band) toward issue 38's 16 GiB: measured 14.3 GiB in use
# at its peak (H200, bench/probes/incoherent_cost.py), below the 19.25 GiB the standard fits reach
# (docs/ssb-performance.md)
KERNEL_BLOCK_BYTES = 2 << 30
# IncoherentBand's routes to the sums over k: the array code (the reference, host or device); on CUDA the
# transfers by a kernel into global memory, then matrix products ("kernel", the device's default); or made
# and summed in shared memory by one kernel ("fused": exact, but 2.7 times slower on the H200 as written,
# one 246-register block per SM; docs/ssb-performance.md, "The incoherent fit on the device")
TRANSFERS = ("arrays", "loops", "kernel", "fused")  # "loops": the host's Numba twin of "fused" (its default)
# fit_incoherent: Newton on the band thinned to this many frequencies, then on the whole band until a step
# predicts less than FINISH_TOLERANCE of the agreement. H200, the ssb-full film: 8192 rows and Newton's
# 1e-10 took 4.71 s, 4096 rows and 1e-8 2.57 s, C10 100.089 and 100.087 A, thickness 123.49 A both, the
# agreement equal to 7 digits (docs/ssb-performance.md)
INCOHERENT_COARSE_ROWS = 4096
# fit_incoherent's first stage: the band thinned to INCOHERENT_COARSE_ROWS / FIRST_STAGE. H200, the ssb-full
# film from the columnar values: 512 then 4096 rows 1.84 s, 1024 then 4096 1.95 s, 4096 alone 2.06 s, 512 then
# 2048 2.42 s and 1024 then 8192 2.81 s (the last two finish with two whole-band passes); every split ends at
# C10 100.087-100.095 A, thickness 123.49 A, the agreement to 8 digits (bench/probes/incoherent_stages.py)
FIRST_STAGE = 8
FINISH_TOLERANCE = 1e-8


def bytes_per_row(pixels: int, sections: int, parameters: int, aberrations: int, *, geometry: bool = True) -> int:
    """Bytes an :class:`IncoherentBand` evaluation with derivatives holds per frequency of a block:
    ``pixels`` bright-field pixels, ``sections`` M, ``parameters`` P (of which ``aberrations`` A).

    complex128 (16 B) per pixel: the transfers and their derivatives X (M L with L = 1 + P +
    P (P + 1) / 2), the derivative transfers gathered for the Hessian's products and their
    conjugate (2 M P), the transfers' conjugate (M), G's row in complex128 and its conjugate (2)
    and the transfer's temporaries (P + 9: the term's base, its phase factor, the depth factors,
    the first derivatives and one second one); float64 (8 B) per pixel: the transfer's real
    temporaries (14: depth phase, sinc and its derivatives) and, with ``geometry``, the block's
    apertures, phase differences and depth phases of both terms, 2 (2 + A), and 8 arrays made on
    the way. Not all of it is held at once (the transfer's temporaries are gone before the
    products.): an upper bound, measured 0.70-0.85 of it on the host (tests/ssb/test_ssb_depth.py).
    """
    L = 1 + parameters + parameters * (parameters + 1) // 2
    complex_arrays = sections * L + 2 * sections * parameters + sections + 2 + parameters + 9
    float_arrays = 14 + (2 * (2 + aberrations) + 8 if geometry else 0)
    return int(pixels) * (16 * complex_arrays + 8 * float_arrays)


def kernel_bytes_per_row(pixels: int, sections: int, parameters: int, itemsize: int) -> int:
    """Bytes a block of the CUDA transfers (``IncoherentBand(transfers="kernel")``) holds per frequency:
    ``itemsize`` (8 for complex64, 16 for complex128) per pixel for the transfers X (M L), G's row and
    the sections' transfers beside it with their conjugate and CuPy's contiguous copy of it (3 (1 + M)),
    and the first derivatives' conjugate and copy (2 M P)."""
    L = 1 + parameters + parameters * (parameters + 1) // 2
    return int(pixels) * int(itemsize) * (sections * L + 3 * (1 + sections) + 2 * sections * parameters)


def sums_bytes(sections: int, parameters: int) -> int:
    """Bytes per frequency of the whole band an evaluation with derivatives holds besides its block: the
    sums over k of every block (complex128: sX, AX, B; :meth:`IncoherentBand._products`) and the per-Q
    solve's temporaries (a few M^2 P), an upper bound."""
    L = 1 + parameters + parameters * (parameters + 1) // 2
    m, p = int(sections), int(parameters)
    return 16 * (L * m * (m + 1) + 2 * (p * m) ** 2 + 6 * p * m * m + 4 * m * m)


def section_depths(thickness: float, sections: int) -> np.ndarray:
    """The centres z_m (A, from the mid-plane, along the beam) of ``sections`` equal sections."""
    return thickness * ((np.arange(sections) + 0.5) / sections - 0.5)


def depth_of_field(wavelength: float, alpha_mrad: float) -> float:
    """lambda / alpha^2 (A): the depth over which the defocus phase pi lambda z k^2 at the
    aperture's edge k = alpha / lambda changes by pi, the depth scale of the SSB transfer;
    ``wavelength`` in A, ``alpha_mrad`` the convergence semi-angle."""
    return wavelength / (alpha_mrad * 1e-3) ** 2


def auto_sections(thickness: float, wavelength: float, alpha_mrad: float) -> int:
    """Sections no thicker than the depth of field: ceil(t / :func:`depth_of_field`), within
    [1, :data:`MOST_SECTIONS`]. Thinner sections are not told apart by the transfer, and the fit
    then trades the thickness against sections left empty (docs/ssb-methods.md)."""
    return int(min(MOST_SECTIONS, max(1, np.ceil(thickness / depth_of_field(wavelength, alpha_mrad) - 1e-9))))


def depth_coherence(band, objects, *, upsample: int = 4) -> float:
    """How much neighbouring depth sections hold the same object, shifted: the peak of the
    normalised cross-correlation of their objects (nq, M) over lateral shifts (on a grid
    ``upsample`` times finer than the scan's), averaged over the M - 1 neighbouring pairs.
    A columnar slab (tilted or not: a tilt shifts the sections' copies by their spacing times the
    tilt) gives about 1; independent sections (an amorphous film) about 0, the peak of noise
    (about sqrt(2 ln(shifts) / frequencies)); 1 for a single section."""
    from qora.backend.fft import ifftn

    xp = getattr(band, "xp", np)
    x = xp.asarray(objects)
    m = x.shape[1]
    if m == 1:
        return 1.0
    sy, sx = band.scan_shape
    iy, ix = np.nonzero(band.keep)
    fy, fx = upsample * sy, upsample * sx
    # the band's frequencies on the finer grid, negative ones at its end: cc(r) = Re sum_Q c(Q) e^{2 pi i Q.r}.
    # Every pair in one batched transform on the band's arrays: on the host the M - 1 transforms of (4 x 512)^2
    # took ~0.5 s of the full-scale fit, one thread each (docs/ssb-performance.md, section 16)
    rows = xp.asarray(np.where(iy > sy // 2, iy + fy - sy, iy))
    spectrum = xp.zeros((m - 1, fy, fx), np.complex128)
    spectrum[:, rows, xp.asarray(ix)] = (xp.conj(x[:, :-1]) * x[:, 1:]).T
    power = xp.sum(xp.abs(x) ** 2, axis=0)
    norm = xp.maximum(xp.sqrt(power[:-1] * power[1:]), 1e-300)
    transform = ifftn if xp is np else xp.fft.ifftn  # the host's on its threads
    peaks = xp.max(transform(spectrum, axes=(-2, -1)).real, axis=(-2, -1)) * (fy * fx) / norm
    return float(xp.mean(peaks))


def fit_incoherent(session, start: dict, *, sections: int | None = None, coupling: float = COUPLING,
                   band=(0.2, 0.9), rotation: float | None = None, iterations: int = 60, callback=None,
                   coarse_rows: int | None = None, precision: str | None = None):
    """Newton (:func:`qora.ssb.optimize.newton`) on the incoherent model from ``start`` (C10, C12a,
    C12b, thickness; A). ``sections`` default :func:`auto_sections` of the start's thickness. Newton
    runs first on the band thinned to ``coarse_rows`` / :data:`FIRST_STAGE` frequencies, then to
    ``coarse_rows`` (default :data:`INCOHERENT_COARSE_ROWS`; a stage is skipped where the band has fewer
    than twice its rows) and finishes
    on the whole band from the thinned band's maximum, until a step predicts a gain below
    :data:`FINISH_TOLERANCE` of the agreement (one or two steps), as the columnar fit's starts do.
    ``precision``: of the device's transfers (:class:`IncoherentBand`). Returns
    ``(values, agreement, hessian, band, depth_coherence)``."""
    from qora.ssb.identify import coarse_stride
    from qora.ssb.optimize import newton, newton_with_hessian

    t0 = float(start.get("thickness", 0.0))
    m = auto_sections(t0, session.wavelength, session.alpha_mrad) if sections is None else sections
    names = tuple(p for p in INCOHERENT_PARAMETERS if p in start)
    b = IncoherentBand(session, names, sections=m, coupling=coupling, band=band, rotation=rotation,
                       precision=precision)
    values = {p: float(start[p]) for p in names}
    rows = INCOHERENT_COARSE_ROWS if coarse_rows is None else coarse_rows
    # the band thinned to rows / FIRST_STAGE first (the steps from the columnar fit's values at an eighth of
    # the cost), then to rows, each stage from the one before; a stage the band is too small for is skipped
    strides = sorted({s for s in (coarse_stride(b, max(1, rows // FIRST_STAGE)), coarse_stride(b, rows)) if s > 1},
                     reverse=True)
    b.stage_passes = []  # each thinned stage's passes over its rows, for the fit's report
    hessian = None
    for i, stride in enumerate(strides):
        # a stage a finer one follows stops at the finish's tolerance: the next starts from where it ends
        early = {"tolerance": FINISH_TOLERANCE} if i + 1 < len(strides) else {}
        thin = b.thinned(stride)
        values, _, hessian = newton(thin, values, iterations=iterations, callback=callback, **early)
        b.stage_passes.append({**thin.passes, "stride": stride})
    if hessian is None:
        values, agreement, hessian = newton(b, values, iterations=iterations, callback=callback)
    else:
        # the whole band from the thinned maximum: its gradient (no second derivatives: a third of the pass) and
        # the thinned band's Hessian, the same normalised agreement's curvature sampled on every stride-th
        # frequency (docs/ssb-performance.md, section 16)
        values, agreement, hessian = newton_with_hessian(b, values, hessian, tolerance=FINISH_TOLERANCE,
                                                         iterations=iterations, callback=callback)
    return values, agreement, hessian, b, depth_coherence(b, b.section_objects(values))


class IncoherentBand(Band):
    """A :class:`Band` of the depth-incoherent thick model (module docstring): ``sections`` depth
    sections with their own objects, coupled by ``coupling``. Parameters among C10, C12a, C12b and
    thickness (A). An evaluation runs over blocks of Q: each block's section transfers X (Q, L, M, k)
    (:meth:`_transfers`), their products with G and with each other (:meth:`_products`, matrix
    products), and once for the band the per-Q solve (:meth:`_combine`).

    On the device the default (``transfers`` "kernel") makes the transfers by the CUDA kernel
    ``incoherent_transfers``, stored in ``precision`` "double" (complex128, the default: as fast as
    complex64 on the H200, where the kernel and the products run at 1-2 TB/s either way) or "single";
    ``transfers`` "fused" makes them and their sums over k in one kernel (``incoherent_sums``: a tile of
    pixels' transfers in shared memory, never stored; measured slower, :data:`TRANSFERS`). On the host
    the default (``transfers`` "loops") is that route's Numba twin (:mod:`qora.ssb.depth_loops`); with
    ``transfers`` "arrays" they come from the array code (the reference, on either: the geometry of
    apertures, phase differences and depth phases, made per block, or once for the band where it fits
    the budget). The blocks stay within ``block_bytes`` (:func:`bytes_per_row`; default
    :func:`qora.ssb.band_arrays.block_budget`, 64 MiB on the host, at most :data:`KERNEL_BLOCK_BYTES`
    for the kernel)."""

    def __init__(self, session, parameters, *, sections: int = SECTIONS, coupling: float = COUPLING,
                 band=(0.2, 0.9), rotation: float | None = None, block_bytes: int | None = None,
                 transfers: str | None = None, precision: str | None = None) -> None:
        unknown = [p for p in parameters if p not in INCOHERENT_PARAMETERS]
        if unknown:
            raise ValueError(f"the incoherent depth model fits {INCOHERENT_PARAMETERS}, not {unknown} (the tilt is "
                             "not observable on independent slices; fit the rotation first)")
        if int(sections) != sections or sections < 1:
            raise ValueError(f"sections must be a whole number >= 1, got {sections!r}")
        if not coupling > 0:
            raise ValueError(f"coupling must be > 0, got {coupling!r}")
        super().__init__(session, parameters, band=band, rotation=rotation)
        self.sections, self.coupling = int(sections), float(coupling)
        self.scan_shape = tuple(session.scan_shape)
        self.thick = True
        self.quadratic_kernels = self.rotation_kernel = False
        self.sets_per_pass = 8
        xp = self.xp
        on_cuda = getattr(xp, "__name__", "") == "cupy"
        on_host = xp is np
        # the host's loops take k's rows and columns as a grid (the values' phase tables): off a grid, the array code
        loops = on_host and self._grid is not None
        self.transfers = ("kernel" if on_cuda else "loops" if loops else "arrays") if transfers is None else transfers
        if (self.transfers not in TRANSFERS or (self.transfers in ("kernel", "fused") and not on_cuda)
                or (self.transfers == "loops" and not loops)):
            raise ValueError(f"transfers must be 'arrays', 'loops' for a band on the host whose pixels lie on a grid, "
                             f"or 'kernel' or 'fused' for a band on a CUDA device; got {transfers!r}")
        precision = "double" if precision is None else precision
        if precision not in ("single", "double") or (precision == "single" and self.transfers == "arrays"):
            raise ValueError(f"precision must be 'double', or 'single' with the kernel's transfers; got {precision!r}")
        self.precision = precision
        self._complex = np.complex64 if precision == "single" else np.complex128
        m = self.sections
        nq, nbf = self.G.shape
        P, A = len(self.parameters), len(self.aberration_names)
        kernel = self.transfers != "arrays"
        budget = block_budget(xp) if block_bytes is None else int(block_bytes)
        self.block_bytes = min(budget, KERNEL_BLOCK_BYTES) if kernel and block_bytes is None else budget
        self._limit = aperture_limit(self.alpha, self.lam)
        # the array code's geometry is kept whole where it fits the budget (small bands: made once), else
        # made per block on each evaluation (at full scale it would be 2 (2 + A) x 3 GB); the kernel needs none
        self._geometry_bytes = 16 * (2 + A) * nq * nbf
        keep_geometry = not kernel and self._geometry_bytes <= self.block_bytes
        row = (kernel_bytes_per_row(nbf, m, P, np.dtype(self._complex).itemsize) if kernel else
               bytes_per_row(nbf, m, P, A, geometry=not keep_geometry))
        whole_band = self.transfers in ("fused", "loops")  # no (Q, k) array: the whole band at once
        self.block = nq if whole_band else min(nq, max(1, int(self.block_bytes // row)))
        # a value (the transfers alone, L = 1) holds a fifteenth of a derivative pass's block per Q: the kernel's
        # value passes take blocks that much larger (H200: 385 blocks of 115 Q made a value pass 170-190 ms of
        # launches, 0.45 ms a block)
        value_row = kernel_bytes_per_row(nbf, m, 0, np.dtype(self._complex).itemsize) if kernel else row
        self.value_block = self.block if whole_band else min(nq, max(1, int(self.block_bytes // value_row)))
        self._whole_geometry = False if keep_geometry else None  # False: to be made on first use
        self.eps = self.coupling * self._double_overlap()  # (nq,) per double-overlap pixel
        # a Q beyond the disks' reach (no overlap: N = 0) gets K = I, and so objects 0
        self._empty = (self.eps == 0).astype(np.float64)
        self._centring = xp.asarray(np.eye(m) - 1.0 / m)
        self._c = section_depths(1.0, m)  # z_m / t

    _last_sums = None  # (values, s, N) of the last evaluation: section_objects' sums there

    def __getstate__(self) -> dict:
        return {**super().__getstate__(), "_last_sums": None}

    def _blocks(self, order: int = 2):
        """The slices of Q an evaluation of ``order`` runs in (:attr:`block` Q, :attr:`value_block` for values)."""
        size = self.block if order else self.value_block
        return [slice(i, i + size) for i in range(0, self.G.shape[0], size)]

    def _double_overlap(self):
        """sum_k (A1^2 + A2^2) per Q of the band (top-hat apertures: the pixels of both terms)."""
        xp = self.xp
        if self.transfers != "arrays":
            out = xp.empty(self.G.shape[0], np.float64)
            count = depth_loops.double_overlap if self.transfers == "loops" else kernels.double_overlap
            count(k=self._k_pairs, qy=self._qy_flat, qx=self._qx_flat, limit=self._limit, out=out)
            return out
        return xp.concatenate([xp.sum(t[0]["a"] ** 2 + t[1]["a"] ** 2, -1) for t in
                               (self._geometry(rows) for rows in self._blocks())])

    def thinned(self, stride: int) -> "IncoherentBand":
        """:meth:`Band.thinned`, with the per-Q coupling and the array code's geometry of the kept rows."""
        out = super().thinned(stride)
        if out is not self:
            out.eps, out._empty = self.eps[::stride], self._empty[::stride]
            out._last_sums = None
            out._whole_geometry = None if self._whole_geometry is None else False
        return out

    def _geometry(self, rows: slice) -> list:
        """Per term of Gamma, the apertures ``a``, phase differences ``d`` and depth phase ``depth``
        over the frequencies ``rows`` (:meth:`Band._make_terms` without the rotation's derivatives)."""
        if self._whole_geometry is None:
            return self._make_terms(rows, rotation_derivatives=False)
        if self._whole_geometry is False:
            self._whole_geometry = self._make_terms(rotation_derivatives=False)
        return [{"a": t["a"][rows], "d": [d[rows] for d in t["d"]], "depth": t["depth"][rows]}
                for t in self._whole_geometry]

    def _regularised(self, N, rows):
        """K = N + eps P (and I where no pixel overlaps), per Q of the block ``rows``."""
        eye = self.xp.eye(self.sections)
        return N + self.eps[rows, None, None] * self._centring + self._empty[rows, None, None] * eye

    # -- the sections' transfers and their derivatives, one block of Q -------------------------
    def _pairs(self):
        n = len(self.parameters)
        return [(i, j) for i in range(n) for j in range(i, n)]

    def _kernel_arguments(self, values: dict) -> dict:
        fitted = {p: float(values.get(p, 0.0)) for p in self.aberration_names}
        return dict(k=self._k_pairs, wavelength=self.lam, limit=self._limit,
                    coefficients=[fitted.get(p, 0.0) for p in ("C10", "C12a", "C12b")],
                    thickness=float(values.get("thickness", 0.0)), parameters=self.parameters, sections=self.sections)

    def _columns(self, order: int) -> int:
        """L: the transfer, then for ``order`` 1 or 2 its first derivatives, for ``order`` 2 the second."""
        P = len(self.parameters)
        return 1 if order == 0 else 1 + P if order == 1 else 1 + P + len(self._pairs())

    def _transfers(self, values: dict, rows: slice, order: int):
        """(b, L, M, nbf) transfers of the sections: L = 1 (T_m), then for ``order`` 1 or 2 the first
        derivatives in self.parameters and for ``order`` 2 the second of each pair i <= j (:meth:`_pairs`)."""
        if self.transfers == "arrays":
            return self._array_transfers(values, rows, order)
        xp = self.xp
        qy, qx = self._qy_flat[rows], self._qx_flat[rows]
        out = xp.empty((int(qy.size), self._columns(order), self.sections, self.G.shape[1]), self._complex)
        kernels.incoherent_transfers(qy=qy, qx=qx, order=order, out=out,
                                     **self._kernel_arguments(values))
        return out

    def _array_transfers(self, values: dict, rows: slice, order: int):
        """:meth:`_transfers` by the array code (the kernel's reference)."""
        xp = self.xp
        names = self.parameters
        t = float(values.get("thickness", 0.0))
        c = [float(values.get(p, 0.0)) for p in self.aberration_names]
        pairs = self._pairs() if order == 2 else []
        nl = self._columns(order)
        m = self.sections
        out = None
        for sign, term in zip((1.0, -1.0), self._geometry(rows)):
            d = term["d"]
            base = sign * term["a"]  # (b, nbf)
            if c:
                base = base * xp.exp(-1j * sum(ci * di for ci, di in zip(c, d)))
            a = term["depth"]
            u = a * t
            v = u / (2 * m)
            h, h1, h2 = sinc_derivatives(v)
            h1, h2 = h1 / (2 * m), h2 / (4 * m * m)
            if out is None:
                out = xp.zeros((base.shape[0], nl, m, base.shape[1]), np.complex128)
            # the derivative of each parameter's phase factor: -i d_p for an aberration
            dphase = {p: -1j * d[j] for j, p in enumerate(self.aberration_names)}
            for k in range(m):
                g = xp.exp(1j * self._c[k] * u)
                f = g * h
                out[:, 0, k] += base * f
                if order == 0:
                    continue
                f1 = (1j * self._c[k] * h + h1) * g  # df/du
                f2 = (-self._c[k] ** 2 * h + 2j * self._c[k] * h1 + h2) * g
                for i, p in enumerate(names):
                    out[:, 1 + i, k] += base * (dphase[p] * f if p in dphase else f1 * a)
                for n, (i, j) in enumerate(pairs):
                    p, q = names[i], names[j]
                    if p in dphase and q in dphase:
                        second = dphase[p] * dphase[q] * base * f
                    elif p in dphase or q in dphase:
                        second = dphase[p if p in dphase else q] * base * f1 * a
                    else:
                        second = base * f2 * a * a
                    out[:, 1 + len(names) + n, k] += second
        return out

    def _products(self, X, rows: slice, order: int):
        """The sums over k of one block's transfers X (b, L, M, nbf) (:meth:`_transfers`), in
        complex128: sX (b, L, M) = sum_k conj(X) G, AX (b, L, M, M) = sum_k conj(X_lm) T_n and, for
        ``order`` 2, B (b, P, M, P, M) = sum_k conj(T_pm) T_qn (T_p the first derivatives; the Hessian's). Each is a
        matrix product that reads X once; sum_k conj(X) Y is taken as conj(X @ conj(Y)), so no
        conjugate of X (the block's largest array) is made."""
        xp = self.xp
        b, nl, m, nbf = X.shape
        Y = xp.concatenate([self.G[rows].astype(X.dtype, copy=False)[:, None, :], X[:, 0]], axis=1)  # (b, 1 + M, k)
        Z = xp.conj(X.reshape(b, nl * m, nbf) @ xp.swapaxes(xp.conj(Y), 1, 2)).astype(np.complex128)
        Z = Z.reshape(b, nl, m, 1 + m)
        B = None
        if order == 2:
            P = len(self.parameters)
            Tp = X[:, 1:1 + P].reshape(b, P * m, nbf)
            B = xp.conj(Tp @ xp.swapaxes(xp.conj(Tp), 1, 2)).astype(np.complex128).reshape(b, P, m, P, m)
        return Z[..., 0], Z[..., 1:], B

    def _combine(self, sX, AX, B, rows: slice, order: int):
        """E(Q) of the frequencies ``rows`` from their sums (:meth:`_products`) and, for ``order`` 1 or 2,
        its gradient (P, b), for ``order`` 2 its Hessian (P, P, b) (module docstring)."""
        xp = self.xp
        K = self._regularised(AX[:, 0], rows)  # N = AX[:, 0]
        s = sX[:, 0]
        x = xp.linalg.solve(K, s[..., None])[..., 0]  # the section objects (b, M)
        E = xp.real(xp.sum(xp.conj(x) * s, -1))
        if order == 0:
            return E, None, None
        P = len(self.parameters)
        sp = xp.moveaxis(sX[:, 1:1 + P], 1, 0)  # (P, b, M)
        Ap = xp.moveaxis(AX[:, 1:1 + P], 1, 0)  # (P, b, M, M)
        Np = Ap + xp.conj(xp.swapaxes(Ap, -1, -2))
        # r_p = s_p - N_p x: E_p = 2 Re(x^H s_p) - x^H N_p x, E_pq = 2 Re(r_q^H K^-1 r_p) + 2 Re(x^H s_pq) - x^H N_pq x
        Npx = (Np @ x[None, :, :, None])[..., 0]  # (P, b, M)
        grad = 2 * xp.real(xp.sum(xp.conj(x)[None] * sp, -1)) - xp.real(xp.sum(xp.conj(x)[None] * Npx, -1))
        if order == 1:
            return E, grad, None
        r = sp - Npx
        z = xp.linalg.solve(K, xp.moveaxis(r, 0, -1))  # (b, M, P): K^-1 r_p
        rz = xp.real(xp.einsum("bmq,bmp->pqb", xp.conj(xp.moveaxis(r, 0, -1)), z))  # Re(r_q^H K^-1 r_p)
        hess = xp.empty((P, P, x.shape[0]))
        for n, (i, j) in enumerate(self._pairs()):
            spq = sX[:, 1 + P + n]
            Apq = AX[:, 1 + P + n]
            Npq = Apq + xp.conj(xp.swapaxes(Apq, -1, -2)) + B[:, i, :, j] + B[:, j, :, i]
            xNx = xp.real(xp.einsum("bm,bmn,bn->b", xp.conj(x), Npq, x))
            h = 2 * rz[i, j] + 2 * xp.real(xp.sum(xp.conj(x) * spq, -1)) - xNx
            hess[i, j] = hess[j, i] = h
        return E, grad, hess

    def _sums(self, values: dict, order: int):
        """:meth:`_products` of every block, joined over the band's Q (for ``transfers`` "fused" the
        kernel's sums over the whole band at once)."""
        if self.transfers in ("fused", "loops"):
            return self._whole_band_sums(values, order)
        parts = [self._products(self._transfers(values, rows, order), rows, order) for rows in self._blocks(order)]
        xp = self.xp
        return tuple(None if parts[0][i] is None else xp.concatenate([p[i] for p in parts]) for i in range(3))

    def _whole_band_sums(self, values: dict, order: int):
        """sX, AX, B of :meth:`_products` for the whole band at once, the transfers never stored: by the
        kernel ``incoherent_sums`` (``transfers`` "fused": made in shared memory, tile by tile) or its
        Numba twin on the host (:func:`qora.ssb.depth_loops.incoherent_sums`, "loops")."""
        if order == 0 and self.transfers == "loops":  # a value: the loop of values, one sincos for the sections
            sX, AX = self._values_sums([values])
            return sX[0][:, None], AX[0][:, None], None
        if order == 1:  # these routes make every column: the first derivatives are a slice of them
            sX, AX, _ = self._whole_band_sums(values, 2)
            P = len(self.parameters)
            return sX[:, :1 + P], AX[:, :1 + P], None
        xp = self.xp
        nq, m, P = self.G.shape[0], self.sections, len(self.parameters)
        nl = self._columns(order)
        sX = xp.empty((nq, nl, m), np.complex128)
        AX = xp.empty((nq, nl, m, m), np.complex128)
        B = xp.empty((nq, P, m, P, m), np.complex128) if order else None
        sums = depth_loops.incoherent_sums if self.transfers == "loops" else kernels.incoherent_sums
        sums(G=self.G, qy=self._qy_flat, qx=self._qx_flat, order=0 if order == 0 else 2, sX=sX, AX=AX, B=B,
             **self._kernel_arguments(values))
        return sX, AX, B

    def section_objects(self, values: dict):
        """The fitted objects of the sections, (nq, M): x = K^-1 s (G = i Phi Gamma: Phi_m = -i x_m); from the
        sums of the last evaluation where it was at ``values``, else by a pass of its own."""
        last = self._last_sums
        if last is not None and last[0] == dict(values):
            s, N = last[1], last[2]
        else:
            sX, AX, _ = self._sums(values, 0)
            s, N = sX[:, 0], AX[:, 0]
        K = self._regularised(N, slice(None))
        return self.xp.linalg.solve(K, s[..., None])[..., 0]

    # -- the Band interface ------------------------------------------------------------------------
    def evaluate(self, values: dict, *, order: int = 2):
        """Agreement (and with ``order`` 1 or 2 its gradient and Hessian in ``self.parameters``)."""
        kind = ("value", "gradient", "derivatives")[order]
        self.passes[kind] = self.passes.get(kind, 0) + 1
        sX, AX, B = self._sums(values, order)
        # the objects' sums at the values evaluated last: section_objects there needs no pass of its own
        self._last_sums = (dict(values), sX[:, 0].copy(), AX[:, 0].copy())  # copies: the pass's sums are freed
        E, g, h = self._combine(sX, AX, B, slice(None), order)
        value = float(self.xp.sum(E)) / self.total
        if order == 0:
            return value
        grad = np.asarray(_to_host(self.xp.sum(g, -1))) / self.total
        if order == 1:
            return value, grad
        hess = np.asarray(_to_host(self.xp.sum(h, -1))) / self.total
        return value, grad, (hess + hess.T) / 2

    def evaluate_batch(self, sets) -> np.ndarray:
        """The agreement of each set (a list of dicts): on the host's loops one pass over G for all
        (:func:`qora.ssb.depth_loops.incoherent_values`), elsewhere one pass each."""
        self.passes["batch"] += 1
        if self.transfers != "loops" or not sets:
            out = np.array([self.evaluate(v, order=0) for v in sets])
            self.passes["value"] -= len(out)
            return out
        sX, AX = self._values_sums(sets)
        return np.array([float(np.sum(self._combine(sX[i][:, None], AX[i][:, None], None, slice(None), 0)[0]))
                         for i in range(len(sets))]) / self.total

    def _values_sums(self, sets):
        """sX (S, nq, M) and AX (S, nq, M, M) of the value (order 0) of each set, one pass of the host's loops
        over G for all (:func:`qora.ssb.depth_loops.incoherent_values`)."""
        arguments = [self._kernel_arguments(v) for v in sets]
        nq, m = self.G.shape[0], self.sections
        sX = np.empty((len(sets), nq, m), np.complex128)
        AX = np.empty((len(sets), nq, m, m), np.complex128)
        depth_loops.incoherent_values(G=self.G, k=self._k_pairs, grid=self._grid, qy=self._qy_flat,
                                      qx=self._qx_flat, wavelength=self.lam, limit=self._limit, sections=m, sX=sX, AX=AX,
                                      coefficients=[a["coefficients"] for a in arguments],
                                      thicknesses=[a["thickness"] for a in arguments])
        return sX, AX

    def moments(self, values: dict, *, order: int = 2) -> dict:
        raise TypeError("the incoherent depth model's agreement is not a sum of per-Q moments over k (a solve per "
                        "Q): use evaluate")

    def batch_moments(self, sets) -> dict:
        raise TypeError("the incoherent depth model's agreement is not a sum of per-Q moments over k: use "
                        "evaluate_batch")

    def evaluate_rotations(self, rotations, sets):
        raise ValueError("evaluate_rotations needs a band of the standard model")


def depth_sections(session, values: dict, *, sections: int = SECTIONS, coupling: float = COUPLING,
                   rotation: float | None = None) -> np.ndarray:
    """The optical sections of a fitted incoherent thick model: the phase image (rad, scan grid) of
    each depth section's object, (M, scan rows, scan columns), the entrance surface (z < 0) first.

    ``values``: C10, C12a, C12b (A) and thickness (A), as :func:`qora.ssb.fitting.fit_session`'s
    incoherent branch returns them; ``rotation`` the scan's (rad; the session's by default). Every
    scan frequency the disks reach (0 < |Q| < 2 alpha / lambda) is fitted, with the objects of the
    model (:class:`IncoherentBand`); Q = 0 and the scan's Nyquist row and column are left out, as in
    :meth:`Session.image`. Their sum is a thick-sample image of the whole film; each alone is the
    part of the projected phase the fit puts at that depth (the depth resolution is about
    lambda / alpha^2, :func:`depth_of_field`).
    """
    from qora.backend.fft import irfftn

    if getattr(session, "pixels", None) is not None or not hasattr(session, "band_rows"):
        raise ValueError("depth sections need the whole of G on one session (not a shard or a split session)")
    reach = 2 * session.alpha_mrad * 1e-3 / session.wavelength
    names = tuple(p for p in INCOHERENT_PARAMETERS if p in values)
    band = IncoherentBand(session, names, sections=sections, coupling=coupling, band=(0.0, reach),
                          rotation=rotation)
    x = _to_host(band.section_objects(values))  # (nq, M)
    sy, sx = session.scan_shape
    spectrum = np.zeros((band.sections,) + band.keep.shape, np.complex128)
    spectrum[:, band.keep] = (x / 1j).T  # G = i Phi Gamma
    return np.asarray(irfftn(spectrum, s=(sy, sx), axes=(-2, -1)))


def _to_host(a):
    return a.get() if hasattr(a, "get") else a
