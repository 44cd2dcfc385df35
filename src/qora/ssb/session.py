"""From 4D-STEM data to G(Q, k), prepared once, and the images it gives.

Conventions (docs/ssb.md): data axes (scan_row, scan_col, det_row, det_col);
G(Q, k) = sum_R I(R, k) exp(-2 pi i Q.R), the forward FFT over the scan axes of the
bright-field pixels' intensities (normalised to 1 in the bright field), kept on the half plane
Q_col >= 0 since the data are real. For a weak phase object phi with spectrum Phi,

    G(Q, k) = |psi(k)|^2 delta(Q) + i Phi(Q) Gamma(Q, k),
    Gamma(Q, k) = conj(psi(k)) psi(k - Q) - psi(k) conj(psi(k + Q)),   psi = A exp(-i chi).

Units: A, 1/A, mrad, kV, rad. The image methods run array code (NumPy or CuPy) or, where G is on
the device, the launchers of :mod:`qora.ssb.kernels`: :meth:`Session._pick` is the one place that
chooses. The fits' band of G is cached here (:meth:`Session.band_rows`).
"""

from __future__ import annotations

import time

import numpy as np

from qora.backend.device import PeakMemory
from qora.backend.fft import ifftn, irfftn, rfftn
from qora.io.errors import InputError
from qora.io.validate import integer, positive
from qora.ssb import image_loops, kernels
from qora.ssb.com import icom_image
from qora.ssb.obf import obf_transfer
from qora.ssb.parallax import parallax_upsampled
from qora.ssb.wdd import wdd_image
from qora.ssb.band_cache import BandCache
from qora.ssb.detector import (DetectorFit, bright_field_pixels, check_data, check_level, check_settings,
                               fit_detector, gather, scan_frequencies, unresolved_out)
from qora.ssb.model import chi_coefficients, parameters_to_aberrations, quadratic_tag
from qora.ssb.optics import Aberrations, aperture, chi, chi_gradient, wavelength
from qora.ssb.orientation import reorient
from qora.ssb.timing import Clock as _Clock

__all__ = ["Session", "IMAGE_METHODS", "PREVIEW_METHODS"]

IMAGE_METHODS = ("ssb", "thick", "parallax", "icom", "obf", "wdd")  # Session.image's methods
PREVIEW_METHODS = ("ssb", "obf", "wdd", "icom", "parallax")  # Session.preview's (the viewer's switch, live's methods)


class Session(BandCache):
    """The bright field and its half-plane G(Q, k), prepared once for many images.

    Parameters
    ----------
    data : ndarray (scan_row, scan_col, det_row, det_col)
        May be memory-mapped: it is read one chunk of bright-field pixels at a time.
    kv : float
        Accelerating voltage (kV).
    alpha_mrad : float
        Convergence semi-angle (mrad).
    scan_step : float or (float, float)
        Scan step (A): one number for a square grid, or (step_y, step_x), the steps along the
        scan's rows and columns where they differ (docs/ssb.md, "Anisotropic scan steps").
    rotation : float
        Scan rotation (rad): the angle from the detector's axes to the scan's.
    detector : DetectorFit, optional
        The bright-field disk; fitted from the data when not given.
    chunk : int
        Bright-field pixels transformed (and, where G does not fit the device, streamed) at a time.
    backend : {"auto", "cpu", "cuda"}
        Where G is computed and the images are made; "auto" (the default, as everywhere in Qora) is CUDA
        where CuPy sees a GPU, else the CPU.
    precision : {"auto", "single", "double"}
        G as complex64 or complex128; "auto" takes complex64 on CUDA (half the memory and reads:
        G of a 512^2 scan with 8,800 bright-field pixels is 9.3 GB) and complex128 on the CPU.
        On CUDA G is then computed on the device from the data streamed in scan rows.
    max_bytes : int, optional
        On CUDA, the most G may take on the device (default half the free device memory). A
        larger G stays in host memory and every image streams it to the device in chunks of k.
    pixels : slice, optional
        Only these bright-field pixels (a slice of the list, in its order): a shard of G, as
        ``qora.distributed`` splits it over workers; images need the whole list.
    level : float, optional
        The mean count of a bright-field pixel that G is normalised by (default: measured over the
        session's pixels); shards take the whole bright field's, so that their G add up.
    """

    def __init__(self, data, *, kv: float, alpha_mrad: float, scan_step, rotation: float = 0.0,
                 detector: DetectorFit | None = None, chunk: int = 512, backend="auto",
                 max_bytes: int | None = None, pixels: slice | None = None, level: float | None = None,
                 precision: str = "auto") -> None:
        from qora.backend import resolve

        t0 = time.perf_counter()
        kv, alpha_mrad, scan_step, rotation = check_settings(kv, alpha_mrad, scan_step, rotation)
        chunk = integer("chunk", chunk, low=1)
        if level is not None:
            level = positive("level", level)
        if detector is not None and not isinstance(detector, DetectorFit):
            raise InputError(f"detector must be a DetectorFit, got {type(detector).__name__}")
        data = check_data(data)
        self.backend = resolve(backend)
        xp = self.xp = self.backend.xp
        self.kv, self.alpha_mrad, self.scan_step, self.rotation = kv, alpha_mrad, scan_step, rotation
        self.wavelength = wavelength(kv)
        self.detector = detector or fit_detector(data, alpha_mrad)
        self.detector.check_frame(data.shape[2:])
        self.scan_shape = data.shape[:2]
        self.chunk = int(chunk)
        self.bf_index, self.k = bright_field_pixels(data.shape[2:], self.detector, self.alpha_mrad, self.kv)
        if not len(self.bf_index):
            raise InputError(f"no detector pixel lies inside the bright-field disk ({self.detector.described()}, "
                             f"alpha_mrad {alpha_mrad:g})")
        self.bf_count = len(self.bf_index)  # of the whole bright field, also in a shard
        if pixels is not None:
            self.bf_index, self.k = self.bf_index[pixels], self.k[pixels]
            if not len(self.bf_index):
                raise ValueError(f"pixels {pixels} selects no bright-field pixel (of {self.bf_count})")
        self.pixels = pixels
        self._k = xp.asarray(self.k)  # where the images are made
        if precision not in ("auto", "single", "double"):
            raise ValueError(f"precision must be 'auto', 'single' or 'double', got {precision!r}")
        single = precision == "single" or (precision == "auto" and self.backend.is_cuda)
        dtype = np.complex64 if single else np.complex128
        pixels = np.unravel_index(self.bf_index, data.shape[2:])  # gathered as (rows, cols): no reshape of
        sy, sx = self.scan_shape
        shape = (sy, sx // 2 + 1, len(self.bf_index))
        nbytes = np.dtype(dtype).itemsize * int(np.prod(shape))
        on_device = True
        if self.backend.is_cuda:
            budget = max_bytes if max_bytes is not None else xp.cuda.Device().mem_info[0] // 2
            on_device = nbytes <= budget
        with PeakMemory(self.backend) as peak:
            if self.backend.is_cuda and on_device:
                from qora.ssb.stream import g_on_device  # CuPy's streams: only where G is made on the device

                self.G, level, bright = g_on_device(data, pixels, dtype, level)
            else:
                if level is None:
                    level = float(np.asarray(gather(data, pixels).mean(dtype=np.float64)))  # a memory-mapped array
                check_level(level, data)
                self.G = (xp if on_device else np).empty(shape, dtype)
                for start in range(0, len(self.bf_index), self.chunk):
                    part = (pixels[0][start:start + self.chunk], pixels[1][start:start + self.chunk])
                    block = xp.asarray(np.asarray(gather(data, part), np.float64) / level)
                    spec = rfftn(block, axes=(0, 1)).astype(dtype, copy=False)
                    self.G[..., start:start + len(part[0])] = spec if on_device else self.backend.to_host(spec)
                    del block, spec
                bright = np.asarray(gather(data, pixels).sum(-1, dtype=np.float64))
        self.level = float(level)
        self.bright_field = bright / self.level
        self.timings = {"prepare_s": time.perf_counter() - t0}
        self.memory = {"G_bytes": nbytes, "G_on": "device" if (self.backend.is_cuda and on_device) else "host",
                       "prepare_peak_bytes": peak.peak_bytes}

    # -- geometry -----------------------------------------------------------------------
    @property
    def nbytes(self) -> int:
        return self.G.nbytes

    def _chunks(self, size: int | None = None):
        """(slice of the pixel list, G of those pixels where the images are made), ``size`` (default
        ``chunk``) pixels at a time."""
        size = size or self.chunk
        for start in range(0, len(self.bf_index), size):
            ks = slice(start, start + size)
            yield ks, self.xp.asarray(self.G[..., ks])

    def __copy__(self) -> "Session":
        # a shallow copy shares everything, the band cache included (copy.copy would go through
        # __getstate__, which leaves the cache behind for pickling: every reoriented copy a fit made
        # gathered its own 2.9 GiB band at full scale)
        out = object.__new__(type(self))
        out.__dict__.update(self.__dict__)
        return out

    def __getstate__(self) -> dict:
        # the backend (a module and its locks) travels by name: a session can move between Dask
        # workers; its arrays are copied as they are (CuPy's pickle goes through the host)
        state = dict(self.__dict__)
        state["backend"] = self.backend.name
        state.pop("xp")
        state.pop("_band_cache", None)  # the fits' band of G (3 GB at full scale): remade where needed
        return state

    def __setstate__(self, state: dict) -> None:
        from qora.backend import resolve

        self.__dict__.update(state)
        self.backend = resolve(state["backend"])
        self.xp = self.backend.xp

    orientation = "identity"  # the detector's relabelling (qora.ssb.orientation.reorient: copies with another)

    def _whole(self, what: str) -> None:
        if self.pixels is not None:
            raise ValueError(f"{what} need every bright-field pixel; this session holds the shard {self.pixels} "
                             f"of {self.bf_count} (qora.distributed fits on shards, then images on the whole)")

    def host_G(self) -> np.ndarray:
        """G(Q, k) as a host array."""
        return self.backend.to_host(self.G)

    def q_half(self, rotation: float | None = None):
        """(Qy, Qx) (1/A) of the half plane, in the detector's axes (the scan rotated by
        ``rotation`` rad, the session's by default); host arrays."""
        return self._q(rotation, half=True, xp=np)

    def _q(self, rotation=None, *, half: bool, xp=None):
        return scan_frequencies(self.scan_shape, self.scan_step, self.rotation if rotation is None else rotation,
                                half=half, xp=xp or self.xp)

    def _psi(self, ky, kx, aberrations):
        lam = self.wavelength
        return aperture(kx, ky, self.alpha_mrad, lam) * self.xp.exp(-1j * chi(kx, ky, aberrations, lam))

    def gamma(self, aberrations: Aberrations, qy, qx, *, thickness: float = 0.0, tilt=(0.0, 0.0), pixels=slice(None)):
        """Gamma(Q, k) for Q (...) against the bright-field k: (..., nbf), on the session's backend.

        With ``thickness`` t (A) and ``tilt`` (tau_y, tau_x) (rad), the thick-sample model: a
        slice at depth z from the mid-plane sees C10 + z and is shifted by z tau, so each term
        of Gamma gathers the phase z a, a = pi lambda (|k_out|^2 - |k_in|^2) - 2 pi tau.Q, and
        the average over the slab weighs it by sinc(a t / 2) = sin(a t / 2) / (a t / 2).
        ``pixels`` selects bright-field pixels (an index or slice into the list).
        """
        xp = self.xp
        ky, kx = self._k[pixels, 0], self._k[pixels, 1]
        qy, qx = xp.asarray(qy)[..., None], xp.asarray(qx)[..., None]
        p = self._psi(ky, kx, aberrations)
        first = xp.conj(p) * self._psi(ky - qy, kx - qx, aberrations)
        second = p * xp.conj(self._psi(ky + qy, kx + qx, aberrations))
        if thickness:
            lam, k2 = self.wavelength, ky**2 + kx**2
            tilt_phase = 2 * np.pi * (tilt[0] * qy + tilt[1] * qx)
            a1 = np.pi * lam * (k2 - ((ky - qy) ** 2 + (kx - qx) ** 2)) - tilt_phase
            a2 = np.pi * lam * (((ky + qy) ** 2 + (kx + qx) ** 2) - k2) - tilt_phase
            first = first * xp.sinc(a1 * thickness / (2 * np.pi))  # sinc(x) = sin(pi x) / (pi x)
            second = second * xp.sinc(a2 * thickness / (2 * np.pi))
        return first - second

    def double_overlap(self, qy, qx, pixels=slice(None)):
        """Bright-field pixels where exactly one of the disks shifted by +-Q overlaps: (..., nbf)."""
        xp = self.xp
        limit = self.alpha_mrad * 1e-3 / self.wavelength
        ky, kx = self._k[pixels, 0], self._k[pixels, 1]
        qy, qx = xp.asarray(qy)[..., None], xp.asarray(qx)[..., None]
        minus = xp.hypot(ky - qy, kx - qx) <= limit
        plus = xp.hypot(ky + qy, kx + qx) <= limit
        return minus ^ plus

    # -- images -------------------------------------------------------------------------
    def image(self, aberrations: Aberrations | None = None, method: str = "ssb", *, thickness: float = 0.0,
              tilt=(0.0, 0.0), upsample: int = 1, rows: int = 16, timings: dict | None = None,
              epsilon: float | None = None, progress=None) -> np.ndarray:
        """The phase image (rad, scan grid; a host array) for the given aberrations by ``method``:
        "ssb" (single side band over the double-overlap pixels), "thick" (SSB with the thick-sample Gamma of
        ``thickness`` (A) and specimen ``tilt`` (tau_y, tau_x) rad; C10 is the mid-plane's), "parallax" (tcBF:
        the bright-field images shifted by grad chi / 2 pi, summed, and phase-flipped by sign(sin chi(Q))),
        "icom" (the integrated centre of mass, :mod:`qora.ssb.com`: no aberrations), "obf" (optimum bright
        field, :mod:`qora.ssb.obf`) or "wdd" (Wigner distribution deconvolution, :mod:`qora.ssb.wdd`: the object's
        phase with no weak-phase assumption; ``epsilon`` its regularisation, by default from the data's dose;
        ``progress`` is told its frequencies done). Q = 0 and the scan's Nyquist row and column are left out. ``upsample``
        (parallax only): the image on a grid that many times finer (:func:`qora.ssb.parallax.parallax_upsampled`).
        ``timings``: a dict that receives the time (ms) of the sums over the bright field ("sums"),
        the inverse FFT ("fft") and the copy to the host ("copy"), each waited for on the device
        (for profiling: the waits cost a little)."""
        self._whole("images")
        aberrations = aberrations or Aberrations()
        if method not in IMAGE_METHODS:
            raise ValueError(f"method must be one of {', '.join(map(repr, IMAGE_METHODS))}, got {method!r}")
        if method == "thick" and not thickness >= 0:
            raise ValueError(f"thickness must be non-negative (A), got {thickness}")
        if method != "thick" and (thickness or any(tilt)):
            raise ValueError("thickness and tilt belong to method='thick'")
        if epsilon is not None and method != "wdd":
            raise ValueError("epsilon belongs to method='wdd'")
        if method == "icom" and upsample == 1:  # sums of their own (qora.ssb.com, qora.ssb.wdd)
            return icom_image(self, aberrations)
        if method == "wdd" and upsample == 1:
            return wdd_image(self, aberrations, epsilon=epsilon, progress=progress)
        if upsample != 1:
            if method != "parallax" or int(upsample) != upsample or upsample < 1:
                raise ValueError(f"upsample must be a positive integer, and above 1 only for parallax, got {upsample}")
            return parallax_upsampled(self, aberrations, int(upsample), timings)
        clock = _Clock(self.backend, timings)
        xp = self.xp
        qy, qx = self._q(half=True)
        numerator = xp.zeros(qy.shape, np.complex128)
        norm = xp.zeros(qy.shape)
        flip = xp.sign(xp.sin(chi(qx, qy, aberrations, self.wavelength)))
        # the sums over the bright field: a kernel for SSB (G on the device) or its Numba twin, else the array code
        sums = self._pick(self._sums_arrays, self._sums_kernel, fits=method != "parallax", host=self._sums_loops)
        sums(aberrations, method, qy, qx, thickness, tilt, rows, numerator, norm)
        norm = obf_transfer(norm) if method == "obf" else norm  # qora.ssb.obf: the transfer T, scaled by max T
        if method == "parallax":
            spectrum = flip * numerator / (2 * len(self.bf_index))
        elif not bool(xp.any(norm > 0)):  # every Q's sum empty: the image would be 0 everywhere
            raise InputError("no scan frequency has a detector pixel where the two disks overlap singly, so SSB has "
                             f"nothing to image: the scan's frequencies (1 / (scan step x scan size), step "
                             f"{self.scan_step} A) are too fine for the detector's pixels; check the scan step "
                             "(--scan-step) and the calibration")
        else:
            spectrum = xp.where(norm > 0, numerator / (1j * xp.where(norm > 0, norm, 1)), 0)
        spectrum[0, 0] = 0
        unresolved_out(spectrum, self.scan_shape)
        clock.lap("sums")
        image = irfftn(spectrum, s=self.scan_shape, axes=(-2, -1))
        clock.lap("fft")
        image = self.backend.to_host(image)
        clock.lap("copy")
        return image

    def _pick(self, arrays, kernel, *, fits: bool = True, host=None):
        """The one seam between the array code and the kernels: ``kernel`` (a method that calls the
        launchers of :mod:`qora.ssb.kernels`) where G is on the device and the kernel covers the
        case (``fits``); ``host`` (its Numba twin, where there is one) where G is on the host and it covers
        the case; else ``arrays`` (the array code on the session's xp, the reference the launchers' and the
        twins' docstrings name). All take the same arguments."""
        if fits and self._fused:
            return kernel
        return host if (fits and host is not None and self.xp is np) else arrays

    def _sums_arrays(self, aberrations: Aberrations, method: str, qy, qx, thickness: float, tilt, rows: int,
                     numerator, norm) -> None:
        """:meth:`image`'s sums over the bright field by the array code: chunks of pixels, ``rows`` Q rows each."""
        xp = self.xp
        for ks, g_all in self._chunks():
            if method == "parallax":
                gx, gy = chi_gradient(self._k[ks, 1], self._k[ks, 0], aberrations, self.wavelength)
            for r0 in range(0, qy.shape[0], rows):
                sl = slice(r0, r0 + rows)
                g = g_all[sl]
                if method != "parallax":
                    gam = self.gamma(aberrations, qy[sl], qx[sl], thickness=thickness, tilt=tilt, pixels=ks)
                if method == "obf":
                    numerator[sl] += (g * xp.conj(gam)).sum(-1)
                    norm[sl] += (gam.real**2 + gam.imag**2).sum(-1)
                elif method in ("ssb", "thick"):
                    mag = xp.abs(gam)
                    use = self.double_overlap(qy[sl], qx[sl], ks) & (mag > 1e-12)
                    weight = xp.where(use, xp.conj(gam) / xp.where(use, mag, 1.0), 0)
                    numerator[sl] += (g * weight).sum(-1)
                    norm[sl] += xp.where(use, mag, 0).sum(-1)
                else:
                    shift = xp.exp(-1j * (gy * qy[sl][..., None] + gx * qx[sl][..., None]))
                    numerator[sl] += (g * shift).sum(-1)

    def _sums_kernel(self, aberrations: Aberrations, method: str, qy, qx, thickness: float, tilt, rows: int,
                     numerator, norm) -> None:
        """The SSB sums per Q of :meth:`image` by the fused kernel (:func:`qora.ssb.kernels.ssb_sums`, G on the
        device): G read once, not ~40 temporaries of each chunk. ``rows`` is the array code's, unused here."""
        kernels.ssb_sums(G=self.G, k=self._k, chi0=self._chi_pixels(aberrations), qy=qy, qx=qx,
                         coefficients=chi_coefficients(aberrations), quadratic=quadratic_tag(aberrations) == "true",
                         wavelength=self.wavelength, alpha=self.alpha_mrad * 1e-3 / self.wavelength,
                         thickness=thickness if method == "thick" else 0.0, tilt=tilt, numerator=numerator, norm=norm,
                         obf=method == "obf")

    def _sums_loops(self, aberrations: Aberrations, method: str, qy, qx, thickness: float, tilt, rows: int,
                    numerator, norm) -> None:
        """:meth:`_sums_kernel` on the host (:func:`qora.ssb.image_loops.ssb_sums`): 0.43 -> 0.01 s an image of the
        64 x 64 thick film (docs/ssb-performance.md, section 17). ``rows`` is the array code's and unused here."""
        image_loops.ssb_sums(G=self.G.reshape(-1, self.G.shape[-1]), k=self._k,
                             coefficients=chi_coefficients(aberrations),
                             qy=np.broadcast_to(qy, numerator.shape), qx=np.broadcast_to(qx, numerator.shape),
                             wavelength=self.wavelength, alpha=self.alpha_mrad * 1e-3 / self.wavelength,
                             thickness=thickness if method == "thick" else 0.0, tilt=tilt,
                             numerator=numerator.reshape(-1), norm=norm.reshape(-1), obf=method == "obf")

    _quadratic_tag = staticmethod(quadratic_tag)  # "true" when chi has only C10 and C12 (qora.ssb.model)

    def _chi_pixels(self, aberrations: Aberrations):
        """chi (rad, float64) at each bright-field pixel by the kernels' own polynomial
        (:func:`qora.ssb.kernels.chi_pixels`): the sums take chi(k) from it, once per pixel, not per (Q, k)."""
        return kernels.chi_pixels(coefficients=chi_coefficients(aberrations), k=self._k, wavelength=self.wavelength,
                                  out=self.xp.empty(len(self.bf_index)))

    def mean_phase(self, aberrations: Aberrations | None = None, *, thickness: float = 0.0, tilt=(0.0, 0.0),
                   chunk: int | None = None):
        """The mean-phase image (rad; a host array) and the loss for the given parameters.

        Each bright-field pixel's plane is corrected, G(Q, k) conj(Gamma) / |Gamma| on the Q
        where k is a double-overlap pixel, with its unscattered G(0, k) kept, and transformed
        back over the full Q plane: for the right parameters its image is |psi|^2 + i (the
        phase, filtered), so the angles of all pixels' images agree. The mean-phase image is
        the argument of the mean phasor exp(i angle) over the pixels, and the loss is 1 minus
        the mean over positions of that mean phasor's length (a circular variance: 0 when
        every pixel agrees). ``thickness`` and ``tilt`` select the thick-sample Gamma. The scan's
        Nyquist row and column are left out, as in :meth:`image` (+Q and -Q are one bin there).
        ``chunk``: full planes transformed at a time by the array code (default 64); the kernels'
        path (G on the device) sizes its own chunks of half planes (128 MB) and ignores it.
        """
        self._whole("the mean phase")
        aberrations = aberrations or Aberrations()
        return self._pick(self._mean_phase_arrays, self._mean_phase_half)(aberrations, thickness, tilt, chunk)

    def _mean_phase_arrays(self, aberrations: Aberrations, thickness: float, tilt, chunk: int | None):
        """:meth:`mean_phase` by the array code: full planes, ``chunk`` pixels at a time."""
        xp = self.xp
        sy, sx = self.scan_shape
        qy, qx = self._q(half=False)
        mirror_rows = (-np.arange(sy)) % sy
        cols = np.arange(sx // 2 + 1, sx)
        chunk = chunk or 64  # pixels of full planes at a time (fewer measured slower at 512^2, same peak)
        phasor = xp.zeros((sy, sx), np.complex128)
        for outer, g_chunk in self._chunks():
            for start in range(0, g_chunk.shape[-1], chunk):
                inner = slice(start, start + chunk)
                ks = slice(outer.start + start, outer.start + min(start + chunk, g_chunk.shape[-1]))
                half = g_chunk[..., inner]
                full = xp.empty((sy, sx, half.shape[-1]), np.complex128)  # the full plane from the data's symmetry
                full[:, : sx // 2 + 1] = half
                full[:, cols] = xp.conj(half[mirror_rows][:, sx - cols])
                gam = self.gamma(aberrations, qy, qx, thickness=thickness, tilt=tilt, pixels=ks)
                mag = xp.abs(gam)
                use = self.double_overlap(qy, qx, ks) & (mag > 1e-12)
                plane = xp.where(use, full * xp.conj(gam) / xp.where(use, mag, 1.0), 0)
                unresolved_out(plane, self.scan_shape)
                plane[0, 0] = full[0, 0]
                images = ifftn(plane, axes=(0, 1))
                phasor += xp.exp(1j * xp.angle(images)).sum(-1)
        phasor /= len(self.bf_index)
        return self.backend.to_host(xp.angle(phasor)), float(1.0 - xp.abs(phasor).mean())

    def _mean_phase_half(self, aberrations: Aberrations, thickness: float, tilt, chunk: int | None = None):
        """:meth:`mean_phase` from the half plane (kernels/ssb.cu: loss_half, loss_moments). The
        corrected plane is anti-Hermitian away from Q = 0 (Gamma(-Q) = -conj Gamma(Q), G(-Q) =
        conj G(Q)), so each pixel's image is G(0, k) / N + i r with r real: a half-plane C2R of
        -i P (unscaled: the angle does not see N) gives N r, and the phasors are summed as the
        images are read. No full plane, no angle image. ``chunk`` is the array code's (unused)."""
        xp = self.xp
        sy, sx = self.scan_shape
        sxh, nbf = sx // 2 + 1, len(self.bf_index)
        qy, qx = self._q(half=True)
        chunk = max(1, min(nbf, (128 << 20) // (sy * sxh * self.G.itemsize)))  # 128 MB of planes
        planes = xp.empty((chunk, sy, sxh), self.G.dtype)
        g0 = xp.ascontiguousarray(self.G[0, 0].real, dtype=np.float64)
        phasor = xp.zeros((sy, sx), np.complex128)
        quadratic = quadratic_tag(aberrations) == "true"
        chi0 = self._chi_pixels(aberrations)
        fixed = dict(G=self.G, k=self._k, chi0=chi0, qy=xp.ascontiguousarray(qy.ravel()),
                     qx=xp.ascontiguousarray(qx.ravel()), coefficients=xp.asarray(chi_coefficients(aberrations),
                                                                                  np.float64),
                     quadratic=quadratic, scan_shape=(sy, sx), wavelength=self.wavelength,
                     alpha=self.alpha_mrad * 1e-3 / self.wavelength, thickness=thickness, tilt=tilt, planes=planes)
        for first in range(0, nbf, chunk):
            count = min(chunk, nbf - first)
            kernels.loss_half(first=first, count=count, **fixed)
            images = irfftn(planes[:count], s=(sy, sx), axes=(-2, -1), norm="forward")  # N r, (count, sy, sx)
            kernels.loss_moments(images=images, g0=g0[first:first + count], phasor=phasor)
        phasor /= nbf
        return self.backend.to_host(xp.angle(phasor)), float(1.0 - xp.abs(phasor).mean())

    # -- fits, previews ------------------------------------------------------------------
    def fit(self, options=None, *, progress=None, **changes):
        """:func:`qora.ssb.fit` on this session (:class:`~qora.ssb.FitOptions` and keyword ``changes`` in,
        :class:`~qora.ssb.FitResult` out; rotation, orientation and branch found unless given)."""
        from qora.ssb.fitting import fit_session

        return fit_session(self, options, progress=progress, **changes)

    def reconstruct(self, options=None, *, progress=None, **changes):
        """Both branches fitted and imaged (the seed's default): a :class:`~qora.ssb.FitImages` (the fit, the
        images "standard" (SSB) and "thick" (tilt-corrected), rad on the scan grid, fitted frame). ``options``, a
        :class:`~qora.ssb.FitOptions` with keyword ``changes``; ``tilt`` and ``compare_standard`` are on."""
        from qora.ssb.fit_types import FitImages, FitOptions

        options = FitOptions.made(options, **changes)
        result = self.fit(options, tilt=True, compare_standard=True, progress=progress)
        oriented = reorient(self, result["orientation"]["orientation"])  # a relabelled copy, or self
        saved = oriented.rotation
        try:
            oriented.rotation = result["rotation_rad"]
            std = result["standard"]["parameters"]
            thick = result["thick"]["parameters"]
            images = {"standard": oriented.image(parameters_to_aberrations(std), "ssb"),
                      "thick": oriented.image(parameters_to_aberrations(thick), "thick",
                                              thickness=thick["thickness"], tilt=(thick["tilt_y"], thick["tilt_x"]))}
        finally:
            oriented.rotation = saved
        return FitImages(result, images, result["better"])

    def widget(self, aberrations: Aberrations | None = None, *, upsample: int = 1):
        """A notebook widget: the viewer's aberration sliders (starting at ``aberrations``) and the
        preview image, redrawn in the kernel for each change (:func:`qora.ssb.sliders.session_widget`;
        needs the ``notebook`` extra)."""
        from qora.ssb.sliders import session_widget

        return session_widget(self, aberrations, upsample=upsample)

    def preview(self, params, *, upsample: int = 1, loss: bool = False, method: str = "ssb"):
        """The image for given parameters, cheap enough to follow a slider.

        ``params``: :class:`Aberrations` or a dict of cartesian parameters (``C10``, ``C12a``, ...,
        A) with optional ``thickness`` (A) and ``tilt_y``, ``tilt_x`` (rad) and ``rotation`` (rad).
        ``upsample`` 1: the SSB image, tilt-corrected (method "thick") when a thickness or tilt is
        given; 3 (or any integer above 1): the parallax image on the finer grid (sub-pixel
        shifts; it takes the aberrations, not the thickness and tilt). ``method`` other than "ssb" (upsample 1):
        that method's image ("obf", "wdd", "icom", "parallax"; the thickness and tilt are the SSB path's alone, and
        iCoM takes no aberrations). With ``loss`` also the mean-phase loss for those parameters (the slider's
        release): returns ``(image, loss)``.
        """
        if method not in PREVIEW_METHODS:
            raise ValueError(f"method must be one of {', '.join(PREVIEW_METHODS)}; got {method!r}")
        if isinstance(params, Aberrations):
            ab, extra = params, {}
        else:
            params = dict(params)
            extra = {k: float(params.pop(k)) for k in ("thickness", "tilt_y", "tilt_x", "rotation") if k in params}
            ab = parameters_to_aberrations(params)
        thickness = extra.get("thickness", 0.0)
        tilt = (extra.get("tilt_y", 0.0), extra.get("tilt_x", 0.0))
        saved = self.rotation
        try:
            if "rotation" in extra:
                self.rotation = extra["rotation"]
            if upsample > 1:
                image = self.image(ab, "parallax", upsample=upsample)
            elif method != "ssb":
                image = self.image(None if method == "icom" else ab, method)
            elif thickness or any(tilt):
                image = self.image(ab, "thick", thickness=thickness, tilt=tilt)
            else:
                image = self.image(ab, "ssb")
            if not loss:
                return image
            return image, self.mean_phase(ab, thickness=thickness, tilt=tilt)[1]
        finally:
            self.rotation = saved

    @property
    def _fused(self) -> bool:
        """G on the device, where the fused kernels read it."""
        return self.backend.is_cuda and self.memory["G_on"] == "device"
