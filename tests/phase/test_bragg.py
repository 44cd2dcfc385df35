"""From a phased Bragg object to the strain (qora.phase.bragg): a faceted crystal with a known displacement field,
its Bragg intensities in the detector's frame by the 34-ID-C geometry, Poisson counts, phased by the default
recipe's stages, then the twin and position registered, the ramp removed, the object put on an orthogonal lab grid
and the strain along G taken: within 1e-4 RMS of the analytic strain inside the support."""

import numpy as np
import pytest
from scipy.ndimage import binary_erosion

from qora.io.errors import InputError
from qora.phase import reconstruct
from qora.phase.bragg import (array_object, displacement_along, orthogonal_grid, phase_gradient, remove_ramp,
                              strain_along, unwrap_in_support)
from qora.phase.bragg_geometry import CIRCLES_34IDC, BraggGeometry
from qora.phase.recipe import DEFAULT_RECIPE

SHAPE, PEAK = (64, 64, 64), (99, 126, 127)
HALF, SCALE, EPS0 = 1500.0, 2000.0, 1e-3  # A: the crystal's half width, the strain's length scale; strain scale


def _geometry():
    """34-ID-C at scan 54's angles (9 keV, 0.5 m, theta rocking by 0.005 degrees)."""
    return BraggGeometry(CIRCLES_34IDC, dict(Theta=-0.28, Chi=90.0, Phi=-5.0, Delta=32.174, Gamma=12.6346), 9000.0,
                         0.5, (55e-6, 55e-6), (256.0, 256.0), "Theta", 0.005)


def _crystal(g_hat):
    """A faceted crystal (a cube with its corners and one edge cut: not centrosymmetric), its displacement and its
    strain along G, EPS0 (s / SCALE + (s / SCALE)^2 - m): m makes the strain's mean over the crystal 0, as the
    ramp's removal does (the mean strain is the peak's position, a d-spacing, not the phase's)."""
    def density(x):
        r = np.abs(x)
        return ((r.max(-1) < HALF) & (r.sum(-1) < 1.6 * HALF) & (x @ np.array([1.0, 1.0, -1.0]) < 1.2 * HALF)) * 1.0

    grid = np.stack(np.meshgrid(*[np.linspace(-HALF, HALF, 61)] * 3, indexing="ij"), -1)
    inside = density(grid) > 0
    s_in = grid[inside] @ g_hat / SCALE
    mean = float(np.mean(s_in + s_in**2))

    def displacement(x):  # u_G, and a transverse part G does not see
        s = x @ g_hat
        along = EPS0 * (s**2 / (2 * SCALE) + s**3 / (3 * SCALE**2) - mean * s)
        return along[..., None] * g_hat + 0.3 * np.sin(x[..., :1] / 700.0) * np.cross(g_hat, [0.0, 0.0, 1.0])

    def strain(x):
        s = x @ g_hat / SCALE
        return EPS0 * (s + s**2 - mean)

    return density, displacement, strain


def _strain_error(obj, support, basis, g_lab, strain):
    flat, _ = remove_ramp(obj, support)
    lab, kept, voxel, origin = orthogonal_grid(flat, support, basis)
    eps = strain_along(lab, kept, voxel, g_lab)
    axes = [origin[i] + voxel * np.arange(lab.shape[i]) for i in range(3)]
    truth = strain(np.stack(np.meshgrid(*axes, indexing="ij"), -1))
    inner = binary_erosion(kept, iterations=2) & np.isfinite(eps)
    return eps[inner] - truth[inner]


def _registered(obj, support, reference):
    """``obj`` or its twin conj(obj(-r)), whichever overlaps ``reference``'s modulus best, shifted onto it: one
    reflection cannot tell the two apart (docs/phase.md)."""
    best = None
    for twin in (False, True):
        o, s = (np.conj(obj[::-1, ::-1, ::-1]), support[::-1, ::-1, ::-1]) if twin else (obj, support)
        corr = np.fft.ifftn(np.fft.fftn(np.abs(reference)) * np.conj(np.fft.fftn(np.abs(o)))).real
        shift = np.unravel_index(np.argmax(corr), corr.shape)
        if best is None or corr.max() > best[0]:
            best = (corr.max(), np.roll(o, shift, (0, 1, 2)), np.roll(s, shift, (0, 1, 2)))
    return best[1], best[2]


def test_strain_of_a_phased_simulated_crystal_within_1e_4():
    g = _geometry()
    basis = g.direct_basis(SHAPE, *PEAK)
    g_lab = g.q_lab(PEAK[1], PEAK[2])
    density, displacement, strain = _crystal(g_lab / np.linalg.norm(g_lab))
    truth = array_object(density, displacement, basis, SHAPE, g_lab)
    support = np.abs(truth) > 0.5
    # without phasing: the object as it is (a global phase and a ramp added)
    err = _strain_error(truth * np.exp(1j * (0.7 + 0.05 * np.indices(SHAPE)[0])), support, basis, g_lab, strain)
    assert np.sqrt(np.mean(err**2)) < 1e-4 and np.std(err) < 1e-5  # measured 1.7e-5 RMS, 5.1e-6 about its mean
    # phased from Poisson counts (1e9 photons) by the default recipe's stages, complex (no real constraint)
    amplitude = np.fft.fftshift(np.fft.fftn(np.fft.ifftshift(truth)))
    counts = np.random.default_rng(0).poisson(np.abs(amplitude) ** 2 / np.sum(np.abs(amplitude) ** 2) * 1e9)
    result = reconstruct(counts.astype(np.float64), backend="cpu", starts=1, seed=1, recipe=DEFAULT_RECIPE)
    assert result.fourier_error < 0.02  # measured 0.008
    obj, found = _registered(result.object, result.support, truth)
    err = _strain_error(obj, found, basis, g_lab, strain)
    # measured 1.8e-5 RMS, 8.8e-6 about its mean (the mean, 1.5e-5: the ramp's mean over the array's voxels, not
    # the crystal's volume)
    assert np.sqrt(np.mean(err**2)) < 1e-4 and np.std(err) < 2e-5


def test_ramp_gradient_and_displacement_on_analytic_fields():
    shape = (12, 14, 16)
    support = np.zeros(shape, bool)
    support[2:-2, 3:-3, 2:-2] = True
    idx = np.indices(shape).astype(float)
    phase = 0.2 * idx[0] - 0.1 * idx[1] + 0.05 * idx[2] + 1.3
    flat, ramp = remove_ramp(np.exp(1j * phase) * support, support)
    np.testing.assert_allclose(ramp, [0.2, -0.1, 0.05], atol=1e-12)
    np.testing.assert_allclose(np.angle(flat[support]), 0.0, atol=1e-12)
    # a quadratic phase: central differences exact in the interior, one-sided at the edge, NaN outside
    quad = np.exp(1j * 0.01 * idx[0] ** 2) * support
    grad = phase_gradient(quad, support, voxel=2.0)
    inner = support.copy()
    inner[[2, -3]] = False
    np.testing.assert_allclose(grad[0][inner], (0.02 * idx[0] / 2.0)[inner], atol=1e-12)
    assert np.isnan(grad[0][~support]).all() and np.isfinite(grad[0][support]).all()
    assert displacement_along(np.pi, [0.0, 0.0, 2.0]) == pytest.approx(-np.pi / 2)


def test_bragg_postprocessing_refuses_bad_input():
    with pytest.raises(InputError, match="3D arrays of one shape"):
        remove_ramp(np.ones((4, 4)), np.ones((4, 4), bool))
    with pytest.raises(InputError, match="support is empty"):
        remove_ramp(np.ones((4, 4, 4)), np.zeros((4, 4, 4), bool))
    with pytest.raises(InputError, match="invertible 3 x 3"):
        orthogonal_grid(np.ones((4, 4, 4)), np.ones((4, 4, 4), bool), np.zeros((3, 3)))
    with pytest.raises(InputError, match="must not be zero"):
        strain_along(np.ones((4, 4, 4)), np.ones((4, 4, 4), bool), 1.0, [0, 0, 0])


def test_qora_phase_bragg_from_raw_frames_to_strain(tmp_path):
    """The one command on a simulated 34-ID-C scan: TIFF frames of Poisson counts (the crystal above, its
    intensities through the scan's geometry around detector pixel (126, 127)) and a SPEC file; the strain map it
    writes within 1e-4 RMS of the analytic strain inside the support (the twin and the position, which phasing
    cannot fix, registered against the truth first)."""
    import h5py
    from click.testing import CliRunner

    from bragg_files import rocking_spec, write_frames
    from qora.cli import cli
    from qora.phase import geometry_34idc

    shape, roi = (64, 64, 64), (94, 95)
    spec = rocking_spec(tmp_path / "scan.spec", frames=shape[0], start=-0.28, step=0.005)
    g = geometry_34idc(spec, 54, frames=shape[0], roi=roi)
    centre = [(n - 1) / 2 for n in shape]
    basis, g_lab = g.direct_basis(shape, *centre), g.q_lab(centre[1], centre[2])
    density, displacement, strain = _crystal(g_lab / np.linalg.norm(g_lab))
    truth = array_object(density, displacement, basis, shape, g_lab)
    amplitude = np.abs(np.fft.fftshift(np.fft.fftn(np.fft.ifftshift(truth)))) ** 2
    counts = np.random.default_rng(0).poisson(amplitude / amplitude.sum() * 1e9).astype(np.int32)
    folder = write_frames(tmp_path / "S0054", counts)
    out = tmp_path / "strain.h5"
    run = CliRunner().invoke(cli, ["phase", "bragg", str(folder), "--spec", str(spec), "--scan", "54", "--roi",
                                   str(roi[0]), str(roi[1]), "--starts", "1", "--backend", "cpu", "--quiet",
                                   "--keep", "0.999",  # the whole simulated scan in the box: the truth's own grid
                                   "--out", str(out), "--vti", str(tmp_path / "strain.vti"),
                                   "--plot", str(tmp_path / "strain.png"), "--hkl", "1", "1", "1", "--lattice",
                                   "4.0782"])
    assert run.exit_code == 0, run.output
    assert f"(111): d_ref {4.0782 / np.sqrt(3):.4f} A, lattice strain" in run.output
    assert "d = " in run.output and "strain" in run.output and (tmp_path / "strain.vti").stat().st_size > 0
    assert (tmp_path / "strain.png").read_bytes()[:4] == b"\x89PNG"
    with h5py.File(out) as f:
        rotation = f["crystal/lab_to_crystal"][...]
        assert f.attrs["d_ref_a"] == pytest.approx(4.0782 / np.sqrt(3)) and list(f.attrs["hkl"]) == [1, 1, 1]
        obj, support, eps = f["obj"][...], f["support"][...], f["strain"][...]
        lab_support, voxel, origin = f["lab_support"][...], f.attrs["voxel_a"], f.attrs["origin_a"]
        window = tuple(int(w) for w in f.attrs["window"])
    assert obj.shape == shape and window == (0, 0, 0)  # the box holds the whole simulated scan here
    # which twin and where: the array-frame object registered on the truth, then the truth's strain evaluated
    # where the command's lab grid says each voxel is
    twin, shift = _registration(obj, truth)
    axes = [origin[i] + voxel * np.arange(eps.shape[i]) for i in range(3)]
    x = np.stack(np.meshgrid(*axes, indexing="ij"), -1)
    moved = basis @ np.asarray(shift, np.float64)
    expected = strain((-x if twin else x) + moved)
    inner = binary_erosion(lab_support, iterations=2) & np.isfinite(eps)
    err = eps[inner] - expected[inner]
    assert inner.sum() > 300 and np.sqrt(np.mean(err**2)) < 1e-4  # measured 3.0e-5 over 882 voxels
    # the displacement along G (the phase unwrapped): the truth's up to the twin's sign, a constant and the ramp's
    # linear part, which the affine fit below takes out
    with h5py.File(out) as f:
        u = f["displacement"][...]
    g_hat = g_lab / np.linalg.norm(g_lab)
    u_true = (displacement((-x if twin else x) + moved) @ g_hat) * (-1.0 if twin else 1.0)
    inside = binary_erosion(lab_support, iterations=2) & np.isfinite(u)  # the edge's voxels are interpolated
    design = np.column_stack([np.ones(inside.sum()), x[inside]])
    residual = u[inside] - u_true[inside]
    residual -= design @ np.linalg.lstsq(design, residual, rcond=None)[0]
    assert np.sqrt(np.mean(residual**2)) < 0.01  # measured 1.4e-3 A over 794 voxels, where u_G spans 0.32 A


def _registration(obj, reference):
    """(twin, shift): the array-frame candidate (obj, or conj(obj) mirrored about the array's centre) that, rolled
    by ``shift`` voxels, overlaps ``reference``'s modulus best."""
    best = None
    for twin in (False, True):
        o = np.conj(obj[::-1, ::-1, ::-1]) if twin else obj
        corr = np.fft.ifftn(np.fft.fftn(np.abs(reference)) * np.conj(np.fft.fftn(np.abs(o)))).real
        shift = np.array(np.unravel_index(np.argmax(corr), corr.shape))
        shift = np.where(shift > np.array(obj.shape) // 2, shift - np.array(obj.shape), shift)
        if best is None or corr.max() > best[0]:
            best = (corr.max(), twin, shift)
    return best[1], best[2]


def test_unwrapping_in_a_faceted_support_recovers_a_phase_of_several_turns():
    idx = np.indices((30, 32, 28)).astype(float) - np.array([15.0, 16.0, 14.0])[:, None, None, None]
    support = (np.abs(idx).max(0) < 11) & (idx.sum(0) < 14)  # a cut cube
    phase = 0.05 * idx[0] ** 2 + 0.6 * idx[1] - 0.01 * idx[0] * idx[2]  # about 3 turns across
    modulus = 1.0 + 0.2 * np.cos(idx[2])
    found = unwrap_in_support(modulus * np.exp(1j * phase), support)
    offset = found[support] - phase[support]
    np.testing.assert_allclose(offset, offset[0], atol=1e-9)
    assert abs(offset[0] / (2 * np.pi) - round(offset[0] / (2 * np.pi))) < 1e-9  # whole turns only
    assert np.isnan(found[~support]).all() and np.ptp(phase[support]) > 4 * np.pi


def test_the_support_surface_is_its_outer_voxel_faces():
    """The 3D figure's surface: a lone voxel has 6 faces, a 2 x 1 x 1 block 10, a 3^3 cube with a hollow centre its
    54 outer faces and the cavity's 6 (the cavity is outside the support), each face a square of the voxel's side,
    coloured by its inside voxel's value."""
    from qora.phase.bragg_scan import support_faces

    one = np.zeros((3, 3, 3), bool)
    one[1, 1, 1] = True
    quads, colours = support_faces(one, np.full((3, 3, 3), 7.0), 2.0, (10.0, 0.0, 0.0))
    assert quads.shape == (6, 4, 3) and np.all(colours == 7.0)
    centres = quads.mean(1)
    np.testing.assert_allclose(np.sort(np.abs(centres - [12.0, 2.0, 2.0]).sum(1)), 1.0)  # each 1 nm from the centre
    sides = np.linalg.norm(quads[:, 1] - quads[:, 0], axis=1)
    np.testing.assert_allclose(sides, 2.0)
    two = np.zeros((4, 3, 3), bool)
    two[1:3, 1, 1] = True
    assert len(support_faces(two, np.zeros((4, 3, 3)), 1.0, (0, 0, 0))[0]) == 10
    hollow = np.ones((3, 3, 3), bool)
    hollow[1, 1, 1] = False
    assert len(support_faces(hollow, np.zeros((3, 3, 3)), 1.0, (0, 0, 0))[0]) == 54 + 6


def test_the_named_reflection_gives_the_lattice_strain_and_a_crystal_frame():
    """reciprocal_metric against the textbook: a cubic cell's B is 2 pi / a times the identity, a hexagonal one's
    |b1| = 4 pi / (sqrt 3 a); gold's (111) at a = 4.0782 A has d = a / sqrt 3; the frame takes G_lab to the
    crystal's [111] direction and is a rotation; bad input is refused."""
    from qora.io.errors import InputError
    from qora.phase import reciprocal_metric, reflection_frame

    np.testing.assert_allclose(reciprocal_metric(4.0), 2 * np.pi / 4.0 * np.eye(3), atol=1e-12)
    hexagonal = reciprocal_metric((3.0, 3.0, 5.0, 90, 90, 120))
    assert np.linalg.norm(hexagonal[:, 0]) == pytest.approx(4 * np.pi / (np.sqrt(3) * 3.0))
    assert np.linalg.norm(hexagonal[:, 2]) == pytest.approx(2 * np.pi / 5.0)
    a = 4.0782
    d_measured = 2.3672
    g_lab = 2 * np.pi / d_measured * np.array([0.3, -0.5, 0.81]) / np.linalg.norm([0.3, -0.5, 0.81])
    frame = reflection_frame(g_lab, (1, 1, 1), a)
    assert frame["d_ref_a"] == pytest.approx(a / np.sqrt(3))
    assert frame["lattice_strain"] == pytest.approx((d_measured - a / np.sqrt(3)) / (a / np.sqrt(3)))
    rotation = np.asarray(frame["lab_to_crystal"])
    np.testing.assert_allclose(rotation @ rotation.T, np.eye(3), atol=1e-12)
    assert np.linalg.det(rotation) == pytest.approx(1.0)
    np.testing.assert_allclose(rotation @ (g_lab / np.linalg.norm(g_lab)), np.ones(3) / np.sqrt(3), atol=1e-12)
    with pytest.raises(InputError, match="Miller"):
        reflection_frame(g_lab, (0, 0, 0), a)
    with pytest.raises(InputError, match="lattice"):
        reciprocal_metric((1.0, 2.0))
