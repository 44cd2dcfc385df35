"""The beam propagation model: weak-object limit, derivatives, discretisation and inversion."""

from dataclasses import replace

import numpy as np
import pytest
from click.testing import CliRunner

from qora import holo
from qora.io.errors import InputError
from qora.holo import phantoms as P
from qora.holo import reference as R
from qora.holo.bpm import (bpm_forward, bpm_gradient, bpm_jvp, bpm_reconstruct, bpm_tables, bpm_vjp,
                           upsample_fields)
from qora.holo.geometry import Geometry, cone_illuminations


def _geometry(n: int, nas=(0.8,), per_cone: int = 6) -> Geometry:
    """Normal incidence and ``per_cone`` illuminations on each cone of NA ``nas``, on the grid's bins."""
    df = 1.0 / (n * R.PIXEL)
    ill = np.concatenate([np.zeros((1, 2))] + [cone_illuminations(na, R.WAVELENGTH, per_cone, include_normal=False)
                                               for na in nas])
    return Geometry(R.WAVELENGTH, R.MEDIUM_INDEX, R.PIXEL, n, R.NA_DETECTION, illuminations=np.round(ill / df) * df)


def _contrast(spheres, n: int, pixel: float = R.PIXEL, supersample: int = 3):
    return P.render_spheres(spheres, n, pixel, R.MEDIUM_INDEX, supersample=supersample).astype(np.float64) \
        - R.MEDIUM_INDEX


def _rel(a, b):
    """Relative L2 per illumination, of a against b."""
    return np.linalg.norm(a - b, axis=(1, 2)) / np.linalg.norm(b, axis=(1, 2))


def test_tables():
    g = _geometry(32, nas=(0.9,))
    t = bpm_tables(g, 20)
    assert t.propagator.shape == t.last.shape == t.obliquity.shape == (g.count, 32, 32) and t.n_z == 20
    assert t.propagator[:, 0, 0] == pytest.approx(np.ones(g.count)) and t.last[:, 0, 0] == pytest.approx(1.0)
    km = g.medium_frequency
    np.testing.assert_allclose(t.obliquity[:, 0, 0], km / g.nu_z_in())  # 1 / cos(theta_in) at mu = 0
    assert t.obliquity.max() == pytest.approx(R.MEDIUM_INDEX / np.sqrt(R.MEDIUM_INDEX**2 - R.NA_DETECTION**2))
    assert np.all(bpm_tables(g, 20, obliquity=False).obliquity == 1)
    # the rotation geometry: the one table of normal incidence, shared by every angle
    rot = bpm_tables(Geometry(R.WAVELENGTH, R.MEDIUM_INDEX, R.PIXEL, 32, R.NA_DETECTION, angles=np.zeros(3)))
    assert rot.count == 1 and rot.propagator[0, 0, 0] == pytest.approx(1.0)


def test_weak_object_is_first_born_with_obliquity():
    """u / u_in - 1 of a voxelised weak sphere against the analytic first Born of the continuous sphere
    (``phantoms.born_ratio``, an independent code) at NA 0, 0.44, 0.78 and 0.89."""
    n = 48
    g = _geometry(n, nas=(0.4, 0.8, 0.9), per_cone=4)
    sphere = P.Sphere(radius=1.5, index=R.MEDIUM_INDEX + 1e-4)
    x = _contrast([sphere], n)
    born = P.born_ratio([sphere], g)
    with_q = _rel(bpm_forward(x, g) - 1, born)
    without_q = _rel(bpm_forward(x, g, bpm_tables(g, n, obliquity=False)) - 1, born)
    na = np.hypot(*g.illuminations.T) * R.WAVELENGTH
    assert with_q.max() < 0.04  # measured 0.58-0.61%
    assert without_q[na > 0.85].min() > 0.10  # measured 26.6% at NA 0.89 (20% at 0.78, 3.2% at normal incidence)


def test_adjoint_identity_in_float32():
    g = replace(R.geometry(32), illuminations=R.geometry(32).illuminations[::8])
    x = _contrast([P.Sphere(radius=1.0, index=1.36)], 32, supersample=2)[4:28].astype(np.float32)
    rng = np.random.default_rng(0)
    h = rng.standard_normal(x.shape).astype(np.float32)
    r = (rng.standard_normal((g.count, 32, 32)) + 1j * rng.standard_normal((g.count, 32, 32))).astype(np.complex64)
    tables = bpm_tables(g, x.shape[0])
    jh = bpm_jvp(x, h, g, tables)
    jtr = bpm_vjp(x, r, g, tables)
    assert jh.dtype == np.complex64 and jtr.dtype == np.float32
    lhs = np.vdot(r.astype(np.complex128), jh.astype(np.complex128)).real
    rhs = np.dot(h.ravel().astype(np.float64), jtr.ravel().astype(np.float64))
    assert abs(lhs - rhs) / abs(lhs) < 1e-5  # measured 1.2e-8
    # the gradient of f is J^T r / A for the data that leave the residual r
    data = bpm_forward(x.astype(np.float64), g, tables) - r
    grad, loss = bpm_gradient(x.astype(np.float64), data, g, tables, return_loss=True)
    np.testing.assert_allclose(grad * g.count, bpm_vjp(x.astype(np.float64), r, g, tables), rtol=1e-9, atol=1e-9)
    assert loss == pytest.approx(np.vdot(r, r).real / (2 * g.count), rel=1e-6)


def test_jvp_against_central_differences():
    g = replace(R.geometry(32), illuminations=R.geometry(32).illuminations[::8])
    x = _contrast([P.Sphere(radius=1.0, index=1.38)], 32, supersample=2)[4:28]
    h = np.random.default_rng(1).standard_normal(x.shape) * 0.01
    tables = bpm_tables(g, x.shape[0])
    eps = 1e-3
    fd = (bpm_forward(x + eps * h, g, tables) - bpm_forward(x - eps * h, g, tables)) / (2 * eps)
    jh = bpm_jvp(x, h, g, tables)
    assert np.linalg.norm(fd - jh) / np.linalg.norm(jh) < 1e-3  # measured 2.5e-9


def _downsample(ratio, m: int):
    """Band-limited field ratios resampled to m x m on the same field of view (spectral crop)."""
    big = ratio.shape[-1]
    spec = np.fft.fftshift(np.fft.fft2(np.fft.ifftshift(ratio, axes=(-2, -1))), axes=(-2, -1))
    lo = big // 2 - m // 2
    spec = spec[..., lo:lo + m, lo:lo + m]
    return np.fft.fftshift(np.fft.ifft2(np.fft.ifftshift(spec, axes=(-2, -1))), axes=(-2, -1)) * (m / big) ** 2


def test_several_spheres_agree_with_a_grid_twice_as_fine():
    n = 48
    g = _geometry(n)
    fine = replace(g, pixel=g.pixel / 2, n=2 * n)
    spheres = [P.Sphere((0, 0, 0), 1.0, 1.37), P.Sphere((0.8, 1.0, -1.2), 0.6, 1.36),
               P.Sphere((-0.9, -1.1, 0.9), 0.5, 1.38)]
    coarse = bpm_forward(_contrast(spheres, n, supersample=4), g)
    y_fine = bpm_forward(_contrast(spheres, 2 * n, fine.pixel, supersample=4), fine)
    on_coarse = _downsample(y_fine, n)
    np.testing.assert_allclose(upsample_fields(on_coarse, 2 * n), y_fine, atol=1e-12)  # pupil-limited: no loss
    assert np.abs(np.angle(on_coarse)).max() > 1.0  # not a weak object
    assert _rel(coarse - 1, on_coarse - 1).max() < 0.05  # measured 0.69-0.77%


@pytest.mark.slow
def test_inversion_of_exact_bead_data_improves_on_rytov():
    """Exact partial-wave data of a 3 um bead of n = 1.40 in water, reference geometry at n = 64, 49 angles."""
    g = R.geometry(64)
    sphere = P.Sphere(radius=1.5, index=1.40)
    data = 1 + P.partial_wave_ratio(sphere, g)
    truth = P.render_spheres([sphere], g.n, g.pixel, g.medium_index, supersample=3)
    start = holo.reconstruct(data, g, method="gp", iterations=20, r2c=True).index
    seen = []
    result = bpm_reconstruct(data, g, iterations=20, progress=lambda *a: seen.append(a[1]))
    rmse = lambda v: float(np.sqrt(np.mean((v - truth) ** 2)))  # noqa: E731
    assert seen == list(range(1, 21)) and result.method == "bpm" and result.index.shape == (64, 64, 64)
    assert result.info["loss"][-1] < 0.05 * result.info["loss"][0]
    assert rmse(result.index) < 0.6 * rmse(start)  # measured 2.75e-3 against 5.27e-3 (-48%)


def test_batches_and_stopping():
    g = _geometry(32, per_cone=4)
    sphere = P.Sphere(radius=0.8, index=1.36)
    x = _contrast([sphere], 32)
    data = bpm_forward(x, g)
    calls = []
    res = bpm_reconstruct(data, g, start=np.zeros_like(x), iterations=10, batch=2,
                          progress=lambda s, d, t, m: calls.append(d) or d < 4)
    assert calls == [1, 2, 3, 4] and res.iterations == 4
    res = bpm_reconstruct(data, g, start=np.zeros_like(x), iterations=15, tv_weight=1e-4)
    assert res.info["loss"][-1] < 0.1 * res.info["loss"][0] and res.index.min() >= R.MEDIUM_INDEX - 1e-6


def test_the_api_takes_bpm_options_or_keywords_alike():
    from qora.holo import BpmOptions
    from qora.holo.options import OptionError

    g = _geometry(32, per_cone=4)
    x = _contrast([P.Sphere(radius=0.8, index=1.36)], 32)
    data = bpm_forward(x, g)
    start = np.zeros_like(x)
    options = BpmOptions(iterations=4, batch=2)
    by_options = holo.bpm_reconstruct(data, g, options, start=start, backend="cpu")
    by_keywords = holo.bpm_reconstruct(data, g, start=start, iterations=4, batch=2, backend="cpu")
    direct = bpm_reconstruct(data, g, start, 4, batch=2)  # the CPU solver itself
    np.testing.assert_array_equal(by_options.index, by_keywords.index)
    np.testing.assert_array_equal(by_options.index, direct.index)
    assert by_options.info["options"] == options.to_dict() and by_options.info["options"]["batch"] == 2
    with pytest.raises(OptionError, match=r"\['chunk'\] apply to the CUDA backend only"):
        holo.bpm_reconstruct(data, g, start=start, iterations=1, chunk=2, backend="cpu")
    with pytest.raises(OptionError, match=r"unknown BPM options \['iteration'\]"):
        holo.bpm_reconstruct(data, g, start=start, iteration=1, backend="cpu")
    with pytest.raises(InputError, match="options must be a BpmOptions"):
        holo.bpm_reconstruct(data, g, start)
    with pytest.raises(InputError, match="step must be positive"):
        BpmOptions(step=0.0)


def test_cli_bpm_simulate_and_reconstruct(tmp_path):
    from qora.cli import cli
    from qora.holo.files import read_volume

    runner = CliRunner()
    path = tmp_path / "b.h5"
    out = runner.invoke(cli, ["holo", "simulate", "--size", "32", "--angles", "6", "--model", "bpm",
                              "--spheres", "0,0,0,0.8,1.36", "--out", str(path)])
    assert out.exit_code == 0, out.output
    out = runner.invoke(cli, ["holo", "reconstruct", str(path), "--method", "bpm", "--iterations", "5",
                              "--out", str(tmp_path / "v.h5"), "--quiet"])
    assert out.exit_code == 0, out.output
    index, g, attrs = read_volume(tmp_path / "v.h5")
    assert index.shape == (32, 32, 32) and attrs["method"] == "bpm"
    assert float(out.output.split("RMSE against the simulated truth ")[1].split()[0]) < 5e-3
    rot = tmp_path / "r.h5"
    out = runner.invoke(cli, ["holo", "simulate", "--size", "32", "--angles", "4", "--geometry", "rotation",
                              "--spheres", "0,0,0,0.8,1.36", "--out", str(rot)])
    assert out.exit_code == 0, out.output
    # the rotation geometry: simulated by the BPM too, and inverted by it (tests/holo/test_holo_bpm_rotation.py)
    out = runner.invoke(cli, ["holo", "simulate", "--size", "16", "--angles", "4", "--geometry", "rotation",
                              "--model", "bpm", "--spheres", "0,0,0.3,0.5,1.36", "--out", str(tmp_path / "y.h5")])
    assert out.exit_code == 0, out.output
    out = runner.invoke(cli, ["holo", "reconstruct", str(tmp_path / "y.h5"), "--method", "bpm", "--iterations", "2",
                              "--out", str(tmp_path / "x.h5"), "--quiet"])
    assert out.exit_code == 0, out.output
    index, g, attrs = read_volume(tmp_path / "x.h5")
    assert index.shape == (16, 16, 16) and g.geometry == "rotation" and attrs["method"] == "bpm"


def test_chunked_reverse_pass_changes_nothing(monkeypatch):
    import qora.holo.bpm as B

    g = _geometry(32, per_cone=4)
    x = _contrast([P.Sphere(radius=0.8, index=1.37)], 32)
    data = 1 + 0.01 * np.random.default_rng(2).standard_normal((g.count, 32, 32))
    whole = bpm_gradient(x, data, g)
    monkeypatch.setattr(B, "CHUNK_BYTES", 2 * 32**3 * 16)  # two illuminations per chunk
    np.testing.assert_allclose(bpm_gradient(x, data, g), whole, rtol=1e-12, atol=1e-12 * np.abs(whole).max())


def test_a_pupil_as_wide_as_the_medium_is_accepted():
    """NA = n_m (FDTD sets record fields to grazing angles) used to divide by zero in the obliquity's cap."""
    from qora.holo.plans import OBLIQUITY_EDGE, bpm_tables

    g = Geometry(wavelength=0.65, medium_index=1.333, pixel=0.1, n=16, na_detection=1.333, angles=np.zeros(1))
    t = bpm_tables(g, 8)
    assert np.all(np.isfinite(t.obliquity)) and t.obliquity.max() == pytest.approx(1 / np.sqrt(1 - OBLIQUITY_EDGE**2))
    w = np.asarray(bpm_forward(np.full((8, 16, 16), 0.01), g))
    assert np.all(np.isfinite(w))
