"""The depth-incoherent thick model (qora.ssb.depth) against the simulator's own films: the 120 A
amorphous film whose C10 the columnar model biases, the columnar slab it must leave right, and
the exactness of the model (derivatives, its one-section and zero-thickness limits)."""

import numpy as np
import pytest

from qora.io.errors import InputError
from qora.ssb import Aberrations, Band, Session, amorphous_slices, defocus_search, newton, scan_truth, simulate
from qora.ssb.depth import (IncoherentBand, auto_sections, depth_coherence, depth_of_field, depth_sections,
                            fit_incoherent, section_depths)
from qora.testing import DeviceArray, DeviceXp

PIXEL, KV, ALPHA, C10, THICKNESS = 0.25, 300.0, 25.0, -100.0, 120.0


def _session(slices, tilt=(0.0, 0.0), aberrations=None, thickness=THICKNESS, field=64, window=32):
    scan = simulate(slices, pixel=PIXEL, stride=2, window=window, alpha_mrad=ALPHA,
                    aberrations=aberrations or Aberrations(C10=C10), thickness=thickness, tilt=tilt)
    return Session(scan.data, kv=KV, alpha_mrad=ALPHA, scan_step=scan.scan_step), scan


@pytest.fixture(scope="module")
def amorphous():
    """The simulator's amorphous film: 12 independent slices over 120 A, C10 -100 A at the mid-plane."""
    return _session(amorphous_slices((64, 64), PIXEL, slices=12, atoms_per_a2=0.02, seed=5))[0]


@pytest.fixture(scope="module")
def small():
    """A small astigmatic film for the exactness checks (a 16 x 16 scan)."""
    slices = amorphous_slices((32, 32), PIXEL, slices=4, atoms_per_a2=0.03, seed=2)
    return _session(slices, aberrations=Aberrations(C10=-80.0, C12=(10.0, 0.3)), thickness=60.0, window=24)[0]


def test_the_values_loop_equals_the_sums_loop_set_by_set(small):
    """depth_loops.incoherent_values (each set's phasors and each thickness's depth phasors from the detector
    grid's row and column tables, the sections' weights once per run of one thickness) against incoherent_sums of
    each set alone (every phasor and weight by its own sincos): runs of one thickness (AX from their shared sums),
    a thickness changing between sets, a thickness of 0, and two curves' evenly spaced points."""
    from qora.ssb import depth_loops

    band = IncoherentBand(small, ("C10", "C12a", "C12b", "thickness"), sections=4)
    assert band.transfers == "loops"
    v = {"C10": -75.0, "C12a": 6.0, "C12b": 2.0, "thickness": 50.0}
    sets = [v, {**v, "C10": -70.0}, {**v, "C12b": -3.0}, {**v, "thickness": 20.0}, {**v, "thickness": 0.0}, v]
    sets += [{**v, "C10": x} for x in np.linspace(-95.0, -55.0, 21)] + [{**v, "C12a": x} for x in np.linspace(0, 12, 5)]
    runs = depth_loops.shared_runs([x["thickness"] for x in sets])  # AX from a run's shared sums: two runs here
    assert list(runs[:6]) == [0, 0, 0, -1, -1, 1] and set(runs[5:]) == {1}
    sX, AX = band._values_sums(sets)
    nq, m = band.G.shape[0], band.sections
    for i, values in enumerate(sets):
        ref_s = np.empty((nq, 1, m), np.complex128)
        ref_a = np.empty((nq, 1, m, m), np.complex128)
        depth_loops.incoherent_sums(G=band.G, qy=band._qy_flat, qx=band._qx_flat, order=0, sX=ref_s, AX=ref_a, B=None,
                                    **band._kernel_arguments(values))
        scale = np.abs(ref_a).max()
        np.testing.assert_allclose(sX[i], ref_s[:, 0], rtol=0, atol=1e-12 * np.abs(ref_s).max(), err_msg=str(i))
        np.testing.assert_allclose(AX[i], ref_a[:, 0], rtol=0, atol=1e-12 * scale, err_msg=str(i))
    values = band.evaluate_batch(sets)
    assert values[0] == values[5] and values[0] != values[1]
    np.testing.assert_allclose(values, [band.evaluate(x, order=0) for x in sets], rtol=1e-13)


def test_pixels_off_a_grid_take_the_array_code(small, monkeypatch):
    """The host's value loop reads each set's phasors from the detector grid's row and column tables: where k's rows
    or columns are not evenly spaced (grid_columns says None) the band takes the array code, with the same values,
    and asking for the loops is refused."""
    from qora.ssb import cpu_kernels

    names = ("C10", "C12a", "C12b", "thickness")
    v = {"C10": -75.0, "C12a": 6.0, "C12b": 2.0, "thickness": 50.0}
    on_grid = IncoherentBand(small, names, sections=3)
    monkeypatch.setattr(cpu_kernels, "grid_columns", lambda grid: None)
    off_grid = IncoherentBand(small, names, sections=3)
    assert (on_grid.transfers, off_grid.transfers) == ("loops", "arrays")
    sets = [v, {**v, "C10": -70.0}, {**v, "C10": -65.0}, {**v, "thickness": 20.0}]
    np.testing.assert_allclose(off_grid.evaluate_batch(sets), on_grid.evaluate_batch(sets), rtol=1e-12)
    with pytest.raises(ValueError, match="grid"):
        IncoherentBand(small, names, sections=3, transfers="loops")


def test_derivatives_are_exact(small):
    names = ("C10", "C12a", "C12b", "thickness")
    band = IncoherentBand(small, names, sections=3)
    v = {"C10": -75.0, "C12a": 6.0, "C12b": 2.0, "thickness": 50.0}
    f, grad, hess = band.evaluate(v)
    assert 0 < f <= 1
    np.testing.assert_allclose(hess, hess.T, rtol=1e-12)
    for i, name in enumerate(names):
        h = 1e-3
        up, down = band.evaluate({**v, name: v[name] + h}, order=1), band.evaluate({**v, name: v[name] - h}, order=1)
        assert grad[i] == pytest.approx((up[0] - down[0]) / (2 * h), rel=1e-5)  # measured ~1e-9
        np.testing.assert_allclose(hess[i], (up[1] - down[1]) / (2 * h), rtol=1e-5, atol=1e-6 * np.abs(hess).max())
    sets = [v, {**v, "thickness": 20.0}]
    np.testing.assert_allclose(band.evaluate_batch(sets), [band.evaluate(x, order=0) for x in sets], rtol=1e-12)
    small_blocks = IncoherentBand(small, names, sections=3, block_bytes=1, transfers="arrays")  # one Q a block
    np.testing.assert_allclose(small_blocks.evaluate(v)[2], hess, rtol=1e-10)
    for route in (small_blocks, band):  # the pass without second derivatives: the same value and gradient
        value, gradient = route.evaluate(v, order=1)
        assert value == pytest.approx(f, rel=1e-12)
        np.testing.assert_allclose(gradient, grad, rtol=1e-10, atol=1e-12 * np.abs(grad).max())
    assert small_blocks._transfers(v, slice(0, 5), 1).shape[1] == 1 + len(names)


def test_section_objects_reuse_the_last_evaluations_sums(small):
    """The objects at the values evaluated last come from that pass's sums, with no pass of their own; at other
    values they take one; either way they equal a fresh band's."""
    names = ("C10", "thickness")
    v = {"C10": -75.0, "thickness": 50.0}
    band, fresh = IncoherentBand(small, names, sections=3), IncoherentBand(small, names, sections=3)
    band.evaluate(v, order=0)
    before = dict(band.passes)
    np.testing.assert_allclose(band.section_objects(v), fresh.section_objects(v), rtol=1e-12)
    assert band.passes == before
    other = {**v, "C10": -70.0}
    np.testing.assert_allclose(band.section_objects(other), fresh.section_objects(other), rtol=1e-12)


@pytest.mark.parametrize("sections", [1, 3, 8])
def test_the_host_loops_equal_the_array_code(small, sections):
    """depth_loops (the host's default: the transfers made per pixel and summed, never stored) against the
    array code's transfers and products, every sum for parameter subsets; and the evaluations they give."""
    v = {"C10": -75.0, "C12a": 6.0, "C12b": 2.0, "thickness": 50.0}
    for names in (("C10", "C12a", "C12b", "thickness"), ("C10", "thickness"), ("C12b",)):
        arrays = IncoherentBand(small, names, sections=sections, transfers="arrays")
        loops = IncoherentBand(small, names, sections=sections)
        assert loops.transfers == "loops"
        np.testing.assert_array_equal(loops.eps, arrays.eps)  # the same pixels counted
        for order in (0, 2):
            want = arrays._products(arrays._transfers(v, slice(None), order), slice(None), order)
            for a, b in zip(want, loops._sums(v, order)):
                if a is None:
                    assert b is None
                    continue
                np.testing.assert_allclose(b, a, rtol=1e-10, atol=1e-12 * np.abs(a).max())
        f0, g0, h0 = arrays.evaluate(v)
        f1, g1, h1 = loops.evaluate(v)
        assert f1 == pytest.approx(f0, rel=1e-12)
        np.testing.assert_allclose(h1, h0, rtol=1e-9, atol=1e-12 * np.abs(h0).max())


def test_one_section_is_the_columnar_model_and_no_thickness_the_standard(small):
    v = {"C10": -75.0, "C12a": 6.0, "C12b": 2.0, "thickness": 50.0}
    one = IncoherentBand(small, ("C10", "C12a", "C12b", "thickness"), sections=1)
    columnar = Band(small, ("C10", "C12a", "C12b", "thickness", "tilt_y", "tilt_x"))
    assert one.evaluate(v, order=0) == pytest.approx(columnar.evaluate({**v, "tilt_y": 0.0, "tilt_x": 0.0}, order=0),
                                                     rel=1e-12)
    # t = 0: every section has the standard transfer, and the coupling leaves their common object free
    four = IncoherentBand(small, ("C10", "C12a", "C12b", "thickness"), sections=4)
    standard = Band(small, ("C10", "C12a", "C12b"))
    assert four.evaluate({**v, "thickness": 0.0}, order=0) == pytest.approx(standard.evaluate(v, order=0), rel=1e-9)
    # more sections explain at least as much (the columnar transfer is their mean), up to the coupling
    assert four.evaluate(v, order=0) >= one.evaluate(v, order=0) - 1e-9


def test_bad_options_are_refused(small):
    with pytest.raises(ValueError, match="tilt"):
        IncoherentBand(small, ("C10", "tilt_y"))
    with pytest.raises(ValueError, match="sections"):
        IncoherentBand(small, ("C10",), sections=0)
    with pytest.raises(ValueError, match="coupling"):
        IncoherentBand(small, ("C10",), coupling=0.0)
    with pytest.raises(TypeError, match="evaluate"):
        IncoherentBand(small, ("C10",)).moments({"C10": 0.0})
    from qora.ssb import fit

    with pytest.raises(InputError, match="depth_model"):
        fit(small, rotation=0.0, depth_model="layered")
    with pytest.raises(InputError, match="sections"):
        fit(small, rotation=0.0, sections=0)
    with pytest.raises(InputError, match="incoherent"):
        fit(small, rotation=0.0, sections=3, depth_model="columnar")


def test_sections_follow_the_depth_of_field():
    dof = depth_of_field(0.0196875, 25.0)
    assert dof == pytest.approx(31.5, rel=1e-3)  # lambda / alpha^2 at 300 kV, 25 mrad
    assert [auto_sections(t, 0.0196875, 25.0) for t in (0.0, 20.0, 31.0, 32.0, 120.0, 1e4)] == [1, 1, 1, 2, 4, 8]
    np.testing.assert_allclose(section_depths(120.0, 4), [-45.0, -15.0, 15.0, 45.0])


def test_incoherent_fit_of_the_simulators_amorphous_film(amorphous):
    """Issue 23: the columnar fit puts C10 of this film ~14 A towards a surface; the incoherent
    model, whose depth sections hold their own objects, finds the mid-plane's C10 within 2 A."""
    standard = Band(amorphous, ("C10",))
    c10, _ = defocus_search(standard)
    std, std_agreement, _ = newton(standard, {"C10": c10})
    columnar = Band(amorphous, ("C10", "thickness", "tilt_y", "tilt_x"))
    col, col_agreement, _ = newton(columnar, {**std, "thickness": 60.0, "tilt_y": 0.0, "tilt_x": 0.0}, iterations=60)
    assert abs(col["C10"] - C10) > 5.0  # measured -114.1 A: the bias this model removes
    values, agreement, _, band, coherence = fit_incoherent(amorphous, {"C10": col["C10"],
                                                                       "thickness": col["thickness"]})
    assert band.sections == 4  # 106 A of columnar thickness over lambda / alpha^2 = 31.5 A
    assert abs(values["C10"] - C10) < 2.0  # measured -101.4 A
    assert abs(values["thickness"] - THICKNESS) < 0.15 * THICKNESS  # measured 129 A
    assert agreement > col_agreement + 0.2  # measured 0.961 against 0.600 (standard 0.563)
    assert coherence < 0.5  # measured 0.24: the sections hold different objects


def test_the_staged_incoherent_fit_ends_where_the_whole_band_fit_does(amorphous):
    """fit_incoherent's thinned stages (an eighth of coarse_rows, then coarse_rows) and the last-step rule
    finish at the whole band's maximum: the values and the agreement of Newton on the whole band alone."""
    start = {"C10": -114.0, "thickness": 106.0}
    whole = fit_incoherent(amorphous, start, coarse_rows=10**9)
    staged = fit_incoherent(amorphous, start, coarse_rows=128)  # stages of every 20th and every 2nd frequency
    assert whole[3].shape[0] >= 256  # the band (321 frequencies) is large enough for both stages
    assert staged[1] == pytest.approx(whole[1], rel=1e-7)
    assert abs(staged[0]["C10"] - whole[0]["C10"]) < 0.05 and abs(staged[0]["thickness"] - whole[0]["thickness"]) < 0.5


def test_the_incoherent_curves_on_a_thinned_band_pass_through_the_printed_agreement(amorphous, monkeypatch):
    """Issue 38: `ssb fit --plot` took longer than the fit (a hundred solves per Q for the incoherent branch's
    curves). They are the thinned band's shape, scaled to the printed agreement: at the fit exactly that number,
    near the maximum (a thinned band's maximum moves by its own noise: up to two of the 9 points at a 2-fold
    thinning here), and within a few percent of the whole band's curve everywhere."""
    from qora.ssb import files
    from qora.ssb import fit as fit_session

    result = fit_session(amorphous, rotation=0.0, depth_model="incoherent", thick_starts=1)
    assert result["better"] == "incoherent"
    monkeypatch.setattr(files, "CURVE_ROWS_INCOHERENT", 80)  # this band's ~160 frequencies thinned 2-fold
    calls = []
    curves = files.agreement_curves(amorphous, result, progress=lambda *a: calls.append(a))
    steps = [c[1] for c in calls]  # the curves of one band are one batch: its start, then its end
    assert steps[0] == 0 and steps[-1] == len(curves) and steps == sorted(steps)
    whole = IncoherentBand(amorphous, tuple(curves), sections=result["incoherent"]["sections"], rotation=0.0)
    fixed = {n: result["incoherent"]["parameters"][n] for n in curves}
    for name, (xs, ys) in curves.items():
        centre = len(xs) // 2
        assert ys[centre] == pytest.approx(result["incoherent"]["agreement"], rel=1e-9), name
        assert abs(int(np.argmax(ys)) - centre) <= 2, name
        exact = [whole.evaluate({**fixed, name: float(x)}, order=0) for x in xs[::4]]
        np.testing.assert_allclose(ys[::4], exact, rtol=0.05, err_msg=name)


def test_columnar_slab_keeps_its_fit_and_shows_coherent_sections():
    """A tilted columnar slab (one layer in 12 slices, sheared by the tilt): the incoherent model
    finds C10 too, and its sections hold one object shifted, so "auto" keeps the columnar model."""
    layer = amorphous_slices((64, 64), PIXEL, atoms_per_a2=0.02, phase_per_atom=0.02, seed=6)[0]
    s, _ = _session(np.repeat(layer[None], 12, axis=0), tilt=(0.008, -0.005))
    values, agreement, _, band, coherence = fit_incoherent(s, {"C10": -99.5, "thickness": 122.0}, sections=3)
    assert abs(values["C10"] - C10) < 2.0  # measured -100.3 A
    assert abs(values["thickness"] - THICKNESS) < 0.15 * THICKNESS  # measured 121 A
    assert coherence > 0.8  # measured 0.98 (the amorphous film: 0.24)


def test_depth_sections_put_the_atoms_at_their_depth():
    """Atoms only in the entrance half of a 120 A film: the first section's image is theirs, and the
    exit half's sections hold little."""
    slices = amorphous_slices((64, 64), PIXEL, slices=8, atoms_per_a2=0.03, seed=5)
    slices[4:] = 0.0
    s, scan = _session(slices)
    images = depth_sections(s, {"C10": C10, "thickness": THICKNESS}, sections=4)
    assert images.shape == (4,) + s.scan_shape
    first = scan_truth(scan.__class__(**{**scan.__dict__, "phase": slices[:2].sum(0)}))
    assert np.corrcoef(images[0].ravel(), first.ravel())[0, 1] > 0.8  # measured 0.93
    power = images.std(axis=(1, 2))
    assert power[2:].max() < 0.5 * power[:2].min()  # measured 0.0036 against 0.0088 rad
    whole = scan_truth(scan)
    assert np.corrcoef(images.sum(0).ravel(), whole.ravel())[0, 1] > 0.8


def test_depth_coherence_of_one_object_and_of_independent_ones(small):
    band = IncoherentBand(small, ("C10",), sections=3)
    rng = np.random.default_rng(0)
    nq = band.G.shape[0]
    x = rng.normal(size=(nq, 1)) + 1j * rng.normal(size=(nq, 1))
    assert depth_coherence(band, np.repeat(x, 3, 1)) == pytest.approx(1.0, abs=1e-9)
    independent = rng.normal(size=(nq, 3)) + 1j * rng.normal(size=(nq, 3))
    assert depth_coherence(band, independent) < 0.5
    assert depth_coherence(band, x) == 1.0


def test_depth_coherence_equals_the_cross_correlation_peak_by_direct_sums(small):
    """The batched transform's peaks against each neighbouring pair's cross-correlation summed directly over the
    band's frequencies at every shift of the 4x finer grid (a second method)."""
    band = IncoherentBand(small, ("C10",), sections=3)
    rng = np.random.default_rng(1)
    nq = band.G.shape[0]
    shifted = rng.normal(size=(nq, 1)) + 1j * rng.normal(size=(nq, 1))
    x = np.concatenate([shifted, shifted * 0.7, rng.normal(size=(nq, 1)) + 1j * rng.normal(size=(nq, 1))], axis=1)
    sy, sx = band.scan_shape
    iy, ix = np.nonzero(band.keep)
    qy = np.where(iy > sy // 2, iy - sy, iy) / (4 * sy)  # cycles per fine pixel
    qx = ix / (4 * sx)
    ry, rx = np.meshgrid(np.arange(4 * sy), np.arange(4 * sx), indexing="ij")
    peaks = []
    for k in range(2):
        c = np.conj(x[:, k]) * x[:, k + 1]
        phase = np.exp(2j * np.pi * (qy[:, None] * ry.ravel() + qx[:, None] * rx.ravel()))
        cc = np.real(c @ phase)
        peaks.append(cc.max() / np.sqrt(np.sum(np.abs(x[:, k]) ** 2) * np.sum(np.abs(x[:, k + 1]) ** 2)))
    assert depth_coherence(band, x) == pytest.approx(np.mean(peaks), rel=1e-10)


def test_the_depth_model_rule():
    from qora.ssb.fitting import _choose_depth_model

    out = {"better": "thick"}
    _choose_depth_model(out, "auto", 0.56, 0.60, 0.96, 0.22)
    assert out["depth_model"]["chosen"] == "incoherent" and out["better"] == "incoherent"
    out = {"better": "thick"}
    _choose_depth_model(out, "auto", 0.75, 0.974, 0.975, 0.85)
    assert out["depth_model"]["chosen"] == "columnar" and out["better"] == "thick"
    out = {"better": "thick"}
    _choose_depth_model(out, "incoherent", 0.75, 0.974, 0.975, 0.85)
    assert out["depth_model"]["chosen"] == "incoherent" and out["better"] == "incoherent"


def test_incoherent_fit_of_an_independent_abtem_film():
    """abTEM's multislice (tests/ssb/fixtures/make_abtem_thick.py: 120 A of random carbon sliced every
    2 A, propagation between slices, 25 mrad, C10 -100 A at the mid-plane, 24 x 24 scan): the
    incoherent fit finds the mid-plane's C10 within 2 A and no astigmatism."""
    from pathlib import Path

    with np.load(Path(__file__).parent / "fixtures" / "abtem_thick_film.npz") as f:
        fx = {k: f[k] for k in f.files}
    assert fx["data"].shape == (24, 24, 32, 32) and str(fx["abtem_version"]).startswith("1.")
    s = Session(fx["data"].astype(np.float64), kv=float(fx["kv"]), alpha_mrad=float(fx["alpha_mrad"]),
                scan_step=float(fx["scan_step"]))
    names = ("C10", "C12a", "C12b")
    columnar = Band(s, names + ("thickness", "tilt_y", "tilt_x"))
    c10, _ = defocus_search(Band(s, ("C10",)))
    col, col_agreement, _ = newton(columnar, {"C10": c10, "C12a": 0.0, "C12b": 0.0, "thickness": 60.0, "tilt_y": 0.0,
                                              "tilt_x": 0.0}, iterations=60)
    values, agreement, _, band, coherence = fit_incoherent(s, {**{n: col[n] for n in names},
                                                               "thickness": col["thickness"]})
    assert band.sections == 4  # 107 A of columnar thickness over 31.5 A
    assert abs(values["C10"] - float(fx["C10"])) < 2.0  # measured -99.3 A (columnar -101.8, standard -107.7)
    assert np.hypot(values["C12a"], values["C12b"]) < 0.5  # measured 0.05 A (columnar 0.9 A)
    assert abs(values["thickness"] - 120.0) < 0.15 * 120.0  # measured 126 A
    assert agreement > col_agreement + 0.2  # measured 0.972 against 0.591
    assert coherence < 0.5  # measured 0.26


# -- the array code as CuPy sees it (qora.testing's emulated device) ----------------------------------------------


def _on_the_device(band):
    """The band's arrays moved onto the emulated device (what Band does for a session holding G there)."""
    to = DeviceArray
    band.xp = DeviceXp()
    band.G, band.ky, band.kx = to(band.G), to(band.ky), to(band.kx)
    band._q_scan = tuple(to(q) for q in band._q_scan)
    band._geometry_for = None
    band._set_rotation(band.rotation)  # the scan frequencies, and later the geometry, made on the device
    if band._whole_geometry is not None:
        band._whole_geometry = False
    geometry = band._geometry(slice(0, 4))
    assert isinstance(geometry[0]["a"], DeviceArray) and isinstance(geometry[1]["depth"], DeviceArray)
    band.eps, band._empty, band._centring = to(band.eps), to(band._empty), to(band._centring)
    return band


def test_the_incoherent_band_keeps_to_array_code_cupy_runs(small, monkeypatch):
    """IncoherentBand's evaluation on an emulated device array (NumPy behind CuPy's rules: no NumPy-only call, no
    implicit conversion) gives the host's numbers: what tests/ssb/test_ssb_depth_cuda.py checks on a GPU."""
    from qora.ssb import model, optics

    xp_of = model.xp_of  # the helpers' own choice of module: the device's for a device array, as with CuPy
    for module in (model, optics):
        monkeypatch.setattr(module, "xp_of",
                            lambda *a: DeviceXp() if any(isinstance(x, DeviceArray) for x in a) else xp_of(*a))
    names = ("C10", "C12a", "C12b", "thickness")
    v = {"C10": -75.0, "C12a": 6.0, "C12b": 2.0, "thickness": 50.0}
    host = IncoherentBand(small, names, sections=3)
    device = _on_the_device(IncoherentBand(small, names, sections=3, block_bytes=1 << 16, transfers="arrays"))
    with pytest.raises(TypeError):
        np.asarray(device.G)  # the emulation refuses what CuPy refuses
    f0, g0, h0 = host.evaluate(v)
    f1, g1, h1 = device.evaluate(v)
    assert f1 == pytest.approx(f0, rel=1e-12)
    np.testing.assert_allclose(g1, g0, rtol=1e-10, atol=1e-12 * np.abs(g0).max())
    np.testing.assert_allclose(h1, h0, rtol=1e-10, atol=1e-12 * np.abs(h0).max())
    sets = [v, {**v, "thickness": 20.0}]
    np.testing.assert_allclose(device.evaluate_batch(sets), host.evaluate_batch(sets), rtol=1e-12)
    x = device.section_objects(v)
    assert isinstance(x, DeviceArray)
    np.testing.assert_allclose(x.get(), host.section_objects(v), rtol=1e-10, atol=1e-12)
    assert depth_coherence(device, x) == pytest.approx(depth_coherence(host, host.section_objects(v)), rel=1e-12)


# -- the blocked evaluation and its memory model (issue 23: the full-scale fit ran out of the H200's memory) ----------


def test_blocked_evaluation_equals_the_unblocked_one(small):
    """One Q per block, the geometry made per block, against one block with the band's geometry kept whole."""
    names = ("C10", "C12a", "C12b", "thickness")
    v = {"C10": -75.0, "C12a": 6.0, "C12b": 2.0, "thickness": 50.0}
    whole = IncoherentBand(small, names, sections=4, block_bytes=1 << 40, transfers="arrays")
    tiny = IncoherentBand(small, names, sections=4, block_bytes=1, transfers="arrays")
    assert whole.block == whole.shape[0] and whole._whole_geometry is not None
    assert tiny.block == 1 and tiny._whole_geometry is None  # the geometry did not fit: made per block
    f0, g0, h0 = whole.evaluate(v)
    f1, g1, h1 = tiny.evaluate(v)
    assert f1 == pytest.approx(f0, rel=1e-10)
    np.testing.assert_allclose(g1, g0, rtol=1e-10, atol=1e-10 * np.abs(g0).max())
    np.testing.assert_allclose(h1, h0, rtol=1e-10, atol=1e-10 * np.abs(h0).max())
    np.testing.assert_allclose(tiny.section_objects(v), whole.section_objects(v), rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(tiny.eps, whole.eps, rtol=1e-12)


def test_the_memory_model_bounds_what_a_block_allocates(small):
    """bytes_per_row times the block is an upper bound of the host allocations of an evaluation with
    derivatives (traced by tracemalloc, which sees NumPy's buffers), and no array of the band's (Q, k)
    size is held: the peak stays below what the band's geometry alone would take."""
    import tracemalloc

    from qora.ssb.depth import bytes_per_row, sums_bytes

    names = ("C10", "C12a", "C12b", "thickness")
    v = {"C10": -75.0, "C12a": 6.0, "C12b": 2.0, "thickness": 50.0}
    nbf = IncoherentBand(small, names, sections=1, transfers="arrays").shape[1]
    for sections, rows in ((3, 1), (5, 2)):
        budget = rows * bytes_per_row(nbf, sections, 4, 3)
        band = IncoherentBand(small, names, sections=sections, block_bytes=budget, transfers="arrays")
        assert band.block == rows and band._whole_geometry is None
        band.evaluate(v)
        tracemalloc.start()
        try:
            band.evaluate(v)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        # the block's budget, and the band's per-Q sums (a few kB a frequency) joined after the blocks
        bound = budget + band.shape[0] * sums_bytes(sections, 4)
        assert peak <= bound and budget < band._geometry_bytes, (sections, rows, peak, bound)  # measured 0.73
