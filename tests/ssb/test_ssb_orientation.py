"""The detector orientation, the 180-degree branch and the identifiability report (issue 23).

On two abTEM fixtures (independent multislice: a carbon film, tests/ssb/fixtures/abtem_weak_phase.npz,
and SrTiO3 [001] two cells thick, abtem_srtio3.npz, made by the scripts beside them) with the
detector turned, transposed or flipped by numpy operations, or the scan turned by 17 degrees: the
orientation is recovered, the rotation and aberrations are a consistent pair, and the image has
the sign of abTEM's own phase. docs/ssb.md, "Orientation and the 180-degree branch" and "The
identifiability report".
"""

import math
from pathlib import Path

import numpy as np
import pytest

from qora.ssb import Aberrations, Session, make_band, parameters_to_aberrations
from qora.ssb.orientation import (ORIENTATIONS, compose, flip_branch, phase_skewness, reorient, search_orientation,
                                  wrap_angle)

FIXTURES = Path(__file__).parent / "fixtures"
FILM, SRTIO3 = FIXTURES / "abtem_weak_phase.npz", FIXTURES / "abtem_srtio3.npz"

# the numpy operation on the detector axes that each orientation names
OPS = {
    "identity": lambda d: d,
    "rot90": lambda d: np.rot90(d, 1, axes=(2, 3)),
    "rot180": lambda d: np.rot90(d, 2, axes=(2, 3)),
    "rot270": lambda d: np.rot90(d, 3, axes=(2, 3)),
    "transpose": lambda d: d.transpose(0, 1, 3, 2),
    "flip-rows": lambda d: d[:, :, ::-1],
    "antitranspose": lambda d: np.rot90(d.transpose(0, 1, 3, 2), 2, axes=(2, 3)),
    "flip-cols": lambda d: d[..., ::-1],
}


def _inverse(name):
    return next(m for m in ORIENTATIONS if compose(name, m) == "identity")


def _load(path):
    with np.load(path) as f:
        fx = {k: f[k] for k in f.files}
    kw = dict(kv=float(fx["kv"]), alpha_mrad=float(fx["alpha_mrad"]), scan_step=float(fx["scan_step"]))
    return fx, fx["data"].astype(np.float64), kw


@pytest.fixture(scope="module")
def film():
    return _load(FILM)


@pytest.fixture(scope="module")
def srtio3():
    return _load(SRTIO3)


def _corr(a, b):
    return float(np.corrcoef(np.ravel(a), np.ravel(b))[0, 1])


def test_srtio3_fixture_is_what_it_says(srtio3):
    fx, data, kw = srtio3
    assert data.shape == (24, 24, 32, 32) and fx["data"].dtype == np.float16
    assert SRTIO3.stat().st_size < 2_000_000
    assert str(fx["abtem_version"]).startswith("1.")
    # the truth is positive at the atom columns: its skewness is, and the rule relies on it
    assert phase_skewness(fx["truth_phase"]) > 1.0  # measured 3.8


def test_orientations_are_a_group_and_name_the_numpy_operations(film):
    """reorient(session of the data, name) is the session of OPS[name](data): same images."""
    for a in ORIENTATIONS:
        assert compose(a, _inverse(a)) == "identity"
        for b in ORIENTATIONS:
            assert compose(a, b) in ORIENTATIONS
    fx, data, kw = film
    base = Session(data, **kw)
    ab = Aberrations(C10=80.0, C12=(70.0, math.radians(20.0)))
    for name, op in OPS.items():
        direct = Session(np.ascontiguousarray(op(data)), **kw)
        relabelled = reorient(base, name)
        assert relabelled.orientation == name
        assert relabelled.G is base.G  # no data copied
        # the same bright-field pixels at the same k (the disk's centre turns with the data)
        order = lambda k: k[np.lexsort(np.round(k.T, 9))]  # noqa: E731
        np.testing.assert_allclose(order(relabelled.k), order(direct.k), atol=1e-9)
        if name in ("rot90", "transpose", "antitranspose"):  # and the same images (G's pixels follow k)
            np.testing.assert_allclose(relabelled.image(ab, "ssb"), direct.image(ab, "ssb"), atol=1e-6)


def test_the_branch_flip_leaves_the_agreement_and_negates_the_image(film):
    """(theta, C, thickness, tilt) and (theta + 180 deg, -C, thickness, tilt) agree to rounding;
    the images are each other's negatives."""
    fx, data, kw = film
    s = Session(data, **kw)
    v = {"C10": 80.0, "C12a": 50.0, "C12b": 40.0, "thickness": 50.0, "tilt_y": 0.004, "tilt_x": -0.002}
    a = make_band(s, tuple(v), rotation=0.3).evaluate(v, order=0)
    b = make_band(s, tuple(v), rotation=0.3 + math.pi).evaluate(flip_branch(v), order=0)
    assert b == pytest.approx(a, rel=1e-12)
    image = reorient(s, "identity").image(parameters_to_aberrations({k: v[k] for k in ("C10", "C12a", "C12b")}))
    other = reorient(s, "rot180").image(parameters_to_aberrations(flip_branch({k: v[k] for k in ("C10", "C12a", "C12b")})))
    np.testing.assert_allclose(other, -image, atol=1e-9)
    assert phase_skewness(-image) == pytest.approx(-phase_skewness(image))
    assert wrap_angle(math.pi) == pytest.approx(-math.pi) and wrap_angle(3.5 * math.pi) == pytest.approx(-0.5 * math.pi)


@pytest.mark.parametrize("which", ["film", "srtio3"])
def test_search_orientation_finds_each_of_the_eight(which, request):
    """The COM curl, with the rotation given (0) and fitted: the right orientation up to the
    180-degree partner (the branch is the fit's), the runner-up clearly worse."""
    fx, data, kw = request.getfixturevalue(which)
    for name, op in OPS.items():
        s = Session(np.ascontiguousarray(op(data)), **kw)
        want = _inverse(name)
        found = search_orientation(s, rotation=0.0)
        assert found["orientation"] in (want, compose(want, "rot180")), name
        assert found["runner_up_score"] > 2.5 * found["score"], (name, found)  # measured 3.9-28x
        free = search_orientation(s)
        mirrored = name in ("transpose", "flip-rows", "antitranspose", "flip-cols")
        assert free["orientation"] == ("transpose" if mirrored else "identity"), name
        assert free["runner_up_score"] > 2.0 * free["score"], (name, free)  # measured 2.4x and 6.3x
        # the COM rotation relabelled to the found handedness: a multiple of 90 degrees, to ~0.6 degree
        turn = math.degrees(free["rotation_rad"]) % 90.0
        assert min(turn, 90.0 - turn) < 1.5, (name, free["rotation_rad"])


def _check_fit(fx, result, session, *, c10_tol=3.0):
    """The fit's rotation and aberrations are the truth's, consistently: the image correlates with
    abTEM's phase (right orientation, rotation and sign), C10 has the truth's sign and size, and C12's
    azimuth in the fitted detector frame is the truth's turned by the rotation."""
    p = result["standard"]["parameters"]
    ab = parameters_to_aberrations(p)
    oriented = reorient(session, result["orientation"]["orientation"])
    oriented.rotation = result["rotation_rad"]
    image = oriented.image(ab, "ssb")
    assert _corr(image, fx["truth_phase"]) > 0.85, result["orientation"]  # measured 0.95-0.996
    assert result["branch"]["skewness"] > 0
    assert -math.pi <= result["rotation_rad"] < math.pi
    assert abs(ab.get("C10") - float(fx["C10"])) < c10_tol + 0.05 * abs(float(fx["C10"]))
    mag, angle = ab.values["C12"]
    assert abs(mag - float(fx["C12"])) < 0.05 * float(fx["C12"]) + 1.0
    off = math.degrees(angle - result["rotation_rad"] - float(fx["phi12"])) % 180.0
    assert min(off, 180.0 - off) < 2.0, off


@pytest.mark.parametrize("name", ["rot180", pytest.param("flip-rows", marks=pytest.mark.slow)])
def test_fit_with_the_rotation_given_recovers_the_orientation_and_branch(film, name):
    from qora.ssb import fit_session

    fx, data, kw = film
    s = Session(np.ascontiguousarray(OPS[name](data)), **kw)
    result = fit_session(s, rotation=0.0, tilt=False, trials=48, starts=2)
    assert result["orientation"]["orientation"] == _inverse(name)
    assert result["orientation"]["searched"] and result["branch"]["flipped"] == (name == "rot180")
    _check_fit(fx, result, s)


@pytest.mark.parametrize("name", [pytest.param("rot90", marks=pytest.mark.slow), "transpose"])
def test_fit_with_the_rotation_unknown_recovers_orientation_and_rotation(film, name):
    from qora.ssb import fit_session

    fx, data, kw = film
    s = Session(np.ascontiguousarray(OPS[name](data)), **kw)
    result = fit_session(s, tilt=False)
    assert result["orientation"]["orientation"] == ("transpose" if name == "transpose" else "identity")
    # rot90 of the patterns is a scan turned by -90 degrees (measured -89.98)
    assert abs(result["rotation_deg"] - (-90.0 if name == "rot90" else 0.0)) < 0.1, result["rotation_deg"]
    _check_fit(fx, result, s)


@pytest.mark.slow
@pytest.mark.parametrize("which, name", [("film", "rot180"), ("film", "rot17"), ("film", "flip-cols"),
                                         ("srtio3", "identity"), ("srtio3", "rot90"), ("srtio3", "rot180"),
                                         ("srtio3", "rot17"), ("srtio3", "transpose"), ("srtio3", "flip-rows")])
def test_every_orientation_and_a_17_degree_scan_on_both_fixtures(which, name, request):
    from qora.ssb import fit_session, rotate_detector

    fx, data, kw = request.getfixturevalue(which)
    recorded = rotate_detector(data, math.radians(17.0)) if name == "rot17" else OPS[name](data)
    s = Session(np.ascontiguousarray(recorded), **kw)
    result = fit_session(s, tilt=False)
    expected = {"identity": 0.0, "rot90": -90.0, "rot180": -180.0, "rot17": 17.0, "transpose": 0.0,
                "flip-rows": 90.0, "flip-cols": -90.0}[name]
    off = (result["rotation_deg"] - expected + 180.0) % 360.0 - 180.0
    assert abs(off) < 0.1, (name, result["rotation_deg"])  # measured within 0.05
    _check_fit(fx, result, s, c10_tol=8.0)  # SrTiO3: C10 at the mid-plane vs abTEM's entrance (3.9 A)


@pytest.mark.slow
@pytest.mark.parametrize("coarse", [False, True], ids=["whole-band", "thinned-band"])
def test_ten_seeds_in_ten_agree_on_srtio3_with_the_rotation_given(srtio3, coarse):
    """With ``coarse`` the search and the starts run on every 2nd frequency of the band (what a
    full-scale band of 44,000 frequencies gets at every 5th) and finish on the whole band."""
    from qora.ssb import Band, fit_session

    fx, data, kw = srtio3
    s = Session(data, **kw)
    rows = Band(s, ("C10", "C12a", "C12b")).shape[0] // 2 if coarse else 10**9
    fits = [fit_session(s, rotation=0.0, orientation="identity", tilt=False, seed=seed, coarse_rows=rows)
            for seed in range(10)]
    assert all(("standard_coarse" in f["passes"]) == coarse for f in fits)
    c10 = [f["standard"]["parameters"]["C10"] for f in fits]
    c12 = [parameters_to_aberrations(f["standard"]["parameters"]).values["C12"][0] for f in fits]
    assert max(c10) - min(c10) < 0.5 and max(c12) - min(c12) < 0.5, (c10, c12)
    assert abs(np.mean(c10) - float(fx["C10"])) < 8.0
    for f in fits:
        assert all(e["determined"] for e in f["standard"]["identifiability"]["parameters"].values())


class _ToyBand:
    """What identifiability needs of a band: the parameters, the shape and the signal total."""

    parameters = ("a", "b")
    shape = (100, 100)
    total = 1.0


def test_identifiability_needs_a_conditioned_hessian_and_a_clear_gap():
    from qora.ssb.identify import conditioning, gap_needed, identifiability

    # conditioning: independent directions 1, a degenerate pair ~0, a flat direction 0
    assert conditioning(-np.eye(2)) == pytest.approx([1.0, 1.0])
    assert conditioning(-np.array([[1.0, 0.999999], [0.999999, 1.0]])).max() < 1e-5
    assert conditioning(-np.array([[1.0, 0.0], [0.0, 0.0]])).tolist() == [1.0, 0.0]
    assert gap_needed(0.9, 10**6) == pytest.approx(0.05 * 0.1)
    band, h = _ToyBand(), -np.eye(2)
    best = ({"a": 1.0, "b": 2.0}, 0.9, h)
    alone = identifiability(band, [best])
    assert all(e["determined"] and e["sigma"] > 0 for e in alone["parameters"].values())
    assert alone["runner_up"] is None
    # a runner-up as good with another value of b: b is not determined, a (the same in both) is
    close = identifiability(band, [best, ({"a": 1.0, "b": 5.0}, 0.9 - 1e-4, h)])
    assert close["parameters"]["a"]["determined"] and not close["parameters"]["b"]["determined"]
    assert close["parameters"]["b"]["sigma"] is None and "another basin" in close["parameters"]["b"]["why"]
    assert close["runner_up"]["agreement"] == pytest.approx(0.9 - 1e-4)
    # the same runner-up clearly worse: both determined
    worse = identifiability(band, [best, ({"a": 1.0, "b": 5.0}, 0.8, h)])
    assert all(e["determined"] for e in worse["parameters"].values())
    # a flat direction: not determined whatever the basins; the other keeps its standard error
    flat = identifiability(band, [({"a": 1.0, "b": 2.0}, 0.9, np.array([[-1.0, 0.0], [0.0, 0.0]]))])
    assert flat["parameters"]["a"]["determined"] and flat["parameters"]["a"]["sigma"] > 0
    assert not flat["parameters"]["b"]["determined"] and "flat" in flat["parameters"]["b"]["why"]


def _slab(kind):
    from qora.ssb import amorphous_slices, simulate

    n = 48  # a 24 x 24 scan
    if kind == "columnar":  # one layer repeated: a crystal near a zone axis, its tilt observable
        layer = amorphous_slices((n, n), 0.2, atoms_per_a2=0.02, phase_per_atom=0.02, seed=6)[0]
        slices = np.repeat(layer[None], 12, axis=0)
    else:  # a tilted random slab is another random slab
        slices = amorphous_slices((n, n), 0.2, slices=12, atoms_per_a2=0.02, seed=5)
    scan = simulate(slices, pixel=0.2, stride=2, window=48, alpha_mrad=25.0, aberrations=Aberrations(C10=-100.0),
                    thickness=120.0, tilt=(0.008, -0.005))
    return Session(scan.data, kv=300.0, alpha_mrad=25.0, scan_step=scan.scan_step)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["columnar", "amorphous"])
def test_the_thick_fit_reports_the_tilt_of_an_amorphous_slab_as_not_determined(kind):
    from qora.ssb import fit_session

    result = fit_session(_slab(kind), rotation=0.0, orientation="identity", trials=16, starts=1, thick_starts=1)
    report = result["thick"]["identifiability"]["parameters"]
    tilt = [report["tilt_y"], report["tilt_x"]]
    if kind == "columnar":
        assert all(e["determined"] for e in tilt)
        # measured (7.82, -4.88) mrad, intervals 0.66 and 0.64 mrad against a quarter wave of 1.6
        assert abs(tilt[0]["value"] - 0.008) < 1e-3 and abs(tilt[1]["value"] + 0.005) < 1e-3
        assert report["thickness"]["determined"]
    else:
        # a well-conditioned Hessian, but a hill broader than a quarter wave: measured intervals
        # (9.1, 5.7) mrad against 1.7 mrad, the fit at (-13.0, 1.8) mrad for a truth of (8, -5)
        assert not any(e["determined"] for e in tilt), tilt
        assert all(e["sigma"] is None and e["interval"] > e["quarter_wave"] for e in tilt)
        assert all("quarter wave" in e["why"] for e in tilt)


def test_search_orientation_on_the_simulator_with_a_turned_and_mirrored_detector():
    """The simulator's film (C10 = -100 A, 20 A of C12 at 25 degrees) with the scan turned by 17
    degrees, then each of the eight detector operations: the handedness and the rotation (to a
    degree, modulo the turns by 90) from the COM alone."""
    from qora.ssb import amorphous_slices, rotate_detector, simulate

    scan = simulate(amorphous_slices((64, 64), 0.2, seed=3), pixel=0.2, stride=2, window=48,
                    aberrations=Aberrations(C10=-100.0, C12=(20.0, math.radians(25.0))))
    turned = rotate_detector(scan.data, math.radians(17.0))
    for name, op in OPS.items():
        s = Session(np.ascontiguousarray(op(turned)), kv=300.0, alpha_mrad=20.0, scan_step=scan.scan_step)
        found = search_orientation(s)
        mirrored = name in ("transpose", "flip-rows", "antitranspose", "flip-cols")
        assert found["orientation"] == ("transpose" if mirrored else "identity"), (name, found)
        assert found["runner_up_score"] > 2.0 * found["score"], (name, found)
        # relabelled by the found handedness (which undoes the mirror), the frame is the scan's
        # turned by 17 degrees plus a multiple of 90
        degrees = math.degrees(found["rotation_rad"])
        off = (degrees - 17.0 + 45.0) % 90.0 - 45.0
        assert abs(off) < 1.0, (name, degrees)


def test_com_curl_from_the_gram_equals_the_direct_form():
    """The eight orientations' curl forms from one 4 x 4 Gram matrix equal the form built from each
    relabelled spectrum directly (a = qy c'_x - qx c'_y, b = qx c'_x + qy c'_y)."""
    import math

    from qora.ssb.orientation import _MATRIX, ORIENTATIONS, com_curl, curl_gram

    rng = np.random.default_rng(4)
    n = 3000
    qy, qx = rng.normal(size=n), rng.normal(size=n)
    c = rng.normal(size=(n, 2)) + 1j * rng.normal(size=(n, 2))
    c += 2.0 * np.stack([qy, qx], 1) * (1 + 0.5j)  # a gradient part, so the forms differ
    gram = curl_gram(qy, qx, c)
    for name in ORIENTATIONS:
        m = _MATRIX[name]
        cy, cx = m[0, 0] * c[:, 0] + m[0, 1] * c[:, 1], m[1, 0] * c[:, 0] + m[1, 1] * c[:, 1]
        a, b = qy * cx - qx * cy, qx * cx + qy * cy
        form = np.array([[np.vdot(a, a).real, np.vdot(a, b).real], [np.vdot(b, a).real, np.vdot(b, b).real]])
        v = np.array([math.cos(0.4), math.sin(0.4)])
        assert com_curl(qy, qx, c, name, 0.4, gram=gram)[0] == pytest.approx(v @ form @ v / np.trace(form), rel=1e-12)
        least = np.linalg.eigvalsh(form)[0] / np.trace(form)
        assert com_curl(qy, qx, c, name, gram=gram)[0] == pytest.approx(least, rel=1e-12)


def test_phase_skewness_is_the_third_standardised_moment():
    from scipy.stats import skew

    x = np.random.default_rng(2).gamma(2.0, size=(64, 48)).astype(np.float32)
    assert phase_skewness(x) == pytest.approx(skew(x.ravel().astype(np.float64)), rel=1e-10)
    assert phase_skewness(np.full((5, 5), 0.3)) == 0.0


def test_a_thick_crystal_whose_com_rotation_is_wrong_is_checked_over_the_rotation_grid():
    """abTEM's perfect SrTiO3 [001], 101.5 A (tests/ssb/fixtures/abtem_srtio3_ptycho_100a.npz: channelling, a 20 x 20
    scan): the identity frame's centre-of-mass rotation is -25 degrees for a true 0 and no frame's curl is trusted,
    so the orientation check runs over the coarse rotation grid. The default cold-start fit then finds the identity
    frame at 0 degrees and C10 near the mid-plane's (abTEM's defocus -100 A at the entrance: C10 150.8 A there); it
    had chosen the mirrored frame (transpose at -90 degrees) with C10 0.1 A and C12 162 A."""
    from qora.ssb import fit_session

    with np.load(FIXTURES / "abtem_srtio3_ptycho_100a.npz") as f:
        counts, kv, alpha, step = f["counts"], float(f["kv"]), float(f["alpha_mrad"]), float(f["scan_step"])
        mid_plane = float(f["C10"]) + float(f["thickness"]) / 2
    result = fit_session(Session(counts.astype(np.float64), kv=kv, alpha_mrad=alpha, scan_step=step))
    assert result["orientation"]["orientation"] == "identity", result["orientation"]
    assert abs(wrap_angle(math.radians(result["rotation_deg"]), period=math.pi)) < math.radians(1.0)
    fit = result[result["better"]]["parameters"]
    assert abs(fit["C10"] - mid_plane) < 15.0 and math.hypot(fit["C12a"], fit["C12b"]) < 5.0, fit
