"""The Bragg geometry (qora.phase.bragg_geometry) against xrayutilities: detector pixels and rocking frames to Q
for the 34-ID-C six-circle and for diffractometers with the beam along x and y (the reference made by
fixtures/make_xu_bragg_reference.py in xrayutilities' own environment)."""

from pathlib import Path

import numpy as np
import pytest

from qora.io.errors import InputError
from qora.phase.bragg_geometry import CIRCLES_34IDC, BraggGeometry, Circles, rotation

REFERENCE = Path(__file__).parent / "fixtures" / "xu_bragg_reference.npz"
CASES = ("34idc_scan54", "34idc_phi_rocking", "34idc_large_angles", "id01_eta_rocking", "id01_phi_rocking",
         "beam_x_3s2d", "beam_y_2s2d")


def _case(ref, name):
    sample = tuple(str(a) for a in ref[f"{name}/sample_axes"])
    detector = tuple(str(a) for a in ref[f"{name}/detector_axes"])
    circles = Circles(tuple(f"s{i}" for i in range(len(sample))), sample, tuple(f"d{i}" for i in range(len(detector))),
                      detector, tuple(ref[f"{name}/beam"]), tuple(str(a) for a in ref[f"{name}/pixel_directions"]))
    s_angles, d_angles = ref[f"{name}/sample_angles"], ref[f"{name}/detector_angles"]
    rocking = int(np.argmax(np.ptp(s_angles, axis=1)))
    angles = {f"s{i}": float(a[0]) for i, a in enumerate(s_angles)} | {f"d{i}": float(a) for i, a in
                                                                         enumerate(d_angles)}
    en, dist, p0, p1, c0, c1, f0, f1 = ref[f"{name}/scalars"]
    geometry = BraggGeometry(circles, angles, en, dist, (p0, p1), (c0, c1), f"s{rocking}",
                             float(s_angles[rocking, 1] - s_angles[rocking, 0]))
    return geometry, (int(f0), int(f1))


@pytest.mark.parametrize("name", CASES)
def test_q_of_pixels_and_frames_equals_xrayutilities(name):
    with np.load(REFERENCE) as ref:
        geometry, first = _case(ref, name)
        expected = np.moveaxis(ref[f"{name}/q"], 0, -1)  # (frames, rows, cols, 3)
    frames = np.arange(3)[:, None, None]
    rows = first[0] + np.arange(5)[None, :, None]
    cols = first[1] + np.arange(4)[None, None, :]
    q = geometry.q_sample(frames, rows, cols)
    np.testing.assert_allclose(q, expected, rtol=0, atol=1e-10 * np.abs(expected).max())
    # the lab frame: the sample frame turned back by the sample circles
    lab = np.einsum("fij,frcj->frci", geometry.sample_rotation(np.arange(3)), q)
    np.testing.assert_allclose(lab, np.broadcast_to(geometry.q_lab(rows[0], cols[0]), lab.shape), atol=1e-12)


def test_rotations_are_right_handed_and_signed():
    np.testing.assert_allclose(rotation("z+", 90.0) @ [1.0, 0.0, 0.0], [0.0, 1.0, 0.0], atol=1e-15)
    np.testing.assert_allclose(rotation("x-", 90.0) @ [0.0, 1.0, 0.0], [0.0, 0.0, -1.0], atol=1e-15)
    np.testing.assert_allclose(rotation("y+", 90.0) @ [0.0, 0.0, 1.0], [1.0, 0.0, 0.0], atol=1e-15)


def test_a_pixel_on_the_beam_at_zero_angles_scatters_nothing():
    g = BraggGeometry(CIRCLES_34IDC, dict(Theta=0.0, Chi=0.0, Phi=0.0, Delta=0.0, Gamma=0.0), 9000.0, 0.5,
                      (55e-6, 55e-6), (256.0, 256.0), "Theta", 0.01)
    np.testing.assert_allclose(g.q_lab(256, 256), 0.0, atol=1e-15)
    # 2 theta of 30 degrees on Delta: |Q| = 4 pi sin(15 deg) / lambda
    g.angles["Delta"] = 30.0
    assert np.linalg.norm(g.q_lab(256, 256)) == pytest.approx(4 * np.pi * np.sin(np.deg2rad(15)) / g.wavelength_a)


def test_the_geometry_refuses_what_it_cannot_use():
    angles = dict(Theta=0.0, Chi=0.0, Phi=0.0, Delta=0.0, Gamma=0.0)
    with pytest.raises(InputError, match="missing Gamma"):
        BraggGeometry(CIRCLES_34IDC, {k: v for k, v in angles.items() if k != "Gamma"}, 9000.0, 0.5, (5e-5, 5e-5),
                      (0, 0), "Theta", 0.01)
    with pytest.raises(InputError, match="rocking circle must be a sample circle"):
        BraggGeometry(CIRCLES_34IDC, angles, 9000.0, 0.5, (5e-5, 5e-5), (0, 0), "Delta", 0.01)
    with pytest.raises(InputError, match="energy_ev must be positive"):
        BraggGeometry(CIRCLES_34IDC, angles, -1.0, 0.5, (5e-5, 5e-5), (0, 0), "Theta", 0.01)
    with pytest.raises(InputError, match="x\\+, x-"):
        Circles(("a",), ("w+",), (), ())


def test_the_bases_are_the_geometry_differentiated_and_dual():
    with np.load(REFERENCE) as ref:
        geometry, first = _case(ref, "34idc_scan54")
        q = np.moveaxis(ref["34idc_scan54/q"], 0, -1)  # (frames, rows, cols, 3), sample frame
    b = geometry.reciprocal_basis(1, first[0] + 2, first[1] + 1, lab=False)
    # against xrayutilities' own neighbours: one frame, one row and one column apart (second-order accurate)
    np.testing.assert_allclose(b[:, 0], (q[2, 2, 1] - q[0, 2, 1]) / 2, rtol=1e-6)
    np.testing.assert_allclose(b[:, 1], (q[1, 3, 1] - q[1, 1, 1]) / 2, rtol=1e-6)
    np.testing.assert_allclose(b[:, 2], (q[1, 2, 2] - q[1, 2, 0]) / 2, rtol=1e-6)
    shape = (201, 256, 256)
    a = geometry.direct_basis(shape, 1, first[0] + 2, first[1] + 1, lab=False)
    np.testing.assert_allclose(a.T @ b, 2 * np.pi * np.diag(1 / np.array(shape)), atol=1e-12)
    # the lab-frame bases are the sample frame's turned by the sample circles at that frame
    turn = geometry.sample_rotation(1)
    np.testing.assert_allclose(geometry.reciprocal_basis(1, first[0] + 2, first[1] + 1), turn @ b, atol=1e-15)


def test_the_beamline_constants_are_the_ones_xrayutilities_checked():
    """CIRCLES_34IDC and CIRCLES_ID01 (sample and detector axes, beam, pixel directions) are the circles of the
    reference's 34-ID-C and ID01 cases: the constants a user's scan gets are the checked ones."""
    from qora.phase.bragg_geometry import CIRCLES_ID01

    with np.load(REFERENCE) as ref:
        for circles, names in ((CIRCLES_34IDC, ("34idc_scan54", "34idc_phi_rocking", "34idc_large_angles")),
                               (CIRCLES_ID01, ("id01_eta_rocking", "id01_phi_rocking"))):
            for name in names:
                assert tuple(str(a) for a in ref[f"{name}/sample_axes"]) == circles.sample_axes, name
                assert tuple(str(a) for a in ref[f"{name}/detector_axes"]) == circles.detector_axes, name
                assert tuple(ref[f"{name}/beam"]) == tuple(circles.beam), name
                assert tuple(str(a) for a in ref[f"{name}/pixel_directions"]) == circles.pixel_directions, name
