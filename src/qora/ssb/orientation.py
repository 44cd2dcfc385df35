"""The detector's orientation against the scan, and the 180-degree branch of the fits.

Detector and scan handedness and axis order differ between instruments: the recorded patterns may
be turned by a multiple of 90 degrees, transposed or mirrored against the scan. The eight
orientations are the dihedral group of the square; each is named by the operation that, applied
to the recorded patterns' detector axes, brings them into the frame the fits assume
(:data:`ORIENTATIONS`). A session is reoriented by relabelling its bright-field pixels' k, never by
copying the data (:func:`reorient`).

Which orientation is right is told by the bright-field centre of mass (COM). For a weak phase
object the COM over the whole disk is, pattern by pattern, a gradient: in Fourier space

    sum_k k G(Q, k) = i Phi(Q) sum_k k Gamma(Q, k) = i Phi(Q) Q sum_k psi(k) conj psi(k + Q),

parallel to Q at every Q whatever the aberrations (substitute k -> k + Q in Gamma's first term).
In the right frame the COM field has no curl; turned by an angle delta its curl is sin(delta)
of it, and mirrored it has curl at every angle. The curl fraction of a frame,

    sum_Q |Q x c(Q)|^2 / sum_Q |Q|^2 |c(Q)|^2,     c = the COM spectrum in that frame,

is a quadratic form in (cos theta, sin theta) of the scan rotation theta, so its minimum over the
rotation and the angle of it come in closed form (:func:`com_curl`). The search costs one product
of G with the pixels' k. It cannot tell a frame from the one turned by 180 degrees: neither can
the agreement, which is why the branch is chosen by a rule (:func:`phase_skewness`,
docs/ssb.md "Orientation and the 180-degree branch").
"""

from __future__ import annotations

import copy
import math

import numpy as np

from qora.io.errors import InputError
from qora.ssb.com import first_moments
from qora.ssb.detector import unresolved_out

__all__ = ["ORIENTATIONS", "check_orientation", "compose", "reorient", "com_spectrum", "com_curl", "curl_gram",
           "search_orientation", "phase_skewness", "flip_branch", "wrap_angle"]

# name -> the 2 x 2 matrix M taking a recorded pixel's (ky, kx) to its k in the fits' frame. Each is
# the numpy operation on the detector axes (det_row, det_col) of the recorded data of that name:
# "rot90" is np.rot90(data, 1, axes=(2, 3)), "transpose" data.transpose(0, 1, 3, 2), "flip-rows"
# data[:, :, ::-1], "flip-cols" data[..., ::-1], "antitranspose" the transpose about the other diagonal.
ORIENTATIONS = {
    "identity": ((1, 0), (0, 1)),
    "rot90": ((0, -1), (1, 0)),
    "rot180": ((-1, 0), (0, -1)),
    "rot270": ((0, 1), (-1, 0)),
    "transpose": ((0, 1), (1, 0)),
    "flip-rows": ((-1, 0), (0, 1)),
    "antitranspose": ((0, -1), (-1, 0)),
    "flip-cols": ((1, 0), (0, -1)),
}
_MATRIX = {name: np.array(m, float) for name, m in ORIENTATIONS.items()}
# with the scan rotation fitted the turns by 90 degrees are the rotation's: one name per handedness
PROPER, MIRRORED = ("identity", "rot90", "rot180", "rot270"), ("transpose", "flip-rows", "antitranspose", "flip-cols")


def check_orientation(name: str, *, auto: bool = True) -> str:
    """``name`` if it is one of :data:`ORIENTATIONS` (or "auto", with ``auto``), else InputError."""
    known = tuple(ORIENTATIONS) + (("auto",) if auto else ())
    if name not in known:
        raise InputError(f"detector orientation must be one of {', '.join(known)}; got {name!r}")
    return name


def _name_of(matrix) -> str:
    for name, m in _MATRIX.items():
        if np.array_equal(m, matrix):
            return name
    raise AssertionError(matrix)  # the group is closed


def compose(first: str, then: str) -> str:
    """The orientation of applying ``first``, then ``then``, to the detector axes."""
    return _name_of(_MATRIX[then] @ _MATRIX[first])


def reorient(session, orientation: str):
    """``session`` with its detector relabelled by ``orientation`` (see :data:`ORIENTATIONS`): a
    shallow copy sharing G (and the fits' cached band of it, which does not depend on k), with the
    bright-field pixels' k turned. Its ``orientation`` attribute is the composition with the
    session's own. Images and fits of the copy are those of the data with that numpy operation
    applied to its detector axes (about the bright-field disk's centre)."""
    check_orientation(orientation, auto=False)
    if orientation == "identity":
        return session
    if not hasattr(session, "_k"):
        raise InputError(f"a {type(session).__name__} cannot be reoriented: give its data in the fits' "
                         "orientation, or the orientation 'identity'")
    holder = getattr(session, "_band_holder", None)
    if holder is not None:
        holder()  # made before the copy, so the copy shares it
    out = copy.copy(session)
    out.k = np.ascontiguousarray(np.asarray(session.k) @ _MATRIX[orientation].T)
    out._k = session.xp.asarray(out.k)
    out.orientation = compose(getattr(session, "orientation", "identity"), orientation)
    return out


def com_spectrum(session, *, band=None):
    """The bright-field COM's spectrum c(Q) = sum_k k G(Q, k) (1/A per unit of G), in the
    recorded detector axes, on the half-plane Q with 0 < |Q| <= the band's high edge (default
    2 alpha / lambda, all SSB transfers) away from the Nyquist row and column:
    ``(qy, qx, c)`` with c of shape (nq, 2) as (c_y, c_x), host arrays in the scan frame."""
    qy, qx = session.q_half(0.0)
    q = np.hypot(qy, qx)
    high = 2 * session.alpha_mrad * 1e-3 / session.wavelength if band is None else band[1]
    low = 0.0 if band is None else band[0]
    keep = (q > low) & (q <= high) & (q > 0)
    unresolved_out(keep, session.scan_shape)
    if not keep.any():
        raise InputError(f"no scan frequency lies in the COM band ({low:g}, {high:g}] 1/A")
    total = first_moments(session)
    c = session.backend.to_host(total)[keep]
    return qy[keep], qx[keep], np.asarray(c, np.complex128)


def curl_gram(qy, qx, c) -> np.ndarray:
    """The 4 x 4 real Gram matrix Re(V^H V) of the products V = (qy c_y, qy c_x, qx c_y, qx c_x) of the
    COM spectrum ``c`` (recorded axes): every orientation's curl form (:func:`com_curl`) is a
    quadratic form of it, so the eight orientations take one pass over the spectrum, not eight."""
    # entry ((i, j), (k, l)) = sum q_i q_k Re(conj(c_j) c_l): one real (3, n) @ (n, 3) product of the
    # q products and the c products (the complex (n, 4) stack and its Gram took 10 ms at 512^2)
    q = np.stack([qy * qy, qy * qx, qx * qx])
    cy, cx = c[:, 0], c[:, 1]
    r = np.stack([cy.real**2 + cy.imag**2, cy.real * cx.real + cy.imag * cx.imag, cx.real**2 + cx.imag**2], 1)
    m = q @ r  # m[a, b]: a indexes (yy, yx, xx) of q_i q_k, b (yy, yx, xx) of Re conj(c_j) c_l
    pair = {(0, 0): 0, (0, 1): 1, (1, 0): 1, (1, 1): 2}
    index = [(0, 0), (0, 1), (1, 0), (1, 1)]  # (i, j) of (qy cy, qy cx, qx cy, qx cx)
    return np.array([[m[pair[i, k], pair[j, l]] for (k, l) in index] for (i, j) in index])


def com_curl(qy, qx, c, orientation: str, rotation: float | None = None, *, gram=None):
    """The curl fraction (0: a gradient field, 1: all curl) of the COM spectrum ``c`` (recorded
    axes) relabelled by ``orientation``, for the scan ``rotation`` (rad) or, when None, at the
    rotation that makes it least: ``(fraction, rotation)``, that rotation in [-pi/2, pi/2) (the
    fraction has period pi). Q x c in the detector frame is cos(theta) a + sin(theta) b with
    a = qy c_x - qx c_y and b = qx c_x + qy c_y, so the curl energy is a 2 x 2 quadratic form;
    a and b are linear in the products of :func:`curl_gram` (``gram``, made here when None)."""
    m = _MATRIX[orientation]
    gram = curl_gram(qy, qx, c) if gram is None else gram
    # c' = m c: a = qy c'_x - qx c'_y, b = qx c'_x + qy c'_y in the products (qy cy, qy cx, qx cy, qx cx)
    ua = np.array([m[1, 0], m[1, 1], -m[0, 0], -m[0, 1]], float)
    ub = np.array([m[0, 0], m[0, 1], m[1, 0], m[1, 1]], float)
    form = np.array([[ua @ gram @ ua, ua @ gram @ ub], [ub @ gram @ ua, ub @ gram @ ub]])
    form = (form + form.T) / 2
    trace = form[0, 0] + form[1, 1]
    if trace <= 0:
        raise InputError("the bright field's centre of mass does not vary over the scan: no orientation can be told")
    if rotation is not None:
        v = np.array([math.cos(rotation), math.sin(rotation)])
        return float(v @ form @ v / trace), float(rotation)
    values, vectors = np.linalg.eigh(form)
    theta = math.atan2(vectors[1, 0], vectors[0, 0])
    return float(values[0] / trace), wrap_angle(theta, period=math.pi)


def wrap_angle(theta: float, *, period: float = 2 * math.pi) -> float:
    """``theta`` (rad) wrapped into [-period / 2, period / 2)."""
    return float((theta + period / 2) % period - period / 2)


def search_orientation(session, *, rotation: float | None = None, band=None) -> dict:
    """The detector orientation by the COM curl (module docstring), JSON-ready.

    With the scan ``rotation`` (rad) given, each of the eight orientations is scored at it; an
    orientation and the one turned by 180 degrees score the same (the branch is the fits'), so
    the best pair's first member is returned with the best score outside that pair as the
    runner-up. With the rotation unknown the turns are the rotation's, so only the two
    handednesses are scored, each at its own best rotation (in [-90, 90) degrees), and the other
    handedness is the runner-up. Returns ``{"orientation", "score", "runner_up", "runner_up_score",
    "scores" (name -> curl fraction), "rotation_rad" (the COM's rotation, None when given),
    "method"}``.
    """
    qy, qx, c = com_spectrum(session, band=band)
    gram = curl_gram(qy, qx, c)
    if rotation is None:
        scores, angles = {}, {}
        for name in ("identity", "transpose"):
            scores[name], angles[name] = com_curl(qy, qx, c, name, gram=gram)
        ranked = sorted(scores, key=scores.get)
        best, other = ranked
        return {"orientation": best, "score": scores[best], "runner_up": other, "runner_up_score": scores[other],
                "scores": scores, "rotation_rad": angles[best], "method": "bright-field centre-of-mass curl"}
    scores = {name: com_curl(qy, qx, c, name, rotation, gram=gram)[0] for name in ORIENTATIONS}
    ranked = sorted(scores, key=lambda n: (scores[n], list(ORIENTATIONS).index(n)))
    best = ranked[0]
    partner = compose(best, "rot180")
    rest = [n for n in ranked if n not in (best, partner)]
    return {"orientation": best, "score": scores[best], "runner_up": rest[0], "runner_up_score": scores[rest[0]],
            "scores": scores, "rotation_rad": None, "method": "bright-field centre-of-mass curl"}


def phase_skewness(image) -> float:
    """The skewness of a phase image (its third standardised moment): positive when the image has
    sparse positive peaks on a flat background, as the projected potential of atoms has. The
    180-degree branch rule (docs/ssb.md): an object's phase, sigma V_projected, is positive at
    atoms (the potential of a screened nucleus is positive), so the branch whose image has the
    positive skewness is the physical one; the other is the same image negated."""
    x = np.asarray(image, np.float64).ravel()
    x = x - x.mean()
    var = float(np.dot(x, x)) / x.size  # dot products: x**3 took 13 ms of a 512^2 image (a pow per pixel)
    return float(np.dot(x * x, x)) / x.size / var**1.5 if var > 0 else 0.0


def flip_branch(values: dict) -> dict:
    """The other branch's parameters: every aberration coefficient negated (psi -> conj psi), the
    thickness and tilt kept (a slice at depth z seeing C10 + z becomes one at -z seeing
    -(C10 + z), and the slab is symmetric); the rotation is the caller's (+180 degrees)."""
    from qora.ssb.model import ABERRATION_PARAMETERS

    return {k: (-v if k in ABERRATION_PARAMETERS else v) for k, v in values.items()}
