"""An independent truth: the vector (Maxwell) Mie field of a sphere, as our field ratio u_s / u_in.

:func:`vector_mie_ratio` takes the electric field that ``miepython`` computes from the full
vector Mie solution (its own coefficients a_n, b_n and vector spherical harmonics), samples
the scattered field on a plane z = z_p past the sphere, and propagates it back to the focal
plane z = 0 through the detection pupil, as a microscope refocuses a hologram. It shares
nothing with the scalar partial waves of :func:`qora.holo.phantoms.partial_wave_ratio` but the
geometry, so agreeing with it checks the scalar solution, its plane-wave refocusing, and the
sign and origin conventions at once. docs/holo.md gives the measured agreement.

Conventions (lengths in um, frequencies in cycles/um, arrays centre-origin, see docs/holo.md):

- Time dependence exp(-i omega t) in both codes: the illumination is exp(+2 pi i nu_in . r) and
  scattered waves go as exp(+i k r) / r. ``miepython``'s fields use the same (its coefficients
  take absorbing indices as n - i kappa, so a complex sphere index, n + i kappa here, is
  conjugated before it is passed on). Its size parameter is pi d n_m / lambda and its relative
  index n / n_m: it is given the diameter, the vacuum wavelength and both indices and forms them
  itself. No other conjugation is needed: checked against the scalar amplitude f(theta) in the
  far field (the forward amplitudes agree to 0.3% at n - n_m = 0.01).
- ``miepython`` illuminates along +z with E along +x and unit amplitude at the sphere's centre.
  A tilted illumination of direction k^ = (nu_x, nu_y, nu_z) / (n_m / lambda) is evaluated in the
  rotated frame x' = e, y' = k^ x e, z' = k^ (e the polarisation): the lab points are rotated
  into it, the field is evaluated there and rotated back. The incident wave is then
  e exp(2 pi i nu_in . (r - c)) about the centre c; it is rephased to exp(2 pi i nu_in . r).
- ``polarization`` of a tilted beam: "projected" (the default), the lab x^ projected transverse
  to the beam, e = (x^ - k^ (k^ . x^)) / |...|, what a linear polariser before a tilted plane
  wave gives; "lens", x^ carried by the rotation about z^ x k^ that takes z^ to k^ (the
  meridional rotation of an aplanatic condenser). The two fields differ by 0.3-0.5% (relative
  L2) on the NA 0.8 cone; their distances from the scalar field are the same to 1e-4.
- ``detection``, the scalar made of the vector field (a scalar theory has none, and the choice
  matters at the percent level, see docs/holo.md): "lab", the lab x component E_x; or
  "objective", the component an x-polarised reference picks out behind an aplanatic objective:
  each plane wave of direction d is projected on L(d), x^ carried by the meridional rotation
  that takes z^ to d (Richards and Wolf), without the objective's sqrt(cos) apodisation, which
  is a known pupil function divided out in calibration. Either way it is divided by the same
  component of the incident wave, so the ratio is that of a scalar wave of unit amplitude.
"""

from __future__ import annotations

import math

import numpy as np

from qora.holo.geometry import Geometry, frequencies, nu_z
from qora.holo.phantoms import Sphere

__all__ = ["vector_mie_ratio", "polarization_vector", "lens_x", "dipole_factor"]

# Evanescent waves that could alias into the pupil on the plane's grid decay by at least this
# factor between the sphere's surface and the plane.
_EVANESCENT_DECAY = 1e-6
# The plane is kept whole out to where light at sin theta = (NA / n_m + 1) / 2 (half-way from the
# pupil's edge to grazing) leaves the sphere, then tapered to zero over this many um.
_TAPER = 4.0
# The far route evaluates miepython's field at this distance (um): k r ~ 1.6e7, so the
# near-field terms, n (n + 1) / (2 k r) for the highest order n ~ 40, are below 1e-4.
_FAR = 1e6


def lens_x(d) -> np.ndarray:
    """x^ carried by the rotation about z^ x d that takes z^ to unit ``d`` (x, y, z, ...): (3, ...).

    In terms of the polar angle theta and azimuth phi of d:
    (cos theta cos^2 phi + sin^2 phi, (cos theta - 1) sin phi cos phi, -sin theta cos phi).
    """
    dx, dy, dz = (np.asarray(v, float) for v in d)
    s = np.hypot(dx, dy)
    on_axis = s == 0
    s_safe = np.where(on_axis, 1.0, s)
    cp, sp = np.where(on_axis, 1.0, dx / s_safe), np.where(on_axis, 0.0, dy / s_safe)
    return np.stack([dz * cp**2 + sp**2, (dz - 1) * sp * cp, -s * cp])


def polarization_vector(khat, polarization: str = "projected") -> np.ndarray:
    """The unit polarisation (x, y, z) of an x-polarised beam travelling along unit ``khat`` (x, y, z).

    "projected": x^ minus its component along the beam, normalised. "lens": :func:`lens_x`.
    Both are x^ at normal incidence and have a positive x component in the forward half space.
    """
    khat = np.asarray(khat, float)
    if polarization == "projected":
        e = np.array([1.0, 0.0, 0.0]) - khat[0] * khat
        return e / np.linalg.norm(e)
    if polarization == "lens":
        return lens_x(khat)
    raise ValueError(f"polarization must be 'projected' or 'lens', got {polarization!r}")


def _detector(d, detection: str):
    """The vector (3, ...) whose component of E is detected, for plane waves along ``d`` (3, ...)."""
    if detection == "lab":
        d = np.asarray(d, float)
        return np.stack([np.ones(d.shape[1:]), np.zeros(d.shape[1:]), np.zeros(d.shape[1:])])
    if detection == "objective":
        return lens_x(d)
    raise ValueError(f"detection must be 'lab' or 'objective', got {detection!r}")


def _taper(rho, inner: float, outer: float):
    """1 for rho <= inner, a raised cosine down to 0 at outer."""
    t = np.clip((rho - inner) / (outer - inner), 0.0, 1.0)
    return 0.5 * (1 + np.cos(math.pi * t))


def _pupil(geometry: Geometry, a: int, n: int, pixel: float):
    """For illumination a: mu = kappa + nu_in on the output's bins (FFT order), nu_z(mu), the pupil."""
    f = frequencies(n, pixel)
    ky, kx = np.meshgrid(f, f, indexing="ij")
    nuy, nux = geometry.illuminations[a]
    my, mx = ky + nuy, kx + nux
    nz = nu_z(my, mx, geometry.medium_frequency)
    inside = (np.hypot(my, mx) <= geometry.pupil_frequency) & np.isfinite(nz)
    return my, mx, np.where(inside, nz, 0.0), inside


def dipole_factor(geometry: Geometry, a: int, *, n: int | None = None, pixel: float | None = None,
                  polarization: str = "projected", detection: str = "lab") -> np.ndarray:
    """The first-order polarisation factor of the vector field over the scalar one: (n, n), FFT order.

    To first order in n - n_m (Rayleigh-Gans) the vector far field along d is the scalar one times
    e - d (d . e), the incident polarisation made transverse to d; the detected component over
    the incident wave's is then P(d) = (e - d (d . e)) . v(d) / (e . v(k^)), v the detection
    vector (x^ for "lab", :func:`lens_x` for "objective"). Zero outside the pupil. For "lab" at
    normal incidence P = 1 - sin^2 theta cos^2 phi; for a beam tilted in the x-z plane it is
    linear in the angle from the beam, which is why lab E_x is furthest from the scalar field there.
    """
    n = n or geometry.n
    pixel = pixel or geometry.pixel
    km = geometry.medium_frequency
    my, mx, nz, inside = _pupil(geometry, a, n, pixel)
    d = np.stack([mx, my, np.where(inside, nz, km)]) / km
    nuy, nux = geometry.illuminations[a]
    khat = np.array([nux, nuy, geometry.nu_z_in()[a]]) / km
    e = polarization_vector(khat, polarization)
    transverse = e[:, None, None] - d * np.tensordot(e, d, axes=1)[None]
    v = _detector(d, detection)
    norm = e @ _detector(khat[:, None], detection)[:, 0]
    return np.where(inside, np.sum(transverse * v, axis=0) / norm, 0.0)


def _plane_sampling(geometry: Geometry, cz: float, radius: float, *, plane_z, plane_pixel, plane_half_width):
    """The plane :func:`vector_mie_ratio` samples E on, for a sphere centred at height ``cz`` (um): its height, pixel,
    and the half-widths where its taper starts and ends (um), each the documented default unless given."""
    km = geometry.medium_frequency
    zp = cz + radius + 2.0 if plane_z is None else float(plane_z)
    gap = zp - cz - radius
    if gap <= 0:
        raise ValueError(f"plane_z ({zp} um) must lie past the sphere (its top is at z = {cz + radius} um)")
    if plane_pixel is None:
        alias = math.hypot(km, math.log(1 / _EVANESCENT_DECAY) / (2 * math.pi * gap))
        pp = 1.0 / (geometry.pupil_frequency + alias)
    else:
        pp = float(plane_pixel)
    if plane_half_width is None:
        s = 0.5 * (geometry.pupil_frequency / km + 1.0)
        inner = radius + (zp - cz + radius) * s / math.sqrt(1 - s**2)
        outer = inner + _TAPER
    else:
        outer = float(plane_half_width)
        inner = max(outer - _TAPER, 0.5 * outer)
    return zp, pp, inner, outer


def vector_mie_ratio(sphere: Sphere, geometry: Geometry, *, n: int | None = None, pixel: float | None = None,
                     plane_z: float | None = None, illuminations=None, polarization: str = "projected",
                     detection: str = "lab", method: str = "plane", plane_pixel: float | None = None,
                     plane_half_width: float | None = None) -> np.ndarray:
    """The vector Mie field ratio u_s / u_in of one sphere at z = 0, through the pupil: (A, n, n) complex128.

    For each illumination (``illuminations``: indices into the geometry's, all by default),
    ``miepython``'s scattered E for an x-polarised wave (see the module's conventions for
    ``polarization`` and ``detection``) gives the angular spectrum U(mu) at the frequencies
    mu = kappa + nu_in of the output's bins kappa; it is cut to the pupil |mu| <= NA / lambda and
    transformed like :func:`~qora.holo.phantoms.partial_wave_ratio`: the same n x n grid at
    ``pixel`` um (the geometry's by default), centre-origin, periodic.

    ``method="plane"`` (the default) samples E (all three components) on the plane
    z = ``plane_z`` um past the sphere, sums its angular spectrum directly at mu (a matrix DFT,
    so an illumination off the field grid is exact too), and propagates it back to z = 0 by
    exp(-2 pi i nu_z(mu) z_p). Sampling choices (each can be overridden):

    - ``plane_z``: 2 um (about 5 medium wavelengths) past the sphere's top, c_z + radius + 2.
    - ``plane_pixel``: the coarsest at which no wave that reaches the plane aliases into the
      pupil: aliases of the pupil lie at |nu| >= 1 / pixel - NA / lambda, and those must be
      evanescent waves decayed by 1e-6 over the gap (0.2 um for the reference geometry and the
      default plane). Propagating waves never alias into the pupil at that pixel.
    - ``plane_half_width``: a square centred on the sphere's axis. Light at sin theta <= s leaves
      the sphere's ball within rho <= radius + (z_p - c_z + radius) tan theta; the plane is kept
      whole to that radius for s = (NA / n_m + 1) / 2, a margin beyond the pupil, and tapered to
      zero by a raised cosine over 4 um (20.7 um in all for the reference sphere), so that
      truncating the slowly decaying wide-angle field leaks little into the pupil. Measured
      against the far route: 0.05-0.10% (half-widths of 15 and 12 um give 0.4% and 1.1%).

    ``method="far"`` evaluates E instead far away (1e6 um) along the direction of each pupil
    frequency and uses the plane-wave (Weyl) form of an outgoing wave, U(mu) = i F(d) / nu_z
    for E ~ F(d) exp(i k r) / r: the same field without a plane, 10-20x cheaper.

    Needs ``miepython`` (``pip install miepython``; it is in the ``test`` extra, not a
    dependency of qora). Cost with miepython's default pure-Python kernels, about 40 us per
    field point: 2-3 s per illumination on the plane for the reference sphere (whatever n),
    and ~0.1 s per illumination for the far route at n = 128.
    """
    try:
        from miepython.field import e_near_cartesian
    except ImportError as err:  # pragma: no cover - the test extra installs it
        raise ImportError("qora.holo.mie.vector_mie_ratio needs miepython: pip install miepython") from err
    if method not in ("plane", "far"):
        raise ValueError(f"method must be 'plane' or 'far', got {method!r}")
    _detector(np.zeros((3, 1)), detection)  # validates the name

    n, pixel = n or geometry.n, pixel or geometry.pixel
    indices = np.arange(geometry.count) if illuminations is None else np.atleast_1d(np.asarray(illuminations, int))
    km = geometry.medium_frequency
    radius = float(sphere.radius)
    center0 = np.asarray(sphere.center, float)
    nu_in_z = geometry.nu_z_in()
    # miepython's absorbing indices are n - i kappa (ours n + i kappa under exp(-i omega t))
    m_sphere = np.conj(complex(sphere.index))

    def field(x, y, z):
        """miepython's scattered E (x', y', z' components) at rotated-frame points about the centre."""
        return e_near_cartesian(geometry.wavelength, 2 * radius, m_sphere, geometry.medium_index, x, y, z,
                                include_incident=False)

    out = np.empty((len(indices), n, n), np.complex128)
    for out_i, a in enumerate(indices):
        nuy, nux = geometry.illuminations[a]
        c = geometry.rotation(a) @ center0  # (z, y, x): the sample's pose at this angle
        khat = np.array([nux, nuy, nu_in_z[a]]) / km  # (x, y, z)
        e1 = polarization_vector(khat, polarization)
        frame = np.stack([e1, np.cross(khat, e1), khat])  # rows: the rotated axes, in lab (x, y, z)
        norm = e1 @ _detector(khat[:, None], detection)[:, 0]  # the incident wave's detected component
        # miepython's incident wave has unit amplitude at the sphere's centre, ours at the origin
        phase_c = np.exp(2j * math.pi * (nux * c[2] + nuy * c[1] + nu_in_z[a] * c[0]))
        my, mx, nz, inside = _pupil(geometry, a, n, pixel)
        d = np.stack([mx, my, np.where(inside, nz, km)]) / km  # plane-wave directions, lab (x, y, z)
        v = _detector(d, detection)

        if method == "far":
            pts = np.tensordot(frame, d[:, inside], axes=1) * _FAR
            e_lab = frame.T @ field(*pts)  # (3, points)
            amp = np.sum(e_lab * v[:, inside], axis=0) * _FAR * np.exp(-2j * math.pi * km * _FAR)
            # E_mie(r - c) ~ F exp(ik|r - c|)/|r - c|, whose spectrum at z = 0 is i F / nu_z e^{-2 pi i mu.c}
            shift = np.exp(-2j * math.pi * (mx[inside] * c[2] + my[inside] * c[1] + nz[inside] * c[0]))
            spec = np.zeros((n, n), np.complex128)
            spec[inside] = 1j * amp / nz[inside] * shift * phase_c / norm
        else:
            zp, pp, inner, outer = _plane_sampling(geometry, c[0], radius, plane_z=plane_z, plane_pixel=plane_pixel,
                                                   plane_half_width=plane_half_width)
            m = int(math.ceil(outer / pp))
            t = np.arange(-m, m + 1) * pp  # lateral offsets from the sphere's axis, um
            dy, dx = np.meshgrid(t, t, indexing="ij")
            lab = np.stack([dx, dy, np.full_like(dx, zp - c[0])])
            e_lab = np.tensordot(frame.T, field(*np.tensordot(frame, lab, axes=1)), axes=1)  # (3, m, m)
            e_lab *= _taper(np.hypot(dy, dx), inner, outer) * phase_c / norm
            # angular spectrum at mu: sum over the plane of E exp(-2 pi i mu . rho) pp^2, per component
            f = frequencies(n, pixel)
            ey = np.exp(-2j * math.pi * np.outer(f + nuy, c[1] + t))
            ex = np.exp(-2j * math.pi * np.outer(f + nux, c[2] + t))
            spec = sum(v[i] * (pp**2 * (ey @ e_lab[i] @ ex.T)) for i in range(3))
            spec = np.where(inside, spec * np.exp(-2j * math.pi * nz * zp), 0)
        out[out_i] = np.fft.fftshift(np.fft.ifft2(spec)) / pixel**2
    return out
