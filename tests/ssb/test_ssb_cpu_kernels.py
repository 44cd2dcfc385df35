"""The band's Numba loops (qora.ssb.cpu_kernels) against the float64 array code they replace on the CPU:
the batched agreement (standard and thick sets), the exact derivatives, the rotation's soft-edged
moments, and the agreement of many (rotation, set) pairs in one pass."""

import numpy as np
import pytest

from qora.ssb import Aberrations, Band, Session, amorphous_slices, combine_batch_moments, combine_moments, simulate
from qora.ssb import cpu_kernels

QUADRATIC = ("C10", "C12a", "C12b")
THICK = QUADRATIC + ("thickness", "tilt_y", "tilt_x")


@pytest.fixture(scope="module")
def session():
    # small: a 20 x 20 scan on a 32 x 32 detector (the loops compile once per process, cached on disk)
    scan = simulate(amorphous_slices((40, 40), 0.2, atoms_per_a2=0.1, seed=2), pixel=0.2, stride=2, window=32,
                    alpha_mrad=20.0, aberrations=Aberrations(C10=-80.0, C12=(15.0, 0.4)))
    return Session(scan.data, kv=300.0, alpha_mrad=20.0, scan_step=scan.scan_step)


def _sets(thick: bool):
    sets = [{"C10": -80.0 + 23.0 * i, "C12a": 9.0 - 4.0 * i, "C12b": -6.0 + 5.0 * i} for i in range(5)]
    if thick:  # thickness 0 and u in the sinc's series range too
        sets = [{**v, "thickness": [0.0, 1e-3, 40.0, 120.0, 300.0][i], "tilt_y": 0.002 * i, "tilt_x": -0.003}
                for i, v in enumerate(sets)]
    return sets


def _compare(kernel: dict, arrays: dict, total: float):
    a1, g1, h1 = combine_moments(kernel, total)
    a2, g2, h2 = combine_moments(arrays, total)
    assert a1 == pytest.approx(a2, rel=1e-11, abs=1e-13)
    np.testing.assert_allclose(g1, g2, rtol=1e-9, atol=1e-10 * np.abs(g2).max())
    np.testing.assert_allclose(h1, h2, rtol=1e-8, atol=1e-9 * np.abs(h2).max())


@pytest.mark.parametrize("names", [QUADRATIC, THICK, ("C10",), ("C12b", "C10")])
def test_batched_agreement_matches_the_array_code(session, names):
    band = Band(session, names, rotation=0.37)
    assert band.xp is np and band.quadratic_kernels  # the host's loops are this band's route
    sets = _sets("thickness" in names)
    raw = band._quadratic_raw(sets)
    ref = band._batch_arrays(sets)
    np.testing.assert_allclose(raw[..., 0] + 1j * raw[..., 1], ref["S"], rtol=0, atol=1e-11 * np.abs(ref["S"]).max())
    np.testing.assert_allclose(raw[..., 2], ref["N"], rtol=0, atol=1e-11 * ref["N"].max())
    np.testing.assert_allclose(band.evaluate_batch(sets), combine_batch_moments(ref, band.total), rtol=1e-11)


@pytest.mark.parametrize("names", [QUADRATIC, THICK, ("C10", "thickness")])
def test_exact_derivatives_match_the_array_code(session, names):
    band = Band(session, names, rotation=-0.2)
    for v in _sets("thickness" in names)[:4]:
        _compare(band._kernel_moments(v, 2), band._array_moments(v, 2), band.total)
        assert band.evaluate(v, order=0) == pytest.approx(combine_moments(band._array_moments(v, 0), band.total, 0),
                                                          rel=1e-12)


@pytest.mark.parametrize("names", [QUADRATIC + ("rotation",), ("rotation", "C10"), ("C12a", "rotation")])
def test_rotation_moments_match_the_array_code(session, names):
    band = Band(session, names, rotation=0.1)
    assert band.rotation_kernel
    for v in ({"C10": -75.0, "C12a": 11.0, "C12b": 4.0, "rotation": 0.12}, {"C10": 40.0, "rotation": -1.3}):
        _compare(band._rotation_moments(v, 2), band._array_moments(v, 2), band.total)
        assert band.evaluate(v, order=0) == pytest.approx(combine_moments(band._array_moments(v, 0), band.total, 0),
                                                          rel=1e-12)


def test_thick_bands_fitting_the_rotation_keep_the_array_code(session):
    band = Band(session, THICK + ("rotation",))
    assert not band.rotation_kernel and not band.quadratic_kernels


def test_agreement_over_rotations_and_sets_in_one_pass(session):
    band = Band(session, QUADRATIC, rotation=0.0)
    rotations = np.deg2rad([-90.0, -17.0, 0.0, 33.0, 84.0])
    sets = [{"C10": c} for c in (-200.0, -80.0, 0.0, 120.0)] + [{"C10": -80.0, "C12a": 15.0}]
    before = dict(band.passes)
    grid = band.evaluate_rotations(rotations, sets)
    assert band.passes["batch"] == before["batch"] + 1
    assert band._geometry_for == 0.0  # the band's own rotation is left as it was
    ref = [[combine_moments(Band(session, QUADRATIC, rotation=t)._array_moments(v, 0), band.total, 0) for v in sets]
           for t in rotations]
    np.testing.assert_allclose(grid, ref, rtol=1e-11)
    assert np.argmax(grid[:, 1]) == 2  # the truth's rotation and defocus
    with pytest.raises(ValueError, match="evaluate_rotations"):
        Band(session, QUADRATIC + ("rotation",)).evaluate_rotations(rotations, sets)


def test_grid_columns_fill_a_skipped_row_and_pass_over_a_pixel_off_the_grid():
    cell = np.array([0, 1 | (1 << 16), 2, 2 | (2 << 16)], np.int32)  # (row, column) (0, 0) (1, 1) (2, 0) (2, 2)
    krow = np.array([-0.2, 0.05, 0.2])  # one row off any even spacing: no grid, the array code
    assert cpu_kernels.grid_columns((krow, np.array([-0.1, 0.0, 0.1]), cell)) is None
    krow = np.array([-0.2, 0.0, 0.4])  # a skipped row at 0.2
    rows, cols, row_of, col_of = cpu_kernels.grid_columns((krow, np.array([-0.1, 0.0, 0.1]), cell))
    np.testing.assert_allclose(rows, [-0.2, 0.0, 0.2, 0.4])
    np.testing.assert_array_equal(row_of, [0, 1, 3, 3])
    np.testing.assert_array_equal(col_of, [0, 1, 0, 2])


def test_phase_tables_stepped_between_anchors_equal_direct_phasors():
    kk = -0.9 + 0.018 * np.arange(101)
    table = np.empty((101, 2), np.complex128)
    sets = np.array([[350.0, -40.0, 25.0, 0, 0, 0], [-500.0, 60.0, -60.0, 0, 0, 0]])
    w = np.empty(2, np.complex128)
    cpu_kernels.quadratic_tables(sets, 0.0197, 0.6, -0.45, kk, kk, table, table.copy(), w)
    pl = np.pi * 0.0197
    vy = pl * ((sets[:, 0] - sets[:, 1]) * 0.6 + sets[:, 2] * -0.45)
    np.testing.assert_allclose(table, np.exp(2j * kk[:, None] * vy[None]), rtol=0, atol=1e-13)


def test_num_threads_reads_the_environment(monkeypatch):
    from qora.backend.host import cpu_count, num_threads

    monkeypatch.delenv("QORA_NUM_THREADS", raising=False)
    assert num_threads() == cpu_count()
    monkeypatch.setenv("QORA_NUM_THREADS", "1")
    assert num_threads() == 1 and cpu_kernels.set_threads() == 1
    for bad in ("0", "two"):
        monkeypatch.setenv("QORA_NUM_THREADS", bad)
        with pytest.raises(ValueError, match="QORA_NUM_THREADS"):
            num_threads()


def test_defocus_search_gives_the_host_loops_the_whole_grid_in_one_pass(session):
    from qora.ssb import defocus_search

    band = Band(session, ("C10",), rotation=0.0)
    c10, values = defocus_search(band, low=-400.0, high=400.0, step=20.0)
    assert band.passes["batch"] == 1 and len(values) == 41
    assert abs(c10 - -80.0) <= 20.0
    eight = Band(session, ("C10",), rotation=0.0)
    c10_8, values_8 = defocus_search(eight, low=-400.0, high=400.0, step=20.0, batch=8)
    assert eight.passes["batch"] == 6 and c10_8 == c10
    np.testing.assert_allclose(values_8, values, rtol=1e-12)


@pytest.mark.parametrize("names", [QUADRATIC, THICK, ("C12b", "thickness", "C10")])
def test_sums_over_q_give_combine_moments(session, names):
    """The device's route (kernels.derivative_sums: each Q's terms of the agreement, its gradient and
    the Hessian's pairs, summed over Q; moments.agreement_from_sums) written here in NumPy on the
    host loops' kernel output, against combine_moments of the same moments, in the band's order."""
    from qora.ssb.moments import agreement_from_sums

    band = Band(session, names, rotation=0.3)
    nk = 6 if band.thick else 3
    v = _sets(band.thick)[2]
    r = band._derivative_raw(v)
    S, N = r[:, 0] + 1j * r[:, 1], np.maximum(r[:, 2], 1e-300)
    Sp = np.stack([r[:, 3 + 3 * a] + 1j * r[:, 4 + 3 * a] for a in range(nk)])
    Np = np.stack([r[:, 5 + 3 * a] for a in range(nk)])
    P, Pp = np.abs(S) ** 2, 2 * np.real(np.conj(S) * Sp)
    terms = [P / N] + list(Pp / N - P * Np / N**2)
    m = 0
    for a in range(nk):
        for b in range(a, nk):
            Sab = r[:, 3 + 3 * nk + 3 * m] + 1j * r[:, 4 + 3 * nk + 3 * m]
            Pab = 2 * np.real(np.conj(Sp[b]) * Sp[a] + np.conj(S) * Sab)
            Nab = r[:, 5 + 3 * nk + 3 * m]
            terms.append(Pab / N - (Pp[a] * Np[b] + Pp[b] * Np[a]) / N**2 - P * Nab / N**2
                         + 2 * P * Np[a] * Np[b] / N**3)
            m += 1
    sums = np.array([t.sum() for t in terms])
    value, grad, hess = agreement_from_sums(sums, THICK[:nk], band.parameters, band.total)
    ref = combine_moments(band.moments(v, order=2), band.total, 2)
    assert value == pytest.approx(ref[0], rel=1e-12)
    np.testing.assert_allclose(grad, ref[1], rtol=1e-10, atol=1e-12 * np.abs(ref[1]).max())
    np.testing.assert_allclose(hess, ref[2], rtol=1e-10, atol=1e-12 * np.abs(ref[2]).max())
    assert agreement_from_sums(sums, THICK[:nk], band.parameters, band.total, 0) == value
